/* Loads and unloads two plugins in turn, ROUNDS times each (argv: the two
 * plugin paths, ROUNDS). Each load calls the plugin's plug_make(i), which
 * allocates 1000 + i bytes (plug_a) or 2000 + i bytes (plug_b); the program
 * frees each block, except every tenth round's, which it keeps to the end
 * and frees then (plug_a's destructor also allocates and frees 3000 + i
 * bytes inside dlclose). The plugins are closed before the blocks are freed, and
 * the loader usually maps each one where the other just was. Prints the
 * figures a tracer must report, and how often dlclose changed errno. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s PLUG_A PLUG_B ROUNDS\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[3]);
    void **kept = calloc((size_t)rounds * 2, sizeof(void *));
    int nkept = 0;
    unsigned long allocs = 0, bytes = 0, errno_changed = 0;
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < 2; k++) {
            void *h = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                fprintf(stderr, "%s\n", dlerror());
                return 1;
            }
            void *(*make)(int) = (void *(*)(int))dlsym(h, "plug_make");
            if (!make) {
                fprintf(stderr, "%s\n", dlerror());
                return 1;
            }
            void *p = make(i);
            if (!p)
                return 1;
            allocs++;
            bytes += (k ? 2000 : 1000) + (unsigned long)i;
            errno = 0;
            if (dlclose(h) != 0) {
                fprintf(stderr, "%s\n", dlerror());
                return 1;
            }
            if (errno != 0)
                errno_changed++;
            if (i % 10 == 0)
                kept[nkept++] = p;
            else
                free(p);
        }
    }
    for (int j = 0; j < nkept; j++)
        free(kept[j]);
    free(kept);
    printf("plugin allocations %lu bytes %lu, dlclose changed errno %lu times\n", allocs, bytes,
           errno_changed);
    return 0;
}
