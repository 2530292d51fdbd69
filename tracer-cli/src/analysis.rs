//! One pass over a trace that computes everything `report`, `leaks` and
//! `validate` print.
//!
//! The pass is the hot loop of the command (target: tens of millions of events
//! a second), so per event it does no allocation and at most two hash-table
//! operations:
//!
//! - the **live-block table** maps an address to its size, allocation stack and
//!   thread. It is a `hashbrown` table (std's) with the Fx hash from
//!   `rustc-hash`: addresses are trusted integers, so a DoS-resistant hash
//!   (SipHash) only costs time.
//! - **per-stack aggregates** live in a `Vec` indexed by stack id when ids are
//!   dense (every format we write numbers stacks 0, 1, 2, …), with a hash map
//!   fallback for ids far beyond the vector (see [`SiteTable`]).
//! - the **last allocation of each thread** (for temporary allocations) sits in
//!   a small vector reached through a one-entry cache, since consecutive events
//!   usually come from the same thread.
//!
//! Counting rules (the interface's, made precise):
//! - `allocations`: every `Alloc` event (each is a successful call that
//!   returned a block; a realloc is recorded as `Free(old)` + `Alloc(new)`).
//! - `frees`: every `Free` event of a non-null address, including frees of
//!   blocks allocated before tracing started (they are blocks released). Those
//!   do not change the live figures and are counted apart in
//!   [`HeapStats::frees_unknown`].
//! - address 0 means *unknown address*: no allocator returns NULL as a new
//!   block, and recorders that could not see addresses (the original Memlyze
//!   recorder) write 0. An `Alloc` at 0 is a block of its own that no free can
//!   match (it stays live to the end); a `Free` of 0 counts in `frees` and in
//!   `frees_unknown` (some block was released, we cannot tell which). Both are
//!   counted in [`HeapStats::allocs_without_address`] /
//!   [`HeapStats::frees_without_address`].
//! - an `Alloc` at an address that is already live (a lost free) replaces the
//!   old block: the old one stops counting as live, and
//!   [`HeapStats::reused_live_addresses`] says how often it happened.
//! - **temporary**: heaptrack's meaning, per thread: a block freed by the
//!   thread that allocated it, with no other allocation by that thread in
//!   between. A realloc of the block just allocated therefore makes it
//!   temporary, as in heaptrack. A free whose thread is 0 (the format does
//!   not record the freeing thread, as in mlyze) is taken to come from the
//!   allocating thread.
//! - **peak**: the largest number of bytes live at once, and the time of the
//!   event that first reached it.
//!
//! Byte sums wrap or saturate rather than overflow: a corrupt file naming
//! blocks of 2^64-1 bytes gives silly figures, never a crash.

use format_writers::{
    Event, Frame, LeakKind, Object, Process, Record, StackId, Symbol, Syscall, Thread, ThreadId,
};
use rustc_hash::FxHashMap;

/// A block live at some point: what the leak report needs about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBlock {
    pub size: u64,
    pub stack: StackId,
    pub thread: ThreadId,
    /// The class the last leak scan gave the block (`None`: not classified).
    pub class: Option<LeakKind>,
    /// Allocated after a leak scan (by exit-time destructors, typically).
    pub after_scan: bool,
}

/// Aggregates of one allocation stack ("site").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Site {
    pub allocations: u64,
    pub bytes: u64,
    pub temporary: u64,
    /// A `Stack` record defined this id.
    pub defined: bool,
}

impl Site {
    fn is_present(&self) -> bool {
        self.defined || self.allocations > 0
    }
}

/// Per-stack aggregates, dense where ids are dense.
///
/// Ids below the vector's length index it directly. An id beyond it grows the
/// vector when that keeps the vector at most about twice as large as needed
/// (`id < 2 * len + 4096`); a wild id (a hash, a pointer) goes to the sparse
/// map instead, so a file cannot make us allocate by naming stack 2^60.
#[derive(Debug, Default)]
pub struct SiteTable {
    dense: Vec<Site>,
    sparse: FxHashMap<StackId, Site>,
}

const DENSE_SLACK: u64 = 4096;

impl SiteTable {
    #[inline]
    pub fn get_mut(&mut self, id: StackId) -> &mut Site {
        if id < self.dense.len() as u64 {
            return &mut self.dense[id as usize];
        }
        self.get_mut_slow(id)
    }

