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
//! of the freeing lane's `head` includes the free. A look ([`look`])
//! therefore loads every lane's `head` twice, and the writer takes only
//! what the first loads showed: whatever those messages follow is in the
//! second. The writer (`writer::State::drain_ordered`) takes the lanes'
//! messages in time order, no lane's ahead of another's earlier one (a
//! thread's free of a block it was handed, taken ahead of the owner's free
//! of the address's previous block and allocation of this one, would go
//! to the previous block; an allocation taken ahead of another lane's
//! earlier allocation and free of its address would leave that lane
//! waiting for a free behind its own allocation), and holds back an
//! allocation at an address its table still has live until the other
//! lanes, loaded again, have given the free (and a free of a block not
//! live until they have given its allocation); if no lane holds it after a
//! fresh look (a free the hooks never saw), the message goes through as it
//! would have before.
//!
//! The times themselves follow happens-before only up to the processor's
//! reordering of `rdtsc` (see `clock`: a read ordered after another
//! thread's can come out ~150 ns earlier). That is enough: a free's time
//! is read before the real `free` runs, so it precedes the address's
//! reuse; an allocation's time may come out before its `malloc` returned,
//! which the holding back above absorbs; and a thread's free of a block it
//! was handed could only be taken ahead of the owner's free of the
//! previous block at that address if the owner's free, `malloc`, recorded
//! allocation (a stack walk) and hand-over all fit in that reordering
//! window, where each traced call alone takes longer.
//!
//! **Room.** A thread whose lane is full spins, yields a few times, then
//! sleeps on the lane's `room` word until the writer has taken a quarter
//! of the lane (`wait_for_room`, `View::give_back`).
//!
//! **Lifetime.** A lane is taken on a thread's first message (a free one,
//! or a new one: 4,096 slots for the first eight lanes, 1,024 for the
//! others, of which only the slots written become resident)
//! and given back by a `pthread` key destructor when the thread exits: it is
//! then *abandoned*, and the writer makes it free again once it has taken
//! every message in it. A thread that records again after the destructor
//! ran (another destructor's allocation) takes its own lane back if the
//! writer has not freed it yet, or any free lane otherwise (its old lane
//! was then empty: its messages all precede the new ones). Lanes are never
//! unmapped. A fork child forgets the parent's messages (their boxes are
//! the parent's to free) and every lane is free again there.
//!
//! A slot is four words (see `encode`): two messages to a cache line, and
//! the thread id is the lane's, not repeated in every message.
//!
//! `TRACER_LANE=0` (private, for measurements) sends every message through
//! the shared channel instead.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::writer::{self, Msg};
use crate::{plist, sys, tls};

/// Slots of a lane's mapping (a power of two): 128 KiB of 32-byte
/// messages, of which a lane uses its `slots` first (all of them, or
/// [`SMALL_SLOTS`]; only the slots used become resident).
const SLOTS: usize = 4096;
/// Slots of the lanes made once [`BIG_LANES`] exist: a program with a
/// thousand busy threads keeps 32 MiB of lanes resident, not 128.
const SMALL_SLOTS: usize = 1024;
/// Lanes made with all [`SLOTS`]. A lane of 4,096 slots against 1,024:
/// a writer that went to sleep is woken a quarter as often (python3 300k
/// dict: 1,138 futex calls against 3,658) and takes longer runs of one
/// lane: python3 -7%, perl -9%, alloc_chain -13% (1 thread) and -15% (2)
/// of wall time; python3's peak RSS +0.1 MiB.
const BIG_LANES: usize = 8;

/// A message as a lane holds it: four words, of which a free uses two
/// (`encode`). Two messages share a cache line, where the channel's 48-byte
/// `Msg` took three quarters of one; the thread id is the lane's.
type Slot = [u64; 4];

/// The kind of a slot, in the top byte of its second word (user addresses
/// are below 2^56 on x86-64, even with five-level page tables).
const KIND_SHIFT: u32 = 56;
const LOW_MASK: u64 = (1 << KIND_SHIFT) - 1;
// The kinds of the allocation events are the side buffer's too (`side`).
pub(crate) const ALLOC: u64 = 1;
pub(crate) const REALLOC_ALLOC: u64 = 2;
pub(crate) const FREE_MSG: u64 = 3;
pub(crate) const REALLOC_FREE: u64 = 4;
pub(crate) const REALLOC_FAILED: u64 = 5;
const STACK: u64 = 6;
const MARKER: u64 = 7;

