//! The mlyze writer: encodes events as they arrive, assembles the metadata at the end.
//!
//! Events are encoded straight into their final bytes (see the module layout in
//! `mod.rs`). Without a spool (the in-memory writer), everything the metadata will
//! need is kept in [`Tables`]. With a spool (the file-backed writer), the facts are
//! only logged into the spool as they arrive, and `finish` rebuilds the tables by
//! replaying the log, as [`super::recover`] does: during the run the writer keeps
//! just what it needs to number names and time events (the name-to-id maps, the
//! start time, the process), not the stacks. The stacks are the large part (a
//! million distinct stacks of 20 frames: ~100 MB as tables), and the traced
//! process would otherwise carry them through its whole run, its peak included.
//! When their ids ascend in the log (each set once, in order, as the preload
//! numbers them), `finish` does not rebuild them either: the metadata reads them
//! from the log's chunks, once per pass over the stacks: one pass counts the
//! metadata's bytes for both stack sections, then one writes each section (see
//! [`StackFrom`] and `Tables::metadata_len`).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::spool::{self, entry};
use super::{header, ALLOC, FREE, GC, HEADER_LEN, MARKER, SLOTS};
use crate::bytes::put_varint;
use crate::fasthash::FastMap;
use crate::model::{
    Event, Frame, LeakKind, Object, Process, Record, StackId, Symbol, Thread, ThreadId,
};
use crate::{output, ClassesLater, TraceWriter};

/// Function name of the entry unresolved frames point at.
pub(super) const UNRESOLVED_NAME: &str = "??";

/// Events are pushed to the spool once this many encoded bytes are pending
/// (64 KiB: the buffer, and the log of metadata entries that spills with
/// it, are part of the traced process's memory; ~480 writes for 30 MB of
/// events cost no measurable time).
const SPILL_AT: usize = 64 << 10;

/// A frame as the metadata stores it: ids into `functions` and `files`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct FrameRef {
    pub addr: u64,
    pub func: u32,
    pub file: u32,
    pub line: u32,
}

/// A stack's frames as kept until the metadata is written. While every frame
/// is unresolved (a tracer names them late, with `Record::AddressSymbol`),
/// the stack is its innermost node in [`Trie`] (`NO_NODE` when empty):
/// stacks share their outer frames (python3's 300k-entry dict: 5,990 stacks,
/// 193,836 frames, 19,409 distinct prefixes), so each distinct prefix is
/// kept once, ~20 bytes, instead of 8 bytes per frame of every stack.
/// Only the in-memory writer keeps stacks during its run; a spooling writer
/// builds them at `finish`, from its log.
pub(super) enum Frames {
    Unresolved(u32),
    Refs(Box<[FrameRef]>),
}

/// "No node": the empty stack, an empty slot of the trie's index.
const NO_NODE: u32 = u32::MAX;

/// Return addresses as a tree of prefixes from the outermost frame: a node
/// is `(address, parent)`; a stack is the node of its innermost frame and
/// reads back by walking the parents. Children are found through one open
/// addressing index of node numbers (4 bytes a slot, at most 3/4 full)
/// hashed on `(parent, address)`, so no per-node map or allocation.
#[derive(Default)]
pub(super) struct Trie {
    addr: Vec<u64>,
    parent: Vec<u32>,
    /// Node numbers, `NO_NODE` where empty; length a power of two or zero.
    index: Vec<u32>,
}

impl Trie {
    fn slot(parent: u32, addr: u64, mask: usize) -> usize {
        let h = (addr ^ ((u64::from(parent) << 32) | u64::from(parent)))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & mask
    }

    /// The node of `addr` under `parent` (`NO_NODE`: the root), added if new.
    fn child(&mut self, parent: u32, addr: u64) -> u32 {
        // At most 3/4 full: a slot costs 4 bytes against a node's 12, and
        // lookups happen once per frame of a new stack, not per event.
        if (self.addr.len() + 1) * 4 > self.index.len() * 3 {
            self.grow();
        }
        let mask = self.index.len() - 1;
        let mut i = Self::slot(parent, addr, mask);
        loop {
            let n = self.index[i];
            if n == NO_NODE {
                let id = self.addr.len() as u32;
                self.addr.push(addr);
                self.parent.push(parent);
                self.index[i] = id;
                return id;
            }
            if self.addr[n as usize] == addr && self.parent[n as usize] == parent {
                return n;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let len = (self.index.len() * 2).max(1024);
        self.index = vec![NO_NODE; len];
        let mask = len - 1;
        for (id, (&a, &p)) in self.addr.iter().zip(&self.parent).enumerate() {
            let mut i = Self::slot(p, a, mask);
            while self.index[i] != NO_NODE {
                i = (i + 1) & mask;
            }
            self.index[i] = id as u32;
        }
    }

    /// The innermost node of `frames` (innermost first), `NO_NODE` if empty.
    fn insert(&mut self, frames: impl DoubleEndedIterator<Item = u64>) -> u32 {
        let mut node = NO_NODE;
        for a in frames.rev() {
            node = self.child(node, a);
        }
        node
    }

    /// The addresses of the stack ending at `node`, innermost first.
    fn addresses(&self, mut node: u32) -> impl Iterator<Item = u64> + '_ {
        std::iter::from_fn(move || {
            if node == NO_NODE {
                return None;
            }
            let a = self.addr[node as usize];
            node = self.parent[node as usize];
            Some(a)
        })
    }
}

/// Position in `Tables::stacks` by stack id. Writers number their stacks
/// in order of first use (the preload: 1, 2, 3, ...), so while every id is
/// the previous one plus one the position is computed, with no map (python3:
/// 6,000 stacks, 140 KiB less at the peak); the first id out of that order
/// builds the map.
#[derive(Default)]
struct StackIndex {
    /// Id of the first stack while the ids are consecutive.
    first: Option<StackId>,
    map: Option<HashMap<StackId, usize>>,
}

impl StackIndex {
    fn get(&self, id: StackId, stacks: &[(StackId, Frames)]) -> Option<usize> {
        if let Some(map) = &self.map {
            return map.get(&id).copied();
        }
        let i = usize::try_from(id.checked_sub(self.first?)?).ok()?;
        (i < stacks.len()).then_some(i)
    }

    /// Records that `id` (not yet known) goes at `stacks.len()`.
    fn insert(&mut self, id: StackId, stacks: &[(StackId, Frames)]) {
        if self.map.is_none() {
            let first = *self.first.get_or_insert(id);
            if id.checked_sub(first) == Some(stacks.len() as StackId) {
                return;
            }
            let map = stacks.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
            self.map = Some(map);
        }
        if let Some(map) = &mut self.map {
            map.insert(id, stacks.len());
        }
    }
}

/// One reachability scan: where it sits in the event stream and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeakScan {
    /// Number of events written before the scan.
    pub event_seq: u64,
    pub time_ns: u64,
    /// `(address, kind)` of every block classified, in the order given.
    pub blocks: Vec<(u64, LeakKind)>,
}

/// Everything the metadata section is made of, collected during the run.
///
/// While spooling (`log` is `Some`), each fact is only logged: the tables
/// stay empty except for what the run itself reads (`start_us`, `process`,
/// the name-to-id maps, `unresolved`, `empty_file`, `dropped_syscalls`),
/// and ids count on in `spooled_functions` / `spooled_files`.
#[derive(Default)]
pub(super) struct Tables {
    /// Header start time; fixed when the first event is encoded.
    pub start_us: Option<u64>,
    pub process: Option<Process>,
    pub objects: Vec<Object>,
    pub threads: Vec<Thread>,
    pub info: Vec<(String, String)>,
    pub stacks: Vec<(StackId, Frames)>,
    /// The frames of the `Frames::Unresolved` stacks.
    trie: Trie,
    stack_index: StackIndex,
    pub functions: Vec<String>,
    pub files: Vec<String>,
    function_ids: HashMap<String, u32>,
    file_ids: HashMap<String, u32>,
    /// The `functions` id unresolved frames use.
    pub unresolved: Option<u32>,
    /// The `files` id of "" (what unresolved frames name), once interned:
    /// looked up for every unresolved frame, so kept out of the hash map.
    empty_file: Option<u32>,
    /// `(address, function id, file id, line)`.
    pub address_symbols: Vec<(u64, u32, u32, u32)>,
    /// `(event sequence number, slot, OS tid)`: from that event on, the slot means the tid.
    pub thread_slots: Vec<(u64, u16, u32)>,
    pub marker_threads: Vec<u32>,
    pub dropped_syscalls: u64,
    /// Reachability scans (`Record::LeakScan` and the `BlockClass`es after it).
    pub leak_scans: Vec<LeakScan>,
    /// A scan whose classes come after the file is written
    /// ([`Writer::finish_before_classes`]): the last of `leak_scans`.
    awaited: Option<AwaitedScan>,
    /// Spool entries not yet written (only when spooling).
    pub log: Option<Vec<u8>>,
    /// Function and file ids assigned while spooling (not in `functions`, `files`).
    spooled_functions: u32,
    spooled_files: u32,
    /// A leak scan was logged while spooling (`BlockClass` needs one before it).
    spooled_leak_scan: bool,
    /// The frames of the stack logged last, innermost first (while spooling,
    /// and while replaying a log: see the spool's tag 16).
    pub last_stack: Vec<FrameRef>,
}

