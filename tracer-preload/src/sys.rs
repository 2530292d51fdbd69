//! The few raw facilities of the C library and the kernel the tracer uses.
//!
//! glibc exports its allocator under `__libc_*` names as well as the public
//! ones we replace. Calling those directly means the tracer never needs `dlsym`
//! to find the real allocator, so there is no bootstrap recursion while the
//! dynamic loader runs. Everything that must not re-enter our own exported
//! symbols (`close`, `execve`, `_exit`, …) goes through raw system calls here.

use libc::{c_int, c_void, size_t};

extern "C" {
    pub fn __libc_malloc(size: size_t) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void;
    pub fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    pub fn __libc_valloc(size: size_t) -> *mut c_void;
    pub fn __libc_pvalloc(size: size_t) -> *mut c_void;
    pub fn __libc_mallopt(param: c_int, value: c_int) -> c_int;
}

/// The calling thread's `errno`.
#[inline]
pub fn errno() -> c_int {
    // SAFETY: the location is this thread's errno (`__errno_location`,
    // cached per thread).
    unsafe { *crate::tls::hot().errno_location() }
}

#[inline]
pub fn set_errno(value: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *crate::tls::hot().errno_location() = value }
}

/// Runs `f` and gives `errno` back the value it had before (for the rare
/// slow paths of the hooks: allocating, waking or waiting for the writer).
#[inline]
pub fn keep_errno<R>(f: impl FnOnce() -> R) -> R {
    let saved = errno();
    let r = f();
    set_errno(saved);
    r
}

/// The process id as the kernel sees it now (never a cached value: a `vfork`
/// child shares our memory but has its own pid).
pub fn raw_getpid() -> u32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

pub fn raw_gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Nanoseconds since the Unix epoch: the tracer's one clock, for events and
/// system calls alike (the time-stamp counter when fit, else the vDSO's
/// `CLOCK_REALTIME`; see `clock`).
#[inline]
pub fn now_ns() -> u64 {
    crate::clock::now_ns()
}

/// Sleeps with the raw system call: unlike libc's `nanosleep` it is not a
/// thread-cancellation point, so a program's `pthread_cancel` can never start
/// unwinding a thread while it is inside one of our hooks (our frames cannot be
/// unwound through: the library is built to abort on unwinding).
pub fn sleep_us(us: u64) {
    let ts = libc::timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null.
    unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts as *const libc::timespec,
            core::ptr::null_mut::<libc::timespec>(),
        )
    };
}

/// Waits while `word` holds `expected`, at most `max` (or until woken).
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, expected: u32, max: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: max.as_nanos().min(999_999_999) as libc::c_long,
    };
    // SAFETY: futex wait on a live atomic word with a valid timeout; it returns
    // at once if the word no longer holds `expected`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes one waiter of `futex_wait` on `word`.
pub fn futex_wake(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: futex wake on a live atomic word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

/// Writes all of `bytes` to a descriptor with raw `write`, retrying on EINTR
/// and short writes; used for stderr messages and the manifest.
pub fn write_all_fd(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live slice `bytes`.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// One line on stderr, prefixed `libtracer: `. `errno` is preserved.
pub fn stderr_line(text: &str) {
    let saved = errno();
    let line = format!("libtracer: {text}\n");
    write_all_fd(2, line.as_bytes());
    set_errno(saved);
}

/// Closes a descriptor without going through our own `close` hook.
pub fn raw_close(fd: c_int) -> c_int {
    // SAFETY: close on any integer is memory-safe.
    unsafe { libc::syscall(libc::SYS_close, fd) as c_int }
}

/// Duplicates `fd` to the lowest free descriptor >= `min`, close-on-exec.
pub fn dup_high(fd: c_int, min: c_int) -> c_int {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes an integer argument only.
    unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) }
}

/// The lowest descriptor number we park our trace files at: near the top of
/// the soft limit, where programs rarely look, but below it so it is valid.
pub fn high_fd_base() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    let soft = if ok { lim.rlim_cur } else { 1024 };
    let soft = soft.min(1 << 20) as c_int;
    (soft - 64).max(16)
}

/// Ends the whole process at once (the `_exit` system call), without running
/// anything of ours or the program's.
pub fn raw_exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group never returns.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// Start and end of this library's executable segment, found from our own ELF
/// program headers in memory (no loader lock, no allocation), so stacks can drop
/// the tracer's own frames however the compiler inlined them.
pub fn own_text_range() -> (u64, u64) {
    extern "C" {
        // Defined by the linker at the start of this object's ELF header.
        static __ehdr_start: libc::Elf64_Ehdr;
    }
    // SAFETY: __ehdr_start is the mapped ELF header of this shared object; its
    // program headers are mapped too (they sit in the first PT_LOAD segment).
    unsafe {
        let ehdr = core::ptr::addr_of!(__ehdr_start);
        let base_addr = ehdr as u64;
        let phdrs = (base_addr + (*ehdr).e_phoff) as *const libc::Elf64_Phdr;
        let mut first_vaddr = None;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for i in 0..(*ehdr).e_phnum as usize {
            let ph = &*phdrs.add(i);
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let first = *first_vaddr.get_or_insert(ph.p_vaddr & !0xfff);
            if ph.p_flags & libc::PF_X != 0 {
                let bias = base_addr.wrapping_sub(first);
                lo = lo.min(bias.wrapping_add(ph.p_vaddr));
                hi = hi.max(bias.wrapping_add(ph.p_vaddr + ph.p_memsz));
            }
        }
        if lo > hi {
            (0, 0)
        } else {
            (lo, hi)
        }
    }
}
