//! Allocation events of a signal handler that interrupted a hook.
//!
//! A hook records its event inside the thread's guard (`tls::enter`): the
//! stack capture, the interning, the push into the thread's lane. A signal
//! landing there runs its handler inside the guard too, and the handler's
//! `malloc` and `free` used to pass unrecorded: a lost `free` left its block
//! live in the trace, and the exit's leak check reported it.
//!
//! Two things make recording them possible:
//!
//! - **Telling a handler's call from the tracer's own.** The tracer's Rust
//!   allocations never reach the hooks (`alloc`), but some libc functions it
//!   calls do allocate (`pthread_getattr_np`, a thread-local destructor's
//!   registration), and their calls arrive under the guard as well. While an
//!   allocation hook records, its stack pointer is in the thread's `Hot`
//!   block (`tls::Hot::recording`). A call arriving under the guard then is
//!   a handler's when a signal frame lies between its stack pointer and that
//!   one: the word the kernel put at the frame's base is the handler's
//!   return address, glibc's `sigreturn` trampoline (learned from the
//!   kernel's copy of a disposition installed through glibc), and the
//!   interrupted stack pointer saved in the frame lies above it and at or
//!   below the hook's. A handler on an alternate signal stack is told by
//!   `sigaltstack`: the thread runs on it, and the hook did not.
//! - **A buffer neither the interrupted push nor anything else the hook was
//!   doing can see half-done.** The handler's event goes into the thread's
//!   side buffer (a mapping of its own, made on first need, never part of
//!   the program's heap), with its stack captured there without the
//!   thread's unwinding memo. The interrupted hook, once its own event is
//!   delivered, moves them into its lane in order ([`drain`]).
//!
//! Order: a handler's events come after the event of the hook it
//! interrupted. For an allocation that is exact (glibc returned the block
//! before the hook recorded it). For a free, the handler ran before the
//! real `free`, which only matters if it freed the same block, a double
//! free. For the free half of a `realloc` the handler ran before the real
//! `realloc`, and its events land between the two halves (the writer
//! pairs a thread's `realloc` halves innermost first).
//!
//! A buffer holds `cap` events; a handler that makes more while one hook
//! is interrupted loses the rest, counted and said at exit.

use core::sync::atomic::{compiler_fence, AtomicU64, AtomicUsize, Ordering};

use crate::{sys, tls};

/// Event kinds, in the low byte of a slot's first word (0: not written):
/// the lanes' own kinds.
pub(crate) use crate::lane::{
    ALLOC, FREE_MSG as FREE, REALLOC_ALLOC, REALLOC_FAILED, REALLOC_FREE,
};

/// The kind of an allocation event (the new block of a `realloc` or not).
#[inline(always)]
pub fn alloc_kind(from_realloc: bool) -> u64 {
    if from_realloc {
        REALLOC_ALLOC
    } else {
        ALLOC
    }
}

/// The kind of a free event (the old block of a `realloc` or not).
#[inline(always)]
pub fn free_kind(realloc: bool) -> u64 {
    if realloc {
        REALLOC_FREE
    } else {
        FREE
    }
}

/// Bytes of a thread's side buffer; only the pages written become resident.
const BYTES: usize = 1 << 20;
/// Words of a slot besides its frames: head (kind, frame count), time,
/// address, size.
const FIXED: usize = 4;
/// How far above a handler's call its signal frame is looked for.
const SCAN_LIMIT: u64 = 1 << 20;

/// glibc's `sigreturn` trampoline: the return address of every handler
/// installed through glibc, 0 until learned.
static RESTORER: AtomicU64 = AtomicU64::new(0);
/// Handlers' events a full buffer had no room for.
static LOST: AtomicU64 = AtomicU64::new(0);
/// Handlers' events put into side buffers (`TRACER_STACK_STATS`).
static RECORDED: AtomicU64 = AtomicU64::new(0);
/// Recording hooks left by a `longjmp` ([`before_jump`];
/// `TRACER_STACK_STATS`).
static JUMPED_OUT: AtomicU64 = AtomicU64::new(0);

