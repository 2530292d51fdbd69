//! The few raw facilities of the C library and the kernel the tracer uses.
//!
//! glibc exports its allocator under `__libc_*` names as well as the public
//! ones we replace. Calling those directly means the tracer never needs `dlsym`
//! to find the real allocator, so there is no bootstrap recursion while the
//! dynamic loader runs. Everything that must not re-enter our own exported
//! symbols (`close`, `execve`, `_exit`, …) goes through raw system calls here.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libc::{c_int, c_long, c_void, size_t};

extern "C" {
    pub fn __libc_malloc(size: size_t) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void;
    pub fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    pub fn __libc_valloc(size: size_t) -> *mut c_void;
    pub fn __libc_pvalloc(size: size_t) -> *mut c_void;
    pub fn __libc_mallopt(param: c_int, value: c_int) -> c_int;
    /// C11's `at_quick_exit` (glibc 2.18), which the `libc` crate lacks.
    pub fn at_quick_exit(f: extern "C" fn()) -> c_int;
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

/// The contents of a file the tracer reads while the program runs (`/proc`
/// files: thread names, maps, stacks), or `None`. Its descriptor leaves the
/// lowest free number at once: a program that closes a number and `dup2`s
/// onto it (a shell's redirection) while we held it there would have its
/// new descriptor closed by ours, closing our file (a traced `dash` failed
/// `echo x > /dev/null` with EBADF about once in 400 subshells). Raw calls:
/// none of this reaches the hooks.
pub fn read_proc(path: &core::ffi::CStr) -> Option<Vec<u8>> {
    let fd = open_high(path)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length; `fd` is ours until the
        // close below.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    raw_close(fd);
    Some(out)
}

/// A `/proc` file held open for reads at given offsets (`pagemap`), its
/// descriptor off the lowest numbers like [`read_proc`]'s; closed on drop.
pub struct ProcFile(c_int);

impl ProcFile {
    pub fn open(path: &core::ffi::CStr) -> Option<ProcFile> {
        open_high(path).map(ProcFile)
    }

    /// Reads into `buf` from byte `offset`: the bytes read, `None` on an error.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        loop {
            // SAFETY: `buf` is writable for its length; the descriptor is
            // ours until the drop.
            let n = unsafe {
                direct_syscall(
                    libc::SYS_pread64,
                    &[
                        self.0 as c_long,
                        buf.as_mut_ptr() as c_long,
                        buf.len() as c_long,
                        offset as c_long,
                    ],
                )
            };
            if n >= 0 {
                return Some(n as usize);
            }
            if errno() != libc::EINTR {
                return None;
            }
        }
    }
}

impl ProcFile {
    /// The descriptor, kept open for the life of the process (not closed on
    /// drop).
    pub fn into_raw(self) -> c_int {
        let fd = self.0;
        core::mem::forget(self);
        fd
    }
}

impl Drop for ProcFile {
    fn drop(&mut self) {
        raw_close(self.0);
    }
}

/// `path` opened read-only, its descriptor moved off the lowest free number
/// at once (see [`read_proc`]); raw calls. Where no higher number can be
/// had (a program that lowered its descriptor limit below
/// [`high_fd_base`] after we started), the low one is kept: the exit scan
/// read no /proc file there, found no roots, and called every block
/// definitely lost (`examples/leaks/few_descriptors.c`).
fn open_high(path: &core::ffi::CStr) -> Option<c_int> {
    // SAFETY: a NUL-terminated path; the low descriptor is ours until the
    // raw close.
    unsafe {
        let low = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) as c_int;
        if low < 0 {
            return None;
        }
        let high =
            libc::syscall(libc::SYS_fcntl, low, libc::F_DUPFD_CLOEXEC, high_fd_base()) as c_int;
        if high < 0 {
            return Some(low);
        }
        raw_close(low);
        Some(high)
    }
}

/// The number of threads of this process (`/proc/self/stat`, read with raw
/// system calls into a buffer on the stack: no `opendir`, whose 32 KiB
/// buffer is a large block of the program's heap; see [`Mapped`]).
pub fn thread_count() -> Option<u64> {
    process_stat().map(|(_, n)| n)
}

/// Whether `threads` threads in a process whose main thread is in `state`
/// (`/proc/self/stat`) can only be the caller: it is alone, or the other
/// one is the main thread, gone (`pthread_exit` in `main`): Linux keeps an
/// exited main thread, a zombie, counted until the whole process ends.
pub fn alone_in(state: u8, threads: u64) -> bool {
    threads == 1 || (threads == 2 && state == b'Z')
}