impl Tables {
    /// The id the next function entry gets.
    fn next_function(&self) -> u32 {
        self.functions.len() as u32 + self.spooled_functions
    }

    /// Adds the name of function `id` (just assigned) to the table or the log.
    fn add_function(&mut self, tag: u8, id: u32, name: &str) {
        match &mut self.log {
            Some(log) => {
                if tag == entry::UNRESOLVED {
                    entry::put_unresolved(log, id);
                } else {
                    entry::put_named(log, tag, id, name);
                }
                self.spooled_functions += 1;
            }
            None => self.functions.push(name.to_owned()),
        }
    }

    pub fn intern_function(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.function_ids.get(name) {
            return id;
        }
        let id = self.next_function();
        self.add_function(entry::FUNCTION, id, name);
        self.function_ids.insert(name.to_owned(), id);
        id
    }

    pub fn intern_file(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            if let Some(id) = self.empty_file {
                return id;
            }
        }
        if let Some(&id) = self.file_ids.get(name) {
            if name.is_empty() {
                self.empty_file = Some(id);
            }
            return id;
        }
        let id = self.files.len() as u32 + self.spooled_files;
        match &mut self.log {
            Some(log) => {
                entry::put_named(log, entry::FILE, id, name);
                self.spooled_files += 1;
            }
            None => self.files.push(name.to_owned()),
        }
        self.file_ids.insert(name.to_owned(), id);
        id
    }

    /// Adds a function entry without interning (recovery replays explicit ids).
    pub fn push_function(&mut self, name: String) {
        self.function_ids
            .entry(name.clone())
            .or_insert(self.functions.len() as u32);
        self.functions.push(name);
    }

    pub fn push_file(&mut self, name: String) {
        self.file_ids
            .entry(name.clone())
            .or_insert(self.files.len() as u32);
        self.files.push(name);
    }

    fn unresolved_id(&mut self) -> u32 {
        if let Some(id) = self.unresolved {
            return id;
        }
        // Deliberately not interned: a real function named "??" gets its own entry.
        let id = self.next_function();
        self.add_function(entry::UNRESOLVED, id, UNRESOLVED_NAME);
        self.unresolved = Some(id);
        id
    }

    fn symbol_ref(&mut self, s: &Symbol) -> (u32, u32, u32) {
        (
            self.intern_function(&s.function),
            self.intern_file(&s.file),
            s.line,
        )
    }

    fn frame_ref(&mut self, f: &Frame) -> FrameRef {
        let (func, file, line) = match &f.symbol {
            Some(s) => self.symbol_ref(s),
            None => (self.unresolved_id(), self.intern_file(""), 0),
        };
        FrameRef {
            addr: f.address,
            func,
            file,
            line,
        }
    }

    /// Sets stack `id` (a stack set again replaces its frames).
    pub fn set_stack(&mut self, id: StackId, frames: Vec<FrameRef>) {
        if let Some(log) = &mut self.log {
            let last = &self.last_stack;
            let shared = frames
                .iter()
                .rev()
                .zip(last.iter().rev())
                .take_while(|(a, b)| a == b)
                .count();
            entry::put_stack_shared(log, id, &frames, shared);
            self.last_stack = frames;
            return;
        }
        let empty = self.empty_file.or_else(|| self.file_ids.get("").copied());
        let plain =
            |f: &FrameRef| f.line == 0 && Some(f.func) == self.unresolved && Some(f.file) == empty;
        let frames = if frames.iter().all(plain) {
            Frames::Unresolved(self.trie.insert(frames.iter().map(|f| f.addr)))
        } else {
            Frames::Refs(frames.into_boxed_slice())
        };
        match self.stack_index.get(id, &self.stacks) {
            Some(i) => self.stacks[i].1 = frames,
            None => {
                self.stack_index.insert(id, &self.stacks);
                self.stacks.push((id, frames));
            }
        }
    }

    /// The frames of the stack at `i` (see [`Frames`]).
    fn frames(&self, i: usize) -> Vec<FrameRef> {
        match &self.stacks[i].1 {
            Frames::Refs(r) => r.to_vec(),
            Frames::Unresolved(leaf) => {
                // Stored so only when both ids exist.
                let func = self.unresolved.unwrap_or(0);
                let file = self.file_ids.get("").copied().unwrap_or(0);
                self.trie
                    .addresses(*leaf)
                    .map(|addr| FrameRef {
                        addr,
                        func,
                        file,
                        line: 0,
                    })
                    .collect()
            }
        }
    }

    /// The header's start time.
    pub fn header_start_us(&self) -> u64 {
        self.start_us
            .or_else(|| self.process.as_ref().map(|p| p.start_time_ns / 1000))
            .unwrap_or(0)
    }

    /// The metadata JSON: the document's three tables, then the `libtracer` key.
    pub fn metadata_json(&self) -> Vec<u8> {
        let mut j = Vec::with_capacity(256 + self.stacks.len() * 64);
        // Writing into a Vec cannot fail.
        let _ = self.write_metadata(&mut j);
        j
    }

    /// Streams the metadata JSON into `j` (no copy of the whole document is
    /// built: with many stacks it is the largest thing the writer makes).
    pub fn write_metadata<J: Write + ?Sized>(&self, j: &mut J) -> io::Result<()> {
        self.write_metadata_from(j, &mut StackFrom::Tables)
    }

    /// Calls `each` with every stack (its rank, id and frames, innermost
    /// first) in ascending id order, from the tables or the spool's log.
    fn each_stack(&self, from: &mut StackFrom<'_>, each: &mut EachStack<'_>) -> io::Result<()> {
        match from {
            StackFrom::Tables => {
                let mut order: Vec<usize> = (0..self.stacks.len()).collect();
                order.sort_unstable_by_key(|&i| self.stacks[i].0);
                for (n, &i) in order.iter().enumerate() {
                    each(n, self.stacks[i].0, &self.frames(i))?;
                }
                Ok(())
            }
            StackFrom::Log {
                io,
                ranges,
                len,
                pending,
            } => {
                let mut n = 0;
                let mut one = |id: StackId, frames: &[FrameRef]| {
                    each(n, id, frames)?;
                    n += 1;
                    Ok(())
                };
                // Only stacks are taken: the scratch tables keep the stack
                // logged last alone, from chunk to chunk.
                let mut scratch = Tables::default();
                each_log_chunk(&mut **io, ranges, pending, *len, &mut |buf, base| {
                    let only = spool::Stacks::Only(&mut one);
                    spool::replay(&mut scratch, buf, base, None, only)
                })
            }
        }
    }

    /// [`Tables::write_metadata`] with the stacks taken from `from`.
    fn write_metadata_from<J: Write + ?Sized>(
        &self,
        j: &mut J,
        from: &mut StackFrom<'_>,
    ) -> io::Result<()> {
        self.write_metadata_pass(j, from, false)
    }

    /// The number of bytes [`Tables::write_metadata_from`] writes, with one
    /// pass over the stacks instead of two (each stack's entries of both
    /// stack sections are counted together; with the stacks in the spool's
    /// log, every pass replays the log).
    fn metadata_len(&self, from: &mut StackFrom<'_>) -> io::Result<u64> {
        let mut counter = Counting {
            inner: &mut io::sink(),
            n: 0,
        };
        self.write_metadata_pass(&mut counter, from, true)?;
        Ok(counter.n)
    }

    /// Writes the metadata; with `count_only`, the `stack_addresses_delta`
    /// entries are written along with the `stack_traces` ones (for a byte
    /// count: the order does not matter then) and its section is left empty.
    fn write_metadata_pass<J: Write + ?Sized>(
        &self,
        j: &mut J,
        from: &mut StackFrom<'_>,
        count_only: bool,
    ) -> io::Result<()> {
        let mut late: FastMap<u64, (u32, u32, u32)> = FastMap::default();
        if self.unresolved.is_some() {
            for &(addr, func, file, line) in &self.address_symbols {
                late.insert(addr, (func, file, line));
            }
        }

        j.write_all(b"{\"stack_traces\":{")?;
        let mut texts = FrameTexts::default();
        let mut line = Vec::with_capacity(4096);
        let mut previous = Vec::new();
        self.each_stack(from, &mut |n, id, frames| {
            line.clear();
            stack_key(&mut line, n, id);
            // Outermost frame first, as in the document's example (main, then its callee).
            for (k, f) in frames.iter().rev().enumerate() {
                if k > 0 {
                    line.push(b',');
                }
                texts.frame(&mut line, f, |f| match late.get(&f.addr) {
                    Some(&sym) if Some(f.func) == self.unresolved => sym,
                    _ => (f.func, f.file, f.line),
                });
            }
            line.push(b']');
            if count_only {
                address_entry(&mut line, &mut texts, &mut previous, n, id, frames);
            }
            // One write per stack: a write per piece cost more than the text.
            j.write_all(&line)
        })?;
        // Gone before the addresses' pass: the exit's memory adds to the
        // program's at its end, often its peak.
        drop(texts);
        j.write_all(b"},\"files\":")?;
        string_table(j, &self.files)?;
        j.write_all(b",\"functions\":")?;
        string_table(j, &self.functions)?;

        j.write_all(b",\"libtracer\":{\"version\":1,\"unresolved_function\":")?;
        match self.unresolved {
            Some(id) => {
                write!(j, "{id}")?;
            }
            None => j.write_all(b"null")?,
        }
        j.write_all(b",\"stack_addresses_delta\":[")?;
        if !count_only {
            let mut texts = FrameTexts::default();
            let mut line = Vec::with_capacity(4096);
            let mut previous = Vec::new();
            self.each_stack(from, &mut |n, id, frames| {
                line.clear();
                address_entry(&mut line, &mut texts, &mut previous, n, id, frames);
                j.write_all(&line)
            })?;
        }
        j.write_all(b"],\"process\":")?;
        match &self.process {
            Some(p) => {
                write!(j, "{{\"pid\":{},\"executable\":", p.pid)?;
                json_str(j, &p.executable)?;
                j.write_all(b",\"argv\":[")?;
                for (k, a) in p.command_line.iter().enumerate() {
                    sep(j, k)?;
                    json_str(j, a)?;
                }
                write!(j, "],\"start_time_ns\":{}}}", p.start_time_ns)?;
            }
            None => j.write_all(b"null")?,
        }
        j.write_all(b",\"objects\":[")?;
        for (k, o) in self.objects.iter().enumerate() {
            sep(j, k)?;
            j.write_all(b"{\"path\":")?;
            json_str(j, &o.path)?;
            write!(
                j,
                ",\"load_address\":{},\"size\":{}}}",
                o.load_address, o.size
            )?;
        }
        j.write_all(b"],\"threads\":[")?;
        for (k, t) in self.threads.iter().enumerate() {
            sep(j, k)?;
            write!(j, "{{\"tid\":{},\"name\":", t.tid)?;
            json_str(j, &t.name)?;
            j.write_all(b"}")?;
        }
        j.write_all(b"],\"thread_slots\":[")?;
        for (k, (seq, slot, tid)) in self.thread_slots.iter().enumerate() {
            sep(j, k)?;
            write!(j, "[{seq},{slot},{tid}]")?;
        }
        j.write_all(b"],\"address_symbols\":[")?;
        for (k, (addr, func, file, line)) in self.address_symbols.iter().enumerate() {
            sep(j, k)?;
            write!(j, "[{addr},{func},{file},{line}]")?;
        }
        j.write_all(b"],\"info\":[")?;
        for (k, (key, value)) in self.info.iter().enumerate() {
            sep(j, k)?;
            j.write_all(b"[")?;
            json_str(j, key)?;
            j.write_all(b",")?;
            json_str(j, value)?;
            j.write_all(b"]")?;
        }
        j.write_all(b"],\"marker_threads\":[")?;
        for (k, tid) in self.marker_threads.iter().enumerate() {
            sep(j, k)?;
            write!(j, "{tid}")?;
        }
        write!(j, "],\"dropped_syscalls\":{}", self.dropped_syscalls)?;
        // Only written when a scan exists, so traces without one keep their bytes.
        if !self.leak_scans.is_empty() || self.awaited.is_some() {
            j.write_all(b",\"leak_scans\":[")?;
            let mut entry = Vec::new();
            for (k, scan) in self.leak_scans.iter().enumerate() {
                entry.clear();
                scan_entry_head(&mut entry, k == 0, scan.event_seq, scan.time_ns);
                for (n, &(a, kind)) in scan.blocks.iter().enumerate() {
                    block_entry(&mut entry, n, a, b'0' + kind.code());
                }
                entry.extend_from_slice(b"]}");
                j.write_all(&entry)?;
            }
            if let Some(a) = &self.awaited {
                // Blank until the classes come: a list without this scan.
                let blank = [b' '; 4096];
                let mut left = a.entry_len(self.leak_scans.is_empty());
                while left > 0 {
                    let n = left.min(blank.len() as u64) as usize;
                    j.write_all(&blank[..n])?;
                    left -= n as u64;
                }
            }
            j.write_all(b"]")?;
        }
        j.write_all(b"}}")
    }
}

