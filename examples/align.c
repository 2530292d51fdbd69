/* Every aligned-allocation function valgrind supports, a failing
 * posix_memalign and a failing malloc (pvalloc has its own example, pvalloc.c,
 * because valgrind 3.19 aborts the program on pvalloc).
 *
 * Expected figures:
 *   posix_memalign(&a, 64, 100)   alloc 100
 *   aligned_alloc(256, 512)       alloc 512
 *   memalign(32, 40)              alloc 40
 *   valloc(100)                   alloc 100   (page aligned; stays live)
 *   posix_memalign(&f, 3, 10)     EINVAL (3 is not a power of two): nothing
 *   malloc(1 << 62)               NULL (ENOMEM): nothing
 *   a, b, c freed.
 *   allocation calls 4, frees 3, bytes allocated 752,
 *   live at exit 100 bytes in 1 block. valgrind 3.19 agrees (it counts
 *   neither failure). Every alignment is checked and printed. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include "out.h"

void *volatile keep;

static unsigned long aligned(void *p, uintptr_t to) {
    return p != NULL && ((uintptr_t)p % to) == 0;
}

int main(void) {
    void *a = NULL, *f = NULL;
    int rc = posix_memalign(&a, 64, 100);
    out_kv("posix_memalign_rc", (unsigned long long)rc);
    out_kv("posix_memalign_aligned", aligned(a, 64));
    void *b = aligned_alloc(256, 512);
    out_kv("aligned_alloc_aligned", aligned(b, 256));
    void *c = memalign(32, 40);
    out_kv("memalign_aligned", aligned(c, 32));
    void *d = valloc(100);
    out_kv("valloc_aligned", aligned(d, 4096));
    rc = posix_memalign(&f, 3, 10);
    out_kv("posix_memalign_bad_rc", (unsigned long long)rc);
    out_kv("posix_memalign_bad_untouched", f == NULL);
    void *huge = malloc((size_t)1 << 62);
    out_kv("malloc_huge_null", huge == NULL);
    free(a);
    free(b);
    free(c);
    keep = d;
    return 0;
}
