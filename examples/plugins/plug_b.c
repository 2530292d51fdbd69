/* The other plugin of examples/plugin_loop.c: one allocation of 2000 + i
 * bytes from a deeper chain, with a large frame. Built without frame
 * pointers, so that its unwind rules differ from plug_a's at the same
 * addresses when the loader maps it where plug_a was. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void *b_leaf(int i)
{
    volatile char pad[200];
    pad[0] = (char)i;
    char *p = malloc(2000 + (size_t)i + (size_t)(pad[0] - (char)i));
    if (p)
        memset(p, 'b', 16);
    return p;
}

__attribute__((noinline)) static void *b_middle(int i)
{
    volatile char pad[40];
    pad[3] = 1;
    void *p = b_leaf(i + pad[3] - 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void *plug_make(int i)
{
    void *p = b_middle(i);
    __asm__ volatile("" ::: "memory");
    return p;
}
