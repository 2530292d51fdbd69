/* A signal handler that leaves the code it interrupted with siglongjmp.
 *
 * main makes malloc(48)/free pairs while a profiling timer (SIGPROF) runs
 * a handler. Traced, the handler jumps back to main's sigsetjmp when the
 * code it interrupted is the tracer's (inside libtracer.so: found with
 * dl_iterate_phdr before the timer starts), at most JUMPS times; jumping
 * out of glibc's allocator would leave its state half-changed, jumping out
 * of the tracer's must not lose the thread's later events. Untraced, no
 * jump is taken and the loop stops after ROUNDS handler runs.
 *
 * Then, with the timer stopped, main allocates 100 blocks of 4000 bytes,
 * frees 99 of them and forgets the last (a definite leak of 4000 bytes).
 *
 * Output: "jumps J" (J is 0 untraced). Expected in the trace: exactly 100
 * allocations of 4000 bytes, 99 of them freed, whatever J is.
 *
 * Build -O0 (as every example): gcc -O2 removes free(malloc(n)). */
#define _GNU_SOURCE
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>
#include "out.h"

#define JUMPS 30
#define ROUNDS 60

static sigjmp_buf env;
static volatile sig_atomic_t jumps, runs;
static uintptr_t lib_lo, lib_hi;
static void *volatile sink;

static int find_tracer(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, "libtracer"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            lib_lo = info->dlpi_addr + ph->p_vaddr;
            lib_hi = lib_lo + ph->p_memsz;
        }
    }
    return 1;
}

static void handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)si;
    runs++;
    uintptr_t pc = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
    if (jumps < JUMPS && pc >= lib_lo && pc < lib_hi) {
        jumps++;
        siglongjmp(env, 1);
    }
}

int main(void) {
    dl_iterate_phdr(find_tracer, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_PROF, &it, NULL);
    sigsetjmp(env, 1);
    while (jumps < JUMPS && (lib_hi != 0 || runs < ROUNDS)) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    void *blocks[100];
    for (int i = 0; i < 100; i++)
        blocks[i] = malloc(4000);
    for (int i = 0; i < 99; i++)
        free(blocks[i]);
    blocks[99] = NULL;
    out_str("jumps ");
    out_u64((unsigned long long)jumps);
    out_str("\n");
    return 0;
}
