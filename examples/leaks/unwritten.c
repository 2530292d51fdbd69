/* A large private mapping written only on its last page, which holds the
 * only pointer to one block; another block is pointed to by nothing. The
 * exit scan must find the pointer without reading the 64 MiB the program
 * never wrote (the kernel's page tables say which pages were).
 *
 * Build: gcc -g -O0 -o unwritten unwritten.c
 * Reading the code: the 100-byte block (line 35) is reachable through the
 * mapping's last page; make_leak's 200 bytes (line 24) are lost.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./unwritten     (valgrind 3.19, glibc 2.36):
 *   definitely lost: 200 bytes in 1 blocks
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 0 bytes in 0 blocks
 *   still reachable: 100 bytes in 1 blocks
 *   total heap usage: 2 allocs, 0 frees, 300 bytes allocated */
#include <stdlib.h>
#include <sys/mman.h>
#include "../out.h"

void *volatile sink;

__attribute__((noinline)) void make_leak(void) {
    sink = malloc(200);
    sink = 0;
}

int main(void) {
    size_t len = (size_t)64 << 20;
    char *big = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (big == MAP_FAILED)
        return 2;
    /* No huge page: one would make the untouched pages around it present. */
    madvise(big, len, MADV_NOHUGEPAGE);
    *(void *volatile *)(big + len - 64) = malloc(100);
    make_leak();
    out_str("unwritten: done\n");
    return 0;
}
