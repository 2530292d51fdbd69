//! `tracer leaks`: the blocks still allocated at exit, grouped by allocation
//! stack and reachability class, largest first, in LeakSanitizer's words.
//!
//! Where the trace holds the tracer's reachability scan (`Record::LeakScan`
//! and the `Record::BlockClass` records after it), every block live at exit
//! has valgrind's class: **definite** ("Direct leak"), **indirect**
//! ("Indirect leak": reachable only from leaked blocks), **possible**
//! (reachable only through an interior pointer) or **reachable**. By default
//! only definite and indirect groups are reported (`--show` adds the others).
//! Blocks the scan could not have seen — allocated after it, by exit-time
//! destructors — and blocks it did not classify are counted apart, never
//! silently dropped. A trace without a scan (older traces, a process killed
//! before exit) reports every live block as definite, and says so. An image
//! that ended by `exec` (info `ended`=`exec`) is not checked: its blocks
//! went with it, as valgrind and LeakSanitizer see it; its live blocks are
//! counted (`replaced_by_exec`) and no leak is reported; so is a process a
//! signal ended (info `ended`=`signal`, `signal`=its name: it ran no exit,
//! as LeakSanitizer checks only processes that exit), in `ended_by_signal`.
//!
//! Groups whose stack matches a suppression are left out and counted per
//! rule. `leaked_bytes`/`leaked_blocks` are the unsuppressed definite and
//! indirect blocks (everything live, without a scan), whatever `--show` says;
//! `--fail` fails when any group is reported.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::analysis::Analysis;
use crate::failure::{Failure, EXIT_LEAKS};
use crate::suppressions::Suppressions;
use crate::symbolize::{self, FrameJson, Line, Resolver, SymbolOptions, UnresolvedNote};
use format_writers::{LeakKind, StackId};
use rustc_hash::FxHashMap;

/// One group of blocks sharing an allocation stack and a class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeakJson {
    pub kind: &'static str,
    pub bytes: u64,
    pub blocks: u64,
    pub stack_id: StackId,
    pub stack: Vec<FrameJson>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuppressionJson {
    pub pattern: String,
    /// The file the rule came from, `default` for the built-in list.
    pub source: String,
    /// Leak groups it hid.
    pub hits: u64,
    pub bytes: u64,
    pub blocks: u64,
}

/// Bytes and blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Amount {
    pub bytes: u64,
    pub blocks: u64,
}

impl Amount {
    fn add(&mut self, bytes: u64, blocks: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.blocks = self.blocks.saturating_add(blocks);
    }
}

/// Every block live at exit by class, suppressed ones included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ByKind {
    pub definite: Amount,
    pub indirect: Amount,
    pub possible: Amount,
    pub reachable: Amount,
}

impl ByKind {
    fn get_mut(&mut self, k: LeakKind) -> &mut Amount {
        match k {
            LeakKind::Definite => &mut self.definite,
            LeakKind::Indirect => &mut self.indirect,
            LeakKind::Possible => &mut self.possible,
            LeakKind::Reachable => &mut self.reachable,
        }
    }
}

/// `tracer leaks --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaksJson {
    /// The reported groups (kinds shown, not suppressed), largest first.
    pub leaks: Vec<LeakJson>,
    /// Definite + indirect, not suppressed (every live block without a scan).
    pub leaked_bytes: u64,
    pub leaked_blocks: u64,
    pub suppressed_bytes: u64,
    pub suppressed_blocks: u64,
    pub suppressions: Vec<SuppressionJson>,
    /// Whether the trace holds the reachability scan. Without it every live
    /// block is reported as definite.
    pub reachability_scan: bool,
    /// Time of the scan (ns since the epoch), when there is one.
    pub scan_time_ns: Option<u64>,
    /// The kinds reported.
    pub shown_kinds: Vec<&'static str>,
    pub by_kind: ByKind,
    /// Blocks allocated after the scan (exit-time destructors): not classified.
    pub after_scan: Amount,
    /// Blocks live at the scan that it did not classify.
    pub unclassified: Amount,
    /// The image ended by `exec`: the blocks live then (none is reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by_exec: Option<Amount>,
    /// The process was ended by a signal: which, and the blocks live then
    /// (none is reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by_signal: Option<SignalEnd>,
    /// Frames the debug info could not resolve, per module and reason.
    pub unresolved_frames: Vec<UnresolvedNote>,
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Source lines of every reported group, for the text and SARIF outputs.
    #[serde(skip)]
    pub lines: Vec<Vec<Line>>,
}

