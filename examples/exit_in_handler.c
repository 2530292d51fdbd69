/* Allocates in a loop until a signal ends it, as a busy program is ended:
 * a signal can arrive while the thread is inside the C library's malloc,
 * holding the allocator's lock.
 *
 * Usage: exit_in_handler MODE [MS]
 *   timer    a SIGALRM handler calls exit(0) after MS milliseconds (default
 *            20): exit from a handler, as programs with a timeout or a
 *            SIGINT handler do (not async-signal-safe, and common). Exit
 *            status 0.
 *   forever  runs until a signal ends it (the test sends SIGTERM, left at
 *            its default disposition).
 *
 * The loop keeps 64 blocks of 16 to 215 bytes live and replaces one per
 * turn; how many turns run depends on the timing, so no figure is exact but
 * this: every allocation but the 64 live ones was freed. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static void on_alarm(int sig)
{
    (void)sig;
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "timer") == 0) {
        long ms = argc > 2 ? atol(argv[2]) : 20;
        signal(SIGALRM, on_alarm);
        struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    } else if (strcmp(argv[1], "forever") != 0) {
        return 2;
    }
    static void *volatile keep[64];
    for (unsigned long i = 0;; i++) {
        void *p = malloc(16 + (i % 200));
        if (!p)
            abort();
        memset(p, 1, 16);
        unsigned k = i % 64;
        free(keep[k]);
        keep[k] = p;
    }
}
