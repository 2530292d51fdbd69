/* A server's shape: a process running as root forks a worker that gives up
 * root before it serves (nginx's workers become www-data, sshd's become
 * sshd), then ends; the parent waits for it and ends.
 *
 * Usage: drop_root CALL [killed], CALL one of setuid, seteuid, setreuid,
 * setresuid: how the worker becomes nobody (uid 65534; the group is left
 * alone). With "killed" the worker waits after its allocations instead of
 * freeing them and ending (300 ms, then until killed), and the parent kills
 * it with SIGKILL (its trace is never finished). Without root, prints "no root" and exits 0.
 *
 * Known figures. Worker: 1,000 bytes allocated before the change, 2,000
 * after, both freed (2 allocations, 2 frees, 3,000 bytes, nothing live).
 * Parent: 500 bytes allocated before the fork and freed after the wait.
 * Output: "worker uid 65534" then "done" ("worker killed" then "done" with
 * "killed"). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "out.h"

static int become_nobody(const char *call) {
    uid_t nobody = 65534;
    if (strcmp(call, "setuid") == 0)
        return setuid(nobody);
    if (strcmp(call, "seteuid") == 0)
        return seteuid(nobody);
    if (strcmp(call, "setreuid") == 0)
        return setreuid(nobody, nobody);
    if (strcmp(call, "setresuid") == 0)
        return setresuid(nobody, nobody, nobody);
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    if (geteuid() != 0) {
        out_str("no root\n");
        return 0;
    }
    int killed = argc > 2 && strcmp(argv[2], "killed") == 0;
    int ready[2];
    if (pipe(ready) != 0)
        return 3;
    char *volatile mine = malloc(500);
    pid_t pid = fork();
    if (pid < 0)
        return 3;
    if (pid == 0) {
        char *volatile before = malloc(1000);
        if (become_nobody(argv[1]) != 0)
            _exit(4);
        char *volatile after = malloc(2000);
        if (killed) {
            /* Past the writer's periodic flush (~100 ms), as killed.c. */
            struct timespec pause_for = {0, 300 * 1000 * 1000};
            nanosleep(&pause_for, NULL);
            char c = 1;
            if (write(ready[1], &c, 1) != 1)
                _exit(5);
            for (;;)
                pause();
        }
        free(before);
        free(after);
        out_str("worker uid ");
        out_u64(geteuid());
        out_str("\n");
        exit(0);
    }
    int status = 0;
    if (killed) {
        char c;
        if (read(ready[0], &c, 1) != 1 || kill(pid, SIGKILL) != 0)
            return 6;
        if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status))
            return 7;
        out_str("worker killed\n");
    } else if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
               WEXITSTATUS(status) != 0) {
        return 5;
    }
    free(mine);
    out_str("done\n");
    return 0;
}
