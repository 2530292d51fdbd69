/* A signal handler that unmaps memory while the process exits.
 *
 * main keeps 100,000 blocks of 32 bytes reachable from a global array; the
 * first 64 of them each hold the only other pointer to a block of 256 KiB
 * (each a separate mmap in glibc), so a scan that works through the array
 * from its end reaches the large blocks last. main starts a 1 ms interval
 * timer and returns; the SIGALRM handler frees the next large block (glibc
 * unmaps it at once) until all 64 are gone, 64 ms later, while the scan at
 * exit runs (some 20 ms on this machine).
 *
 * Under libtracer the exit scan copies blocks directly when the exiting
 * thread is the program's only one; a handler unmapping a block it is
 * about to copy would crash it, so the exiting thread's signals wait
 * until the scan is over. Expected: exit status 0, "main done" on stdout,
 * and in the trace's scan every 32-byte block reachable (100,000 blocks,
 * 3,200,000 bytes) and every large block either freed before the scan or
 * reachable.
 *
 * With an argument, a second thread waits in pause() while the process
 * exits: the exiting thread is then not alone, the scan reads blocks
 * through the kernel (which fails harmlessly on a block unmapped meanwhile),
 * and the timer's signal goes to the other thread, whose handler unmaps
 * blocks during the scan (the exiting thread's own signals are held either
 * way); the 32-byte blocks are reachable all the same.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define SMALL 100000
#define BIG 64
#define BIG_SIZE (256 * 1024)

static void *small[SMALL];
static void *big[BIG];
static int next_big;

/* The handler may run on two threads at once (the second one's, with an
 * argument): each call claims its block with an atomic increment. */
static void on_alarm(int sig) {
    (void)sig;
    int k = __atomic_fetch_add(&next_big, 1, __ATOMIC_SEQ_CST);
    if (k < BIG)
        free(big[k]);
}

static void *waiter(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    (void)argv;
    for (int i = 0; i < SMALL; i++)
        small[i] = malloc(32);
    for (int i = 0; i < BIG; i++) {
        big[i] = malloc(BIG_SIZE);
        memset(big[i], 0x5a, BIG_SIZE);
        memcpy(small[i], &big[i], sizeof big[i]);
    }
    if (argc > 1) {
        pthread_t t;
        pthread_create(&t, NULL, waiter, NULL);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    puts("main done");
    return 0;
}
