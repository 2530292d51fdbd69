/* A stale pointer in the spare bytes of a live block does not keep a lost
 * block alive: only the requested bytes of a block are scanned.
 *
 * Build: gcc -g -O0 -o slack slack.c
 * Reading the code: `lost` (24 bytes) is allocated and its address stored at
 * offset 112 of a 120-byte block, which is then freed. A 105-byte request
 * follows: glibc serves it with the same 128-byte chunk (tcache), so the
 * address is still there, at bytes 112..120 of the new block, past the 105
 * requested. That block stays reachable through a global; `lost` has no
 * other pointer. Scanning a block's usable size (120) instead of its
 * requested size (105) would find the stale address and call `lost`
 * reachable. Under valgrind the 105-byte block is a fresh one, with nothing
 * at offset 112 either way. The program prints which happened.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./slack    (valgrind 3.19, glibc 2.36):
 *   definitely lost: 24 bytes in 1 blocks
 *   indirectly lost: 0 bytes in 0 blocks
 *     possibly lost: 0 bytes in 0 blocks
 *   still reachable: 105 bytes in 1 blocks
 *   total heap usage: 3 allocs, 1 frees, 249 bytes allocated */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../out.h"

void *kept;
void *volatile sink;
/* Whether the 105-byte block is the 120-byte one again (glibc: yes). */
int reused;

__attribute__((noinline)) void leave_stale_pointer(void) {
    char *lost = malloc(24);
    memset(lost, 0, 24);
    char *first = malloc(120);
    memset(first, 0, 120);
    memcpy(first + 112, &lost, sizeof lost);
    uintptr_t was = (uintptr_t)first;
    free(first);
    kept = malloc(105);
    reused = (uintptr_t)kept == was;
    memset(kept, 0, 105);
    sink = lost;
    sink = 0;
    lost = 0;
}

int main(void) {
    leave_stale_pointer();
    out_str(reused ? "slack: chunk reused\n" : "slack: fresh chunk\n");
    return 0;
}
