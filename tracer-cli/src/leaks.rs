//! `tracer leaks`: the blocks still live at exit, grouped by allocation
//! stack, largest first, in LeakSanitizer's words.
//!
//! Traces hold no reachability scan yet, so nothing distinguishes a leak from
//! a block still referenced at exit: every live block is reported with kind
//! `definite` ("Direct leak" in the text), and the output says so. Groups
//! whose stack matches a suppression are left out and counted per rule.

use std::io::Write;

use serde::Serialize;

use crate::analysis::Analysis;
use crate::failure::{Failure, EXIT_LEAKS};
use crate::suppressions::Suppressions;
use crate::symbolize::{FrameJson, Symbolizer};
use format_writers::StackId;

/// One group of leaked blocks sharing an allocation stack.
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
    pub hits: u64,
    pub bytes: u64,
    pub blocks: u64,
}

/// `tracer leaks --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaksJson {
    pub leaks: Vec<LeakJson>,
    pub leaked_bytes: u64,
    pub leaked_blocks: u64,
    pub suppressed_bytes: u64,
    pub suppressed_blocks: u64,
    pub suppressions: Vec<SuppressionJson>,
    /// False: no reachability scan, every live block is reported as definite.
    pub reachability_scan: bool,
}

/// Computes the leak report, counting suppressions into `supp`.
pub fn compute(a: &Analysis, supp: &mut Suppressions) -> LeaksJson {
    let sym = Symbolizer::new(&a.objects, &a.symbols);
    let mut leaks = Vec::new();
    let (mut sup_bytes, mut sup_blocks) = (0, 0);
    for (stack, bytes, blocks) in a.live_by_stack() {
        let frames = a
            .stacks
            .get(&stack)
            .map(|f| sym.stack(f))
            .unwrap_or_default();
        if let Some(rule) = supp.matching(&frames) {
            supp.count(rule, bytes, blocks);
            sup_bytes = u64::saturating_add(sup_bytes, bytes);
            sup_blocks = u64::saturating_add(sup_blocks, blocks);
            continue;
        }
        leaks.push(LeakJson {
            kind: "definite",
            bytes,
            blocks,
            stack_id: stack,
            stack: frames.iter().map(FrameJson::from).collect(),
        });
    }
    LeaksJson {
        leaked_bytes: leaks.iter().fold(0, |s, l| s.saturating_add(l.bytes)),
        leaked_blocks: leaks.iter().fold(0, |s, l| s.saturating_add(l.blocks)),
        leaks,
        suppressed_bytes: sup_bytes,
        suppressed_blocks: sup_blocks,
        suppressions: supp
            .rules
            .iter()
            .map(|r| SuppressionJson {
                pattern: r.pattern.clone(),
                hits: r.hits,
                bytes: r.bytes,
                blocks: r.blocks,
            })
            .collect(),
        reachability_scan: false,
    }
}

/// One frame as a line: `#0 0x401a2b in main src/app.c:12 (/bin/app+0x1a2b)`.
fn frame_line(i: usize, f: &FrameJson) -> String {
    let mut s = format!("#{i}");
    if f.address != "0x0" || (f.function.is_empty() && f.file.is_empty()) {
        s.push(' ');
        s.push_str(&f.address);
    }
    if !f.function.is_empty() {
        s.push_str(" in ");
        s.push_str(&f.function);
    }
    if !f.file.is_empty() {
        s.push(' ');
        s.push_str(&f.file);
        if f.line != 0 {
            s.push_str(&format!(":{}", f.line));
        }
    }
    if !f.module.is_empty() {
        s.push_str(&format!(" ({}+{})", f.module, f.offset));
    }
    s
}