#[repr(C)]
struct Header {
    /// Slots reserved, written or being written (a handler may interrupt
    /// another one, so reservation is one atomic add).
    len: AtomicUsize,
    /// Words of a slot: [`FIXED`] + the stack depth at creation.
    slot_words: usize,
    /// Slots the mapping holds.
    cap: usize,
}

/// Learns the trampoline from the kernel's copy of `sig`'s disposition,
/// if it is a handler installed with one (glibc installs every handler with
/// `SA_RESTORER` and the same trampoline).
pub fn learn_restorer(sig: libc::c_int) {
    if RESTORER.load(Ordering::Relaxed) != 0 {
        return;
    }
    // The kernel's `struct sigaction`: handler, flags, restorer, mask.
    let mut k = [0u64; 4];
    // SAFETY: a query only (null new action); `k` is the kernel's 32-byte
    // layout on x86-64 and aarch64, with an 8-byte mask.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            core::ptr::null::<u64>(),
            k.as_mut_ptr(),
            8usize,
        )
    };
    const SA_RESTORER: u64 = 0x0400_0000;
    if rc == 0 && k[0] > 1 && k[1] & SA_RESTORER != 0 && k[2] != 0 {
        RESTORER.store(k[2], Ordering::Relaxed);
    }
}

/// glibc's `sigreturn` trampoline, 0 until learned.
pub fn restorer() -> u64 {
    RESTORER.load(Ordering::Relaxed)
}

/// Events a thread's side buffer holds at the default stack depth.
pub fn capacity() -> usize {
    (BYTES - core::mem::size_of::<Header>()) / ((FIXED + crate::config::DEFAULT_DEPTH) * 8)
}

/// Handlers' events put into side buffers so far.
pub fn recorded() -> u64 {
    RECORDED.load(Ordering::Relaxed)
}

/// Recording hooks left by a `longjmp` so far.
pub fn jumped_out() -> u64 {
    JUMPED_OUT.load(Ordering::Relaxed)
}

/// Handlers' events lost so far (a full buffer).
pub fn lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// Marks the calling allocation hook as recording until the value is
/// dropped; its stack pointer bounds the search of [`record`]. Made before
/// the hook enters the guard, so that no instant has the guard taken and
/// the mark missing (a handler's calls there would pass unrecorded); the
/// drop puts back the mark found, so that a handler that runs its own hooks
/// before the guard is taken, or after it is left, restores the
/// interrupted hook's.
pub struct Recording {
    outer: u64,
}

impl Recording {
    #[inline(always)]
    pub fn start() -> Recording {
        let hot = tls::hot();
        let outer = hot.recording();
        hot.set_recording(crate::unwind::stack_pointer());
        Recording { outer }
    }

    /// The mark found: the stack pointer of the hook this call interrupted
    /// (or 0), when the guard was already taken.
    #[inline(always)]
    pub fn outer(&self) -> u64 {
        self.outer
    }
}

impl Drop for Recording {
    #[inline(always)]
    fn drop(&mut self) {
        tls::hot().set_recording(self.outer);
    }
}

