/* A stack walked from a signal handler through a blocked syscall().
 *
 * blocked_call() makes syscall(SYS_pause); a timer's SIGALRM interrupts
 * it, and the handler walks its own stack with glibc's backtrace() (the
 * unwinder debuggers, profilers and crash reporters use the same tables)
 * and looks for blocked_call among the frames, by name (dladdr: built with
 * -rdynamic). Traced, syscall() is libtracer's, an entry written in
 * assembly: without unwind rules of its own the walk stopped inside it.
 *
 * Output: "syscall_unwind: blocked_call found" (or "not found").
 * Build: gcc -g -O0 -rdynamic -o syscall_unwind syscall_unwind.c */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
#include "out.h"

static volatile sig_atomic_t found;

static void handler(int sig) {
    (void)sig;
    void *frames[64];
    int n = backtrace(frames, 64);
    for (int i = 0; i < n; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_sname &&
            strcmp(info.dli_sname, "blocked_call") == 0)
            found = 1;
    }
}

__attribute__((noinline)) void blocked_call(void) {
    syscall(SYS_pause);
}

int main(void) {
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder before any signal */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &it, NULL);
    blocked_call();
    out_str(found ? "syscall_unwind: blocked_call found\n" : "syscall_unwind: blocked_call not found\n");
    return 0;
}
