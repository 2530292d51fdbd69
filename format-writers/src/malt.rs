//! MALT JSON profiles: a writer (trace → profile at `finish`) and a reader
//! (profile → records that reproduce its per-stack totals).
//!
//! MALT (the MALloc Tracker) stores a whole run as one JSON object whose first
//! key is `"run"`; its web viewer and its strict C++ reader (MALT 1.6) open it.
//! Users know that viewer, so we write what it expects: every section in the
//! order MALT writes them (`run`, `config`, `stacks`, `sites`, `timeline`,
//! `scatter`, `threads`, `memStats`, `globals`, `leaks`, `domains`), every
//! address a hex string (`"0x401010"`), `stack[0]` the innermost frame,
//! `sites.strings[0] == "??"`, times in ticks with `globals.ticksPerSecond`
//! = 1e9 (our ticks are nanoseconds). Where each figure comes from, and which
//! figures an allocation trace cannot know, is in `docs/formats/malt.md`.
//!
//! The writer aggregates in one pass ([`crate::aggregate`]): memory follows the
//! distinct stacks and live blocks, not the events.
//!
//! The reader parses the whole profile (it is a summary, not an event log) and
//! yields a [`Record`] stream a report can consume: one `Stack` per MALT stack
//! (symbols folded in from `sites`), then synthetic `Alloc`/`Free` events with
//! each stack's allocation count and bytes, its leaked blocks and bytes left
//! live, and its freed blocks freed after their mean lifetime. MALT's own
//! totals (including the peak, which a replay cannot reproduce) are in
//! [`MaltSummary`].
//!
//! Detection: a MALT profile is JSON whose first key is `"run"` ([`detect`]).
//! It is not a [`crate::Format`] (adding one would change every `match` on
//! formats); [`open`] gives the same `(summary, TraceReader)` pair a caller
//! needs after [`crate::open`] reports unknown magic bytes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::aggregate::{log2_class_floor, Aggregate, Scatter, SCATTER_CELLS};
use crate::error::{FormatError, Result};
use crate::model::{
    Alloc, Event, Frame, Free, Object, Process, Record, Stack, StackId, Symbol, Thread,
};
use crate::TraceReader;

/// The `run.formatVersion` MALT 1.6's strict reader accepts.
pub const FORMAT_VERSION: &str = "1.6";
/// Our ticks are nanoseconds.
pub const TICKS_PER_SECOND: u64 = 1_000_000_000;

fn hex(v: u64) -> String {
    format!("0x{v:x}")
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

/// The MALT JSON profile format, rendered by [`render`].
pub struct Malt;

impl crate::aggregate::Render for Malt {
    fn render(agg: &Aggregate, out: &mut dyn Write) -> io::Result<()> {
        render(agg, out)
    }
}

/// Writes a MALT JSON profile of the records it is given, at `finish`.
pub type Writer<W> = crate::aggregate::ProfileWriter<W, Malt>;

/// A string table with `"??"` at index 0.
struct Strings {
    list: Vec<String>,
    index: HashMap<String, usize>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            list: Vec::new(),
            index: HashMap::new(),
        };
        s.intern("??");
        s
    }
    fn intern(&mut self, v: &str) -> usize {
        if let Some(&i) = self.index.get(v) {
            return i;
        }
        self.list.push(v.to_string());
        self.index.insert(v.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }
}

fn mms(m: &crate::aggregate::MinMaxSum) -> Value {
    json!({"count": m.count, "min": m.min, "max": m.max, "sum": m.sum})
}

fn zero_mms() -> Value {
    json!({"count": 0, "min": 0, "max": 0, "sum": 0})
}

