/* A program that fails by itself without leaking: one block allocated and
 * freed, then exit status 3. `tracer run --leak-check --fail-on-leak` must
 * pass the 3 on (there is no leak to turn it into 23).
 *
 * valgrind --leak-check=full ./fails: All heap blocks were freed;
 * total heap usage: 1 allocs, 1 frees, 40 bytes allocated; exit status 3. */
#include <stdlib.h>
#include "../out.h"

int main(void) {
    void *p = malloc(40);
    free(p);
    out_str("fails: exiting with 3\n");
    return 3;
}