/// What comes before the first block of a `leak_scans` entry (after a
/// comma unless it is the `first`); `]}` closes it after the last block.
fn scan_entry_head(out: &mut Vec<u8>, first: bool, event_seq: u64, time_ns: u64) {
    if !first {
        out.push(b',');
    }
    let mut d = Digits::new();
    out.extend_from_slice(b"{\"event_seq\":");
    out.extend_from_slice(d.of(event_seq));
    out.extend_from_slice(b",\"time_ns\":");
    out.extend_from_slice(d.of(time_ns));
    out.extend_from_slice(b",\"blocks\":[");
}

/// Block `n` of a `leak_scans` entry: `[address,kind]`, after a comma
/// unless it is the first.
fn block_entry(out: &mut Vec<u8>, n: usize, addr: u64, kind: u8) {
    if n > 0 {
        out.push(b',');
    }
    out.push(b'[');
    out.extend_from_slice(Digits::new().of(addr));
    out.push(b',');
    out.push(kind);
    out.push(b']');
}

/// A leak scan the file keeps room for: where it sits in the stream, and
/// its blocks' addresses in the order their classes come.
struct AwaitedScan {
    event_seq: u64,
    time_ns: u64,
    blocks: Vec<u64>,
}

impl AwaitedScan {
    /// The length of its `leak_scans` entry (a kind is one digit).
    fn entry_len(&self, first: bool) -> u64 {
        let mut head = Vec::new();
        scan_entry_head(&mut head, first, self.event_seq, self.time_ns);
        let digits = |a: u64| a.checked_ilog10().unwrap_or(0) as u64 + 1;
        let blocks = &self.blocks;
        // `[address,k]` and a comma between two; `]}` at the end.
        let each: u64 = blocks.iter().map(|&a| digits(a) + 4).sum();
        head.len() as u64 + each + (blocks.len() as u64).saturating_sub(1) + 2
    }

    /// Writes its `leak_scans` entry with `put(offset, bytes)` in pieces
    /// of about 64 KiB, each block's kind digit from `kind(n)`.
    fn put_entry(
        &self,
        first: bool,
        kind: impl Fn(usize) -> u8,
        put: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        const PIECE: usize = 64 * 1024;
        let mut buf = Vec::with_capacity(PIECE + 64);
        let mut at = 0u64;
        scan_entry_head(&mut buf, first, self.event_seq, self.time_ns);
        for (n, &a) in self.blocks.iter().enumerate() {
            block_entry(&mut buf, n, a, kind(n));
            if buf.len() >= PIECE {
                put(at, &buf)?;
                at += buf.len() as u64;
                buf.clear();
            }
        }
        buf.extend_from_slice(b"]}");
        put(at, &buf)
    }
}

