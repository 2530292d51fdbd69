//! Turning a recorded frame into the source lines a person reads.
//!
//! Each frame is looked up, in this order, in:
//!
//! 1. the **debug info** of the binary that holds it (the `symbolizer`
//!    crate: DWARF, then the ELF symbol table), which gives the demangled
//!    function, file and line, and expands **inlined** calls into frames of
//!    their own (innermost first, sharing the address, as LeakSanitizer
//!    prints them);
//! 2. the **trace's own names**: the frame's symbol (formats that store one
//!    with the stack) or a `Record::AddressSymbol` resolved by the tracer at
//!    exit;
//! 3. nothing: the raw address, with the module and offset when an object of
//!    the trace holds it (`(module+0xoff)`, what `addr2line -e module 0xoff`
//!    takes).
//!
//! Every frame that the debug info could not resolve is counted per module
//! with the reason (file missing, stripped, not the binary that ran, …), so
//! reports can say plainly which frames are unresolved and why
//! ([`Resolver::unresolved`]). The binaries are read where the trace names
//! them, or under `--sysroot`, after `--path-map` prefixes, with extra
//! `--debug-dir`s ([`SymbolOptions`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use format_writers::{Frame, Object, Symbol};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::analysis::Analysis;

/// Where to find binaries and debug info (the `--sysroot`, `--path-map` and
/// `--debug-dir` flags).
#[derive(Debug, Clone, Default)]
pub struct SymbolOptions {
    pub sysroot: Option<PathBuf>,
    pub path_map: Vec<(PathBuf, PathBuf)>,
    pub debug_dirs: Vec<PathBuf>,
    /// False: do not read any binary (only the trace's own names).
    pub no_debug_info: bool,
}

/// One source-level frame: what a report prints as `#N`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Line {
    pub address: u64,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    pub module: Option<String>,
    pub offset: u64,
    /// The code was inlined into the next line's function.
    pub inlined: bool,
}

/// Frames the debug info could not resolve, in one module, for one reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnresolvedNote {
    /// The module as the trace names it (`(no object)` when none holds the address).
    pub module: String,
    pub reason: String,
    /// Distinct frame addresses concerned.
    pub frames: u64,
    /// How many of them the trace itself named (shown with those names).
    pub named_by_trace: u64,
}

/// Symbolizes the frames of one trace.
pub struct Resolver<'a> {
    dwarf: Option<symbolizer::Symbolizer>,
    /// Objects with a known load address, sorted by it (module lookup when
    /// the debug info is not consulted).
    objects: Vec<&'a Object>,
    symbols: &'a FxHashMap<u64, Symbol>,
    executable: String,
    /// (module, reason) → (frames, named by the trace).
    notes: BTreeMap<(String, String), (u64, u64)>,
    noted: FxHashSet<u64>,
    /// Address ranges that different objects held in turn (a plugin
    /// unloaded and another loaded in its place), sorted: the files cannot
    /// tell which one a frame there was in, the trace's own names can.
    contested: Vec<(u64, u64)>,
}

/// The address ranges where objects of different paths overlap (each
/// maximal group of overlapping objects that holds two paths), sorted.
/// Objects without a path (a mapping another tool listed unnamed, as a
/// MALT sample does around its libraries) take no part.
fn contested_ranges(objects: &[&Object]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    // (lo, hi, first path, whether another path overlaps it)
    let mut group: Option<(u64, u64, &str, bool)> = None;
    for o in objects.iter().filter(|o| o.size > 0 && !o.path.is_empty()) {
        let (lo, hi) = (o.load_address, o.load_address.saturating_add(o.size));
        group = match group {
            Some((glo, ghi, path, mixed)) if lo < ghi => {
                Some((glo, ghi.max(hi), path, mixed || o.path != path))
            }
            done => {
                if let Some((glo, ghi, _, true)) = done {
                    out.push((glo, ghi));
                }
                Some((lo, hi, o.path.as_str(), false))
            }
        };
    }
    if let Some((glo, ghi, _, true)) = group {
        out.push((glo, ghi));
    }
    out
}

/// `No such file or directory (os error 2)` → `No such file or directory`.
fn without_os_error(s: &str) -> String {
    match s.find(" (os error ") {
        Some(i) => match s[i..].find(')') {
            Some(j) => format!("{}{}", &s[..i], &s[i + j + 1..]),
            None => s.to_string(),
        },
        None => s.to_string(),
    }
}

fn non_empty(s: &str) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s.to_string())
    }
}

