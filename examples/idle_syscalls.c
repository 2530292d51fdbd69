/* System calls after a long idle time, then SIGKILL.
 *
 * Sleeps 520 ms doing nothing (the tracer's writer then sleeps 100 ms at a
 * time), opens /dev/null and writes one byte to it 5 times, sleeps 60 ms,
 * and sends itself SIGKILL by the system call instruction (as another process
 * would: no hook of the tracer sees it). Captured with TRACER_FORMAT=tlv,
 * the 5 writes must be in the file: the first record after the idle time
 * wakes the writer, which flushes as soon as the program pauses. */
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "out.h"

int main(void)
{
    struct timespec quiet = {0, 520 * 1000 * 1000};
    struct timespec pause = {0, 60 * 1000 * 1000};
    nanosleep(&quiet, NULL);
    int fd = open("/dev/null", O_WRONLY);
    for (int i = 0; i < 5; i++)
        if (write(fd, "x", 1) != 1)
            return 1;
    nanosleep(&pause, NULL);
    sigkill_self_unseen();
    return 0;
}