    #[cold]
    #[inline(never)]
    fn get_mut_slow(&mut self, id: StackId) -> &mut Site {
        let len = self.dense.len() as u64;
        if id < len.saturating_mul(2).saturating_add(DENSE_SLACK) {
            let new_len = (id + 1)
                .max(len.saturating_mul(2))
                .min(id + 1 + DENSE_SLACK);
            self.dense.resize(new_len as usize, Site::default());
            if !self.sparse.is_empty() {
                let moved: Vec<StackId> = self
                    .sparse
                    .keys()
                    .copied()
                    .filter(|&k| k < new_len)
                    .collect();
                for k in moved {
                    if let Some(site) = self.sparse.remove(&k) {
                        self.dense[k as usize] = site;
                    }
                }
            }
            return &mut self.dense[id as usize];
        }
        self.sparse.entry(id).or_default()
    }

    pub fn get(&self, id: StackId) -> Option<&Site> {
        if id < self.dense.len() as u64 {
            Some(&self.dense[id as usize]).filter(|s| s.is_present())
        } else {
            self.sparse.get(&id)
        }
    }

    /// Every site seen (defined or allocated from), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (StackId, &Site)> {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_present())
            .map(|(i, s)| (i as StackId, s))
            .chain(self.sparse.iter().map(|(k, s)| (*k, s)))
    }
}

/// Figures of the allocation part of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub peak_blocks: u64,
    /// Time of the event that first reached the peak (0 when no allocation).
    pub peak_time_ns: u64,
    pub temporary: u64,
    /// Frees of addresses not live in the trace (allocated before tracing,
    /// or double frees).
    pub frees_unknown: u64,
    /// Frees of address 0 (address unknown; also in `frees_unknown`).
    pub frees_without_address: u64,
    /// Allocations at address 0 (address unknown).
    pub allocs_without_address: u64,
    /// Allocations at an address that was still live.
    pub reused_live_addresses: u64,
    /// Allocations naming a stack id no `Stack` record defined before them.
    pub undefined_stack_allocs: u64,
}

/// Figures of one system call number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyscallStats {
    pub calls: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub slowest_ns: u64,
}

/// Whether a captured call failed: an `errno` was recorded, or the raw result
/// is in the kernel's `-4095..=-1` error range.
pub fn syscall_failed(s: &Syscall) -> Option<i32> {
    match s.errno {
        Some(e) if e != 0 => Some(e),
        _ if (-4095..=-1).contains(&s.result) && s.errno.is_none() => Some((-s.result) as i32),
        _ => None,
    }
}

/// Marks a thread slot that has no pending allocation.
const NO_ADDRESS: u64 = u64::MAX;

/// The last allocation of each thread, for temporary allocations.
#[derive(Debug, Default)]
struct LastAlloc {
    tids: Vec<ThreadId>,
    addresses: Vec<u64>,
    index: FxHashMap<ThreadId, usize>,
    cached: usize,
}

impl LastAlloc {
    #[inline]
    fn slot(&mut self, tid: ThreadId) -> &mut u64 {
        if self.tids.get(self.cached) == Some(&tid) {
            return &mut self.addresses[self.cached];
        }
        if self.tids.len() <= 8 {
            if let Some(i) = self.tids.iter().position(|&t| t == tid) {
                self.cached = i;
                return &mut self.addresses[i];
            }
        }
        self.slot_slow(tid)
    }

    #[cold]
    fn slot_slow(&mut self, tid: ThreadId) -> &mut u64 {
        // A handful of threads: a linear scan beats hashing.
        let found = if self.tids.len() <= 16 {
            self.tids.iter().position(|&t| t == tid)
        } else {
            self.index.get(&tid).copied()
        };
        let i = match found {
            Some(i) => i,
            None => {
                self.tids.push(tid);
                self.addresses.push(NO_ADDRESS);
                self.index.insert(tid, self.tids.len() - 1);
                self.tids.len() - 1
            }
        };
        self.cached = i;
        &mut self.addresses[i]
    }
}

