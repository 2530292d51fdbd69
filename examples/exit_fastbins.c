/* The program's small free chunks are still in glibc's fast bins when the
 * process has finished exiting: the tracer's exit work must not make glibc
 * consolidate them.
 *
 * Two parts of one file:
 *   gcc -g -O0 -o exit_fastbins exit_fastbins.c
 *   gcc -g -O0 -shared -fPIC -DSTREAM_LIB -o libexit_fastbins.so exit_fastbins.c
 * Run with the library preloaded after libtracer.so
 * (LD_PRELOAD=libtracer.so:libexit_fastbins.so, or the library alone
 * untraced): glibc runs the constructors of preloaded objects from the last
 * to the first, so the library's stream is opened before the tracer's, and
 * exit(), which flushes every stream the newest first, flushes it after
 * the tracer has done its exit work in its own.
 *
 * The library's constructor opens a stdio stream over callbacks
 * (fopencookie) and leaves one byte pending in it. main allocates 1,000
 * blocks of 32 bytes and frees them: 7 go to the thread's cache, the rest
 * to the fast bins. main prints how many of its blocks glibc served from a
 * chunk of another size than a fresh 32-byte block's (a free chunk of
 * 64 bytes left by someone else is handed out whole for a 32-byte request:
 * such a block goes to that size's cache when freed, not to the fast bin
 * counted), then returns. The stream's write callback reads mallinfo2()
 * and prints how many chunks the fast bins hold (write(2), no stdio).
 *
 * Untraced output (glibc 2.36: a tcache of 7 per size, fast bins up to
 * 128 bytes):
 *   exit_fastbins: 0 blocks in chunks of another size
 *   exit_fastbins: 993 chunks in the fast bins at the end
 * Traced, the fast bins hold at least 993 less the blocks of another size
 * (the tracer's own frees may add chunks). The tracer's exit work used to
 * allocate an 8 KiB stdio buffer in the main arena, which made glibc
 * consolidate the fast bins first: 13 chunks at the end, and a program
 * with a large heap of freed small blocks (perl, cc1plus) paid ~13% of its
 * run for it. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include "out.h"

#ifdef STREAM_LIB
static ssize_t on_write(void *cookie, const char *buf, size_t size) {
    (void)cookie;
    (void)buf;
    struct mallinfo2 mi = mallinfo2();
    out_str("exit_fastbins: ");
    out_u64((unsigned long long)mi.smblks);
    out_str(" chunks in the fast bins at the end\n");
    return (ssize_t)size;
}

__attribute__((constructor)) static void open_stream(void) {
    cookie_io_functions_t io = {.write = on_write};
    FILE *f = fopencookie(NULL, "w", io);
    static char buf[16];
    if (!f || setvbuf(f, buf, _IOFBF, sizeof buf) != 0 || fputc('.', f) == EOF)
        _exit(1);
}
#else
void *volatile blocks[1000];

int main(void) {
    size_t fresh = 0, other = 0;
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(32);
    /* The usable size of a block most of them share: a fresh chunk's. */
    for (int i = 0; i < 1000; i++) {
        size_t n = malloc_usable_size(blocks[i]);
        if (fresh == 0 || n < fresh)
            fresh = n;
    }
    for (int i = 0; i < 1000; i++)
        other += malloc_usable_size(blocks[i]) != fresh;
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);
    out_str("exit_fastbins: ");
    out_u64((unsigned long long)other);
    out_str(" blocks in chunks of another size\n");
    return 0;
}
#endif
