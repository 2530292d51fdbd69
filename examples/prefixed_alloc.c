/* An allocator the program calls by names of its own, as a Rust program
 * with a #[global_allocator] over jemalloc (`_rjem_malloc`, ...) or
 * mimalloc (`mi_malloc`, ...) does: linked into the executable, its calls
 * never go through the C library's malloc, and no preloaded library can
 * see them.
 *
 * Here `mi_malloc`/`mi_free` carve 64-byte blocks out of a static arena.
 * main makes 100 blocks that way and one with malloc (freed).
 *
 * Expected: the trace holds the one malloc'd block only (1 allocation of
 * 24 bytes, 1 free); `tracer run` says the program calls mimalloc by its
 * own names, so the 100 others are not traced. */
#include <stddef.h>
#include <stdlib.h>
#include "out.h"

static unsigned char arena[100 * 64];
static size_t used;

void *mi_malloc(size_t n) {
    if (n > 64 || used + 64 > sizeof arena)
        return NULL;
    void *p = arena + used;
    used += 64;
    return p;
}

void mi_free(void *p) {
    (void)p;
}

void *volatile keep;

int main(void) {
    int made = 0;
    for (int i = 0; i < 100; i++) {
        keep = mi_malloc(48);
        made += keep != NULL;
    }
    void *p = malloc(24);
    keep = p;
    free(p);
    out_str("prefixed_alloc: ");
    out_u64((unsigned long long)made);
    out_str(" blocks from mi_malloc\n");
    return 0;
}
