/* Output helpers for the example programs.
 *
 * stdio allocates its buffer with malloc on first use (4096 bytes for a pipe,
 * 1024 for a terminal), which would add a call that depends on where stdout
 * goes. These helpers write(2) straight from the stack, so the examples' heap
 * figures do not depend on how they are run. */
#ifndef EXAMPLES_OUT_H
#define EXAMPLES_OUT_H
#include <string.h>
#include <unistd.h>

/* Sends this process SIGKILL with the system call instruction itself, as
 * another process's kill would arrive: neither libc's kill nor syscall()
 * (both hooked by the tracer, which finishes its files first) sees it. */
static inline void sigkill_self_unseen(void) {
    long pid, ret;
    __asm__ volatile("syscall" : "=a"(pid) : "0"(39L) /* getpid */ : "rcx", "r11", "memory");
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"(62L) /* kill */, "D"(pid), "S"(9L) /* SIGKILL */
                     : "rcx", "r11", "memory");
    (void)ret;
}

static inline void out_str(const char *s) {
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = write(1, s, len);
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

static inline void out_u64(unsigned long long v) {
    char buf[24];
    int i = 23;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out_str(buf + i);
}

/* "label=value\n" */
static inline void out_kv(const char *label, unsigned long long v) {
    out_str(label);
    out_str("=");
    out_u64(v);
    out_str("\n");
}
#endif
