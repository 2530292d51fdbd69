/* A test shim, preloaded before libtracer: the tracer's writer thread finds
 * no memory.
 *
 * libtracer takes glibc's memory under the __libc_* names. This object
 * defines those names first; on the thread named "libtracer" (the writer),
 * from its FAIL_AFTER-th call on (environment; 1000 by default), they return
 * NULL, as when a program lowered its RLIMIT_AS or the machine ran out of
 * memory. Other threads' calls (the program's, through the hooks) are
 * untouched.
 *
 * Build: gcc -shared -fPIC -O1 -o tracer_heap_fails.so tracer_heap_fails.c */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static long left = -1;

static int failing(void) {
    char name[16] = {0};
    if (prctl(PR_GET_NAME, name) != 0 || strcmp(name, "libtracer") != 0)
        return 0;
    long n = __atomic_load_n(&left, __ATOMIC_RELAXED);
    if (n < 0) {
        const char *s = getenv("FAIL_AFTER");
        n = s ? atol(s) : 1000;
        __atomic_store_n(&left, n, __ATOMIC_RELAXED);
    }
    while (n > 0) {
        if (__atomic_compare_exchange_n(&left, &n, n - 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return 0;
    }
    return 1;
}

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*memalign_fn)(size_t, size_t);

void *__libc_malloc(size_t size) {
    static malloc_fn real;
    if (!real)
        real = (malloc_fn)dlsym(RTLD_NEXT, "__libc_malloc");
    return failing() ? NULL : real(size);
}

void *__libc_calloc(size_t n, size_t size) {
    static calloc_fn real;
    if (!real)
        real = (calloc_fn)dlsym(RTLD_NEXT, "__libc_calloc");
    return failing() ? NULL : real(n, size);
}

void *__libc_realloc(void *p, size_t size) {
    static realloc_fn real;
    if (!real)
        real = (realloc_fn)dlsym(RTLD_NEXT, "__libc_realloc");
    return failing() ? NULL : real(p, size);
}

void *__libc_memalign(size_t align, size_t size) {
    static memalign_fn real;
    if (!real)
        real = (memalign_fn)dlsym(RTLD_NEXT, "__libc_memalign");
    return failing() ? NULL : real(align, size);
}
