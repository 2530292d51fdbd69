/* Killed by SIGKILL, which no handler sees, after a pause.
 *
 * Makes 100 allocations of 48 bytes and frees the first 40:
 *   allocation calls 100, frees 40, bytes allocated 4,800,
 *   live 2,880 bytes in 60 blocks.
 * Then sleeps 300 ms and sends itself SIGKILL (by the system call instruction, as
 * another process would: no hook of the tracer sees it). A trace of it can only be
 * what the tracer flushed before the signal: its spool, to recover.
 *
 * `killed idle`: first sleeps 520 ms, doing nothing (the tracer's writer
 * then sleeps long), and after the allocations only 60 ms: the writer must
 * have been woken by them to have them in the spool by then.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "out.h"

static void *blocks[100];

int main(int argc, char **argv)
{
    int idle = argc > 1 && strcmp(argv[1], "idle") == 0;
    if (idle) {
        struct timespec quiet = {0, 520 * 1000 * 1000};
        nanosleep(&quiet, NULL);
    }
    for (int i = 0; i < 100; i++) {
        blocks[i] = malloc(48);
        memset(blocks[i], i, 48);
    }
    for (int i = 0; i < 40; i++)
        free(blocks[i]);
    out_str("sleeping\n");
    struct timespec pause = {0, (idle ? 60 : 300) * 1000 * 1000};
    nanosleep(&pause, NULL);
    sigkill_self_unseen();
    return 0;
}
