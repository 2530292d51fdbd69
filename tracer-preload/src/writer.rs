//! The background writer thread: turns the hooks' messages into model
//! records and feeds them to the format writers.
//!
//! It owns everything that is not the hot path: stack interning, the list of
//! loaded objects (re-scanned with `dl_iterate_phdr` when a stack names an
//! address outside every known object, which catches `dlopen`), thread names,
//! the ordering fix-up for `realloc`, symbolization at the end (the
//! `symbolizer` crate over the objects' files, `TRACER_SYMBOLIZE`), periodic
//! flushes (about every 100 ms, so a killed program leaves a recoverable file)
//! and finishing the files. The thread is marked as the tracer's own for good,
//! so its allocations and file I/O never reach the hooks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use format_writers::{
    Alloc, Event, Frame, Free, Marker, Object, Process, Record, Stack, Symbol, SyscallView, Thread,
    TraceWriter,
};

use crate::config::Symbolize;
use crate::intern::{Interned, StackTable, NO_STACK};
use crate::{fds, lane, objects, scan, sys, syscalls, tls};

/// One message from a hook to the writer. Kept small (48 bytes) because the
/// channel preallocates a slot per message (a lane packs it in 32, see
/// `lane`).
#[cfg_attr(test, derive(Debug))]
pub enum Msg {
    Alloc {
        time_ns: u64,
        tid: u32,
        addr: u64,
        size: u64,
        key: u64,
        from_realloc: bool,
    },
    Free {
        time_ns: u64,
        tid: u32,
        addr: u64,
    },
    /// The old block of a `realloc` about to run: becomes a `Free` once the
    /// same thread's `Alloc { from_realloc }` (or another thread's allocation
    /// at this address) shows the realloc released it; dropped on failure.
    ReallocFree {
        time_ns: u64,
        tid: u32,
        addr: u64,
    },
    ReallocFailed {
        tid: u32,
    },
    /// A stack's frames, sent by each thread before its first use of `key`
    /// (`tid`: the thread that sent it, 0 when not known).
    Stack {
        key: u64,
        frames: Box<[u64]>,
        tid: u32,
    },
    Marker {
        time_ns: u64,
        tid: u32,
        name: Box<str>,
    },
}

impl Msg {
    /// The event's time; 0 for the messages that have none (a stack, which
    /// precedes its first use, and a failed realloc, which follows its
    /// provisional free), so that they are taken first.
    #[inline]
    pub fn time(&self) -> u64 {
        match *self {
            Msg::Alloc { time_ns, .. }
            | Msg::Free { time_ns, .. }
            | Msg::ReallocFree { time_ns, .. }
            | Msg::Marker { time_ns, .. } => time_ns,
            Msg::Stack { .. } | Msg::ReallocFailed { .. } => 0,
        }
    }
}

/// One output file.
pub struct Output {
    pub path: PathBuf,
    /// Registry slots of the output's descriptors (see `fds`): the file's
    /// first, then any of the writer's own (the mlyze spool).
    pub slots: Vec<usize>,
    pub writer: Box<dyn TraceWriter>,
    /// The syscall capture file (`.tlv`): it receives the system calls, and
    /// the allocation outputs never do.
    pub syscalls: bool,
}

/// An output whose file exists and whose writer the writer thread builds
/// (`make`), so that the writer's buffers come from its own heap arena: a
/// buffer of the program thread's arena that the writer grows or frees at
/// exit (64 KiB write buffers, the mlyze log) has glibc merge every free
/// block of that arena's fast bins first, ~50 ms after a program that freed
/// a great many small blocks (perl 300k hash).
pub struct PendingOutput {
    pub path: PathBuf,
    pub slots: Vec<usize>,
    pub make: Box<dyn FnOnce() -> std::io::Result<Box<dyn TraceWriter>> + Send>,
    pub syscalls: bool,
}

impl PendingOutput {
    /// The output, its writer built on this thread; `None` (its
    /// descriptors given back, and a line on stderr unless `quiet`) when
    /// the writer could not be made.
    pub fn make(self, quiet: bool) -> Option<Output> {
        match (self.make)() {
            Ok(writer) => Some(Output {
                path: self.path,
                slots: self.slots,
                writer,
                syscalls: self.syscalls,
            }),
            Err(e) => {
                for &slot in &self.slots {
                    fds::release(slot);
                }
                if !quiet {
                    sys::stderr_line(&format!(
                        "cannot start {}: {e}; it will not be written",
                        self.path.display()
                    ));
                }
                None
            }
        }
    }
}

/// Shared between the writer thread and whoever stops it.
#[derive(Default)]
pub struct Control {
    /// Set to ask the writer to drain what is queued and finish.
    pub stop: AtomicBool,
    /// Set by the writer once every file is finished (or abandoned).
    pub done: AtomicBool,
    /// Advances while the writer works, so a waiter can tell slow from stuck.
    pub progress: AtomicU64,
    /// Files finished successfully.
    pub written: Mutex<Vec<String>>,
    /// Whether descriptor 2 was still the file it was at start when the
    /// writer finished: the exiting thread then prints the summary line with
    /// nothing but a `write` (a program's own seccomp filter may kill it for
    /// any other system call).
    pub stderr_first: AtomicBool,
    /// Flush requests (incremented by a requester) and the last one served:
    /// everything queued before the request is in the files once served.
    /// Requesters sleep on `flush_done` (a futex word; tickets wrap).
    pub flush_requested: AtomicU32,
    pub flush_done: AtomicU32,
    /// Set by a requester that needs the queue in the files (`abort`), not
    /// only handled (`dlclose`: the frames inside the object named).
    pub flush_files: AtomicBool,
    /// Objects about to be unloaded (`dlclose`), with the thread unloading
    /// them: before the flush is served, the addresses seen inside them are
    /// symbolized while still mapped.
    pub unloading: Mutex<Vec<(String, u32)>>,
}

/// What the writer needs to know besides its messages.
pub struct Setup {
    pub process: Process,
    pub info: Vec<(String, String)>,
    pub depth: usize,
    pub symbolize: Symbolize,
    /// `TRACER_QUIET`: no line on stderr.
    pub quiet: bool,
}

/// Reallocs of one thread under way at once past which the oldest is
/// taken for stale (see `Msg::ReallocFree` in `State::handle`).
const MAX_NESTED_REALLOCS: usize = 4;

/// How often the writer looks for libraries loaded since, while events come
/// and the program's allocator is its own (`got::look_for_new_objects`).
const LOOK_EVERY: Duration = Duration::from_millis(1);

const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Blocks live at exit from which on the file is written while the scan
/// runs ([`State::finish_alongside_scan`]): python3's 20 are scanned in
/// ~1 ms, and its file is written ~2 ms slower from another thread; perl's
/// 6,500 take ~22 ms, git's 41,000 ~17 ms.
const ALONGSIDE_FROM: usize = 1024;

/// Descriptors released when the last holder of their share lets go (the
/// spool, read by the file's thread and by the exit scan's replay).
type SpoolShare = std::sync::Arc<Released>;

/// Registered descriptors, released when this is dropped.
struct Released(Vec<usize>);

impl Drop for Released {
    fn drop(&mut self) {
        for &slot in &self.0 {
            fds::release(slot);
        }
    }
}

/// After finding nothing to take, the writer first naps `NAP_US` at a time,
/// `NAPS` times, without telling the producers it sleeps, and only then
/// sleeps until woken. A busy thread fills half its lane (2,048 messages)
/// in more than a nap's time at 80 ns a message (python3's rate), so while
/// a program allocates nothing has to wake the writer: every wake is a
/// `futex` call on the program's thread and an interrupt to the writer's
/// processor (python3 300k dict: 1,516 futex calls before).
const NAP_US: u64 = 100;
const NAPS: u32 = 10;
/// After a pass that took what the lanes held (fewer than its 4,096
/// messages), the writer naps this long before the next, while every lane
/// is a big one: taking each message as soon as it came, it looked at the
/// lanes ~500,000 times for alloc_chain's 2M events with 2 threads (a few
/// messages a look, each look loading lines the producers were writing)
/// and took a core's time from them. A big lane fills in no less than
/// ~200 us at 50 ns a message; with hundreds of threads' small lanes
/// (1,024 slots), the writer's passes are long anyway and a nap made
/// threads wait for room (`examples/many_threads.c`: more CPU, not less).
/// Not while system calls are captured: a thread writing 4 KiB buffers
/// fills its 128 KiB ring in as many microseconds.
const CAUGHT_UP_NAP_US: u64 = 50;
/// Minimum time between two flushes made because the queue ran empty.
const FLUSH_WHEN_IDLE: Duration = Duration::from_millis(2);

struct State {
    outputs: Vec<Output>,
    stacks: StackTable,
    depth: usize,
    symbolize: Symbolize,
    /// Executable path, for the symbolizer.
    executable: String,
    /// Every frame address of every stack (hashed once per frame of each
    /// new stack: SipHash was the writer's third-largest cost on python3).
    addresses: HashSet<u64, scan::BuildMix>,
    /// Objects unloaded so far (`dlclose`), oldest first. A frame inside one
    /// may be code loaded there since, whose name is not the one given to
    /// the address at the unload: such frames are named when their stack
    /// is first seen, in the stack itself (see `name_reused`).
    unloaded: Vec<Object>,
    /// The objects each thread is unloading (from the flush before glibc's
    /// `dlclose` to the hook's return, see [`dlclose_returned`]): its stacks
    /// meanwhile (destructors) are that code's, whatever another thread has
    /// loaded there since.
    closing: HashMap<u32, Vec<Object>>,
    objects: objects::Known,
    threads: HashSet<u32, scan::BuildMix>,
    /// Old blocks of reallocs in progress: (tid, addr, time, already emitted,
    /// the live table keeps its exact size).
    pending: Vec<(u32, u64, u64, bool, bool)>,
    /// Latest timestamp emitted.
    last_time: u64,
    /// Thread of the previous event (skips the set lookup for runs).
    last_tid: u32,
    failed: bool,
    /// Blocks live in the stream written so far (for the scan at exit).
    live: scan::Live,
    /// Stack messages received (a thread sends a stack again when its
    /// "already sent" cache lost it: `TRACER_STACK_STATS`).
    stack_messages: u64,
    /// Messages taken from the lanes (see `lane`; `TRACER_STACK_STATS`).
    lane_messages: u64,
    /// Messages taken from the channel (`TRACER_STACK_STATS`).
    channel_messages: u64,
    /// Allocations held back until the lanes gave another thread's free of
    /// their address, and those let through without it (`TRACER_STACK_STATS`).
    held_back: u64,
    forced: u64,
    /// A channel message taken but not handled yet (an allocation held back).
    held: Option<Msg>,
    /// The looks at the lanes begun so far, and how many had begun when
    /// `held` was received: it may be handled once a look began after that
    /// (what it depends on was published before it was sent).
    looks: u64,
    held_look: u64,
    /// Looks made because the earliest message was not ready yet
    /// (`TRACER_STACK_STATS`).
    relooks: u64,
    /// The views of the lanes being drained, kept for their memory.
    views: Vec<lane::View>,
    /// The sources `drain_ordered` may take from next, by the time of
    /// their next message (the channel's index is `usize::MAX`), kept for
    /// their memory.
    ready: BinaryHeap<Reverse<(u64, usize)>>,
    /// The sources whose next message waits, kept likewise.
    waiting: Waiting,
}