/// Writes `msg` into slot `s` (a marker's name is leaked into it, and taken
/// back by [`decode`]); a free writes two words, the rest of the slot keeps
/// what it held. Not for stacks, which take several slots ([`push_stack`]).
#[inline(always)]
fn encode(s: &mut Slot, msg: Msg) {
    match msg {
        Msg::Alloc {
            time_ns,
            addr,
            size,
            key,
            from_realloc,
            ..
        } => {
            let kind = if from_realloc { REALLOC_ALLOC } else { ALLOC };
            *s = [time_ns, addr | kind << KIND_SHIFT, size, key];
        }
        Msg::Free { time_ns, addr, .. } => {
            s[0] = time_ns;
            s[1] = addr | FREE_MSG << KIND_SHIFT;
        }
        Msg::ReallocFree { time_ns, addr, .. } => {
            s[0] = time_ns;
            s[1] = addr | REALLOC_FREE << KIND_SHIFT;
        }
        Msg::ReallocFailed { .. } => s[1] = REALLOC_FAILED << KIND_SHIFT,
        // `push` hands stacks to `push_stack`: never here. Written as a
        // stack without frames all the same, a slot of its own.
        Msg::Stack { key, .. } => *s = [0, STACK << KIND_SHIFT, 0, key],
        Msg::Marker { time_ns, name, .. } => {
            let len = name.len() as u64;
            let p = Box::into_raw(name) as *mut u8 as u64;
            *s = [time_ns, len | MARKER << KIND_SHIFT, p, 0];
        }
    }
}

/// Slots the message starting at slot `s` takes: a stack's frames follow
/// its first slot, four to a slot (they are copied there, not boxed: the
/// writer freeing a box the program's thread allocated took the lock of
/// the program's arena, and contended with the program's own `malloc`:
/// ~2,900 `futex` calls on python3's thread in a 300k-entry dict).
#[inline(always)]
fn slots_of(s: &Slot) -> u64 {
    if s[1] >> KIND_SHIFT == STACK {
        1 + (s[1] & LOW_MASK).div_ceil(4)
    } else {
        1
    }
}

/// The message starting at slot `i` of `lane`, thread `tid`'s.
///
/// # Safety
/// Its [`slots_of`] slots from `i` were published by [`push`] and not
/// given back, and it is decoded once (a marker owns a box).
#[inline(always)]
unsafe fn decode(lane: &Lane, i: u64, tid: u32) -> Msg {
    let s = &*lane.slot(i);
    let low = s[1] & LOW_MASK;
    match s[1] >> KIND_SHIFT {
        ALLOC | REALLOC_ALLOC => Msg::Alloc {
            time_ns: s[0],
            tid,
            addr: low,
            size: s[2],
            key: s[3],
            from_realloc: s[1] >> KIND_SHIFT == REALLOC_ALLOC,
        },
        FREE_MSG => Msg::Free {
            time_ns: s[0],
            tid,
            addr: low,
        },
        REALLOC_FREE => Msg::ReallocFree {
            time_ns: s[0],
            tid,
            addr: low,
        },
        STACK => {
            let mut frames = Vec::with_capacity(low as usize);
            for j in 0..low.div_ceil(4) {
                let d = &*lane.slot(i + 1 + j);
                let n = (low - 4 * j).min(4) as usize;
                frames.extend_from_slice(&d[..n]);
            }
            Msg::Stack {
                key: s[3],
                frames: frames.into_boxed_slice(),
                tid,
            }
        }
        MARKER => Msg::Marker {
            time_ns: s[0],
            tid,
            name: Box::from_raw(core::str::from_utf8_unchecked_mut(
                core::slice::from_raw_parts_mut(s[2] as *mut u8, low as usize),
            )),
        },
        _ => Msg::ReallocFailed { tid },
    }
}

/// What the writer needs to know of a message before it takes it: its time
/// and what it depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The event's time; 0 for a stack or a failed realloc, which come
    /// first (see `Msg::time`).
    pub time: u64,
    pub dep: Dep,
}

/// A message's dependency on another thread's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dep {
    None,
    /// An allocation at this address.
    Alloc(u64),
    /// A free (or a realloc's provisional free) of this address.
    Free(u64),
}

impl Dep {
    /// What a message with this dependency waits for: the free of an
    /// allocation's address, the allocation of a freed one.
    pub fn counterpart(self) -> Dep {
        match self {
            Dep::Alloc(a) => Dep::Free(a),
            Dep::Free(a) => Dep::Alloc(a),
            Dep::None => Dep::None,
        }
    }
}

impl Head {
    /// The head of a message not in a lane (the channel's).
    pub fn of(m: &Msg) -> Head {
        let dep = match *m {
            Msg::Alloc { addr, .. } => Dep::Alloc(addr),
            Msg::Free { addr, .. } | Msg::ReallocFree { addr, .. } => Dep::Free(addr),
            _ => Dep::None,
        };
        Head {
            time: m.time(),
            dep,
        }
    }

