//! The single-producer lane: while one thread is the only one that records
//! allocations, its messages go into a ring it alone writes instead of the
//! shared channel.
//!
//! A channel send costs ~130 instructions and a shared cache line per
//! event (a compare-and-swap on the channel's tail, the slot's stamp, the
//! receiver's waker): 13% of the program thread of `alloc_chain`, ~8% of
//! python3's. A single-producer ring costs a few stores: the slot, then the
//! published count (`head`, `Release`). The writer reads the slots up to
//! `head` and hands each message to the same handler as the channel's.
//!
//! **Order.** One producer's messages stay in order in the ring. Messages
//! of other threads are what could be reordered: a `free(p)` in the ring
//! followed, in real time, by another thread's `malloc` returning `p` must
//! reach the writer first. So the lane has one owner (the thread that
//! started the trace: the constructor's, or a fork child's), and it closes
//! for good the first time any other thread records an event: that thread
//! ([`close`]) clears `OPEN`, makes sure the owner is not half-way through
//! a push, and only then sends its own message through the channel; the
//! owner sends through the channel from then on. The writer drains the
//! ring before it handles each channel message, and every message in the
//! ring was published before the close completed, so it precedes every
//! channel message that could depend on it.
//!
//! Making sure the owner is not half-way: the owner raises `BUSY`, then
//! reads `OPEN`, for each push; the closer clears `OPEN`, then reads `BUSY`.
//! Each side's store must be visible before its load (a store-load fence),
//! which the owner does not pay for: the closer issues
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` between its store and its
//! load, a full barrier on every running thread of the process. The owner
//! then either read `OPEN` as clear, or its `BUSY` is visible and the
//! closer waits for it to drop (the push completes: the writer makes room
//! if the ring was full, or tracing stopped and the push gives up). Where
//! the kernel has no such `membarrier` command, the lane never opens.
//!
//! The ring's messages own their boxes (a stack's frames, a marker's
//! name); the writer takes them by value. A fork child resets the ring: the
//! parent's pending messages are the parent writer's to write.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::writer::{self, Msg};
use crate::{sys, tls};

/// Slots of the ring (a power of two): 48 KiB of 48-byte messages (every
/// slot is resident once the ring has turned; the peak RSS of python3 under
/// the tracer is within ~0.3 MiB of heaptrack's).
const SLOTS: usize = 1024;

#[repr(C, align(64))]
struct Line<T>(T);

struct Lane {
    /// Messages published by the owner.
    head: Line<AtomicU64>,
    /// Messages taken by the writer.
    tail: Line<AtomicU64>,
    /// The owner's copy of `tail` as last read (the owner's alone).
    seen_tail: Line<UnsafeCell<u64>>,
    slots: UnsafeCell<[MaybeUninit<Msg>; SLOTS]>,
}

// SAFETY: slots in [tail, head) are written by the one owner before `head`
// is published and read by the writer (the one consumer) after it loads
// `head`; slots outside that range are the owner's. `seen_tail` is only
// touched by the owner, inside its guard.
unsafe impl Sync for Lane {}

static LANE: Lane = Lane {
    head: Line(AtomicU64::new(0)),
    tail: Line(AtomicU64::new(0)),
    seen_tail: Line(UnsafeCell::new(0)),
    slots: UnsafeCell::new([const { MaybeUninit::uninit() }; SLOTS]),
};

/// The lane takes messages (cleared once, for good, by [`close`]).
static OPEN: AtomicBool = AtomicBool::new(false);
/// The owner is inside a push.
static BUSY: AtomicU32 = AtomicU32::new(0);
/// `TRACER_LANE=0` (private, for measurements): never open the lane.
static REFUSED: AtomicBool = AtomicBool::new(false);

const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integer arguments and touches no memory
    // of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) }
}

/// Never open the lane (`TRACER_LANE=0`).
pub fn refuse() {
    REFUSED.store(true, Ordering::Relaxed);
}

/// Makes the calling thread the lane's owner and opens it, when the kernel
/// has the barrier [`close`] needs. Called when a writer starts (the
/// constructor, a fork child), before the state becomes TRACING.
pub fn open_here() {
    OPEN.store(false, Ordering::SeqCst);
    if REFUSED.load(Ordering::Relaxed) {
        return;
    }
    let query = sys::keep_errno(|| membarrier(MEMBARRIER_CMD_QUERY));
    if query < 0 || query & MEMBARRIER_CMD_PRIVATE_EXPEDITED == 0 {
        return;
    }
    if sys::keep_errno(|| membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)) != 0 {
        return;
    }
    tls::hot().set_lane_owner(true);
    BUSY.store(0, Ordering::SeqCst);
    OPEN.store(true, Ordering::SeqCst);
}

/// In a fork child, before its writer starts: the parent's pending messages
/// are forgotten (their boxes are the parent's to free) and the lane is
/// closed until [`open_here`].
pub fn after_fork_child() {
    OPEN.store(false, Ordering::SeqCst);
    BUSY.store(0, Ordering::SeqCst);
    let head = LANE.head.0.load(Ordering::Relaxed);
    LANE.tail.0.store(head, Ordering::Relaxed);
    // SAFETY: the child has one thread, inside its guard.
    unsafe { *LANE.seen_tail.0.get() = head };
}

/// Whether this thread's message goes into the lane: `Some(msg)` back when
/// it must go through the channel instead. Called inside the guard, while
/// tracing.
#[inline(always)]
pub fn offer(msg: Msg) -> Option<Msg> {
    let hot = tls::hot();
    if !hot.lane_owner() {
        if OPEN.load(Ordering::Relaxed) {
            close();
        }
        return Some(msg);
    }
    BUSY.store(1, Ordering::Relaxed);
    // A compiler barrier only: the store-load order is made by the closer's
    // membarrier (module doc).
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    if !OPEN.load(Ordering::Relaxed) {
        BUSY.store(0, Ordering::Release);
        hot.set_lane_owner(false);
        return Some(msg);
    }
    let kept = push(msg);
    BUSY.store(0, Ordering::Release);
    kept
}

/// Closes the lane from a thread other than its owner; returns once every
/// message the owner put into it is published.
#[cold]
#[inline(never)]
fn close() {
    if !OPEN.swap(false, Ordering::SeqCst) {
        // Closed by another thread meanwhile: wait as it does.
        wait_not_busy();
        return;
    }
    // Should the barrier fail (it cannot once registered), a short sleep
    // lets any push in flight end; the owner reads OPEN at its next push.
    if sys::keep_errno(|| membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) != 0 {
        sys::sleep_us(1000);
    }
    wait_not_busy();
}

fn wait_not_busy() {
    let mut spins = 0u32;
    while BUSY.load(Ordering::Acquire) != 0 {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            sys::sleep_us(20);
        }
    }
}

/// Appends `msg`; `Some(msg)` back when tracing stopped while the ring was
/// full (the caller drops it, as the channel would).
#[inline(always)]
fn push(msg: Msg) -> Option<Msg> {
    let head = LANE.head.0.load(Ordering::Relaxed);
    // SAFETY: `seen_tail` is the owner's (module doc); we are the owner.
    let seen = unsafe { &mut *LANE.seen_tail.0.get() };
    if head - *seen >= SLOTS as u64 && !wait_for_room(head, seen) {
        return Some(msg);
    }
    // SAFETY: head - tail < SLOTS, so the slot is outside [tail, head): the
    // writer does not read it until `head` moves past it.
    unsafe {
        let slots = &mut *LANE.slots.get();
        slots[(head as usize) & (SLOTS - 1)].write(msg);
    }
    LANE.head.0.store(head + 1, Ordering::Release);
    // Past half full: make sure the writer is not asleep.
    if head + 1 - *seen > (SLOTS / 2) as u64 {
        *seen = LANE.tail.0.load(Ordering::Acquire);
        if head + 1 - *seen > (SLOTS / 2) as u64 {
            sys::keep_errno(writer::wake_if_sleeping);
        }
    }
    None
}

/// Waits until the writer freed a slot; false when tracing stopped.
#[cold]
#[inline(never)]
fn wait_for_room(head: u64, seen: &mut u64) -> bool {
    sys::keep_errno(|| {
        let mut wait = writer::RoomWait::default();
        loop {
            *seen = LANE.tail.0.load(Ordering::Acquire);
            if head - *seen < SLOTS as u64 {
                return true;
            }
            if !crate::lifecycle::accepting() {
                return false;
            }
            wait.pause();
        }
    })
}

// ---------------------------------------------------------------- consumer

/// Hands every published message to `handle`, in order (the writer thread
/// only); returns how many.
pub fn drain(mut handle: impl FnMut(Msg)) -> usize {
    let head = LANE.head.0.load(Ordering::Acquire);
    let first = LANE.tail.0.load(Ordering::Relaxed);
    let mut tail = first;
    while tail != head {
        // SAFETY: [tail, head) was published by the owner (Acquire above)
        // and each slot is read once before `tail` moves past it, after
        // which the owner may write it again.
        let msg = unsafe { (*LANE.slots.get())[(tail as usize) & (SLOTS - 1)].assume_init_read() };
        tail += 1;
        // Give slots back as we go, so a waiting owner resumes early.
        if tail & 255 == 0 {
            LANE.tail.0.store(tail, Ordering::Release);
        }
        handle(msg);
    }
    if tail != first {
        LANE.tail.0.store(tail, Ordering::Release);
    }
    (tail - first) as usize
}

/// Whether the writer has taken every published message.
pub fn is_empty() -> bool {
    LANE.head.0.load(Ordering::Acquire) == LANE.tail.0.load(Ordering::Relaxed)
}
