/* A leak in a thread: the thread allocates 48 bytes and loses the pointer;
 * main joins it.
 *
 * Build: gcc -g -O0 -pthread -o thread thread.c
 * Reading the code: one 48-byte block from worker() (line 28), lost.
 * pthread_create itself allocates the thread's DTV (dynamic thread vector,
 * calloc in the loader's _dl_allocate_tls). After the join glibc keeps the
 * thread's stack in its cache, and the thread control block there points to
 * the DTV's second word, not its start: valgrind calls the DTV "possibly
 * lost" (an interior pointer) — a runtime block, not the program's leak.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./thread      (valgrind 3.19, glibc 2.36):
 *   definitely lost: 48 bytes in 1 blocks    (worker)
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 272 bytes in 1 blocks   (the DTV: calloc in _dl_allocate_tls,
 *                                             from pthread_create in main)
 *   still reachable: 0 bytes in 0 blocks
 *   total heap usage: 2 allocs, 0 frees, 320 bytes allocated */
#include <pthread.h>
#include <stdlib.h>
#include "../out.h"

void *volatile sink;

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    sink = malloc(48);
    sink = 0;
    return 0;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0) != 0)
        return 1;
    pthread_join(t, 0);
    out_str("thread: done\n");
    return 0;
}
