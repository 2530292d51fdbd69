/* The lane's hand-over: the main thread records alone, then a second thread
 * starts recording while the main one goes on, and frees blocks the main
 * thread allocated (so glibc hands their addresses back to either thread).
 *
 * Phase 1 (main alone): 4,096 blocks of 48 bytes into a shared array.
 * Phase 2 (both at once): a helper thread frees the 4,096 blocks as they
 * come, then makes 100,000 malloc/free pairs of 32 + (i % 64) bytes; main,
 * meanwhile, makes 100,000 pairs of 16 + (i % 100) bytes, and refills the
 * array with 4,096 new blocks of 64 bytes, which the helper also frees.
 *
 * Expected figures of the program's own calls:
 *   allocation calls 2 * 4,096 + 200,000 = 208,192, frees as many,
 *   bytes allocated 4,096 * 48 + 4,096 * 64 + sum(32 + i % 64)
 *     + sum(16 + i % 100) over i < 100,000 = 13,358,240,
 *   live at exit 0 bytes in 0 blocks.
 * Plus glibc's one DTV calloc for the helper thread (see threads.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "out.h"

#define BLOCKS 4096
#define PAIRS 100000

static _Atomic(void *) shared[2][BLOCKS];

/* PAIRS malloc/free pairs of base + (i % spread) bytes. */
static void pairs(unsigned long base, unsigned long spread)
{
    for (unsigned long i = 0; i < PAIRS; i++) {
        volatile char *p = malloc(base + i % spread);
        if (!p)
            abort();
        p[0] = (char)i;
        free((void *)p);
    }
}

static void *helper(void *arg)
{
    (void)arg;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < BLOCKS; i++) {
            void *p;
            while (!(p = atomic_exchange(&shared[round][i], NULL)))
                ;
            free(p);
        }
        if (round == 0)
            pairs(32, 64);
    }
    return NULL;
}

int main(void)
{
    for (int i = 0; i < BLOCKS; i++)
        atomic_store(&shared[0][i], malloc(48));
    pthread_t t;
    if (pthread_create(&t, NULL, helper, NULL) != 0)
        return 1;
    pairs(16, 100);
    for (int i = 0; i < BLOCKS; i++)
        atomic_store(&shared[1][i], malloc(64));
    pthread_join(t, NULL);
    out_str("handed over\n");
    return 0;
}