    #[inline(always)]
    fn of_slot(s: &Slot) -> Head {
        let low = s[1] & LOW_MASK;
        match s[1] >> KIND_SHIFT {
            ALLOC | REALLOC_ALLOC => Head {
                time: s[0],
                dep: Dep::Alloc(low),
            },
            FREE_MSG | REALLOC_FREE => Head {
                time: s[0],
                dep: Dep::Free(low),
            },
            MARKER => Head {
                time: s[0],
                dep: Dep::None,
            },
            _ => Head {
                time: 0,
                dep: Dep::None,
            },
        }
    }
}

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
    /// The owner's name (`prctl(PR_GET_NAME)`, as it took the lane), and
    /// the thread id it belongs to, set once the name is written: the
    /// writer asks here rather than opening `/proc/self/task/TID/comm`,
    /// whose descriptor at the lowest free number could meet a program's
    /// `dup2` onto that number ([`name_of`]).
    name: [AtomicU64; 2],
    named: AtomicU32,
    /// 1 while the owner sleeps until the writer gives slots back (a futex
    /// word: see [`wait_for_room`]).
    room: AtomicU32,
    next: AtomicPtr<Lane>,
    /// Slots in use (a power of two, at most [`SLOTS`]), set before the
    /// lane is listed and never changed.
    cap: u64,
    /// Messages in the lane past which a publish wakes a sleeping writer:
    /// half the lane while the writer naps between busy passes, 0 while it
    /// sleeps long in an idle program ([`wake_on_any`]).
    wake_past: AtomicU64,
    /// Aligned, so that no slot straddles two cache lines.
    slots: Line<UnsafeCell<[Slot; SLOTS]>>,
    /// What the owner's stack captures use (`tls::Capture`): the owner's
    /// alone, like `seen_tail`; it passes to the lane's next thread with the
    /// lane (its memo and sent stacks stay right; `bounds` is reset).
    capture: Line<UnsafeCell<tls::Capture>>,
}

impl Lane {
    /// The slot of message number `i` (its position modulo `cap`).
    #[inline(always)]
    fn slot(&self, i: u64) -> *mut Slot {
        // SAFETY: `cap` is a power of two at most SLOTS, so the index is in
        // the array; the pointer is only dereferenced under the rules of
        // the `Sync` impl below.
        unsafe {
            self.slots
                .0
                .get()
                .cast::<Slot>()
                .add((i & (self.cap - 1)) as usize)
        }
    }
}

// SAFETY: slots in [tail, head) are written by the one owner before `head`
// is published and read by the writer (the one consumer) after it loads
// `head`; slots outside that range are the owner's. `seen_tail` and
// `capture` are only touched by the owner, inside its guard (a new owner
// takes the lane by a compare-and-swap of `state` that follows the old
// owner's release of it).
unsafe impl Sync for Lane {}

/// Every lane ever made (lanes are never freed).
static LANES: plist::List<Lane> = plist::List::new();

impl plist::Node for Lane {
    fn next(&self) -> &AtomicPtr<Lane> {
        &self.next
    }
}
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
    LANES.iter()
}

// ---------------------------------------------------------------- producer

/// Puts this thread's message into its lane; `Some(msg)` back when it must
/// go through the channel instead (no lane could be had, or tracing stopped
/// while the lane was full). Called inside the guard, while tracing.
#[inline(always)]
pub fn offer(msg: Msg) -> Option<Msg> {
    let p = tls::hot().lane.get().cast::<Lane>();
    let lane = if (p as usize) > NO_LANE {
        // SAFETY: lanes are never freed.
        unsafe { &*p }
    } else if p.is_null() {
        match sys::keep_errno(take) {
            Some(l) => l,
            None => return Some(msg),
        }
    } else {
        return Some(msg);
    };
    push(lane, msg)
}

/// Runs `f` on this thread's capture state, in its lane (taken now if the
/// thread has none yet); `None` when the thread cannot have a lane.
/// Called inside the guard.
#[inline]
pub fn with_capture<R>(f: impl FnOnce(&mut tls::Capture) -> R) -> Option<R> {
    let p = tls::hot().lane.get().cast::<Lane>();
    let lane = if (p as usize) > NO_LANE {
        // SAFETY: lanes are never freed.
        unsafe { &*p }
    } else if p.is_null() {
        sys::keep_errno(take)?
    } else {
        return None;
    };
    // SAFETY: the lane is this thread's; only its own captures touch the
    // state, inside the reentrancy guard (a hook nested in a signal handler
    // captures without it, into the side buffer (`side`), and one nested in
    // the capture's own allocations passes through), so no other reference
    // to it exists while `f` runs.
    Some(f(unsafe { &mut *lane.capture.0.get() }))
}

/// `Hot::lane` of a thread that could not get a lane (`TRACER_LANE=0`, or
/// no memory for one): its messages go through the channel without another
/// try (a failing `mmap` per message otherwise).
const NO_LANE: usize = 1;

/// Takes a lane for this thread: its own abandoned one, a free one, or a
/// new one; registers it for the thread's exit. `None` (and the thread
/// marked [`NO_LANE`]) when lanes are refused or none can be made.
#[cold]
#[inline(never)]
fn take() -> Option<&'static Lane> {
    let hot = tls::hot();
    if REFUSED.load(Ordering::Relaxed) {
        hot.lane.set(NO_LANE as *mut c_void);
        return None;
    }
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
            None => match new_lane() {
                Some(l) => l,
                None => {
                    hot.lane.set(NO_LANE as *mut c_void);
                    return None;
                }
            },
        },
    };
    lane.tid.store(tid, Ordering::Relaxed);
    // SAFETY: the lane is this thread's now (the exchange above or a new
    // mapping), and no capture of this thread is running (`take` is called
    // before one starts).
    unsafe { (*lane.capture.0.get()).bounds = (0, 0) };
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `name`.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    for (word, bytes) in lane.name.iter().zip(name.chunks_exact(8)) {
        word.store(
            u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])),
            Ordering::Relaxed,
        );
    }
    lane.named.store(tid, Ordering::Release);
    let p = lane as *const Lane as *mut Lane;
    hot.lane.set(p.cast());
    let key = KEY.load(Ordering::Acquire);
    if key != u64::MAX {
        // SAFETY: the key was created by `init`; the value is our lane.
        unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, p.cast()) };
    }
    Some(lane)
}