impl<'a> Resolver<'a> {
    /// A resolver for the trace `a` describes.
    pub fn new(a: &'a Analysis, opts: &SymbolOptions) -> Resolver<'a> {
        Resolver::from_parts(&a.objects, &a.symbols, a.executable(), opts)
    }

    pub fn from_parts(
        objects: &'a [Object],
        symbols: &'a FxHashMap<u64, Symbol>,
        executable: &str,
        opts: &SymbolOptions,
    ) -> Resolver<'a> {
        let dwarf = (!opts.no_debug_info).then(|| {
            symbolizer::Symbolizer::new(
                objects,
                executable,
                symbolizer::Options {
                    sysroot: opts.sysroot.clone(),
                    path_map: opts.path_map.clone(),
                    debug_dirs: opts.debug_dirs.clone(),
                },
            )
        });
        let mut sorted: Vec<&Object> = objects.iter().filter(|o| o.load_address != 0).collect();
        sorted.sort_by_key(|o| o.load_address);
        let contested = contested_ranges(&sorted);
        Resolver {
            dwarf,
            objects: sorted,
            symbols,
            executable: executable.to_string(),
            notes: BTreeMap::new(),
            noted: FxHashSet::default(),
            contested,
        }
    }

    fn module_of(&self, address: u64) -> Option<(String, u64)> {
        if address == 0 {
            return None;
        }
        let i = self.objects.partition_point(|o| o.load_address <= address);
        self.objects[..i]
            .iter()
            .rev()
            .find(|o| o.size == 0 || address - o.load_address < o.size)
            .map(|o| {
                let path = if o.path.is_empty() {
                    self.executable.clone()
                } else {
                    o.path.clone()
                };
                (path, address - o.load_address)
            })
    }

    /// The trace's own name for a frame, if any.
    fn trace_symbol(&self, frame: &Frame) -> Option<Symbol> {
        frame
            .symbol
            .as_ref()
            .filter(|s| !s.function.is_empty() || !s.file.is_empty())
            .or_else(|| self.symbols.get(&frame.address))
            .cloned()
    }

    /// The source lines of one recorded frame: inlined calls first, then the
    /// function the code belongs to. Always at least one line.
    pub fn frame(&mut self, frame: &Frame) -> Vec<Line> {
        let trace = self.trace_symbol(frame);
        let i = self
            .contested
            .partition_point(|&(lo, _)| lo <= frame.address);
        if i > 0 && frame.address < self.contested[i - 1].1 {
            if let Some(t) = &trace {
                // Where objects took turns, the name the trace gave the frame
                // (by the code there when it was recorded), and no module:
                // the objects' files would answer for whichever is listed last.
                return vec![Line {
                    address: frame.address,
                    function: non_empty(&t.function),
                    file: non_empty(&t.file),
                    line: t.line,
                    module: None,
                    offset: 0,
                    inlined: false,
                }];
            }
        }
        let mut module = self.module_of(frame.address);
        if frame.address != 0 {
            if let Some(d) = self.dwarf.as_mut() {
                // Every recorded frame is a return address (frame 0 returns
                // into the caller of the allocation function).
                let r = d.symbolize(frame.address, true);
                if let Some(m) = &r.module {
                    module = Some((m.clone(), r.module_offset));
                }
                if r.unresolved.is_none() && !r.frames.is_empty() {
                    let n = r.frames.len();
                    return r
                        .frames
                        .iter()
                        .enumerate()
                        .map(|(i, f)| Line {
                            address: frame.address,
                            function: f.function.clone(),
                            file: f.file.clone(),
                            line: f.line.unwrap_or(0),
                            module: module.as_ref().map(|m| m.0.clone()),
                            offset: module.as_ref().map_or(0, |m| m.1),
                            inlined: i + 1 < n,
                        })
                        .collect();
                }
                let reason = match &r.unresolved {
                    Some(why) => without_os_error(&why.to_string()),
                    None => "no frame for this address".to_string(),
                };
                if self.noted.insert(frame.address) {
                    let name = module
                        .as_ref()
                        .map_or_else(|| "(no object)".to_string(), |m| m.0.clone());
                    let e = self.notes.entry((name, reason)).or_default();
                    e.0 += 1;
                    if trace.is_some() {
                        e.1 += 1;
                    }
                }
            }
        }
        vec![Line {
            address: frame.address,
            function: trace.as_ref().and_then(|s| non_empty(&s.function)),
            file: trace.as_ref().and_then(|s| non_empty(&s.file)),
            line: trace.as_ref().map_or(0, |s| s.line),
            module: module.as_ref().map(|m| m.0.clone()),
            offset: module.map_or(0, |m| m.1),
            inlined: false,
        }]
    }

