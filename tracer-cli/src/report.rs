//! `tracer report`: the summary of a trace, as text or as one JSON object.
//!
//! The figures come from one [`Analysis`] pass (its module documents the
//! counting rules). `leaked_*` counts the definite and indirect blocks of the
//! trace's reachability scan at exit; without a scan it equals
//! `live_at_exit_*` (every block never freed counts as leaked), as the
//! interface specifies. An image replaced by `exec` never exited: its
//! blocks went with it, nothing counts as leaked (as `tracer leaks` and
//! `tracer run --leak-check` treat it). Frames are symbolized through the debug info of the
//! traced binaries ([`crate::symbolize`]). Syscall traces get `strace -c`'s table (and a
//! `syscalls` array in JSON) besides the (then zero) heap figures.

use std::io::Write;

use serde::Serialize;

use crate::analysis::{Analysis, Site};
use crate::clock;
use crate::failure::Failure;
use crate::strace::{self, SummaryRow};
use crate::symbolize::{FrameJson, Resolver, SymbolOptions, UnresolvedNote};
use format_writers::StackId;

/// Options of the verb.
#[derive(Debug, Clone)]
pub struct Options {
    pub json: bool,
    /// Sites listed per ranking.
    pub top: usize,
    /// Frames printed per stack in the text output.
    pub frames: usize,
    pub symbols: SymbolOptions,
}

