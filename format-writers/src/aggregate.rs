//! One pass over a record stream that keeps what the *aggregate* formats
//! (MALT JSON, callgrind, folded stacks / flame graphs) print.
//!
//! Those formats describe a whole run, not its events, so their writers feed
//! every record to an [`Aggregate`] and render it at `finish`. Memory is
//! proportional to the distinct stacks, addresses, threads and block sizes
//! and to the blocks live at a time, never to the number of events: per event
//! the pass does one or two hash-table operations and updates a bounded
//! timeline (at most [`TIMELINE_POINTS`] points, halving its resolution when
//! the run outgrows it) and bounded scatter grids.
//!
//! Counting rules are those of `tracer report`, so the totals of every
//! aggregate output equal the report's:
//! - every `Alloc` is an allocation; every `Free` of a non-null address is a
//!   free. A free of an address that is not live (allocated before tracing)
//!   counts as a free but changes no live figure and no stack.
//! - address 0 means *unknown address*: such an `Alloc` stays live to the end,
//!   no free can match it.
//! - an `Alloc` at an address already live replaces the old block (a lost
//!   free): the old block stops counting as live.
//! - a free with thread 0 (formats that do not record the freeing thread) is
//!   the allocating thread's.
//! - peak: the largest number of bytes live at once, first reached.
//! - a **realloc** is recognised when a `Free` of a live block is immediately
//!   followed by an `Alloc` of the same non-zero thread with the same
//!   timestamp (how a realloc is written as `Free(old)` + `Alloc(new)`). A
//!   trace that stamps the two halves with different times shows no reallocs.
//!
//! Frees are attributed to the stack that allocated the block: the model does
//! not record where a block was freed.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Event, Frame, Object, Process, Record, StackId, Symbol, ThreadId};

/// Resolves a code address to a symbol when the trace does not name it (a
/// hook for a symbolizer). Called once per distinct address, at render time.
pub type Resolver = Box<dyn Fn(u64) -> Option<Symbol> + Send>;

/// Most points a timeline keeps; past that, neighbours are merged in pairs.
pub const TIMELINE_POINTS: usize = 1024;
/// Width of a timeline point before the run outgrows the timeline (ns).
const FIRST_POINT_WIDTH_NS: u64 = 1_000;
/// Cells per axis of a scatter grid.
pub const SCATTER_CELLS: u32 = 64;

/// Count, smallest, largest and sum of a series of values (0s when empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MinMaxSum {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub sum: u64,
}

impl MinMaxSum {
    pub fn add(&mut self, v: u64) {
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
    }
}

/// Everything known about the blocks one stack allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Sizes of the blocks allocated here.
    pub alloc: MinMaxSum,
    /// Sizes of the blocks allocated here and freed.
    pub free: MinMaxSum,
    /// Lifetimes (ns) of the blocks allocated here and freed.
    pub lifetime: MinMaxSum,
    /// Allocations of 0 bytes.
    pub count_zeros: u64,
    /// Bytes and blocks from here live now (at the end: live at exit).
    pub alive_bytes: u64,
    pub alive_blocks: u64,
    /// Most bytes from here live at once.
    pub max_alive_bytes: u64,
    /// Reallocs whose new block was allocated here, and the sum of their
    /// size changes (new − old).
    pub realloc_count: u64,
    pub realloc_sum_delta: i64,
    /// Lazy snapshot for [`Aggregate::peak_bytes_of`]: `snap` is this stack's
    /// live bytes at peak number `snap_id`.
    snap: u64,
    snap_id: u64,
}

/// Per-thread counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub name: String,
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub free_bytes: u64,
    pub reallocs: u64,
    pub realloc_bytes: u64,
}

/// One point of the timeline: the interval `[start + i*width, +width)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimePoint {
    /// Most bytes live during the interval, the blocks live then, and the
    /// stack whose allocation reached it (`None`: nothing changed in it).
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub callsite: Option<StackId>,
    pub alloc_count: u64,
    pub alloc_bytes: u64,
    pub free_count: u64,
    pub free_bytes: u64,
}

/// A bounded 2-D histogram: cells of (x, y) with a count.
#[derive(Debug, Clone, Default)]
pub struct Scatter {
    pub cells: HashMap<(u64, u64), u64>,
}

#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    stack: StackId,
    time: u64,
    thread: ThreadId,
}

#[derive(Debug, Clone, Copy)]
struct PendingFree {
    time: u64,
    thread: ThreadId,
    size: u64,
}

