/* abort (SIGABRT) after allocations.
 *
 * Expected figures:
 *   malloc 123 + free, malloc 456 (live), then abort().
 *   allocation calls 2, frees 1, bytes allocated 579,
 *   live at exit 456 bytes in 1 block. The process dies of SIGABRT. */
#include <stdlib.h>
#include "out.h"

void *volatile keep;

int main(void) {
    char *a = malloc(123);
    keep = malloc(456);
    free(a);
    out_str("abort: calling abort()\n");
    abort();
}
