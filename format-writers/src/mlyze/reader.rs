//! The mlyze reader: header and metadata up front, then events streamed.
//!
//! The metadata is held in memory (it is what the events refer to); events are
//! decoded straight out of the input buffer, one per `next`, without allocating.
//! Records come out in model order: the process, info, objects, threads, the
//! stacks of the metadata, late symbol resolutions, then the events, with each
//! leak scan (and its block classes) placed before the event it preceded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;

use serde::Deserialize;

use super::meta::{json_error, DeltaRuns, DocFrame, MetaRead, Runs, StackGen};
use super::spool::{replay, Stacks, CHUNK_EVENTS, CHUNK_RECORDS, SPOOL_MAGIC, SPOOL_VERSION};
use super::writer::Tables;
use super::{decode_event, Bad, RawEvent, ALLOC, EXPECTED_TYPE, FREE, GC, HEADER_LEN, MAGIC};
use super::{MARKER, MAX_EVENT, SLOTS, VERSION};
use crate::bytes::ByteSource;
use crate::error::{FormatError, Result};
use crate::fasthash::FastMap;
use crate::model::*;

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    stack_traces: Runs<DocFrame>,
    #[serde(default)]
    files: HashMap<String, String>,
    #[serde(default)]
    functions: HashMap<String, String>,
    #[serde(default)]
    libtracer: Option<Ext>,
}

#[derive(Deserialize)]
struct Ext {
    version: u32,
    #[serde(default)]
    unresolved_function: Option<u64>,
    /// Written before `stack_addresses_delta` replaced it; still read.
    #[serde(default)]
    stack_addresses: Runs<u64>,
    #[serde(default)]
    stack_addresses_delta: Option<DeltaRuns>,
    #[serde(default)]
    process: Option<ProcessJson>,
    #[serde(default)]
    objects: Vec<ObjectJson>,
    #[serde(default)]
    threads: Vec<ThreadJson>,
    #[serde(default)]
    thread_slots: Vec<(u64, u16, u32)>,
    #[serde(default)]
    address_symbols: Vec<(u64, u64, u64, u32)>,
    #[serde(default)]
    info: Vec<(String, String)>,
    #[serde(default)]
    marker_threads: Vec<u32>,
    #[serde(default)]
    #[allow(dead_code)]
    dropped_syscalls: u64,
    #[serde(default)]
    leak_scans: Vec<LeakScanJson>,
}

#[derive(Deserialize)]
struct LeakScanJson {
    event_seq: u64,
    time_ns: u64,
    /// `[address, kind code]`.
    blocks: Vec<(u64, u64)>,
}

#[derive(Deserialize)]
struct ProcessJson {
    pid: u32,
    executable: String,
    argv: Vec<String>,
    start_time_ns: u64,
}

#[derive(Deserialize)]
struct ObjectJson {
    path: String,
    load_address: u64,
    size: u64,
}

#[derive(Deserialize)]
struct ThreadJson {
    tid: u32,
    name: String,
}

enum State {
    Header,
    Records,
    Events,
    Done,
}

/// Which stack ids have been announced (by the metadata or by an empty stack
/// the reader made up for an id the metadata lacks).
struct KnownStacks {
    dense: Vec<u64>,
    sparse: HashSet<u64>,
}

impl KnownStacks {
    fn new(ids: &[u64]) -> Self {
        // The bit set covers ids up to a bound proportional to the number of
        // stacks (itself bounded by the file size); others go to the hash set.
        let cap = ids.len() as u64 * 4 + 4096;
        let mut k = KnownStacks {
            dense: vec![0; (cap / 64) as usize],
            sparse: HashSet::new(),
        };
        for &id in ids {
            k.insert(id);
        }
        k
    }

    #[inline]
    fn contains(&self, id: u64) -> bool {
        match self.dense.get((id / 64) as usize) {
            Some(w) => w & (1 << (id % 64)) != 0,
            None => self.sparse.contains(&id),
        }
    }

    fn insert(&mut self, id: u64) {
        match self.dense.get_mut((id / 64) as usize) {
            Some(w) => *w |= 1 << (id % 64),
            None => {
                self.sparse.insert(id);
            }
        }
    }
}