/// The sources of `State::drain_ordered` whose next message waits for
/// another thread's at the same address: `(time, source, address)`, and
/// how many wait at each address.
#[derive(Default)]
struct Waiting {
    list: Vec<(u64, usize, u64)>,
    addresses: HashMap<u64, u32, scan::BuildMix>,
    first: u64,
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn clear(&mut self) {
        self.list.clear();
        self.addresses.clear();
        self.first = u64::MAX;
    }

    /// The earliest time of a waiting message (`u64::MAX`: none).
    fn first_time(&self) -> u64 {
        if self.list.is_empty() {
            u64::MAX
        } else {
            self.first
        }
    }

    /// Source `src`'s next message, `h`, waits.
    fn add(&mut self, h: lane::Head, src: usize) {
        let addr = match h.dep {
            lane::Dep::Alloc(a) | lane::Dep::Free(a) => a,
            lane::Dep::None => 0,
        };
        if self.list.is_empty() {
            self.first = u64::MAX;
        }
        self.first = self.first.min(h.time);
        self.list.push((h.time, src, addr));
        *self.addresses.entry(addr).or_insert(0) += 1;
    }

    /// A message with head `h` was handled: the sources waiting at its
    /// address may go again. Every wait ends, as after a fresh look, when
    /// `all` (the message may have settled a realloc in progress, which
    /// frees the old block's address) or for a message with no address and
    /// no time (a failed realloc, which puts the old block back, or a stack).
    #[inline]
    fn wake(&mut self, h: lane::Head, all: bool, ready: &mut BinaryHeap<Reverse<(u64, usize)>>) {
        if self.list.is_empty() {
            return;
        }
        let addr = match h.dep {
            _ if all => None,
            lane::Dep::Alloc(a) | lane::Dep::Free(a) => Some(a),
            lane::Dep::None if h.time == 0 => None,
            lane::Dep::None => return,
        };
        if let Some(a) = addr {
            if self.addresses.remove(&a).is_none() {
                return;
            }
        }
        let mut first = u64::MAX;
        self.list.retain(|&(t, src, at)| {
            if addr.is_none_or(|a| a == at) {
                ready.push(Reverse((t, src)));
                false
            } else {
                first = first.min(t);
                true
            }
        });
        if addr.is_none() {
            self.addresses.clear();
        }
        self.first = first;
    }
}

/// Runs the writer until asked to stop; returns the receiver for reuse.
pub fn run(
    rx: Receiver<Msg>,
    early: Vec<Msg>,
    pending: Vec<PendingOutput>,
    setup: Setup,
    ctl: &Control,
) -> Receiver<Msg> {
    tls::enter_forever();
    let outputs = pending
        .into_iter()
        .filter_map(|p| p.make(setup.quiet))
        .collect();
    let mut st = State::new(
        outputs,
        setup.depth,
        setup.symbolize,
        setup.process.executable.clone(),
    );
    // The sizes of the blocks live at exit can be read back from a trace
    // that replays its allocations: the live table then keeps starts only.
    if !scan::enabled() {
        // The table still tells which blocks are live, for the order of
        // several threads' messages (`drain_in_order`).
        st.live.use_starts_only();
    } else if st
        .outputs
        .iter()
        .any(|o| !o.syscalls && o.writer.replays_allocations())
    {
        st.live.use_replayed_sizes();
    }
    st.emit(&Record::Process(setup.process));
    st.emit(&Record::Info(setup.info));
    let fresh = st.objects.rescan();
    st.emit_objects(fresh);
    for m in early {
        st.handle(m);
    }
    // The header records reach the file at once: a process killed soon after
    // start still leaves a readable trace.
    st.flush();
    let mut last_flush = Instant::now();
    let mut last_look = Instant::now();
    let mut events_since_look = false;
    let mut idle = Duration::from_micros(500);
    let mut naps = 0;
    let mut dirty = false;
    // When the writer last asked whether the program's threads are all gone.
    let mut last_alone_check = Instant::now();
    // Since when nothing came (see DEEP_AFTER), and whether the lanes wake
    // the writer at their first message (a fork's child may inherit them so).
    let mut last_busy = Instant::now();
    let mut deep = false;
    wake_on_any(false);
    loop {
        // Read before the look at the flush requests below: a request made
        // after it ends the nap at once (see `interrupt_nap`).
        let nap_word = NAP.load(Ordering::SeqCst);
        let mut got = st.drain_in_order(&rx, 4096) as u32;
        got += st.drain_syscalls() as u32;
        // Libraries the program loaded since, when its allocator is its own
        // (see `got`): at most every LOOK_EVERY, after events came.
        events_since_look |= got > 0;
        if events_since_look && crate::got::active() && last_look.elapsed() >= LOOK_EVERY {
            events_since_look = false;
            last_look = Instant::now();
            crate::objects::loader_section(crate::got::look_for_new_objects);
        }
        ctl.progress.fetch_add(1, Ordering::Relaxed);
        let wanted = ctl.flush_requested.load(Ordering::SeqCst);
        if wanted != ctl.flush_done.load(Ordering::Relaxed) {
            // What was published before the request, not what busy threads
            // go on publishing meanwhile: a `dlclose` beside two threads
            // allocating in loops waited ~50 ms for the writer to catch up
            // with them. A pass that handles nothing twice ends it (an
            // allocation left waiting for a free never seen).
            //
            // Handled is enough for a `dlclose` (its object's frames named):
            // the files wait for the periodic flush (a plugin host's loop
            // paid a `write` a `dlclose`) unless a requester asked for them.
            // Taken before the marks: a request for the files whose ticket
            // a later pass serves had its events published before it set
            // the word, so a pass that takes the word also drains them.
            let files = ctl.flush_files.swap(false, Ordering::SeqCst);
            let marks = lane::marks();
            let mut idle = 0;
            while !marks.taken() && idle < 2 {
                if st.drain_in_order(&rx, 4096) == 0 {
                    idle += 1;
                } else {
                    idle = 0;
                }
            }
            st.drain_syscalls();
            let unloading = ctl
                .unloading
                .lock()
                .map(|mut v| std::mem::take(&mut *v))
                .unwrap_or_default();
            if !unloading.is_empty() {
                st.resolve_objects(&unloading);
            }
            if files {
                st.flush();
                last_flush = Instant::now();
            }
            ctl.flush_done.store(wanted, Ordering::SeqCst);
            sys::futex_wake_all(&ctl.flush_done);
        }
        dirty |= got > 0;
        // Every 100 ms under load; as soon as the program pauses otherwise
        // (a short-lived process killed by a signal then loses nothing).
        let since = last_flush.elapsed();
        if since >= FLUSH_EVERY || (got == 0 && dirty && since >= FLUSH_WHEN_IDLE) {
            let fresh = st.objects.rescan_pending();
            st.emit_objects(fresh);
            st.flush();
            last_flush = Instant::now();
            dirty = false;
        }
        if got == 0 {
            if ctl.stop.load(Ordering::SeqCst)
                && rx.is_empty()
                && st.held.is_none()
                && lane::is_empty()
                && syscalls::ring::all_empty()
            {
                break;
            }
            if naps < NAPS {
                // The program is likely still busy: a short nap that no
                // producer needs to end (see NAP_US).
                naps += 1;
                sys::futex_wait(&NAP, nap_word, Duration::from_micros(NAP_US));
            } else {
                if !deep && last_busy.elapsed() >= DEEP_AFTER {
                    wake_on_any(true);
                    deep = true;
                }
                sleep_until_woken(&rx, if deep { ALONE_CHECK } else { idle });
                idle = (idle * 2).min(Duration::from_millis(10));
                // Idle for a while: is there still a program to wait for?
                // (`/proc/self/stat`, read every ALONE_CHECK at most.)
                if last_alone_check.elapsed() >= ALONE_CHECK {
                    last_alone_check = Instant::now();
                    if crate::lifecycle::program_gone() {
                        ctl.stop.store(true, Ordering::SeqCst);
                    }
                }
            }
        } else {
            if got < 4096 && lane::all_big() && !syscalls::capturing() {
                sys::futex_wait(&NAP, nap_word, Duration::from_micros(CAUGHT_UP_NAP_US));
            }
            naps = 0;
            idle = Duration::from_micros(500);
            last_busy = Instant::now();
            if deep {
                wake_on_any(false);
                deep = false;
            }
        }
    }
    let drained = sys::now_ns();
    if let Some(at) = scan::take_request().filter(|_| !crate::alloc::exhausted()) {
        if st.files_alongside_scan() {
            st.finish_alongside_scan(&at, ctl, drained);
            ctl.stderr_first
                .store(sys::stderr_is_the_first(), Ordering::SeqCst);
            ctl.done.store(true, Ordering::SeqCst);
            return rx;
        }
        st.leak_scan(&at, ctl);
        // What other threads did meanwhile follows the scan's records.
        st.drain_in_order(&rx, usize::MAX);
    }
    st.drain_syscalls();
    if crate::lifecycle::ending_by_exec() {
        st.emit(&Record::Info(vec![("ended".into(), "exec".into())]));
    } else if let Some(sig) = crate::lifecycle::ending_by_signal() {
        st.emit(&Record::Info(vec![
            ("ended".into(), "signal".into()),
            ("signal".into(), crate::signals::name(sig).into()),
        ]));
    }
    st.finish(ctl, drained);
    ctl.stderr_first
        .store(sys::stderr_is_the_first(), Ordering::SeqCst);
    ctl.done.store(true, Ordering::SeqCst);
    rx
}

/// How often an idle writer asks whether the program's threads are all gone
/// (`lifecycle::program_gone`), and how long it sleeps at most once the
/// program has been idle for `DEEP_AFTER`.
const ALONE_CHECK: Duration = Duration::from_millis(100);

/// Whether the lanes' and the syscall rings' first message wakes the
/// writer (see `DEEP_AFTER`).
fn wake_on_any(any: bool) {
    lane::wake_on_any(any);
    syscalls::ring::wake_on_any(any);
}

/// Idle time after which the writer sleeps `ALONE_CHECK` at a time, not
/// 10 ms, and a lane's first message wakes it ([`lane::wake_on_any`]): an
/// idle traced server's writer woke 100 times a second (~0.7% of a core
/// each, on this host), now 10.
const DEEP_AFTER: Duration = Duration::from_millis(100);

/// 1 while the writer sleeps; a producer that finds the channel full wakes it.
static SLEEPING: AtomicU32 = AtomicU32::new(0);

/// Sleeps up to `max`, or until [`wake`] is called.
fn sleep_until_woken(rx: &Receiver<Msg>, max: Duration) {
    SLEEPING.store(1, Ordering::SeqCst);
    if rx.is_empty() && lane::is_empty() {
        sys::futex_wait(&SLEEPING, 1, max);
    }
    SLEEPING.store(0, Ordering::SeqCst);
}