/// Room kept in a finished file for a scan's classes
/// ([`Writer::finish_before_classes`]).
struct ClassesRoom {
    scan: AwaitedScan,
    /// Whether the scan is the first of `leak_scans` (no comma before it).
    first: bool,
    /// File offset of the entry.
    at: u64,
    patcher: HeaderPatcher,
}

impl ClassesLater for ClassesRoom {
    fn write(mut self: Box<Self>, kinds: &[LeakKind]) -> io::Result<()> {
        if kinds.len() != self.scan.blocks.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "mlyze: {} classes for the {} blocks of the scan",
                    kinds.len(),
                    self.scan.blocks.len()
                ),
            ));
        }
        let (at, patcher) = (self.at, &mut self.patcher);
        self.scan
            .put_entry(self.first, |n| b'0' + kinds[n].code(), &mut |off, bytes| {
                patcher(at + off, bytes)
            })
    }
}

/// One entry of `stack_addresses_delta` appended to `line`, after a comma
/// unless it is the first (`n` 0): `[id,shared,addresses...]`, where the
/// stack's first `shared` addresses (outermost first) are those of the
/// entry before it, `previous`, which then becomes this stack's.
fn address_entry(
    line: &mut Vec<u8>,
    texts: &mut FrameTexts,
    previous: &mut Vec<u64>,
    n: usize,
    id: StackId,
    frames: &[FrameRef],
) {
    if n > 0 {
        line.push(b',');
    }
    line.push(b'[');
    line.extend_from_slice(Digits::new().of(id));
    let outer_first = frames.iter().rev().map(|f| f.addr);
    let shared = previous
        .iter()
        .zip(outer_first.clone())
        .take_while(|(a, b)| **a == *b)
        .count();
    line.push(b',');
    line.extend_from_slice(Digits::new().of(shared as u64));
    for addr in outer_first.clone().skip(shared) {
        line.push(b',');
        texts.address(line, addr);
    }
    line.push(b']');
    previous.clear();
    previous.extend(outer_first);
}

/// `"id":[` of a stack entry, after a comma unless it is the first (`n` 0).
fn stack_key(line: &mut Vec<u8>, n: usize, id: StackId) {
    if n > 0 {
        line.push(b',');
    }
    line.push(b'"');
    line.extend_from_slice(Digits::new().of(id));
    line.extend_from_slice(b"\":[");
}

/// The text of frames and addresses as the metadata last wrote them, in
/// direct-mapped slots: stacks repeat the same few frames (cc1plus: 4.2M
/// frames of 101,000 stacks name 10,432 addresses), and copying a frame's
/// ~45 bytes is cheaper than making them again. A slot holds one frame
/// (its exact `FrameRef`, so the late symbol applied to it is its own)
/// and, apart, one address. Each kind starts with 2^10 slots and doubles
/// (emptied) while more than 1 lookup in 16 misses but fewer than 7 in 8
/// do: frames that repeat get room, a run of all-new frames does not (nor
/// a set larger than the slots asked in a cycle, which misses as often).
/// Only one kind is in use in a pass (both while the length is counted).
#[derive(Default)]
struct FrameTexts {
    frames: Slots<FrameSlot>,
    addresses: Slots<AddressSlot>,
}

/// Slots of each kind at most: 2^13 (~0.7 MiB of frame slots, 0.25 MiB of
/// address slots).
const TEXT_SLOTS_MAX_BITS: u32 = 13;
const TEXT_SLOTS_MIN_BITS: u32 = 10;

#[derive(Clone, Copy)]
struct FrameSlot {
    key: FrameRef,
    /// 0 while empty.
    len: u8,
    text: [u8; FRAME_TEXT_MAX],
}

impl Default for FrameSlot {
    fn default() -> Self {
        FrameSlot {
            key: FrameRef::default(),
            len: 0,
            text: [0; FRAME_TEXT_MAX],
        }
    }
}

#[derive(Clone, Copy, Default)]
struct AddressSlot {
    addr: u64,
    /// 0 while empty.
    len: u8,
    text: [u8; 20],
}

/// The longest frame object: three ids of 10 digits.
const FRAME_TEXT_MAX: usize = 62;

/// One kind of slots, and how well they served since they were made.
#[derive(Default)]
struct Slots<T> {
    slots: Vec<T>,
    bits: u32,
    lookups: u64,
    misses: u64,
}

impl<T: Default + Clone> Slots<T> {
    /// The index of the slot of a key hashed to `h`, the slots made (or
    /// grown) first when due.
    fn at(&mut self, h: u64) -> usize {
        if self.slots.is_empty() || self.lookups >= 16 << self.bits {
            let repeat = self.misses > self.lookups / 16 && self.misses < self.lookups / 8 * 7;
            let bits = if self.slots.is_empty() {
                TEXT_SLOTS_MIN_BITS
            } else if repeat && self.bits < TEXT_SLOTS_MAX_BITS {
                self.bits + 1
            } else {
                self.bits
            };
            if bits != self.bits {
                self.slots = vec![T::default(); 1 << bits];
                self.bits = bits;
            }
            self.lookups = 0;
            self.misses = 0;
        }
        self.lookups += 1;
        (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }
}

impl FrameTexts {
    /// Appends the frame object of `f`, whose `(func, file, line)` are `ids(f)`.
    fn frame(
        &mut self,
        out: &mut Vec<u8>,
        f: &FrameRef,
        ids: impl Fn(&FrameRef) -> (u32, u32, u32),
    ) {
        let h = f.addr ^ (u64::from(f.func) << 40 ^ u64::from(f.line) << 20 ^ u64::from(f.file));
        let i = self.frames.at(h);
        let s = &mut self.frames.slots[i];
        if s.len == 0 || s.key != *f {
            let (func, file, line) = ids(f);
            let n = frame_text(&mut s.text, file, line, func);
            s.key = *f;
            s.len = n as u8;
            self.frames.misses += 1;
        }
        out.extend_from_slice(&s.text[..s.len as usize]);
    }

    /// Appends `addr` in decimal.
    fn address(&mut self, out: &mut Vec<u8>, addr: u64) {
        let i = self.addresses.at(addr);
        let s = &mut self.addresses.slots[i];
        if s.len == 0 || s.addr != addr {
            let mut d = Digits::new();
            let t = d.of(addr);
            s.text[..t.len()].copy_from_slice(t);
            s.addr = addr;
            s.len = t.len() as u8;
            self.addresses.misses += 1;
        }
        out.extend_from_slice(&s.text[..s.len as usize]);
    }
}

fn sep<J: Write + ?Sized>(j: &mut J, n: usize) -> io::Result<()> {
    if n > 0 {
        j.write_all(b",")?;
    }
    Ok(())
}

fn json_str<J: Write + ?Sized>(j: &mut J, s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *j, s).map_err(io::Error::other)
}

fn string_table<J: Write + ?Sized>(j: &mut J, names: &[String]) -> io::Result<()> {
    j.write_all(b"{")?;
    for (k, name) in names.iter().enumerate() {
        sep(j, k)?;
        write!(j, "\"{k}\":")?;
        json_str(j, name)?;
    }
    j.write_all(b"}")
}

/// Assigns the 16-bit thread slots of ALLOC events to OS thread ids.
///
/// Slots are handed out in order; once all 65,536 are taken, the oldest
/// assignment is replaced (round robin). Every assignment is recorded with the
/// sequence number of the first event using it, so a reader always knows which
/// tid a slot meant at any point of the stream.
struct SlotMap {
    slot_of: HashMap<ThreadId, u16>,
    tid_of: Vec<ThreadId>,
    next_victim: usize,
    last: Option<(ThreadId, u16)>,
}

impl SlotMap {
    fn new() -> Self {
        SlotMap {
            slot_of: HashMap::new(),
            tid_of: Vec::new(),
            next_victim: 0,
            last: None,
        }
    }

    #[inline]
    fn slot(&mut self, tid: ThreadId, seq: u64, t: &mut Tables) -> u16 {
        if let Some((last_tid, slot)) = self.last {
            if last_tid == tid {
                return slot;
            }
        }
        let slot = match self.slot_of.get(&tid) {
            Some(&s) => s,
            None => self.assign(tid, seq, t),
        };
        self.last = Some((tid, slot));
        slot
    }

