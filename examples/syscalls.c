/* syscalls: a known sequence of system calls from each captured group, made
 * through the C library's exported wrappers, some failing on purpose.
 *
 * Run it in an empty scratch directory (it creates and removes files there).
 * The sequence sits between two marker calls the tests look for:
 *   access("/tracer-syscalls-begin", F_OK) = -1 ENOENT
 *   access("/tracer-syscalls-end", F_OK) = -1 ENOENT
 * `tests/tests/syscalls.rs` lists the expected calls one by one; the comment
 * before each step says what it returns. Nothing between the markers uses
 * stdio or malloc, so every system call in that region is one of the calls
 * below (the strace comparison relies on it).
 *
 * With an argument "heap", it also mallocs 100 bytes between two writes to
 * /dev/null (for the test that lines up allocation and syscall clocks).
 *
 * Output: "syscalls: done" on stdout (written with write(2)). Exit status 0,
 * through exit(0) (so exit_group is recorded). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <dirent.h>
#include <termios.h>
#include <unistd.h>

static char buf[256];

int main(int argc, char **argv) {
    struct stat st;
    struct iovec iov[2];
    int fd, fd2, sv[2];
    /* Before the marker: glibc learns the break here (it may make a
     * brk(NULL) system call the first time). */
    char *top = sbrk(0);

    access("/tracer-syscalls-begin", F_OK);                  /* -1 ENOENT */

    if (argc > 1 && strcmp(argv[1], "heap") == 0) {
        int null = open("/dev/null", O_WRONLY);              /* 3 */
        write(null, "before", 6);                            /* 6 */
        void *volatile p = malloc(100);
        write(null, "after", 5);                             /* 5 */
        free(p);
        close(null);                                         /* 0 */
    }

    /* ---- %file */
    fd = open("data.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600); /* 3 */
    write(fd, "hello, tracer\n", 14);                        /* 14 */
    pwrite(fd, "HE", 2, 0);                                  /* 2 */
    fsync(fd);                                               /* 0 */
    fdatasync(fd);                                           /* 0 */
    ftruncate(fd, 10);                                       /* 0 */
    close(fd);                                               /* 0 */
    fd = openat(AT_FDCWD, "data.txt", O_RDONLY | O_CLOEXEC); /* 3 */
    read(fd, buf, sizeof buf);                               /* 10 "HEllo, tra" */
    pread(fd, buf, 4, 2);                                    /* 4 */
    lseek(fd, 1, SEEK_SET);                                  /* 1 */
    iov[0].iov_base = buf;
    iov[0].iov_len = 3;
    iov[1].iov_base = buf + 3;
    iov[1].iov_len = 100;
    readv(fd, iov, 2);                                       /* 9 */
    fstat(fd, &st);                                          /* 0 */
    stat("data.txt", &st);                                   /* 0 */
    lstat("data.txt", &st);                                  /* 0 */
    fd2 = dup(fd);                                           /* 4 */
    dup2(fd2, 10);                                           /* 10 */
    dup3(10, 11, O_CLOEXEC);                                 /* 11 */
    fcntl(11, F_GETFD);                                      /* 1 (FD_CLOEXEC) */
    ioctl(fd, TCGETS, buf);                                  /* -1 ENOTTY */
    close(11);                                               /* 0 */
    close(10);                                               /* 0 */
    close(fd2);                                              /* 0 */
    close(fd);                                               /* 0 */
    open("missing.txt", O_RDONLY);                           /* -1 ENOENT */
    close(-1);                                               /* -1 EBADF */
    read(-1, buf, 1);                                        /* -1 EBADF */
    access("data.txt", R_OK);                                /* 0 */
    faccessat(AT_FDCWD, "data.txt", W_OK, 0);                /* 0 */
    mkdir("sub", 0700);                                      /* 0 */
    mkdir("sub", 0700);                                      /* -1 EEXIST */
    rename("data.txt", "sub/moved.txt");                     /* 0 */
    renameat(AT_FDCWD, "sub/moved.txt", AT_FDCWD, "moved.txt"); /* 0 */
    fd = open("sub", O_RDONLY | O_DIRECTORY);                /* 3 */
    getdents64(fd, buf, sizeof buf);                         /* 48: "." and ".." */
    close(fd);                                               /* 0 */
    unlinkat(AT_FDCWD, "missing", 0);                        /* -1 ENOENT */
    rmdir("sub");                                            /* 0 */
    fd = creat("copy.txt", 0600);                            /* 3 */
    fd2 = open("moved.txt", O_RDONLY);                       /* 4 */
    sendfile(fd, fd2, NULL, 4);                              /* 4 */
    copy_file_range(fd2, NULL, fd, NULL, 3, 0);              /* 3 */
    iov[0].iov_base = "ab";
    iov[0].iov_len = 2;
    iov[1].iov_base = "cde";
    iov[1].iov_len = 3;
    writev(fd, iov, 2);                                      /* 5 */
    close(fd2);                                              /* 0 */
    close(fd);                                               /* 0 */
    unlink("copy.txt");                                      /* 0 */
    unlink("moved.txt");                                     /* 0 */

    /* ---- %net */
    struct sockaddr_in addr;
    socklen_t alen = sizeof addr;
    int one = 1, type = 0;
    socklen_t tlen = sizeof type;
    int srv = socket(AF_INET, SOCK_STREAM, 0);               /* 3 */
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(srv, (struct sockaddr *)&addr, sizeof addr);        /* 0 (port 0: any) */
    getsockname(srv, (struct sockaddr *)&addr, &alen);       /* not captured */
    listen(srv, 4);                                          /* 0 */
    int cli = socket(AF_INET, SOCK_STREAM, 0);               /* 4 */
    connect(cli, (struct sockaddr *)&addr, sizeof addr);     /* 0 */
    int acc = accept(srv, NULL, NULL);                       /* 5 */
    send(cli, "ping", 4, 0);                                 /* 4 */
    recv(acc, buf, sizeof buf, 0);                           /* 4 */
    setsockopt(cli, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* 0 */
    getsockopt(cli, SOL_SOCKET, SO_TYPE, &type, &tlen);      /* 0 */
    shutdown(cli, SHUT_WR);                                  /* 0 */
    close(acc);                                              /* 0 */
    close(cli);                                              /* 0 */
    close(srv);                                              /* 0: the port is closed now */
    cli = socket(AF_INET, SOCK_STREAM, 0);                   /* 3 */
    connect(cli, (struct sockaddr *)&addr, sizeof addr);     /* -1 ECONNREFUSED */
    close(cli);                                              /* 0 */
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);                  /* 0: sv = {3, 4} */
    sendto(sv[0], "dgram", 5, 0, NULL, 0);                   /* 5 */
    recvfrom(sv[1], buf, sizeof buf, 0, NULL, NULL);         /* 5 */
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    iov[0].iov_base = "msg";
    iov[0].iov_len = 3;
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    sendmsg(sv[0], &msg, 0);                                 /* 3 */
    iov[0].iov_base = buf;
    iov[0].iov_len = sizeof buf;
    recvmsg(sv[1], &msg, 0);                                 /* 3 */
    struct pollfd pfd = {.fd = sv[1], .events = POLLIN};
    poll(&pfd, 1, 0);                                        /* 0: nothing to read */
    struct timespec zero = {0, 0};
    ppoll(&pfd, 1, &zero, NULL);                             /* 0 */
    fd_set rset;
    FD_ZERO(&rset);
    FD_SET(sv[1], &rset);
    struct timeval tv = {0, 0};
    select(sv[1] + 1, &rset, NULL, NULL, &tv);               /* 0 */
    int ep = epoll_create1(EPOLL_CLOEXEC);                   /* 5 */
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = sv[1]};
    epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev);                /* 0 */
    epoll_wait(ep, &ev, 1, 0);                               /* 0 */
    close(ep);                                               /* 0 */
    close(sv[0]);                                            /* 0 */
    close(sv[1]);                                            /* 0 */

    /* ---- %mem */
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(m, 4096, PROT_READ);                            /* 0 */
    mprotect(m, 4096, PROT_READ | PROT_WRITE);               /* 0: one mapping again */
    madvise(m, 8192, MADV_DONTNEED);                         /* 0 */
    m = mremap(m, 8192, 16384, MREMAP_MAYMOVE);              /* an address */
    munmap(m, 16384);                                        /* 0 */
    mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0);         /* -1 EBADF */
    sbrk(8192);                                              /* top (kernel: brk(top + 8192) = top + 8192) */
    brk(top);                                                /* 0 (kernel: brk(top) = top) */

    /* ---- %process */
    pid_t child = fork();                                    /* the child's pid */
    if (child == 0)
        _exit(7);
    int status = 0;
    waitpid(child, &status, 0);                              /* the child's pid */
    child = vfork();                                         /* the child's pid */
    if (child == 0)
        _exit(5);
    wait4(child, &status, 0, NULL);                          /* the child's pid */
    kill(getpid(), 0);                                       /* 0 */
    kill(0x7ffffff0, 0);                                     /* -1 ESRCH */

    access("/tracer-syscalls-end", F_OK);                    /* -1 ENOENT */
    write(1, "syscalls: done\n", 15);                        /* 15 */
    exit(0);
}
