/* An allocator of its own, preloaded ahead of libtracer.so: the program's
 * malloc, calloc, realloc and free calls reach it first, and it hands them
 * to glibc's under glibc's own names, so libtracer's hooks never see them.
 *
 * Build: gcc -O0 -shared -fPIC -o libahead_malloc.so ahead_malloc.c
 * Run:   LD_PRELOAD=libahead_malloc.so:libtracer.so PROGRAM
 * libtracer names this library on stderr ("... defines malloc ahead of
 * libtracer.so"), also for a program whose own `malloc` symbol is the
 * stub a non-PIE executable gets when it takes malloc's address (python3),
 * which is what a plain lookup of `malloc` finds. */
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
