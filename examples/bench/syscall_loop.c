/* Syscall-heavy benchmark workload.
 *
 * Usage: syscall_loop [ROUNDS]   (default 200000)
 *
 * Each round writes 64 bytes into a pipe and reads them back, then writes 64
 * bytes to a temporary file and reads 64 bytes from it with pread: four small
 * system calls through their libc wrappers (write, read, write, pread64), so
 * 4 * ROUNDS calls in all, plus a handful of set-up calls. No allocation
 * happens in the loop.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
    close(fd);
    printf("%ld bytes read in %ld rounds\n", total, rounds);
    return 0;
}