/// Threads whose `dlclose` hook returned since the writer last looked
/// (see `State::closing`).
static RETURNED: parking_lot::Mutex<Vec<u32>> = parking_lot::Mutex::new(Vec::new());

/// The calling thread's `dlclose` hook is returning: the object it unloaded
/// no longer names its new stacks. Pushed before the thread can send any
/// later stack, and read by the writer before it names one.
pub fn dlclose_returned(tid: u32) {
    RETURNED.lock().push(tid);
}

/// In a fork's child, alone: the parent's writer may have held the list's
/// lock at the fork, and its threads are not the child's.
pub fn after_fork_child() {
    if RETURNED.is_locked() {
        // SAFETY: the child has one thread; the holder was the parent's
        // writer, which does not exist here.
        unsafe { RETURNED.force_unlock() };
    }
    RETURNED.lock().clear();
}

/// The word the writer's short naps wait on (see `NAP_US`): no producer
/// touches it; a flush request bumps it so that a nap ends at once.
static NAP: AtomicU32 = AtomicU32::new(0);

/// Ends the writer's nap or sleep now: a thread waits for a flush
/// (`dlclose`, `abort`).
pub fn interrupt_nap() {
    NAP.fetch_add(1, Ordering::SeqCst);
    sys::futex_wake(&NAP);
    wake();
}

/// Wakes the writer if it sleeps, without writing the shared word when it
/// does not (a producer's ring passed half full).
#[inline]
pub fn wake_if_sleeping() {
    if SLEEPING.load(Ordering::Relaxed) == 1 {
        wake();
    }
}

/// How a producer waits for the writer to make room (a full channel,
/// syscall ring or lane): the writer is woken once, then the producer spins
/// briefly, yields, and sleeps in 50 us steps; a lane's owner sleeps instead
/// until the writer has freed a quarter of its lane ([`RoomWait::block`]). A producer in a copy of the
/// process that has no writer stops tracing instead of waiting
/// (`lifecycle::stop_if_left_behind`), at its first pause or, where the
/// kernel cannot tell it is a copy, after a second.
#[derive(Default)]
pub struct RoomWait {
    spins: u32,
}

/// Pauses of [`RoomWait`] after which a producer has waited over a second
/// (from the 256th on, each sleeps 50 us).
const LONG_WAIT: u32 = 256 + 20_000;

/// The longest sleep of [`RoomWait::block`], and how many 50 us pauses it
/// counts for: a wake-up lost to a bug would cost this much, and a
/// thousand threads sleeping this long each wake 20,000 times a second.
const BLOCK_MS: u32 = 50;
const BLOCK_PAUSES: u32 = BLOCK_MS * 20;

impl RoomWait {
    /// Past the spins and a few yields: a waiter that can be woken sleeps
    /// from here on ([`RoomWait::block`]). With hundreds of threads waiting,
    /// each yield only runs another waiter (192 of them each time cost
    /// 2,000 threads ~40% of their samples).
    pub fn spun_out(&self) -> bool {
        self.spins >= 64 + 16
    }

    /// Sleeps while `word` holds `expected`, until woken or [`BLOCK_MS`]
    /// passed, and counts as that many pauses.
    pub fn block(&mut self, word: &AtomicU32, expected: u32) {
        let before = self.spins;
        self.spins = self.spins.wrapping_add(BLOCK_PAUSES);
        if before / LONG_WAIT != self.spins / LONG_WAIT {
            crate::lifecycle::stop_if_left_behind(true);
        }
        sys::futex_wait(word, expected, Duration::from_millis(u64::from(BLOCK_MS)));
    }

    pub fn pause(&mut self) {
        if self.spins == 0 {
            crate::lifecycle::stop_if_left_behind(false);
            wake();
        } else if self.spins.is_multiple_of(LONG_WAIT) {
            crate::lifecycle::stop_if_left_behind(true);
        }
        self.spins = self.spins.wrapping_add(1);
        if self.spins < 64 {
            core::hint::spin_loop();
        } else if self.spins < 256 {
            std::thread::yield_now();
        } else {
            sys::sleep_us(50);
        }
    }
}

/// Wakes the writer if it sleeps (called when the channel is full, or to
/// make it notice a stop request at once).
pub fn wake() {
    if SLEEPING.swap(0, Ordering::SeqCst) == 1 {
        sys::futex_wake(&SLEEPING);
    }
}

impl State {
    fn new(outputs: Vec<Output>, depth: usize, symbolize: Symbolize, executable: String) -> State {
        State {
            outputs,
            stacks: StackTable::new(),
            depth,
            symbolize,
            executable,
            addresses: HashSet::default(),
            unloaded: Vec::new(),
            closing: HashMap::new(),
            objects: objects::Known::default(),
            threads: HashSet::default(),
            pending: Vec::new(),
            last_time: 0,
            last_tid: 0,
            failed: false,
            live: scan::Live::default(),
            stack_messages: 0,
            lane_messages: 0,
            channel_messages: 0,
            held_back: 0,
            forced: 0,
            held: None,
            looks: 0,
            held_look: 0,
            relooks: 0,
            views: Vec::new(),
            ready: BinaryHeap::new(),
            waiting: Waiting::default(),
        }
    }

    fn emit(&mut self, record: &Record) {
        if self.failed {
            return;
        }
        for out in &mut self.outputs {
            if let Err(e) = out.writer.write(record) {
                crate::sys::stderr_line(&format!(
                    "cannot write {}: {e}; the trace stops here",
                    out.path.display()
                ));
                self.failed = true;
                return;
            }
        }
    }

    /// Handles what the lanes and the channel hold, in order (see `lane`);
    /// stops once `limit` messages were handled and returns how many.
    fn drain_in_order(&mut self, rx: &Receiver<Msg>, limit: usize) -> usize {
        let mut n = 0;
        while n < limit {
            let got = self.drain_once(rx, limit - n);
            if got == 0 {
                break;
            }
            n += got;
        }
        n
    }

    /// One pass over what the lanes had published when it began, and the
    /// channel: the next message is the one with the earliest time among
    /// the sources' next messages, but an allocation at an address still
    /// live here waits while another thread's free of it may be queued
    /// (`lane`'s module doc). When every source left waits, the lanes are
    /// looked at again; if nothing was handled since the previous look and
    /// nothing new came, the earliest waiting allocation goes through (the
    /// free it waits for was never seen).
    fn drain_once(&mut self, rx: &Receiver<Msg>, budget: usize) -> usize {
        let mut views = std::mem::take(&mut self.views);
        let lanes = self.look(&mut views);
        // One lane, or the channel alone, needs no check: one producer's
        // order, or the channel's, which is the hooks' order of sending (a
        // free is sent before the real free runs, an allocation after the
        // real malloc returned).
        let channel = self.channel_messages > 0 || self.held.is_some() || !rx.is_empty();
        let n = if lanes > 1 || (channel && lanes > 0) {
            self.drain_ordered(rx, &mut views, budget)
        } else {
            self.drain_plain(rx, &mut views, budget)
        };
        for v in &views {
            v.release();
        }
        self.views = views;
        n
    }

    /// [`State::drain_once`] for a lone source.
    fn drain_plain(
        &mut self,
        rx: &Receiver<Msg>,
        views: &mut [lane::View],
        budget: usize,
    ) -> usize {
        let mut n = 0;
        for v in views.iter_mut() {
            v.trust_all();
            while n < budget {
                let Some(m) = v.take() else { break };
                self.lane_messages += 1;
                self.handle(m);
                n += 1;
            }
        }
        while n < budget {
            let Some(m) = self.held.take().or_else(|| rx.try_recv().ok()) else {
                break;
            };
            self.channel_messages += 1;
            self.handle(m);
            n += 1;
        }
        n
    }

    /// Looks at the lanes ([`lane::look`]), counted for the channel's
    /// message (`held_look`).
    fn look(&mut self, views: &mut Vec<lane::View>) -> usize {
        self.looks += 1;
        lane::look(views)
    }

    /// Takes the channel's next message into `held`, if there is none.
    fn receive(&mut self, rx: &Receiver<Msg>) {
        if self.held.is_none() {
            self.held = rx.try_recv().ok();
            self.held_look = self.looks;
        }
    }

    /// Gives the taken slots back and looks at the lanes and the channel
    /// again.
    fn look_again(&mut self, rx: &Receiver<Msg>, views: &mut Vec<lane::View>) {
        for v in views.iter() {
            v.release();
        }
        self.look(views);
        self.receive(rx);
    }

    /// Whether the channel's held message may be handled (see `held_look`).
    fn held_ready(&self) -> bool {
        self.held.is_some() && self.held_look < self.looks
    }

    /// [`State::drain_once`] with several sources.
    fn drain_ordered(
        &mut self,
        rx: &Receiver<Msg>,
        views: &mut Vec<lane::View>,
        budget: usize,
    ) -> usize {
        /// The channel's index among the sources.
        const CHANNEL: usize = usize::MAX;
        // The sources whose next message does not wait, earliest first, and
        // those whose next message waits for the counterpart at an address
        // (`waits`). Each source with a next message is in one of the two
        // with that message's time, except while it is taken from: its next
        // message changes only then. A wait ends when a message at its
        // address is handled (the only thing that changes `waits` for it),
        // or after a fresh look; before, a waiting source is not looked at
        // again (it was, after every message handled: with 600 threads
        // allocating at once, ~13 waiting lanes were tried again for each).
        let mut ready = std::mem::take(&mut self.ready);
        let mut waiting = std::mem::take(&mut self.waiting);
        let fill = |ready: &mut BinaryHeap<Reverse<(u64, usize)>>,
                    views: &[lane::View],
                    held: &Option<Msg>| {
            ready.clear();
            ready.extend(
                (views.iter().enumerate())
                    .filter_map(|(i, v)| v.peek().map(|h| Reverse((h.time, i)))),
            );
            if let Some(m) = held {
                ready.push(Reverse((m.time(), CHANNEL)));
            }
        };
        self.receive(rx);
        fill(&mut ready, views, &self.held);
        waiting.clear();
        let mut n = 0;
        // Messages handled since the lanes were last looked at.
        let mut since_look = 0usize;
        while n < budget {
            // The earliest next message of a source that does not wait; the
            // earliest of the others, waiting or not, bounds how far that
            // source may go on.
            let popped = ready.pop();
            let unready = match popped {
                Some(Reverse((_, CHANNEL))) => !self.held_ready(),
                Some(Reverse((_, src))) => !views[src].ready(),
                None => false,
            };
            let src = match popped {
                Some(Reverse((_, src))) if !unready => src,
                _ => {
                    if popped.is_none() && waiting.is_empty() {
                        break;
                    }
                    // Look again: the earliest message came in as the lanes
                    // were looked at (what it depends on may not be in the
                    // views yet), or every source left waits.
                    let before: u64 = views.iter().map(|v| v.takeable()).sum();
                    self.look_again(rx, views);
                    if unready {
                        self.relooks += 1;
                    } else {
                        // A waiting message whose counterpart no lane holds
                        // now waits for an event the hooks never saw: it goes
                        // at once, however busy the other threads keep the
                        // lanes. If nothing came and nothing was handled
                        // since the last look, the earliest goes.
                        let after: u64 = views.iter().map(|v| v.takeable()).sum();
                        let seen_late = views.iter().any(|v| v.len() > v.takeable());
                        let orphans = self.force_orphans(views);
                        n += orphans;
                        if orphans == 0 && since_look == 0 && after == before && !seen_late {
                            n += self.force_earliest(views);
                        }
                    }
                    since_look = 0;
                    fill(&mut ready, views, &self.held);
                    waiting.clear();
                    continue;
                }
            };
            let second = ready
                .peek()
                .map_or(u64::MAX, |r| r.0 .0)
                .min(waiting.first_time());
            if src == CHANNEL {
                let m = self.held.take().expect("a held message was considered");
                let h = lane::Head::of(&m);
                if self.waits(h) {
                    waiting.add(h, CHANNEL);
                    self.held = Some(m);
                    self.held_back += 1;
                    continue;
                }
                self.channel_messages += 1;
                let settling = !self.pending.is_empty();
                self.handle(m);
                n += 1;
                since_look += 1;
                waiting.wake(h, settling, &mut ready);
                self.receive(rx);
                if let Some(m) = &self.held {
                    ready.push(Reverse((m.time(), CHANNEL)));
                }
            } else {
                // The first message is the earliest of those that do not
                // wait; the next ones go while no other source's next
                // message is earlier. None may run ahead of one: another
                // source may hold an earlier free and allocation of the
                // same address (freed, then handed to this thread by the
                // allocator). Taken after them, an allocation made theirs
                // wait for a free that comes after it (with hundreds of
                // threads sharing arenas every lane ended up waiting:
                // `examples/many_threads.c`), and a free went to the
                // address's previous block (`node` with worker threads).
                let v = &mut views[src];
                let first = n;
                let mut waits = false;
                while n < budget {
                    let Some(h) = v.peek() else { break };
                    if n > first && (h.time > second || !v.ready()) {
                        break;
                    }
                    if self.waits(h) {
                        waiting.add(h, src);
                        self.held_back += 1;
                        waits = true;
                        break;
                    }
                    let m = v.take().expect("a message was peeked");
                    self.lane_messages += 1;
                    let settling = !self.pending.is_empty();
                    self.handle(m);
                    n += 1;
                    since_look += 1;
                    waiting.wake(h, settling, &mut ready);
                }
                if !waits {
                    if let Some(h) = v.peek() {
                        ready.push(Reverse((h.time, src)));
                    }
                }
            }
        }
        self.ready = ready;
        self.waiting = waiting;
        n
    }