/// A process a signal ended, and what it had live then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignalEnd {
    pub signal: String,
    pub bytes: u64,
    pub blocks: u64,
}

/// Options of the verb.
#[derive(Debug, Clone)]
pub struct Options {
    pub json: bool,
    pub sarif: bool,
    pub fail: bool,
    /// Kinds reported (definite and indirect by default).
    pub show: Vec<LeakKind>,
    /// SARIF: file URIs relative to this directory.
    pub source_root: Option<PathBuf>,
    pub symbols: SymbolOptions,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            json: false,
            sarif: false,
            fail: false,
            show: DEFAULT_SHOW.to_vec(),
            source_root: None,
            symbols: SymbolOptions::default(),
        }
    }
}

/// What is reported without `--show`.
pub const DEFAULT_SHOW: [LeakKind; 2] = [LeakKind::Definite, LeakKind::Indirect];

/// Parses `--show`: comma-separated kinds, or `all`.
pub fn parse_show(spec: &str) -> Result<Vec<LeakKind>, String> {
    let mut kinds = Vec::new();
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if word == "all" {
            return Ok(LeakKind::ALL.to_vec());
        }
        let k = LeakKind::from_name(word).ok_or_else(|| {
            format!(
                "--show: expected definite, indirect, possible, reachable or all, found {word:?}"
            )
        })?;
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    if kinds.is_empty() {
        return Err("--show: expected at least one kind".into());
    }
    kinds.sort();
    Ok(kinds)
}

/// The name of a kind in reports, LeakSanitizer's for the two leak kinds.
pub fn heading(kind: LeakKind) -> &'static str {
    match kind {
        LeakKind::Definite => "Direct leak",
        LeakKind::Indirect => "Indirect leak",
        LeakKind::Possible => "Possible leak",
        LeakKind::Reachable => "Still reachable",
    }
}

/// `Direct leak of 24 byte(s) in 1 object(s)` (`Still reachable: 24 byte(s)
/// in 1 object(s)` for a block that is no leak).
pub fn title(kind: LeakKind, bytes: u64, blocks: u64) -> String {
    let joint = if kind == LeakKind::Reachable {
        ":"
    } else {
        " of"
    };
    format!(
        "{}{joint} {bytes} byte(s) in {blocks} object(s)",
        heading(kind)
    )
}

