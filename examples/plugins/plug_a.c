/* A plugin for examples/plugin_loop.c: one allocation of 1000 + i bytes,
 * made two calls below the entry point, and one of 3000 + i bytes by its
 * destructor, which runs inside dlclose (then freed). Built with frame
 * pointers. */
#include <stdlib.h>
#include <string.h>

static int last = -1;

__attribute__((noinline)) static void *a_inner(int i)
{
    char *p = malloc(1000 + (size_t)i);
    if (p)
        memset(p, 'a', 16);
    return p;
}

__attribute__((noinline)) void *plug_make(int i)
{
    last = i;
    void *p = a_inner(i);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((destructor)) static void a_fini(void)
{
    if (last >= 0)
        free(a_inner(2000 + last));
}