    /// Whether `m` must wait for another thread's message: an allocation
    /// at an address still live here (unless a realloc's provisional free
    /// of it is still to be settled), which waits for the free, or a free
    /// of an address not live here, which waits for the allocation (a block
    /// handed to another thread and freed there).
    #[inline]
    fn waits(&mut self, h: lane::Head) -> bool {
        match h.dep {
            lane::Dep::Alloc(addr) => {
                self.live.is_live(addr) && !self.pending.iter().any(|p| p.1 == addr && !p.3)
            }
            lane::Dep::Free(addr) => !self.live.is_live(addr),
            lane::Dep::None => false,
        }
    }

    /// Handles every lane's next message that waits for a counterpart (the
    /// free of its address, or its allocation) that no other lane and not
    /// the channel's held message holds: right after a fresh look, whatever
    /// it depends on was published (`lane`'s module doc), so it never will
    /// be. Returns how many. One walk over the messages the views hold
    /// (each lane used to be walked again for every waiting one: with 600
    /// lanes of 1,024 slots, that was 86% of the writer's time).
    #[cold]
    fn force_orphans(&mut self, views: &mut [lane::View]) -> usize {
        fn key(d: lane::Dep) -> Option<u64> {
            match d {
                lane::Dep::Alloc(a) => Some(a << 2 | 1),
                lane::Dep::Free(a) => Some(a << 2 | 2),
                lane::Dep::None => None,
            }
        }
        const NOBODY: usize = usize::MAX;
        // The counterparts the waiting next messages want, each with the
        // first lane found holding it and whether another lane does too.
        let mut wanted: HashMap<u64, (usize, bool), scan::BuildMix> = HashMap::default();
        let mut waiting = Vec::new();
        for (i, v) in views.iter().enumerate() {
            let Some(h) = v.peek().filter(|_| v.ready()) else {
                continue;
            };
            if !self.waits(h) {
                continue;
            }
            if let Some(k) = key(h.dep.counterpart()) {
                wanted.insert(k, (NOBODY, false));
                waiting.push((i, k));
            }
        }
        if waiting.is_empty() {
            return 0;
        }
        for (j, v) in views.iter().enumerate() {
            v.each_head(|h| {
                if let Some(e) = key(h.dep).and_then(|k| wanted.get_mut(&k)) {
                    if e.0 == NOBODY {
                        e.0 = j;
                    } else if e.0 != j {
                        e.1 = true;
                    }
                }
            });
        }
        let held = self.held.as_ref().and_then(|m| key(lane::Head::of(m).dep));
        let mut forced = 0;
        for (i, k) in waiting {
            let (first, more) = wanted[&k];
            if (first != NOBODY && first != i) || more || held == Some(k) {
                continue;
            }
            // What was forced before may have ended this wait.
            let Some(h) = views[i].peek() else { continue };
            if !self.waits(h) {
                continue;
            }
            if let Some(m) = views[i].take() {
                self.forced += 1;
                self.lane_messages += 1;
                self.handle(m);
                forced += 1;
            }
        }
        forced
    }

    /// Every source's next message waits for a message nobody published:
    /// the earliest of them goes through; returns how many (0 or 1).
    #[cold]
    fn force_earliest(&mut self, views: &mut [lane::View]) -> usize {
        let lanes = views
            .iter()
            .enumerate()
            .filter(|(_, v)| v.ready())
            .filter_map(|(i, v)| v.peek().map(|h| (h.time, i)));
        let channel = (self.held.as_ref())
            .filter(|_| self.held_ready())
            .map(|m| (m.time(), usize::MAX));
        let Some((_, src)) = lanes.chain(channel).min() else {
            return 0;
        };
        let m = if src == usize::MAX {
            self.channel_messages += 1;
            self.held.take()
        } else {
            self.lane_messages += 1;
            views[src].take()
        };
        let Some(m) = m else { return 0 };
        self.forced += 1;
        self.handle(m);
        1
    }

    /// Writes the system calls the program's threads queued in their rings
    /// (see `syscalls::ring`); returns how many.
    fn drain_syscalls(&mut self) -> usize {
        syscalls::ring::drain(|call| self.emit_syscall(call))
    }

    /// A system call, to the syscall outputs only (their times are kept as
    /// taken: calls are queued when they return, not when they started).
    /// The call is a view of its ring's bytes: the TLV writer encodes it
    /// without building the model record.
    fn emit_syscall(&mut self, call: &SyscallView<'_>) {
        if self.failed {
            return;
        }
        for out in self.outputs.iter_mut().filter(|o| o.syscalls) {
            if let Err(e) = out.writer.write_syscall(call) {
                crate::sys::stderr_line(&format!(
                    "cannot write {}: {e}; the trace stops here",
                    out.path.display()
                ));
                self.failed = true;
                break;
            }
        }
    }

    fn flush(&mut self) {
        if self.failed {
            return;
        }
        for out in &mut self.outputs {
            let _ = out.writer.flush();
        }
    }

    fn emit_objects(&mut self, objects: Vec<Object>) {
        for o in objects {
            self.emit(&Record::Object(o));
        }
    }

    fn time(&mut self, t: u64) -> u64 {
        // Threads take their timestamps before racing for the channel; keep the
        // stream non-decreasing in channel order.
        self.last_time = self.last_time.max(t);
        self.last_time
    }

    #[inline]
    fn thread(&mut self, tid: u32) {
        if tid != self.last_tid {
            self.other_thread(tid);
        }
    }

    #[inline(never)]
    fn other_thread(&mut self, tid: u32) {
        self.last_tid = tid;
        if self.threads.insert(tid) {
            let name = lane::name_of(tid).unwrap_or_else(|| {
                let path = std::ffi::CString::new(format!("/proc/self/task/{tid}/comm"))
                    .unwrap_or_default();
                sys::read_proc(&path)
                    .map(|b| String::from_utf8_lossy(&b).trim_end().to_string())
                    .unwrap_or_default()
            });
            self.emit(&Record::Thread(Thread { tid, name }));
        }
    }

    fn stack_id(&mut self, key: u64) -> u64 {
        let key = if self.depth == 0 { NO_STACK } else { key };
        match self.stacks.id(key) {
            Some(id) => id,
            None => self.new_stack(key, &[], 0),
        }
    }

    fn new_stack(&mut self, key: u64, frames: &[u64], tid: u32) -> u64 {
        match self.stacks.intern(key) {
            Interned::Known(id) => id,
            Interned::New(id) => {
                let frames = &frames[..frames.len().min(self.depth)];
                let mut named = self.name_reused(frames, tid);
                // Nearly always empty (no code unloaded where a frame is):
                // then no frame is hashed to look in it (SipHash, ~135
                // instructions a frame of a new stack).
                let reused = !named.is_empty();
                let mut unknown = false;
                for &a in frames {
                    if !reused || !named.contains_key(&a) {
                        self.addresses.insert(a);
                        unknown |= !self.objects.contains(a);
                    }
                }
                if unknown {
                    let fresh = self.objects.rescan_if_due();
                    self.emit_objects(fresh);
                }
                let stack = Stack {
                    id,
                    frames: frames
                        .iter()
                        .map(|&address| Frame {
                            address,
                            symbol: if reused { named.remove(&address) } else { None },
                        })
                        .collect(),
                };
                self.emit(&Record::Stack(stack));
                id
            }
        }
    }

    /// Names now the frames of a new stack (sent by thread `tid`) that lie
    /// where an object was unloaded: a name by address (`AddressSymbol`)
    /// holds for every frame with that address, and the one given there at
    /// the unload belongs to the code that went (a plugin host loading
    /// plugins in turn at the same place named every later plugin's frames
    /// after the first). Which code a frame is: the object `tid` is
    /// unloading, if it is inside `dlclose`; else the object loaded there
    /// now (a stack is handled before its code can go: `dlclose` waits for
    /// the writer first); else the object unloaded there last.
    fn name_reused(&mut self, frames: &[u64], tid: u32) -> HashMap<u64, Symbol> {
        let mut out = HashMap::new();
        let holds = |o: &Object, a: u64| a.wrapping_sub(o.load_address) < o.size;
        let mut addrs: Vec<u64> = (frames.iter().copied())
            .filter(|&a| self.unloaded.iter().any(|o| holds(o, a)))
            .collect();
        if addrs.is_empty() {
            return out;
        }
        // The code loaded there now, as the loader lists it (the known
        // ranges may still hold an object another thread's `dlclose`
        // unloaded, which the writer was not asked to forget: two threads
        // loading plugins in turn had plug_b's frames named after plug_a);
        // where nothing is, the object unloaded there last (what its
        // destructors allocated inside `dlclose`, taken before the hook
        // returns: see `hooks::dlclose`), from its file.
        let (fresh, live) = self.objects.rescan_live();
        self.emit_objects(fresh);
        // A thread still inside `dlclose` (its object's destructors): the
        // object it unloads comes first.
        self.forget_returned();
        let mut objects = self.closing.get(&tid).cloned().unwrap_or_default();
        let overlaps = |a: &Object, b: &Object| {
            a.load_address < b.load_address + b.size && b.load_address < a.load_address + a.size
        };
        for o in live {
            if !objects.iter().any(|k| overlaps(k, &o)) {
                objects.push(o);
            }
        }
        for o in self.unloaded.iter().rev() {
            if !objects.iter().any(|k| overlaps(k, o)) {
                objects.push(o.clone());
            }
        }
        let (mode, executable) = (self.symbolize, self.executable.clone());
        address_symbols(mode, &executable, &objects, &mut addrs, None, &mut |r| {
            if let Record::AddressSymbol { address, symbol } = r {
                out.insert(address, symbol);
            }
            true
        });
        out
    }

