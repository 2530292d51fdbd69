/* A 10-deep call chain whose leaf allocates: main -> f1 -> f2 -> ... -> f10
 * -> malloc(4242). Built with -g -O0 -fno-omit-frame-pointer (and noinline),
 * so every function keeps its own frame.
 *
 * Expected figures: allocation calls 1 (4242 bytes, live at exit), frees 0.
 * The allocation's stack, innermost first, symbolizes as
 *   f10, f9, f8, f7, f6, f5, f4, f3, f2, f1, main
 * (followed by the C library's start-up frames), each in chain10.c. */
#include <stdlib.h>
#include "out.h"

void *volatile keep;

#define NOINLINE __attribute__((noinline))
NOINLINE void *f10(void) { void *p = malloc(4242); return p; }
NOINLINE void *f9(void) { void *p = f10(); return p; }
NOINLINE void *f8(void) { void *p = f9(); return p; }
NOINLINE void *f7(void) { void *p = f8(); return p; }
NOINLINE void *f6(void) { void *p = f7(); return p; }
NOINLINE void *f5(void) { void *p = f6(); return p; }
NOINLINE void *f4(void) { void *p = f5(); return p; }
NOINLINE void *f3(void) { void *p = f4(); return p; }
NOINLINE void *f2(void) { void *p = f3(); return p; }
NOINLINE void *f1(void) { void *p = f2(); return p; }

int main(void) {
    keep = f1();
    out_str("chain10: done\n");
    return 0;
}
