/* Hundreds of threads allocating at once.
 *
 * Build: gcc -g -O0 -pthread -o many_threads many_threads.c
 * Usage: many_threads [THREADS]   (default 300)
 * main mallocs the array of thread handles (8 bytes a thread), starts every
 * thread (64 KiB stacks), joins them and frees the array. Each thread waits
 * at a barrier until all have started, then makes 10 rounds of 64 mallocs
 * of 16 + i bytes (i = 0..63) followed by the 64 frees. glibc's arenas are
 * shared between so many threads (8 per core at most), so addresses go from
 * one thread to another all the time.
 *
 * Expected figures of the program's own calls, for N threads:
 *   allocation calls 640 N + 1, frees 640 N + 1,
 *   bytes allocated 30,400 N + 8 N (each round 64 * 16 + 2,016 bytes),
 *   nothing live at exit.
 * Plus glibc's own: one DTV per pthread_create (see threads.c), live at
 * exit with the cached stacks (N * 68 KiB stay within glibc's 40 MiB stack
 * cache up to ~600 threads).
 *
 * Traced, 600 threads took 1 s against 0.1 s untraced, 1,200 threads 3 to
 * 180 s, and 2,000 threads did not finish in 10 minutes: the writer's merge
 * of the threads' lanes cost a look at every lane for each message, an
 * allocation taken ahead of its turn left lanes waiting for each other, and
 * the threads waiting for room polled, taking the cores from the writer. */
#include <pthread.h>
#include <stdlib.h>
#include "out.h"

#define ROUNDS 10
#define BLOCKS 64

static pthread_barrier_t start;

static void *work(void *arg) {
    void *p[BLOCKS];
    pthread_barrier_wait(&start);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < BLOCKS; i++)
            p[i] = malloc((size_t)(16 + i));
        for (int i = 0; i < BLOCKS; i++)
            free(p[i]);
    }
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 300;
    if (n < 1)
        return 2;
    pthread_t *t = malloc(sizeof *t * (size_t)n);
    if (!t)
        return 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], &attr, work, NULL) != 0) {
            out_str("many_threads: pthread_create failed\n");
            return 1;
        }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    out_str("many_threads: ");
    out_u64((unsigned long long)n);
    out_str(" threads, 10 rounds each\n");
    return 0;
}
