/* A program that defines malloc, free, calloc and realloc itself (here
 * thin wrappers over glibc's __libc_* functions; in real programs a
 * statically linked allocator). The executable comes first in the loader's
 * search order, before any LD_PRELOAD library, so its definitions win for
 * every caller. libtracer points the libraries' imports of them to itself
 * (see examples/own_alloc/), but the program's own direct calls, the only
 * ones here, never reach it.
 *
 * Build: gcc -g -O0 -o own_malloc own_malloc.c
 * Output: "own_malloc: 100 rounds", status 0.
 *
 * Traced, the trace held 0 allocations and nothing said why; libtracer now
 * says so in one line on stderr. */
#include <stddef.h>
#include "out.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }

void *volatile sink;

int main(void) {
    for (int i = 0; i < 100; i++) {
        sink = malloc(10);
        free(sink);
    }
    out_str("own_malloc: 100 rounds\n");
    return 0;
}
