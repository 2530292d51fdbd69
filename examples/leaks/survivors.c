/* Leaks from both ends of a run: ten blocks lost at the start, five lost
 * while 6,000 others are live at once, then those 6,000 freed.
 *
 * libtracer keeps the exact size of a block allocated while at most 1,024
 * are live, and reads the others back from the trace at exit: the first
 * ten leaks are of the first kind, the last five of the second.
 *
 * Reading the code: leak() allocates and forgets the pointer (line 28);
 * sizes 25 + i % 8 for i < 10 first (279 bytes), 41..45 later (215).
 *   definitely lost: 494 bytes in 15 blocks
 *   indirectly lost, possibly lost, still reachable: 0
 *   total heap usage: 6,015 allocs, 6,000 frees
 * The sizes are chosen so that the chunk after each block starts past its
 * requested bytes: glibc's arena holds the address of the chunk after a
 * block once that chunk is free (or is the top chunk), which a scan of
 * libc's data would read as an interior pointer to a lost block whose last
 * requested bytes overlap that chunk's header (sizes 17..24, 33..40, ...).
 * Nothing else is allocated (output goes through write(2), see ../out.h). */
#include <stdlib.h>
#include "../out.h"

#define MANY 6000

void *volatile sink;
static void *many[MANY];

__attribute__((noinline)) void leak(size_t size) {
    sink = malloc(size);
    sink = 0;
}

int main(void) {
    for (int i = 0; i < 10; i++)
        leak(25 + i % 8);
    for (int i = 0; i < MANY; i++)
        many[i] = malloc(40 + i % 50);
    for (int i = 0; i < 5; i++)
        leak(41 + i);
    for (int i = 0; i < MANY; i++)
        free(many[i]);
    out_str("survivors: done\n");
    return 0;
}