/// What the events need from the metadata.
struct EventCtx {
    now_us: u64,
    seq: u64,
    /// Tid of every slot; `None` when the file has no slot map (the raw slot is the tid).
    slot_tids: Option<Vec<u32>>,
    slot_changes: Vec<(u64, u16, u32)>,
    next_change: usize,
    next_change_seq: u64,
    marker_threads: Vec<u32>,
    markers: usize,
    functions: FastMap<u64, String>,
    known: KnownStacks,
}

impl EventCtx {
    fn new(start_us: u64, functions: FastMap<u64, String>, stack_ids: &[u64]) -> Self {
        EventCtx {
            now_us: start_us,
            seq: 0,
            slot_tids: None,
            slot_changes: Vec::new(),
            next_change: 0,
            next_change_seq: u64::MAX,
            marker_threads: Vec::new(),
            markers: 0,
            functions,
            known: KnownStacks::new(stack_ids),
        }
    }

    /// Appends slot assignments (in event order) and re-arms the check.
    fn add_slot_changes(&mut self, changes: &[(u64, u16, u32)]) {
        self.slot_changes.extend_from_slice(changes);
        self.next_change_seq = self
            .slot_changes
            .get(self.next_change)
            .map_or(u64::MAX, |c| c.0);
    }

    #[cold]
    fn apply_slot_changes(&mut self) {
        let tids = self
            .slot_tids
            .get_or_insert_with(|| (0..SLOTS as u32).collect());
        while let Some(&(seq, slot, tid)) = self.slot_changes.get(self.next_change) {
            if seq > self.seq {
                break;
            }
            tids[slot as usize] = tid;
            self.next_change += 1;
        }
        self.next_change_seq = self
            .slot_changes
            .get(self.next_change)
            .map_or(u64::MAX, |c| c.0);
    }

    /// Maps a wire event to a model event; returns a made-up empty stack first
    /// when an ALLOC names a stack id the metadata does not have.
    #[inline]
    fn decode(&mut self, ev: RawEvent) -> (Option<Record>, Event) {
        if self.seq >= self.next_change_seq {
            self.apply_slot_changes();
        }
        self.seq += 1;
        self.now_us = self.now_us.saturating_add(ev.delta);
        let time_ns = self.now_us.saturating_mul(1000);
        match ev.ty {
            ALLOC => {
                let thread = match &self.slot_tids {
                    Some(t) => t[ev.slot as usize],
                    None => u32::from(ev.slot),
                };
                let extra = if self.known.contains(ev.b) {
                    None
                } else {
                    self.known.insert(ev.b);
                    Some(Record::Stack(Stack {
                        id: ev.b,
                        frames: Vec::new(),
                    }))
                };
                let alloc = Alloc {
                    time_ns,
                    thread,
                    address: ev.addr,
                    size: ev.a,
                    stack: ev.b,
                };
                (extra, Event::Alloc(alloc))
            }
            FREE => (
                None,
                Event::Free(Free {
                    time_ns,
                    thread: 0,
                    address: ev.addr,
                }),
            ),
            GC => (
                None,
                Event::Gc(Gc {
                    time_ns,
                    objects: ev.a,
                    bytes: ev.b,
                }),
            ),
            _ => {
                let thread = self.marker_threads.get(self.markers).copied().unwrap_or(0);
                self.markers += 1;
                let name = match self.functions.get(&ev.a) {
                    Some(n) => n.clone(),
                    None => format!("#{}", ev.a),
                };
                (
                    None,
                    Event::Marker(Marker {
                        time_ns,
                        thread,
                        name,
                    }),
                )
            }
        }
    }
}

/// Streaming mlyze reader.
pub struct Reader<R> {
    src: ByteSource<R>,
    state: State,
    records: std::vec::IntoIter<Record>,
    /// The metadata's stacks, made one at a time after `records`.
    stacks: Option<Box<StackGen>>,
    /// Records after the stacks (late symbol resolutions).
    after: std::vec::IntoIter<Record>,
    /// An event held back while a made-up stack goes first.
    held: Option<Record>,
    ctx: Option<EventCtx>,
    /// Set when the input is a spool rather than a finished file.
    spool: Option<Box<SpoolIn>>,
    /// Leak scans of the metadata not yet reached in the event stream, each
    /// with the number of events before it and its records.
    scans: VecDeque<(u64, Vec<Record>)>,
    /// Records of a scan being yielded.
    scan_out: std::vec::IntoIter<Record>,
    /// Event sequence number of the next scan (`u64::MAX`: none).
    next_scan_seq: u64,
}

