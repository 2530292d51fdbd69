/* A process that detaches with daemon(3), watched by its parent.
 *
 * Build: gcc -g -O0 -o daemon daemon.c
 * Three processes: the watcher (main) forks a child and reads a pipe until
 * every writer closed it; the child allocates and loses 100 bytes, then
 * calls daemon(1, 0): glibc forks again and the child leaves through its
 * own `_exit(0)`, which no `_exit` symbol lookup sees; the daemon (the
 * grandchild, stdio on /dev/null) allocates and loses 20 bytes, writes one
 * line to the pipe and exits. The watcher prints the child's status, then
 * the daemon's line.
 *
 * Untraced output:
 *   daemon: child exited with 0
 *   daemon: running in the background, cwd kept
 * Per process: watcher 0 allocations; child 1 allocation of 100 bytes,
 * definitely lost; daemon 1 of 20 bytes, definitely lost (the child's
 * block, inherited, is in the child's trace).
 *
 * Traced, the child's trace was left empty with its spool: glibc's daemon
 * ends the parent side with its internal `_exit`. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "out.h"

void *volatile sink;

int main(void) {
    int p[2];
    if (pipe(p) != 0)
        return 1;
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        close(p[0]);
        sink = malloc(100);
        sink = 0;
        char before[4096];
        if (!getcwd(before, sizeof before))
            _exit(2);
        if (daemon(1, 0) != 0)
            _exit(3);
        sink = malloc(20);
        sink = 0;
        char after[4096];
        const char *line = getcwd(after, sizeof after) && strcmp(before, after) == 0
                               ? "daemon: running in the background, cwd kept\n"
                               : "daemon: cwd changed\n";
        if (write(p[1], line, strlen(line)) < 0)
            return 4;
        return 0;
    }
    close(p[1]);
    int status = 0;
    if (waitpid(child, &status, 0) != child)
        return 1;
    out_str("daemon: child exited with ");
    out_u64(WIFEXITED(status) ? (unsigned long long)WEXITSTATUS(status) : 999);
    out_str("\n");
    char buf[256];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0)
        if (write(1, buf, (size_t)n) < 0)
            return 1;
    return 0;
}
