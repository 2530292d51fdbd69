//! System call capture (`TRACER_FORMAT=tlv`): the C library's exported
//! wrappers of the `%file`, `%net`, `%mem` and `%process` groups are
//! interposed, and each call the program makes through one becomes a compact
//! record in its thread's ring ([`ring`]), which the writer thread turns into
//! a `format_writers::Syscall` for the `.tlv` output.
//!
//! A wrapper ([`hooks`]) finds glibc's function with `dlsym(RTLD_NEXT, …)` on
//! its first use ([`Real`]), then, when the call is to be captured
//! ([`start`]): takes the entry time, calls glibc, takes the exit time, and
//! builds the record ([`done`]) with the result, `errno` when the result is
//! `-1`, the thread id and the arguments typed by meaning. The reentrancy guard
//! is taken only *after* glibc returned: a signal handler that runs or
//! `longjmp`s out of a blocking call never finds the guard held, and
//! allocations glibc makes inside the call stay visible. The library's own
//! calls are never captured: they are made inside the guard, and the writer
//! thread holds it for good.
//!
//! Times come from `sys::now_ns` (`CLOCK_REALTIME`, the clock of the
//! allocation events), so a `.tlv` and a `.mlyze` from one run line up.
//!
//! Which system call a record names: the one glibc 2.36 makes for that
//! wrapper on x86-64, as `strace` shows it (`open` → `openat`, `stat` →
//! `newfstatat`, `send` → `sendto`, `select` → `pselect6`, `fork` → `clone`,
//! `pthread_create` → `clone3`, `exit` → `exit_group`; the table is in
//! `docs/formats/syscall-tlv.md`). `TRACER_SYSCALLS` selects by that number.

pub mod hooks;
pub mod ring;

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::{sys, tls};

/// Largest `TRACER_SYSCALL_DATA` accepted (one argument element holds 65,535
/// bytes; longer prefixes would be cut by the format anyway).
pub const MAX_DATA: usize = 65_531;

/// Capture switched on by the constructor (a `tlv` output was asked for).
static ON: AtomicBool = AtomicBool::new(false);
/// Selected system call numbers, one bit each.
static SELECTED: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
/// Bytes of buffer contents captured per buffer argument.
static DATA_CAP: AtomicUsize = AtomicUsize::new(0);
/// Offset of the kernel thread id inside glibc's thread descriptor, found at
/// start-up (0: unknown), for the result of `pthread_create` (`clone3`).
static TID_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// Whether system calls are captured (set once, before any thread exists).
pub fn capturing() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Switches capture on for the system calls `numbers`, keeping `data` bytes
/// of each buffer. Called once by the constructor, before any thread exists.
pub fn configure(numbers: &[u16], data: usize) {
    DATA_CAP.store(data.min(MAX_DATA), Ordering::Relaxed);
    ring::init();
    find_tid_offset();
    ON.store(true, Ordering::Release);
    // Last: a set bit means "capture on" to the hooks.
    for &n in numbers {
        let n = usize::from(n);
        if n < 512 {
            SELECTED[n / 64].fetch_or(1 << (n % 64), Ordering::Release);
        }
    }
}

#[inline(always)]
fn selected(nr: u16) -> bool {
    let n = usize::from(nr);
    n < 512 && SELECTED[n / 64].load(Ordering::Relaxed) & (1 << (n % 64)) != 0
}

/// Whether this call of system call `nr` is to be captured; its entry time
/// if so. False for the tracer's own calls (guard held) and in a `vfork`
/// child. The selection bits are only set once capture is on (see
/// [`configure`]), so one bit test stands for both.
#[inline(always)]
pub fn start(nr: u16) -> Option<u64> {
    if !selected(nr) || tls::hot().passing() {
        return None;
    }
    Some(sys::now_ns())
}