/// The aggregation of a whole trace.
#[derive(Default)]
pub struct Aggregate {
    pub process: Option<Process>,
    pub info: Vec<(String, String)>,
    pub objects: Vec<Object>,
    stacks: HashMap<StackId, Vec<Frame>>,
    stats: HashMap<StackId, StackStats>,
    symbols: HashMap<u64, Symbol>,
    pub threads: BTreeMap<ThreadId, ThreadStats>,
    live: HashMap<u64, Live>,
    pub allocations: u64,
    pub bytes_allocated: u64,
    pub frees: u64,
    pub bytes_freed: u64,
    /// Frees of addresses that were not live.
    pub frees_unknown: u64,
    pub reallocs: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    peak_id: u64,
    pub first_time_ns: Option<u64>,
    pub last_time_ns: u64,
    /// Allocations per exact size.
    pub size_map: BTreeMap<u64, u64>,
    /// Reallocs per (old size, new size).
    pub realloc_jump: BTreeMap<(u64, u64), u64>,
    pub timeline: Vec<TimePoint>,
    pub timeline_width_ns: u64,
    /// x: time since the first event (linear cells of `size_time_width_ns`),
    /// y: log2 class of the size.
    pub size_over_time: Scatter,
    pub size_time_width_ns: u64,
    /// x: log2 class of the size, y: log2 class of the lifetime (ns).
    pub lifetime_over_size: Scatter,
    last_free: Option<PendingFree>,
    resolver: Option<Resolver>,
}

/// The log2 class of `v`: 0 for 0, else the number of significant bits.
pub fn log2_class(v: u64) -> u64 {
    u64::from(64 - v.leading_zeros())
}

/// The smallest value of a log2 class.
pub fn log2_class_floor(c: u64) -> u64 {
    if c == 0 {
        0
    } else {
        1u64 << (c - 1).min(63)
    }
}

impl Aggregate {
    pub fn new() -> Aggregate {
        Aggregate {
            timeline_width_ns: FIRST_POINT_WIDTH_NS,
            size_time_width_ns: FIRST_POINT_WIDTH_NS,
            ..Aggregate::default()
        }
    }

    /// Adds a symbol resolver used for addresses the trace leaves unnamed.
    pub fn set_resolver(&mut self, resolver: Resolver) {
        self.resolver = Some(resolver);
    }

    /// Feeds one record.
    pub fn add(&mut self, record: &Record) {
        match record {
            Record::Process(p) => self.process = Some(p.clone()),
            Record::Object(o) => self.objects.push(o.clone()),
            Record::Stack(s) => {
                self.stacks.insert(s.id, s.frames.clone());
            }
            Record::Thread(t) => {
                let e = self.threads.entry(t.tid).or_default();
                if !t.name.is_empty() {
                    e.name = t.name.clone();
                }
            }
            Record::Info(pairs) => self.info.extend(pairs.iter().cloned()),
            Record::AddressSymbol { address, symbol } => {
                self.symbols.insert(*address, symbol.clone());
            }
            Record::Event(e) => self.event(e),
            // Reachability classes do not change the aggregates.
            Record::LeakScan { .. } | Record::BlockClass { .. } => {}
        }
    }

