/* Killed by SIGKILL, which no handler sees, after a pause.
 *
 * Makes 100 allocations of 48 bytes and frees the first 40:
 *   allocation calls 100, frees 40, bytes allocated 4,800,
 *   live 2,880 bytes in 60 blocks.
 * Then sleeps 300 ms and sends itself SIGKILL. A trace of it can only be
 * what the tracer flushed before the signal: its spool, to recover.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "out.h"

static void *blocks[100];

int main(void)
{
    for (int i = 0; i < 100; i++) {
        blocks[i] = malloc(48);
        memset(blocks[i], i, 48);
    }
    for (int i = 0; i < 40; i++)
        free(blocks[i]);
    out_str("sleeping\n");
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    kill(getpid(), SIGKILL);
    return 0;
}
