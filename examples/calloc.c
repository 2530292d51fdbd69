/* calloc: zeroed blocks, size = count * element size; an overflowing product
 * fails (ENOMEM) and records nothing.
 *
 * Expected figures:
 *   allocation calls 3: calloc(10, 8) = 80 bytes, calloc(1, 1) = 1,
 *   calloc(25, 40) = 1000; the calloc(SIZE_MAX/2, 4) overflows and fails.
 *   frees 2 (the 80 and the 1000), bytes allocated 1081,
 *   live at exit 1 byte in 1 block. Output shows every byte was zero. */
#include <stdint.h>
#include <stdlib.h>
#include "out.h"

void *volatile keep;

int main(void) {
    unsigned char *a = calloc(10, 8);
    unsigned char *b = calloc(1, 1);
    unsigned char *c = calloc(25, 40);
    size_t volatile huge = SIZE_MAX / 2; /* volatile: no compile-time warning */
    void *bad = calloc(huge, 4);
    unsigned long nonzero = 0;
    for (int i = 0; i < 80; i++)
        nonzero += a[i] != 0;
    for (int i = 0; i < 1000; i++)
        nonzero += c[i] != 0;
    nonzero += b[0] != 0;
    out_kv("nonzero", nonzero);
    out_kv("overflow_null", bad == NULL);
    free(a);
    free(c);
    keep = b;
    return 0;
}
