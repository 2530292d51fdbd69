/* The checking entry points of glibc's _FORTIFY_SOURCE, called the way a
 * fortified build calls them (gcc -O2 -D_FORTIFY_SOURCE=2 turns read() into
 * __read_chk() where it knows the buffer's size, open() with non-constant
 * flags into __open_2(), ...). Called by name here so the example means the
 * same at any optimization level.
 *
 * Between the markers access("/tracer-fortified-begin") and
 * access("/tracer-fortified-end") (both fail with ENOENT), in order:
 *   __open_2("in.txt", O_RDONLY)                    = 3   openat(AT_FDCWD, ...)
 *   __read_chk(3, buf, 5, 64)                       = 5   read(3, "01234", 5)
 *   __pread_chk(3, buf, 4, 2, 64)                   = 4   pread64(3, "2345", 4, 2)
 *   __pread64_chk(3, buf, 4, 6, 64)                 = 4   pread64(3, "6789", 4, 6)
 *   __openat_2(AT_FDCWD, "in.txt", O_RDONLY|O_CLOEXEC) = 4  openat
 *   __open64_2("missing.txt", O_RDONLY)             = -1 ENOENT  openat
 *   __openat64_2(AT_FDCWD, "in.txt", O_RDONLY)      = 5   openat
 *   __poll_chk({fd 3, POLLIN}, 1, 0, 8)             = 1   poll
 *   __ppoll_chk({fd 3, POLLIN}, 1, {0, 0}, NULL, 8) = 1   ppoll
 *   write(7, "ping", 4)                             = 4   (socketpair made fds 6, 7 before)
 *   __recv_chk(6, buf, 4, 64, 0)                    = 4   recvfrom(6, "ping", 4, 0, NULL, NULL)
 *   write(7, "pong", 4)                             = 4
 *   __recvfrom_chk(6, buf, 4, 64, 0, NULL, NULL)    = 4   recvfrom
 * Before the markers: in.txt is written ("0123456789") with plain calls, and
 * the socketpair is made while fds 3-5 are held by dup(2), so it gets 6 and 7
 * and the opens above get 3, 4 and 5 (exit status 2 if not).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* glibc's exported checking functions (declared by its headers only under
 * _FORTIFY_SOURCE, under other names). */
extern ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
extern ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
extern ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
extern int __open_2(const char *path, int flags);
extern int __open64_2(const char *path, int flags);
extern int __openat_2(int dirfd, const char *path, int flags);
extern int __openat64_2(int dirfd, const char *path, int flags);
extern ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
extern ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                              struct sockaddr *addr, socklen_t *alen);
extern int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
extern int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
                       const sigset_t *mask, size_t fdslen);

int main(void)
{
    char buf[64];
    int sv[2];
    int out = open("in.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || write(out, "0123456789", 10) != 10)
        return 1;
    close(out);
    /* fds 3, 4, 5 go to the opens below; the pair takes 6 and 7. */
    int hold[3];
    for (int i = 0; i < 3; i++)
        hold[i] = dup(2);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || sv[0] != 6 || sv[1] != 7)
        return 2;
    for (int i = 0; i < 3; i++)
        close(hold[i]);

    access("/tracer-fortified-begin", F_OK);
    int fd = __open_2("in.txt", O_RDONLY);
    __read_chk(fd, buf, 5, sizeof buf);
    __pread_chk(fd, buf, 4, 2, sizeof buf);
    __pread64_chk(fd, buf, 4, 6, sizeof buf);
    __openat_2(AT_FDCWD, "in.txt", O_RDONLY | O_CLOEXEC);
    __open64_2("missing.txt", O_RDONLY);
    __openat64_2(AT_FDCWD, "in.txt", O_RDONLY);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    __poll_chk(&p, 1, 0, sizeof p);
    struct timespec ts = {0, 0};
    __ppoll_chk(&p, 1, &ts, NULL, sizeof p);
    write(sv[1], "ping", 4);
    __recv_chk(sv[0], buf, 4, sizeof buf, 0);
    write(sv[1], "pong", 4);
    __recvfrom_chk(sv[0], buf, 4, sizeof buf, 0, NULL, NULL);
    access("/tracer-fortified-end", F_OK);
    printf("fortified: done\n");
    return 0;
}