/// Computes the leak report, counting suppressions into `supp`.
pub fn compute(a: &Analysis, supp: &mut Suppressions, opts: &Options) -> LeaksJson {
    let scan = a.leak_scan_ns.is_some();
    let mut groups: FxHashMap<(LeakKind, StackId), Amount> = FxHashMap::default();
    let mut by_kind = ByKind::default();
    let (mut after_scan, mut unclassified) = (Amount::default(), Amount::default());
    let mut unchecked = a.not_leak_checked().then(Amount::default);
    for b in a.live.values() {
        if let Some(r) = unchecked.as_mut() {
            r.add(b.size, 1);
            continue;
        }
        let kind = match (scan, b.class) {
            (false, _) => LeakKind::Definite,
            (true, Some(k)) => k,
            (true, None) if b.after_scan => {
                after_scan.add(b.size, 1);
                continue;
            }
            (true, None) => {
                unclassified.add(b.size, 1);
                continue;
            }
        };
        by_kind.get_mut(kind).add(b.size, 1);
        groups.entry((kind, b.stack)).or_default().add(b.size, 1);
    }
    let mut groups: Vec<((LeakKind, StackId), Amount)> = groups
        .into_iter()
        .filter(|((k, _), _)| opts.show.contains(k))
        .collect();
    groups.sort_by(|(ka, a), (kb, b)| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.blocks.cmp(&a.blocks))
            .then(ka.cmp(kb))
    });

    let mut resolver = Resolver::new(a, &opts.symbols);
    let mut stacks: FxHashMap<StackId, Vec<Line>> = FxHashMap::default();
    let mut leaks = Vec::new();
    let mut lines = Vec::new();
    let mut suppressed = Amount::default();
    let mut leaked = Amount::default();
    for ((kind, stack), amount) in groups {
        let frames = stacks
            .entry(stack)
            .or_insert_with(|| {
                a.stacks
                    .get(&stack)
                    .map(|f| resolver.stack(&f))
                    .unwrap_or_default()
            })
            .clone();
        if let Some(rule) = supp.matching(&frames) {
            supp.count(rule, amount.bytes, amount.blocks);
            suppressed.add(amount.bytes, amount.blocks);
            continue;
        }
        leaks.push(LeakJson {
            kind: kind.name(),
            bytes: amount.bytes,
            blocks: amount.blocks,
            stack_id: stack,
            stack: frames.iter().map(FrameJson::from).collect(),
        });
        lines.push(frames);
    }
    // leaked_* counts definite and indirect whether shown or not: compute
    // the unsuppressed part of kinds that were not shown too.
    for kind in DEFAULT_SHOW {
        let total = match kind {
            LeakKind::Definite => by_kind.definite,
            _ => by_kind.indirect,
        };
        if opts.show.contains(&kind) {
            for l in leaks.iter().filter(|l| l.kind == kind.name()) {
                leaked.add(l.bytes, l.blocks);
            }
        } else {
            leaked.add(total.bytes, total.blocks);
        }
    }
    LeaksJson {
        leaked_bytes: leaked.bytes,
        leaked_blocks: leaked.blocks,
        leaks,
        suppressed_bytes: suppressed.bytes,
        suppressed_blocks: suppressed.blocks,
        suppressions: supp
            .rules
            .iter()
            .map(|r| SuppressionJson {
                pattern: r.pattern.clone(),
                source: r.source.clone(),
                hits: r.hits,
                bytes: r.bytes,
                blocks: r.blocks,
            })
            .collect(),
        reachability_scan: scan,
        scan_time_ns: a.leak_scan_ns,
        shown_kinds: opts.show.iter().map(|k| k.name()).collect(),
        by_kind,
        after_scan,
        unclassified,
        replaced_by_exec: unchecked.filter(|_| a.replaced_by_exec()),
        ended_by_signal: match (a.ended_by_signal(), unchecked) {
            (Some(signal), Some(live)) if !a.replaced_by_exec() => Some(SignalEnd {
                signal: signal.to_string(),
                bytes: live.bytes,
                blocks: live.blocks,
            }),
            _ => None,
        },
        unresolved_frames: resolver.unresolved(),
        warnings: resolver.warnings(),
        lines,
    }
}

fn kind_of(name: &str) -> LeakKind {
    LeakKind::from_name(name).unwrap_or(LeakKind::Definite)
}

