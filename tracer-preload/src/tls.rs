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
//! served from glibc's surplus static TLS (our block is 56 bytes).

use core::cell::Cell;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::sys;

/// Number of entries of the direct-mapped "already sent" stack cache every
/// lane starts with (8 KiB).
const SENT_SLOTS: usize = 1024;
/// A thread that evicted `GROW_AFTER` sent keys from it within `WINDOW`
/// lookups (a miss rate of 6% or more: more distinct stacks
/// in use than it holds: alloc_chain's 4,096 sent almost every stack again,
/// a boxed copy of ~20 frames and an extra message per allocation) moves to
/// a larger cache of its own mapping: `BIG_SETS` sets of `WAYS` keys, one
/// cache line each, first in first out (128 KiB, only for threads that
/// need it; kept with the lane, for the threads that use it next).
const GROW_AFTER: u32 = 4096;
const WINDOW: u32 = 65536;
const BIG_SETS: usize = 2048;
const WAYS: usize = 8;

#[derive(Clone, Copy)]
#[repr(align(64))]
struct Set([u64; WAYS]);

struct SentCache {
    epoch: u32,
    evictions: u32,
    lookups: u32,
    keys: [u64; SENT_SLOTS],
    /// The large cache: `BIG_SETS` sets of a mapping never unmapped (the
    /// cache stays with its lane, and lanes are never freed).
    big: Option<&'static mut [Set]>,
}

impl SentCache {
    #[cfg(test)]
    const fn new() -> SentCache {
        SentCache {
            epoch: 0,
            evictions: 0,
            lookups: 0,
            keys: [0; SENT_SLOTS],
            big: None,
        }
    }

    /// Whether `key` is held (and so was sent); holds it from now on.
    #[inline]
    fn check_and_insert(&mut self, key: u64) -> bool {
        if let Some(big) = &mut self.big {
            // First in, first out: a hit leaves the set as it is (moving
            // the key to the front, least recently used out, was a
            // `memmove` call on most of alloc_chain's lookups, whose sets
            // hold two or three of its 4,096 keys); a miss shifts the set
            // by one, the oldest key out. Evicting a key that is still in
            // use only makes its stack be sent once more.
            let set = &mut big[(key as usize) % BIG_SETS].0;
            if set.contains(&key) {
                return true;
            }
            let old = *set;
            set[1..].copy_from_slice(&old[..WAYS - 1]);
            set[0] = key;
            return false;
        }
        self.lookups += 1;
        if self.lookups == WINDOW {
            self.lookups = 0;
            self.evictions = 0;
        }
        let slot = &mut self.keys[(key as usize) % SENT_SLOTS];
        if *slot == key {
            return true;
        }
        let evicted = *slot != 0;
        *slot = key;
        if evicted {
            self.evictions += 1;
            if self.evictions >= GROW_AFTER {
                self.grow();
            }
        }
        false
    }

    /// Moves to the large cache, keeping every key the small one holds.
    #[cold]
    fn grow(&mut self) {
        // Not from the program's heap (see `sys::Mapped`); a failed mapping
        // leaves the small cache in use.
        let Some(map) = sys::Mapped::zeroed(BIG_SETS * core::mem::size_of::<Set>()) else {
            self.evictions = 0;
            return;
        };
        let p = map.leak().cast::<Set>();
        // SAFETY: a fresh zeroed mapping of BIG_SETS sets (an all-zero Set
        // is valid), page-aligned, never unmapped and referred to by this
        // cache alone.
        let big: &'static mut [Set] = unsafe { core::slice::from_raw_parts_mut(p, BIG_SETS) };
        self.big = Some(big);
        for i in 0..SENT_SLOTS {
            let k = self.keys[i];
            if k != 0 {
                self.check_and_insert(k);
            }
        }
    }

