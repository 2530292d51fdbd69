/* sandboxed: a program that filters its own system calls with seccomp, as
 * sandboxed helpers do (a privilege-separated child, a renderer): after its
 * start-up, any system call outside a short list kills the process. A
 * tracer must not make it die.
 *
 * The list: what glibc's allocator, `write` and `exit` need (read, write,
 * brk, mmap, munmap, mremap, mprotect, madvise, futex, rt_sigprocmask,
 * rt_sigreturn, clock_gettime, getrandom (glibc seeds its heap with it at
 * the first allocation), exit, exit_group), plus what a waiting thread uses
 * (nanosleep, clock_nanosleep, sched_yield) and getpid, gettid.
 * Only this thread is filtered (no SECCOMP_FILTER_FLAG_TSYNC).
 *
 * Usage: sandboxed [N] [first]   (N pairs, default 100000)
 *
 * malloc(10), kept in a global to the end; malloc(48), whose address is
 * dropped after the filter (definitely lost): before the filter, or after
 * it with "first" (then the filter comes before the program's first
 * allocation). After both: N malloc/free pairs of 32..131 bytes
 * (i % 100 + 32), then exit(0).
 * Expected figures: allocation calls N + 2, frees N, bytes allocated
 * 58 + sum over the pairs, live at exit 58 bytes in 2 blocks; the scan
 * finds 48 bytes in 1 block definitely lost, 10 bytes in 1 block still
 * reachable.
 * Output: "done". Exit status 0; 126 when the filter cannot be installed. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include "out.h"

#define ALLOW(nr) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

void *volatile kept;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int first = argc > 2 && strcmp(argv[2], "first") == 0;
    void *volatile lost = NULL;
    if (!first) {
        kept = malloc(10);
        lost = malloc(48);
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(__NR_read), ALLOW(__NR_write), ALLOW(__NR_exit), ALLOW(__NR_exit_group),
        ALLOW(__NR_brk), ALLOW(__NR_mmap), ALLOW(__NR_munmap), ALLOW(__NR_mremap),
        ALLOW(__NR_mprotect), ALLOW(__NR_madvise), ALLOW(__NR_futex),
        ALLOW(__NR_rt_sigreturn), ALLOW(__NR_rt_sigprocmask), ALLOW(__NR_clock_gettime),
        ALLOW(__NR_clock_nanosleep), ALLOW(__NR_nanosleep), ALLOW(__NR_sched_yield),
        ALLOW(__NR_getpid), ALLOW(__NR_gettid), ALLOW(__NR_getrandom),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return 126;
    if (first) {
        kept = malloc(10);
        lost = malloc(48);
    }
    if (lost == kept)
        return 3;
    lost = NULL;
    for (long i = 0; i < n; i++) {
        char *volatile p = malloc(32 + i % 100);
        p[0] = 1;
        free(p);
    }
    out_str("done\n");
    exit(0);
}