/// The stacks of a trace, compact: each distinct frame once, each stack a
/// run of 4-byte frame indices. A trace with a million distinct stacks of
/// 25 frames keeps ~100 MB here instead of gigabytes of `Frame`s (they
/// share most of their frames).
#[derive(Debug, Default)]
pub struct StackStore {
    frames: Vec<Frame>,
    index: FxHashMap<Frame, u32>,
    refs: Vec<u32>,
    /// Stack id → (start in `refs`, frame count).
    stacks: FxHashMap<StackId, (usize, u32)>,
}

impl StackStore {
    /// Defines (or redefines) a stack.
    pub fn insert(&mut self, id: StackId, frames: Vec<Frame>) {
        let start = self.refs.len();
        let len = frames.len() as u32;
        for f in frames {
            let next = self.frames.len() as u32;
            let i = match self.index.get(&f) {
                Some(&i) => i,
                None => {
                    self.index.insert(f.clone(), next);
                    self.frames.push(f);
                    next
                }
            };
            self.refs.push(i);
        }
        self.stacks.insert(id, (start, len));
    }

    /// The frames of a stack, innermost first.
    pub fn get(&self, id: &StackId) -> Option<Vec<Frame>> {
        let &(start, len) = self.stacks.get(id)?;
        Some(
            self.refs[start..start + len as usize]
                .iter()
                .map(|&i| self.frames[i as usize].clone())
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }
}

/// The first event that named an undefined stack: (record number, stack id).
pub type UndefinedStack = (u64, StackId);

/// Everything one pass over a trace learns.
#[derive(Debug, Default)]
pub struct Analysis {
    pub process: Option<Process>,
    pub objects: Vec<Object>,
    pub stacks: StackStore,
    pub symbols: FxHashMap<u64, Symbol>,
    pub threads: Vec<Thread>,
    pub info: Vec<(String, String)>,
    pub heap: HeapStats,
    pub sites: SiteTable,
    pub live: FxHashMap<u64, LiveBlock>,
    /// Indexed by syscall number.
    pub syscalls: Vec<SyscallStats>,
    pub syscall_count: u64,
    pub markers: u64,
    pub gcs: u64,
    pub records: u64,
    pub first_time_ns: Option<u64>,
    pub last_time_ns: Option<u64>,
    pub first_undefined_stack: Option<UndefinedStack>,
    /// Time of the last leak scan (`Record::LeakScan`), when the trace has one.
    pub leak_scan_ns: Option<u64>,
    /// `BlockClass` records naming an address not live at that point.
    pub classes_without_block: u64,
    last_alloc: LastAlloc,
}

impl Analysis {
    pub fn new() -> Analysis {
        Analysis::default()
    }

    /// Whether the traced image ended by `exec` (the library's info pair
    /// `ended`=`exec`): its blocks went with the old image, and no leak
    /// check applies to it.
    pub fn replaced_by_exec(&self) -> bool {
        self.info.iter().any(|(k, v)| k == "ended" && v == "exec")
    }

    /// Whether the library found the program's own allocator (an info pair
    /// `allocator` whose value starts with `program`): only its libraries'
    /// calls are in the trace.
    pub fn allocator_is_the_programs(&self) -> bool {
        self.info
            .iter()
            .any(|(k, v)| k == "allocator" && v.starts_with("program"))
    }

    /// The signal that ended the traced process (the library's info pairs
    /// `ended`=`signal` and `signal`=its name), when one did: no exit ran,
    /// so no leak check applies to it.
    pub fn ended_by_signal(&self) -> Option<&str> {
        if !self.info.iter().any(|(k, v)| k == "ended" && v == "signal") {
            return None;
        }
        let name = self.info.iter().rev().find(|(k, _)| k == "signal");
        Some(name.map_or("a signal", |(_, v)| v.as_str()))
    }

    /// Whether no leak check applies: an image replaced by `exec`, or a
    /// process a signal ended.
    pub fn not_leak_checked(&self) -> bool {
        self.replaced_by_exec() || self.ended_by_signal().is_some()
    }

    /// Feeds one record.
    #[inline]
    pub fn add(&mut self, record: Record) {
        match &record {
            Record::Event(event) => self.event(event),
            _ => self.add_meta(record),
        }
    }

