/* exec: allocate, then replace the process image with another program
 * (argv[1], e.g. the leak example).
 *
 * Expected figures of this image (up to the execv):
 *   malloc 512 (never freed: the exec discards it), malloc 256 + free.
 *   allocation calls 2, frees 1, bytes allocated 768,
 *   live at the exec 512 bytes in 1 block.
 * The exec'd program (same pid) then has its own figures, and its own trace
 * file; its output follows "exec: about to exec". If execv fails, exit 127.
 *
 * With a second argument the new program gets an environment of its own,
 * without LD_PRELOAD (as `env -i` and many test harnesses give it):
 *   exec PROGRAM empty   execve with an empty environment (same figures);
 *   exec PROGRAM spawn   posix_spawn with only PATH set, then wait for it
 *                        and print "exec: child exited with N" (this image
 *                        then exits 0, its figures the same as above). */
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    if (argc > 2 && strcmp(argv[2], "empty") == 0) {
        char *none[] = {NULL};
        execve(argv[1], args, none);
    } else if (argc > 2 && strcmp(argv[2], "spawn") == 0) {
        char *path_only[] = {"PATH=/usr/bin:/bin", NULL};
        pid_t pid;
        int status = 0;
        if (posix_spawn(&pid, argv[1], NULL, NULL, args, path_only) != 0 ||
            waitpid(pid, &status, 0) != pid)
            return 127;
        out_str("exec: child exited with ");
        out_u64(WIFEXITED(status) ? (unsigned long long)WEXITSTATUS(status) : 999);
        out_str("\n");
        return 0;
    } else {
        execv(argv[1], args);
    }
    out_str("exec: execv failed\n");
    return 127;
}