    /// The threads whose `dlclose` hook returned no longer unload anything.
    fn forget_returned(&mut self) {
        for t in std::mem::take(&mut *RETURNED.lock()) {
            self.closing.remove(&t);
        }
    }

    fn free(&mut self, time_ns: u64, tid: u32, addr: u64) {
        self.live.free(addr);
        self.thread(tid);
        let time_ns = self.time(time_ns);
        self.emit_plain(Event::Free(Free {
            time_ns,
            thread: tid,
            address: addr,
        }));
    }

    /// An allocation or a free: its record owns no heap memory, so it is
    /// never dropped (the record enum's drop glue cost ~37 instructions an
    /// event, callgrind on alloc_chain).
    #[inline]
    fn emit_plain(&mut self, e: Event) {
        debug_assert!(matches!(e, Event::Alloc(_) | Event::Free(_)));
        let r = core::mem::ManuallyDrop::new(Record::Event(e));
        self.emit(&r);
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Stack { key, frames, tid } => {
                self.stack_messages += 1;
                let key = if self.depth == 0 { NO_STACK } else { key };
                self.new_stack(key, &frames, tid);
            }
            Msg::Alloc {
                time_ns,
                tid,
                addr,
                size,
                key,
                from_realloc,
            } => {
                let time_ns = self.time(time_ns);
                // A realloc of a block kept with its exact size keeps it too.
                let exact =
                    from_realloc && self.own_pending(tid).is_some_and(|i| self.pending[i].4);
                if !self.pending.is_empty() {
                    self.settle_pending(tid, addr, from_realloc, time_ns);
                }
                let stack = self.stack_id(key);
                self.thread(tid);
                self.live.alloc_with(addr, size, exact);
                self.emit_plain(Event::Alloc(Alloc {
                    time_ns,
                    thread: tid,
                    address: addr,
                    size,
                    stack,
                }));
            }
            Msg::Free { time_ns, tid, addr } => self.free(time_ns, tid, addr),
            Msg::ReallocFree { time_ns, tid, addr } => {
                // A thread has one realloc under way, or two when a signal
                // handler's ran inside the first (`side`): the halves pair
                // innermost first. More are stale (a realloc whose second
                // half never came): the oldest goes.
                if self.pending.iter().filter(|p| p.0 == tid).count() >= MAX_NESTED_REALLOCS {
                    if let Some(i) = self.pending.iter().position(|p| p.0 == tid) {
                        self.pending.remove(i);
                    }
                }
                let exact = scan::enabled() && self.live.is_exact(addr);
                self.pending.push((tid, addr, time_ns, false, exact));
            }
            Msg::ReallocFailed { tid } => {
                if let Some(i) = self.own_pending(tid) {
                    self.pending.remove(i);
                }
            }
            Msg::Marker { time_ns, tid, name } => {
                self.thread(tid);
                let time_ns = self.time(time_ns);
                self.emit(&Record::Event(Event::Marker(Marker {
                    time_ns,
                    thread: tid,
                    name: name.into(),
                })));
            }
        }
    }

    /// Emits the `Free` of a realloc's old block once it is certain: when the
    /// same thread reports the new block, or when any thread is handed the old
    /// address (which glibc can only do after the realloc released it).
    ///
    /// The free of a realloc's own result carries the new block's time
    /// (`time_ns`) and thread, so the pair reads as one realloc: consumers
    /// (MALT's realloc counts, `format_writers::aggregate`) recognise a
    /// realloc as a free immediately followed by an allocation of the same
    /// thread at the same time.
    fn settle_pending(&mut self, tid: u32, addr: u64, from_realloc: bool, time_ns: u64) {
        let mut due = Vec::new();
        let own_at = if from_realloc {
            self.own_pending(tid)
        } else {
            None
        };
        let mut i = 0;
        self.pending.retain_mut(|p| {
            let own = own_at == Some(i);
            i += 1;
            if (own || p.1 == addr) && !p.3 {
                due.push((if own { time_ns } else { p.2 }, p.0, p.1));
                p.3 = true;
            }
            !own
        });
        for (time_ns, t, a) in due {
            self.free(time_ns, t, a);
        }
    }

    /// The index of `tid`'s innermost realloc under way.
    fn own_pending(&self, tid: u32) -> Option<usize> {
        self.pending.iter().rposition(|p| p.0 == tid)
    }

    /// Symbolizes now the addresses inside the objects loaded from `paths`
    /// (about to be unloaded: another object may later take their place),
    /// after a scan that reports them if new.
    fn resolve_objects(&mut self, unloading: &[(String, u32)]) {
        // Where the loader has them now (the known ranges may still hold
        // an object of that path where another thread unloaded it).
        let (fresh, live) = self.objects.rescan_live();
        self.emit_objects(fresh);
        self.forget_returned();
        let mut closing: Vec<Object> = Vec::new();
        for o in live {
            for (path, tid) in unloading {
                if &o.path == path {
                    self.closing.entry(*tid).or_default().push(o.clone());
                    closing.push(o.clone());
                }
            }
        }
        let mut inside: Vec<u64> = self
            .addresses
            .iter()
            .copied()
            .filter(|&a| {
                closing
                    .iter()
                    .any(|o| a >= o.load_address && a - o.load_address < o.size)
            })
            .collect();
        for a in &inside {
            self.addresses.remove(a);
        }
        self.symbolize(&closing, &mut inside, None);
        for o in &closing {
            // An older entry inside this one's range is shadowed by it for
            // good (the newest covering entry names a frame): dropped, so
            // that a plugin reloaded for ever keeps the list short.
            let (lo, hi) = (o.load_address, o.load_address + o.size);
            self.unloaded
                .retain(|u| u.load_address < lo || u.load_address + u.size > hi);
            self.unloaded.push(o.clone());
        }
        self.objects.forget(&closing);
    }

    /// Emits an `AddressSymbol` for every address of `addrs` that `objects`
    /// can name, per `TRACER_SYMBOLIZE` (the files are read, not our memory).
    fn symbolize(&mut self, objects: &[Object], addrs: &mut [u64], ctl: Option<&Control>) {
        let progress = ctl.map(|c| &c.progress);
        let (mode, executable) = (self.symbolize, self.executable.clone());
        address_symbols(mode, &executable, objects, addrs, progress, &mut |r| {
            self.emit(&r);
            !self.failed
        });
    }

    /// Classifies the blocks live now (see `scan`) and writes the classes.
    fn leak_scan(&mut self, at: &scan::ExitPoint, ctl: &Control) {
        let replay_us = self.replay_sizes(ctl);
        let (classes, stats) = scan::run(&mut self.live, at);
        ctl.progress.fetch_add(1, Ordering::Relaxed);
        self.scan_stats(&stats, replay_us, false);
        let time_ns = self.time(sys::now_ns());
        self.emit(&Record::LeakScan { time_ns });
        for (address, kind) in classes.iter() {
            self.emit(&Record::BlockClass { address, kind });
        }
    }

    /// The sizes of the blocks live now, read back from the trace when the
    /// live table kept starts alone; returns the microseconds it took.
    fn replay_sizes(&mut self, ctl: &Control) -> u64 {
        ctl.progress.fetch_add(1, Ordering::Relaxed);
        let replay_start = sys::now_ns();
        if self.live.replayed_sizes() {
            let out = self
                .outputs
                .iter_mut()
                .find(|o| !o.syscalls && o.writer.replays_allocations());
            self.live.resolve_replayed(|f| match out {
                Some(o) => o.writer.replay_allocations(f).unwrap_or(false),
                None => false,
            });
            ctl.progress.fetch_add(1, Ordering::Relaxed);
        }
        sys::now_ns().saturating_sub(replay_start) / 1000
    }

    /// Private, for measurements: what the exit scan did.
    /// `deferred`: the sizes were replayed once the roots were planned
    /// (beside the file's thread, with many blocks).
    fn scan_stats(&self, stats: &scan::Stats, replay_us: u64, deferred: bool) {
        if std::env::var_os("TRACER_SCAN_STATS").is_some() {
            sys::stderr_line(&format!(
                "leak scan: {} blocks, {} sizes {} in {} us{}, {} root bytes, {} bytes never written (not read), {} us, blocks {}",
                stats.blocks,
                self.live.replayed_blocks(),
                if self.live.replay_failed() {
                    "read from chunk headers (the trace could not be read back)"
                } else {
                    "replayed"
                },
                replay_us,
                match (deferred, stats.sizes_beside) {
                    (true, true) => ", beside the file's thread",
                    (true, false) => ", once the roots were planned",
                    _ => "",
                },
                stats.root_bytes,
                stats.unwritten_bytes,
                stats.nanos / 1000,
                if stats.direct {
                    "copied directly"
                } else {
                    "read through the kernel"
                }
            ));
        }
    }

    /// Whether the files can be written while the exit scan runs
    /// ([`State::finish_alongside_scan`]): the exiting thread is the
    /// program's last and waits with its signals held (so no event can come
    /// after the scan), and the one output is a trace that can be finished
    /// before the scan's classes are known.
    fn files_alongside_scan(&self) -> bool {
        scan::held()
            && !self.failed
            && self.pending.is_empty()
            && self.held.is_none()
            && matches!(&self.outputs[..], [o] if !o.syscalls && o.writer.finishes_before_classes())
    }

    /// The exit with the scan and the files at once. The system calls and
    /// the objects are taken as [`State::leak_scan`] and [`State::finish`]
    /// take them; then the scan plans its roots from the blocks' addresses,
    /// and with many blocks live a thread of its own names the stacks'
    /// addresses and finishes the file with room for the scan's classes
    /// (`TraceWriter::finish_before_classes`) while this one marks. The
    /// survivors' sizes are replayed from the spool once the roots are
    /// planned (`TraceWriter::detach_allocation_replay`: positioned reads,
    /// so both threads can read the spool at once), beside the file's
    /// thread when the file is the longer (`scan::sizes_beside`: cc1plus,
    /// ~75-110 ms off its exit). The classes are written last. With few
    /// blocks (python3: 20, scanned in
    /// ~1 ms; its file was ~2 ms slower to write from another thread) the
    /// file is written after the scan, on this thread. Either way the file
    /// is the same as the one [`State::leak_scan`] and [`State::finish`]
    /// write.
    ///
    /// The other thread starts once the roots are planned, never before:
    /// the planning reads the first words of every page of the anonymous
    /// mappings to find glibc's `mmap`ed chunks, and a chunk that thread
    /// freed meanwhile would be gone (it was: `ls -l /usr/bin` died of
    /// SIGSEGV about once in 150 runs when it started before the replay of
    /// the sizes). What it maps later is not in the scan's snapshot, and
    /// what it frees later is its own.
    fn finish_alongside_scan(&mut self, at: &scan::ExitPoint, ctl: &Control, drained: u64) {
        // The survivors' sizes: replayed by the scan once its roots are
        // planned when the writer can hand a replay over, here otherwise.
        let detached = match self.outputs.last_mut() {
            Some(o) if self.live.replayed_sizes() => o.writer.detach_allocation_replay(),
            _ => None,
        };
        let mut replay_us = 0;
        if detached.is_none() {
            replay_us = self.replay_sizes(ctl);
        }
        self.drain_syscalls();
        self.stack_stats();
        let (objects, addrs, mode) = self.what_to_name();
        let naming = addrs.len();
        let executable = self.executable.clone();
        let time_ns = self.time(sys::now_ns());
        let Some(Output {
            path,
            slots,
            writer,
            ..
        }) = self.outputs.pop()
        else {
            return;
        };
        let progress = &ctl.progress;
        // The descriptors the file no longer needs once written (the spool:
        // closing it drops its cached pages, ~3 ms for python3's 23 MB),
        // closed by the last of the file's thread and the replay.
        let spool = SpoolShare::new(Released(slots.iter().skip(1).copied().collect()));
        let replay_spool = detached.as_ref().map(|_| spool.clone());
        // Names, then the file with room for the scan's blocks; how long both
        // took.
        let files = move |mut w: Box<dyn TraceWriter>, blocks: Vec<u64>| {
            let mut addrs = addrs;
            let t0 = sys::now_ns();
            let mut failed = None;
            address_symbols(
                mode,
                &executable,
                &objects,
                &mut addrs,
                Some(progress),
                &mut |r| {
                    failed = w.write(&r).err();
                    failed.is_none()
                },
            );
            let r = match failed {
                Some(e) => Err(e),
                None => w.finish_before_classes(time_ns, blocks),
            };
            drop(spool);
            (r, sys::now_ns().saturating_sub(t0) / 1000)
        };
        let deferred = detached.is_some();
        let mut detached = detached.map(|job| (job, replay_spool));
        let mut sizes = |live: &mut scan::Live| {
            let Some((job, share)) = detached.take() else {
                return;
            };
            progress.fetch_add(1, Ordering::Relaxed);
            let t0 = sys::now_ns();
            live.resolve_replayed(|f| job(f).unwrap_or(false));
            drop(share);
            progress.fetch_add(1, Ordering::Relaxed);
            replay_us = sys::now_ns().saturating_sub(t0) / 1000;
        };
        let mut files = Some(files);
        let mut writer = Some(writer);
        let mut done = None;
        let mut alongside = false;
        // What the file's thread copies: the spool (events and stacks).
        let file_bytes = slots.get(1).and_then(|&s| fds::file_size(s)).unwrap_or(0);
        let (classes, stats) = scan::run_with(
            &mut self.live,
            at,
            &mut |blocks, mark| {
                let (Some(f), Some(w)) = (files.take(), writer.take()) else {
                    return;
                };
                let addrs = blocks.to_vec();
                if blocks.len() < ALONGSIDE_FROM {
                    mark();
                    done = Some(f(w, addrs));
                    return;
                }
                alongside = true;
                done = Some(crate::lifecycle::alongside(Box::new(move || f(w, addrs)), mark).0);
            },
            deferred.then_some(scan::LaterSizes {
                resolve: &mut sizes,
                file_bytes,
            }),
        );
        // A replay not run (no block live) lets its share of the spool go.
        drop(detached);
        let scanned = sys::now_ns();
        ctl.progress.fetch_add(1, Ordering::Relaxed);
        self.scan_stats(&stats, replay_us, deferred);
        // No block live: no roots were planned, and the file is written now.
        let (later, files_us) = match (done, files.take(), writer.take()) {
            (Some(d), ..) => d,
            (None, Some(f), Some(w)) => f(w, Vec::new()),
            _ => unreachable!("the file is written once"),
        };
        let ok = later.and_then(|l| l.write(classes.kinds())).is_ok();
        for &slot in &slots {
            fds::release(slot);
        }
        if ok {
            if let Ok(mut w) = ctl.written.lock() {
                w.push(path.display().to_string());
            }
        } else {
            crate::sys::stderr_line(&format!("cannot finish {}", path.display()));
        }
        if std::env::var_os("TRACER_STACK_STATS").is_some() {
            let us = |a: u64, b: u64| b.saturating_sub(a) / 1000;
            sys::stderr_line(&format!(
                "exit: {} us in all: scan {} us, {} addresses named and files written in {} us {}, then {} us",
                us(drained, sys::now_ns()),
                // A detached replay ran inside the scan's time.
                stats.nanos / 1000 + if deferred { 0 } else { replay_us },
                naming,
                files_us,
                if alongside { "alongside the scan" } else { "after it" },
                us(scanned, sys::now_ns())
            ));
        }
    }

    /// Private, like TRACER_SCAN_STATS: what the hand-off of stacks cost.
    fn stack_stats(&self) {
        if std::env::var_os("TRACER_STACK_STATS").is_some() {
            sys::stderr_line(&format!(
                "stacks: {} messages, {} distinct",
                self.stack_messages,
                self.stacks.len()
            ));
            sys::stderr_line(&format!(
                "lane: {} messages, {} lanes; {} looks, {} for a message seen at the second load",
                self.lane_messages,
                lane::made(),
                self.looks,
                self.relooks
            ));
            sys::stderr_line(&format!(
                "channel: {} messages; held back {}, let through {}",
                self.channel_messages, self.held_back, self.forced
            ));
            sys::stderr_line(&match crate::clock::calibration() {
                Some((us, ppm)) => format!(
                    "clock: the counter's rate taken {us} us after the first point, within {ppm} ppm"
                ),
                None => "clock: the vDSO (the counter's rate not taken)".to_string(),
            });
            sys::stderr_line(&format!(
                "unwind rules: {} computed, a table of {} entries; {} stacks by libgcc's unwinder",
                crate::cfi::rules_computed(),
                crate::cfi::table_slots(),
                crate::unwind::by_libgcc()
            ));
            sys::stderr_line(&format!(
                "signal handlers inside hooks: {} events recorded, {} lost, {} hooks left by a jump",
                crate::side::recorded(),
                crate::side::lost(),
                crate::side::jumped_out()
            ));
        }
    }

    /// The objects loaded now, and the names of every stack address (as
    /// `TRACER_SYMBOLIZE` asks); returns how many addresses were asked.
    fn name_addresses(&mut self, ctl: &Control) -> usize {
        let (objects, mut addrs, mode) = self.what_to_name();
        let executable = self.executable.clone();
        address_symbols(
            mode,
            &executable,
            &objects,
            &mut addrs,
            Some(&ctl.progress),
            &mut |r| {
                self.emit(&r);
                !self.failed
            },
        );
        addrs.len()
    }

    /// What the exit names: the objects loaded now (reported if new), every
    /// stack address, and how (`TRACER_SYMBOLIZE`; not at all out of memory,
    /// where the debug information of every object would not fit: the
    /// addresses stay, with the objects to resolve them later).
    fn what_to_name(&mut self) -> (Vec<Object>, Vec<u64>, Symbolize) {
        let fresh = self.objects.rescan();
        self.emit_objects(fresh);
        let addrs: Vec<u64> = std::mem::take(&mut self.addresses).into_iter().collect();
        let mode = if crate::alloc::exhausted() {
            Symbolize::None
        } else {
            self.symbolize
        };
        (self.objects.objects(), addrs, mode)
    }

    /// `drained`: when the last message was taken (the exit's statistics).
    fn finish(&mut self, ctl: &Control, drained: u64) {
        self.stack_stats();
        let begun = sys::now_ns();
        let addresses = self.name_addresses(ctl);
        let symbolized = sys::now_ns();
        let outputs = std::mem::take(&mut self.outputs);
        for out in outputs {
            let ok = !self.failed && out.writer.finish().is_ok();
            for &slot in &out.slots {
                fds::release(slot);
            }
            if ok {
                if let Ok(mut w) = ctl.written.lock() {
                    w.push(out.path.display().to_string());
                }
            } else if !self.failed {
                crate::sys::stderr_line(&format!("cannot finish {}", out.path.display()));
            }
        }
        if std::env::var_os("TRACER_STACK_STATS").is_some() {
            let us = |a: u64, b: u64| b.saturating_sub(a) / 1000;
            sys::stderr_line(&format!(
                "exit: scan {} us, symbols of {} addresses {} us, files {} us",
                us(drained, begun),
                addresses,
                us(begun, symbolized),
                us(symbolized, sys::now_ns())
            ));
        }
    }
}

