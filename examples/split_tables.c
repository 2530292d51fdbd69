/* A program whose unwind tables lie in a segment apart from its code.
 *
 * Linked as the tests link it (`-Wl,--section-start=.rodata=0x1000000`),
 * its read-only data, and with them `.eh_frame_hdr` and `.eh_frame`, sit
 * 16 MiB above its code, as node's binary has them (its code, a page of
 * stubs, then its read-only data): glibc's `_dl_find_object` then gives
 * the range of the code's segment alone, which the tables lie beyond.
 *
 * Built without frame pointers, it makes 1,000 allocations of 16 to 79
 * bytes (16 + i % 64) from leaf(), called by middle(), called by main(),
 * and frees each at once:
 *   allocation calls 1,000, frees 1,000, bytes allocated 47,020, nothing live.
 */
#include <stdlib.h>
#include "out.h"

__attribute__((noinline)) static void *leaf(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *middle(size_t n)
{
    void *p = leaf(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    for (int i = 0; i < 1000; i++)
        free(middle(16 + (size_t)(i % 64)));
    out_str("done\n");
    return 0;
}
