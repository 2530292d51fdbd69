/* A program that closes its stderr and opens a file of its own, which gets
 * descriptor 2 (coreutils close stderr before they exit; daemons reuse the
 * number for a log). The file must hold what the program wrote, nothing of
 * the tracer's (its exit summary went there).
 *
 * Usage: stderr_reused FILE. Writes "mine\n" into FILE, allocates and frees
 * 1000 blocks, prints "fd 2" (the file's descriptor), exits 0. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "out.h"

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    close(2);
    int fd = open(argv[1], O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0)
        return 1;
    if (write(fd, "mine\n", 5) != 5)
        return 1;
    for (int i = 0; i < 1000; i++)
        free(malloc(i + 1));
    out_str("fd ");
    out_u64((unsigned long long)fd);
    out_str("\n");
    return 0;
}
