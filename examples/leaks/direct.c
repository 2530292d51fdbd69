/* A direct (definite) leak: two blocks whose only pointers are lost.
 *
 * Build: gcc -g -O0 -o direct direct.c
 * Reading the code: make_leak() allocates 100 bytes and forgets the pointer
 * (line 23, the malloc call); make_small_leak() allocates 28 bytes (line 28)
 * and loses it too; main frees its one 64-byte block.
 * Nothing else is allocated (output goes through write(2), see ../out.h).
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./direct      (valgrind 3.19, glibc 2.36):
 *   definitely lost: 128 bytes in 2 blocks   (100 at make_leak direct.c:23,
 *                                             28 at make_small_leak direct.c:28)
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 0 bytes in 0 blocks
 *   still reachable: 0 bytes in 0 blocks
 *   total heap usage: 3 allocs, 1 frees, 192 bytes allocated */
#include <stdlib.h>
#include "../out.h"

void *volatile sink;

__attribute__((noinline)) void make_leak(void) {
    sink = malloc(100);
    sink = 0;
}

__attribute__((noinline)) void make_small_leak(void) {
    sink = malloc(28);
    sink = 0;
}

int main(void) {
    void *tmp = malloc(64);
    free(tmp);
    make_leak();
    make_small_leak();
    out_str("direct: done\n");
    return 0;
}