/// Whether the call that arrived under the guard at stack pointer `sp` is a
/// signal handler's that interrupted the hook recording at `rec`.
fn interrupted_hook(sp: u64, rec: u64) -> bool {
    // The handler ran on this stack: its frame lies in [sp, rec).
    #[cfg(target_arch = "x86_64")]
    if sp < rec && rec - sp <= SCAN_LIMIT {
        let restorer = RESTORER.load(Ordering::Relaxed);
        // The kernel's frame: the return address, then the `ucontext`,
        // whose saved registers start 40 bytes in; the stack pointer is
        // the 16th of them.
        const SAVED_SP: u64 = 8 + 40 + 15 * 8;
        if restorer != 0 {
            let mut p = sp.next_multiple_of(8);
            while p + SAVED_SP + 8 <= rec {
                // SAFETY: [sp, rec) is this thread's live stack, from the
                // current frame up to the recording hook's.
                let (word, saved) =
                    unsafe { (*(p as *const u64), *((p + SAVED_SP) as *const u64)) };
                if word == restorer && saved > p && saved <= rec {
                    return true;
                }
                p += 8;
            }
        }
    }
    // The handler runs on an alternate signal stack and the hook did not.
    // SAFETY: a query of this thread's alternate stack into a local.
    let mut ss: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above; a null new stack changes nothing.
    if unsafe { libc::syscall(libc::SYS_sigaltstack, core::ptr::null::<u8>(), &mut ss) } != 0 {
        return false;
    }
    let (lo, hi) = (ss.ss_sp as u64, ss.ss_sp as u64 + ss.ss_size as u64);
    let on = |a: u64| a >= lo && a < hi;
    ss.ss_flags & libc::SS_ONSTACK != 0 && on(sp) && !on(rec)
}

/// This thread's side buffer, made on first need.
fn buffer(slot_words: usize) -> Option<&'static Header> {
    let home = &tls::hot().side;
    let mut p = home.load(Ordering::Acquire);
    if p.is_null() {
        let map = sys::Mapped::zeroed(BYTES)?;
        let fresh = map.leak();
        // SAFETY: a fresh zeroed, page-aligned mapping of BYTES bytes, ours
        // alone until published below.
        unsafe {
            let h = fresh.cast::<Header>();
            (*h).slot_words = slot_words;
            (*h).cap = (BYTES - core::mem::size_of::<Header>()) / (slot_words * 8);
        }
        p = match home.compare_exchange(
            core::ptr::null_mut(),
            fresh.cast(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh.cast(),
            // A handler that interrupted this one made it first: ours stays
            // mapped, unused (a kept mapping is never unmapped).
            Err(other) => other,
        };
    }
    // SAFETY: published buffers are initialised headers, never unmapped.
    Some(unsafe { &*p.cast::<Header>() })
}

/// The words of slot `i` of `h`.
///
/// # Safety
/// `i < h.cap`.
unsafe fn slot(h: &Header, i: usize) -> *mut u64 {
    let base = (h as *const Header as *mut u8).add(core::mem::size_of::<Header>());
    base.cast::<u64>().add(i * h.slot_words)
}

