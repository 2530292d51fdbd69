/* A million distinct stacks: the stress case for stack interning.
 *
 * Usage: many_stacks [ALLOCS]   (default 1048576 = 2^20)
 *
 * Allocation number i is made at the bottom of a 20-deep chain whose level n
 * (1..20) is one of two functions picked by bit n-1 of i, so the first 2^20
 * allocations come from 2^20 distinct stacks (then the paths repeat). Every block
 * of 16 + (i % 32) * 8 bytes is freed at once; nothing the program allocates is
 * live at exit.
 *
 * Known figures: ALLOCS allocation calls and ALLOCS frees from the loop,
 * min(ALLOCS, 2^20) distinct allocation stacks from it.
 */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

NOINLINE static unsigned long leaf(unsigned long i)
{
    size_t size = 16 + (i % 32) * 8;
    char *p = malloc(size);
    if (!p)
        abort();
    p[0] = (char)i;
    unsigned long v = (unsigned char)p[0];
    free(p);
    return v;
}

/* Level n: bit (n-1) of i picks a or b. */
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
FORK(20, leaf)
FORK(19, level20)
FORK(18, level19)
FORK(17, level18)
FORK(16, level17)
FORK(15, level16)
FORK(14, level15)
FORK(13, level14)
FORK(12, level13)
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

int main(int argc, char **argv)
{
    unsigned long allocs = argc > 1 ? strtoul(argv[1], NULL, 10) : 1048576;
    unsigned long acc = 0;
    for (unsigned long i = 0; i < allocs; i++)
        acc += level1(i);
    sink = acc;
    printf("%lu allocations\n", allocs);
    return 0;
}
