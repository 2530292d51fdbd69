/* pthread_getattr_np as the first call of a thread, as a JVM's threads and
 * the Rust runtime's make it (to find their stack guard).
 *
 * glibc's pthread_getattr_np holds the calling thread's own lock while it
 * allocates: a realloc of a CPU set for every thread, and for the main
 * thread the FILE and line buffer of its read of /proc/self/maps. A tracer
 * that asks pthread_getattr_np for the stack's bounds from inside that
 * allocation waits on the lock for ever. The main thread does it first,
 * then a second thread, which then keeps a 4321-byte block from worker().
 * Prints "main 0 thread 0 size 1" (the calls' results; size 1 when the
 * thread's stack size is not 0), exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include "out.h"

void *volatile kept;

static int stack_of_self(size_t *size) {
    pthread_attr_t attr;
    int rc = pthread_getattr_np(pthread_self(), &attr);
    if (rc != 0)
        return rc;
    void *addr;
    rc = pthread_attr_getstack(&attr, &addr, size);
    pthread_attr_destroy(&attr);
    return rc;
}

__attribute__((noinline)) static void *worker(void *arg) {
    size_t size = 0;
    long rc = stack_of_self(&size);
    kept = malloc(4321);
    *(long *)arg = size != 0;
    return (void *)rc;
}

int main(void) {
    size_t size;
    int rc = stack_of_self(&size);
    long sized = 0;
    void *thread_rc = (void *)-1;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &sized) == 0)
        pthread_join(t, &thread_rc);
    out_str("main ");
    out_u64((unsigned long long)rc);
    out_str(" thread ");
    out_u64((unsigned long long)(long)thread_rc);
    out_str(" size ");
    out_u64((unsigned long long)sized);
    out_str("\n");
    return 0;
}