/// "YYYY-MM-DD HH:MM" (UTC) of a time in ns since the Unix epoch.
fn date_of(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn axis(max_value: u64, log: bool) -> Value {
    let max = max_value
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    json!({"max": max, "size": SCATTER_CELLS, "log": log})
}

fn scatter_points(s: &Scatter, x_of: impl Fn(u64) -> u64, y_of: impl Fn(u64) -> u64) -> Value {
    let mut cells: Vec<(&(u64, u64), &u64)> = s.cells.iter().collect();
    cells.sort_unstable();
    Value::Array(
        cells
            .into_iter()
            .map(|((x, y), v)| json!({"x": x_of(*x), "y": y_of(*y), "v": v}))
            .collect(),
    )
}

fn config(agg: &Aggregate) -> Value {
    json!({
        "addr2line": {"bucket": 0, "huge": 0, "threads": 0},
        "c": {"malloc": true, "mmap": false, "gpu-malloc": false},
        "distr": {"alloc-size": true, "realloc-jump": true},
        "dump": {
            "after-seconds": 0, "on-alloc-count": "", "on-app-using-req": "",
            "on-app-using-rss": "", "on-app-using-virt": "", "on-signal": "",
            "on-sys-full-at": "", "on-thread-stack-using": "", "watch-dog": false
        },
        "filter": {"childs": true, "enabled": false, "exe": "", "ranks": ""},
        "info": {"hidden": false},
        "max-stack": {"enabled": false},
        "output": {
            "callgrind": false, "config": false, "indent": false, "json": true,
            "loop-suppress": false, "lua": false, "name": "",
            "stack-tree": false, "verbosity": "default"
        },
        "python": {
            "hide-imports": false, "instru": false, "mem": false, "mix": false,
            "mode": "none", "obj": false, "raw": false, "stack": "none"
        },
        "sampling": {"count": 0, "enabled": false, "volume": 0},
        "stack": {
            "enabled": true, "libunwind": false, "mode": "backtrace",
            "resolve": !agg.stack_stats().is_empty(), "skip": 0
        },
        "time": {"enabled": true, "linear": false, "points": crate::aggregate::TIMELINE_POINTS},
        "tools": {"nm": false, "nm-max-size": "0"},
        "trace": {"enabled": false}
    })
}

/// Writes the MALT profile of `agg` to `out`.
pub fn render<W: Write>(agg: &Aggregate, out: W) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    let stats = agg.stack_stats();
    let ids: HashMap<StackId, String> = stats
        .iter()
        .enumerate()
        .map(|(k, (id, _))| (*id, hex(k as u64 + 1)))
        .collect();
    let callsite = |s: Option<StackId>| {
        s.and_then(|s| ids.get(&s).cloned())
            .unwrap_or_else(|| "0x0".into())
    };
    let stack_hex =
        |id: StackId| -> Vec<String> { agg.frames(id).iter().map(|f| hex(f.address)).collect() };
    let w = |out: &mut io::BufWriter<W>, v: &Value| {
        serde_json::to_writer(out, v).map_err(io::Error::from)
    };

    // run
    let process = agg.process.clone().unwrap_or_default();
    let exe = Path::new(&process.executable)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let command = if process.command_line.is_empty() {
        process.executable.clone()
    } else {
        process.command_line.join(" ")
    };
    let run = json!({
        "formatVersion": FORMAT_VERSION,
        "tool": format!("libtracer-{}", env!("CARGO_PKG_VERSION")),
        "date": date_of(agg.last_time_ns.max(agg.start_ns())),
        "runtime": agg.runtime_ns(),
        "allocator": "",
        "allocatorWrappers": [],
        "exe": exe,
        "command": command,
        "hostname": agg.info_value("nodename").or(agg.info_value("hostname")).unwrap_or(""),
    });
    out.write_all(b"{\"run\":")?;
    w(&mut out, &run)?;
    out.write_all(b",\"config\":")?;
    w(&mut out, &config(agg))?;

    // stacks, streamed
    out.write_all(b",\"stacks\":{\"stats\":[")?;
    for (k, (id, st)) in stats.iter().enumerate() {
        if k > 0 {
            out.write_all(b",")?;
        }
        let v = json!({
            "stack": stack_hex(*id),
            "stackId": ids[id],
            "infos": {
                "countZeros": st.count_zeros,
                "maxAliveReq": st.max_alive_bytes,
                "maxAliveReqGPU": 0,
                "aliveReq": st.alive_bytes,
                "aliveReqGPU": 0,
                "alloc": mms(&st.alloc),
                "free": mms(&st.free),
                "gpuAlloc": zero_mms(),
                "gpuFree": zero_mms(),
                "mmap": zero_mms(),
                "munmap": zero_mms(),
                "lifetime": mms(&st.lifetime),
                "globalPeak": agg.peak_bytes_of(*id),
                "globalPeakGPU": 0,
                "reallocCount": st.realloc_count,
                "reallocSumDelta": st.realloc_sum_delta,
            }
        });
        w(&mut out, &v)?;
    }
    write!(out, "],\"count\":{}}}", stats.len())?;

    // sites
    let mut strings = Strings::new();
    let mut instr: BTreeMap<String, Value> = BTreeMap::new();
    let root = strings.intern("[0x1]");
    instr.insert("0x1".into(), json!({ "function": root }));
    let mut map = Vec::new();
    for o in &agg.objects {
        map.push(json!({
            "lower": hex(o.load_address),
            "upper": hex(o.load_address.wrapping_add(o.size)),
            "offset": "0x0",
            "aslrOffset": u64::MAX,
            "file": o.path,
        }));
    }
    for (id, _) in &stats {
        for f in agg.frames(*id) {
            let key = hex(f.address);
            if instr.contains_key(&key) {
                continue;
            }
            let sym = agg.symbol(f);
            let function = match &sym {
                Some(s) if !s.function.is_empty() => strings.intern(&s.function),
                _ => strings.intern(&key),
            };
            let file = match &sym {
                Some(s) if !s.file.is_empty() => strings.intern(&s.file),
                _ => 0,
            };
            let binary = agg
                .object_of(f.address)
                .map(|o| strings.intern(&o.path))
                .unwrap_or(0);
            let mut e = json!({"file": file, "function": function, "binary": binary});
            if let Some(s) = &sym {
                if s.line > 0 {
                    e["line"] = json!(s.line);
                }
            }
            instr.insert(key, e);
        }
    }
    out.write_all(b",\"sites\":")?;
    w(
        &mut out,
        &json!({"map": map, "strings": strings.list, "instr": instr}),
    )?;

    // timeline
    let start = agg.first_time_ns.unwrap_or(0);
    let width = agg.timeline_width_ns;
    let tl = &agg.timeline;
    let col_max =
        |f: &dyn Fn(&crate::aggregate::TimePoint) -> u64| tl.iter().map(f).max().unwrap_or(0);
    let callsites: Vec<String> = tl.iter().map(|p| callsite(p.callsite)).collect();
    let timeline = json!({
        "memoryTimeline": {
            "start": start,
            "fields": ["requestedMem", "physicalMem", "virtualMem", "internalMem", "segments"],
            "perPoints": width,
            "peak": [col_max(&|p| p.live_bytes), 0, 0, 0, col_max(&|p| p.live_blocks)],
            "values": tl.iter().map(|p| json!([p.live_bytes, 0, 0, 0, p.live_blocks])).collect::<Vec<_>>(),
            "callsite": callsites,
        },
        "systemTimeline": {
            "start": start,
            "fields": ["freeMemory", "cachedMemory", "swapMemory"],
            "perPoints": width,
            "peak": [0, 0, 0],
            "values": [],
            "callsite": [],
        },
        "memoryBandwidth": {
            "start": start,
            // MALT 1.6 labels the columns mem, count but writes count, mem:
            // we write what MALT writes, so its viewer plots what it expects.
            "fields": ["allocMem", "allocCount", "freeMem", "freeCount"],
            "perPoints": width,
            "peak": [
                col_max(&|p| p.alloc_count), col_max(&|p| p.alloc_bytes),
                col_max(&|p| p.free_count), col_max(&|p| p.free_bytes)
            ],
            "values": tl.iter().map(|p| json!([p.alloc_count, p.alloc_bytes, p.free_count, p.free_bytes])).collect::<Vec<_>>(),
            "callsite": tl.iter().map(|p| callsite(p.callsite)).collect::<Vec<_>>(),
        }
    });
    out.write_all(b",\"timeline\":")?;
    w(&mut out, &timeline)?;

    // scatter
    let sot = &agg.size_over_time;
    let los = &agg.lifetime_over_size;
    let max_of = |s: &Scatter, pick: fn(&(u64, u64)) -> u64| {
        log2_class_floor(s.cells.keys().map(pick).max().unwrap_or(0)).saturating_mul(2)
    };
    let tw = agg.size_time_width_ns;
    let scatter = json!({
        "sizeOverTime": {
            "infos": {
                "xAxis": axis(tw.saturating_mul(u64::from(SCATTER_CELLS)), false),
                "yAxis": axis(max_of(sot, |k| k.1), true),
            },
            "points": scatter_points(sot, |x| x.saturating_mul(tw), log2_class_floor),
        },
        "lifetimeOverSize": {
            "infos": {
                "xAxis": axis(max_of(los, |k| k.0), true),
                "yAxis": axis(max_of(los, |k| k.1), true),
            },
            "points": scatter_points(los, log2_class_floor, log2_class_floor),
        }
    });
    out.write_all(b",\"scatter\":")?;
    w(&mut out, &scatter)?;

    // threads
    let fs = |count: u64, sum: u64| json!({"count": count, "sum": sum, "time": 0});
    let threads: Vec<Value> = agg
        .threads
        .values()
        .map(|t| {
            json!({
                "stackMem": {
                    "size": 0, "stack": [], "mem": [], "total": 0,
                    "timeprofiler": {
                        "min": [], "max": [], "index": [], "location": [], "timestamp": [],
                        "peakTimesteamp": 0, "peakMemory": 0, "peakIndex": 0, "linearIndex": true
                    }
                },
                "cntMemOps": t.allocs + t.frees,
                "stats": {
                    "malloc": fs(t.allocs - t.reallocs, t.alloc_bytes.wrapping_sub(t.realloc_bytes)),
                    "posix_memalign": fs(0, 0),
                    "aligned_alloc": fs(0, 0),
                    "memalign": fs(0, 0),
                    "valloc": fs(0, 0),
                    "pvalloc": fs(0, 0),
                    "free": fs(t.frees, t.free_bytes),
                    "calloc": fs(0, 0),
                    "realloc": fs(t.reallocs, t.realloc_bytes),
                }
            })
        })
        .collect();
    out.write_all(b",\"threads\":")?;
    w(&mut out, &Value::Array(threads))?;

    // memStats
    let size_map: serde_json::Map<String, Value> = agg
        .size_map
        .iter()
        .map(|(s, n)| (s.to_string(), json!(n)))
        .collect();
    let jumps: Vec<Value> = agg
        .realloc_jump
        .iter()
        .map(|((o, n), c)| json!({"oldSize": o, "newSize": n, "count": c}))
        .collect();
    out.write_all(b",\"memStats\":")?;
    w(
        &mut out,
        &json!({"sizeMap": size_map, "reallocJump": jumps, "globalVariables": {}}),
    )?;

    // globals
    let threads_seen = agg.threads.keys().filter(|&&t| t != 0).count() as u64;
    let max_threads = if threads_seen == 0 && agg.allocations > 0 {
        1
    } else {
        threads_seen
    };
    out.write_all(b",\"globals\":")?;
    w(
        &mut out,
        &json!({
            "ticksPerSecond": TICKS_PER_SECOND,
            "totalMemory": 0,
            "freeMemoryAtStart": 0,
            "cachedMemoryAtStart": 0,
            "maxThreadCount": max_threads,
        }),
    )?;

    // leaks, streamed
    out.write_all(b",\"leaks\":[")?;
    let mut first = true;
    for (id, st) in &stats {
        if st.alive_blocks == 0 {
            continue;
        }
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        w(
            &mut out,
            &json!({"stack": stack_hex(*id), "count": st.alive_blocks, "memory": st.alive_bytes}),
        )?;
    }
    out.write_all(b"]")?;

    // domains: only C allocations are traced.
    let dom = |c: u64| json!({"c": c, "pyObj": 0, "pyMem": 0, "pyRaw": 0, "mmap": 0});
    out.write_all(b",\"domains\":")?;
    w(
        &mut out,
        &json!({
            "counters": dom(agg.allocations),
            "mem": dom(agg.bytes_allocated),
            "localPeak": dom(agg.peak_bytes),
            "atGlobalPeak": dom(agg.peak_bytes),
        }),
    )?;
    out.write_all(b"}\n")?;
    out.flush()
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------

/// MALT's own totals for a profile, summed from its sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaltSummary {
    pub format_version: String,
    pub tool: String,
    pub exe: String,
    pub command: String,
    pub hostname: String,
    pub date: String,
    pub runtime_ticks: u64,
    pub ticks_per_second: u64,
    /// Entries of `stacks.stats`.
    pub stacks: u64,
    /// Σ `alloc.count`, Σ `alloc.sum`.
    pub allocations: u64,
    pub bytes_allocated: u64,
    /// Σ `free.count`, Σ `free.sum`.
    pub frees: u64,
    pub bytes_freed: u64,
    /// `timeline.memoryTimeline.peak[0]` (requested memory), else Σ `globalPeak`.
    pub peak_bytes: u64,
    /// Σ `leaks[].count`, Σ `leaks[].memory`.
    pub leaked_blocks: u64,
    pub leaked_bytes: u64,
    /// Σ `reallocCount`.
    pub reallocs: u64,
}

