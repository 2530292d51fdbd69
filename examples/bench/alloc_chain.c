/* Allocation-heavy benchmark workload.
 *
 * Usage: alloc_chain [PAIRS [THREADS]]   (defaults: 1000000 pairs, 1 thread)
 *
 * Every thread performs PAIRS/THREADS malloc/free pairs, each made at the bottom of
 * a 20-deep call chain. Twelve of the twenty levels pick one of two functions from
 * a bit of the iteration number, so the allocations come from 4,096 distinct
 * stacks. Sizes cycle through 16..520 bytes. Each block is written to and freed
 * right away, so the heap stays small and the cost measured is the allocator's
 * and the tracer's, not the memory system's.
 *
 * Known figures: PAIRS allocation calls, PAIRS frees, nothing live at exit
 * (besides what the C runtime itself allocates), sum of sizes =
 * sum over i < PAIRS/THREADS of (16 + (i % 64) * 8), per thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

NOINLINE static unsigned long leaf(unsigned long i)
{
    size_t size = 16 + (i % 64) * 8;
    char *p = malloc(size);
    if (!p)
        abort();
    p[0] = (char)i;
    p[size - 1] = (char)(i >> 8);
    unsigned long v = (unsigned char)p[0] + (unsigned char)p[size - 1];
    free(p);
    return v;
}

/* Plain levels 13..20 (8 levels): one function each. */
#define PLAIN(n, next)                                                        \
    NOINLINE static unsigned long plain##n(unsigned long i)                   \
    {                                                                         \
        unsigned long r = next(i);                                            \
        sink = r;                                                             \
        return r + 1;                                                         \
    }
PLAIN(20, leaf)
PLAIN(19, plain20)
PLAIN(18, plain19)
PLAIN(17, plain18)
PLAIN(16, plain17)
PLAIN(15, plain16)
PLAIN(14, plain15)
PLAIN(13, plain14)

/* Forked levels 1..12: bit (n-1) of i picks a or b, giving 2^12 stacks. */
#define FORK(n, next)                                                         \
    NOINLINE static unsigned long fork##n##a(unsigned long i)                 \
    {                                                                         \
        unsigned long r = next(i);                                            \
        sink = r;                                                             \
        return r + 2;                                                         \
    }                                                                         \
    NOINLINE static unsigned long fork##n##b(unsigned long i)                 \
    {                                                                         \
        unsigned long r = next(i);                                            \
        sink = r;                                                             \
        return r + 3;                                                         \
    }                                                                         \
    NOINLINE static unsigned long level##n(unsigned long i)                   \
    {                                                                         \
        return ((i >> (n - 1)) & 1) ? fork##n##b(i) : fork##n##a(i);          \
    }
FORK(12, plain13)
FORK(11, level12)
FORK(10, level11)
FORK(9, level10)
FORK(8, level9)
FORK(7, level8)
FORK(6, level7)
FORK(5, level6)
FORK(4, level5)
FORK(3, level4)
FORK(2, level3)
FORK(1, level2)

static unsigned long per_thread;

static void *worker(void *arg)
{
    (void)arg;
    unsigned long acc = 0;
    for (unsigned long i = 0; i < per_thread; i++)
        acc += level1(i);
    sink = acc;
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long pairs = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1 || threads > 64)
        threads = 1;
    per_thread = pairs / (unsigned long)threads;
    if (threads == 1) {
        worker(NULL);
    } else {
        pthread_t t[64];
        for (int k = 0; k < threads; k++)
            pthread_create(&t[k], NULL, worker, NULL);
        for (int k = 0; k < threads; k++)
            pthread_join(t[k], NULL);
    }
    printf("%lu pairs in %d thread(s)\n", per_thread * (unsigned long)threads, threads);
    return 0;
}