    /// Feeds a record that is not an event.
    #[cold]
    pub fn add_meta(&mut self, record: Record) {
        self.records += 1;
        match record {
            Record::Process(p) => self.process = Some(p),
            Record::Object(o) => self.objects.push(o),
            Record::Stack(s) => {
                self.sites.get_mut(s.id).defined = true;
                self.stacks.insert(s.id, s.frames);
            }
            Record::Thread(t) => self.threads.push(t),
            Record::Info(kv) => self.info.extend(kv),
            Record::AddressSymbol { address, symbol } => {
                self.symbols.insert(address, symbol);
            }
            Record::LeakScan { time_ns } => {
                if self.leak_scan_ns.is_some() {
                    // A later scan supersedes an earlier one's classes.
                    for b in self.live.values_mut() {
                        b.class = None;
                    }
                }
                self.leak_scan_ns = Some(time_ns);
            }
            Record::BlockClass { address, kind } => match self.live.get_mut(&address) {
                Some(b) if address != 0 && self.leak_scan_ns.is_some() => b.class = Some(kind),
                _ => self.classes_without_block += 1,
            },
            Record::Event(e) => {
                self.records -= 1;
                self.event(&e)
            }
        }
    }

    #[inline]
    fn note_time(&mut self, t: u64) {
        if self.first_time_ns.is_none() {
            self.first_time_ns = Some(t);
        }
        match self.last_time_ns {
            Some(last) if last >= t => {}
            _ => self.last_time_ns = Some(t),
        }
    }

    /// Feeds one event.
    #[inline]
    pub fn event(&mut self, event: &Event) {
        self.records += 1;
        match event {
            Event::Alloc(a) => {
                self.note_time(a.time_ns);
                let heap = &mut self.heap;
                heap.allocations += 1;
                heap.bytes_allocated = heap.bytes_allocated.wrapping_add(a.size);
                let block = LiveBlock {
                    size: a.size,
                    stack: a.stack,
                    thread: a.thread,
                    class: None,
                    after_scan: self.leak_scan_ns.is_some(),
                };
                let key = if a.address != 0 {
                    a.address
                } else {
                    // A key of its own, from the top of the address space,
                    // which user-space blocks never occupy.
                    heap.allocs_without_address += 1;
                    u64::MAX - heap.allocs_without_address
                };
                if let Some(old) = self.live.insert(key, block) {
                    heap.reused_live_addresses += 1;
                    heap.live_bytes = heap.live_bytes.wrapping_sub(old.size);
                }
                heap.live_bytes = heap.live_bytes.wrapping_add(a.size);
                if heap.live_bytes > heap.peak_bytes {
                    heap.peak_bytes = heap.live_bytes;
                    heap.peak_blocks = self.live.len() as u64;
                    heap.peak_time_ns = a.time_ns;
                }
                let site = self.sites.get_mut(a.stack);
                site.allocations += 1;
                site.bytes = site.bytes.wrapping_add(a.size);
                if !site.defined {
                    heap.undefined_stack_allocs += 1;
                    if self.first_undefined_stack.is_none() {
                        self.first_undefined_stack = Some((self.records, a.stack));
                    }
                }
                *self.last_alloc.slot(a.thread) = key;
            }
            Event::Free(f) => {
                self.note_time(f.time_ns);
                self.heap.frees += 1;
                if f.address == 0 {
                    self.heap.frees_without_address += 1;
                    self.heap.frees_unknown += 1;
                    return;
                }
                match self.live.remove(&f.address) {
                    Some(block) => {
                        self.heap.live_bytes = self.heap.live_bytes.wrapping_sub(block.size);
                        // Thread 0 is no user thread: the format did not
                        // record who freed (mlyze's FREE has no thread), so
                        // the allocating thread is assumed.
                        if block.thread == f.thread || f.thread == 0 {
                            let slot = self.last_alloc.slot(block.thread);
                            if *slot == f.address {
                                *slot = NO_ADDRESS;
                                self.heap.temporary += 1;
                                self.sites.get_mut(block.stack).temporary += 1;
                            }
                        }
                    }
                    None => self.heap.frees_unknown += 1,
                }
            }
            Event::Syscall(s) => {
                if let Some(t) = s.time_ns {
                    self.note_time(t);
                    if let Some(d) = s.duration_ns {
                        self.note_time(t.saturating_add(d));
                    }
                }
                self.syscall_count += 1;
                let n = s.number as usize;
                if n >= self.syscalls.len() {
                    self.syscalls.resize(n + 1, SyscallStats::default());
                }
                let st = &mut self.syscalls[n];
                st.calls += 1;
                if syscall_failed(s).is_some() {
                    st.errors += 1;
                }
                let d = s.duration_ns.unwrap_or(0);
                st.total_ns = st.total_ns.saturating_add(d);
                st.slowest_ns = st.slowest_ns.max(d);
            }
            Event::Marker(m) => {
                self.note_time(m.time_ns);
                self.markers += 1;
            }
            Event::Gc(g) => {
                self.note_time(g.time_ns);
                self.gcs += 1;
            }
        }
    }