    #[cold]
    fn assign(&mut self, tid: ThreadId, seq: u64, t: &mut Tables) -> u16 {
        let slot = if self.tid_of.len() < SLOTS {
            self.tid_of.push(tid);
            self.tid_of.len() - 1
        } else {
            let s = self.next_victim;
            self.next_victim = (s + 1) % SLOTS;
            self.slot_of.remove(&self.tid_of[s]);
            self.tid_of[s] = tid;
            s
        } as u16;
        self.slot_of.insert(tid, slot);
        match &mut t.log {
            Some(log) => entry::put_thread_slot(log, seq, slot, tid),
            None => t.thread_slots.push((seq, slot, tid)),
        }
        slot
    }
}

/// Anything a spool can live in: written in chunks, read back at `finish`.
pub trait SpoolIo: Read + Write + Seek + Send {}
impl<T: Read + Write + Seek + Send> SpoolIo for T {}

/// A spool's storage: a plain file can be cloned for a detached replay's
/// reads (other storage needs [`Writer::set_spool_reader`]).
enum SpoolStore {
    File(File),
    Other(Box<dyn SpoolIo>),
}

impl SpoolStore {
    fn io(&mut self) -> &mut dyn SpoolIo {
        match self {
            SpoolStore::File(f) => f,
            SpoolStore::Other(o) => o.as_mut(),
        }
    }
}

/// Positioned reads of the spool (`pread`: no shared file offset moves), so
/// a detached replay of the allocations
/// ([`TraceWriter::detach_allocation_replay`]) can read it on another thread
/// while the writer finishes.
pub type SpoolReader = std::sync::Arc<dyn FileExt + Send + Sync>;

/// Deletes the spool after a successful `finish`, in place of removing the
/// path given to [`Writer::with_spool`]: for a caller that knows better (the
/// preload library checks that the path still leads to its spool, and
/// empties the spool through its descriptor when a process that gave up root
/// or chrooted can no longer delete it).
pub type SpoolRemover = Box<dyn FnOnce() + Send>;

/// Writes `bytes` at `offset` of the output, counted from the writer's
/// first byte (`pwrite` on a fresh file), after everything else was
/// written and flushed. With one, `finish` writes the metadata once and
/// then fills in the header's length field, instead of measuring the
/// metadata in a pass of its own first.
pub type HeaderPatcher = Box<dyn FnMut(u64, &[u8]) -> io::Result<()> + Send>;

/// A `Write` that counts what passes through it: the metadata's length for
/// the header, measured on its way out (or into `io::sink()` when the
/// header must go first).
struct Counting<'a, W: Write + ?Sized> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write + ?Sized> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.n += buf.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The spool side file of a file-backed writer.
struct SpoolFile {
    file: SpoolStore,
    /// Positioned reads for a detached replay (see [`SpoolReader`]).
    reader: Option<SpoolReader>,
    /// Deleted after a successful `finish`, when known.
    path: Option<PathBuf>,
    /// Called instead of deleting `path`, when set.
    remover: Option<SpoolRemover>,
    /// Bytes written so far.
    len: u64,
    /// `(offset, length)` of every event chunk's payload, in order.
    event_ranges: Vec<(u64, u64)>,
    /// `(offset, length)` of every log chunk's payload, in order: what the
    /// finish replays, read without a look at the event chunks between
    /// (a read and a seek each, three passes: ~35,000 system calls at
    /// cc1plus's exit).
    log_ranges: Vec<(u64, u64)>,
}

/// Streaming mlyze writer. See the module documentation for the layout.
pub struct Writer<W: Write> {
    out: W,
    t: Tables,
    /// Encoded events not yet spooled (all of them without a spool).
    events: Vec<u8>,
    /// Event sequence number of the next event.
    seq: u64,
    last_us: u64,
    slots: SlotMap,
    spool: Option<SpoolFile>,
    patcher: Option<HeaderPatcher>,
}

impl<W: Write> Writer<W> {
    /// A writer that keeps the encoded events in memory and writes the whole
    /// file to `out` in `finish` (tests, conversions of moderate size).
    pub fn new(out: W) -> Self {
        Writer {
            out,
            t: Tables::default(),
            events: Vec::with_capacity(1 << 16),
            seq: 0,
            last_us: 0,
            slots: SlotMap::new(),
            spool: None,
            patcher: None,
        }
    }

    /// Number of events encoded so far.
    pub fn events_written(&self) -> u64 {
        self.seq
    }

    /// Starts an event: type byte and time delta. Times running backwards
    /// (threads racing to the queue) are clamped to a zero delta.
    #[inline]
    fn begin(&mut self, ty: u8, time_ns: u64) {
        let us = time_ns / 1000;
        if self.t.start_us.is_none() {
            self.first_event(us);
        }
        let delta = us.saturating_sub(self.last_us);
        self.last_us = self.last_us.max(us);
        self.events.push(ty);
        put_varint(&mut self.events, delta);
    }

    #[cold]
    fn first_event(&mut self, us: u64) {
        let start = match &self.t.process {
            Some(p) if p.start_time_ns != 0 => (p.start_time_ns / 1000).min(us),
            _ => us,
        };
        self.t.start_us = Some(start);
        self.last_us = start;
        if let Some(log) = &mut self.t.log {
            entry::put_start(log, start);
        }
    }

    fn write_event(&mut self, e: &Event) -> io::Result<()> {
        match e {
            Event::Alloc(a) => {
                let slot = self.slots.slot(a.thread, self.seq, &mut self.t);
                self.begin(ALLOC, a.time_ns);
                self.events.extend_from_slice(&a.address.to_le_bytes());
                put_varint(&mut self.events, a.size);
                put_varint(&mut self.events, a.stack);
                self.events.extend_from_slice(&slot.to_le_bytes());
            }
            Event::Free(f) => {
                self.begin(FREE, f.time_ns);
                self.events.extend_from_slice(&f.address.to_le_bytes());
            }
            Event::Gc(g) => {
                self.begin(GC, g.time_ns);
                put_varint(&mut self.events, g.objects);
                put_varint(&mut self.events, g.bytes);
            }
            Event::Marker(m) => {
                let name = self.t.intern_function(&m.name);
                match &mut self.t.log {
                    Some(log) => entry::put_marker_thread(log, m.thread),
                    None => self.t.marker_threads.push(m.thread),
                }
                self.begin(MARKER, m.time_ns);
                put_varint(&mut self.events, u64::from(name));
            }
            Event::Syscall(_) => {
                // mlyze has no syscall event: counted in the metadata, not stored.
                self.t.dropped_syscalls += 1;
                if let Some(log) = &mut self.t.log {
                    entry::put_dropped(log, self.t.dropped_syscalls);
                }
                return Ok(());
            }
        }
        self.seq += 1;
        if self.spool.is_some() && self.events.len() >= SPILL_AT {
            self.spill()?;
        }
        Ok(())
    }

