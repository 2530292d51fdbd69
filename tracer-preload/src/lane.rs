//! Per-thread lanes: each thread that records allocations puts its messages
//! into a ring it alone writes, and the writer thread, the one reader,
//! takes them from every lane in turn.
//!
//! A channel send costs ~130 instructions and several cache lines shared by
//! every producer (a compare-and-swap on the channel's tail, the slot's
//! stamp, the receiver's waker): with two threads allocating, crossbeam's
//! `try_send` and `try_recv` were ~22% of alloc_chain's samples. A
//! single-producer ring costs a few stores: the slot, then the published
//! count (`head`, `Release`). No line is written by two producers.
//!
//! **Order.** One producer's messages stay in order in its lane. Across
//! threads, the one order the trace needs is a block's free before another
//! thread's allocation of the same address, and it is there to be found: a
//! free is published (its lane's `head` stored with `Release`) before the
//! real `free` runs, glibc hands the address to another thread only after
//! that (through its locks or atomics, release then acquire), and that
//! thread publishes its allocation after `malloc` returned. So once the
//! writer has loaded the allocating lane's `head` (`Acquire`), a fresh load
//! of the freeing lane's `head` includes the free. The writer
//! (`writer::State::drain_lanes`) therefore takes the lanes' messages
//! roughly in time order and holds back an allocation at an address its
//! table still has live until the other lanes, loaded again, have given
//! the free; if they have none (a free the hooks never saw), the
//! allocation goes through as it would have before.
//!
//! **Lifetime.** A lane is taken on a thread's first message (a free one,
//! or a new one: 48 KiB, of which only the slots written become resident)
//! and given back by a `pthread` key destructor when the thread exits: it is
//! then *abandoned*, and the writer makes it free again once it has taken
//! every message in it. A thread that records again after the destructor
//! ran (another destructor's allocation) takes its own lane back if the
//! writer has not freed it yet, or any free lane otherwise (its old lane
//! was then empty: its messages all precede the new ones). Lanes are never
//! unmapped. A fork child forgets the parent's messages (their boxes are
//! the parent's to free) and every lane is free again there.
//!
//! `TRACER_LANE=0` (private, for measurements) sends every message through
//! the shared channel instead.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::writer::{self, Msg};
use crate::{sys, tls};

/// Slots of a lane (a power of two): 48 KiB of 48-byte messages.
pub const SLOTS: usize = 1024;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const ABANDONED: u8 = 2;

#[repr(C, align(64))]
struct Line<T>(T);

pub struct Lane {
    /// Messages published by the owner.
    head: Line<AtomicU64>,
    /// Messages taken by the writer.
    tail: Line<AtomicU64>,
    /// The owner's copy of `tail` as last read (the owner's alone).
    seen_tail: Line<UnsafeCell<u64>>,
    state: AtomicU8,
    /// The owning thread's id, so that it can take its lane back after its
    /// key destructor ran.
    tid: AtomicU32,
    next: AtomicPtr<Lane>,
    slots: UnsafeCell<[MaybeUninit<Msg>; SLOTS]>,
}

// SAFETY: slots in [tail, head) are written by the one owner before `head`
// is published and read by the writer (the one consumer) after it loads
// `head`; slots outside that range are the owner's. `seen_tail` is only
// touched by the owner, inside its guard.
unsafe impl Sync for Lane {}

/// Every lane ever made (a push-only list; lanes are never freed).
static LANES: AtomicPtr<Lane> = AtomicPtr::new(core::ptr::null_mut());
/// The `pthread` key whose destructor abandons an exiting thread's lane.
static KEY: AtomicU64 = AtomicU64::new(u64::MAX);
/// `TRACER_LANE=0`: every message goes through the channel.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Never use lanes (`TRACER_LANE=0`).
pub fn refuse() {
    REFUSED.store(true, Ordering::Relaxed);
}

/// Creates the thread-exit key (from the constructor, once, before the
/// program starts threads).
pub fn init() {
    if KEY.load(Ordering::Relaxed) != u64::MAX {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is writable; the destructor is a plain function valid for
    // the life of the process.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_gone)) } == 0 {
        KEY.store(u64::from(key), Ordering::Release);
    }
}