    /// Every frame of a stack, innermost first, inlined calls expanded.
    pub fn stack(&mut self, frames: &[Frame]) -> Vec<Line> {
        frames.iter().flat_map(|f| self.frame(f)).collect()
    }

    /// The frames the debug info could not resolve so far, per module and reason.
    pub fn unresolved(&self) -> Vec<UnresolvedNote> {
        self.notes
            .iter()
            .map(|((module, reason), (frames, named))| UnresolvedNote {
                module: module.clone(),
                reason: reason.clone(),
                frames: *frames,
                named_by_trace: *named,
            })
            .collect()
    }

    /// Doubts about the binaries read (a file that may not be the one that ran).
    pub fn warnings(&self) -> Vec<String> {
        self.dwarf
            .as_ref()
            .map(|d| d.warnings().to_vec())
            .unwrap_or_default()
    }
}

/// The footnotes of a text report: one line per module and reason.
pub fn write_unresolved(
    out: &mut dyn std::io::Write,
    notes: &[UnresolvedNote],
    warnings: &[String],
) -> std::io::Result<()> {
    if notes.is_empty() && warnings.is_empty() {
        return Ok(());
    }
    writeln!(out, "Frames without debug info:")?;
    for n in notes {
        let named = match n.named_by_trace {
            0 => String::new(),
            k if k == n.frames => "; names taken from the trace".to_string(),
            k => format!("; {k} named from the trace"),
        };
        writeln!(
            out,
            "  {}: {} frame(s): {}{named}",
            n.module, n.frames, n.reason
        )?;
    }
    for w in warnings {
        writeln!(out, "  warning: {w}")?;
    }
    Ok(())
}

impl Line {
    /// `0x401a2b in main src/app.c:12 (/usr/bin/app+0x1a2b)`; parts that are
    /// unknown are left out (`0x401a2b (/usr/bin/app+0x1a2b)`, `0x401a2b`).
    pub fn text(&self) -> String {
        let mut s = String::new();
        if self.address != 0 || (self.function.is_none() && self.file.is_none()) {
            s.push_str(&format!("{:#x}", self.address));
        }
        if let Some(f) = &self.function {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str("in ");
            s.push_str(f);
        }
        if let Some(file) = &self.file {
            s.push(' ');
            s.push_str(file);
            if self.line != 0 {
                s.push_str(&format!(":{}", self.line));
            }
        }
        if let Some(m) = &self.module {
            s.push_str(&format!(" ({m}+{:#x})", self.offset));
        }
        if self.inlined {
            s.push_str(" (inlined)");
        }
        s
    }
}

/// A frame in the JSON outputs (`tracer leaks --json`, `tracer report
/// --json`): the interface's `function`, `file`, `line`, `module`, plus the
/// address, the offset in the module and whether the frame is an inlined
/// call. Unknown strings are empty, an unknown line is 0.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FrameJson {
    pub address: String,
    pub function: String,
    pub file: String,
    pub line: u32,
    pub module: String,
    pub offset: String,
    pub inlined: bool,
}

