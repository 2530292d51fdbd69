/* Stress: 8 threads x 200,000 allocations, mixed sizes, blocks freed by
 * whichever thread finds the shared queue full (so mostly by another thread).
 *
 * Thread t (0..7), iteration i (0..199,999) mallocs 1 + (i*37 + t*101) % 2000
 * bytes (1..2000) and pushes the block into a shared ring of 4096 slots; when
 * the ring is full, the pusher pops the oldest block (any thread's) and frees
 * it. After joining, main frees what is left in the ring.
 *
 * Expected figures of the program's own calls:
 *   allocation calls 1,600,000, frees 1,600,000,
 *   bytes allocated 1,600,800,000 (sum of the sizes above),
 *   live at exit 0 bytes in 0 blocks.
 * Plus glibc's one DTV calloc per thread (see threads.c): 8 more allocations
 * of 16 * (TLS modules + 16) bytes, live at exit. They stay live because a
 * joined thread's stack (and its DTV) goes to glibc's stack cache, which
 * keeps up to 40 MiB: the threads get 1 MiB stacks so all 8 fit. (With the
 * default 8 MiB stacks the cache would overflow from the 5th join on and
 * glibc would free 4 of the DTVs.) */
#include <pthread.h>
#include <stdlib.h>
#include "out.h"

#define THREADS 8
#define PER_THREAD 200000
#define SLOTS 4096

static void *ring[SLOTS];
static size_t head, count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long frees_by[THREADS];

static void *work(void *arg) {
    long t = (long)arg;
    for (long i = 0; i < PER_THREAD; i++) {
        size_t size = 1 + (size_t)((i * 37 + t * 101) % 2000);
        char *p = malloc(size);
        p[0] = (char)i;
        p[size - 1] = (char)t;
        void *victim = NULL;
        pthread_mutex_lock(&lock);
        if (count == SLOTS) {
            victim = ring[head];
            head = (head + 1) % SLOTS;
            count--;
        }
        ring[(head + count) % SLOTS] = p;
        count++;
        pthread_mutex_unlock(&lock);
        if (victim) {
            free(victim);
            frees_by[t]++;
        }
    }
    return NULL;
}

int main(void) {
    pthread_t ids[THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20); /* see the header: stack cache */
    for (long t = 0; t < THREADS; t++)
        pthread_create(&ids[t], &attr, work, (void *)t);
    for (long t = 0; t < THREADS; t++)
        pthread_join(ids[t], NULL);
    unsigned long frees = 0;
    for (int t = 0; t < THREADS; t++)
        frees += frees_by[t];
    while (count > 0) {
        free(ring[head]);
        head = (head + 1) % SLOTS;
        count--;
        frees++;
    }
    out_kv("stress: allocs", (unsigned long long)THREADS * PER_THREAD);
    out_kv("stress: frees", frees);
    return 0;
}
