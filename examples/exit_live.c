/* _exit with live blocks: no atexit handlers, no destructors run.
 *
 * Usage: exit_live [quick|syscall]: the process ends with _exit(3), with
 * quick_exit(3) (C11: the at_quick_exit handlers run, then glibc's own
 * _exit, not the exported one), or with syscall(SYS_exit_group, 3).
 *
 * Expected figures (every way):
 *   malloc 700 (live), calloc(3, 100) = 300 (live), malloc 50 + free.
 *   allocation calls 3, frees 1, bytes allocated 1050,
 *   live at exit 1000 bytes in 2 blocks. Exit status 3. */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "out.h"

void *volatile keep[2];

int main(int argc, char **argv) {
    keep[0] = malloc(700);
    keep[1] = calloc(3, 100);
    char *c = malloc(50);
    free(c);
    if (argc > 1 && strcmp(argv[1], "quick") == 0) {
        out_str("exit_live: calling quick_exit(3)\n");
        quick_exit(3);
    }
    if (argc > 1 && strcmp(argv[1], "syscall") == 0) {
        out_str("exit_live: calling syscall(SYS_exit_group, 3)\n");
        syscall(SYS_exit_group, 3);
    }
    out_str("exit_live: calling _exit(3)\n");
    _exit(3);
}
