// C++ new / new[] / delete / delete[] reach the C allocator through libstdc++.
//
// Before main, libstdc++ (GCC 12) allocates its emergency exception-handling
// pool with malloc: 72,704 bytes, never freed (with --run-cxx-freeres=no).
//
// Expected figures:
//   [pre-main] libstdc++ pool       alloc 72704 (live at exit)
//   new int(5)                      alloc 4, deleted
//   new Counted[10]                 alloc 48 = 10 * 4 + an 8-byte array cookie
//                                   (Counted has a destructor, so new[] stores
//                                   the element count before the array), delete[]d
//   new int[25]                     alloc 100, delete[]d
//   new long[4]                     alloc 32, leaked
//   new (std::nothrow) char[1<<62]  the malloc fails (records nothing); GCC 12's
//                                   nothrow operator new[] is written as a
//                                   try/catch around the throwing one, so
//                                   libstdc++ throws std::bad_alloc inside:
//                                   __cxa_allocate_exception mallocs 136 bytes
//                                   (128-byte exception header + 8-byte
//                                   bad_alloc), freed when caught; returns nullptr
//   allocation calls 6, frees 4, bytes allocated 73024,
//   live at exit 72736 bytes in 2 blocks.
//   valgrind replaces operator new (nothrow) itself, so it never sees the
//   internal throw: it reports exactly 1 allocation, 1 free and 136 bytes fewer
//   (5 allocs, 3 frees, 72,888 bytes; in use at exit the same 72,736 in 2).
#include <new>
#include <cstddef>
#include <unistd.h>
#include <cstring>

static int destroyed = 0;

struct Counted {
    int v;
    Counted() : v(7) {}
    ~Counted() { destroyed++; }
};

long *volatile keep;
volatile std::size_t huge = std::size_t(1) << 62;

static void say(const char *s) { ssize_t r = write(1, s, std::strlen(s)); (void)r; }

int main() {
    int *i = new int(5);
    delete i;
    Counted *arr = new Counted[10];
    delete[] arr;
    int *ints = new int[25];
    ints[24] = 1;
    delete[] ints;
    keep = new long[4];
    char *big = new (std::nothrow) char[huge];
    say(big == nullptr ? "nothrow_null=1\n" : "nothrow_null=0\n");
    say(destroyed == 10 ? "destroyed=10\n" : "destroyed=wrong\n");
    keep = nullptr;
    return 0;
}
