/* THREADS threads load, call and unload two plugins in turn, ROUNDS times
 * each (argv: the two plugin paths, ROUNDS, THREADS): in round i, thread k
 * loads plugin (i + k) % 2 and calls its plug_make(i) (examples/plugins:
 * 1000 + i bytes from plug_a, 2000 + i from plug_b), frees the block, and
 * closes the plugin. The threads run at once, so a plugin is often still
 * held by another thread when one closes it, and the loader maps the
 * plugins at addresses the other one held before. Prints the calls made. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char *paths[2];
static int rounds;

static void *worker(void *arg)
{
    long k = (long)arg;
    unsigned long calls = 0;
    for (int i = 0; i < rounds; i++) {
        void *h = dlopen(paths[(i + k) % 2], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            exit(1);
        }
        void *(*make)(int) = (void *(*)(int))dlsym(h, "plug_make");
        if (!make) {
            fprintf(stderr, "%s\n", dlerror());
            exit(1);
        }
        free(make(i));
        calls++;
        if (dlclose(h) != 0) {
            fprintf(stderr, "%s\n", dlerror());
            exit(1);
        }
    }
    return (void *)calls;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s PLUG_A PLUG_B ROUNDS THREADS\n", argv[0]);
        return 2;
    }
    paths[0] = argv[1];
    paths[1] = argv[2];
    rounds = atoi(argv[3]);
    int threads = atoi(argv[4]);
    if (threads < 1 || threads > 64)
        return 2;
    pthread_t t[64];
    for (long k = 0; k < threads; k++)
        pthread_create(&t[k], NULL, worker, (void *)k);
    unsigned long calls = 0;
    for (int k = 0; k < threads; k++) {
        void *r;
        pthread_join(t[k], &r);
        calls += (unsigned long)r;
    }
    printf("%lu plugin calls\n", calls);
    return 0;
}