/// Reading position inside a spool (see `spool.rs` for its layout).
struct SpoolIn {
    tables: Tables,
    /// Records of the last log chunk not yet yielded.
    pending: VecDeque<Record>,
    /// Payload of the current events chunk, and the next event in it.
    chunk: Vec<u8>,
    pos: usize,
    /// File offset of `chunk[0]`.
    base: u64,
    /// How much of the tables' functions, slots and marker threads the event
    /// context has taken over.
    functions: usize,
    slots: usize,
    markers: usize,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Self {
        Reader {
            src: ByteSource::new(inner),
            state: State::Header,
            records: Vec::new().into_iter(),
            stacks: None,
            after: Vec::new().into_iter(),
            held: None,
            ctx: None,
            spool: None,
            scans: VecDeque::new(),
            scan_out: Vec::new().into_iter(),
            next_scan_seq: u64::MAX,
        }
    }

    fn read_head(&mut self) -> Result<()> {
        let mut h = [0u8; HEADER_LEN];
        self.src.read_exact(
            &mut h[..4],
            "the mlyze magic \"MTRC\" (or a spool's \"MTRS\")",
        )?;
        if &h[0..4] == SPOOL_MAGIC {
            return self.read_spool_head();
        }
        self.src
            .read_exact(&mut h[4..], "the 256-byte mlyze header")?;
        if &h[0..4] != MAGIC {
            return Err(FormatError::invalid(
                0,
                "the mlyze magic \"MTRC\"",
                format!("{:02x?}", &h[0..4]),
            ));
        }
        let version = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(FormatError::invalid(
                4,
                format!("mlyze version {VERSION}"),
                format!("version {version}"),
            ));
        }
        let start_us = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        let meta_len = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes"));
        // Parsed straight from the source: the metadata can be far larger
        // than what it describes once interned (see `meta.rs`).
        let mut m = MetaRead::new(&mut self.src, meta_len.into());
        // Through a `BufReader`: std hands it out a byte at a time without a
        // call per byte (`MetaRead::locate` places errors).
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(
            1 << 16,
            &mut m,
        ));
        let parsed = Meta::deserialize(&mut de).and_then(|meta| de.end().map(|()| meta));
        let meta = match parsed {
            Ok(meta) => meta,
            Err(e) => {
                drop(de);
                let located = json_error(&m, &e);
                m.check_rest()?;
                return Err(located);
            }
        };
        self.build(meta, start_us)
    }

    fn build(&mut self, meta: Meta, start_us: u64) -> Result<()> {
        let at = HEADER_LEN as u64;
        let bad = |what: String, found: String| FormatError::invalid(at, what, found);
        let files = id_map(meta.files, "files")?;
        let functions = id_map(meta.functions, "functions")?;
        let mut records = Vec::new();

        let mut ext = meta.libtracer;
        if let Some(e) = &ext {
            if e.version != 1 {
                return Err(bad(
                    "libtracer metadata version 1".into(),
                    e.version.to_string(),
                ));
            }
        }
        match ext.as_mut().map(|e| e.process.take()) {
            Some(Some(p)) => records.push(Record::Process(Process {
                pid: p.pid,
                executable: p.executable,
                command_line: p.argv,
                start_time_ns: p.start_time_ns,
            })),
            Some(None) => {}
            // A file from another writer: the header's start time is all we know.
            None => records.push(Record::Process(Process {
                start_time_ns: start_us.saturating_mul(1000),
                ..Process::default()
            })),
        }
        let mut addresses = Runs::default();
        let mut unresolved = None;
        let mut slot_changes = Vec::new();
        let mut marker_threads = Vec::new();
        let mut late = Vec::new();
        let mut scans = VecDeque::new();
        if let Some(e) = ext {
            let mut last_seq = 0;
            for (k, scan) in e.leak_scans.into_iter().enumerate() {
                if scan.event_seq < last_seq {
                    return Err(bad(
                        "libtracer.leak_scans in event order".into(),
                        format!("leak_scans[{k}] earlier than its predecessor"),
                    ));
                }
                last_seq = scan.event_seq;
                let mut out = Vec::with_capacity(scan.blocks.len() + 1);
                out.push(Record::LeakScan {
                    time_ns: scan.time_ns,
                });
                for (n, (address, code)) in scan.blocks.into_iter().enumerate() {
                    let kind = LeakKind::from_code(code).ok_or_else(|| {
                        bad(
                            format!("libtracer.leak_scans[{k}].blocks[{n}] with a leak kind 0..=3"),
                            code.to_string(),
                        )
                    })?;
                    out.push(Record::BlockClass { address, kind });
                }
                scans.push_back((scan.event_seq, out));
            }
            if !e.info.is_empty() {
                records.push(Record::Info(e.info));
            }
            for o in e.objects {
                records.push(Record::Object(Object {
                    path: o.path,
                    load_address: o.load_address,
                    size: o.size,
                }));
            }
            for t in e.threads {
                records.push(Record::Thread(Thread {
                    tid: t.tid,
                    name: t.name,
                }));
            }
            addresses = match e.stack_addresses_delta {
                Some(delta) => delta.0,
                None => e.stack_addresses,
            };
            if let Some(k) = &addresses.bad_key {
                return Err(bad_key("libtracer.stack_addresses", k));
            }
            unresolved = e.unresolved_function;
            if e.thread_slots.windows(2).any(|w| w[0].0 > w[1].0) {
                return Err(bad(
                    "libtracer.thread_slots in event order".into(),
                    "an entry earlier than its predecessor".into(),
                ));
            }
            slot_changes = e.thread_slots;
            marker_threads = e.marker_threads;
            late = e.address_symbols;
        }
        let symbol = |func: u64, file: u64, line: u32, whose: &dyn Fn() -> String| {
            let function = functions.get(&func).ok_or_else(|| {
                bad(
                    format!("{} naming an id of \"functions\"", whose()),
                    format!("func_id {func}"),
                )
            })?;
            let file = files.get(&file).ok_or_else(|| {
                bad(
                    format!("{} naming an id of \"files\"", whose()),
                    format!("file_id {file}"),
                )
            })?;
            Ok::<_, FormatError>(Symbol {
                function: function.clone(),
                file: file.clone(),
                line,
            })
        };

        let traces = meta.stack_traces;
        if let Some(k) = &traces.bad_key {
            return Err(bad_key("stack_traces", k));
        }
        let gen = StackGen::new(
            traces,
            addresses,
            functions.clone(),
            files.clone(),
            unresolved,
        )?;
        let ids = gen.ids();
        let before = records.len();
        for (k, (address, func, file, line)) in late.into_iter().enumerate() {
            let symbol = symbol(func, file, line, &|| {
                format!("libtracer.address_symbols[{k}]")
            })?;
            records.push(Record::AddressSymbol { address, symbol });
        }

        let mut ctx = EventCtx::new(start_us, functions, &ids);
        ctx.marker_threads = marker_threads;
        ctx.add_slot_changes(&slot_changes);
        if ctx.next_change_seq != u64::MAX {
            // A slot map exists: slots it has not assigned yet still mean themselves.
            ctx.slot_tids = Some((0..SLOTS as u32).collect());
        }
        self.ctx = Some(ctx);
        self.after = records.split_off(before).into_iter();
        self.records = records.into_iter();
        self.stacks = Some(Box::new(gen));
        self.next_scan_seq = scans.front().map_or(u64::MAX, |s| s.0);
        self.scans = scans;
        Ok(())
    }

    /// Starts yielding the next leak scan's records.
    #[cold]
    fn release_scan(&mut self) -> Option<Record> {
        let (_, records) = self.scans.pop_front()?;
        self.next_scan_seq = self.scans.front().map_or(u64::MAX, |s| s.0);
        self.scan_out = records.into_iter();
        self.scan_out.next()
    }

    /// Reads one event across a buffer boundary: gathers its bytes by structure,
    /// then decodes them like the fast path does.
    #[cold]
    fn slow_event(&mut self) -> Result<RawEvent> {
        let start = self.src.offset();
        let mut tmp = [0u8; MAX_EVENT];
        let mut n = 0;
        let ty = self.src.read_u8("an event type")?;
        tmp[0] = ty;
        n += 1;
        if ty > MARKER {
            return Err(FormatError::invalid(
                start,
                EXPECTED_TYPE,
                format!("type {ty}"),
            ));
        }
        let src = &mut self.src;
        gather_varint(src, &mut tmp, &mut n, "the time delta of an event")?;
        match ty {
            ALLOC => {
                gather_fixed(src, &mut tmp, &mut n, 8, "the address of an ALLOC event")?;
                gather_varint(src, &mut tmp, &mut n, "the size of an ALLOC event")?;
                gather_varint(src, &mut tmp, &mut n, "the stack id of an ALLOC event")?;
                gather_fixed(src, &mut tmp, &mut n, 2, "the thread of an ALLOC event")?;
            }
            FREE => gather_fixed(src, &mut tmp, &mut n, 8, "the address of a FREE event")?,
            GC => {
                gather_varint(src, &mut tmp, &mut n, "the object count of a GC event")?;
                gather_varint(src, &mut tmp, &mut n, "the byte count of a GC event")?;
            }
            _ => gather_varint(src, &mut tmp, &mut n, "the name id of a MARKER event")?,
        }
        match decode_event(&tmp[..n]) {
            Ok((ev, _)) => Ok(ev),
            Err(Bad::Invalid {
                pos,
                expected,
                found,
            }) => Err(FormatError::invalid(start + pos as u64, expected, found)),
            Err(Bad::Incomplete) => Err(FormatError::truncated(
                self.src.offset(),
                "the rest of an event",
            )),
        }
    }

    #[inline]
    fn next_event(&mut self) -> Option<Result<Record>> {
        if let Some(r) = self.held.take() {
            return Some(Ok(r));
        }
        if let Some(r) = self.scan_out.next() {
            return Some(Ok(r));
        }
        if self.spool.is_some() {
            return self.next_spooled();
        }
        if self
            .ctx
            .as_ref()
            .is_some_and(|c| c.seq >= self.next_scan_seq)
        {
            return self.release_scan().map(Ok);
        }
        let start = self.src.offset();
        let raw = match self.src.peek_buf() {
            Err(e) => return Some(Err(e)),
            // Scans placed after the last event come at the end.
            Ok([]) => return self.release_scan().map(Ok),
            Ok(buf) => match decode_event(buf) {
                Ok((ev, n)) => {
                    self.src.consume(n);
                    ev
                }
                Err(Bad::Incomplete) if buf.len() < MAX_EVENT => match self.slow_event() {
                    Ok(ev) => ev,
                    Err(e) => return Some(Err(e)),
                },
                Err(Bad::Incomplete) => unreachable!("a full-size buffer always holds an event"),
                Err(Bad::Invalid {
                    pos,
                    expected,
                    found,
                }) => {
                    return Some(Err(FormatError::invalid(
                        start + pos as u64,
                        expected,
                        found,
                    )))
                }
            },
        };
        Some(Ok(self.model_event(raw)))
    }

    /// Maps a wire event to its record, holding it back behind a made-up stack.
    #[inline]
    fn model_event(&mut self, raw: RawEvent) -> Record {
        let ctx = self.ctx.as_mut().expect("metadata read before events");
        let (extra, ev) = ctx.decode(raw);
        match extra {
            Some(stack) => {
                self.held = Some(Record::Event(ev));
                stack
            }
            None => Record::Event(ev),
        }
    }

    fn read_spool_head(&mut self) -> Result<()> {
        let version = self.src.read_u32_le("the spool version")?;
        if version != SPOOL_VERSION {
            return Err(FormatError::invalid(
                4,
                format!("spool version {SPOOL_VERSION}"),
                format!("version {version}"),
            ));
        }
        self.src.skip(8, "the reserved spool header bytes")?;
        self.ctx = Some(EventCtx::new(0, FastMap::default(), &[]));
        self.spool = Some(Box::new(SpoolIn {
            tables: Tables::default(),
            pending: VecDeque::new(),
            chunk: Vec::new(),
            pos: 0,
            base: 0,
            functions: 0,
            slots: 0,
            markers: 0,
        }));
        Ok(())
    }

    /// The next record of a spool: pending log records, then the events of the
    /// current chunk, then the next chunk.
    fn next_spooled(&mut self) -> Option<Result<Record>> {
        loop {
            let sp = self.spool.as_mut().expect("spool mode");
            if let Some(r) = sp.pending.pop_front() {
                return Some(Ok(r));
            }
            if sp.pos < sp.chunk.len() {
                let at = sp.base + sp.pos as u64;
                return Some(match decode_event(&sp.chunk[sp.pos..]) {
                    Ok((raw, n)) => {
                        sp.pos += n;
                        Ok(self.model_event(raw))
                    }
                    Err(Bad::Incomplete) => Err(FormatError::truncated(
                        sp.base + sp.chunk.len() as u64,
                        "the rest of an event (cut by the end of its spool chunk)",
                    )),
                    Err(Bad::Invalid {
                        pos,
                        expected,
                        found,
                    }) => Err(FormatError::invalid(at + pos as u64, expected, found)),
                });
            }
            match self.next_chunk() {
                Ok(true) => continue,
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Reads the next spool chunk; false at the end of the spool.
    fn next_chunk(&mut self) -> Result<bool> {
        if self.src.at_eof()? {
            return Ok(false);
        }
        let at = self.src.offset();
        let what = "a complete spool chunk (a torn last chunk: use `mlyze::recover`)";
        let kind = self.src.read_u8(what)?;
        let len = self.src.read_u32_le(what)?;
        let base = self.src.offset();
        let payload = self.src.read_vec(len.into(), what)?;
        let sp = self.spool.as_mut().expect("spool mode");
        let ctx = self.ctx.as_mut().expect("spool context");
        match kind {
            CHUNK_RECORDS => {
                let t = &mut sp.tables;
                replay(t, &payload, base, Some(&mut sp.pending), Stacks::Keep)?;
                for (id, name) in t.functions.iter().enumerate().skip(sp.functions) {
                    ctx.functions.insert(id as u64, name.clone());
                }
                sp.functions = t.functions.len();
                ctx.add_slot_changes(&t.thread_slots[sp.slots..]);
                sp.slots = t.thread_slots.len();
                ctx.marker_threads
                    .extend_from_slice(&t.marker_threads[sp.markers..]);
                sp.markers = t.marker_threads.len();
                if ctx.seq == 0 {
                    if let Some(start) = t.start_us {
                        ctx.now_us = start;
                    }
                }
                for r in &sp.pending {
                    if let Record::Stack(s) = r {
                        ctx.known.insert(s.id);
                    }
                }
            }
            CHUNK_EVENTS => {
                sp.chunk = payload;
                sp.pos = 0;
                sp.base = base;
            }
            other => {
                return Err(FormatError::invalid(
                    at,
                    "a spool chunk kind 1 (log) or 2 (events)",
                    other.to_string(),
                ))
            }
        }
        Ok(true)
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.state {
                State::Header => match self.read_head() {
                    Ok(()) => self.state = State::Records,
                    Err(e) => {
                        self.state = State::Done;
                        return Some(Err(e));
                    }
                },
                State::Records => {
                    if let Some(r) = self.records.next() {
                        return Some(Ok(r));
                    }
                    if let Some(s) = self.stacks.as_mut().and_then(|g| g.next_stack()) {
                        return Some(Ok(Record::Stack(s)));
                    }
                    self.stacks = None;
                    match self.after.next() {
                        Some(r) => return Some(Ok(r)),
                        None => self.state = State::Events,
                    }
                }
                State::Events => {
                    let r = self.next_event();
                    if !matches!(r, Some(Ok(_))) {
                        self.state = State::Done;
                    }
                    return r;
                }
                State::Done => return None,
            }
        }
    }
}

/// Copies the bytes of one varint (at most 10) from `src` to `tmp[*n..]`.
fn gather_varint<R: Read>(
    src: &mut ByteSource<R>,
    tmp: &mut [u8; MAX_EVENT],
    n: &mut usize,
    what: &str,
) -> Result<()> {
    for _ in 0..10 {
        let b = src.read_u8(what)?;
        tmp[*n] = b;
        *n += 1;
        if b < 0x80 {
            break;
        }
    }
    Ok(())
}

fn gather_fixed<R: Read>(
    src: &mut ByteSource<R>,
    tmp: &mut [u8; MAX_EVENT],
    n: &mut usize,
    len: usize,
    what: &str,
) -> Result<()> {
    src.read_exact(&mut tmp[*n..*n + len], what)?;
    *n += len;
    Ok(())
}

/// Parses the decimal keys of a metadata table.
fn id_map<V>(m: HashMap<String, V>, table: &str) -> Result<FastMap<u64, V>> {
    m.into_iter()
        .map(|(k, v)| match k.parse::<u64>() {
            Ok(id) if !k.starts_with('+') => Ok((id, v)),
            _ => Err(FormatError::invalid(
                HEADER_LEN as u64,
                format!("decimal ids as the keys of \"{table}\""),
                format!("{k:?}"),
            )),
        })
        .collect()
}

/// The error for a key of a per-stack table that is not a decimal id.
fn bad_key(table: &str, key: &str) -> FormatError {
    FormatError::invalid(
        HEADER_LEN as u64,
        format!("decimal ids as the keys of \"{table}\""),
        format!("{key:?}"),
    )
}