/// Records the event of a call that arrived under the guard, if it is a
/// signal handler's that interrupted the hook recording at stack pointer
/// `rec` (else the call passes unrecorded, as the tracer's own do).
/// `capture` fills a frame buffer with the handler's stack and returns how
/// many frames it wrote; `depth` is the most it writes.
#[cold]
#[inline(never)]
pub fn record(
    rec: u64,
    kind: u64,
    addr: u64,
    size: u64,
    depth: usize,
    capture: impl FnOnce(&mut [u64]) -> usize,
) {
    if rec == 0 || tls::vforked() || !interrupted_hook(crate::unwind::stack_pointer(), rec) {
        return;
    }
    let Some(h) = buffer(FIXED + depth) else {
        LOST.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let i = h.len.fetch_add(1, Ordering::Relaxed);
    if i >= h.cap {
        return; // counted by the drain
    }
    // SAFETY: slot `i` (< cap) was reserved by the add above for this call
    // alone; it holds `slot_words` words, `depth` of them frames at most.
    unsafe {
        let s = slot(h, i);
        *s.add(1) = sys::now_ns();
        *s.add(2) = addr;
        *s.add(3) = size;
        let n = if kind == ALLOC || kind == REALLOC_ALLOC {
            let frames = core::slice::from_raw_parts_mut(s.add(FIXED), h.slot_words - FIXED);
            capture(&mut frames[..depth.min(h.slot_words - FIXED)])
        } else {
            0
        };
        compiler_fence(Ordering::Release);
        core::ptr::write_volatile(s, kind | (n as u64) << 8);
    }
    RECORDED.fetch_add(1, Ordering::Relaxed);
}

/// Called by our `longjmp` and its relatives before glibc's jumps: a
/// signal handler that interrupted a recording hook and jumps out of it
/// (to a `sigsetjmp` above the hook's frame) would leave the thread inside
/// the tracer's guard for good, and every later allocation of the thread
/// unrecorded (`examples/signal_longjmp.c`: 0 of its last 100). The guard
/// and the mark are left here. The target's stack pointer is read from
/// `env` as glibc stores it on x86-64 (`__jmp_buf[6]`, mangled with the
/// thread's pointer guard, `fs:0x30`). A jump within the handler (its
/// target below the hook's frame) leaves both as they are.
///
/// What the interrupted hook had not finished is lost with it: its own
/// event if not yet delivered (glibc's call was made: a block the program
/// never received, or a free whose real `free` never ran), and a stack it
/// was sending (later events of that stack read as having no frames).
///
/// # Safety
/// `env` is the `jmp_buf` the program passes to `longjmp`.
pub unsafe fn before_jump(env: *const u64) {
    let hot = tls::hot();
    let rec = hot.recording();
    let alloc_sp = hot.allocator_sp();
    if (rec == 0 && alloc_sp == 0) || env.is_null() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let guard: u64;
        // SAFETY: reads the pointer guard of glibc's thread control block
        // (`tcbhead_t.pointer_guard`, at 0x30 from the thread pointer).
        unsafe {
            core::arch::asm!(
                "mov {}, qword ptr fs:[0x30]",
                out(reg) guard,
                options(nostack, readonly, preserves_flags)
            )
        };
        // SAFETY: `env` is a jmp_buf (caller's contract): 8 words at least.
        let target_sp = unsafe { *env.add(6) }.rotate_right(0x11) ^ guard;
        // A jump out of a hook's call into glibc's allocator: the mark would
        // stay, and the exit would take the thread for one still inside.
        if alloc_sp != 0 && target_sp > alloc_sp {
            hot.clear_allocator_sp();
        }
        if rec != 0 && tls::inside() && target_sp > rec {
            tls::abandon_guard();
            hot.set_recording(0);
            JUMPED_OUT.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether handlers left events for this thread's recording hook.
#[inline(always)]
pub fn pending() -> bool {
    let p = tls::hot().side.load(Ordering::Relaxed);
    // SAFETY: a published buffer is an initialised header, never unmapped.
    !p.is_null() && unsafe { (*p.cast::<Header>()).len.load(Ordering::Relaxed) } != 0
}

/// Hands the events handlers left, in order, to `deliver` (kind, time,
/// address, size, frames). Called by the interrupted hook, still recording:
/// a handler that interrupts this adds after them, and is taken too.
#[cold]
#[inline(never)]
pub fn drain(mut deliver: impl FnMut(u64, u64, u64, u64, &[u64])) {
    let p = tls::hot().side.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: a published buffer is an initialised header, never unmapped.
    let h = unsafe { &*p.cast::<Header>() };
    let mut pos = 0;
    loop {
        let end = h.len.load(Ordering::Acquire);
        while pos < end.min(h.cap) {
            // SAFETY: `pos` < cap; the slot's writer finished (a handler
            // runs to its end before the code it interrupted goes on), or
            // left its head 0 (it jumped out of the handler): skipped.
            unsafe {
                let s = slot(h, pos);
                let head = core::ptr::read_volatile(s);
                if head != 0 {
                    let n = ((head >> 8) as usize).min(h.slot_words - FIXED);
                    let frames = core::slice::from_raw_parts(s.add(FIXED), n);
                    deliver(head & 0xff, *s.add(1), *s.add(2), *s.add(3), frames);
                    core::ptr::write_volatile(s, 0);
                }
            }
            pos += 1;
        }
        pos = pos.max(end);
        if h.len
            .compare_exchange(end, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            LOST.fetch_add(end.saturating_sub(h.cap) as u64, Ordering::Relaxed);
            return;
        }
    }
}