/// The record of a call that returned `result` after starting at `t0`
/// (from [`start`]); `args` appends the argument elements. `errno` is read
/// only when the result is -1; nothing on the way changes it (the rare slow
/// paths of the ring keep it, see `sys::keep_errno`).
#[inline(always)]
pub fn done(nr: u16, t0: u64, result: i64, args: impl FnOnce(&mut Args)) {
    let t1 = sys::now_ns();
    let err = if result == -1 { sys::errno() } else { 0 };
    send(nr, t0, Some(t1.saturating_sub(t0)), result, err, args);
}

/// Builds one record in this thread's ring (inside the guard). `duration`
/// is `None` for calls that do not return (exec, exit).
#[inline(always)]
fn send(
    nr: u16,
    t0: u64,
    duration: Option<u64>,
    result: i64,
    err: i32,
    args: impl FnOnce(&mut Args),
) {
    let hot = tls::hot();
    let Some(_g) = hot.enter() else { return };
    let Some(ring) = ring::for_record() else {
        return;
    };
    let mut a = Args {
        // SAFETY: this thread is its ring's one producer, and the guard
        // keeps any other record of ours from starting meanwhile.
        r: unsafe { ring::Rec::begin(ring) },
        cap: DATA_CAP.load(Ordering::Relaxed),
    };
    args(&mut a);
    a.r.finish(&ring::Fixed {
        nr,
        tid: hot.tid(),
        errno: (result == -1).then_some(err),
        time_ns: t0,
        duration_ns: duration,
        result,
    });
}

/// Argument elements of one record, in kernel argument order (at most
/// [`ring::MAX_ARGS`]), written straight into the ring.
pub struct Args<'r> {
    r: ring::Rec<'r>,
    cap: usize,
}

impl Args<'_> {
    #[inline(always)]
    pub fn fd(&mut self, fd: i32) {
        self.r.scalar(ring::kind::FD, fd as u32 as u64);
    }
    #[inline(always)]
    pub fn int(&mut self, v: i64) {
        self.r.scalar(ring::kind::INT, v as u64);
    }
    #[inline(always)]
    pub fn flags(&mut self, v: u64) {
        self.r.scalar(ring::kind::FLAGS, v);
    }
    #[inline(always)]
    pub fn ptr<T>(&mut self, p: *const T) {
        self.r.scalar(ring::kind::POINTER, p as u64);
    }
    /// A NUL-terminated path (a null pointer is recorded as a pointer).
    ///
    /// # Safety
    /// `p` is null or a readable NUL-terminated string.
    #[inline(always)]
    pub unsafe fn path(&mut self, p: *const c_char) {
        if p.is_null() {
            self.ptr(p);
        } else {
            let len = CStr::from_ptr(p).count_bytes();
            self.r.bytes(ring::kind::PATH, 0, p.cast(), len);
        }
    }
    /// A buffer of `len` bytes at `p`, of which the first `TRACER_SYSCALL_DATA`
    /// are copied.
    ///
    /// # Safety
    /// `p` is null or readable for `len` bytes.
    #[inline(always)]
    pub unsafe fn data(&mut self, p: *const c_void, len: u64) {
        let n = if p.is_null() {
            0
        } else {
            (len.min(self.cap as u64)) as usize
        };
        self.r.bytes(ring::kind::BUFFER, len, p.cast(), n);
    }
    /// A socket address: a buffer of `len` bytes, or a null pointer.
    ///
    /// # Safety
    /// As [`Args::data`].
    #[inline(always)]
    pub unsafe fn sockaddr(&mut self, p: *const c_void, len: u32) {
        if p.is_null() {
            self.ptr(p);
        } else {
            self.data(p, u64::from(len));
        }
    }
}

// ------------------------------------------------------------ real functions

/// glibc's definition of one interposed function, found on first use.
pub struct Real {
    name: &'static [u8],
    ptr: AtomicPtr<c_void>,
}

