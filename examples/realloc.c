/* realloc chains: growing, shrinking, realloc(NULL, n), realloc(p, 0),
 * reallocarray.
 *
 * Every realloc of a non-NULL block to a non-zero size counts as one free of
 * the old block and one allocation of the new one, whether or not it moved.
 * realloc(NULL, n) is a malloc. On glibc, realloc(p, 0) frees p and returns
 * NULL: one free, no allocation.
 *
 * Expected figures:
 *   p = realloc(NULL, 16)        alloc 16
 *   p = realloc(p, 32)           free, alloc 32
 *   p = realloc(p, 1024)         free, alloc 1024
 *   p = realloc(p, 8)            free, alloc 8      (shrink; p stays live)
 *   q = malloc(50)               alloc 50
 *   q = realloc(q, 0)            free               (returns NULL)
 *   r = reallocarray(NULL,10,12) alloc 120
 *   r = reallocarray(r, 20, 12)  free, alloc 240
 *   free(r)                      free
 *   allocation calls 7, frees 6, bytes allocated 1490,
 *   live at exit 8 bytes in 1 block.
 *
 * valgrind 3.19 agrees on every line, realloc(q, 0) included: its realloc
 * replacement frees the block and returns NULL for size 0 (counted as one free
 * and no allocation), and it intercepts reallocarray. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "out.h"

void *volatile keep;

int main(void) {
    char *p = realloc(NULL, 16);
    memset(p, 'a', 16);
    p = realloc(p, 32);
    p = realloc(p, 1024);
    p = realloc(p, 8);
    out_kv("kept_a", p[0] == 'a' && p[7] == 'a');
    char *q = malloc(50);
    q = realloc(q, 0);
    out_kv("zero_null", q == NULL);
    int *r = reallocarray(NULL, 10, 12);
    r = reallocarray(r, 20, 12);
    free(r);
    keep = p;
    return 0;
}
