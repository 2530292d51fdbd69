/* A program built with AddressSanitizer, whose runtime must come first
 * among the process's libraries (it ends the process at start otherwise:
 * "ASan runtime does not come first in initial library list").
 *
 * Build: gcc -O0 -g -fsanitize=address -o sanitized sanitized.c
 * Allocates and frees 10 blocks (ASan's allocator: nothing for libtracer to
 * see), prints "sanitized: ran" and exits 0. Run under a traced parent
 * (a shell), or by `tracer run`, it must run as it does untraced. */
#include <stdlib.h>
#include "out.h"

int main(void)
{
    void *blocks[10];
    for (int i = 0; i < 10; i++)
        blocks[i] = malloc(16 * (i + 1));
    for (int i = 0; i < 10; i++)
        free(blocks[i]);
    out_str("sanitized: ran\n");
    return 0;
}
