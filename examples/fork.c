/* fork: parent and child allocate known amounts.
 *
 * Before the fork the parent mallocs 1000 bytes and frees them, so nothing is
 * live when the child is born.
 *
 * Expected figures:
 *   parent: before fork malloc 1000 + free; after the child ends malloc 4444
 *           (kept) and malloc 55 + free.
 *           allocation calls 3, frees 2, bytes allocated 5499,
 *           live at exit 4444 bytes in 1 block.
 *   child (its own calls only): malloc 111 + free, malloc 222 (kept), exit(0).
 *           allocation calls 2, frees 1, bytes allocated 333,
 *           live at exit 222 bytes in 1 block.
 *   valgrind follows the fork and prints a summary for each process; the
 *   child's counters start from the parent's at the fork, so its "total heap
 *   usage" also holds the parent's pre-fork malloc/free: 3 allocs, 2 frees,
 *   1333 bytes; in use at exit 222 bytes in 1 block.
 * Output: the child writes "child: done", then the parent "parent: child
 * exited 0". */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "out.h"

void *volatile keep;

int main(void) {
    char *pre = malloc(1000);
    pre[0] = 1;
    free(pre);
    pid_t pid = fork();
    if (pid == 0) {
        char *a = malloc(111);
        free(a);
        keep = malloc(222);
        out_str("child: done\n");
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    keep = malloc(4444);
    char *b = malloc(55);
    free(b);
    out_str("parent: child exited ");
    out_u64(WIFEXITED(status) ? (unsigned long long)WEXITSTATUS(status) : 999);
    out_str("\n");
    return 0;
}
