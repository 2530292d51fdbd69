/* Threads that come and go, freeing what exited threads allocated.
 *
 * Three rounds of four threads (1 MiB stacks). A round's threads are
 * created together and joined together; the next round starts 30 ms later.
 * Thread t of round r mallocs 500 blocks of 24 + 8 * ((4r + t + i) % 32)
 * bytes (i = 0..499) and keeps them; from round 1 on it first frees the 500
 * blocks thread t of the previous round kept (a thread that has exited).
 * main frees the last round's blocks after the last join.
 *
 * Expected figures of the program's own calls:
 *   allocation calls 3 * 4 * 500 = 6,000, frees 6,000,
 *   bytes allocated: the sum of the sizes above, 887,040,
 *   live at exit 0 bytes in 0 blocks.
 * Plus glibc's own: the first round's four threads each get a fresh stack
 * and one DTV calloc (see threads.c); the later rounds reuse those cached
 * stacks with their DTVs, so 4 more allocations, live at exit. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "out.h"

#define ROUNDS 3
#define THREADS 4
#define BLOCKS 500

static void *kept[ROUNDS][THREADS][BLOCKS];

struct job {
    int round, t;
};

static void *work(void *arg) {
    struct job *j = arg;
    if (j->round > 0)
        for (int i = 0; i < BLOCKS; i++)
            free(kept[j->round - 1][j->t][i]);
    for (int i = 0; i < BLOCKS; i++)
        kept[j->round][j->t][i] = malloc((size_t)(24 + 8 * ((4 * j->round + j->t + i) % 32)));
    return NULL;
}

int main(void) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    struct job jobs[ROUNDS][THREADS];
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t th[THREADS];
        for (int t = 0; t < THREADS; t++) {
            jobs[r][t] = (struct job){r, t};
            if (pthread_create(&th[t], &attr, work, &jobs[r][t]) != 0)
                return 1;
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
        struct timespec pause = {0, 30 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < BLOCKS; i++)
            free(kept[ROUNDS - 1][t][i]);
    out_str("rounds done\n");
    return 0;
}
