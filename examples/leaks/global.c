/* Blocks still reachable at exit: pointed to from a global and from a
 * static struct, never freed. Not leaks for LeakSanitizer or valgrind's
 * default error kinds.
 *
 * Build: gcc -g -O0 -o global global.c
 * Reading the code: config (a global pointer, .bss) holds a 200-byte block;
 * table.rows (a static struct, .data) holds a 32-byte block, which itself
 * holds a pointer to an 8-byte block (reachable through a reachable block).
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./global      (valgrind 3.19, glibc 2.36):
 *   definitely lost: 0 bytes in 0 blocks
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 0 bytes in 0 blocks
 *   still reachable: 240 bytes in 3 blocks   (200 + 32 + 8)
 *   total heap usage: 3 allocs, 0 frees, 240 bytes allocated */
#include <stdlib.h>
#include "../out.h"

char *config;
static struct {
    int n;
    void **rows;
} table = {1, 0};

int main(void) {
    config = malloc(200);
    config[0] = 'x';
    table.rows = calloc(1, 32);
    table.rows[0] = malloc(8);
    out_str("global: done\n");
    return 0;
}
