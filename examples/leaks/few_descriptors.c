/* A program that lowers its own descriptor limit after start-up, below the
 * numbers where the tracer keeps its descriptors (1024 and up): the exit
 * scan must still read /proc/self/maps and its roots.
 *
 * Usage: few_descriptors [exhaust]. RLIMIT_NOFILE's soft limit becomes 16;
 * with "exhaust", /dev/null is then opened until the call fails, so that no
 * /proc file can be opened at exit at all (the mappings come through the
 * descriptor the tracer kept since start-up). A block of 40 bytes is kept
 * in a global (reachable), one of 77 bytes is lost (definitely lost); 1,000
 * blocks are allocated and freed before. Expected classes, both ways
 * (valgrind agrees): definitely lost 77 bytes in 1 block, still reachable
 * 40 bytes in 1 block.
 * Output: "done". */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "../out.h"

void *volatile kept;

int main(int argc, char **argv) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return 2;
    r.rlim_cur = 16;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0)
        return 2;
    for (int i = 0; i < 1000; i++) {
        void *volatile p = malloc(48);
        free(p);
    }
    kept = malloc(40);
    void *volatile lost = malloc(77);
    lost = NULL;
    if (argc > 1 && strcmp(argv[1], "exhaust") == 0)
        while (open("/dev/null", O_RDONLY) >= 0)
            ;
    out_str("done\n");
    return lost == kept;
}
