/* raw_clone: a child process made by the clone system call itself, not by
 * fork(), so that no fork handler runs in it (container runtimes, sandboxes
 * and zygotes do this). The child has a copy of the parent's memory but none
 * of its other threads: a tracer whose writer thread is gone must not make
 * the child wait for it.
 *
 * Usage: raw_clone MODE [N]
 *   allocs    the child makes N malloc/free pairs (default 200000), then _exit
 *   exit      the child makes N pairs (default 10), then exit(): its exit
 *             handlers run, in a process that is not the traced one
 *   syscalls  the child makes N write(2) calls to /dev/null (default
 *             200000), then _exit
 *
 * The parent: malloc(1000) before the clone, kept until the child ended,
 * then freed. Expected figures of the parent: allocation calls 1, frees 1,
 * bytes allocated 1000, nothing live at exit (and valgrind's figures of
 * the parent are the same).
 *
 * Output: the child writes "child: done", then the parent "parent: child
 * exited 0". A child still running after 20 seconds is killed and the
 * parent writes "parent: child hung" and exits 1. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "out.h"

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "allocs";
    long n = argc > 2 ? atol(argv[2]) : (strcmp(mode, "exit") == 0 ? 10 : 200000);
    char *keep = malloc(1000);
    keep[0] = 1;
    /* x86_64's argument order: flags, stack, parent tid, child tid, tls. A
     * null stack: the child runs on its copy of ours, as after fork(). */
    long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) {
        out_str("parent: clone failed\n");
        return 2;
    }
    if (pid == 0) {
        if (strcmp(mode, "syscalls") == 0) {
            int fd = open("/dev/null", O_WRONLY);
            for (long i = 0; i < n; i++)
                if (write(fd, "x", 1) != 1)
                    _exit(3);
        } else {
            for (long i = 0; i < n; i++) {
                char *volatile p = malloc(32 + i % 64);
                p[0] = 1;
                free(p);
            }
        }
        out_str("child: done\n");
        if (strcmp(mode, "exit") == 0)
            exit(0);
        _exit(0);
    }
    int status = 0;
    for (int waited_ms = 0;; waited_ms += 10) {
        if (waitpid((pid_t)pid, &status, WNOHANG) == pid)
            break;
        if (waited_ms >= 20000) {
            kill((pid_t)pid, SIGKILL);
            waitpid((pid_t)pid, &status, 0);
            out_str("parent: child hung\n");
            return 1;
        }
        struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
    }
    out_str("parent: child exited ");
    out_u64(WIFEXITED(status) ? (unsigned long long)WEXITSTATUS(status) : 128);
    out_str("\n");
    free(keep);
    return 0;
}
