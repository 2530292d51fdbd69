/* A process that chroots into an empty directory before it exits, as
 * privilege-separated daemons do: /proc and the trace's directory are out
 * of its reach at exit, and the exit scan must still find its roots (the
 * mappings are read through a descriptor kept since start-up) and the
 * trace must still be finished.
 *
 * Needs root (CAP_SYS_CHROOT); without it, prints "no chroot" and exits 3.
 * Keeps a 40-byte block in a global (still reachable), loses a 77-byte one
 * (definitely lost). Expected classes: definitely lost 77 bytes in 1
 * block, still reachable 40 bytes in 1 block.
 * Usage: chroot DIR (an empty directory, created when missing).
 * Output: "done". */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../out.h"

void *volatile kept;

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    kept = malloc(40);
    void *volatile lost = malloc(77);
    lost = NULL;
    mkdir(argv[1], 0700);
    if (chroot(argv[1]) != 0 || chdir("/") != 0) {
        out_str("no chroot\n");
        return 3;
    }
    out_str("done\n");
    return lost == kept;
}