    fn write_record(&mut self, record: &Record) -> io::Result<()> {
        let t = &mut self.t;
        match record {
            Record::Event(e) => return self.write_event(e),
            Record::Process(p) => {
                if let Some(log) = &mut t.log {
                    entry::put_process(log, p);
                }
                t.process = Some(p.clone());
            }
            Record::Object(o) => match &mut t.log {
                Some(log) => entry::put_object(log, o),
                None => t.objects.push(o.clone()),
            },
            Record::Thread(th) => match &mut t.log {
                Some(log) => entry::put_thread(log, th),
                None => t.threads.push(th.clone()),
            },
            Record::Stack(s) => {
                let frames = s.frames.iter().map(|f| t.frame_ref(f)).collect();
                t.set_stack(s.id, frames);
            }
            Record::Info(pairs) => match &mut t.log {
                Some(log) => entry::put_info(log, pairs),
                None => t.info.extend(pairs.iter().cloned()),
            },
            Record::AddressSymbol { address, symbol } => {
                let (func, file, line) = t.symbol_ref(symbol);
                match &mut t.log {
                    Some(log) => entry::put_address_symbol(log, *address, func, file, line),
                    None => t.address_symbols.push((*address, func, file, line)),
                }
            }
            Record::LeakScan { time_ns } => {
                // Everything before the scan goes to the spool first, so a
                // spool read as it stands yields the scan after those events.
                self.spill()?;
                let t = &mut self.t;
                match &mut t.log {
                    Some(log) => {
                        entry::put_leak_scan(log, self.seq, *time_ns);
                        t.spooled_leak_scan = true;
                    }
                    None => t.leak_scans.push(LeakScan {
                        event_seq: self.seq,
                        time_ns: *time_ns,
                        blocks: Vec::new(),
                    }),
                }
            }
            Record::BlockClass { address, kind } => {
                if !t.spooled_leak_scan && t.leak_scans.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "mlyze: a BlockClass record before any LeakScan record",
                    ));
                }
                match &mut t.log {
                    Some(log) => entry::put_block_class(log, *address, *kind),
                    None => {
                        if let Some(scan) = t.leak_scans.last_mut() {
                            scan.blocks.push((*address, *kind));
                        }
                    }
                }
            }
        }
        if self.t.log.as_ref().is_some_and(|l| l.len() >= SPILL_AT) {
            self.spill()?;
        }
        Ok(())
    }

    /// Appends the pending log and events to the spool as two chunks.
    fn spill(&mut self) -> io::Result<()> {
        let Some(sp) = &mut self.spool else {
            return Ok(());
        };
        if let Some(log) = &mut self.t.log {
            if !log.is_empty() {
                spool::write_chunk(sp.file.io(), spool::CHUNK_RECORDS, log)?;
                let start = sp.len + spool::CHUNK_HEAD as u64;
                sp.log_ranges.push((start, log.len() as u64));
                sp.len = start + log.len() as u64;
                log.clear();
            }
        }
        if !self.events.is_empty() {
            spool::write_chunk(sp.file.io(), spool::CHUNK_EVENTS, &self.events)?;
            let start = sp.len + spool::CHUNK_HEAD as u64;
            let len = self.events.len() as u64;
            match sp.event_ranges.last_mut() {
                // Merge adjacent ranges only when nothing separates them.
                Some((off, l)) if *off + *l == start => *l += len,
                _ => sp.event_ranges.push((start, len)),
            }
            sp.len = start + len;
            self.events.clear();
        }
        Ok(())
    }

    /// The tables a spooling writer logged: its log chunks replayed from the
    /// spool (event chunks skipped), then the entries not spilled yet. The
    /// run-time tables (name maps, log buffer) are dropped first. Stacks stay
    /// in the log when their ids ascend in it (each set once, in order: what
    /// the preload writes), and the metadata reads them from there; otherwise
    /// (ids out of order, a stack set again) the log is replayed a second time
    /// with them, into the tables the in-memory writer would have.
    /// Returns the entries not spilled when the stacks stay in the log.
    fn replay_spool(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(sp) = &mut self.spool else {
            return Ok(None);
        };
        let pending = std::mem::take(&mut self.t).log.unwrap_or_default();
        let mut order = spool::StackOrder::default();
        let mut t = Tables::default();
        each_log_chunk(
            sp.file.io(),
            &sp.log_ranges,
            &pending,
            sp.len,
            &mut |buf, base| {
                spool::replay(&mut t, buf, base, None, spool::Stacks::Skip(&mut order))
            },
        )?;
        if order.out_of_order {
            t = Tables::default();
            each_log_chunk(
                sp.file.io(),
                &sp.log_ranges,
                &pending,
                sp.len,
                &mut |buf, base| spool::replay(&mut t, buf, base, None, spool::Stacks::Keep),
            )?;
        }
        self.t = t;
        Ok((!order.out_of_order).then_some(pending))
    }

    fn finish_inner(self) -> io::Result<()> {
        self.finish_awaiting(None).map(|_| ())
    }

    /// Writes the file; with `awaited`, keeps room for that scan (placed
    /// after every event, blank meanwhile) and returns it.
    fn finish_awaiting(
        mut self,
        awaited: Option<(u64, Vec<u64>)>,
    ) -> io::Result<Option<ClassesRoom>> {
        let in_log = self.replay_spool()?;
        let awaiting = awaited.is_some();
        let event_seq = self.seq;
        self.t.awaited = awaited.map(|(time_ns, blocks)| AwaitedScan {
            event_seq,
            time_ns,
            blocks,
        });
        let Writer {
            out,
            t,
            spool,
            events,
            patcher,
            ..
        } = &mut self;
        let mut from = match (spool.as_mut(), &in_log) {
            (Some(sp), Some(pending)) => StackFrom::Log {
                len: sp.len,
                ranges: &sp.log_ranges,
                io: sp.file.io(),
                pending,
            },
            _ => StackFrom::Tables,
        };
        let too_long = |_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "mlyze metadata exceeds the 4 GiB its 32-bit length field can describe",
            )
        };
        let patch_len = if patcher.is_some() {
            out.write_all(&header(t.header_start_us(), 0))?;
            let mut counted = Counting { inner: out, n: 0 };
            t.write_metadata_from(&mut counted, &mut from)?;
            Some(u32::try_from(counted.n).map_err(too_long)?)
        } else {
            let meta_len = u32::try_from(t.metadata_len(&mut from)?).map_err(too_long)?;
            out.write_all(&header(t.header_start_us(), meta_len))?;
            t.write_metadata_from(out, &mut from)?;
            None
        };
        if let Some(sp) = spool {
            copy_ranges(sp.file.io(), &sp.event_ranges, out)?;
        }
        out.write_all(events)?;
        out.flush()?;
        if let (Some(len), Some(p)) = (patch_len, patcher.as_mut()) {
            p(super::METADATA_LEN_AT as u64, &len.to_le_bytes())?;
        }
        let room = match (
            awaiting,
            patch_len,
            self.t.awaited.take(),
            self.patcher.take(),
        ) {
            (false, ..) => None,
            (true, Some(len), Some(scan), Some(patcher)) => {
                let first = self.t.leak_scans.is_empty();
                // The entry is followed by the list's `]` and the two `}`.
                let entry = scan.entry_len(first);
                let at = HEADER_LEN as u64 + u64::from(len) - 3 - entry;
                Some(ClassesRoom {
                    scan,
                    first,
                    at,
                    patcher,
                })
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "mlyze: room for classes needs a header patcher",
                ))
            }
        };
        if let Some(sp) = self.spool.take() {
            drop(sp.file);
            if let Some(remove) = sp.remover {
                remove();
            } else if let Some(path) = &sp.path {
                // The file is complete: a spool that can no longer be
                // reached by its path (a process that chroot'ed, a
                // directory renamed) stays beside it rather than failing it.
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(room)
    }
}

/// Called with a stack's rank in the metadata, its id, its frames (innermost first).
type EachStack<'a> = dyn FnMut(usize, StackId, &[FrameRef]) -> io::Result<()> + 'a;

/// Where the metadata's stacks come from.
enum StackFrom<'a> {
    /// `Tables::stacks`.
    Tables,
    /// The stack entries of a spool's log (of `len` bytes) and of `pending`
    /// (entries not spilled), listed once each in ascending id order.
    Log {
        io: &'a mut dyn SpoolIo,
        /// The log chunks' payloads (`SpoolFile::log_ranges`).
        ranges: &'a [(u64, u64)],
        len: u64,
        pending: &'a [u8],
    },
}

/// Calls `each` with the payload of every log chunk of the spool `io` (at
/// `ranges`), then with `pending` (at `len`, the spool's end), and the spool
/// offset of each.
fn each_log_chunk(
    io: &mut dyn SpoolIo,
    ranges: &[(u64, u64)],
    pending: &[u8],
    len: u64,
    each: &mut dyn FnMut(&[u8], u64) -> crate::error::Result<()>,
) -> io::Result<()> {
    let fail = |e: crate::error::FormatError| match e {
        crate::error::FormatError::Io { source, .. } => source,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    };
    let mut buf = Vec::new();
    for &(at, n) in ranges {
        io.seek(SeekFrom::Start(at))?;
        buf.clear();
        let read = (&mut *io).take(n).read_to_end(&mut buf)?;
        if read as u64 != n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("spool log chunk at {at} shorter than its {n} bytes"),
            ));
        }
        each(&buf, at).map_err(fail)?;
    }
    // Left at the spool's end, as a walk over every chunk would leave it.
    io.seek(SeekFrom::Start(len))?;
    each(pending, len).map_err(fail)
}

