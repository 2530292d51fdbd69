/* Direct leak: two blocks never freed, one freed, free(NULL) ignored.
 *
 * Expected figures (derived from the code below):
 *   allocation calls 3 (malloc 100, 200, 300), frees 1 (the 200),
 *   bytes allocated 600, live at exit 400 bytes in 2 blocks.
 *   free(NULL) is not a free: it releases nothing (valgrind does not count it
 *   either). Output: "leak: done\n", exit status 0. */
#include <stdlib.h>
#include "out.h"

void *volatile keep[2];

int main(void) {
    keep[0] = malloc(100);
    char *b = malloc(200);
    b[0] = 1;
    free(b);
    keep[1] = malloc(300);
    free(NULL);
    keep[0] = 0; /* lose the pointers: a definite leak for valgrind */
    keep[1] = 0;
    out_str("leak: done\n");
    return 0;
}
