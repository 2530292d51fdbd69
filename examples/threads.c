/* Threads allocating and freeing concurrently.
 *
 * Four threads run at once (all created before any is joined). Thread t
 * (0..3) mallocs t+2 blocks of 64*(t+1)+j bytes (j = 0..t+1) and frees all but
 * the last. main callocs the thread-id array (4 * 8 = 32 bytes) and frees it.
 *
 * Expected figures of the program's own calls:
 *   thread 0: 2 allocs (64, 65)                 1 free, 65 live
 *   thread 1: 3 allocs (128, 129, 130)          2 frees, 130 live
 *   thread 2: 4 allocs (192..195)               3 frees, 195 live
 *   thread 3: 5 allocs (256..260)               4 frees, 260 live
 *   main:     1 calloc (32)                     1 free
 *   allocation calls 15, frees 11, bytes allocated 2612,
 *   live at exit 650 bytes in 4 blocks.
 * Plus glibc's own, per pthread_create with a fresh stack: one calloc of the
 * new thread's dynamic thread vector (DTV), 16 * (number of loaded modules with
 * a TLS segment + 16) bytes (glibc 2.36 allocate_dtv: max module id + 14 spare
 * + 2 header entries of 16 bytes). It stays allocated with the cached thread
 * stack. With only libc.so.6 having TLS that is 272 bytes; a preloaded library
 * with its own TLS segment (libtracer.so) makes it 288. So 4 more allocations,
 * 4 more live blocks: a joined thread's stack, DTV included, stays in
 * glibc's 40 MiB stack cache (1 MiB stacks here, so whatever `ulimit -s`
 * says, all 4 fit and nothing is trimmed). */
#include <pthread.h>
#include <stdlib.h>
#include "out.h"

void *volatile kept[4];

static void *work(void *arg) {
    long t = (long)arg;
    void *blocks[8];
    for (long j = 0; j < t + 2; j++)
        blocks[j] = malloc((size_t)(64 * (t + 1) + j));
    for (long j = 0; j < t + 1; j++)
        free(blocks[j]);
    kept[t] = blocks[t + 1];
    return NULL;
}

int main(void) {
    pthread_t *ids = calloc(4, sizeof(pthread_t));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    for (long t = 0; t < 4; t++)
        pthread_create(&ids[t], &attr, work, (void *)t);
    for (long t = 0; t < 4; t++)
        pthread_join(ids[t], NULL);
    free(ids);
    out_str("threads: joined 4\n");
    return 0;
}