/// Declares a [`Real`] (`static $id: Real`) for glibc's function `$name`
/// (NUL-terminated) and lists it in the `tracer_reals` section, whose
/// every entry [`resolve_all`] looks up before the program runs: a lookup
/// made on a wrapper's first call ran glibc's `dlsym` bookkeeping on the
/// program's thread, which clears its pending `dlerror()` message.
macro_rules! real {
    ($vis:vis $id:ident, $name:expr) => {
        $vis static $id: $crate::syscalls::Real = $crate::syscalls::Real::new($name);
        const _: () = {
            #[used]
            #[link_section = "tracer_reals"]
            static ENTRY: &$crate::syscalls::Real = &$id;
        };
    };
}
pub(crate) use real;

/// Looks up every [`Real`] declared with [`real!`] not yet looked up (the
/// constructor's, under the tracer's guard).
pub fn resolve_all() {
    extern "C" {
        // Defined by the linker around the section's entries (declared as
        // bytes: only their addresses are used).
        static __start_tracer_reals: u8;
        static __stop_tracer_reals: u8;
    }
    // SAFETY: the linker puts every `ENTRY` of `real!` (a `&'static Real`,
    // pointer-aligned) between these two symbols, one after another, and
    // nothing else.
    let entries: &[&'static Real] = unsafe {
        let start = core::ptr::addr_of!(__start_tracer_reals) as usize;
        let stop = core::ptr::addr_of!(__stop_tracer_reals) as usize;
        let n = stop.saturating_sub(start) / core::mem::size_of::<&Real>();
        core::slice::from_raw_parts(start as *const &'static Real, n)
    };
    for r in entries {
        if r.ptr.load(Ordering::Acquire).is_null() {
            // SAFETY: resolving only looks the name up.
            unsafe { r.resolve() };
        }
    }
}

thread_local! {
    /// Set while this thread runs `dlsym`: a wrapper called from inside it
    /// fails with ENOSYS rather than recursing.
    static RESOLVING: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

impl Real {
    /// `name` ends with a NUL byte.
    pub const fn new(name: &'static str) -> Real {
        Real {
            name: name.as_bytes(),
            ptr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The function as type `F` (a function pointer type matching it).
    ///
    /// # Safety
    /// `F` must be the C signature of the function named.
    #[inline]
    pub unsafe fn get<F: Copy>(&self) -> Option<F> {
        debug_assert_eq!(
            core::mem::size_of::<F>(),
            core::mem::size_of::<*mut c_void>()
        );
        let mut p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            p = self.resolve();
        }
        (!p.is_null()).then(|| core::mem::transmute_copy::<*mut c_void, F>(&p))
    }

    /// The function's address, 0 when it could not be found (looked up
    /// now if it was not yet).
    pub fn address(&self) -> u64 {
        let mut p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            // SAFETY: resolving only looks the name up.
            p = unsafe { self.resolve() };
        }
        p as u64
    }

    #[cold]
    unsafe fn resolve(&self) -> *mut c_void {
        if RESOLVING.try_with(|r| r.replace(true)).unwrap_or(true) {
            return core::ptr::null_mut();
        }
        let saved = sys::errno();
        let p = {
            let _g = tls::enter();
            let name = CStr::from_bytes_with_nul_unchecked(self.name);
            libc::dlsym(libc::RTLD_NEXT, name.as_ptr())
        };
        let _ = RESOLVING.try_with(|r| r.set(false));
        sys::set_errno(saved);
        if !p.is_null() {
            self.ptr.store(p, Ordering::Release);
        }
        p
    }
}

/// Return types of the wrappers: how failure looks, and the value recorded.
pub trait Ret: Copy {
    /// What the wrapper returns when glibc's function cannot be found.
    fn unavailable() -> Self;
    fn as_i64(self) -> i64;
}

impl Ret for i32 {
    fn unavailable() -> Self {
        sys::set_errno(libc::ENOSYS);
        -1
    }
    fn as_i64(self) -> i64 {
        i64::from(self)
    }
}

impl Ret for i64 {
    fn unavailable() -> Self {
        sys::set_errno(libc::ENOSYS);
        -1
    }
    fn as_i64(self) -> i64 {
        self
    }
}

impl Ret for isize {
    fn unavailable() -> Self {
        sys::set_errno(libc::ENOSYS);
        -1
    }
    fn as_i64(self) -> i64 {
        self as i64
    }
}

impl Ret for *mut c_void {
    fn unavailable() -> Self {
        sys::set_errno(libc::ENOSYS);
        usize::MAX as *mut c_void // MAP_FAILED, (void *)-1
    }
    fn as_i64(self) -> i64 {
        self as i64
    }
}

// ------------------------------------------------------------ special cases

/// `exit(status)` was called: the status waits for our `atexit` handler,
/// which records `exit_group` after the program's handlers ran (where strace
/// shows it). `i64::MIN`: `exit` was not called.
static EXIT_STATUS: AtomicI64 = AtomicI64::new(i64::MIN);

pub fn on_exit_called(status: i32) {
    if ON.load(Ordering::Relaxed) && !tls::vforked() {
        EXIT_STATUS.store(i64::from(status), Ordering::SeqCst);
    }
}

/// From our `atexit` handler, before the files are finished.
pub fn before_exit_handler() {
    let status = EXIT_STATUS.swap(i64::MIN, Ordering::SeqCst);
    if status != i64::MIN {
        record_exit_group(status as i32, true);
    }
}

/// `_exit`/`_Exit` (or `exit`, from the handler): `exit_group(status)`,
/// which never returns, so no duration. `inside_ok`: the caller holds no
/// guard of ours on the program's behalf.
pub fn record_exit_group(status: i32, from_handler: bool) {
    const EXIT_GROUP: u16 = 231;
    let t0 = if from_handler {
        // Our atexit handler is not the program: capture it as exit's.
        (ON.load(Ordering::Relaxed) && selected(EXIT_GROUP) && !tls::vforked()).then(sys::now_ns)
    } else {
        start(EXIT_GROUP)
    };
    if let Some(t0) = t0 {
        send(EXIT_GROUP, t0, None, 0, 0, |a| a.int(i64::from(status)));
    }
}

/// Before an exec: `execve(path, argv, envp) = 0` (no duration; the call
/// only returns when it failed). Returns the entry time when captured.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn before_exec(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> Option<u64> {
    const EXECVE: u16 = 59;
    let t0 = start(EXECVE)?;
    send(EXECVE, t0, None, 0, 0, |a| {
        a.path(path);
        a.ptr(argv);
        a.ptr(envp);
    });
    Some(t0)
}

/// The exec failed: its record with the failure, in the resumed trace.
///
/// # Safety
/// As [`before_exec`].
pub unsafe fn exec_failed(
    t0: u64,
    returned: u64,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) {
    let err = sys::errno();
    let duration = Some(returned.saturating_sub(t0));
    send(59, t0, duration, -1, err, |a| {
        a.path(path);
        a.ptr(argv);
        a.ptr(envp);
    });
    sys::set_errno(err);
}

/// Finds where glibc keeps a thread's kernel id in its descriptor: the first
/// 4-byte word of the calling thread's descriptor (`pthread_self()`) equal to
/// its tid, past the TCB header. The result of `pthread_create` is then read
/// from the new thread's descriptor (glibc asks the kernel to store the tid
/// there before `clone3` returns, `CLONE_PARENT_SETTID`).
fn find_tid_offset() {
    let tid = sys::raw_gettid() as i32;
    // SAFETY: glibc's thread descriptor is larger than 2 KiB and mapped (it
    // holds the TCB and the thread's bookkeeping); we read within it.
    unsafe {
        let me = libc::pthread_self() as *const i32;
        for i in 16..512 {
            if core::ptr::read_volatile(me.add(i)) == tid {
                TID_OFFSET.store(i * 4, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// The kernel thread id of `thread` just created, or 0 when unknown.
///
/// # Safety
/// `thread` is a thread created by glibc's `pthread_create`, still joinable.
pub unsafe fn tid_of(thread: libc::pthread_t) -> i64 {
    let off = TID_OFFSET.load(Ordering::Relaxed);
    if off == 0 || thread == 0 {
        return 0;
    }
    i64::from(core::ptr::read_volatile(
        (thread as *const u8).add(off).cast::<i32>(),
    ))
}