    fn event(&mut self, e: &Event) {
        if let Some(t) = e.time_ns() {
            if self.first_time_ns.is_none() {
                self.first_time_ns = Some(t);
            }
            self.last_time_ns = self.last_time_ns.max(t);
        }
        let pending = self.last_free.take();
        match e {
            Event::Alloc(a) => {
                self.allocations += 1;
                self.bytes_allocated = self.bytes_allocated.wrapping_add(a.size);
                *self.size_map.entry(a.size).or_default() += 1;
                let realloc = pending
                    .filter(|p| p.thread != 0 && p.thread == a.thread && p.time == a.time_ns);
                if let Some(old) = self.live.insert(
                    a.address,
                    Live {
                        size: a.size,
                        stack: a.stack,
                        time: a.time_ns,
                        thread: a.thread,
                    },
                ) {
                    if a.address != 0 {
                        // A lost free: the old block stops counting as live.
                        self.release(old.stack, old.size);
                    }
                }
                if a.address == 0 {
                    // Unknown address: live forever, never matched.
                    self.live.remove(&0);
                }
                self.touch_stack(a.stack);
                let st = self.stats.entry(a.stack).or_default();
                st.alloc.add(a.size);
                if a.size == 0 {
                    st.count_zeros += 1;
                }
                st.alive_bytes = st.alive_bytes.wrapping_add(a.size);
                st.alive_blocks += 1;
                st.max_alive_bytes = st.max_alive_bytes.max(st.alive_bytes);
                if let Some(p) = realloc {
                    st.realloc_count += 1;
                    st.realloc_sum_delta = st
                        .realloc_sum_delta
                        .wrapping_add(a.size.wrapping_sub(p.size) as i64);
                    self.reallocs += 1;
                    *self.realloc_jump.entry((p.size, a.size)).or_default() += 1;
                }
                let th = self.threads.entry(a.thread).or_default();
                th.allocs += 1;
                th.alloc_bytes = th.alloc_bytes.wrapping_add(a.size);
                if realloc.is_some() {
                    th.reallocs += 1;
                    th.realloc_bytes = th.realloc_bytes.wrapping_add(a.size);
                }
                self.live_bytes = self.live_bytes.wrapping_add(a.size);
                self.live_blocks += 1;
                if self.live_bytes > self.peak_bytes {
                    self.peak_bytes = self.live_bytes;
                    self.peak_time_ns = a.time_ns;
                    self.peak_id += 1;
                }
                let idx = self.point(a.time_ns);
                let (lb, lk) = (self.live_bytes, self.live_blocks);
                let p = &mut self.timeline[idx];
                p.alloc_count += 1;
                p.alloc_bytes = p.alloc_bytes.wrapping_add(a.size);
                if lb > p.live_bytes || p.callsite.is_none() {
                    p.live_bytes = lb;
                    p.live_blocks = lk;
                    p.callsite = Some(a.stack);
                }
                let x = self.scatter_time_cell(a.time_ns);
                *self
                    .size_over_time
                    .cells
                    .entry((x, log2_class(a.size)))
                    .or_default() += 1;
            }
            Event::Free(f) => {
                self.frees += 1;
                // Address 0: some block was released, we cannot tell which.
                let block = if f.address == 0 {
                    None
                } else {
                    self.live.remove(&f.address)
                };
                let Some(block) = block else {
                    self.frees_unknown += 1;
                    if f.thread != 0 {
                        self.threads.entry(f.thread).or_default().frees += 1;
                    }
                    return;
                };
                self.bytes_freed = self.bytes_freed.wrapping_add(block.size);
                self.release(block.stack, block.size);
                let lifetime = f.time_ns.saturating_sub(block.time);
                let st = self.stats.entry(block.stack).or_default();
                st.free.add(block.size);
                st.lifetime.add(lifetime);
                *self
                    .lifetime_over_size
                    .cells
                    .entry((log2_class(block.size), log2_class(lifetime)))
                    .or_default() += 1;
                let tid = if f.thread == 0 {
                    block.thread
                } else {
                    f.thread
                };
                let th = self.threads.entry(tid).or_default();
                th.frees += 1;
                th.free_bytes = th.free_bytes.wrapping_add(block.size);
                let idx = self.point(f.time_ns);
                let p = &mut self.timeline[idx];
                p.free_count += 1;
                p.free_bytes = p.free_bytes.wrapping_add(block.size);
                self.last_free = Some(PendingFree {
                    time: f.time_ns,
                    thread: f.thread,
                    size: block.size,
                });
            }
            Event::Gc(_) | Event::Marker(_) | Event::Syscall(_) => {}
        }
    }

    /// Takes a snapshot of `stack`'s live bytes for the last peak before the
    /// stack changes (see [`Aggregate::peak_bytes_of`]).
    fn touch_stack(&mut self, stack: StackId) {
        let peak_id = self.peak_id;
        let st = self.stats.entry(stack).or_default();
        if st.snap_id != peak_id {
            st.snap = st.alive_bytes;
            st.snap_id = peak_id;
        }
    }

    fn release(&mut self, stack: StackId, size: u64) {
        self.touch_stack(stack);
        let st = self.stats.entry(stack).or_default();
        st.alive_bytes = st.alive_bytes.wrapping_sub(size);
        st.alive_blocks = st.alive_blocks.saturating_sub(1);
        self.live_bytes = self.live_bytes.wrapping_sub(size);
        self.live_blocks = self.live_blocks.saturating_sub(1);
    }

    /// The timeline point of time `t`, growing (or coarsening) the timeline.
    fn point(&mut self, t: u64) -> usize {
        let start = self.first_time_ns.unwrap_or(t);
        let mut idx = t.saturating_sub(start) / self.timeline_width_ns;
        while idx >= TIMELINE_POINTS as u64 {
            let merged: Vec<TimePoint> = self
                .timeline
                .chunks(2)
                .map(|pair| {
                    let mut m = pair[0];
                    if let Some(b) = pair.get(1) {
                        if b.live_bytes > m.live_bytes || m.callsite.is_none() {
                            m.live_bytes = b.live_bytes;
                            m.live_blocks = b.live_blocks;
                            m.callsite = b.callsite;
                        }
                        m.alloc_count += b.alloc_count;
                        m.alloc_bytes = m.alloc_bytes.wrapping_add(b.alloc_bytes);
                        m.free_count += b.free_count;
                        m.free_bytes = m.free_bytes.wrapping_add(b.free_bytes);
                    }
                    m
                })
                .collect();
            self.timeline = merged;
            self.timeline_width_ns = self.timeline_width_ns.saturating_mul(2);
            idx = t.saturating_sub(start) / self.timeline_width_ns;
        }
        let (lb, lk) = (self.live_bytes, self.live_blocks);
        while self.timeline.len() as u64 <= idx {
            // An interval with no event holds the level of the one before.
            self.timeline.push(TimePoint {
                live_bytes: lb,
                live_blocks: lk,
                ..TimePoint::default()
            });
        }
        idx as usize
    }

