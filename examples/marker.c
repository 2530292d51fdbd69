/* Markers: the program looks up tracer_marker with dlsym(RTLD_DEFAULT) and,
 * when a tracer provides it, marks the phases around one allocation.
 *
 * Expected under libtracer: markers "phase-start", then malloc 77 (live),
 * then "phase-end". Program's own figures: allocation calls 1, frees 0,
 * bytes allocated 77, live at exit 77 bytes in 1 block. The output does not
 * depend on whether the tracer is there. (Without a tracer, dlsym fails and
 * glibc allocates its dlerror state; that is why there is no valgrind
 * cross-check of this example.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include "out.h"

void *volatile keep;

int main(void) {
    void (*marker)(const char *) = (void (*)(const char *))dlsym(RTLD_DEFAULT, "tracer_marker");
    if (marker)
        marker("phase-start");
    keep = malloc(77);
    if (marker)
        marker("phase-end");
    out_str("marker: done\n");
    return 0;
}
