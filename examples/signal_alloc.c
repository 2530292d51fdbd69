/* A signal handler that allocates while main allocates.
 *
 * A profiling timer (SIGPROF, every 100 us of CPU) runs a handler that
 * allocates a 4093-byte block, frees it, swaps one 4091-byte block in a
 * global slot (the previous one is freed, a new one takes its place), and
 * reallocs a third block to 2000 or 3000 bytes in turn (the first run's
 * realloc(NULL, 2000) is an allocation). Meanwhile main makes
 * malloc(48)/free pairs until the handler has run at least RUNS times,
 * then stops the timer and frees the slot's and the realloc'd block.
 * A traced program spends most of its time in the allocation functions,
 * so most signals land while a hook is running.
 *
 * Allocating in a signal handler is not async-signal-safe in general;
 * glibc's malloc tolerates it when the signal did not interrupt it in the
 * middle of the same structures. Here main's 48-byte blocks come from and
 * go back to the thread's tcache (one warm-up pair before the timer
 * starts fills it), which takes no lock, and the handler's blocks are too
 * large for any tcache bin: they go through the arena, whose lock main
 * never holds while the timer runs.
 *
 * Output: "pairs P runs R bytes B" (the handler ran R times; B is every
 * byte the program asked for). Expected figures: allocations P + 3R,
 * frees P + 3R, bytes allocated B, nothing live at exit; every realloc of
 * the handler but its first is one free and one allocation.
 *
 * Argument "altstack": the handler runs on an alternate signal stack.
 *
 * Build -O0 (as every example): gcc -O2 removes free(malloc(n)). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "out.h"

#define RUNS 40

static volatile sig_atomic_t runs;
static void *volatile slot;
static void *volatile sink;
static void *volatile grown;
static volatile unsigned long long handler_bytes;
static char altstack[1 << 16];

static void handler(int sig) {
    (void)sig;
    void *p = malloc(4093);
    memset(p, 1, 4093);
    sink = p;
    free(p);
    void *q = malloc(4091);
    void *old = slot;
    slot = q;
    free(old);
    size_t n = (runs % 2) ? 3000 : 2000;
    void *g = realloc(grown, n);
    grown = g;
    handler_bytes += 4093 + 4091 + n;
    runs++;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "altstack") == 0) {
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_size = sizeof altstack;
        ss.ss_sp = altstack;
        sigaltstack(&ss, NULL);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART | (argc > 1 ? SA_ONSTACK : 0);
    sigaction(SIGPROF, &sa, NULL);
    free(malloc(48)); /* the warm-up pair: counted in P */
    unsigned long long pairs = 1;
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_PROF, &it, NULL);
    while (runs < RUNS) {
        void *p = malloc(48);
        sink = p;
        free(p);
        pairs++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    free(slot);
    free(grown);
    out_str("pairs ");
    out_u64(pairs);
    out_str(" runs ");
    out_u64((unsigned long long)runs);
    out_str(" bytes ");
    out_u64(48 * pairs + handler_bytes);
    out_str("\n");
    return 0;
}