/// Key destructor: the thread is exiting; its lane is abandoned (the writer
/// frees it for reuse once it has taken every message).
unsafe extern "C" fn thread_gone(p: *mut c_void) {
    let hot = tls::hot();
    if hot.lane.get() == p {
        hot.lane.set(core::ptr::null_mut());
    }
    if !p.is_null() {
        // SAFETY: lanes are never freed.
        let lane = &*p.cast::<Lane>();
        let _ = lane
            .state
            .compare_exchange(OWNED, ABANDONED, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// In a fork child, before its writer starts: the parent's pending messages
/// are forgotten and every lane is free (the child's one thread takes one
/// again on its next message).
pub fn after_fork_child() {
    tls::hot().lane.set(core::ptr::null_mut());
    for lane in lanes() {
        let head = lane.head.0.load(Ordering::Relaxed);
        lane.tail.0.store(head, Ordering::Relaxed);
        // SAFETY: the child has one thread, inside its guard; no lane has an
        // owner here.
        unsafe { *lane.seen_tail.0.get() = head };
        lane.state.store(FREE, Ordering::Release);
    }
}

fn lanes() -> impl Iterator<Item = &'static Lane> {
    let mut p = LANES.load(Ordering::Acquire);
    core::iter::from_fn(move || {
        if p.is_null() {
            return None;
        }
        // SAFETY: lanes are never freed.
        let l = unsafe { &*p };
        p = l.next.load(Ordering::Acquire);
        Some(l)
    })
}

// ---------------------------------------------------------------- producer

/// Puts this thread's message into its lane; `Some(msg)` back when it must
/// go through the channel instead (no lane could be had, or tracing stopped
/// while the lane was full). Called inside the guard, while tracing.
#[inline(always)]
pub fn offer(msg: Msg) -> Option<Msg> {
    let p = tls::hot().lane.get().cast::<Lane>();
    let lane = if p.is_null() {
        match sys::keep_errno(take) {
            Some(l) => l,
            None => return Some(msg),
        }
    } else {
        // SAFETY: lanes are never freed.
        unsafe { &*p }
    };
    push(lane, msg)
}

/// Takes a lane for this thread: its own abandoned one, a free one, or a
/// new one; registers it for the thread's exit.
#[cold]
#[inline(never)]
fn take() -> Option<&'static Lane> {
    if REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    let hot = tls::hot();
    let tid = hot.tid();
    let own = lanes().find(|l| {
        l.tid.load(Ordering::Relaxed) == tid
            && l.state
                .compare_exchange(ABANDONED, OWNED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    });
    let lane = match own {
        Some(l) => l,
        None => match lanes().find(|l| {
            l.state
                .compare_exchange(FREE, OWNED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) {
            Some(l) => l,
            None => new_lane()?,
        },
    };
    lane.tid.store(tid, Ordering::Relaxed);
    let p = lane as *const Lane as *mut Lane;
    hot.lane.set(p.cast());
    let key = KEY.load(Ordering::Acquire);
    if key != u64::MAX {
        // SAFETY: the key was created by `init`; the value is our lane.
        unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, p.cast()) };
    }
    Some(lane)
}

/// A new lane, owned, added to the list.
#[cold]
fn new_lane() -> Option<&'static Lane> {
    let layout = std::alloc::Layout::new::<Lane>();
    // SAFETY: the layout is non-zero; an all-zero Lane is a valid empty lane
    // (counters 0, state FREE, no next).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Lane>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a fresh, exclusively owned allocation.
    let l = unsafe { &*p };
    l.state.store(OWNED, Ordering::Relaxed);
    let mut first = LANES.load(Ordering::Acquire);
    loop {
        l.next.store(first, Ordering::Relaxed);
        match LANES.compare_exchange_weak(first, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => first = now,
        }
    }
    Some(l)
}

/// Appends `msg`; `Some(msg)` back when tracing stopped while the lane was
/// full (the caller tries the channel, which refuses it too).
#[inline(always)]
fn push(lane: &Lane, msg: Msg) -> Option<Msg> {
    let head = lane.head.0.load(Ordering::Relaxed);
    // SAFETY: `seen_tail` is the owner's (module doc); we are the owner.
    let seen = unsafe { &mut *lane.seen_tail.0.get() };
    if head - *seen >= SLOTS as u64 && !wait_for_room(lane, head, seen) {
        return Some(msg);
    }
    // SAFETY: head - tail < SLOTS, so the slot is outside [tail, head): the
    // writer does not read it until `head` moves past it.
    unsafe {
        let slots = &mut *lane.slots.get();
        slots[(head as usize) & (SLOTS - 1)].write(msg);
    }
    lane.head.0.store(head + 1, Ordering::Release);
    // Past half full: make sure the writer is not asleep.
    if head + 1 - *seen > (SLOTS / 2) as u64 {
        *seen = lane.tail.0.load(Ordering::Acquire);
        if head + 1 - *seen > (SLOTS / 2) as u64 {
            sys::keep_errno(writer::wake_if_sleeping);
        }
    }
    None
}

/// Waits until the writer freed a slot; false when tracing stopped.
#[cold]
#[inline(never)]
fn wait_for_room(lane: &Lane, head: u64, seen: &mut u64) -> bool {
    sys::keep_errno(|| {
        let mut wait = writer::RoomWait::default();
        loop {
            *seen = lane.tail.0.load(Ordering::Acquire);
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

/// What the writer sees of one lane: the messages published when it last
/// looked, `[tail, head)` (the writer thread only).
pub struct View {
    lane: &'static Lane,
    tail: u64,
    head: u64,
}

impl View {
    /// Messages left in this view.
    pub fn len(&self) -> u64 {
        self.head - self.tail
    }

    /// The next message, left in place.
    pub fn peek(&self) -> Option<&Msg> {
        if self.tail == self.head {
            return None;
        }
        // SAFETY: [tail, head) was published by the owner (Acquire when the
        // view loaded `head`) and is not taken yet; the owner does not write
        // it again before `tail` moves past it.
        Some(unsafe {
            (*self.lane.slots.get())[(self.tail as usize) & (SLOTS - 1)].assume_init_ref()
        })
    }

    /// Takes the next message.
    pub fn take(&mut self) -> Option<Msg> {
        if self.tail == self.head {
            return None;
        }
        // SAFETY: as in `peek`; the slot is read once, and given back to the
        // owner (below, or in `release`) only after that.
        let msg = unsafe {
            (*self.lane.slots.get())[(self.tail as usize) & (SLOTS - 1)].assume_init_read()
        };
        self.tail += 1;
        // Give slots back as we go, so a waiting owner resumes early.
        if self.tail & 255 == 0 {
            self.lane.tail.0.store(self.tail, Ordering::Release);
        }
        Some(msg)
    }

    /// Gives the taken slots back; an abandoned lane that is empty becomes
    /// free for another thread.
    pub fn release(&self) {
        self.lane.tail.0.store(self.tail, Ordering::Release);
        if self.lane.state.load(Ordering::Acquire) == ABANDONED
            && self.lane.head.0.load(Ordering::Acquire) == self.tail
        {
            // Its thread may take it back meanwhile (and then publish after
            // this check): the exchange fails then, and the lane stays its.
            let _ = self.lane.state.compare_exchange(
                ABANDONED,
                FREE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }
}

/// A view of every lane that has published messages it has not taken;
/// `views` is cleared first (kept by the caller to reuse its memory).
/// Returns how many lanes there are, with messages or not.
pub fn look(views: &mut Vec<View>) -> usize {
    views.clear();
    let mut count = 0;
    for lane in lanes() {
        count += 1;
        let head = lane.head.0.load(Ordering::Acquire);
        let tail = lane.tail.0.load(Ordering::Relaxed);
        if head != tail {
            views.push(View { lane, tail, head });
        } else if lane.state.load(Ordering::Relaxed) == ABANDONED {
            View { lane, tail, head }.release();
        }
    }
    count
}

/// How many lanes were made (`TRACER_STACK_STATS`).
pub fn made() -> usize {
    lanes().count()
}

/// Whether the writer has taken every published message.
pub fn is_empty() -> bool {
    lanes().all(|l| l.head.0.load(Ordering::Acquire) == l.tail.0.load(Ordering::Relaxed))
}

/// A lane of the calling test, outside any thread's TLS: the test is its
/// producer.
#[cfg(test)]
pub fn test_lane() -> &'static Lane {
    new_lane().expect("a lane")
}

/// Publishes `msg` into `lane` as its owner would.
#[cfg(test)]
pub fn test_push(lane: &Lane, msg: Msg) {
    assert!(push(lane, msg).is_none());
}
