/* A block reachable only through a pointer into its middle: "possibly lost".
 *
 * Build: gcc -g -O0 -o interior interior.c
 * Reading the code: a 64-byte zeroed block is allocated and the only pointer
 * kept (a global) points 16 bytes into it. Offset 16 and zero contents keep
 * valgrind's interior-pointer heuristics (length64 and newarray look at
 * offset 8, stdstring at 24, multipleinheritance wants vtable-like words)
 * from calling it reachable.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./interior    (valgrind 3.19, glibc 2.36):
 *   definitely lost: 0 bytes in 0 blocks
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 64 bytes in 1 blocks
 *   still reachable: 0 bytes in 0 blocks
 *   total heap usage: 1 allocs, 0 frees, 64 bytes allocated */
#include <stdlib.h>
#include "../out.h"

char *cursor;
void *volatile sink;

__attribute__((noinline)) void make_cursor(void) {
    char *block = calloc(1, 64);
    cursor = block + 16;
    sink = block;
    sink = 0;
    block = 0;
}

int main(void) {
    make_cursor();
    out_str("interior: done\n");
    return 0;
}