/// The main thread's state letter and the thread count of this process.
fn process_stat() -> Option<(u8, u64)> {
    // Raw calls: the read stays out of the syscall capture.
    let mut buf = [0u8; 1024];
    let fd = open_high(c"/proc/self/stat")?;
    // SAFETY: `buf` is writable for its length; `fd` is ours until the close.
    let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
    raw_close(fd);
    let text = buf.get(..usize::try_from(n).ok()?)?;
    // After the command name (in parentheses, possibly with spaces): state,
    // then 16 more fields, then the thread count.
    let after = &text[text.iter().rposition(|&b| b == b')')? + 1..];
    let mut fields = after.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let count = core::str::from_utf8(fields.nth(16)?).ok()?.parse().ok()?;
    Some((state, count))
}

/// Whether the calling thread is the only one of the process still running
/// (see [`alone_in`]).
pub fn alone() -> bool {
    process_stat().is_some_and(|(state, n)| alone_in(state, n))
}

/// Zeroed memory of its own mapping, unmapped when dropped: for a large
/// buffer on a program thread, where a block of the program's heap of a
/// kilobyte or more would first have glibc merge every free block of its
/// fast bins (`malloc_consolidate`), tens of milliseconds after a program
/// freed a great many small blocks (perl's exit).
pub struct Mapped {
    ptr: *mut u8,
    len: usize,
}

impl Mapped {
    /// `len` zero bytes, or `None` when the mapping fails.
    pub fn zeroed(len: usize) -> Option<Mapped> {
        // SAFETY: an anonymous private mapping, no file, no fixed address;
        // the raw system call keeps it out of the syscall capture.
        let p = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                0usize,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1i32,
                0usize,
            )
        };
        if p == -1 || p == 0 || len == 0 {
            return None;
        }
        Some(Mapped {
            ptr: p as usize as *mut u8,
            len,
        })
    }
}

impl Mapped {
    /// The mapping's address; it stays mapped for the life of the process,
    /// and is listed by [`kept_ranges`].
    pub fn leak(self) -> *mut u8 {
        let p = self.ptr;
        let i = KEPT_COUNT.fetch_add(1, Ordering::AcqRel);
        if let Some(k) = KEPT.get(i) {
            k[1].store(p as u64 + self.len as u64, Ordering::Relaxed);
            k[0].store(p as u64, Ordering::Release);
        }
        core::mem::forget(self);
        p
    }
}

/// Mappings kept for the life of the process ([`Mapped::leak`]: the
/// unwinder's rule tables, the threads' large sent-stack caches), as
/// `[start, end]`, `start` stored last. Past [`KEPT`]'s length a mapping
/// is simply not listed.
static KEPT: [[AtomicU64; 2]; 256] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; 256];
static KEPT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The mappings [`Mapped::leak`] kept so far, `(start, end)`: our own
/// memory, which holds code addresses, rules and hashes, never a pointer
/// of the program's (the exit's leak scan leaves them out of its roots).
/// One being kept meanwhile may be missing.
pub fn kept_ranges() -> Vec<(u64, u64)> {
    let n = KEPT_COUNT.load(Ordering::Acquire).min(KEPT.len());
    KEPT[..n]
        .iter()
        .filter_map(|k| {
            let start = k[0].load(Ordering::Acquire);
            (start != 0).then(|| (start, k[1].load(Ordering::Relaxed)))
        })
        .collect()
}

