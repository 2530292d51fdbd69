/* The library of examples/own_alloc/main.c: each round makes 8 allocations
 * through its imports of the allocation functions and libc's (strdup):
 * malloc 100, calloc 3 x 50, realloc to 300 (a free and an allocation),
 * posix_memalign 200, aligned_alloc 64, memalign 128, valloc 10, strdup 11;
 * and frees them all. 963 bytes and 8 frees per round.
 *
 * `lib_leak` leaves three blocks live at exit: 64 bytes still reachable
 * from a global, a 48-byte block nothing points to (definitely lost) and
 * the 24-byte block only that one points to (indirectly lost). */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

long lib_work(int rounds)
{
    long sum = 0;
    for (int i = 0; i < rounds; i++) {
        char *a = malloc(100);
        char *b = calloc(3, 50);
        a[0] = (char)i;
        a = realloc(a, 300);
        void *c = NULL;
        if (posix_memalign(&c, 64, 200) != 0)
            return -1;
        void *d = aligned_alloc(32, 64);
        void *e = memalign(128, 128);
        void *f = valloc(10);
        char *g = strdup("0123456789");
        sum += a[0] + b[149] + (long)strlen(g) + (((unsigned long)c | (unsigned long)d | (unsigned long)e) & 15)
            + ((unsigned long)f & 4095);
        free(a);
        free(b);
        free(c);
        free(d);
        free(e);
        free(f);
        free(g);
    }
    return sum;
}

struct holder {
    char *held;
    long pad[5];
};

static void *kept;

void lib_leak(void)
{
    kept = malloc(64);
    struct holder *lost = malloc(sizeof *lost);
    memset(lost, 0, sizeof *lost);
    lost->held = calloc(1, 24);
}
