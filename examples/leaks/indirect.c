/* An indirect leak: a leaked struct holds the only pointers to two other
 * blocks, one of which points to a third.
 *
 * Build: gcc -g -O0 -o indirect indirect.c
 * Reading the code: make_tree() allocates the root (struct pair, 16 bytes),
 * its left child (40 bytes) and right child (60 bytes), and the left child
 * holds a pointer to a 24-byte block. The root's pointer is lost: the root is
 * definitely lost; the three blocks reachable only through it are indirectly
 * lost.
 *
 * valgrind --leak-check=full --show-leak-kinds=all --run-libc-freeres=no
 *          --run-cxx-freeres=no ./indirect    (valgrind 3.19, glibc 2.36):
 *   definitely lost: 16 bytes in 1 blocks    (the root, 116 bytes direct+indirect)
 *   indirectly lost: 124 bytes in 3 blocks   (40 + 60 + 24)
 *     possibly lost: 0 bytes in 0 blocks
 *   still reachable: 0 bytes in 0 blocks
 *   total heap usage: 4 allocs, 0 frees, 140 bytes allocated */
#include <stdlib.h>
#include <string.h>
#include "../out.h"

struct pair {
    void *left;
    void *right;
};

void *volatile sink;

__attribute__((noinline)) void make_tree(void) {
    struct pair *root = malloc(sizeof *root);
    root->left = calloc(1, 40);
    root->right = calloc(1, 60);
    *(void **)root->left = calloc(1, 24);
    sink = root;
    sink = 0;
    root = 0;
}

int main(void) {
    make_tree();
    out_str("indirect: done\n");
    return 0;
}
