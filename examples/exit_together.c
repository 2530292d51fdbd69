/* Eight threads call exit(3) at the same moment (a barrier), after each
 * allocated 100 blocks of 777 bytes, kept. main waits in pthread_join.
 *
 * glibc 2.36's exit is not serialised: the thread that finds the exit
 * handlers already taken by another ends the process at once. Under the
 * tracer that was while the first thread was still in our handler
 * finishing the trace: the file came out empty. Expected: exit status 3,
 * and a complete trace with the 800 blocks of 777 bytes. */
#include <pthread.h>
#include <stdlib.h>

#define THREADS 8
#define BLOCKS 100

static pthread_barrier_t barrier;
void *volatile kept[THREADS][BLOCKS];

static void *worker(void *arg) {
    long i = (long)arg;
    for (int k = 0; k < BLOCKS; k++)
        kept[i][k] = malloc(777);
    pthread_barrier_wait(&barrier);
    exit(3);
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            return 1;
    pthread_join(t[0], NULL);
    return 0;
}