    /// Start of the trace: the process's start time when known, else the
    /// first event's.
    pub fn start_ns(&self) -> Option<u64> {
        match &self.process {
            Some(p) if p.start_time_ns != 0 => Some(p.start_time_ns),
            _ => self.first_time_ns,
        }
    }

    /// From the start to the last event, nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        match (self.start_ns(), self.last_time_ns) {
            (Some(s), Some(e)) => e.saturating_sub(s),
            _ => 0,
        }
    }

    /// The traced executable's path, empty when unknown.
    pub fn executable(&self) -> &str {
        self.process.as_ref().map_or("", |p| p.executable.as_str())
    }

    /// Bytes and blocks counted as leaked: the definite and indirect blocks of
    /// the reachability scan when the trace holds one, otherwise every block
    /// live now; none for an image replaced by `exec` or a process a signal
    /// ended (no leak check applies there, as in `tracer leaks`).
    pub fn leaked(&self) -> (u64, u64) {
        if self.not_leak_checked() {
            return (0, 0);
        }
        if self.leak_scan_ns.is_none() {
            return (self.heap.live_bytes, self.live_blocks());
        }
        self.live
            .values()
            .filter(|b| matches!(b.class, Some(LeakKind::Definite | LeakKind::Indirect)))
            .fold((0u64, 0u64), |(bytes, n), b| {
                (bytes.saturating_add(b.size), n + 1)
            })
    }

    /// Blocks live now.
    pub fn live_blocks(&self) -> u64 {
        self.live.len() as u64
    }

    /// Blocks live now grouped by allocation stack: `(stack, bytes, blocks)`,
    /// largest bytes first (then more blocks, then lower stack id).
    pub fn live_by_stack(&self) -> Vec<(StackId, u64, u64)> {
        let mut groups: FxHashMap<StackId, (u64, u64)> = FxHashMap::default();
        for block in self.live.values() {
            let g = groups.entry(block.stack).or_default();
            g.0 = g.0.saturating_add(block.size);
            g.1 += 1;
        }
        let mut out: Vec<(StackId, u64, u64)> =
            groups.into_iter().map(|(s, (b, n))| (s, b, n)).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        out
    }

    /// Whether the trace holds allocation events (or stacks), as opposed to
    /// only system calls.
    pub fn has_heap(&self) -> bool {
        self.heap.allocations > 0 || self.heap.frees > 0 || !self.stacks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Alloc, Free, Stack};

    pub(crate) fn alloc(t: u64, thread: u32, address: u64, size: u64, stack: u64) -> Record {
        Record::Event(Event::Alloc(Alloc {
            time_ns: t,
            thread,
            address,
            size,
            stack,
        }))
    }
    pub(crate) fn free(t: u64, thread: u32, address: u64) -> Record {
        Record::Event(Event::Free(Free {
            time_ns: t,
            thread,
            address,
        }))
    }
    fn stack(id: u64) -> Record {
        Record::Stack(Stack {
            id,
            frames: vec![Frame {
                address: 0x1000 + id,
                symbol: None,
            }],
        })
    }

    fn run(records: Vec<Record>) -> Analysis {
        let mut a = Analysis::new();
        for r in records {
            a.add(r);
        }
        a
    }

    #[test]
    fn figures_of_a_small_hand_built_trace() {
        // t=10 A 100 @s0, t=20 B 200 @s1, t=30 C 300 @s0 -> live 600 (peak)
        // t=40 free B -> live 400; t=50 realloc C -> D 500: free C, alloc D
        // -> live 100 then 600 (== peak, not above: the peak stays at t=30)
        // t=60 alloc E 50 -> 650 (new peak at t=60); t=70 free E (temporary:
        // E was thread 1's last allocation); t=80 free of 0xdead (unknown).
        let a = run(vec![
            stack(0),
            stack(1),
            alloc(10, 1, 0xa, 100, 0),
            alloc(20, 1, 0xb, 200, 1),
            alloc(30, 1, 0xc, 300, 0),
            free(40, 1, 0xb),
            free(50, 1, 0xc),
            alloc(50, 1, 0xd, 500, 1),
            alloc(60, 1, 0xe, 50, 0),
            free(70, 1, 0xe),
            free(80, 1, 0xdead),
        ]);
        let h = a.heap;
        assert_eq!(h.allocations, 5);
        assert_eq!(h.frees, 4);
        assert_eq!(h.frees_unknown, 1);
        assert_eq!(h.bytes_allocated, 1150);
        assert_eq!(h.peak_bytes, 650);
        assert_eq!(h.peak_time_ns, 60);
        assert_eq!(h.peak_blocks, 3);
        assert_eq!(h.live_bytes, 600);
        assert_eq!(a.live_blocks(), 2);
        // C (freed at t=50 by the realloc, thread 1's last allocation then) and
        // E are temporary; B is not (C was allocated after it).
        assert_eq!(h.temporary, 2);
        assert_eq!(a.sites.get(0).unwrap().temporary, 2);
        assert_eq!(a.sites.get(0).unwrap().bytes, 450);
        assert_eq!(a.sites.get(1).unwrap().bytes, 700);
        assert_eq!(a.live_by_stack(), vec![(1, 500, 1), (0, 100, 1)]);
        assert_eq!(a.duration_ns(), 70);
        assert_eq!(h.undefined_stack_allocs, 0);
    }

    #[test]
    fn temporary_needs_same_thread_and_no_allocation_between() {
        let a = run(vec![
            stack(0),
            alloc(1, 1, 0x10, 8, 0),
            alloc(2, 1, 0x20, 8, 0),
            free(3, 1, 0x10), // thread 1 allocated 0x20 since: not temporary
            alloc(4, 2, 0x30, 8, 0),
            alloc(5, 1, 0x40, 8, 0), // another thread's allocation doesn't count
            free(6, 2, 0x30),        // thread 2's last allocation: temporary
            free(7, 2, 0x40),        // freed by another thread: not temporary
            alloc(8, 1, 0x50, 8, 0),
            free(9, 1, 0x60),  // unknown block
            free(10, 1, 0x50), // no allocation in between: temporary
            alloc(11, 3, 0x70, 8, 0),
            free(12, 0, 0x70), // freeing thread unknown: thread 3 assumed
            alloc(13, 3, 0x80, 8, 0),
            alloc(14, 3, 0x90, 8, 0),
            free(15, 0, 0x80), // thread 3 allocated 0x90 since: not temporary
        ]);
        assert_eq!(a.heap.temporary, 3);
        assert_eq!(a.heap.frees, 7);
        assert_eq!(a.heap.frees_unknown, 1);
        assert_eq!(a.heap.live_bytes, 16);
    }

    #[test]
    fn reused_address_and_undefined_stack() {
        let a = run(vec![
            stack(0),
            alloc(1, 1, 0x10, 8, 0),
            alloc(2, 1, 0x10, 24, 7),
        ]);
        assert_eq!(a.heap.reused_live_addresses, 1);
        assert_eq!(a.heap.live_bytes, 24);
        assert_eq!(a.live_blocks(), 1);
        assert_eq!(a.heap.undefined_stack_allocs, 1);
        assert_eq!(a.first_undefined_stack, Some((3, 7)));
    }

    #[test]
    fn address_zero_means_unknown_address() {
        // Three blocks at "0" are three live blocks; a free of 0 releases
        // one we cannot name, so live figures stay; nothing is "reused".
        let a = run(vec![
            stack(0),
            alloc(1, 1, 0, 100, 0),
            alloc(2, 1, 0, 200, 0),
            free(3, 1, 0),
            alloc(4, 1, 0, 300, 0),
        ]);
        assert_eq!(a.heap.allocations, 3);
        assert_eq!(a.heap.frees, 1);
        assert_eq!(a.heap.frees_unknown, 1);
        assert_eq!(a.heap.frees_without_address, 1);
        assert_eq!(a.heap.allocs_without_address, 3);
        assert_eq!(a.heap.reused_live_addresses, 0);
        assert_eq!(a.heap.temporary, 0);
        assert_eq!(a.heap.live_bytes, 600);
        assert_eq!(a.heap.peak_bytes, 600);
        assert_eq!(a.live_by_stack(), vec![(0, 600, 3)]);
    }

    #[test]
    fn site_table_dense_and_sparse_ids() {
        let mut t = SiteTable::default();
        t.get_mut(1 << 40).allocations = 5;
        t.get_mut(3).allocations = 1;
        t.get_mut(5000).allocations = 2;
        assert_eq!(t.get(1 << 40).unwrap().allocations, 5);
        assert_eq!(t.get(3).unwrap().allocations, 1);
        assert_eq!(t.get(5000).unwrap().allocations, 2);
        assert!(t.get(4).is_none());
        // A sparse id later covered by the dense vector moves into it.
        let mut t = SiteTable::default();
        let s = t.get_mut(10_000);
        s.bytes = 9;
        s.allocations = 1;
        for id in 0..20_000 {
            t.get_mut(id);
        }
        assert_eq!(t.get(10_000).unwrap().bytes, 9);
        assert_eq!(t.iter().count(), 1);
    }

    #[test]
    fn syscall_figures() {
        let call = |n: u16, result: i64, errno: Option<i32>, d: u64| {
            Record::Event(Event::Syscall(Syscall {
                number: n,
                result,
                errno,
                thread: Some(1),
                time_ns: Some(100),
                duration_ns: Some(d),
                args: vec![],
            }))
        };
        let a = run(vec![
            call(2, 3, None, 10),
            call(2, -2, None, 30),
            call(2, -1, Some(13), 5),
            call(0, 100, None, 7),
        ]);
        assert_eq!(
            a.syscalls[2],
            SyscallStats {
                calls: 3,
                errors: 2,
                total_ns: 45,
                slowest_ns: 30
            }
        );
        assert_eq!(a.syscalls[0].calls, 1);
        assert_eq!(a.syscall_count, 4);
        assert!(!a.has_heap());
    }
}

