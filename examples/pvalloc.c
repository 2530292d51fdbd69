/* pvalloc: page-aligned blocks.
 *
 * Sizes are counted as the caller asked for them, as for every other function
 * (malloc(100) counts 100 even though its block has 104 usable bytes). For
 * pvalloc the block is larger than asked: the glibc manual says the size is
 * rounded up to whole pages, and glibc 2.36 actually asks memalign(4096,
 * n + 4095 with bits 1..11 cleared), e.g. 4097 bytes for pvalloc(100) and 1 byte
 * for pvalloc(0) (malloc_usable_size: 4104 and 24) — an implementation detail
 * the trace does not depend on.
 *
 * Expected figures:
 *   pvalloc(100)   alloc 100 (stays live)
 *   pvalloc(5000)  alloc 5000, then freed
 *   pvalloc(0)     alloc 0 (a real, unique block, like malloc(0)), then freed
 *   allocation calls 3, frees 2, bytes allocated 5100,
 *   live at exit 100 bytes in 1 block.
 * No valgrind cross-check: valgrind 3.19 aborts the program on pvalloc
 * ("Program aborting because of call to pvalloc"), and heaptrack 1.4 does not
 * intercept pvalloc at all. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include "out.h"

void *volatile keep;

int main(void) {
    void *a = pvalloc(100);
    void *b = pvalloc(5000);
    void *c = pvalloc(0);
    out_kv("aligned", a && b && c && (uintptr_t)a % 4096 == 0 && (uintptr_t)b % 4096 == 0 &&
                          (uintptr_t)c % 4096 == 0);
    out_kv("usable_b_at_least_5000", malloc_usable_size(b) >= 5000);
    free(b);
    free(c);
    keep = a;
    return 0;
}
