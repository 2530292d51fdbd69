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
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../out.h"

/* With "fork": between the failed dlsym and dlerror(), a fork and a wait
 * (functions the tracer wraps, whose first call made it look glibc's up
 * with dlsym, which cleared the pending error: dlerror() returned NULL).
 * Prints whether the error was still there.
 * With "signal": a call of signal() there instead (the tracer's signal()
 * looked glibc's up at every call). */
int main(int argc, char **argv) {
    void *self = dlopen(0, RTLD_NOW);
    if (dlsym(self, "no_such_symbol_in_this_program") != 0)
        return 1;
    if (argc > 1) {
        if (strcmp(argv[1], "signal") == 0) {
            signal(SIGUSR1, SIG_IGN);
        } else {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            waitpid(pid, 0, 0);
        }
        out_str(dlerror() ? "dlerror: the pending error is kept\n"
                          : "dlerror: the pending error was lost\n");
        return 0;
    }
    out_str("dlerror: lookup failed as expected\n");
    return 0;
}
