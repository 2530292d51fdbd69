/* Descriptor calls made through syscall() instead of their libc functions,
 * as programs do that close every descriptor before they exec or
 * daemonize: syscall(SYS_close_range, 3, ~0U, 0). The trace files must
 * survive it, and every call must give what the kernel gives untraced.
 *
 * Usage: raw_close. Allocates 100 bytes kept to the end, makes the checks
 * below (each a call's result and errno), then 1000 malloc/free pairs of 1
 * to 1000 bytes after every descriptor from 3 up was closed; prints
 * "ok N" (N checks) and exits 0, or prints the failed check's number and
 * exits 1. Known figures: 1001 allocations, 1000 frees, 100 + 500500 bytes,
 * one block of 100 bytes live at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "out.h"

static unsigned checks;

#define CHECK(c)                                                              \
    do {                                                                      \
        checks++;                                                             \
        if (!(c)) {                                                           \
            out_str("failed check ");                                         \
            out_u64(checks);                                                  \
            out_str("\n");                                                    \
            return 1;                                                         \
        }                                                                     \
    } while (0)

static void *volatile keep;

int main(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    keep = malloc(100);
    CHECK(keep != NULL);
    /* dup2 and dup3 through syscall() */
    CHECK(syscall(SYS_dup2, p[0], 40) == 40);
    CHECK(fcntl(40, F_GETFD) == 0);
    CHECK(syscall(SYS_dup3, p[1], 41, O_CLOEXEC) == 41);
    CHECK(fcntl(41, F_GETFD) == FD_CLOEXEC);
    errno = 0;
    CHECK(syscall(SYS_dup3, p[0], p[0], 0) == -1 && errno == EINVAL);
    /* close of a descriptor that is not open: -1 and EBADF */
    errno = 0;
    CHECK(syscall(SYS_close, 1000) == -1 && errno == EBADF);
    CHECK(syscall(SYS_close, 41) == 0);
    CHECK(fcntl(41, F_GETFD) == -1 && errno == EBADF);
    /* other numbers pass through: a result, and an error with its errno */
    CHECK(syscall(SYS_getpid) == getpid());
    errno = 0;
    CHECK(syscall(SYS_fcntl, 1000, F_GETFD) == -1 && errno == EBADF);
    /* every descriptor from 3 up closed */
    CHECK(syscall(SYS_close_range, 3, ~0U, 0) == 0);
    CHECK(fcntl(p[0], F_GETFD) == -1 && errno == EBADF);
    CHECK(fcntl(p[1], F_GETFD) == -1 && errno == EBADF);
    CHECK(fcntl(40, F_GETFD) == -1 && errno == EBADF);
    for (int i = 1; i <= 1000; i++)
        free(malloc((size_t)i));
    out_str("ok ");
    out_u64(checks);
    out_str("\n");
    return 0;
}
