/* A leak in a forked child: the child allocates 80 bytes, loses the pointer
 * and exits; the parent waits for it and leaks nothing.
 *
 * Build: gcc -g -O0 -o fork fork.c
 * Reading the code: the parent frees its only block (16 bytes) before the
 * fork; the child inherits nothing live and leaks one 80-byte block.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./fork        (valgrind 3.19, glibc 2.36;
 *          one report per process):
 *   child:  definitely lost: 80 bytes in 1 blocks; nothing else
 *           total heap usage: 2 allocs, 1 frees, 96 bytes allocated
 *           (the parent's 16-byte block is counted in the child's history)
 *   parent: All heap blocks were freed -- no leaks are possible
 *           total heap usage: 1 allocs, 1 frees, 16 bytes allocated */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../out.h"

void *volatile sink;

__attribute__((noinline)) static void child_leak(void) {
    sink = malloc(80);
    sink = 0;
}

int main(void) {
    void *p = malloc(16);
    free(p);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        child_leak();
        out_str("fork: child done\n");
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    out_str("fork: parent done\n");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
