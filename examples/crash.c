/* Death by a signal after many allocations, and what the program sees of
 * signal dispositions.
 *
 * Usage: crash MODE   (MODE: segv, term, handled)
 *
 * Every mode first prints what sigaction() reports for SIGINT, SIGSEGV and
 * SIGTERM ("default" for each, in a process started with default
 * dispositions) and what signal(SIGHUP, SIG_DFL) returned ("default"), then
 * makes 2,000 allocations of 32 bytes and frees every other one:
 *   allocation calls 2,000, frees 1,000, bytes allocated 64,000,
 *   live 32,000 bytes in 1,000 blocks.
 * Then:
 *   segv     writes through a null pointer: killed by SIGSEGV;
 *   term     sends itself SIGTERM: killed by SIGTERM;
 *   handled  installs its own SIGSEGV handler (it calls _exit(3)), then
 *            writes through a null pointer: exit status 3.
 *   reraise  installs a SIGTERM handler that cleans up, restores the
 *            default and raises the signal again (the idiom of coreutils'
 *            sort, ...), with SA_NODEFER (the signal is not blocked in the
 *            handler: raise ends the process there), then sends itself
 *            SIGTERM: killed by SIGTERM.
 *   reraise-blocked  the same handler installed as Node.js does
 *            (SA_RESETHAND, every signal blocked in the handler: the
 *            raised one ends the process when the handler returns).
 *   segv-reraise  the same with SIGSEGV (installed with signal()), then
 *            writes through a null pointer: killed by SIGSEGV.
 *   reraise-kill, reraise-pthread  as reraise, the handler sending the
 *            signal again with kill(getpid(), sig) (the older idiom) or
 *            pthread_kill(pthread_self(), sig): killed by SIGTERM.
 *   reraise-tgkill, reraise-tkill  as reraise, the handler sending the
 *            signal again to its own thread with the raw system calls,
 *            through syscall(): killed by SIGTERM.
 *   syscall-kill  sends itself SIGTERM with syscall(SYS_kill, ...): killed
 *            by SIGTERM.
 *   thread-tkill  a second thread sends the main thread SIGKILL with
 *            syscall(SYS_tkill, ...) while the main thread waits for it:
 *            killed by SIGKILL. (pthread_create's own allocations come on
 *            top of the 2,000.)
 *   kill9    sends itself SIGKILL with kill(): killed by SIGKILL.
 *   group, killpg  becomes a process group of its own, sets SIGTERM's
 *            default disposition itself, and sends SIGTERM to its group
 *            with kill(-pgrp) or killpg(pgrp): killed by SIGTERM.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "out.h"

static void *blocks[2000];

static const char *disposition(int sig)
{
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0)
        return "error";
    if (old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO))
        return "default";
    if (old.sa_handler == SIG_IGN)
        return "ignored";
    return "handler";
}

static void on_segv(int sig)
{
    (void)sig;
    _exit(3);
}

/* How reraise sends the signal again: 0 raise, 1 kill, 2 pthread_kill,
 * 3 syscall(SYS_tgkill), 4 syscall(SYS_tkill). */
static int reraise_how;

static pid_t main_tid;

/* thread-tkill: the signal comes from another thread of the process. */
static void *send_term(void *arg)
{
    (void)arg;
    syscall(SYS_tkill, main_tid, SIGKILL);
    for (;;)
        pause();
    return NULL;
}

/* Cleans up (nothing here), then lets the signal do what it would have. */
static void reraise(int sig)
{
    signal(sig, SIG_DFL);
    if (reraise_how == 1)
        kill(getpid(), sig);
    else if (reraise_how == 2)
        pthread_kill(pthread_self(), sig);
    else if (reraise_how == 3)
        syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
    else if (reraise_how == 4)
        syscall(SYS_tkill, (pid_t)syscall(SYS_gettid), sig);
    else
        raise(sig);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "segv";
    out_str("SIGINT ");
    out_str(disposition(SIGINT));
    out_str(", SIGSEGV ");
    out_str(disposition(SIGSEGV));
    out_str(", SIGTERM ");
    out_str(disposition(SIGTERM));
    out_str("\nsignal(SIGHUP) was ");
    out_str(signal(SIGHUP, SIG_DFL) == SIG_DFL ? "default\n" : "other\n");
    for (int i = 0; i < 2000; i++) {
        blocks[i] = malloc(32);
        memset(blocks[i], i, 32);
    }
    for (int i = 0; i < 2000; i += 2)
        free(blocks[i]);
    if (strcmp(mode, "reraise-kill") == 0)
        reraise_how = 1;
    if (strcmp(mode, "reraise-pthread") == 0)
        reraise_how = 2;
    if (strcmp(mode, "reraise-tgkill") == 0)
        reraise_how = 3;
    if (strcmp(mode, "reraise-tkill") == 0)
        reraise_how = 4;
    if (strcmp(mode, "term") == 0) {
        kill(getpid(), SIGTERM);
    } else if (strcmp(mode, "syscall-kill") == 0) {
        syscall(SYS_kill, getpid(), SIGTERM);
    } else if (strcmp(mode, "thread-tkill") == 0) {
        main_tid = (pid_t)syscall(SYS_gettid);
        pthread_t t;
        if (pthread_create(&t, NULL, send_term, NULL) != 0)
            return 1;
        pthread_join(t, NULL);
    } else if (strcmp(mode, "kill9") == 0) {
        kill(getpid(), SIGKILL);
    } else if (strcmp(mode, "group") == 0 || strcmp(mode, "killpg") == 0) {
        /* A group of its own: the signal must not reach whoever ran it. */
        if (setpgid(0, 0) != 0)
            return 1;
        signal(SIGTERM, SIG_DFL);
        if (strcmp(mode, "group") == 0)
            kill(-getpgrp(), SIGTERM);
        else
            killpg(getpgrp(), SIGTERM);
    } else if (strncmp(mode, "reraise", 7) == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = reraise;
        if (strcmp(mode, "reraise-blocked") != 0) {
            sa.sa_flags = SA_NODEFER;
        } else {
            sa.sa_flags = SA_RESETHAND;
            sigfillset(&sa.sa_mask);
        }
        sigaction(SIGTERM, &sa, NULL);
        kill(getpid(), SIGTERM);
    } else {
        if (strcmp(mode, "segv-reraise") == 0)
            signal(SIGSEGV, reraise);
        if (strcmp(mode, "handled") == 0)
            signal(SIGSEGV, on_segv);
        *(volatile int *)0 = 1;
    }
    return 0;
}
