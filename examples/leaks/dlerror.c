/* A failed dlsym leaves its error for dlerror(): glibc keeps it in a block
 * (24 bytes) held by a thread-local pointer of the C library's, with the
 * message in a second one (its length depends on the program's path).
 *
 * Build: gcc -g -O0 -o dlerror dlerror.c
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./dlerror    (valgrind 3.19, glibc 2.36):
 *   definitely lost: 0 bytes in 0 blocks
 *   still reachable: 24 + the message's bytes in 2 blocks
 *
 * Traced, both were reported definitely lost: the tracer's own dlsym at
 * exit (looking up glibc's exit) ran glibc's error bookkeeping on the
 * exiting thread, which dropped the program's pending error. */
#include <dlfcn.h>
#include "../out.h"

int main(void) {
    void *self = dlopen(0, RTLD_NOW);
    if (dlsym(self, "no_such_symbol_in_this_program") != 0)
        return 1;
    out_str("dlerror: lookup failed as expected\n");
    return 0;
}