/// The LeakSanitizer-style text.
pub fn text(out: &mut dyn Write, r: &LeaksJson) -> std::io::Result<()> {
    for (l, lines) in r.leaks.iter().zip(&r.lines) {
        writeln!(
            out,
            "{} allocated from:",
            title(kind_of(l.kind), l.bytes, l.blocks)
        )?;
        if lines.is_empty() {
            writeln!(out, "    (no frames recorded for stack {})", l.stack_id)?;
        }
        for (i, f) in lines.iter().enumerate() {
            writeln!(out, "    #{i} {}", f.text())?;
        }
        writeln!(out)?;
    }
    if let Some(live) = r.replaced_by_exec {
        writeln!(
            out,
            "No leak check: this image was replaced by exec; its {} block(s) ({} byte(s)) \
             live then went with it.",
            live.blocks, live.bytes
        )?;
        return Ok(());
    }
    if let Some(end) = &r.ended_by_signal {
        writeln!(
            out,
            "No leak check: this process was ended by {}, which runs no exit; its {} \
             block(s) ({} byte(s)) live then are not counted as leaks.",
            end.signal, end.blocks, end.bytes
        )?;
        return Ok(());
    }
    if r.leaks.is_empty() {
        if !r.reachability_scan && r.by_kind.definite.blocks == 0 {
            writeln!(
                out,
                "No leaks: no block allocated during tracing is live at exit"
            )?;
        } else {
            writeln!(out, "No leaks (kinds shown: {}).", r.shown_kinds.join(", "))?;
        }
    } else {
        writeln!(
            out,
            "SUMMARY: {} byte(s) leaked in {} allocation(s).",
            r.leaked_bytes, r.leaked_blocks
        )?;
    }
    if r.reachability_scan {
        let row = |name: &str, a: Amount, kind: Option<LeakKind>| {
            let hidden = match kind {
                Some(k) if !r.shown_kinds.contains(&k.name()) => {
                    format!(" (not shown; --show {})", k.name())
                }
                _ => String::new(),
            };
            format!(
                "  {name:>24}: {} byte(s) in {} block(s){hidden}\n",
                a.bytes, a.blocks
            )
        };
        let mut s = String::from("Blocks live at exit, by the reachability scan at exit:\n");
        s += &row(
            "definitely lost",
            r.by_kind.definite,
            Some(LeakKind::Definite),
        );
        s += &row(
            "indirectly lost",
            r.by_kind.indirect,
            Some(LeakKind::Indirect),
        );
        s += &row(
            "possibly lost",
            r.by_kind.possible,
            Some(LeakKind::Possible),
        );
        s += &row(
            "still reachable",
            r.by_kind.reachable,
            Some(LeakKind::Reachable),
        );
        if r.after_scan.blocks > 0 {
            s += &row("allocated after the scan", r.after_scan, None);
        }
        if r.unclassified.blocks > 0 {
            s += &row("not classified", r.unclassified, None);
        }
        if r.suppressed_blocks > 0 {
            s += &row(
                "suppressed",
                Amount {
                    bytes: r.suppressed_bytes,
                    blocks: r.suppressed_blocks,
                },
                None,
            );
        }
        out.write_all(s.as_bytes())?;
    }
    if r.suppressions.iter().any(|s| s.hits > 0) {
        writeln!(out, "-----------------------------------------------------")?;
        writeln!(out, "Suppressions used:")?;
        // LeakSanitizer's table (count = leak groups hidden), then the
        // blocks, which LeakSanitizer does not show.
        writeln!(out, "  count      bytes template")?;
        let used: Vec<&SuppressionJson> = r.suppressions.iter().filter(|s| s.hits > 0).collect();
        for s in &used {
            let from = if s.source == crate::suppressions::DEFAULT_SOURCE {
                " (default)"
            } else {
                ""
            };
            writeln!(out, "{:>7} {:>10} {}{from}", s.hits, s.bytes, s.pattern)?;
        }
        let blocks: Vec<String> = used
            .iter()
            .map(|s| format!("{} by {}", s.blocks, s.pattern))
            .collect();
        writeln!(out, "  blocks hidden: {}", blocks.join(", "))?;
        writeln!(out, "-----------------------------------------------------")?;
    }
    if !r.leaks.is_empty() || !r.unresolved_frames.is_empty() {
        symbolize::write_unresolved(out, &r.unresolved_frames, &r.warnings)?;
    }
    if !r.reachability_scan && !r.leaks.is_empty() {
        writeln!(
            out,
            "Note: this trace holds no reachability scan, so every block live at exit is \
             reported as a direct (definite) leak, including blocks still referenced at exit."
        )?;
    }
    if r.after_scan.blocks > 0 {
        writeln!(
            out,
            "Note: {} byte(s) in {} block(s) were allocated after the reachability scan \
             (by exit-time destructors) and are not classified.",
            r.after_scan.bytes, r.after_scan.blocks
        )?;
    }
    Ok(())
}