/// Bytes of a lane's mapping.
const LANE_BYTES: usize = core::mem::size_of::<Lane>().next_multiple_of(4096);

/// A new lane, owned, added to the list. Its memory is a mapping of its
/// own, not the program's heap: a lane taken from glibc's main arena at
/// the program's first allocation would change where the program's own
/// blocks go (the static lane before it did not).
#[cold]
fn new_lane() -> Option<&'static Lane> {
    // SAFETY: an anonymous private mapping, no file, no fixed address; the
    // raw system call keeps it out of the syscall capture.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            LANE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1i32,
            0usize,
        )
    };
    if p == -1 || p == 0 {
        return None;
    }
    let p = p as usize as *mut Lane;
    let cap = if lanes().count() < BIG_LANES {
        SLOTS
    } else {
        SMALL_SLOTS
    };
    // SAFETY: `p` is a fresh, exclusively owned mapping of zero pages, big
    // enough and page-aligned; an all-zero Lane is a valid empty lane
    // (counters 0, state FREE, no next) once its `cap` is set, here, before
    // any reference to it exists.
    let l = unsafe {
        (*p).cap = cap as u64;
        (*p).wake_past = AtomicU64::new(cap as u64 / 2);
        &*p
    };
    l.state.store(OWNED, Ordering::Relaxed);
    if PREFETCHW.load(Ordering::Relaxed) == NOT_ASKED {
        // Once: CPUID is a VM exit in a guest (a thousand threads, a
        // thousand lanes).
        let known = if has_prefetchw() {
            HAS_PREFETCHW
        } else {
            NO_PREFETCHW
        };
        PREFETCHW.store(known, Ordering::Relaxed);
    }
    LANES.push(l);
    Some(l)
}

/// Appends `msg`; `Some(msg)` back when tracing stopped while the lane was
/// full (the caller tries the channel, which refuses it too).
#[inline(always)]
fn push(lane: &Lane, msg: Msg) -> Option<Msg> {
    if let Msg::Stack { key, frames, .. } = &msg {
        return if push_stack(lane, *key, frames) {
            None
        } else {
            Some(msg)
        };
    }
    let head = lane.head.0.load(Ordering::Relaxed);
    // SAFETY: `seen_tail` is the owner's (module doc); we are the owner.
    let seen = unsafe { &mut *lane.seen_tail.0.get() };
    if head - *seen >= lane.cap && !wait_for_room(lane, head, seen, 1) {
        return Some(msg);
    }
    // SAFETY: head - tail < cap, so the slot is outside [tail, head): the
    // writer does not read it until `head` moves past it.
    unsafe { encode(&mut *lane.slot(head), msg) };
    if head & 1 == 0 && PREFETCHW.load(Ordering::Relaxed) == HAS_PREFETCHW {
        claim_ahead(lane.slot(head + CLAIM_AHEAD));
    }
    publish(lane, head + 1, seen);
    None
}

/// How far ahead of the slot it writes the owner claims the lane's cache
/// lines: 16 slots, 8 lines (32 did the same).
const CLAIM_AHEAD: u64 = 16;

/// Whether the processor has `PREFETCHW` (CPUID 0x8000_0001 ECX bit 8):
/// [`NOT_ASKED`] until the first lane is made, then [`HAS_PREFETCHW`] or
/// [`NO_PREFETCHW`].
static PREFETCHW: AtomicU8 = AtomicU8::new(NOT_ASKED);
const NOT_ASKED: u8 = 0;
const HAS_PREFETCHW: u8 = 1;
const NO_PREFETCHW: u8 = 2;