/// Copies byte ranges of the spool `from` to `to` through a buffer of 256
/// KiB: a writer that writes in aligned blocks (a
/// [`crate::blocks::BlockFile`]) takes the whole blocks of each piece
/// straight from it. The kernel's file-to-file copy (`io::copy` between
/// files) was no faster for a plain file (`tracer convert --to mlyze` of
/// 10M events: 0.46-0.49 s either way) and ~1.5x slower into blocks.
pub(super) fn copy_ranges<W: Write>(
    from: &mut dyn SpoolIo,
    ranges: &[(u64, u64)],
    to: &mut W,
) -> io::Result<()> {
    let most = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let mut buf = vec![0u8; most.min(256 << 10) as usize];
    for &(off, len) in ranges {
        from.seek(SeekFrom::Start(off))?;
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            from.read_exact(&mut buf[..n]).map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("spool shorter than expected: {len} bytes at offset {off}"),
                ),
                _ => e,
            })?;
            to.write_all(&buf[..n])?;
            left -= n as u64;
        }
    }
    Ok(())
}

impl Writer<File> {
    /// Creates the final file `path` (exclusively, with `.1`, `.2`, … when the
    /// name is taken; the extension `.mlyze` is appended when missing) and its
    /// spool `FINAL.spool` next to it. Returns the writer and the final name.
    /// The final file stays empty until `finish`; `flush` makes the spool
    /// recoverable with [`super::recover`].
    pub fn create(path: &Path) -> io::Result<(Writer<File>, PathBuf)> {
        let (out, final_path) = output::create_exclusive(path, "mlyze")?;
        let (file, spool_path) = match spool::create_spool_file(&final_path) {
            Ok(x) => x,
            Err(e) => {
                drop(out);
                let _ = std::fs::remove_file(&final_path);
                return Err(e);
            }
        };
        // The header's length is filled in through a second handle: the
        // metadata is then written in one pass.
        let patch = out.try_clone();
        let mut w = Writer::new(out);
        if let Ok(f) = patch {
            w.set_header_patcher(Box::new(move |off, bytes| {
                std::os::unix::fs::FileExt::write_all_at(&f, bytes, off)
            }));
        }
        if let Err(e) = w.attach_spool(SpoolStore::File(file), Some(spool_path.clone())) {
            drop(w);
            let _ = std::fs::remove_file(&final_path);
            let _ = std::fs::remove_file(&spool_path);
            return Err(e);
        }
        Ok((w, final_path))
    }
}

impl<W: Write> Writer<W> {
    /// A writer to `out` that spools into `spool`, an empty storage it can
    /// write, then read back at `finish` (a file opened read-write, typically
    /// created with [`super::spool::create_spool_file`]). `spool_path`, when
    /// given, is deleted after a successful `finish`. For callers that manage
    /// their own descriptors; [`Writer::create`] does all of this for a path.
    pub fn with_spool<S: SpoolIo + 'static>(
        out: W,
        spool: S,
        spool_path: Option<PathBuf>,
    ) -> io::Result<Self> {
        let mut w = Writer::new(out);
        w.attach_spool(SpoolStore::Other(Box::new(spool)), spool_path)?;
        Ok(w)
    }

    /// Same as [`Writer::with_spool`] for a plain file (a detached replay reads
    /// a clone of it: no [`Writer::set_spool_reader`] needed).
    pub fn with_spool_file(out: W, spool: File, spool_path: Option<PathBuf>) -> io::Result<Self> {
        let mut w = Writer::new(out);
        w.attach_spool(SpoolStore::File(spool), spool_path)?;
        Ok(w)
    }

    fn attach_spool(&mut self, mut store: SpoolStore, path: Option<PathBuf>) -> io::Result<()> {
        store.io().write_all(&spool::header_bytes())?;
        self.t.log = Some(Vec::with_capacity(1 << 12));
        self.events = Vec::with_capacity(SPILL_AT + super::MAX_EVENT);
        self.spool = Some(SpoolFile {
            file: store,
            reader: None,
            path,
            remover: None,
            len: spool::SPOOL_HEADER_LEN as u64,
            event_ranges: Vec::new(),
            log_ranges: Vec::new(),
        });
        Ok(())
    }

    /// Lets [`TraceWriter::detach_allocation_replay`] read the spool with
    /// `reader` (a spool given as a plain file needs none).
    pub fn set_spool_reader(&mut self, reader: SpoolReader) {
        if let Some(sp) = &mut self.spool {
            sp.reader = Some(reader);
        }
    }

    /// Has a successful `finish` call `remover` instead of deleting the
    /// spool's path itself (see [`SpoolRemover`]).
    pub fn set_spool_remover(&mut self, remover: SpoolRemover) {
        if let Some(sp) = &mut self.spool {
            sp.remover = Some(remover);
        }
    }

    /// Has `finish` write the metadata in one pass and fill in its length
    /// with `patcher` (see [`HeaderPatcher`]).
    pub fn set_header_patcher(&mut self, patcher: HeaderPatcher) {
        self.patcher = Some(patcher);
    }

    /// Path of the spool file, while the writer is open (when known).
    pub fn spool_path(&self) -> Option<&Path> {
        self.spool.as_ref().and_then(|s| s.path.as_deref())
    }
}

