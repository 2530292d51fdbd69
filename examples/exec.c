/* exec: allocate, then replace the process image with another program
 * (argv[1], e.g. the leak example).
 *
 * Expected figures of this image (up to the execv):
 *   malloc 512 (never freed: the exec discards it), malloc 256 + free.
 *   allocation calls 2, frees 1, bytes allocated 768,
 *   live at the exec 512 bytes in 1 block.
 * The exec'd program (same pid) then has its own figures, and its own trace
 * file; its output follows "exec: about to exec". If execv fails, exit 127. */
#include <stdlib.h>
#include <unistd.h>
#include "out.h"

void *volatile keep;

int main(int argc, char **argv) {
    if (argc < 2) {
        out_str("usage: exec PROGRAM\n");
        return 2;
    }
    keep = malloc(512);
    char *b = malloc(256);
    free(b);
    out_str("exec: about to exec\n");
    char *args[] = {argv[1], NULL};
    execv(argv[1], args);
    out_str("exec: execv failed\n");
    return 127;
}
