/* syscall_threads: three threads write to /dev/null, each with its own size.
 *
 * Thread i (0, 1, 2) makes 10 write(fd, buf, i + 1) calls, each returning
 * i + 1. The main thread opens /dev/null (fd 3), creates the threads (one
 * clone3 each: the result is the new thread's id), joins them, closes fd 3
 * and writes "threads: done\n" (14 bytes) to stdout. So the trace holds
 * 30 writes of sizes 1, 2, 3 made by exactly three thread ids other than the
 * main thread's, those being the results of the three clone3 records, in
 * creation order. The threads wait on a barrier until all three exist: a
 * thread that has already ended when pthread_create returns has lost its id,
 * and its clone3 record then says 0 (see docs/formats/syscall-tlv.md). */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

static int null_fd;
static const char bytes[] = "abc";
static pthread_barrier_t all_created;

static void *worker(void *arg) {
    long size = (long)arg;
    pthread_barrier_wait(&all_created);
    for (int k = 0; k < 10; k++)
        write(null_fd, bytes, (size_t)size);
    return NULL;
}

int main(void) {
    pthread_t t[3];
    null_fd = open("/dev/null", O_WRONLY);
    pthread_barrier_init(&all_created, NULL, 4);
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    pthread_barrier_wait(&all_created);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    close(null_fd);
    write(1, "threads: done\n", 14);
    return 0;
}
