/* Syscall-heavy benchmark workload.
 *
 * Usage: syscall_loop [ROUNDS [times]]   (default 200000)
 *
 * Each round writes 64 bytes into a pipe and reads them back, then writes 64
 * bytes to a temporary file and reads 64 bytes from it with pread: four small
 * system calls through their libc wrappers (write, read, write, pread64), so
 * 4 * ROUNDS calls in all, plus a handful of set-up calls. No allocation
 * happens in the loop.
 *
 * With "times" as the second argument, the loop's wall time and the calling
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID: not counting a tracer's other
 * threads, and little disturbed by other processes on a loaded machine) are
 * printed on stderr, in nanoseconds per call.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
    int p[2];
    if (pipe(p) != 0)
        return 1;
    char path[] = "/tmp/syscall_loop_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    unlink(path);
    char buf[64] = {0};
    long total = 0;
    int times = argc > 2 && strcmp(argv[2], "times") == 0;
    double wall0 = now(CLOCK_MONOTONIC), cpu0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < rounds; i++) {
        buf[0] = (char)i;
        if (write(p[1], buf, sizeof buf) != (ssize_t)sizeof buf)
            return 2;
        total += read(p[0], buf, sizeof buf);
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            return 3;
        total += pread(fd, buf, sizeof buf, (off_t)(i % 1024) * 64);
        if (i % 1024 == 1023)
            lseek(fd, 0, SEEK_SET);
    }
    if (times) {
        double calls = 4.0 * rounds;
        fprintf(stderr, "wall %.1f ns/call, thread cpu %.1f ns/call\n",
                (now(CLOCK_MONOTONIC) - wall0) / calls, (now(CLOCK_THREAD_CPUTIME_ID) - cpu0) / calls);
    }
    close(fd);
    printf("%ld bytes read in %ld rounds\n", total, rounds);
    return 0;
}
