/* Leaks from both ends of a run: ten blocks lost at the start, five lost
 * while 10,000 others are live at once, then those 10,000 freed.
 *
 * libtracer keeps the exact size of a block allocated while fewer than
 * 8,192 blocks keep theirs, and reads the others back from the trace at
 * exit: the first ten leaks are of the first kind, the last five of the
 * second.
 *
 * The last lost block (37 bytes, a 48-byte chunk) ends up just below
 * glibc's top chunk once the 10,000 are freed, and the top chunk starts 32
 * bytes into it: the arena in libc's data holds that address. valgrind,
 * which replaces the allocator, has no such pointer; libtracer's scan does
 * not take it for a pointer into the block.
 *
 * Reading the code: leak() allocates and forgets the pointer (line 29);
 * sizes 17..26 first (215 bytes), 33..37 later (175).
 *   definitely lost: 390 bytes in 15 blocks
 *   indirectly lost, possibly lost, still reachable: 0
 *   total heap usage: 10,015 allocs, 10,000 frees
 * Nothing else is allocated (output goes through write(2), see ../out.h). */
#include <stdlib.h>
#include "../out.h"

#define MANY 10000

void *volatile sink;
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
    for (int i = 0; i < MANY; i++)
        free(many[i]);
    out_str("survivors: done\n");
    return 0;
}