#[cfg(test)]
mod throughput {
    use super::*;
    use format_writers::{Alloc, Free, Stack};

    /// A synthetic stream shaped like a real program: short-lived blocks
    /// (about 1000 live), 4096 stacks, 4 threads. Generated on the fly, so
    /// the measure is the analysis, not memory traffic.
    fn feed(n: u64, mut sink: impl FnMut(Record)) {
        for id in 0..4096 {
            sink(Record::Stack(Stack { id, frames: vec![] }));
        }
        let mut x: u64 = 12345;
        let mut live: Vec<u64> = Vec::with_capacity(2048);
        for i in 0..n / 2 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = 0x1000_0000 + (i << 4);
            sink(Record::Event(Event::Alloc(Alloc {
                time_ns: i,
                thread: (x % 4) as u32,
                address: addr,
                size: x % 512,
                stack: x % 4096,
            })));
            live.push(addr);
            if live.len() > 1000 || x & 3 != 0 {
                let k = (x as usize / 7) % live.len();
                let a = live.swap_remove(k);
                sink(Record::Event(Event::Free(Free {
                    time_ns: i,
                    thread: (x % 4) as u32,
                    address: a,
                })));
            }
        }
    }

    /// `cargo test --release -p tracer-cli throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn analysis_throughput() {
        let n = 20_000_000;
        let start = std::time::Instant::now();
        let mut count = 0u64;
        feed(n, |r| {
            count += 1;
            std::hint::black_box(r);
        });
        let generate = start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        let mut a = Analysis::new();
        feed(n, |r| a.add(r));
        let secs = start.elapsed().as_secs_f64() - generate;
        eprintln!(
            "{count} records: generation {generate:.3} s, analysis {secs:.3} s: {:.1} M records/s (live {})",
            count as f64 / secs / 1e6,
            a.live_blocks()
        );
    }
}
