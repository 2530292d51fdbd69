/* main ends with pthread_exit while its worker runs on: the process ends
 * when the worker returns (glibc calls exit(0) as its last thread ends).
 * The worker first waits until main is gone (100 ms), then allocates.
 *
 * Build: gcc -g -O0 -pthread -o main_exit main_exit.c
 * Reading the code: worker() loses one 48-byte block and keeps one of 64 in
 * a global. Besides, glibc's pthread_exit loads libgcc_s to unwind main's
 * stack (blocks of the loader's, reachable or possibly lost).
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./main_exit      (valgrind 3.19, glibc 2.36):
 *   definitely lost: 48 bytes in 1 blocks    (worker)
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 2,576 bytes in 2 blocks (the DTV, the loader's)
 *   still reachable: 1,886 bytes in 6 blocks (kept, the loader's)
 *
 * Traced, the tracer's writer thread must not keep the process alive once
 * the worker is gone (it did: the process never ended). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "../out.h"

void *volatile sink;
void *volatile kept;

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    usleep(100000);
    kept = malloc(64);
    /* The lost block last: the writer's stack held its address from the
     * event it handled last, and that stack was scanned as the exiting
     * thread's (48 bytes reachable, where valgrind and LeakSanitizer say
     * definitely lost). */
    sink = malloc(48);
    sink = 0;
    out_str("main_exit: worker done\n");
    return 0;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0) != 0)
        return 1;
    pthread_exit(0);
}
