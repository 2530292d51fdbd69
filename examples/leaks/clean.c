/* No leak: every block is freed before exit.
 *
 * Build: gcc -g -O0 -o clean clean.c
 * Reading the code: 10 blocks of 16, 32, ..., 160 bytes (880 bytes), a
 * realloc of the first to 1000 bytes, then everything freed.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./clean       (valgrind 3.19, glibc 2.36):
 *   All heap blocks were freed -- no leaks are possible
 *   total heap usage: 11 allocs, 11 frees, 1,880 bytes allocated */
#include <stdlib.h>
#include "../out.h"

int main(void) {
    void *blocks[10];
    for (int i = 0; i < 10; i++)
        blocks[i] = malloc(16 * (size_t)(i + 1));
    blocks[0] = realloc(blocks[0], 1000);
    for (int i = 0; i < 10; i++)
        free(blocks[i]);
    out_str("clean: done\n");
    return 0;
}
