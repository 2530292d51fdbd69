//! Per-thread state of the hooks: the reentrancy guard, the cached thread id,
//! the stack bounds for the frame-pointer walk, and the "stacks already sent"
//! cache.
//!
//! Everything is a `const`-initialised thread local of a type without a
//! destructor: in a preloaded library these live in static TLS, need no lazy
//! registration, never allocate and stay readable while a thread is being torn
//! down (glibc frees thread resources after the TLS destructors ran, and those
//! frees reach our hooks).

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// Number of entries of the direct-mapped "already sent" stack cache.
const SENT_SLOTS: usize = 1024;

struct SentCache {
    epoch: u32,
    keys: [u64; SENT_SLOTS],
}

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// Set by our `vfork` around the system call: the child runs on this
    /// thread's memory, and must never record into the parent's trace.
    static VFORK: Cell<bool> = const { Cell::new(false) };
    static TID: Cell<u32> = const { Cell::new(0) };
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
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

/// Enters the tracer on this thread, or `None` if the thread is already inside
/// (a libc call made by the tracer that allocated, or the writer thread).
#[inline]
pub fn enter() -> Option<Guard> {
    if vforked() {
        return None;
    }
    BUSY.try_with(|b| {
        if b.get() {
            None
        } else {
            b.set(true);
            Some(Guard(()))
        }
    })
    .ok()
    .flatten()
}

/// Whether this thread is inside the tracer right now.
#[inline]
pub fn inside() -> bool {
    BUSY.try_with(|b| b.get()).unwrap_or(true)
}

/// Whether this thread is a `vfork` child's (or its parent's, suspended).
#[inline]
pub fn vforked() -> bool {
    VFORK.try_with(|b| b.get()).unwrap_or(false)
}

/// Set before the `vfork` system call, cleared when it returned in the parent.
pub fn set_vforked(v: bool) {
    let _ = VFORK.try_with(|b| b.set(v));
}

/// Marks this thread as the tracer's own for good (the writer thread): every
/// allocation and descriptor operation it makes passes straight through.
pub fn enter_forever() {
    let _ = BUSY.try_with(|b| b.set(true));
}

/// The OS thread id, cached per thread.
#[inline]
pub fn tid() -> u32 {
    TID.try_with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = sys::raw_gettid();
        t.set(v);
        v
    })
    .unwrap_or_else(|_| sys::raw_gettid())
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
    let _ = TID.try_with(|t| t.set(0));
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
