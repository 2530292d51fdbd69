/* Leaks from both ends of a run: ten blocks lost at the start, five lost
 * while 6,000 others are live at once, then those 6,000 freed.
 *
 * libtracer keeps the exact size of a block allocated while at most 4,096
 * are live, and reads the others back from the trace at exit: the first
 * ten leaks are of the first kind, the last five of the second.
 *
 * Reading the code: leak() allocates and forgets the pointer (line 28);
 * sizes 17..26 first, 33..37 later. A last 16-byte block stays reachable
 * from a global: it keeps glibc's top chunk, whose address the arena holds,
 * away from the lost blocks (a block followed by the top chunk has that
 * address inside it, an interior pointer for a scan of libc's data).
 *   definitely lost: 390 bytes in 15 blocks (215 + 175)
 *   still reachable: 16 bytes in 1 block
 *   indirectly lost, possibly lost: 0
 *   total heap usage: 6,016 allocs, 6,000 frees
 * Nothing else is allocated (output goes through write(2), see ../out.h). */
#include <stdlib.h>
#include "../out.h"

#define MANY 6000

void *volatile sink;
void *volatile last;
static void *many[MANY];

__attribute__((noinline)) void leak(size_t size) {
    sink = malloc(size);
    sink = 0;
}

int main(void) {
    for (int i = 0; i < 10; i++)
        leak(17 + i);
    for (int i = 0; i < MANY; i++)
        many[i] = malloc(40 + i % 50);
    for (int i = 0; i < 5; i++)
        leak(33 + i);
    last = malloc(16);
    for (int i = 0; i < MANY; i++)
        free(many[i]);
    out_str("survivors: done\n");
    return 0;
}