    fn forget(&mut self, key: u64) {
        match &mut self.big {
            Some(big) => {
                for k in big[(key as usize) % BIG_SETS].0.iter_mut() {
                    if *k == key {
                        *k = 0;
                    }
                }
            }
            None => {
                let slot = &mut self.keys[(key as usize) % SENT_SLOTS];
                if *slot == key {
                    *slot = 0;
                }
            }
        }
    }

    fn clear(&mut self) {
        self.keys = [0; SENT_SLOTS];
        if let Some(big) = &mut self.big {
            big.fill(Set([0; WAYS]));
        }
    }
}

/// The per-thread fields of every hook, zero in a new thread.
#[repr(C)]
pub struct Hot {
    /// The reentrancy guard: this thread is inside the tracer.
    busy: Cell<bool>,
    /// Set by our `vfork` around the system call: the child runs on this
    /// thread's memory, and must never record into the parent's trace.
    vfork: Cell<bool>,
    /// Inside `pthread_getattr_np` (our wrapper): glibc holds the thread's
    /// own lock while it allocates there, so a hook must not ask it again.
    in_getattr: Cell<bool>,
    /// Stacks this thread sent to the writer, wrapping (`dlclose` asks
    /// whether the unloading object's destructors made new ones).
    stacks_sent: Cell<u8>,
    /// The OS thread id, 0 until first asked.
    tid: Cell<u32>,
    /// This thread's syscall ring (`syscalls::ring`), null until taken.
    pub ring: Cell<*mut core::ffi::c_void>,
    /// This thread's allocation lane (`lane`), null until taken.
    pub lane: Cell<*mut core::ffi::c_void>,
    /// Where this thread's `errno` lives (`__errno_location`, constant for
    /// the thread's life), null until first asked: every hook saves and
    /// restores it, two calls through the PLT otherwise.
    errno: Cell<*mut libc::c_int>,
    /// While an allocation hook records its event (inside the guard): the
    /// stack pointer of its frame, where a signal handler that interrupts
    /// it is looked for (`side`); 0 otherwise.
    recording: Cell<u64>,
    /// This thread's side buffer (`side`), null until a signal handler
    /// needed one; swapped in with a compare-and-swap, as a handler may
    /// interrupt another one making it.
    pub side: AtomicPtr<core::ffi::c_void>,
    /// Inside glibc's allocator, called by a hook: the stack pointer of the
    /// hook's frame (see [`in_allocator`]; a `longjmp` above it clears it,
    /// see `side::before_jump`); 0 otherwise.
    allocator_sp: Cell<u64>,
}

// The block behind `hot()`: 56 zero bytes of `.tbss`, 8-aligned, hidden.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl tracer_hot_tls",
    ".hidden tracer_hot_tls",
    ".type tracer_hot_tls,@object",
    ".size tracer_hot_tls,56",
    "tracer_hot_tls:",
    ".zero 56",
    ".popsection",
);
const _: () = assert!(core::mem::size_of::<Hot>() == 56);

/// This thread's [`Hot`] fields: one initial-exec TLS address computation.
#[inline(always)]
pub fn hot() -> &'static Hot {
    let p: *const Hot;
    // SAFETY: `tracer_hot_tls` is a 56-byte, 8-aligned TLS symbol of this
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

/// What a stack capture uses on its thread, together (an allocation used
/// four thread-locals before, a call to `__tls_get_addr` each in a shared
/// object). It lives in the thread's lane (`lane::with_capture`), not in
/// static TLS: 48 KiB of TLS came out of every thread's stack, and a thread
/// asked with `PTHREAD_STACK_MIN` (16 KiB) could not be created at all
/// (`EINVAL`). An all-zero `Capture` is valid (memo and cache are reset on
/// first use: their generation and epoch are never 0).
pub struct Capture {
    /// The frame buffer of a capture of the default depth (its contents are
    /// whatever the previous capture left).
    pub frames: [u64; crate::config::DEFAULT_DEPTH],
    /// The cached unwinder's memo of this thread (`cfi`).
    pub memo: crate::cfi::Memo,
    /// The "already sent" stack keys.
    pub sent: Sent,
    /// The thread's stack bounds, `(0, 0)` until known.
    pub bounds: (u64, u64),
}