#[derive(Debug, Serialize)]
pub struct ProcessJson {
    pub pid: u32,
    pub executable: String,
    pub command_line: Vec<String>,
    pub start_time_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct SiteJson {
    pub stack_id: StackId,
    pub allocations: u64,
    pub bytes: u64,
    pub temporary: u64,
    pub stack: Vec<FrameJson>,
}

#[derive(Debug, Serialize)]
pub struct TopSites {
    pub by_bytes: Vec<SiteJson>,
    pub by_count: Vec<SiteJson>,
    pub by_temporary: Vec<SiteJson>,
}

/// `tracer report --json`.
#[derive(Debug, Serialize)]
pub struct ReportJson {
    pub format: &'static str,
    pub process: Option<ProcessJson>,
    pub start_time_ns: u64,
    pub duration_ns: u64,
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub temporary_allocations: u64,
    pub peak_bytes: u64,
    pub peak_blocks: u64,
    pub peak_time_ns: u64,
    /// Peak time relative to the start of the trace.
    pub peak_offset_ns: u64,
    pub live_at_exit_bytes: u64,
    pub live_at_exit_blocks: u64,
    pub leaked_bytes: u64,
    pub leaked_blocks: u64,
    /// False: the trace holds no reachability scan, so leaked = live at exit.
    pub reachability_scan: bool,
    /// Time of the scan, ns since the epoch.
    pub scan_time_ns: Option<u64>,
    /// Frees of addresses the trace never allocated (allocated before tracing
    /// started); included in `frees`.
    pub frees_of_untracked_blocks: u64,
    /// Frees and allocations whose address the recorder did not know (0).
    pub frees_without_address: u64,
    pub allocations_without_address: u64,
    pub allocations_at_live_address: u64,
    pub allocations_with_undefined_stack: u64,
    pub markers: u64,
    pub system_calls: u64,
    pub top_sites: TopSites,
    pub syscalls: Vec<SummaryRow>,
    /// Frames of the top sites the debug info could not resolve.
    pub unresolved_frames: Vec<UnresolvedNote>,
}

/// Sites ranked by `key` (descending, ties by stack id), those with a zero
/// key left out, at most `n`.
pub fn rank(a: &Analysis, n: usize, key: impl Fn(&Site) -> u64) -> Vec<(StackId, Site)> {
    let mut v: Vec<(StackId, Site)> = a
        .sites
        .iter()
        .filter(|(_, s)| key(s) > 0)
        .map(|(id, s)| (id, *s))
        .collect();
    v.sort_by(|x, y| key(&y.1).cmp(&key(&x.1)).then(x.0.cmp(&y.0)));
    v.truncate(n);
    v
}

fn peak_offset(a: &Analysis) -> u64 {
    match a.start_ns() {
        Some(s) if a.heap.allocations > 0 => a.heap.peak_time_ns.saturating_sub(s),
        _ => 0,
    }
}

/// Builds the JSON object (frames symbolized with the default options).
pub fn json(a: &Analysis, format: &'static str, top: usize) -> ReportJson {
    json_with(a, format, top, &SymbolOptions::default())
}

/// Builds the JSON object.
pub fn json_with(
    a: &Analysis,
    format: &'static str,
    top: usize,
    symbols: &SymbolOptions,
) -> ReportJson {
    let mut sym = Resolver::new(a, symbols);
    let mut site_json = |(id, s): (StackId, Site)| SiteJson {
        stack_id: id,
        allocations: s.allocations,
        bytes: s.bytes,
        temporary: s.temporary,
        stack: a
            .stacks
            .get(&id)
            .map(|frames| sym.stack(&frames).iter().map(FrameJson::from).collect())
            .unwrap_or_default(),
    };
    let top_sites = TopSites {
        by_bytes: rank(a, top, |s| s.bytes)
            .into_iter()
            .map(&mut site_json)
            .collect(),
        by_count: rank(a, top, |s| s.allocations)
            .into_iter()
            .map(&mut site_json)
            .collect(),
        by_temporary: rank(a, top, |s| s.temporary)
            .into_iter()
            .map(&mut site_json)
            .collect(),
    };
    let (leaked_bytes, leaked_blocks) = a.leaked();
    let h = &a.heap;
    ReportJson {
        format,
        process: a.process.as_ref().map(|p| ProcessJson {
            pid: p.pid,
            executable: p.executable.clone(),
            command_line: p.command_line.clone(),
            start_time_ns: p.start_time_ns,
        }),
        start_time_ns: a.start_ns().unwrap_or(0),
        duration_ns: a.duration_ns(),
        allocations: h.allocations,
        frees: h.frees,
        bytes_allocated: h.bytes_allocated,
        temporary_allocations: h.temporary,
        peak_bytes: h.peak_bytes,
        peak_blocks: h.peak_blocks,
        peak_time_ns: h.peak_time_ns,
        peak_offset_ns: peak_offset(a),
        live_at_exit_bytes: h.live_bytes,
        live_at_exit_blocks: a.live_blocks(),
        leaked_bytes,
        leaked_blocks,
        reachability_scan: a.leak_scan_ns.is_some(),
        scan_time_ns: a.leak_scan_ns,
        frees_of_untracked_blocks: h.frees_unknown,
        frees_without_address: h.frees_without_address,
        allocations_without_address: h.allocs_without_address,
        allocations_at_live_address: h.reused_live_addresses,
        allocations_with_undefined_stack: h.undefined_stack_allocs,
        markers: a.markers,
        system_calls: a.syscall_count,
        top_sites,
        syscalls: strace::summary_rows(a),
        unresolved_frames: sym.unresolved(),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn write_stack(
    out: &mut dyn Write,
    a: &Analysis,
    sym: &mut Resolver<'_>,
    id: StackId,
    max_frames: usize,
) -> std::io::Result<()> {
    match a.stacks.get(&id) {
        None => writeln!(out, "      (stack {id} is not defined in the trace)"),
        Some(frames) if frames.is_empty() => writeln!(out, "      (no frames recorded)"),
        Some(frames) => {
            let lines = sym.stack(&frames[..frames.len().min(max_frames)]);
            for (i, l) in lines.iter().enumerate() {
                writeln!(out, "      #{i} {}", l.text())?;
            }
            if frames.len() > max_frames {
                writeln!(out, "      ... {} more frames", frames.len() - max_frames)?;
            }
            Ok(())
        }
    }
}

/// The text report.
pub fn text(
    out: &mut dyn Write,
    a: &Analysis,
    format: &str,
    opts: &Options,
) -> std::io::Result<()> {
    let h = &a.heap;
    match &a.process {
        Some(p) if p.pid != 0 || !p.executable.is_empty() => {
            let mut line = format!("process: {}", p.pid);
            if !p.executable.is_empty() {
                line.push(' ');
                line.push_str(&p.executable);
            }
            if !p.command_line.is_empty() {
                line.push_str(&format!(" ({})", p.command_line.join(" ")));
            }
            writeln!(out, "{line}")?;
        }
        _ => writeln!(out, "process: unknown")?,
    }
    writeln!(out, "format: {format}")?;
    if let Some(s) = a.start_ns() {
        writeln!(out, "started: {}", clock::date_time(s))?;
    }
    writeln!(out, "duration: {}", clock::seconds(a.duration_ns()))?;
    if a.has_heap() || a.syscall_count == 0 {
        writeln!(out, "allocation calls: {}", h.allocations)?;
        writeln!(out, "temporary allocations: {}", h.temporary)?;
        let mut frees = format!("frees: {}", h.frees);
        if h.frees_unknown > 0 {
            frees.push_str(&format!(
                " ({} of blocks not allocated in the trace)",
                h.frees_unknown
            ));
        }
        writeln!(out, "{frees}")?;
        writeln!(out, "bytes allocated: {}", clock::bytes(h.bytes_allocated))?;
        if h.allocations > 0 {
            writeln!(
                out,
                "peak heap: {} in {} at +{} ({})",
                clock::bytes(h.peak_bytes),
                plural(h.peak_blocks, "block", "blocks"),
                clock::seconds(peak_offset(a)),
                clock::time_of_day_ns(h.peak_time_ns),
            )?;
        } else {
            writeln!(out, "peak heap: 0 B")?;
        }
        writeln!(
            out,
            "live at exit: {} in {}",
            clock::bytes(h.live_bytes),
            plural(a.live_blocks(), "block", "blocks")
        )?;
        let (leaked_bytes, leaked_blocks) = a.leaked();
        if a.replaced_by_exec() {
            writeln!(
                out,
                "leaked: none counted (the image was replaced by exec: its blocks went with it)"
            )?;
        } else if let Some(signal) = a.ended_by_signal() {
            writeln!(
                out,
                "leaked: none counted (the process was ended by {signal}: it ran no exit)"
            )?;
        } else if a.leak_scan_ns.is_some() {
            writeln!(
                out,
                "leaked: {} in {} (definitely and indirectly lost, by the reachability scan at exit; `tracer leaks` for details)",
                clock::bytes(leaked_bytes),
                plural(leaked_blocks, "block", "blocks")
            )?;
        } else {
            writeln!(
                out,
                "leaked: {} in {} (no reachability scan in this trace: every block live at exit)",
                clock::bytes(leaked_bytes),
                plural(leaked_blocks, "block", "blocks")
            )?;
        }
        if a.allocator_is_the_programs() {
            writeln!(
                out,
                "note: the program defines malloc itself: its libraries' calls are recorded, not its own"
            )?;
        }
        if h.reused_live_addresses > 0 {
            writeln!(
                out,
                "note: {} allocations returned an address that was still live (a free is missing)",
                h.reused_live_addresses
            )?;
        }
        if h.allocs_without_address + h.frees_without_address > 0 {
            writeln!(
                out,
                "note: {} allocations and {} frees record no address: those blocks stay live",
                h.allocs_without_address, h.frees_without_address
            )?;
        }
        if h.undefined_stack_allocs > 0 {
            writeln!(
                out,
                "note: {} allocations name a stack the trace does not define",
                h.undefined_stack_allocs
            )?;
        }
        let mut sym = Resolver::new(a, &opts.symbols);
        type Ranking<'k> = (&'k str, &'k dyn Fn(&Site) -> u64);
        let rankings: [Ranking; 3] = [
            ("bytes allocated", &|s: &Site| s.bytes),
            ("allocation calls", &|s: &Site| s.allocations),
            ("temporary allocations", &|s: &Site| s.temporary),
        ];
        for (title, key) in rankings {
            let sites = rank(a, opts.top, key);
            if sites.is_empty() {
                continue;
            }
            writeln!(out)?;
            writeln!(out, "top sites by {title}:")?;
            for (id, s) in sites {
                writeln!(
                    out,
                    "  {} in {}, {} (stack {id})",
                    clock::bytes(s.bytes),
                    plural(s.allocations, "call", "calls"),
                    plural(s.temporary, "temporary", "temporary"),
                )?;
                write_stack(out, a, &mut sym, id, opts.frames)?;
            }
        }
        let notes = sym.unresolved();
        if !notes.is_empty() {
            writeln!(out)?;
            crate::symbolize::write_unresolved(out, &notes, &sym.warnings())?;
        }
    }
    if a.syscall_count > 0 {
        if a.has_heap() {
            writeln!(out)?;
        }
        writeln!(out, "system calls: {}", a.syscall_count)?;
        writeln!(out)?;
        strace::summary(out, &strace::summary_rows(a))?;
    }
    Ok(())
}

/// Runs the verb on `path`, writing to `out`.
pub fn execute(
    path: &std::path::Path,
    opts: &Options,
    out: &mut dyn Write,
) -> Result<i32, Failure> {
    let (format, a) = crate::input::analyze(path)?;
    if opts.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &json_with(&a, format.name(), opts.top, &opts.symbols),
        )
        .map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        text(out, &a, format.name(), opts)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Alloc, Event, Frame, Free, Object, Process, Record, Stack, Symbol};

    fn trace() -> Analysis {
        let mut a = Analysis::new();
        let recs = vec![
            Record::Process(Process {
                pid: 7,
                executable: "/bin/app".into(),
                command_line: vec!["app".into()],
                start_time_ns: 1_000,
            }),
            Record::Object(Object {
                path: "/bin/app".into(),
                load_address: 0x40_0000,
                size: 0x1000,
            }),
            Record::Stack(Stack {
                id: 0,
                frames: vec![Frame {
                    address: 0x40_0100,
                    symbol: None,
                }],
            }),
            Record::Stack(Stack {
                id: 1,
                frames: vec![Frame {
                    address: 0x40_0200,
                    symbol: None,
                }],
            }),
            Record::AddressSymbol {
                address: 0x40_0200,
                symbol: Symbol {
                    function: "make".into(),
                    file: "a.c".into(),
                    line: 9,
                },
            },
        ];
        for r in recs {
            a.add(r);
        }
        // 3 × 100 B from stack 0 (one freed right away: temporary), 1 × 1000 B
        // from stack 1, never freed.
        let mut t = 2_000;
        let mut ev = |e: Event| {
            a.add(Record::Event(e));
        };
        for i in 0..3u64 {
            t += 10;
            ev(Event::Alloc(Alloc {
                time_ns: t,
                thread: 1,
                address: 0x1000 + i * 0x100,
                size: 100,
                stack: 0,
            }));
        }
        ev(Event::Free(Free {
            time_ns: t + 1,
            thread: 1,
            address: 0x1200,
        }));
        ev(Event::Alloc(Alloc {
            time_ns: t + 2,
            thread: 1,
            address: 0x9000,
            size: 1000,
            stack: 1,
        }));
        a
    }

    #[test]
    fn json_figures_and_rankings() {
        let a = trace();
        let j = json(&a, "mlyze", 10);
        assert_eq!(j.allocations, 4);
        assert_eq!(j.frees, 1);
        assert_eq!(j.bytes_allocated, 1300);
        assert_eq!(j.temporary_allocations, 1);
        // live: 300 after the 3rd alloc, 200 after the free, 1200 after the
        // last alloc (t = 2032).
        assert_eq!(j.peak_bytes, 1200);
        assert_eq!(j.peak_time_ns, 2032);
        assert_eq!(j.peak_offset_ns, 1032);
        assert_eq!(j.live_at_exit_bytes, 1200);
        assert_eq!(j.live_at_exit_blocks, 3);
        assert_eq!(j.leaked_bytes, 1200);
        assert_eq!(j.duration_ns, 1032);
        let ids = |v: &[SiteJson]| v.iter().map(|s| s.stack_id).collect::<Vec<_>>();
        assert_eq!(ids(&j.top_sites.by_bytes), [1, 0]);
        assert_eq!(ids(&j.top_sites.by_count), [0, 1]);
        assert_eq!(ids(&j.top_sites.by_temporary), [0]);
        let f = &j.top_sites.by_bytes[0].stack[0];
        assert_eq!(f.function, "make");
        assert_eq!(f.module, "/bin/app");
        assert_eq!(f.offset, "0x200");
    }

    #[test]
    fn text_mentions_the_figures() {
        let a = trace();
        let mut out = Vec::new();
        let opts = Options {
            json: false,
            top: 10,
            frames: 16,
            symbols: SymbolOptions::default(),
        };
        text(&mut out, &a, "mlyze", &opts).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("allocation calls: 4\n"), "{s}");
        assert!(
            s.contains("peak heap: 1200 B (1.17 KiB) in 3 blocks at +0.000001 s"),
            "{s}"
        );
        assert!(
            s.contains("#0 0x400200 in make a.c:9 (/bin/app+0x200)"),
            "{s}"
        );
    }
}