/// Runs the verb on an analysed trace: 23 when `fail` and a leak is reported.
pub fn print(
    a: &Analysis,
    supp: &mut Suppressions,
    opts: &Options,
    out: &mut dyn Write,
) -> Result<i32, Failure> {
    let r = compute(a, supp, opts);
    if opts.sarif {
        let doc = crate::sarif::document(&[(a, &r)], opts.source_root.as_deref());
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else if opts.json {
        serde_json::to_writer_pretty(&mut *out, &r).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        text(out, &r)?;
    }
    Ok(if opts.fail && !r.leaks.is_empty() {
        EXIT_LEAKS
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Alloc, Event, Frame, Object, Record, Stack, Symbol};

    fn analysis() -> Analysis {
        let mut a = Analysis::new();
        a.add(Record::Object(Object {
            path: "/nonexistent/lib/libfoo.so".into(),
            load_address: 0x7000,
            size: 0x1000,
        }));
        for (id, func) in [(0u64, "main"), (1, "foo_init"), (2, "worker")] {
            a.add(Record::Stack(Stack {
                id,
                frames: vec![Frame {
                    address: 0x7000 + id * 16,
                    symbol: Some(Symbol {
                        function: func.into(),
                        file: format!("{func}.c"),
                        line: 1,
                    }),
                }],
            }));
        }
        // stack 0: 2 × 10 B; stack 1: 1 × 500 B; stack 2: 3 × 10 B
        let blocks = [(0, 10), (0, 10), (1, 500), (2, 10), (2, 10), (2, 10)];
        for (i, (stack, size)) in blocks.into_iter().enumerate() {
            a.add(Record::Event(Event::Alloc(Alloc {
                time_ns: i as u64,
                thread: 1,
                address: 0x100 * (i as u64 + 1),
                size,
                stack,
            })));
        }
        a
    }

    fn opts() -> Options {
        Options::default()
    }

    #[test]
    fn groups_largest_first() {
        let a = analysis();
        let r = compute(&a, &mut Suppressions::default(), &opts());
        let got: Vec<(u64, u64, u64)> = r
            .leaks
            .iter()
            .map(|l| (l.stack_id, l.bytes, l.blocks))
            .collect();
        assert_eq!(got, [(1, 500, 1), (2, 30, 3), (0, 20, 2)]);
        assert_eq!(r.leaked_bytes, 550);
        assert_eq!(r.leaked_blocks, 6);
        assert_eq!(r.leaks[0].kind, "definite");
        assert_eq!(r.leaks[0].stack[0].module, "/nonexistent/lib/libfoo.so");
        assert!(!r.reachability_scan);
    }

    #[test]
    fn suppressions_remove_and_count() {
        let a = analysis();
        let mut s = Suppressions::parse("leak:foo_*\nleak:^work\nleak:nothing\n").unwrap();
        let r = compute(&a, &mut s, &opts());
        assert_eq!(r.leaks.len(), 1);
        assert_eq!(r.leaks[0].stack_id, 0);
        assert_eq!(r.suppressed_bytes, 530);
        assert_eq!(r.suppressed_blocks, 4);
        let counts: Vec<(u64, u64, u64)> = r
            .suppressions
            .iter()
            .map(|s| (s.hits, s.bytes, s.blocks))
            .collect();
        assert_eq!(counts, [(1, 500, 1), (1, 30, 3), (0, 0, 0)]);
        let mut out = Vec::new();
        text(&mut out, &r).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(t.starts_with(
            "Direct leak of 20 byte(s) in 2 object(s) allocated from:\n    #0 0x7000 in main main.c:1 (/nonexistent/lib/libfoo.so+0x0)\n"
        ), "{t}");
        assert!(t.contains("SUMMARY: 20 byte(s) leaked in 2 allocation(s).\n"));
        assert!(t.contains("      1        500 foo_*\n"), "{t}");
        assert!(
            t.contains("  blocks hidden: 1 by foo_*, 3 by ^work\n"),
            "{t}"
        );
        // The library could not be read: said once, with the reason.
        assert!(
            t.contains("  /nonexistent/lib/libfoo.so: 3 frame(s): cannot open /nonexistent/lib/libfoo.so: No such file or directory; names taken from the trace\n"),
            "{t}"
        );
    }

    #[test]
    fn module_pattern_suppresses_everything_in_it() {
        let a = analysis();
        let mut s = Suppressions::parse("leak:libfoo.so").unwrap();
        let r = compute(&a, &mut s, &opts());
        assert!(r.leaks.is_empty());
        assert_eq!(r.suppressions[0].hits, 3);
        assert_eq!(r.leaked_blocks, 0);
        let mut out = Vec::new();
        let o = Options {
            fail: true,
            ..opts()
        };
        let code = print(&a, &mut Suppressions::default(), &o, &mut out).unwrap();
        assert_eq!(code, 23);
    }

    #[test]
    fn show_parsing() {
        assert_eq!(
            parse_show("reachable,definite").unwrap(),
            [LeakKind::Definite, LeakKind::Reachable]
        );
        assert_eq!(parse_show("all").unwrap(), LeakKind::ALL);
        assert!(parse_show("lost").is_err());
        assert!(parse_show(",").is_err());
    }
}