impl core::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` readable bytes, ours alone.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl core::ops::DerefMut for Mapped {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A word on a page of its own that the kernel gives a child made without
/// `CLONE_VM` as zeros (`MADV_WIPEONFORK`, Linux 4.14), whatever made the
/// child: `fork()` or the clone system call called directly. `None` where
/// the kernel refuses the advice. Kept for the life of the process.
pub fn wiped_in_copies() -> Option<&'static AtomicU64> {
    let page = Mapped::zeroed(4096)?;
    const MADV_WIPEONFORK: c_int = 18;
    // SAFETY: advice on a mapping of ours, its exact range.
    let r = unsafe {
        libc::syscall(
            libc::SYS_madvise,
            page.ptr as usize,
            page.len,
            MADV_WIPEONFORK,
        )
    };
    if r != 0 {
        return None;
    }
    let p = page.leak().cast::<AtomicU64>();
    // SAFETY: the page is mapped, writable and aligned for the life of the
    // process (leaked), and only ever accessed atomically.
    Some(unsafe { &*p })
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `zeroed` and is not used after this.
        unsafe { libc::syscall(libc::SYS_munmap, self.ptr as usize, self.len) };
    }
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

/// Whether the process runs under valgrind, whose own mappings share the
/// address space and change while the program runs. Valgrind's client
/// request "running on valgrind" (code 0x1001): on the processor, four
/// rotations of `rdi` adding up to 128 bits and an exchange of `rbx` with
/// itself, which leave every register as it was (`rdx` keeps 0); valgrind's
/// translator recognises the sequence and puts its answer, non-zero, in
/// `rdx`.
#[cfg(target_arch = "x86_64")]
pub fn under_valgrind() -> bool {
    let request: [u64; 6] = [0x1001, 0, 0, 0, 0, 0];
    let answer: u64;
    // SAFETY: rotations of rdi (declared clobbered) and a no-op exchange
    // natively; under valgrind a read of the six words `request` points to.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") request.as_ptr(),
            inout("rdx") 0u64 => answer,
            inout("rdi") 0u64 => _,
            options(nostack, readonly),
        );
    }
    answer != 0
}

#[cfg(not(target_arch = "x86_64"))]
pub fn under_valgrind() -> bool {
    false
}

/// The extended CPUID leaf `leaf` (0x8000_00xx), when the processor
/// reports it.
pub fn extended_cpuid(leaf: u32) -> Option<core::arch::x86_64::CpuidResult> {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86-64 processor; the extended
    // leaf is read only when the processor reports it.
    unsafe {
        let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        (max >= leaf).then(|| core::arch::x86_64::__cpuid(leaf))
    }
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

/// Wakes every thread waiting on `word`.
pub fn futex_wake_all(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: futex wake on a live atomic word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
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
    stderr_line_if(stderr_is_the_first(), text);
}

/// [`stderr_line`] when `first` (whether descriptor 2 is still the file it
/// was at start, as [`stderr_is_the_first`] found on another thread): the
/// caller makes no system call but the `write`.
pub fn stderr_line_if(first: bool, text: &str) {
    let saved = errno();
    if first {
        let line = format!("libtracer: {text}\n");
        write_all_fd(2, line.as_bytes());
    }
    set_errno(saved);
}

/// `(st_dev, st_ino)` of descriptor 2 as the process started, and whether
/// it was open then (`STDERR_SEEN`: 0 not yet looked at, 1 open, 2 closed):
/// see [`stderr_is_the_first`].
static FIRST_STDERR: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static FIRST_STDERR_INO: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static STDERR_SEEN: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// The identity of descriptor 2, `(device, inode)`, or `None` when closed.
fn stderr_identity() -> Option<(u64, u64)> {
    // SAFETY: fstat writes into the zeroed local `st` only.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, 2, &mut st as *mut libc::stat) == 0)
            .then_some((st.st_dev, st.st_ino))
    }
}

/// Notes which file descriptor 2 is (the constructor, before the program
/// runs).
pub fn remember_stderr() {
    use core::sync::atomic::Ordering;
    let first = stderr_identity();
    let (dev, ino) = first.unwrap_or((0, 0));
    FIRST_STDERR.store(dev, Ordering::Relaxed);
    FIRST_STDERR_INO.store(ino, Ordering::Relaxed);
    STDERR_SEEN.store(if first.is_some() { 1 } else { 2 }, Ordering::Release);
}

/// Whether descriptor 2 is still the file it was at start: a program that
/// closed it and opened a file of its own there (coreutils close stderr
/// before they exit; others reuse the number for a log) must not find our
/// lines in that file. Not yet looked at: yes; closed at start: no.
pub fn stderr_is_the_first() -> bool {
    use core::sync::atomic::Ordering;
    match STDERR_SEEN.load(Ordering::Acquire) {
        0 => true,
        1 => {
            let first = (
                FIRST_STDERR.load(Ordering::Relaxed),
                FIRST_STDERR_INO.load(Ordering::Relaxed),
            );
            stderr_identity() == Some(first)
        }
        _ => false,
    }
}

/// Closes a descriptor without going through our own `close` hook.
pub fn raw_close(fd: c_int) -> c_int {
    // SAFETY: close on any integer is memory-safe.
    unsafe { direct_syscall(libc::SYS_close, &[fd as c_long]) as c_int }
}

/// A system call made here with the `syscall` instruction, with glibc's
/// `syscall()` conventions (the result, or -1 and `errno`), never through
/// the exported `syscall` symbol: that one is ours (`lib.rs`), and the
/// descriptor calls and `exit_group` it hands to their hooks would come
/// back to them.
/// `args`: up to six, the rest 0.
///
/// # Safety
/// As `syscall()`: the call's own requirements on its arguments.
#[cfg(target_arch = "x86_64")]
pub unsafe fn direct_syscall(n: c_long, args: &[c_long]) -> c_long {
    let a = six(args);
    let rc: c_long;
    // SAFETY: the kernel's calling convention for x86-64 (rcx and r11 are
    // clobbered by the instruction); the caller answers for the call.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n => rc,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if (-4095..0).contains(&rc) {
        set_errno(-rc as c_int);
        -1
    } else {
        rc
    }
}

/// [`direct_syscall`] where the library exports no `syscall` of its own
/// (it does on x86-64 only): glibc's.
///
/// # Safety
/// As `syscall()`.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn direct_syscall(n: c_long, args: &[c_long]) -> c_long {
    let a = six(args);
    // SAFETY: the caller answers for the call.
    unsafe { libc::syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// A system call's six arguments: `args` (at most six) then zeros.
fn six(args: &[c_long]) -> [c_long; 6] {
    let mut a = [0; 6];
    let k = args.len().min(6);
    a[..k].copy_from_slice(&args[..k]);
    a
}

/// The executable's path (`/proc/self/exe`; empty when unreadable), read
/// once: only an `exec` changes it, and that loads this library anew. Each
/// read is a path walk through procfs (~25 us here), and a traced process
/// asked three times at start and once more at every look at its objects.
pub fn exe_path() -> &'static str {
    static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    })
}

/// The path the program was started by, as given to `execve` (the
/// kernel's `AT_EXECFN`: a symlink's own path, a script's rather than its
/// interpreter's); `None` when the kernel gave none.
pub fn exec_path() -> Option<String> {
    // SAFETY: getauxval only reads the auxiliary vector the kernel handed the
    // process; AT_EXECFN, when present, is the address of a NUL-terminated
    // string the kernel copied onto the initial stack, which stays mapped for
    // the process's life.
    unsafe {
        let p = libc::getauxval(libc::AT_EXECFN) as *const libc::c_char;
        (!p.is_null()).then(|| core::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Duplicates `fd` to the lowest free descriptor >= `min`, close-on-exec.
pub fn dup_high(fd: c_int, min: c_int) -> c_int {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes an integer argument only.
    unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) }
}

/// The lowest descriptor number we park our trace files at: 1024, above
/// the numbers `select` can watch, or 64 under the soft limit when that is
/// lower (valid, and high where programs rarely look). Not the top of a
/// high limit: the kernel grows a process's descriptor table to the highest
/// number in use, and parking just under a soft limit of 1,048,576 (some
/// container runtimes) gave every traced process a table of a million
/// entries (8 MB of kernel memory, zeroed); at this machine's 20,000, one
/// of 32,768 (`FDSize` in /proc/PID/status; 256 untraced, run from a
/// shell). Where ours are
/// changes nothing else for the program: they count against its limit
/// anywhere, a new descriptor takes the lowest free number, and a `dup2`
/// onto one of ours moves ours away (`fds`).
pub fn high_fd_base() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    let soft = if ok { lim.rlim_cur } else { 1024 };
    let soft = soft.min(1 << 20) as c_int;
    (soft - 64).clamp(16, PARK_AT)
}

/// See [`high_fd_base`].
const PARK_AT: c_int = 1024;

/// Ends the whole process at once (the `_exit` system call), without running
/// anything of ours or the program's.
pub fn raw_exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group never returns. Not through `libc::syscall`:
        // our exported `syscall` hands exit_group to `hooks::exit_now`,
        // which ends here.
        unsafe { direct_syscall(libc::SYS_exit_group, &[c_long::from(status)]) };
    }
}

/// This library's ELF header address and its program headers, read from
/// memory (no loader lock, no allocation).
fn own_program_headers() -> (u64, &'static [libc::Elf64_Phdr]) {
    extern "C" {
        // Defined by the linker at the start of this object's ELF header.
        static __ehdr_start: libc::Elf64_Ehdr;
    }
    // SAFETY: __ehdr_start is the mapped ELF header of this shared object;
    // its program headers are mapped too (they sit in the first PT_LOAD
    // segment), for the life of the process.
    unsafe {
        let ehdr = core::ptr::addr_of!(__ehdr_start);
        let base_addr = ehdr as u64;
        let phdrs = (base_addr + (*ehdr).e_phoff) as *const libc::Elf64_Phdr;
        (
            base_addr,
            core::slice::from_raw_parts(phdrs, (*ehdr).e_phnum as usize),
        )
    }
}

/// The main program's load bias and program headers, from the auxiliary
/// vector (`AT_PHDR`, `AT_PHNUM`; the bias from `PT_PHDR`); `None` when
/// the vector lacks them or the program has no `PT_PHDR`.
pub fn program_headers() -> Option<(u64, &'static [libc::Elf64_Phdr])> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
        )
    };
    if phdr == 0 || phnum == 0 || phnum > 4096 {
        return None;
    }
    // SAFETY: the loader maps the program headers where AT_PHDR says, and
    // they stay mapped for the process's life; AT_PHNUM counts them.
    let headers =
        unsafe { core::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum as usize) };
    let own = headers.iter().find(|h| h.p_type == libc::PT_PHDR)?;
    Some((phdr.wrapping_sub(own.p_vaddr), headers))
}

/// `[start, end)` in memory of each `PT_LOAD` segment of `headers` that
/// `keep` accepts, for an object loaded with `bias`.
pub fn load_segments<'a>(
    bias: u64,
    headers: &'a [libc::Elf64_Phdr],
    keep: impl Fn(&libc::Elf64_Phdr) -> bool + 'a,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    headers
        .iter()
        .filter(move |h| h.p_type == libc::PT_LOAD && keep(h))
        .map(move |h| {
            let start = bias.wrapping_add(h.p_vaddr);
            (start, start.wrapping_add(h.p_memsz))
        })
}

/// This library's load bias (the loader's `l_addr`, `dlpi_addr` in
/// `dl_iterate_phdr`): where its ELF header lies less the address of its
/// first loadable segment.
pub fn own_load_bias() -> u64 {
    let (base_addr, phdrs) = own_program_headers();
    phdrs
        .iter()
        .find(|ph| ph.p_type == libc::PT_LOAD)
        .map_or(base_addr, |ph| base_addr.wrapping_sub(ph.p_vaddr & !0xfff))
}

/// Start and end of this library's executable segment, found from our own ELF
/// program headers in memory (no loader lock, no allocation), so stacks can drop
/// the tracer's own frames however the compiler inlined them.
pub fn own_text_range() -> (u64, u64) {
    let executable = |ph: &libc::Elf64_Phdr| ph.p_flags & libc::PF_X != 0;
    let (lo, hi) = load_segments(own_load_bias(), own_program_headers().1, executable)
        .fold((u64::MAX, 0u64), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
    if lo > hi {
        (0, 0)
    } else {
        (lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count read from `/proc/self/stat` follows threads as they start
    /// (the test harness runs other tests' threads meanwhile, so the count
    /// is compared with `/proc/self/task` read around it).
    #[test]
    fn alone_means_one_thread_or_two_with_the_main_one_gone() {
        assert!(alone_in(b'R', 1));
        assert!(alone_in(b'Z', 2), "an exited main thread still counts");
        assert!(!alone_in(b'S', 2));
        assert!(!alone_in(b'Z', 3));
        // The test harness runs tests on threads of its own.
        assert!(!alone());
    }

    #[test]
    fn thread_count_follows_the_process_threads() {
        let tasks = || std::fs::read_dir("/proc/self/task").unwrap().count() as u64;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..3 {
            let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
            let ready = ready_tx.clone();
            stops.push(stop_tx);
            threads.push(std::thread::spawn(move || {
                ready.send(()).unwrap();
                let _ = stop_rx.recv();
            }));
        }
        for _ in 0..3 {
            ready_rx.recv().unwrap();
        }
        let (lo, n, hi) = (tasks(), thread_count().expect("a count"), tasks());
        assert!(n >= lo.min(hi) && n <= lo.max(hi), "{lo} <= {n} <= {hi}");
        assert!(n >= 4, "the test thread and three more: {n}");
        drop(stops);
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_mapped_buffer_is_zeroed_and_writable() {
        let mut m = Mapped::zeroed(64 * 1024).expect("a mapping");
        assert_eq!(m.len(), 64 * 1024);
        assert!(m.iter().all(|&b| b == 0));
        m[65535] = 7;
        assert_eq!(m[65535], 7);
        assert!(Mapped::zeroed(0).is_none());
    }

    #[test]
    fn a_kept_mapping_is_listed_with_its_length() {
        let m = Mapped::zeroed(3 * 4096).expect("a mapping");
        // A buffer alive but not kept: no entry (its address cannot be
        // another's while it is mapped).
        let other = Mapped::zeroed(4096).expect("a mapping");
        let o = other.as_ptr() as u64;
        let p = m.leak() as u64;
        let kept = kept_ranges();
        assert!(kept.contains(&(p, p + 3 * 4096)), "{kept:x?}");
        assert!(kept.iter().all(|&(a, _)| a != o), "{kept:x?}");
        drop(other);
    }
}