impl<W: Write + Send> TraceWriter for Writer<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        self.write_record(record)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.spill()?;
        // A spool that buffers (a `BlockFile`) writes what it holds.
        match &mut self.spool {
            Some(sp) => sp.file.io().flush(),
            None => Ok(()),
        }
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        (*self).finish_inner()
    }

    fn replays_allocations(&self) -> bool {
        true
    }

    fn finishes_before_classes(&self) -> bool {
        self.patcher.is_some() && self.spool.is_some()
    }

    fn finish_before_classes(
        self: Box<Self>,
        time_ns: u64,
        blocks: Vec<u64>,
    ) -> io::Result<Box<dyn ClassesLater>> {
        if !self.finishes_before_classes() {
            return Err(io::ErrorKind::Unsupported.into());
        }
        match (*self).finish_awaiting(Some((time_ns, blocks)))? {
            Some(room) => Ok(Box::new(room)),
            None => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    fn replay_allocations(&mut self, f: &mut dyn FnMut(u64, u64)) -> io::Result<bool> {
        match &mut self.spool {
            Some(sp) => {
                let io = sp.file.io();
                let mut read = |buf: &mut [u8], off: u64| {
                    io.seek(SeekFrom::Start(off))?;
                    io.read_exact(buf)
                };
                replay_events(&sp.event_ranges, &mut read, &self.events, f)?;
                // Later chunks are appended where the spool ends.
                io.seek(SeekFrom::Start(sp.len))?;
            }
            None => replay_events(&[], &mut |_, _| Ok(()), &self.events, f)?,
        }
        Ok(true)
    }

    fn detach_allocation_replay(&mut self) -> Option<crate::AllocationReplay> {
        let (reader, ranges) = match &mut self.spool {
            None => (None, Vec::new()),
            Some(sp) => {
                // The reader reads the file: what the spool buffers goes first.
                sp.file.io().flush().ok()?;
                let reader: SpoolReader = match (&sp.reader, &sp.file) {
                    (Some(r), _) => r.clone(),
                    (None, SpoolStore::File(f)) => std::sync::Arc::new(f.try_clone().ok()?),
                    (None, SpoolStore::Other(_)) => return None,
                };
                (Some(reader), sp.event_ranges.clone())
            }
        };
        let pending = self.events.clone();
        Some(Box::new(move |f| {
            let mut read = |buf: &mut [u8], off: u64| match &reader {
                Some(r) => r.read_exact_at(buf, off),
                None => Ok(()),
            };
            replay_events(&ranges, &mut read, &pending, f)?;
            Ok(true)
        }))
    }
}

/// Calls `f(address, size)` for every allocation among the events of the
/// spool's event chunks at `ranges` (read with `read(buf, offset)`, a
/// megabyte at a time), then among `pending`, the events not spooled yet.
fn replay_events(
    ranges: &[(u64, u64)],
    read: &mut dyn FnMut(&mut [u8], u64) -> io::Result<()>,
    pending: &[u8],
    f: &mut dyn FnMut(u64, u64),
) -> io::Result<()> {
    let mut replay = super::replay::AllocReplay::new();
    let mut buf = vec![0u8; if ranges.is_empty() { 0 } else { 1 << 20 }];
    for &(off, len) in ranges {
        let mut at = off;
        while at < off + len {
            let n = (off + len - at).min(buf.len() as u64) as usize;
            read(&mut buf[..n], at)?;
            replay.feed(&buf[..n], f)?;
            at += n as u64;
        }
        replay.end()?;
    }
    replay.feed(pending, f)?;
    replay.end()
}

impl<W: Write> Writer<W> {
    /// Completes the file (same as [`TraceWriter::finish`], without boxing).
    pub fn finish(self) -> io::Result<()> {
        self.finish_inner()
    }
}

/// Decimal digits of an integer, without `core::fmt` (the metadata writes
/// one or four integers for every frame of every stack, twice: counting,
/// then writing; through `write!` that was most of the writer's time at
/// exit for a trace with thousands of deep stacks).
struct Digits([u8; 20]);

impl Digits {
    fn new() -> Self {
        Digits([0; 20])
    }

    fn of(&mut self, mut v: u64) -> &[u8] {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut i = self.0.len();
        while v >= 100 {
            let p = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            self.0[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
        }
        if v >= 10 {
            let p = v as usize * 2;
            i -= 2;
            self.0[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
        } else {
            i -= 1;
            self.0[i] = b'0' + v as u8;
        }
        &self.0[i..]
    }
}

/// One frame object of `stack_traces` into `buf`: its length.
fn frame_text(buf: &mut [u8; FRAME_TEXT_MAX], file: u32, line: u32, func: u32) -> usize {
    let mut n = 0;
    let mut d = Digits::new();
    for (text, v) in [
        (&b"{\"file_id\":"[..], file),
        (&b",\"line\":"[..], line),
        (&b",\"func_id\":"[..], func),
    ] {
        buf[n..n + text.len()].copy_from_slice(text);
        n += text.len();
        let digits = d.of(u64::from(v));
        buf[n..n + digits.len()].copy_from_slice(digits);
        n += digits.len();
    }
    buf[n] = b'}';
    n + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_and_frames_are_what_core_fmt_writes() {
        let mut d = Digits::new();
        for v in [
            0,
            1,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            65_535,
            1 << 32,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(d.of(v), v.to_string().as_bytes(), "{v}");
        }
        for (file, line, func) in [(0, 0, 0), (1, 105, 37), (u32::MAX, u32::MAX, u32::MAX)] {
            let mut buf = [0u8; FRAME_TEXT_MAX];
            let n = frame_text(&mut buf, file, line, func);
            assert_eq!(
                String::from_utf8(buf[..n].to_vec()).unwrap(),
                format!("{{\"file_id\":{file},\"line\":{line},\"func_id\":{func}}}")
            );
        }
    }

    /// The remembered texts are those of the frame and address asked for,
    /// whatever else shares their slot: 40,000 frames over 3,000 addresses
    /// (1,024 slots at first, so slots are shared), the same address with
    /// different ids, and ids that `ids` maps (as a late symbol does).
    #[test]
    fn remembered_frame_texts_are_the_frames_own() {
        let mut texts = FrameTexts::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut out = Vec::new();
        for _ in 0..40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = FrameRef {
                addr: 0x5555_0000_0000 + (x % 3000) * 0x40,
                func: (x >> 20) as u32 % 3,
                file: (x >> 30) as u32 % 2,
                line: if x & 1 == 0 { 0 } else { u32::MAX },
            };
            let late = |f: &FrameRef| (f.func + 7, f.file, f.line);
            out.clear();
            texts.frame(&mut out, &f, late);
            let (func, file, line) = late(&f);
            assert_eq!(
                String::from_utf8(out.clone()).unwrap(),
                format!("{{\"file_id\":{file},\"line\":{line},\"func_id\":{func}}}")
            );
            out.clear();
            texts.address(&mut out, f.addr ^ (x & 0xff00_0000_0000_0000));
            assert_eq!(
                out,
                (f.addr ^ (x & 0xff00_0000_0000_0000))
                    .to_string()
                    .as_bytes()
            );
        }
        let mut out = Vec::new();
        texts.address(&mut out, 0);
        texts.address(&mut out, u64::MAX);
        assert_eq!(out, format!("0{}", u64::MAX).as_bytes());

        // 3,000 addresses asked twice in a row, round after round (half
        // the lookups miss at first): the slots grow, to the cap (at 4,096
        // slots the collisions still miss more than 1 lookup in 16).
        let mut repeat = FrameTexts::default();
        for _ in 0..60 {
            for a in 0..3000u64 {
                for _ in 0..2 {
                    out.clear();
                    repeat.address(&mut out, 0x5555_0000_0000 + a * 0x40);
                }
            }
        }
        assert_eq!(repeat.addresses.bits, TEXT_SLOTS_MAX_BITS);

        // All-new frames, asked many times over: the slots stay as made.
        let mut fresh = FrameTexts::default();
        let mut out = Vec::new();
        for i in 0..200_000u64 {
            out.clear();
            fresh.frame(
                &mut out,
                &FrameRef {
                    addr: i,
                    ..FrameRef::default()
                },
                |f| (f.func, f.file, f.line),
            );
        }
        assert_eq!(fresh.frames.bits, TEXT_SLOTS_MIN_BITS);
    }

    #[test]
    fn trie_reads_back_every_stack_and_shares_outer_frames() {
        let mut t = Trie::default();
        // Innermost first; the last two frames (outermost) are shared.
        let stacks: Vec<Vec<u64>> = vec![
            vec![0x10, 0x20, 0x30, 0x40],
            vec![0x11, 0x20, 0x30, 0x40],
            vec![0x30, 0x40],
            vec![0x40, 0x30],
            vec![],
            vec![0x10, 0x20, 0x30, 0x40],
        ];
        let leaves: Vec<u32> = stacks.iter().map(|s| t.insert(s.iter().copied())).collect();
        for (s, &leaf) in stacks.iter().zip(&leaves) {
            assert_eq!(&t.addresses(leaf).collect::<Vec<_>>(), s);
        }
        assert_eq!(leaves[4], NO_NODE);
        assert_eq!(leaves[0], leaves[5]);
        // Distinct prefixes from the outermost end: 40, 40-30, 40-30-20,
        // 40-30-20-10, 40-30-20-11, 30, 30-40.
        assert_eq!(t.addr.len(), 7);
    }

    /// Consecutive ids need no map; ids out of order, gaps and ids below
    /// the first switch to one, and every id keeps its position.
    #[test]
    fn stack_index_finds_every_id_in_and_out_of_order() {
        for ids in [
            (5..200u64).collect::<Vec<_>>(),
            (5..100).chain([300, 100, 2, 101]).collect(),
            vec![9, 3, 4, 5],
            vec![0, 1, u64::MAX, 2],
        ] {
            let mut index = StackIndex::default();
            let mut stacks: Vec<(StackId, Frames)> = Vec::new();
            for &id in &ids {
                assert_eq!(index.get(id, &stacks), None, "{id} before insertion");
                index.insert(id, &stacks);
                stacks.push((id, Frames::Unresolved(NO_NODE)));
                for (pos, &seen) in ids.iter().take(stacks.len()).enumerate() {
                    assert_eq!(index.get(seen, &stacks), Some(pos));
                }
            }
            let dense = ids.windows(2).all(|w| w[0].checked_add(1) == Some(w[1]));
            assert_eq!(index.map.is_none(), dense, "{ids:?}");
            assert_eq!(index.get(1000, &stacks), None);
        }
    }

    #[test]
    fn trie_survives_growth_with_many_distinct_stacks() {
        let mut t = Trie::default();
        let stack = |i: u64| [0x5000 + i % 97, 0x6000 + i / 97, 0x7000, 0x8000];
        let leaves: Vec<u32> = (0..5000u64)
            .map(|i| t.insert(stack(i).into_iter()))
            .collect();
        for (i, &leaf) in leaves.iter().enumerate() {
            assert_eq!(t.addresses(leaf).collect::<Vec<_>>(), stack(i as u64));
        }
        // 0x8000, 0x7000, 52 values of i / 97, then one leaf per i.
        assert_eq!(t.addr.len(), 2 + 52 + 5000);
        assert!(3 * t.index.len() >= 4 * t.addr.len());
    }
}
