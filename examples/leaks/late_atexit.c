/* Exit handlers registered before the tracer's: a library's.
 *
 * One source, built twice:
 *   gcc -g -O0 -shared -fPIC -DLATE_LIB -o liblate_atexit.so late_atexit.c
 *   gcc -g -O0 -o late_atexit late_atexit.c -L. -llate_atexit -Wl,-rpath,.
 *
 * The library's constructor (which the loader runs before a preloaded
 * library's) allocates a table of 4 pointers to 100-byte blocks and
 * registers an exit handler that frees the table alone, as the destructor
 * of a C++ global container of raw pointers does. That handler runs after
 * every handler registered later, the tracer's included.
 *
 * valgrind 3.19 (--leak-check=full --show-leak-kinds=all
 * --run-libc-freeres=no), which checks after every handler ran:
 *   definitely lost: 400 bytes in 4 blocks, nothing else live.
 * Traced, the scan used to run in the tracer's own handler, before the
 * table was freed: 432 bytes in 5 blocks "still reachable", no leak. */
#include <stdlib.h>

#ifdef LATE_LIB
static void **table;

static void free_table(void) {
    free(table);
}

__attribute__((constructor)) static void make_table(void) {
    table = malloc(4 * sizeof(void *));
    for (int i = 0; i < 4; i++)
        table[i] = malloc(100);
    atexit(free_table);
}

int late_atexit_blocks(void) {
    return 4;
}
#else
#include "../out.h"

int late_atexit_blocks(void);

int main(void) {
    out_str("late_atexit: ");
    out_u64((unsigned long long)late_atexit_blocks());
    out_str(" blocks in the library's table\n");
    return 0;
}
#endif
