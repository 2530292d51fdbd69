/* _exit with live blocks: no atexit handlers, no destructors run.
 *
 * Expected figures:
 *   malloc 700 (live), calloc(3, 100) = 300 (live), malloc 50 + free.
 *   allocation calls 3, frees 1, bytes allocated 1050,
 *   live at exit 1000 bytes in 2 blocks. Exit status 3. */
#include <stdlib.h>
#include <unistd.h>
#include "out.h"

void *volatile keep[2];

int main(void) {
    keep[0] = malloc(700);
    keep[1] = calloc(3, 100);
    char *c = malloc(50);
    free(c);
    out_str("exit_live: calling _exit(3)\n");
    _exit(3);
}