/// The stacks sent to the current writer from this lane (by its threads:
/// a lane is given to another thread only once the writer took every
/// message in it, stacks included).
pub struct Sent(SentCache);

thread_local! {
    static STACK_BOUNDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl Sent {
    /// Returns true if `key` was already sent to the current writer by this
    /// thread, and remembers it as sent otherwise. One producer's messages
    /// arrive in order, so a stack sent once by this thread precedes all its
    /// later uses.
    #[inline]
    pub fn already(&mut self, key: u64) -> bool {
        let epoch = EPOCH.load(Ordering::Relaxed);
        let cache = &mut self.0;
        if cache.epoch != epoch {
            cache.clear();
            cache.epoch = epoch;
        }
        cache.check_and_insert(key)
    }

    /// Forgets that `key` was sent (its message could not be delivered).
    pub fn forget(&mut self, key: u64) {
        self.0.forget(key);
    }
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

    /// The stack pointer of the allocation hook recording on this thread
    /// now, 0 when none is.
    #[inline]
    pub fn recording(&self) -> u64 {
        self.recording.get()
    }

    #[inline]
    pub fn set_recording(&self, sp: u64) {
        self.recording.set(sp);
    }

    /// The stack pointer of the hook inside glibc's allocator on this
    /// thread, 0 when none is (see [`in_allocator`]).
    #[inline]
    pub fn allocator_sp(&self) -> u64 {
        self.allocator_sp.get()
    }

    /// Forgets the mark of [`in_allocator`] (a `longjmp` left its frame).
    #[inline]
    pub fn clear_allocator_sp(&self) {
        self.allocator_sp.set(0);
    }

    /// Whether a hook must let this thread's call pass unrecorded: it is
    /// inside the tracer or a `vfork` child's.
    #[inline]
    pub fn passing(&self) -> bool {
        self.busy.get() | self.vfork.get()
    }

    /// This thread's `errno`, its address cached.
    #[inline]
    pub fn errno_location(&self) -> *mut libc::c_int {
        let p = self.errno.get();
        if !p.is_null() {
            return p;
        }
        // SAFETY: __errno_location has no preconditions and returns the
        // calling thread's errno, valid for the thread's life.
        let p = unsafe { libc::__errno_location() };
        self.errno.set(p);
        p
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

/// Counts a stack sent to the writer by this thread.
#[inline]
pub fn count_stack_sent() {
    let h = hot();
    h.stacks_sent.set(h.stacks_sent.get().wrapping_add(1));
}

/// Stacks this thread sent to the writer so far (wrapping at 256).
pub fn stacks_sent() -> u8 {
    hot().stacks_sent.get()
}

/// Whether this thread is inside the tracer right now.
#[inline]
pub fn inside() -> bool {
    hot().busy.get()
}

/// Leaves the tracer's guard without the `Guard` (the code that held it
/// was left by a `longjmp`; see `side::before_jump`).
pub fn abandon_guard() {
    hot().busy.set(false);
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

/// Runs `call` (a call into glibc's allocator made by a hook) marked as
/// such on this thread: a signal that arrives inside it may find the
/// allocator's lock held by this very thread, and whatever its handler
/// waits for must not need that lock (`signals`, the exit). The tracer's
/// own heap (`alloc`) is not marked: its calls on a program's thread are
/// rare (a new lane, a rule computed).
#[inline(always)]
pub fn in_allocator<R>(call: impl FnOnce() -> R) -> R {
    let h = hot();
    let sp: u64;
    // SAFETY: reads the stack pointer; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    // A handler that calls the allocator while an interrupted call holds
    // its lock leaves the mark as it found it.
    let was = h.allocator_sp.replace(sp);
    let r = call();
    h.allocator_sp.set(was);
    r
}

/// Whether this thread was inside glibc's allocator, called by a hook, when
/// the signal being handled arrived (or is now).
pub fn interrupted_allocator() -> bool {
    hot().allocator_sp.get() != 0
}

/// Whether this thread is inside `pthread_getattr_np`.
#[inline]
pub fn in_getattr() -> bool {
    hot().in_getattr.get()
}

/// Marks this thread as inside `pthread_getattr_np` (or not); returns the
/// previous mark.
pub fn set_in_getattr(v: bool) -> bool {
    hot().in_getattr.replace(v)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> u64 {
        // Well mixed, as stack keys are.
        crate::intern::stack_key(&[i + 1])
    }

    #[test]
    fn sent_cache_grows_when_the_working_set_outruns_it() {
        let mut c = SentCache::new();
        // 4,096 stacks in a cycle: the small cache keeps missing until it
        // has evicted GROW_AFTER keys, then the large one holds them all.
        let mut misses_per_round = Vec::new();
        for _ in 0..4 {
            let misses = (0..4096).filter(|&i| !c.check_and_insert(key(i))).count();
            misses_per_round.push(misses);
        }
        assert!(c.big.is_some());
        assert_eq!(misses_per_round[0], 4096);
        assert!(misses_per_round[1] > 2048, "{misses_per_round:?}");
        // Sets hold 8 keys: a set given more than 8 of the 4,096 keys
        // (Poisson with mean 2: ~0.5 of the 2,048 sets) keeps missing,
        // nothing else does.
        assert!(misses_per_round[3] < 32, "{misses_per_round:?}");
        // Never a false "sent": a key not inserted is never reported held.
        for i in 10_000..20_000 {
            assert!(!c.check_and_insert(key(i)));
        }
        // forget and clear drop keys from the large cache.
        assert!(c.check_and_insert(key(19_999)));
        c.forget(key(19_999));
        assert!(!c.check_and_insert(key(19_999)));
        c.clear();
        assert!(!c.check_and_insert(key(19_999)));
    }

    /// In the large cache a set keeps the last 8 keys inserted into it,
    /// whatever was looked up since: the ninth new key evicts the first,
    /// even when the first was the one used most.
    #[test]
    fn a_large_cache_set_evicts_the_oldest_key() {
        let mut c = SentCache::new();
        c.grow();
        assert!(c.big.is_some());
        let set = |k: u64| (k as usize) % BIG_SETS;
        let same: Vec<u64> = (0..)
            .map(key)
            .filter(|&k| set(k) == set(key(0)))
            .take(WAYS + 1)
            .collect();
        for &k in &same[..WAYS] {
            assert!(!c.check_and_insert(k));
        }
        for _ in 0..10 {
            assert!(c.check_and_insert(same[0]));
        }
        assert!(!c.check_and_insert(same[WAYS]));
        assert!(!c.check_and_insert(same[0]), "the oldest key went");
        // ... and with it in again, the second oldest went.
        assert!(!c.check_and_insert(same[1]));
        for &k in &same[3..] {
            assert!(c.check_and_insert(k));
        }
    }

    #[test]
    fn a_low_miss_rate_never_grows_the_cache() {
        let mut c = SentCache::new();
        // 100 keys, two of which share a slot: 2 evictions every 100
        // lookups (2%), 20,000 over the run, never 4,096 in one window.
        let slot = |k: u64| (k as usize) % SENT_SLOTS;
        let mut keys: Vec<u64> = Vec::new();
        let mut i = 0;
        while keys.len() < 99 {
            let k = key(i);
            if keys.iter().all(|&o| slot(o) != slot(k)) {
                keys.push(k);
            }
            i += 1;
        }
        let twin = (i..).map(key).find(|&k| slot(k) == slot(keys[0])).unwrap();
        keys.push(twin);
        let mut misses = 0;
        for _ in 0..10_000 {
            for &k in &keys {
                misses += usize::from(!c.check_and_insert(k));
            }
        }
        assert_eq!(misses, 98 + 2 * 10_000);
        assert!(c.big.is_none());
    }
}
