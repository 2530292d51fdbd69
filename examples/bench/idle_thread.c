/* Control for the syscall benchmark: preloaded, it starts one thread that
 * sleeps for the whole run and does nothing else.
 *
 * Build: cc -O2 -shared -fPIC -pthread idle_thread.c -o idle_thread.so
 *
 * libtracer's writer is a second thread in the traced process. On some
 * kernels (this project's CI guest among them) every system call of a
 * process costs more while another thread shares its address space, traced
 * or not; running the untraced program with this library preloaded measures
 * that cost alone, so the benchmark can tell it apart from the tracer's own.
 */
#include <pthread.h>
#include <unistd.h>

static void *sleeper(void *arg)
{
    for (;;)
        pause();
    return arg;
}

__attribute__((constructor)) static void start_idle_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL) == 0)
        pthread_detach(t);
}