/// Gives `each` an `AddressSymbol` for every address of `addrs` that
/// `objects` can name, per `TRACER_SYMBOLIZE` (the files are read, not our
/// memory), until it returns false; `progress` counts the addresses asked.
fn address_symbols(
    mode: Symbolize,
    executable: &str,
    objects: &[Object],
    addrs: &mut [u64],
    progress: Option<&AtomicU64>,
    each: &mut dyn FnMut(Record) -> bool,
) {
    let separate = match mode {
        Symbolize::None => return,
        Symbolize::Exit => false,
        Symbolize::Full => true,
    };
    addrs.sort_unstable();
    // Only these addresses are asked: names of other functions are not
    // read (memory added to the program's at its end).
    let mut names =
        symbolizer::Symbolizer::new(objects, executable, symbolizer::Options::default())
            .only(addrs);
    if !separate {
        names = names.without_separate_debug();
    }
    // Our own frames (wrappers glibc allocates inside) by their symbols:
    // not the library's DWARF (see `Symbolizer::symbol_table_only`).
    let (own, _) = sys::own_text_range();
    if let Some(o) = (objects.iter()).find(|o| own.wrapping_sub(o.load_address) < o.size) {
        names = names.symbol_table_only(&o.path);
    }
    for &a in addrs.iter() {
        if let Some(p) = progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
        // Every frame is a return address: the call's line is wanted.
        let r = names.symbolize_once(a, true);
        // The innermost (possibly inlined) function names the frame.
        let Some(f) = r.frames.iter().find(|f| f.function.is_some()) else {
            continue;
        };
        let symbol = Symbol {
            function: f.function.clone().unwrap_or_default(),
            file: f.file.clone().unwrap_or_default(),
            line: f.line.unwrap_or(0),
        };
        if !each(Record::AddressSymbol { address: a, symbol }) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::Syscall;
    use std::sync::{Arc, Mutex};

    /// A format writer that keeps what it is given.
    struct Collect(Arc<Mutex<Vec<Record>>>);

    impl TraceWriter for Collect {
        fn write(&mut self, record: &Record) -> std::io::Result<()> {
            self.0.lock().unwrap().push(record.clone());
            Ok(())
        }
        fn finish(self: Box<Self>) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn state(depth: usize) -> (State, Arc<Mutex<Vec<Record>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = Output {
            path: PathBuf::from("t"),
            slots: vec![],
            writer: Box::new(Collect(seen.clone())),
            syscalls: false,
        };
        let st = State::new(vec![out], depth, Symbolize::Exit, String::new());
        (st, seen)
    }

    /// The events only, as (kind, thread, address) triples.
    fn events(seen: &Arc<Mutex<Vec<Record>>>) -> Vec<(char, u32, u64)> {
        seen.lock()
            .unwrap()
            .iter()
            .filter_map(|r| match r {
                Record::Event(Event::Alloc(a)) => Some(('A', a.thread, a.address)),
                Record::Event(Event::Free(f)) => Some(('F', f.thread, f.address)),
                _ => None,
            })
            .collect()
    }

    /// An 8-byte allocation at time 10.
    fn alloc(tid: u32, addr: u64, realloc: bool) -> Msg {
        let mut m = alloc_at(tid, addr, 10);
        if let Msg::Alloc { from_realloc, .. } = &mut m {
            *from_realloc = realloc;
        }
        m
    }

    /// An 8-byte allocation (not a realloc's) at `time_ns`.
    fn alloc_at(tid: u32, addr: u64, time_ns: u64) -> Msg {
        Msg::Alloc {
            time_ns,
            tid,
            addr,
            size: 8,
            key: NO_STACK,
            from_realloc: false,
        }
    }

    /// A writer state for the lane tests (the live table in its starts-only
    /// form) and an empty channel.
    fn lanes_state() -> (
        State,
        Arc<Mutex<Vec<Record>>>,
        crossbeam_channel::Receiver<Msg>,
    ) {
        let (mut st, seen) = state(8);
        st.live.use_starts_only();
        let (_tx, rx) = crossbeam_channel::bounded::<Msg>(4);
        (st, seen, rx)
    }

    fn free_msg(tid: u32, addr: u64, time_ns: u64) -> Msg {
        Msg::Free { time_ns, tid, addr }
    }

    /// Several threads' lanes are merged in time order, but a message that
    /// depends on another thread's waits for it, whatever its time: a free
    /// of a block another thread allocated, an allocation at an address
    /// another thread frees. A free of a block no lane allocates goes
    /// through at the next fresh look.
    #[test]
    fn lanes_are_merged_and_a_message_waits_for_the_other_threads_one() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        let a = lane::test_lane(1);
        let b = lane::test_lane(2);

        // Thread 2 frees what thread 1 allocated, its clock behind (5 < 10).
        lane::test_push(a, alloc_at(1, 0x100, 10));
        lane::test_push(b, free_msg(2, 0x100, 5));
        // Thread 1 frees 0x200 much later than thread 2 allocates it anew
        // (`LATER`), and times otherwise interleave.
        const LATER: u64 = 20_000;
        lane::test_push(a, alloc_at(1, 0x200, 20));
        lane::test_push(b, alloc_at(2, 0x300, 30));
        lane::test_push(b, alloc_at(2, 0x200, 40));
        lane::test_push(a, alloc_at(1, 0x400, 50 + LATER));
        lane::test_push(a, free_msg(1, 0x200, 60 + 2 * LATER));
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 7);
        // 0x200 (at 20), an allocation, does not go ahead of thread 2's
        // waiting free (at 5).
        assert_eq!(
            events(&seen),
            vec![
                ('A', 1, 0x100),
                ('F', 2, 0x100),
                ('A', 1, 0x200),
                ('A', 2, 0x300),
                ('A', 1, 0x400),
                ('F', 1, 0x200),
                ('A', 2, 0x200),
            ]
        );
        assert!(st.held_back >= 2);
        assert_eq!(st.forced, 0);

        // A free of a block never seen allocated: held, then let through.
        seen.lock().unwrap().clear();
        lane::test_push(b, free_msg(2, 0x900, 70 + 2 * LATER));
        lane::test_push(a, free_msg(1, 0x300 + 0x1000, 80 + 2 * LATER));
        lane::test_push(a, free_msg(1, 0x400, 90 + 2 * LATER));
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 3);
        let got = events(&seen);
        assert_eq!(got.len(), 3);
        assert!(got.contains(&('F', 1, 0x400)));
        assert_eq!(st.forced, 2, "the two unknown frees went through");
        assert!(st.live.is_live(0x300) && !st.live.is_live(0x400));
    }

    /// A lane running ahead within the slack stops at an allocation: the
    /// other lane may still hold an earlier allocation and free of the same
    /// address. Taken ahead, thread 2's allocation of 0x700 (at 12) made
    /// thread 1's (at 10) wait for a free that comes after it in its own
    /// lane: no other lane held one, so it was let through, an address
    /// allocated twice (with hundreds of threads, every lane ended up
    /// waiting so: `examples/many_threads.c`).
    #[test]
    fn an_allocation_does_not_run_ahead_of_another_lanes_turn() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        let a = lane::test_lane(1);
        let b = lane::test_lane(2);
        lane::test_push(a, alloc_at(1, 0x700, 10));
        lane::test_push(a, free_msg(1, 0x700, 11));
        lane::test_push(b, alloc_at(2, 0x600, 9));
        lane::test_push(b, alloc_at(2, 0x700, 12));
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 4);
        assert_eq!(
            events(&seen),
            vec![
                ('A', 2, 0x600),
                ('A', 1, 0x700),
                ('F', 1, 0x700),
                ('A', 2, 0x700),
            ]
        );
        assert_eq!((st.held_back, st.forced), (0, 0));
        assert!(st.live.is_live(0x700) && st.live.is_live(0x600));
    }

    /// A free does not run ahead of another lane's earlier messages either:
    /// thread 1 frees the block at 0x800 and is given the address again,
    /// then hands the new block to thread 2, which frees it. Taken ahead
    /// (a lane used to run 20 us past the others' next message), thread
    /// 2's free went to the previous block, and thread 1's free then
    /// waited for an allocation queued behind it: forced through, 0x800
    /// ended live with a free of it seen twice (`node` with worker
    /// threads, a run in ten).
    #[test]
    fn a_free_does_not_run_ahead_of_another_lanes_free_and_allocation_of_its_address() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        st.handle(alloc_at(1, 0x800, 1));
        st.handle(alloc_at(2, 0x900, 2));
        seen.lock().unwrap().clear();
        let a = lane::test_lane(1);
        let b = lane::test_lane(2);
        lane::test_push(b, free_msg(2, 0x900, 90));
        lane::test_push(a, free_msg(1, 0x800, 100));
        lane::test_push(a, alloc_at(1, 0x800, 110));
        lane::test_push(b, free_msg(2, 0x800, 115));
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 4);
        assert_eq!(
            events(&seen),
            vec![
                ('F', 2, 0x900),
                ('F', 1, 0x800),
                ('A', 1, 0x800),
                ('F', 2, 0x800),
            ]
        );
        assert_eq!((st.held_back, st.forced), (0, 0));
        assert!(!st.live.is_live(0x800));
    }

    /// The same hand-over, published while the writer looks at the lanes
    /// (`publish`, called by the look's test hook): thread 1 frees 0x800,
    /// is given it again, and thread `freer` frees the new block. Thread
    /// 1's messages must come first all the same.
    fn hand_over_during_a_look(
        freer: u32,
        publish: impl FnMut(Option<&'static lane::Lane>) + Send + 'static,
        rx: &crossbeam_channel::Receiver<Msg>,
        mut st: State,
        seen: &Arc<Mutex<Vec<Record>>>,
    ) {
        st.live.use_starts_only();
        st.handle(alloc_at(1, 0x800, 1));
        seen.lock().unwrap().clear();
        let hook = lane::test_hook::set(publish);
        let n = st.drain_in_order(rx, usize::MAX);
        drop(hook);
        assert_eq!(n, 3);
        assert_eq!(
            events(seen),
            vec![('F', 1, 0x800), ('A', 1, 0x800), ('F', freer, 0x800)]
        );
        assert_eq!(st.forced, 0);
        assert!(!st.live.is_live(0x800));
    }

    /// Thread 1's lane was empty when the writer loaded it, and thread 2's
    /// free, published after thread 1's messages, was there when it loaded
    /// thread 2's.
    #[test]
    fn a_message_published_as_the_lanes_are_looked_at_waits_for_what_it_follows() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (st, seen, rx) = lanes_state();
        // The newest lane is loaded first.
        let b = lane::test_lane(2);
        let a = lane::test_lane(1);
        let mut armed = true;
        let publish = move |l: Option<&'static lane::Lane>| {
            if armed && l.is_some_and(|l| std::ptr::eq(l, a)) {
                armed = false;
                lane::test_push(a, free_msg(1, 0x800, 100));
                lane::test_push(a, alloc_at(1, 0x800, 110));
                lane::test_push(b, free_msg(2, 0x800, 115));
            }
        };
        hand_over_during_a_look(2, publish, &rx, st, &seen);
    }

    /// Likewise for a message of the channel (a thread without a lane),
    /// sent just after the writer looked at the lanes: it waits for a
    /// look that began after it came.
    #[test]
    fn a_channel_message_waits_for_a_look_after_it_came() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (st, seen) = state(8);
        let (tx, rx) = crossbeam_channel::bounded::<Msg>(4);
        let a = lane::test_lane(1);
        let mut armed = true;
        let publish = move |l: Option<&'static lane::Lane>| {
            if armed && l.is_none() {
                armed = false;
                lane::test_push(a, free_msg(1, 0x800, 100));
                lane::test_push(a, alloc_at(1, 0x800, 110));
                tx.send(free_msg(3, 0x800, 115)).unwrap();
            }
        };
        hand_over_during_a_look(3, publish, &rx, st, &seen);
    }

    /// Hundreds of lanes waiting on one another: a waiting lane is taken
    /// again as soon as a message at its address was handled. Lane i
    /// allocates 0x10000 + 16 i (at time 2 i + 1), which is live until lane
    /// i + 1 frees it (its second message); the last lane's address is free.
    /// So every lane but the last waits at first, the lanes go from the
    /// last down, each free ending exactly one wait, and nothing is let
    /// through without its counterpart.
    #[test]
    fn a_chain_of_waits_across_many_lanes_ends_in_time_order() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        const N: u64 = 300;
        for i in 0..N - 1 {
            st.handle(alloc_at(9_999, 0x10000 + 16 * i, 0));
        }
        seen.lock().unwrap().clear();
        let lanes: Vec<_> = (0..N).map(|i| lane::test_lane(100 + i as u32)).collect();
        for i in 0..N {
            let l = lanes[i as usize];
            // Lane i: its allocation, then the free that lets lane i - 1 go.
            lane::test_push(l, alloc_at(100 + i as u32, 0x10000 + 16 * i, 2 * i + 1));
            if i > 0 {
                lane::test_push(
                    l,
                    free_msg(100 + i as u32, 0x10000 + 16 * (i - 1), 2 * i + 2),
                );
            }
        }
        let mut expected = Vec::new();
        for i in (0..N).rev() {
            expected.push(('A', 100 + i as u32, 0x10000 + 16 * i));
            if i > 0 {
                expected.push(('F', 100 + i as u32, 0x10000 + 16 * (i - 1)));
            }
        }
        assert_eq!(st.drain_in_order(&rx, usize::MAX) as u64, 2 * N - 1);
        assert_eq!(events(&seen), expected);
        assert_eq!(st.forced, 0);
        // Each lane waited once and was taken again when its address was
        // freed: a waiting lane tried again after every message, or after
        // every fresh look, would count ~N^2/2 waits here.
        assert_eq!(st.held_back, N - 1);
    }

    /// After a fresh look, a waiting message goes through when no other
    /// lane holds its counterpart, and only then: the allocation of 0x5000
    /// waits while lane b holds a free of 0x5000 (behind another message),
    /// and goes at once when b holds none.
    #[test]
    fn a_waiting_message_goes_only_when_no_lane_holds_its_counterpart() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        st.handle(alloc_at(7, 0x5000, 1));
        let a = lane::test_lane(8);
        let b = lane::test_lane(9);
        let mut views = Vec::new();

        lane::test_push(a, alloc_at(8, 0x5000, 2));
        lane::test_push(b, alloc_at(9, 0x9000, 3));
        lane::test_push(b, free_msg(9, 0x5000, 4));
        lane::look(&mut views);
        assert_eq!(st.force_orphans(&mut views), 0, "b holds the free");
        for v in &views {
            v.release();
        }
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 3);
        assert_eq!(st.forced, 0);
        assert_eq!(
            events(&seen),
            vec![
                ('A', 7, 0x5000),
                ('A', 9, 0x9000),
                ('F', 9, 0x5000),
                ('A', 8, 0x5000)
            ]
        );

        seen.lock().unwrap().clear();
        lane::test_push(a, alloc_at(8, 0x5000, 5));
        lane::test_push(b, alloc_at(9, 0x9100, 6));
        lane::look(&mut views);
        assert_eq!(st.force_orphans(&mut views), 1, "no lane holds a free");
        for v in &views {
            v.release();
        }
        assert_eq!(events(&seen), vec![('A', 8, 0x5000)]);
        assert_eq!(st.drain_in_order(&rx, usize::MAX), 1);
        assert_eq!(st.forced, 1);
    }

    /// An allocation at an address whose free the hooks never saw goes
    /// through at the first look that finds no such free anywhere, even
    /// while another thread keeps its own lane busy (else its thread would
    /// stall, its lane full, for as long as the others allocate).
    #[test]
    fn a_message_waiting_for_an_event_never_seen_does_not_wait_for_idle_lanes() {
        let _turn = lane::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, seen, rx) = lanes_state();
        // 0x5000 is live: its free was never seen.
        st.handle(alloc_at(7, 0x5000, 1));
        let a = lane::test_lane(8);
        let b = lane::test_lane(9);
        lane::test_push(a, alloc_at(8, 0x5000, 2));
        const PAIRS: u64 = 100_000;
        let pair = move |i: u64| {
            let addr = 0x10_0000 + (i % 64) * 0x100;
            lane::test_push(b, alloc_at(9, addr, 3 + 2 * i));
            lane::test_push(b, free_msg(9, addr, 4 + 2 * i));
        };
        // Lane b full before the writer first looks, and kept busy after.
        let ahead = lane::capacity(b) / 2;
        (0..ahead).for_each(pair);
        let producer = std::thread::spawn(move || (ahead..PAIRS).for_each(pair));
        let mut n = 0;
        while n < 1 + 2 * PAIRS as usize {
            n += st.drain_in_order(&rx, usize::MAX);
        }
        producer.join().unwrap();
        let got = events(&seen);
        let at = got
            .iter()
            .position(|&e| e == ('A', 8, 0x5000))
            .expect("the allocation is written");
        // Before it at most what lane b held at the first look and at the
        // next (a lane holds 1,024), and the first allocation of 0x5000.
        assert!(
            at as u64 <= 1 + 2 * lane::capacity(b),
            "written after {at} events"
        );
        assert_eq!(got.len(), 2 + 2 * PAIRS as usize);
        assert_eq!(st.forced, 1);
    }

    #[test]
    fn realloc_free_precedes_another_threads_reuse_of_the_address() {
        let (mut st, seen) = state(8);
        st.handle(Msg::ReallocFree {
            time_ns: 5,
            tid: 1,
            addr: 0xa0,
        });
        st.handle(alloc(2, 0xa0, false)); // thread 2 got the old block
        st.handle(alloc(1, 0xb0, true)); // thread 1's realloc returns
        assert_eq!(
            events(&seen),
            vec![('F', 1, 0xa0), ('A', 2, 0xa0), ('A', 1, 0xb0)]
        );
    }

    #[test]
    fn a_realloc_inside_a_realloc_of_the_same_thread_pairs_innermost_first() {
        // A signal handler's realloc ran between the halves of the realloc
        // it interrupted (`side`): both old blocks are freed.
        let (mut st, seen) = state(8);
        let free = |time_ns, addr| Msg::ReallocFree {
            time_ns,
            tid: 1,
            addr,
        };
        st.handle(free(5, 0xa0));
        st.handle(free(6, 0xc0));
        st.handle(alloc(1, 0xd0, true));
        st.handle(alloc(1, 0xe0, true));
        assert_eq!(
            events(&seen),
            vec![
                ('F', 1, 0xc0),
                ('A', 1, 0xd0),
                ('F', 1, 0xa0),
                ('A', 1, 0xe0)
            ]
        );
        assert!(st.pending.is_empty());
        // The inner one failed: the outer one's old block alone is freed.
        st.handle(free(7, 0xd0));
        st.handle(free(8, 0xe0));
        st.handle(Msg::ReallocFailed { tid: 1 });
        st.handle(alloc(1, 0xf0, true));
        assert_eq!(events(&seen)[4..], [('F', 1, 0xd0), ('A', 1, 0xf0)]);
        assert!(st.pending.is_empty());
    }

    #[test]
    fn failed_realloc_records_nothing_and_in_place_is_free_then_alloc() {
        let (mut st, seen) = state(8);
        st.handle(Msg::ReallocFree {
            time_ns: 5,
            tid: 1,
            addr: 0xa0,
        });
        st.handle(Msg::ReallocFailed { tid: 1 });
        assert_eq!(events(&seen), vec![]);
        st.handle(Msg::ReallocFree {
            time_ns: 6,
            tid: 1,
            addr: 0xa0,
        });
        st.handle(alloc(1, 0xa0, true));
        assert_eq!(events(&seen), vec![('F', 1, 0xa0), ('A', 1, 0xa0)]);
        assert!(st.pending.is_empty());
    }

    #[test]
    fn a_realloc_is_a_free_and_an_alloc_with_one_time_and_thread() {
        let (mut st, seen) = state(8);
        st.handle(alloc(7, 0xa0, false)); // the old block, at time 10
        st.handle(Msg::ReallocFree {
            time_ns: 12,
            tid: 7,
            addr: 0xa0,
        });
        st.handle(Msg::Alloc {
            time_ns: 19,
            tid: 7,
            addr: 0xb0,
            size: 16,
            key: NO_STACK,
            from_realloc: true,
        });
        let times: Vec<(char, u64, u32)> = seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|r| match r {
                Record::Event(Event::Alloc(a)) => Some(('A', a.time_ns, a.thread)),
                Record::Event(Event::Free(f)) => Some(('F', f.time_ns, f.thread)),
                _ => None,
            })
            .collect();
        assert_eq!(times, vec![('A', 10, 7), ('F', 19, 7), ('A', 19, 7)]);
        // The aggregate MALT and callgrind use counts it as one realloc.
        let mut agg = format_writers::aggregate::Aggregate::new();
        for r in seen.lock().unwrap().iter() {
            agg.add(r);
        }
        assert_eq!(agg.reallocs, 1);
    }

    #[test]
    fn syscalls_reach_the_syscall_outputs_only() {
        let (mut st, alloc_seen) = state(8);
        let tlv_seen = Arc::new(Mutex::new(Vec::new()));
        st.outputs.push(Output {
            path: PathBuf::from("s"),
            slots: vec![],
            writer: Box::new(Collect(tlv_seen.clone())),
            syscalls: true,
        });
        let call = Syscall {
            number: 1,
            result: 3,
            errno: None,
            thread: Some(4),
            time_ns: Some(3),
            duration_ns: Some(2),
            args: vec![],
        };
        st.handle(alloc(4, 0xa0, false));
        st.emit_syscall(&SyscallView {
            number: call.number,
            result: call.result,
            errno: call.errno,
            thread: call.thread,
            time_ns: call.time_ns,
            duration_ns: call.duration_ns,
            args: &[],
        });
        let is_call = |r: &Record| matches!(r, Record::Event(Event::Syscall(_)));
        assert!(!alloc_seen.lock().unwrap().iter().any(is_call));
        let tlv = tlv_seen.lock().unwrap();
        // Its time (3) stays as taken although an event at 10 came first.
        assert_eq!(
            tlv.iter().filter(|r| is_call(r)).collect::<Vec<_>>(),
            vec![&Record::Event(Event::Syscall(call))]
        );
        assert!(tlv
            .iter()
            .any(|r| matches!(r, Record::Event(Event::Alloc(_)))));
    }

    #[test]
    fn stacks_are_emitted_once_trimmed_to_depth_and_times_never_go_back() {
        let (mut st, seen) = state(2);
        st.handle(Msg::Stack {
            key: 77,
            frames: vec![0x1000, 0x2000, 0x3000].into(),
            tid: 0,
        });
        st.handle(Msg::Stack {
            key: 77,
            frames: vec![0x1000, 0x2000, 0x3000].into(),
            tid: 0,
        });
        st.handle(Msg::Alloc {
            time_ns: 50,
            tid: 3,
            addr: 0xc0,
            size: 24,
            key: 77,
            from_realloc: false,
        });
        st.handle(Msg::Free {
            time_ns: 40,
            tid: 4,
            addr: 0xc0,
        });
        let records = seen.lock().unwrap().clone();
        let stacks: Vec<&Stack> = records
            .iter()
            .filter_map(|r| {
                if let Record::Stack(s) = r {
                    Some(s)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(stacks.len(), 1);
        assert_eq!(stacks[0].id, 0);
        assert_eq!(
            stacks[0]
                .frames
                .iter()
                .map(|f| f.address)
                .collect::<Vec<_>>(),
            vec![0x1000, 0x2000]
        );
        let times: Vec<u64> = records
            .iter()
            .filter_map(|r| {
                if let Record::Event(e) = r {
                    e.time_ns()
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(times, vec![50, 50]);
        let threads = records
            .iter()
            .filter(|r| matches!(r, Record::Thread(_)))
            .count();
        assert_eq!(threads, 2);
        match records
            .iter()
            .find(|r| matches!(r, Record::Event(Event::Alloc(_))))
        {
            Some(Record::Event(Event::Alloc(a))) => assert_eq!((a.stack, a.size), (0, 24)),
            _ => unreachable!("an allocation was written"),
        }
    }
}
