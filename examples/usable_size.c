/* usable_size: asks malloc_usable_size about every block and writes into
 * all of its usable bytes. Built linked with another allocator (the tests
 * link it with jemalloc and with tcmalloc), it checks that a tracer which
 * interposes malloc keeps one allocator behind both: the blocks malloc
 * returns and the answers malloc_usable_size gives must come from the same
 * one (asked about a block of another, jemalloc's crashed).
 *
 * Expected figures (N = 100000): N calls malloc(24 + i % 200), each freed:
 * allocation calls N, frees N, bytes allocated sum(24 + i % 200) =
 * 12,350,000, nothing live at exit.
 * Output: "ok 100000" (blocks whose usable size covers the request). */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include "out.h"

int main(void) {
    unsigned long long fit = 0;
    for (int i = 0; i < 100000; i++) {
        size_t want = 24 + i % 200;
        char *p = malloc(want);
        size_t usable = malloc_usable_size(p);
        memset(p, 1, usable);
        fit += usable >= want;
        free(p);
    }
    out_str("ok ");
    out_u64(fit);
    out_str("\n");
    return 0;
}