/// The LeakSanitizer-style text.
pub fn text(out: &mut dyn Write, r: &LeaksJson) -> std::io::Result<()> {
    for l in &r.leaks {
        writeln!(
            out,
            "Direct leak of {} byte(s) in {} object(s) allocated from:",
            l.bytes, l.blocks
        )?;
        if l.stack.is_empty() {
            writeln!(out, "    (no frames recorded for stack {})", l.stack_id)?;
        }
        for (i, f) in l.stack.iter().enumerate() {
            writeln!(out, "    {}", frame_line(i, f))?;
        }
        writeln!(out)?;
    }
    if r.leaks.is_empty() {
        writeln!(
            out,
            "No leaks: no block allocated during tracing is live at exit"
        )?;
    } else {
        writeln!(
            out,
            "SUMMARY: {} byte(s) leaked in {} allocation(s).",
            r.leaked_bytes, r.leaked_blocks
        )?;
    }
    if r.suppressions.iter().any(|s| s.hits > 0) {
        writeln!(out, "-----------------------------------------------------")?;
        writeln!(out, "Suppressions used:")?;
        writeln!(out, "  count      bytes template")?;
        for s in r.suppressions.iter().filter(|s| s.hits > 0) {
            writeln!(out, "{:>7} {:>10} {}", s.hits, s.bytes, s.pattern)?;
        }
        writeln!(out, "-----------------------------------------------------")?;
    }
    if !r.leaks.is_empty() {
        writeln!(
            out,
            "Note: this trace holds no reachability scan, so every block live at exit is \
             reported as a direct (definite) leak, including blocks still referenced at exit."
        )?;
    }
    Ok(())
}

/// Options of the verb.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub json: bool,
    pub fail: bool,
}

/// Runs the verb on an analysed trace: 23 when `fail` and leaks remain.
pub fn print(
    a: &Analysis,
    supp: &mut Suppressions,
    opts: &Options,
    out: &mut dyn Write,
) -> Result<i32, Failure> {
    let r = compute(a, supp);
    if opts.json {
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
            path: "/usr/lib/libfoo.so".into(),
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

    #[test]
    fn groups_largest_first() {
        let a = analysis();
        let r = compute(&a, &mut Suppressions::default());
        let got: Vec<(u64, u64, u64)> = r
            .leaks
            .iter()
            .map(|l| (l.stack_id, l.bytes, l.blocks))
            .collect();
        assert_eq!(got, [(1, 500, 1), (2, 30, 3), (0, 20, 2)]);
        assert_eq!(r.leaked_bytes, 550);
        assert_eq!(r.leaked_blocks, 6);
        assert_eq!(r.leaks[0].kind, "definite");
        assert_eq!(r.leaks[0].stack[0].module, "/usr/lib/libfoo.so");
    }

    #[test]
    fn suppressions_remove_and_count() {
        let a = analysis();
        let mut s = Suppressions::parse("leak:foo_*\nleak:^work\nleak:nothing\n").unwrap();
        let r = compute(&a, &mut s);
        assert_eq!(r.leaks.len(), 1);
        assert_eq!(r.leaks[0].stack_id, 0);
        assert_eq!(r.suppressed_bytes, 530);
        assert_eq!(r.suppressed_blocks, 4);
        let counts: Vec<(u64, u64)> = r.suppressions.iter().map(|s| (s.hits, s.bytes)).collect();
        assert_eq!(counts, [(1, 500), (1, 30), (0, 0)]);
        let mut out = Vec::new();
        text(&mut out, &r).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(t.starts_with(
            "Direct leak of 20 byte(s) in 2 object(s) allocated from:\n    #0 0x7000 in main main.c:1 (/usr/lib/libfoo.so+0x0)\n"
        ), "{t}");
        assert!(t.contains("SUMMARY: 20 byte(s) leaked in 2 allocation(s).\n"));
        assert!(t.contains("      1        500 foo_*\n"), "{t}");
    }

    #[test]
    fn module_pattern_suppresses_everything_in_it() {
        let a = analysis();
        let mut s = Suppressions::parse("leak:libfoo.so").unwrap();
        let r = compute(&a, &mut s);
        assert!(r.leaks.is_empty());
        assert_eq!(r.suppressions[0].hits, 3);
        let mut out = Vec::new();
        let code = print(
            &a,
            &mut Suppressions::default(),
            &Options {
                json: false,
                fail: true,
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(code, 23);
    }
}
