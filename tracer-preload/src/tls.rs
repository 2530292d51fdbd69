//! Per-thread state of the hooks: the reentrancy guard, the cached thread id,
//! the stack bounds for the frame-pointer walk, and the "stacks already sent"
//! cache.
//!
//! Everything is a `const`-initialised thread local of a type without a
//! destructor: they never need lazy registration, never allocate and stay
//! readable while a thread is being torn down (glibc frees thread resources
//! after the TLS destructors ran, and those frees reach our hooks).
//!
//! The fields every hook reads ([`Hot`]: guard, `vfork` mark, tid, syscall
//! ring) sit in one block of *static* TLS declared in assembly and reached
//! with the initial-exec model: the thread pointer (`fs:0`) plus an offset
//! the loader wrote into our GOT, two instructions. Rust's `thread_local!`
//! in a shared object uses the general-dynamic model instead: a call to
//! `__tls_get_addr` (~10 instructions) per access, several per hook.
//! (`#[thread_local]` and `-Z tls-model` are unstable.) Initial-exec TLS is
//! what a preloaded library gets anyway (the loader sets every start-up
//! object's TLS in the static block); a late `dlopen` of the library is
//! served from glibc's surplus static TLS (our block is 16 bytes).

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// Number of entries of the direct-mapped "already sent" stack cache.
const SENT_SLOTS: usize = 1024;

struct SentCache {
    epoch: u32,
    keys: [u64; SENT_SLOTS],
}

/// The per-thread fields of every hook, zero in a new thread.
#[repr(C)]
pub struct Hot {
    /// The reentrancy guard: this thread is inside the tracer.
    busy: Cell<bool>,
    /// Set by our `vfork` around the system call: the child runs on this
    /// thread's memory, and must never record into the parent's trace.
    vfork: Cell<bool>,
    _pad: [u8; 2],
    /// The OS thread id, 0 until first asked.
    tid: Cell<u32>,
    /// This thread's syscall ring (`syscalls::ring`), null until taken.
    pub ring: Cell<*mut core::ffi::c_void>,
}

// The block behind `hot()`: 16 zero bytes of `.tbss`, 8-aligned, hidden.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl tracer_hot_tls",
    ".hidden tracer_hot_tls",
    ".type tracer_hot_tls,@object",
    ".size tracer_hot_tls,16",
    "tracer_hot_tls:",
    ".zero 16",
    ".popsection",
);
const _: () = assert!(core::mem::size_of::<Hot>() == 16);

/// This thread's [`Hot`] fields: one initial-exec TLS address computation.
#[inline(always)]
pub fn hot() -> &'static Hot {
    let p: *const Hot;
    // SAFETY: `tracer_hot_tls` is a 16-byte, 8-aligned TLS symbol of this
    // object (above); `fs:0` holds the thread pointer (x86-64 TLS ABI) and
    // the GOT entry its offset from it, so the sum is this thread's copy,
    // zero-initialised, valid for the thread's whole life. The result
    // depends only on the thread, hence `pure, nomem`. `&'static Hot` is
    // not `Send` (`Cell` is not `Sync`), so it never leaves the thread.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + tracer_hot_tls@GOTTPOFF]",
            p = out(reg) p,
            options(pure, nomem, nostack),
        );
        &*p
    }
}

thread_local! {
    static STACK_BOUNDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };

    static SENT: UnsafeCell<SentCache> =
        const { UnsafeCell::new(SentCache { epoch: 0, keys: [0; SENT_SLOTS] }) };
}

/// Bumped whenever a new writer starts (fork child, restart after a failed
/// exec): every thread's sent-cache is then stale and is cleared on next use.
static EPOCH: AtomicU32 = AtomicU32::new(1);

/// Proof that this thread is inside the tracer; dropping it leaves.
pub struct Guard(());

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        hot().busy.set(false);
    }
}

impl Hot {
    /// Enters the tracer on this thread, or `None` if the thread is already
    /// inside (a libc call made by the tracer that allocated, or the writer
    /// thread) or is a `vfork` child's.
    #[inline]
    pub fn enter(&self) -> Option<Guard> {
        if self.busy.get() || self.vfork.get() {
            return None;
        }
        self.busy.set(true);
        Some(Guard(()))
    }

    /// Whether a hook must let this thread's call pass unrecorded: it is
    /// inside the tracer or a `vfork` child's.
    #[inline]
    pub fn passing(&self) -> bool {
        self.busy.get() | self.vfork.get()
    }

    /// The OS thread id, cached.
    #[inline]
    pub fn tid(&self) -> u32 {
        let v = self.tid.get();
        if v != 0 {
            return v;
        }
        let v = sys::raw_gettid();
        self.tid.set(v);
        v
    }
}

/// Enters the tracer on this thread, or `None` if the thread is already inside
/// (a libc call made by the tracer that allocated, or the writer thread).
#[inline]
pub fn enter() -> Option<Guard> {
    hot().enter()
}

/// Whether this thread is inside the tracer right now.
#[inline]
pub fn inside() -> bool {
    hot().busy.get()
}

/// Whether this thread is a `vfork` child's (or its parent's, suspended).
#[inline]
pub fn vforked() -> bool {
    hot().vfork.get()
}

/// Set before the `vfork` system call, cleared when it returned in the parent.
pub fn set_vforked(v: bool) {
    hot().vfork.set(v);
}

/// Marks this thread as the tracer's own for good (the writer thread): every
/// allocation and descriptor operation it makes passes straight through.
pub fn enter_forever() {
    hot().busy.set(true);
}

/// The OS thread id, cached per thread.
#[inline]
pub fn tid() -> u32 {
    hot().tid()
}

/// The cached stack bounds of this thread, `(0, 0)` when not yet known.
pub fn stack_bounds() -> (u64, u64) {
    STACK_BOUNDS.try_with(|b| b.get()).unwrap_or((0, 0))
}

pub fn set_stack_bounds(lo: u64, hi: u64) {
    let _ = STACK_BOUNDS.try_with(|b| b.set((lo, hi)));
}

/// In a fork child: the forking thread keeps its TLS but has a new tid and
/// stack bounds that are still right; every sent-cache becomes stale.
pub fn reset_after_fork() {
    hot().tid.set(0);
    new_epoch();
}

/// Invalidates every thread's sent-stack cache (a new writer knows no stack).
pub fn new_epoch() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Returns true if `key` was already sent to the current writer by this thread,
/// and remembers it as sent otherwise. One producer's messages arrive in order,
/// so a stack sent once by this thread precedes all its later uses.
#[inline]
pub fn already_sent(key: u64) -> bool {
    let epoch = EPOCH.load(Ordering::Relaxed);
    SENT.try_with(|cell| {
        // SAFETY: the cache is only ever touched by its own thread, inside the
        // reentrancy guard, and no reference to it escapes this closure.
        let cache = unsafe { &mut *cell.get() };
        if cache.epoch != epoch {
            cache.keys = [0; SENT_SLOTS];
            cache.epoch = epoch;
        }
        let slot = &mut cache.keys[(key as usize) % SENT_SLOTS];
        if *slot == key {
            true
        } else {
            *slot = key;
            false
        }
    })
    .unwrap_or(false)
}

/// Forgets that `key` was sent (its message could not be delivered).
pub fn forget_sent(key: u64) {
    let _ = SENT.try_with(|cell| {
        // SAFETY: as in `already_sent`.
        let cache = unsafe { &mut *cell.get() };
        let slot = &mut cache.keys[(key as usize) % SENT_SLOTS];
        if *slot == key {
            *slot = 0;
        }
    });
}
