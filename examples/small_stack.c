/* A thread on the smallest stack POSIX allows (PTHREAD_STACK_MIN, 16 KiB on
 * x86-64 glibc), allocating at the bottom of a 20-deep call chain.
 *
 * A preloaded library's static TLS comes out of every thread's stack: with
 * too much of it, this pthread_create fails with EINVAL, and hooks that use
 * much stack would overflow it. The program must run as it does untraced.
 *
 * Expected figures of the program's own calls: the thread mallocs 100, 200
 * and 300 bytes and frees the first two: 3 allocation calls, 2 frees,
 * 600 bytes allocated, 300 bytes live at exit in 1 block. Plus glibc's DTV
 * of the new thread (one calloc, live in the stack cache; see threads.c).
 * Prints "created 0" (pthread_create's result), exits 1 if it failed. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include "out.h"

void *volatile kept;

__attribute__((noinline)) static void chain(int depth) {
    volatile char pad[64];
    pad[0] = (char)depth;
    if (depth > 0) {
        chain(depth - 1);
    } else {
        void *a = malloc(100);
        void *b = malloc(200);
        kept = malloc(300);
        free(a);
        free(b);
    }
    pad[1] = pad[0];
}

static void *work(void *arg) {
    chain(20);
    return arg;
}

int main(void) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
    pthread_t t;
    int rc = pthread_create(&t, &attr, work, NULL);
    if (rc == 0)
        pthread_join(t, NULL);
    out_str("created ");
    out_u64((unsigned long long)rc);
    out_str("\n");
    return rc != 0;
}
