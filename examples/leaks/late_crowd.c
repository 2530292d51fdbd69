/* Thousands of blocks live at exit, most of them allocated after libtracer
 * stopped keeping exact sizes in its table: at exit it writes the trace on
 * a thread of its own (1,024 live blocks or more) while its scan reads the
 * later blocks' sizes back from the same trace.
 *
 * libtracer keeps the exact size of a block allocated while fewer than
 * 8,192 blocks keep theirs; blocks 8,192..9,999 here get theirs from the
 * trace at exit.
 *
 * Build: gcc -g -O0 -o late_crowd late_crowd.c
 * Reading the code: 10,000 blocks of 40 + i % 50 bytes (645,000 bytes:
 * 10,000 * 40 + 200 * (0 + 1 + .. + 49)), pointed to from a global array;
 * then the pointers to the ten blocks i = 9,980, 9,982, .., 9,998 are
 * dropped (sizes 70, 72, .., 88: 790 bytes).
 *   definitely lost: 790 bytes in 10 blocks
 *   indirectly lost, possibly lost: 0
 *   still reachable: 644,210 bytes in 9,990 blocks
 * Nothing else is allocated (output goes through write(2), see ../out.h). */
#include <stdlib.h>
#include "../out.h"

#define MANY 10000

static void *many[MANY];

int main(void) {
    for (int i = 0; i < MANY; i++)
        many[i] = malloc(40 + i % 50);
    for (int i = MANY - 20; i < MANY; i += 2)
        many[i] = 0;
    out_str("late_crowd: done\n");
    return 0;
}
