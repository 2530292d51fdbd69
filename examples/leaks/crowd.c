/* Every class of leak among thousands of live blocks: at exit libtracer
 * writes the trace while its scan runs (1,024 live blocks or more), and the
 * classes must be those it gives when it does one after the other.
 *
 * Build: gcc -g -O0 -o crowd crowd.c
 * Reading the code:
 *   - keep[]: 3,000 blocks of 16 + (i % 7) * 8 bytes, pointed to from a
 *     global array: still reachable, 3,000 * 16 + 8 * (0+1+..+6) * 428
 *     + 8 * (0+1+2+3) (i = 2996..2999 add i % 7 = 0..3) = 48,000 + 71,904
 *     + 48 = 119,952 bytes;
 *   - a chain of 2,000 nodes of 32 bytes whose head pointer is lost: the
 *     head definitely lost (32 bytes), the 1,999 others indirectly lost
 *     (63,968 bytes);
 *   - 10 blocks of 100 bytes lost outright: definitely lost (1,000 bytes);
 *   - 5 blocks of 64 bytes pointed to only 8 bytes into them, from a global
 *     array: possibly lost (320 bytes).
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./crowd      (valgrind 3.19, glibc 2.36):
 *   definitely lost: 1,032 bytes in 11 blocks
 *   indirectly lost: 63,968 bytes in 1,999 blocks
 *     possibly lost: 320 bytes in 5 blocks
 *   still reachable: 119,952 bytes in 3,000 blocks
 * Nothing else is allocated (output goes through write(2), see ../out.h). */
#include <stdlib.h>
#include "../out.h"

#define KEEP 3000
#define CHAIN 2000

struct node {
    struct node *next;
    char pad[24];
};

void *volatile sink;
static void *keep[KEEP];
static char *inner[5];

__attribute__((noinline)) void lose_chain(void) {
    struct node *head = 0;
    for (int i = 0; i < CHAIN; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = head;
        head = n;
    }
    sink = head;
    sink = 0;
    head = 0;
}

__attribute__((noinline)) void lose(void) {
    sink = malloc(100);
    sink = 0;
}

int main(void) {
    for (int i = 0; i < KEEP; i++)
        keep[i] = malloc(16 + (i % 7) * 8);
    lose_chain();
    for (int i = 0; i < 10; i++)
        lose();
    for (int i = 0; i < 5; i++)
        inner[i] = (char *)malloc(64) + 8;
    out_str("crowd: done\n");
    return 0;
}