/// Asks for the cache line at `p` in a writable state, ahead of the write.
///
/// A lane's lines go back and forth between two cores: the owner writes a
/// line, the writer reads it (the line is then shared, or the writer's),
/// and when the ring comes round the owner's next store to it must first
/// take it back, a cross-core miss the store buffer only partly hides.
/// Asked for 8 lines early, that transfer overlaps the owner's work in
/// between. alloc_chain (2M messages, one thread), 50 runs alternating
/// with the build before: none over 170 ms against 29 of 50 (mean 143
/// against 192 ms) while the host was in its slow phase, where each
/// transfer costs more; 137 against 142 ms (medians of 30) outside it
/// (docs/performance.md, thirty-sixth round).
#[inline(always)]
fn claim_ahead(p: *mut Slot) {
    // SAFETY: PREFETCHW (present: `PREFETCHW`) is a hint; it reads and
    // writes nothing and cannot fault, whatever the address.
    unsafe {
        core::arch::asm!(
            "prefetchw [{0}]",
            in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
}

/// Whether the processor has `PREFETCHW`.
fn has_prefetchw() -> bool {
    sys::extended_cpuid(0x8000_0001).is_some_and(|r| r.ecx & (1 << 8) != 0)
}

/// Publishes the lane's messages up to `head`; past `wake_past` (half
/// full, or any message while the writer sleeps long), makes sure the
/// writer is not asleep.
#[inline(always)]
fn publish(lane: &Lane, head: u64, seen: &mut u64) {
    lane.head.0.store(head, Ordering::Release);
    let past = lane.wake_past.load(Ordering::Relaxed);
    if head - *seen > past {
        *seen = lane.tail.0.load(Ordering::Acquire);
        if head - *seen > past {
            sys::keep_errno(writer::wake_if_sleeping);
        }
    }
}

/// Whether a publish into any lane wakes the writer (`true`: it is about
/// to sleep long, the program idle) or only one past half its lane. The
/// owners read it without a fence after their publish, so a message
/// published just as the writer looks may still wait out its sleep: the
/// writer bounds that sleep.
pub fn wake_on_any(any: bool) {
    for l in lanes() {
        let past = if any { 0 } else { l.cap / 2 };
        l.wake_past.store(past, Ordering::Release);
    }
}

/// Puts this thread's stack into its lane, copied from `frames` (no box:
/// see `lifecycle::deliver_stack`); false when it must go through the
/// channel instead, as for [`offer`].
#[inline]
pub fn offer_stack(key: u64, frames: &[u64]) -> bool {
    let p = tls::hot().lane.get().cast::<Lane>();
    let lane = if (p as usize) > NO_LANE {
        // SAFETY: lanes are never freed.
        unsafe { &*p }
    } else if p.is_null() {
        match sys::keep_errno(take) {
            Some(l) => l,
            None => return false,
        }
    } else {
        return false;
    };
    push_stack(lane, key, frames)
}

/// [`push`] for a stack: its first slot, then its frames, four to a slot
/// ([`slots_of`]). False when it does not fit the lane, or tracing stopped
/// while the lane was full.
#[cold]
#[inline(never)]
fn push_stack(lane: &Lane, key: u64, frames: &[u64]) -> bool {
    let len = frames.len() as u64;
    let need = 1 + len.div_ceil(4);
    if need > lane.cap || len > LOW_MASK {
        return false;
    }
    let head = lane.head.0.load(Ordering::Relaxed);
    // SAFETY: as in `push`.
    let seen = unsafe { &mut *lane.seen_tail.0.get() };
    if head + need - *seen > lane.cap && !wait_for_room(lane, head, seen, need) {
        return false;
    }
    // SAFETY: head + need - tail <= cap, so the slots [head, head + need)
    // are outside [tail, head): the writer does not read them until
    // `head` moves past them.
    unsafe {
        *lane.slot(head) = [0, len | STACK << KIND_SHIFT, 0, key];
        for (j, chunk) in frames.chunks(4).enumerate() {
            let d = &mut *lane.slot(head + 1 + j as u64);
            d[..chunk.len()].copy_from_slice(chunk);
        }
    }
    publish(lane, head + need, seen);
    true
}

/// Waits until the writer freed `need` slots; false when tracing stopped.
#[cold]
#[inline(never)]
fn wait_for_room(lane: &Lane, head: u64, seen: &mut u64, need: u64) -> bool {
    sys::keep_errno(|| {
        let mut wait = writer::RoomWait::default();
        loop {
            *seen = lane.tail.0.load(Ordering::Acquire);
            if head + need - *seen <= lane.cap {
                return true;
            }
            if !crate::lifecycle::accepting() {
                return false;
            }
            if !wait.spun_out() {
                wait.pause();
                continue;
            }
            // Past the spins and yields, the owner sleeps until the writer
            // has given slots back, instead of polling: a thousand threads
            // polling in 50 us sleeps left the writer, one runnable thread
            // among them, a thousandth of the cores (`examples/many_threads.c`).
            // The flag, then `tail` again; the writer stores `tail`, then
            // reads the flag (`View::give_back`): with a full fence on both
            // sides, one of the two sees the other's store.
            lane.room.store(1, Ordering::Relaxed);
            core::sync::atomic::fence(Ordering::SeqCst);
            *seen = lane.tail.0.load(Ordering::Acquire);
            if head + need - *seen <= lane.cap {
                return true;
            }
            wait.block(&lane.room, 1);
        }
    })
}

// ---------------------------------------------------------------- consumer

/// What the writer sees of one lane: the messages published when it last
/// looked, `[tail, head)`, of which it may take `[tail, safe)` (see
/// [`look`]; the writer thread only).
pub struct View {
    lane: &'static Lane,
    tail: u64,
    /// Where the lane's messages ended at the look's first load of `head`.
    safe: u64,
    head: u64,
    /// The lane's thread, as the view was made (a lane changes threads only
    /// once the writer has emptied it).
    tid: u32,
}

impl View {
    /// Messages left in this view.
    pub fn len(&self) -> u64 {
        self.head - self.tail
    }

    /// Slots left that may be taken now (see [`look`]).
    pub fn takeable(&self) -> u64 {
        self.safe.saturating_sub(self.tail)
    }

    /// Whether the next message may be taken now: it was published before
    /// the look's first load of this lane's `head`, so whatever it depends
    /// on is in the views ([`look`]). A message seen only at the second
    /// load waits for the next look.
    #[inline]
    pub fn ready(&self) -> bool {
        self.tail < self.safe
    }

    /// Lets every message of the view be taken: for a lone source, whose
    /// messages depend on no other's.
    pub fn trust_all(&mut self) {
        self.safe = self.head;
    }

    /// The next message's time and dependency, the message left in place.
    #[inline]
    pub fn peek(&self) -> Option<Head> {
        if self.tail == self.head {
            return None;
        }
        // SAFETY: [tail, head) was published by the owner (Acquire when the
        // view loaded `head`) and is not taken yet; the owner does not write
        // it again before `tail` moves past it.
        Some(Head::of_slot(unsafe { &*self.lane.slot(self.tail) }))
    }

    /// Calls `f` with the head of every message of this view, in order.
    pub fn each_head(&self, mut f: impl FnMut(Head)) {
        let mut i = self.tail;
        while i < self.head {
            // SAFETY: as in `peek`, for the first slot of every message of
            // [tail, head).
            let s = unsafe { &*self.lane.slot(i) };
            f(Head::of_slot(s));
            i += slots_of(s);
        }
    }

    /// Takes the next message, if [`ready`](View::ready).
    #[inline]
    pub fn take(&mut self) -> Option<Msg> {
        if self.tail >= self.safe {
            return None;
        }
        // SAFETY: as in `peek`: the owner published the message's slots
        // together; they are decoded once, and given back to the owner
        // (below, or in `release`) only after that.
        let (msg, slots) = unsafe {
            let s = &*self.lane.slot(self.tail);
            (decode(self.lane, self.tail, self.tid), slots_of(s))
        };
        let before = self.tail;
        self.tail += slots;
        if self.tail & 1 == 0 && self.tail + CLAIM_AHEAD < self.safe {
            // The same transfer on the writer's side (see `claim_ahead`),
            // for lines the owner has published: p50 of alloc_chain 152 ->
            // 145 ms (one thread), 145 -> 142 (two), 100 runs each.
            // SAFETY: a prefetch is a hint (it cannot fault); the slot is
            // inside the lane.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    self.lane.slot(self.tail + CLAIM_AHEAD) as *const i8,
                )
            };
        }
        // Give slots back as we go, so a waiting owner resumes early.
        if before >> 8 != self.tail >> 8 {
            self.give_back();
        }
        Some(msg)
    }

    /// Stores `tail` for the owner, and wakes it if it sleeps for room
    /// ([`wait_for_room`]) and a quarter of the lane is free: woken for the
    /// few slots each turn of the writer gives back, a thousand sleeping
    /// threads made a `futex` call pair for every three messages.
    #[inline]
    fn give_back(&self) {
        self.lane.tail.0.store(self.tail, Ordering::Release);
        core::sync::atomic::fence(Ordering::SeqCst);
        if self.lane.room.load(Ordering::Relaxed) != 0 {
            let used = self.lane.head.0.load(Ordering::Relaxed) - self.tail;
            if used <= self.lane.cap - self.lane.cap / 4 {
                self.lane.room.store(0, Ordering::Relaxed);
                sys::futex_wake(&self.lane.room);
            }
        }
    }

    /// Gives the taken slots back; an abandoned lane that is empty becomes
    /// free for another thread.
    pub fn release(&self) {
        self.give_back();
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

/// Where every lane's published messages ended when [`marks`] was called.
pub struct Marks(Vec<(&'static Lane, u64)>);

/// Marks the end of what every lane has published now (a flush request:
/// what the program's threads publish after it is not waited for).
pub fn marks() -> Marks {
    Marks(
        lanes()
            .map(|l| (l, l.head.0.load(Ordering::Acquire)))
            .collect(),
    )
}

impl Marks {
    /// Whether the writer has taken every message up to the marks.
    pub fn taken(&self) -> bool {
        self.0
            .iter()
            .all(|&(l, head)| l.tail.0.load(Ordering::Acquire) >= head)
    }
}

/// A view of every lane that has published messages it has not taken;
/// `views` is cleared first (kept by the caller to reuse its memory).
/// Returns how many lanes there are, with messages or not.
///
/// Every lane's `head` is loaded twice, in two passes. A message published
/// before the first pass loaded its lane's `head` depends only on messages
/// published before that (`lane`'s module doc), so every lane's second
/// load includes them: such a message may be taken (`[tail, safe)`). One
/// seen only at the second load may depend on a message published after
/// another lane's second load: it waits for the next look, its time
/// known. With one pass, a thread's free of a block it was handed could be
/// seen while the owner's free of the address's previous block and its
/// allocation of this one, published a moment earlier into a lane loaded
/// a moment before, were not: the free went to the previous block.
pub fn look(views: &mut Vec<View>) -> usize {
    views.clear();
    for lane in lanes() {
        let head = lane.head.0.load(Ordering::Acquire);
        views.push(View {
            lane,
            tail: lane.tail.0.load(Ordering::Relaxed),
            safe: head,
            head,
            tid: 0,
        });
        #[cfg(test)]
        test_hook::after_first_load(lane);
    }
    // Lanes made since the first pass began are at the front of the list.
    let oldest_new = views.first().map(|v| v.lane as *const Lane);
    for lane in lanes() {
        if Some(lane as *const Lane) == oldest_new {
            break;
        }
        let tail = lane.tail.0.load(Ordering::Relaxed);
        views.push(View {
            lane,
            tail,
            safe: tail,
            head: tail,
            tid: 0,
        });
    }
    for v in views.iter_mut() {
        v.head = v.lane.head.0.load(Ordering::Acquire);
        // Read after `head`: a lane empty at the first load may have been
        // taken by a new thread since (whose id it stored before
        // publishing).
        v.tid = v.lane.tid.load(Ordering::Relaxed);
    }
    let count = views.len();
    views.retain(|v| {
        if v.head != v.tail {
            return true;
        }
        if v.lane.state.load(Ordering::Relaxed) == ABANDONED {
            v.release();
        }
        false
    });
    #[cfg(test)]
    test_hook::after_look();
    count
}

/// The lanes' memory, the tracer's and not the program's: the leak scan
/// never reads it as roots. (No slot word looks like a block's address
/// anyway: an address word carries its kind in the top byte.)
pub fn ranges() -> Vec<(u64, u64)> {
    lanes()
        .map(|l| {
            let a = l as *const Lane as u64;
            (a, a + LANE_BYTES as u64)
        })
        .collect()
}

/// How many lanes were made (`TRACER_STACK_STATS`).
pub fn made() -> usize {
    lanes().count()
}

/// Whether every lane has all [`SLOTS`] (none past the eighth was made):
/// the newest lane, first in the list, tells.
pub fn all_big() -> bool {
    lanes().next().is_none_or(|l| l.cap == SLOTS as u64)
}

/// Whether the writer has taken every published message.
pub fn is_empty() -> bool {
    lanes().all(|l| l.head.0.load(Ordering::Acquire) == l.tail.0.load(Ordering::Relaxed))
}

/// The lanes are the process's: the tests that make or drain them take
/// turns.
#[cfg(test)]
pub static TEST_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the tests do while the writer looks at the lanes (between its
/// loads), standing for the program's threads publishing meanwhile.
#[cfg(test)]
pub mod test_hook {
    use super::Lane;
    use std::sync::Mutex;

    type Hook = Box<dyn FnMut(Option<&'static Lane>) + Send>;
    static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

    /// Calls `f` after each first load of a lane's `head` (with the lane)
    /// and at the end of each look (with `None`), until the guard returned
    /// is dropped (a failing test leaves no hook behind).
    #[must_use]
    pub fn set(f: impl FnMut(Option<&'static Lane>) + Send + 'static) -> Set {
        *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
        Set
    }

    /// Removes the hook when dropped.
    pub struct Set;

    impl Drop for Set {
        fn drop(&mut self) {
            *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    fn call(lane: Option<&'static Lane>) {
        if let Some(f) = HOOK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            f(lane);
        }
    }

    pub(super) fn after_first_load(lane: &'static Lane) {
        call(Some(lane));
    }

    pub(super) fn after_look() {
        call(None);
    }
}

/// How many messages `lane` holds at most.
#[cfg(test)]
pub fn capacity(lane: &Lane) -> u64 {
    lane.cap
}

/// The name of thread `tid` as it took its lane, if a lane holds it.
pub fn name_of(tid: u32) -> Option<String> {
    lanes().find_map(|l| {
        if l.named.load(Ordering::Acquire) != tid {
            return None;
        }
        // `named` (acquire) says the owner wrote the name before (a new
        // owner's write meanwhile gives at worst another thread's name).
        let mut name = [0u8; 16];
        for (bytes, word) in name.chunks_exact_mut(8).zip(&l.name) {
            bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some(String::from_utf8_lossy(&name[..end]).into_owned())
    })
}

/// A lane of the calling test for thread `tid`, outside any thread's TLS:
/// the test is its producer.
#[cfg(test)]
pub fn test_lane(tid: u32) -> &'static Lane {
    let lane = new_lane().expect("a lane");
    lane.tid.store(tid, Ordering::Relaxed);
    lane
}

/// Publishes `msg` into `lane` as its owner would, waiting while it is
/// full.
#[cfg(test)]
pub fn test_push(lane: &Lane, msg: Msg) {
    let mut msg = msg;
    while let Some(m) = push(lane, msg) {
        msg = m;
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PREFETCHW check reads the bit the kernel reads for its
    /// `3dnowprefetch` flag (CPUID 0x8000_0001 ECX bit 8): with the wrong
    /// bit the lanes would silently never claim their lines.
    #[test]
    fn the_prefetchw_check_agrees_with_the_kernel() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .expect("a flags line");
        let kernel = flags.split_whitespace().any(|f| f == "3dnowprefetch");
        assert_eq!(has_prefetchw(), kernel, "{flags}");
    }

    /// The first eight lanes use every slot of their mapping, later ones a
    /// quarter of them, and a message wraps around at the lane's own size.
    #[test]
    fn lanes_past_the_eighth_are_small() {
        let _turn = TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        while lanes().count() < BIG_LANES + 1 {
            new_lane().expect("a lane");
        }
        let caps: Vec<u64> = lanes().map(|l| l.cap).collect();
        // Newest first: every lane made once eight existed is small.
        let n = caps.len();
        assert!(caps[..n - BIG_LANES]
            .iter()
            .all(|&c| c == SMALL_SLOTS as u64));
        assert!(caps[n - BIG_LANES..].iter().all(|&c| c == SLOTS as u64));
        let small = lanes().next().expect("a lane");
        assert_eq!(small.slot(SMALL_SLOTS as u64 + 3), small.slot(3));
        assert_ne!(small.slot(SMALL_SLOTS as u64 - 1), small.slot(0));
    }

    /// A stack's frames follow its first slot across the end of the ring,
    /// come out whole, and are never read as messages of their own.
    #[test]
    fn a_stack_spans_slots_and_wraps_around() {
        let _turn = TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let lane = test_lane(9);
        let view = |lane: &'static Lane, tail| {
            let head = lane.head.0.load(Ordering::Acquire);
            View {
                lane,
                tail,
                safe: head,
                head,
                tid: 9,
            }
        };
        // Two slots before the end of the ring.
        for i in 0..lane.cap - 2 {
            test_push(
                lane,
                Msg::Free {
                    time_ns: i,
                    tid: 9,
                    addr: 0x20,
                },
            );
        }
        let mut v = view(lane, 0);
        while v.take().is_some() {}
        v.release();
        // Frames 1 and 5 look like a free of 0x1000 where a message's
        // kind would be.
        let frames: Vec<u64> = (0..13u64)
            .map(|k| match k {
                1 | 5 => FREE_MSG << KIND_SHIFT | 0x1000,
                _ => 0x40_0000 + k,
            })
            .collect();
        let start = lane.head.0.load(Ordering::Relaxed);
        test_push(
            lane,
            Msg::Stack {
                key: 77,
                frames: frames.clone().into_boxed_slice(),
                tid: 0,
            },
        );
        test_push(
            lane,
            Msg::Free {
                time_ns: 5,
                tid: 9,
                addr: 0x30,
            },
        );
        let mut v = view(lane, start);
        // First slot, then 13 frames in 4 slots, then the free: across the
        // ring's end.
        assert_eq!(v.len(), 1 + 4 + 1);
        let mut deps = Vec::new();
        v.each_head(|h| deps.push(h.dep));
        assert_eq!(deps, [Dep::None, Dep::Free(0x30)]);
        match v.take() {
            Some(Msg::Stack {
                key: 77, frames: f, ..
            }) => assert_eq!(&f[..], &frames[..]),
            other => panic!("{other:?}"),
        }
        assert_eq!(v.peek().map(|h| h.dep), Some(Dep::Free(0x30)));
        assert!(matches!(v.take(), Some(Msg::Free { addr: 0x30, .. })));
        assert!(v.take().is_none());
        v.release();
    }

    /// Every kind of message comes out of its slot as it went in, with the
    /// lane's thread, and the slot's head is the message's.
    #[test]
    fn a_slot_holds_every_message_whole() {
        let top = (1u64 << 56) - 16;
        let msgs = vec![
            Msg::Alloc {
                time_ns: u64::MAX - 1,
                tid: 7,
                addr: top,
                size: u64::MAX,
                key: 0x1234_5678_9abc_def0,
                from_realloc: false,
            },
            Msg::Alloc {
                time_ns: 1,
                tid: 7,
                addr: 0x10,
                size: 0,
                key: 0,
                from_realloc: true,
            },
            Msg::Free {
                time_ns: 99,
                tid: 7,
                addr: top,
            },
            Msg::ReallocFree {
                time_ns: 100,
                tid: 7,
                addr: 0x7f00_0000_1230,
            },
            Msg::ReallocFailed { tid: 7 },
            Msg::Stack {
                key: u64::MAX,
                frames: vec![1, 2, 0x7fff_ffff_ffff].into_boxed_slice(),
                tid: 7,
            },
            Msg::Stack {
                key: 3,
                frames: Vec::new().into_boxed_slice(),
                tid: 7,
            },
            Msg::Marker {
                time_ns: 5,
                tid: 7,
                name: "phase \u{e9}".into(),
            },
        ];
        let _turn = TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let lane = test_lane(7);
        // Slots full of ones first: a message must not keep what they held.
        for i in 0..lane.cap {
            // SAFETY: nothing is published: the test owns every slot.
            unsafe { *lane.slot(i) = [u64::MAX; 4] };
        }
        for m in msgs {
            let expected_head = Head::of(&m);
            let expected = format!("{m:?}");
            let head = lane.head.0.load(Ordering::Relaxed);
            test_push(lane, m);
            let end = lane.head.0.load(Ordering::Relaxed);
            let mut v = View {
                lane,
                tail: head,
                safe: end,
                head: end,
                tid: 7,
            };
            assert_eq!(v.peek(), Some(expected_head), "{expected}");
            let back = v.take().expect("the message");
            assert_eq!(format!("{back:?}"), expected);
            assert_eq!(v.len(), 0, "{expected}: every slot of the message taken");
            v.release();
        }
    }
}
