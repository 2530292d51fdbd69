/* The floor of recording a complete stack per allocation, for comparison only:
 * a preload whose malloc walks the frame-pointer chain (up to 64 frames, within
 * 8 MiB above its own frame) and sums the return addresses before calling
 * glibc's allocator; nothing else (no clock, no deduplication, no hand-off, no
 * writer, no file). Whatever a real tracer does costs at least this.
 *
 *   gcc -O2 -shared -fPIC -fno-omit-frame-pointer fp_walk_floor.c -o fp_walk_floor.so
 *   perf stat -e task-clock env LD_PRELOAD=$PWD/fp_walk_floor.so ./chain_fp
 */
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

static volatile uintptr_t sink;

void *malloc(size_t n)
{
    uintptr_t *fp = __builtin_frame_address(0);
    uintptr_t lo = (uintptr_t)fp, hi = lo + (8u << 20), sum = 0;
    for (int i = 0; i < 64 && (uintptr_t)fp >= lo && (uintptr_t)fp < hi && ((uintptr_t)fp & 7) == 0;
         i++) {
        uintptr_t ret = fp[1];
        if (!ret)
            break;
        sum += ret;
        uintptr_t *next = (uintptr_t *)fp[0];
        if (next <= fp)
            break;
        fp = next;
    }
    sink = sum;
    return __libc_malloc(n);
}

void free(void *p)
{
    __libc_free(p);
}