impl From<&Line> for FrameJson {
    fn from(f: &Line) -> FrameJson {
        FrameJson {
            address: format!("{:#x}", f.address),
            function: f.function.clone().unwrap_or_default(),
            file: f.file.clone().unwrap_or_default(),
            line: f.line,
            module: f.module.clone().unwrap_or_default(),
            offset: format!("{:#x}", f.offset),
            inlined: f.inlined,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(path: &str, load: u64, size: u64) -> Object {
        Object {
            path: path.into(),
            load_address: load,
            size,
        }
    }

    /// Objects of different paths that overlap make one contested range per
    /// overlapping group; the same object listed twice (loaded again at the
    /// same place) and objects side by side do not.
    #[test]
    fn ranges_held_by_different_objects_in_turn() {
        let objects = [
            obj("/a.so", 0x1000, 0x1000),
            obj("/b.so", 0x1800, 0x1000),
            obj("/a.so", 0x1000, 0x1000),
            obj("/c.so", 0x3000, 0x1000),
            obj("/c.so", 0x3000, 0x1000),
            obj("/d.so", 0x4000, 0x1000),
            obj("/e.so", 0x6000, 0x2000),
            obj("/f.so", 0x7000, 0x100),
            obj("", 0x9000, 0x10_0000),
            obj("/g.so", 0xa000, 0x1000),
        ];
        let mut sorted: Vec<&Object> = objects.iter().collect();
        sorted.sort_by_key(|o| o.load_address);
        assert_eq!(
            contested_ranges(&sorted),
            vec![(0x1000, 0x2800), (0x6000, 0x8000)]
        );
    }

    #[test]
    fn frame_texts_and_unresolved_notes() {
        let objects = vec![
            obj("/nonexistent/lib/libc.so.6", 0x7f00_0000_0000, 0x20_0000),
            obj("/nonexistent/bin/app", 0x5555_0000_0000, 0x1000),
            obj("/nowhere", 0, 0),
        ];
        let mut symbols = FxHashMap::default();
        symbols.insert(
            0x5555_0000_0a2b,
            Symbol {
                function: "main".into(),
                file: "src/app.c".into(),
                line: 12,
            },
        );
        let mut s = Resolver::from_parts(&objects, &symbols, "", &SymbolOptions::default());
        let f = |address| Frame {
            address,
            symbol: None,
        };
        let main = f(0x5555_0000_0a2b);
        assert_eq!(
            s.frame(&main)[0].text(),
            "0x555500000a2b in main src/app.c:12 (/nonexistent/bin/app+0xa2b)"
        );
        let libc = f(0x7f00_0000_1234);
        assert_eq!(
            s.frame(&libc)[0].text(),
            "0x7f0000001234 (/nonexistent/lib/libc.so.6+0x1234)"
        );
        // Past the end of the app's mapping and below libc: no module.
        let stray = f(0x5555_0000_2000);
        assert_eq!(s.frame(&stray)[0].text(), "0x555500002000");
        // A symbol-only frame (dumpalloc PCAL) is never looked up.
        let pcal = Frame {
            address: 0,
            symbol: Some(Symbol {
                function: "handler".into(),
                file: "x.py".into(),
                line: 3,
            }),
        };
        assert_eq!(s.frame(&pcal)[0].text(), "in handler x.py:3");
        // The same address again is not counted twice.
        s.frame(&main);
        let notes = s.unresolved();
        let summary: Vec<(&str, u64, u64)> = notes
            .iter()
            .map(|n| (n.module.as_str(), n.frames, n.named_by_trace))
            .collect();
        assert_eq!(
            summary,
            [
                ("(no object)", 1, 0),
                ("/nonexistent/bin/app", 1, 1),
                ("/nonexistent/lib/libc.so.6", 1, 0)
            ]
        );
        assert!(
            notes[1]
                .reason
                .starts_with("cannot open /nonexistent/bin/app: "),
            "{notes:?}"
        );
        let mut out = Vec::new();
        write_unresolved(&mut out, &notes, &[]).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("  /nonexistent/bin/app: 1 frame(s): cannot open /nonexistent/bin/app: No such file or directory; names taken from the trace\n"),
            "{t}"
        );
    }

    #[test]
    fn the_running_test_binary_resolves_with_inlined_frames_flagged() {
        // This test's own code: the address of a function in this binary,
        // mapped as the kernel mapped it. /proc/self/maps gives the lowest
        // mapping of the executable.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let (load, end) = maps
            .lines()
            .filter(|l| l.ends_with(exe.as_str()))
            .map(|l| {
                let range = l.split_whitespace().next().unwrap();
                let (a, b) = range.split_once('-').unwrap();
                (
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                )
            })
            .fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
        let objects = vec![obj(&exe, load, end - load)];
        let symbols = FxHashMap::default();
        let mut s = Resolver::from_parts(&objects, &symbols, "", &SymbolOptions::default());
        // +1: a return address just after the function's first instruction.
        let here = marker_function as *const () as usize as u64 + 1;
        let frame = Frame {
            address: here,
            symbol: None,
        };
        let lines = s.frame(&frame);
        let last = lines.last().unwrap();
        assert!(
            last.function
                .as_deref()
                .is_some_and(|f| f.ends_with("marker_function")),
            "{lines:?}"
        );
        assert!(last.file.as_deref().unwrap().ends_with("symbolize.rs"));
        assert!(!last.inlined);
        assert_eq!(last.module.as_deref(), Some(exe.as_str()));
        assert!(s.unresolved().is_empty());
    }

    #[inline(never)]
    fn marker_function() -> u64 {
        std::hint::black_box(42)
    }
}
