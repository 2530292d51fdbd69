/* A program that uses every descriptor its limit allows before it exits:
 * no /proc file can be opened at exit, and the exit scan must still find
 * its roots (the mappings are read through the descriptor kept since
 * start-up).
 *
 * RLIMIT_NOFILE's soft limit becomes 32, then /dev/null is opened until
 * the call fails. Keeps a 40-byte block in a global (still reachable),
 * loses a 77-byte one (definitely lost). Expected classes (valgrind
 * agrees): definitely lost 77 bytes in 1 block, still reachable 40 bytes
 * in 1 block. Output: "done". */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include "../out.h"

void *volatile kept;

int main(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return 2;
    r.rlim_cur = 32;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0)
        return 2;
    kept = malloc(40);
    void *volatile lost = malloc(77);
    lost = NULL;
    while (open("/dev/null", O_RDONLY) >= 0)
        ;
    out_str("done\n");
    return lost == kept;
}