/// An address written as a hex string (MALT never writes integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Hex(u64);

fn parse_hex(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok()
}

struct HexVisitor;

impl de::Visitor<'_> for HexVisitor {
    type Value = Hex;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a hex address string \"0x…\"")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Hex, E> {
        if s == "(nil)" {
            return Ok(Hex(0));
        }
        parse_hex(s)
            .map(Hex)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Str(s), &self))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Hex, D::Error> {
        d.deserialize_str(HexVisitor)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Mms {
    count: u64,
    min: u64,
    max: u64,
    sum: u64,
}

#[derive(Deserialize)]
struct Infos {
    alloc: Mms,
    #[serde(default)]
    free: Mms,
    #[serde(default)]
    lifetime: Mms,
    #[serde(default, rename = "aliveReq")]
    alive_req: u64,
    #[serde(default, rename = "globalPeak")]
    global_peak: u64,
    #[serde(default, rename = "reallocCount")]
    realloc_count: u64,
}

#[derive(Deserialize)]
struct Stat {
    stack: Vec<Hex>,
    infos: Infos,
}

#[derive(Deserialize)]
struct Stacks {
    stats: Vec<Stat>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Instr {
    file: Option<usize>,
    function: Option<usize>,
    line: Option<u32>,
}

#[derive(Deserialize)]
struct MapEntry {
    lower: Hex,
    upper: Hex,
    file: String,
}

#[derive(Deserialize)]
struct Sites {
    #[serde(default)]
    map: Vec<MapEntry>,
    strings: Vec<String>,
    instr: BTreeMap<String, Instr>,
}

#[derive(Deserialize)]
struct Leak {
    stack: Vec<Hex>,
    count: u64,
    memory: u64,
}

#[derive(Deserialize)]
struct Globals {
    #[serde(rename = "ticksPerSecond")]
    ticks_per_second: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Run {
    #[serde(rename = "formatVersion")]
    format_version: String,
    tool: String,
    date: String,
    runtime: u64,
    exe: String,
    command: String,
    hostname: String,
}

#[derive(Deserialize)]
struct MemTimeline {
    peak: Vec<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Timeline {
    #[serde(rename = "memoryTimeline")]
    memory_timeline: Option<MemTimeline>,
}

#[derive(Deserialize)]
struct Profile {
    run: Run,
    stacks: Stacks,
    sites: Sites,
    globals: Globals,
    #[serde(default)]
    leaks: Vec<Leak>,
    #[serde(default)]
    timeline: Timeline,
}

/// Whether `prefix` (the first bytes of a file) starts a MALT profile: JSON
/// whose first key is `"run"`, after optional whitespace.
pub fn detect(prefix: &[u8]) -> bool {
    let mut rest = prefix;
    let skip = |r: &mut &[u8]| {
        while let [c, tail @ ..] = *r {
            if c.is_ascii_whitespace() {
                *r = tail;
            } else {
                break;
            }
        }
    };
    skip(&mut rest);
    let Some(tail) = rest.strip_prefix(b"{") else {
        return false;
    };
    rest = tail;
    skip(&mut rest);
    rest.starts_with(b"\"run\"")
}

/// Byte offset of 1-based (line, column) in `text`.
fn offset_of(text: &[u8], line: usize, column: usize) -> u64 {
    let mut start = 0usize;
    if line > 1 {
        let mut seen = 1;
        for (i, &b) in text.iter().enumerate() {
            if b == b'\n' {
                seen += 1;
                if seen == line {
                    start = i + 1;
                    break;
                }
            }
        }
    }
    (start + column.saturating_sub(1)).min(text.len()) as u64
}

fn json_error(text: &[u8], e: serde_json::Error) -> FormatError {
    let offset = if e.is_eof() {
        text.len() as u64
    } else {
        offset_of(text, e.line(), e.column())
    };
    let message = e.to_string();
    let message = match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    if e.is_eof() {
        FormatError::truncated(
            offset,
            format!("the rest of the MALT JSON profile ({message})"),
        )
    } else {
        FormatError::invalid(offset, "a MALT JSON profile", message)
    }
}

/// Most synthetic events a replay may yield (a corrupt count must not make a
/// reader spin for years).
pub const MAX_REPLAY_EVENTS: u64 = 1 << 36;

/// A parsed profile: MALT's totals and the records that replay it.
pub struct MaltProfile {
    pub summary: MaltSummary,
    pub records: Replay,
}

/// Reads a whole MALT profile.
pub fn read<R: Read>(mut reader: R) -> Result<MaltProfile> {
    let mut text = Vec::new();
    reader
        .read_to_end(&mut text)
        .map_err(|source| FormatError::Io {
            offset: text.len() as u64,
            source,
        })?;
    from_slice(&text)
}

/// Opens a MALT profile file: its summary and a record stream.
pub fn open(path: &Path) -> Result<(MaltSummary, TraceReader)> {
    let file = File::open(path).map_err(|source| FormatError::Io { offset: 0, source })?;
    let p = read(file)?;
    Ok((p.summary, Box::new(p.records)))
}

/// Parses a MALT profile held in memory.
pub fn from_slice(text: &[u8]) -> Result<MaltProfile> {
    if !detect(&text[..text.len().min(4096)]) {
        let shown: String = String::from_utf8_lossy(&text[..text.len().min(16)]).into_owned();
        return Err(FormatError::invalid(
            0,
            "a MALT JSON profile: '{' then the \"run\" key",
            format!("{shown:?}"),
        ));
    }
    let p: Profile = serde_json::from_slice(text).map_err(|e| json_error(text, e))?;
    let stacks_at = find(text, b"\"stacks\"");
    let leaks_at = find(text, b"\"leaks\"");

    let mut summary = MaltSummary {
        format_version: p.run.format_version.clone(),
        tool: p.run.tool.clone(),
        exe: p.run.exe.clone(),
        command: p.run.command.clone(),
        hostname: p.run.hostname.clone(),
        date: p.run.date.clone(),
        runtime_ticks: p.run.runtime,
        ticks_per_second: p.globals.ticks_per_second,
        stacks: p.stacks.stats.len() as u64,
        ..MaltSummary::default()
    };
    let mut global_peaks = 0u64;
    for s in &p.stacks.stats {
        let i = &s.infos;
        summary.allocations = summary.allocations.saturating_add(i.alloc.count);
        summary.bytes_allocated = summary.bytes_allocated.saturating_add(i.alloc.sum);
        summary.frees = summary.frees.saturating_add(i.free.count);
        summary.bytes_freed = summary.bytes_freed.saturating_add(i.free.sum);
        summary.reallocs = summary.reallocs.saturating_add(i.realloc_count);
        global_peaks = global_peaks.saturating_add(i.global_peak);
    }
    for l in &p.leaks {
        summary.leaked_blocks = summary.leaked_blocks.saturating_add(l.count);
        summary.leaked_bytes = summary.leaked_bytes.saturating_add(l.memory);
    }
    summary.peak_bytes = p
        .timeline
        .memory_timeline
        .as_ref()
        .and_then(|t| t.peak.first().copied())
        .unwrap_or(global_peaks);
    if summary.allocations.saturating_mul(2) > MAX_REPLAY_EVENTS {
        return Err(FormatError::invalid(
            stacks_at,
            format!(
                "at most {} allocations in all stacks",
                MAX_REPLAY_EVENTS / 2
            ),
            summary.allocations.to_string(),
        ));
    }

    // Symbols of the addresses, from sites.
    let string = |i: Option<usize>| -> String {
        match i.and_then(|i| p.sites.strings.get(i)) {
            Some(s) if s != "??" => s.clone(),
            _ => String::new(),
        }
    };
    let mut symbols: HashMap<u64, Symbol> = HashMap::new();
    for (k, v) in &p.sites.instr {
        let Some(a) = parse_hex(k) else { continue };
        let function = string(v.function);
        if function.is_empty() {
            continue;
        }
        symbols.insert(
            a,
            Symbol {
                function,
                file: string(v.file),
                line: v.line.unwrap_or(0),
            },
        );
    }

    // Leaks by stack.
    let mut leaks: HashMap<Vec<u64>, (u64, u64)> = HashMap::new();
    for l in &p.leaks {
        let e = leaks
            .entry(l.stack.iter().map(|h| h.0).collect())
            .or_default();
        e.0 = e.0.saturating_add(l.count);
        e.1 = e.1.saturating_add(l.memory);
    }

    let tps = if p.globals.ticks_per_second == 0 {
        TICKS_PER_SECOND
    } else {
        p.globals.ticks_per_second
    };
    let mut plans = Vec::new();
    for s in &p.stacks.stats {
        let addrs: Vec<u64> = s.stack.iter().map(|h| h.0).collect();
        let i = &s.infos;
        let (mut leaked, mut leaked_bytes) = leaks.remove(&addrs).unwrap_or((0, 0));
        if leaked == 0 && i.alive_req > 0 && i.alloc.count > 0 {
            // No leaks entry for a stack still holding memory: one block.
            leaked = 1;
            leaked_bytes = i.alive_req;
        }
        leaked = leaked.min(i.alloc.count);
        leaked_bytes = leaked_bytes.min(i.alloc.sum);
        let lifetime_ticks = i.lifetime.sum.checked_div(i.lifetime.count).unwrap_or(0);
        let lifetime_ns = (u128::from(lifetime_ticks) * 1_000_000_000 / u128::from(tps)) as u64;
        plans.push(Plan {
            frames: frames_of(&addrs, &symbols),
            allocs: i.alloc.count,
            bytes: i.alloc.sum,
            min: i.alloc.min,
            max: i.alloc.max,
            leaked,
            leaked_bytes,
            lifetime_ns,
        });
    }
    // Leaks whose stack allocated nothing in `stacks` (not written by MALT,
    // but possible): a stack of their own.
    let mut rest: Vec<(Vec<u64>, (u64, u64))> = leaks.into_iter().collect();
    rest.sort();
    for (addrs, (count, memory)) in rest {
        if count == 0 {
            continue;
        }
        if count > MAX_REPLAY_EVENTS {
            return Err(FormatError::invalid(
                leaks_at,
                "a leak count a replay can reproduce",
                count.to_string(),
            ));
        }
        plans.push(Plan {
            frames: frames_of(&addrs, &symbols),
            allocs: count,
            bytes: memory,
            min: 0,
            max: 0,
            leaked: count,
            leaked_bytes: memory,
            lifetime_ns: 0,
        });
    }

    let mut head = Vec::new();
    head.push(Record::Process(Process {
        pid: 0,
        executable: if p.run.exe.is_empty() {
            p.run.command.split(' ').next().unwrap_or("").to_string()
        } else {
            p.run.exe.clone()
        },
        command_line: p
            .run
            .command
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        start_time_ns: 0,
    }));
    let mut info = vec![("tool".to_string(), p.run.tool.clone())];
    if !p.run.hostname.is_empty() {
        info.push(("nodename".into(), p.run.hostname.clone()));
    }
    if !p.run.date.is_empty() {
        info.push(("date".into(), p.run.date.clone()));
    }
    head.push(Record::Info(info));
    let mut objects: Vec<Object> = Vec::new();
    let mut by_path: HashMap<String, usize> = HashMap::new();
    for m in &p.sites.map {
        let (lo, hi) = (m.lower.0, m.upper.0.max(m.lower.0));
        match by_path.get(&m.file) {
            Some(&k) => {
                let o = &mut objects[k];
                let end = (o.load_address + o.size).max(hi);
                o.load_address = o.load_address.min(lo);
                o.size = end - o.load_address;
            }
            None => {
                by_path.insert(m.file.clone(), objects.len());
                objects.push(Object {
                    path: m.file.clone(),
                    load_address: lo,
                    size: hi - lo,
                });
            }
        }
    }
    head.extend(objects.into_iter().map(Record::Object));
    head.push(Record::Thread(Thread {
        tid: REPLAY_THREAD,
        name: String::new(),
    }));
    head.reverse();

    Ok(MaltProfile {
        summary,
        records: Replay {
            head,
            plans: plans.into_iter().rev().collect(),
            current: None,
            next_id: 0,
            now: 1,
            next_address: 0x1000,
        },
    })
}

fn find(text: &[u8], what: &[u8]) -> u64 {
    text.windows(what.len())
        .position(|w| w == what)
        .unwrap_or(0) as u64
}

fn frames_of(addrs: &[u64], symbols: &HashMap<u64, Symbol>) -> Vec<Frame> {
    addrs
        .iter()
        .map(|a| Frame {
            address: *a,
            symbol: symbols.get(a).cloned(),
        })
        .collect()
}

/// The thread every synthetic event is given.
pub const REPLAY_THREAD: u32 = 1;

/// What one MALT stack becomes.
struct Plan {
    frames: Vec<Frame>,
    allocs: u64,
    bytes: u64,
    min: u64,
    max: u64,
    leaked: u64,
    leaked_bytes: u64,
    lifetime_ns: u64,
}

/// Sizes of `n` blocks summing to `total`, lazily: `first` then an even
/// spread of the rest.
#[derive(Clone, Copy)]
struct Split {
    n: u64,
    i: u64,
    first: Option<(u64, u64)>,
    base: u64,
    extra: u64,
}

impl Split {
    /// `n` blocks of `total` bytes; when it fits, the first two blocks are
    /// `min` and `max` so the replay keeps the profile's extremes too.
    fn new(n: u64, total: u64, min: u64, max: u64) -> Split {
        if n >= 3 && min <= max && min.saturating_add(max) <= total {
            let rest = total - min - max;
            let k = n - 2;
            let (base, extra) = (rest / k, rest % k);
            if base >= min && base + u64::from(extra > 0) <= max {
                return Split {
                    n,
                    i: 0,
                    first: Some((min, max)),
                    base,
                    extra,
                };
            }
        }
        let (base, extra) = total.checked_div(n).map_or((0, 0), |b| (b, total % n));
        Split {
            n,
            i: 0,
            first: None,
            base,
            extra,
        }
    }

    fn next(&mut self) -> Option<u64> {
        if self.i >= self.n {
            return None;
        }
        let i = self.i;
        self.i += 1;
        if let Some((a, b)) = self.first {
            match i {
                0 => return Some(a),
                1 => return Some(b),
                _ => {
                    let j = i - 2;
                    return Some(self.base + u64::from(j < self.extra));
                }
            }
        }
        Some(self.base + u64::from(i < self.extra))
    }
}

struct Current {
    stack: StackId,
    leaked: Split,
    freed: Split,
    lifetime_ns: u64,
    /// A free due right after the last alloc.
    pending_free: Option<(u64, u64)>,
}

/// The record stream of a MALT profile (see the module documentation).
pub struct Replay {
    head: Vec<Record>,
    plans: Vec<Plan>,
    current: Option<Current>,
    next_id: StackId,
    now: u64,
    next_address: u64,
}

impl Replay {
    fn alloc(&mut self, stack: StackId, size: u64) -> (Record, u64) {
        let address = self.next_address;
        self.next_address = self.next_address.wrapping_add(16);
        let r = Record::Event(Event::Alloc(Alloc {
            time_ns: self.now,
            thread: REPLAY_THREAD,
            address,
            size,
            stack,
        }));
        (r, address)
    }
}

impl Iterator for Replay {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if let Some(r) = self.head.pop() {
            return Some(Ok(r));
        }
        if let Some(mut cur) = self.current.take() {
            if let Some((address, time)) = cur.pending_free.take() {
                self.now = time.saturating_add(1);
                self.current = Some(cur);
                return Some(Ok(Record::Event(Event::Free(Free {
                    time_ns: time,
                    thread: REPLAY_THREAD,
                    address,
                }))));
            }
            if let Some(size) = cur.leaked.next() {
                let (r, _) = self.alloc(cur.stack, size);
                self.now += 1;
                self.current = Some(cur);
                return Some(Ok(r));
            }
            if let Some(size) = cur.freed.next() {
                let (r, address) = self.alloc(cur.stack, size);
                cur.pending_free = Some((address, self.now.saturating_add(cur.lifetime_ns)));
                self.current = Some(cur);
                return Some(Ok(r));
            }
        }
        let plan = self.plans.pop()?;
        let id = self.next_id;
        self.next_id += 1;
        let freed = plan.allocs - plan.leaked;
        let freed_bytes = plan.bytes.saturating_sub(plan.leaked_bytes);
        self.current = Some(Current {
            stack: id,
            leaked: Split::new(plan.leaked, plan.leaked_bytes, 0, 0),
            freed: Split::new(freed, freed_bytes, plan.min, plan.max),
            lifetime_ns: plan.lifetime_ns,
            pending_free: None,
        });
        Some(Ok(Record::Stack(Stack {
            id,
            frames: plan.frames,
        })))
    }
}
