/* Runs a program where process_vm_readv(2) fails with EPERM, as under a
 * container's seccomp profile that withholds it.
 *
 * Usage: no_vm_readv PROGRAM [ARGS...]
 *
 * Installs a seccomp filter (no new privileges needed beyond
 * PR_SET_NO_NEW_PRIVS) that answers EPERM to process_vm_readv and allows
 * everything else, checks that a read of its own memory through the call
 * is refused, then executes PROGRAM. Exit status 126 when the filter
 * cannot be installed, 125 when the call still works, 127 when PROGRAM
 * cannot be executed.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no_vm_readv PROGRAM [ARGS...]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("no_vm_readv: seccomp");
        return 126;
    }
    char from[8] = "checked", to[8];
    struct iovec local = {to, sizeof to}, remote = {from, sizeof from};
    if (syscall(SYS_process_vm_readv, getpid(), &local, 1UL, &remote, 1UL, 0UL) != -1 ||
        errno != EPERM) {
        fprintf(stderr, "no_vm_readv: process_vm_readv is not refused\n");
        return 125;
    }
    execv(argv[1], argv + 1);
    perror("no_vm_readv: execv");
    return 127;
}
