/* A program that defines the allocator itself, as a program linked with a
 * static allocator does (rustc links jemalloc so): the loader finds this
 * executable's malloc before any preloaded library's, so a preloaded tracer
 * never sees the calls of the program's libraries unless it sends their
 * imports to itself.
 *
 * The allocator puts a tagged header before every block and `free` checks
 * it, so a block of another allocator reaching this free, or one of these
 * reaching another allocator, ends the program (exit status 3).
 *
 * Usage: main ROUNDS [PLUGIN | leak]. The library's `lib_work` makes 8
 * allocations per round (see lib.c). With PLUGIN (another build of lib.c),
 * main then loads it with dlopen, runs 64 more rounds of the first
 * library's, sleeps 200 ms (the tracer's writer looks for libraries loaded
 * since within a millisecond or so of the events those rounds made), then
 * runs ROUNDS of the plugin's. With `leak`, main first calls the
 * library's `lib_leak` (three blocks left live, see lib.c). Last, main
 * makes 10 allocations of its own,
 * which no import carries. Prints "ok ROUNDS CHECKSUM" with write(2), so
 * that stdio allocates no buffer. */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

long lib_work(int rounds);
void lib_leak(void);

#define TAG 0x6f776e616c6c6f63ULL

struct head {
    void *base;
    size_t size;
    uint64_t tag;
    uint64_t pad;
};

static void die(const char *why)
{
    write(2, why, strlen(why));
    _exit(3);
}

/* A block of `size` bytes aligned to `align` (a power of two, at least 16). */
static void *block(size_t align, size_t size)
{
    if (size > SIZE_MAX - align - sizeof(struct head)) {
        errno = ENOMEM;
        return NULL;
    }
    char *base = __libc_malloc(size + align + sizeof(struct head));
    if (!base)
        return NULL;
    uintptr_t p = ((uintptr_t)base + sizeof(struct head) + align - 1) & ~(uintptr_t)(align - 1);
    struct head *h = (struct head *)p - 1;
    h->base = base;
    h->size = size;
    h->tag = TAG;
    return (void *)p;
}

static struct head *head_of(void *p)
{
    struct head *h = (struct head *)p - 1;
    if (h->tag != TAG)
        die("own_alloc: a block this allocator did not make\n");
    return h;
}

void *malloc(size_t size) { return block(16, size); }

void free(void *p)
{
    if (!p)
        return;
    struct head *h = head_of(p);
    h->tag = 0;
    __libc_free(h->base);
}

void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = block(16, total);
    if (p)
        memset(p, 0, total);
    return p;
}

void *realloc(void *p, size_t size)
{
    if (!p)
        return block(16, size);
    if (size == 0) {
        free(p);
        return NULL;
    }
    struct head *h = head_of(p);
    void *q = block(16, size);
    if (!q)
        return NULL;
    memcpy(q, p, h->size < size ? h->size : size);
    free(p);
    return q;
}

void *memalign(size_t align, size_t size)
{
    if (align & (align - 1)) {
        errno = EINVAL;
        return NULL;
    }
    return block(align < 16 ? 16 : align, size);
}

void *aligned_alloc(size_t align, size_t size) { return memalign(align, size); }

void *valloc(size_t size) { return block(4096, size); }

int posix_memalign(void **out, size_t align, size_t size)
{
    if (align % sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    void *p = block(align < 16 ? 16 : align, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

size_t malloc_usable_size(void *p) { return p ? head_of(p)->size : 0; }

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    int leak = argc > 2 && strcmp(argv[2], "leak") == 0;
    if (leak)
        lib_leak();
    long sum = lib_work(rounds);
    if (argc > 2 && !leak) {
        void *plugin = dlopen(argv[2], RTLD_NOW);
        if (!plugin)
            die("own_alloc: dlopen failed\n");
        long (*work)(int) = (long (*)(int))dlsym(plugin, "lib_work");
        if (!work)
            die("own_alloc: no lib_work in the plugin\n");
        sum += lib_work(64);
        usleep(200000);
        sum += work(rounds);
    }
    /* The program's own calls: direct, through no import. */
    for (int i = 0; i < 10; i++)
        free(malloc(1000 + i));
    char line[64];
    int n = snprintf(line, sizeof line, "ok %d %ld\n", rounds, sum);
    write(1, line, n);
    return 0;
}