    fn scatter_time_cell(&mut self, t: u64) -> u64 {
        let start = self.first_time_ns.unwrap_or(t);
        let mut x = t.saturating_sub(start) / self.size_time_width_ns;
        while x >= u64::from(SCATTER_CELLS) {
            let old = std::mem::take(&mut self.size_over_time.cells);
            for ((cx, cy), n) in old {
                *self.size_over_time.cells.entry((cx / 2, cy)).or_default() += n;
            }
            self.size_time_width_ns = self.size_time_width_ns.saturating_mul(2);
            x = t.saturating_sub(start) / self.size_time_width_ns;
        }
        x
    }

    /// Bytes allocated by `stack` and live when the global peak was reached.
    pub fn peak_bytes_of(&self, stack: StackId) -> u64 {
        match self.stats.get(&stack) {
            Some(st) if st.snap_id == self.peak_id => st.snap,
            Some(st) => st.alive_bytes,
            None => 0,
        }
    }

    /// The stacks that allocated, with their statistics, by ascending id.
    pub fn stack_stats(&self) -> Vec<(StackId, &StackStats)> {
        let mut v: Vec<(StackId, &StackStats)> = self
            .stats
            .iter()
            .filter(|(_, s)| s.alloc.count > 0)
            .map(|(k, s)| (*k, s))
            .collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }

    /// The frames of `stack`, innermost first (empty when never defined).
    pub fn frames(&self, stack: StackId) -> &[Frame] {
        self.stacks.get(&stack).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The symbol of a frame: the frame's own, else an `AddressSymbol` of its
    /// address, else the resolver's answer.
    pub fn symbol(&self, frame: &Frame) -> Option<Symbol> {
        if let Some(s) = &frame.symbol {
            return Some(s.clone());
        }
        if let Some(s) = self.symbols.get(&frame.address) {
            return Some(s.clone());
        }
        self.resolver.as_ref().and_then(|r| r(frame.address))
    }

    /// The name a frame is shown under: its function, else `0xADDR`.
    pub fn frame_name(&self, frame: &Frame) -> String {
        match self.symbol(frame) {
            Some(s) if !s.function.is_empty() => s.function,
            _ => format!("0x{:x}", frame.address),
        }
    }

    /// The loaded object holding `address`, if the trace described one.
    pub fn object_of(&self, address: u64) -> Option<&Object> {
        self.objects
            .iter()
            .find(|o| o.size > 0 && address >= o.load_address && address - o.load_address < o.size)
    }

    /// Run time: last event time minus the process start (or first event).
    pub fn runtime_ns(&self) -> u64 {
        self.last_time_ns.saturating_sub(self.start_ns())
    }

    /// The start of the run: the process start when known and not after the
    /// first event, else the first event's time.
    pub fn start_ns(&self) -> u64 {
        let first = self.first_time_ns.unwrap_or(0);
        match &self.process {
            Some(p) if p.start_time_ns != 0 && p.start_time_ns <= first => p.start_time_ns,
            _ => first,
        }
    }

    /// The value of an `Info` key, the last one given.
    pub fn info_value(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A profile format rendered from an [`Aggregate`] once the trace has ended.
pub trait Render {
    fn render(agg: &Aggregate, out: &mut dyn std::io::Write) -> std::io::Result<()>;
}

/// The [`TraceWriter`](crate::TraceWriter) of every aggregate profile: it
/// folds the records into an [`Aggregate`] and renders format `F` at `finish`.
pub struct ProfileWriter<W: std::io::Write + Send, F: Render> {
    out: W,
    agg: Aggregate,
    format: std::marker::PhantomData<fn() -> F>,
}

impl<W: std::io::Write + Send, F: Render> ProfileWriter<W, F> {
    pub fn new(out: W) -> Self {
        ProfileWriter {
            out,
            agg: Aggregate::new(),
            format: std::marker::PhantomData,
        }
    }

    /// Names addresses that the trace leaves unnamed (a symbolizer hook).
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.agg.set_resolver(resolver);
        self
    }
}

impl<W: std::io::Write + Send, F: Render> crate::TraceWriter for ProfileWriter<W, F> {
    fn write(&mut self, record: &Record) -> std::io::Result<()> {
        self.agg.add(record);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> std::io::Result<()> {
        F::render(&self.agg, &mut self.out)?;
        self.out.flush()
    }
}
