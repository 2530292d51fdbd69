//! callgrind profiles of a heap trace, for KCachegrind and `callgrind_annotate`.
//!
//! The file is valgrind's callgrind text format (`positions: line`) with four
//! events per cost line:
//!
//! | event | meaning |
//! | --- | --- |
//! | `Allocations` | allocation calls |
//! | `Bytes` | bytes allocated |
//! | `Leaked` | bytes still live at exit |
//! | `Peak` | bytes live when the heap reached its peak |
//!
//! The innermost frame of each allocation stack (the caller of `malloc`)
//! carries the **self** cost at its source line. Each call edge of the stack
//! is written in the caller's `fn=` block as `cfl=`/`cfn=`/`calls=` followed
//! by the **inclusive** cost that flowed through it, so KCachegrind shows
//! callers and callees. Every stack hangs below one synthetic function,
//! `[root]` (file `???`): `callgrind_annotate --inclusive=yes` takes a called
//! function's inclusive cost to be the sum of the calls *into* it, so every
//! real function must be called, also the outermost frame of a truncated
//! stack. A function that appears several times in one stack (recursion)
//! receives that stack's cost once, through the edge into its outermost
//! occurrence; the edges into its inner occurrences are left out. `calls=`
//! counts the allocations that went through the edge. Names are written uncompressed (`fn=name`, no `(id)`): simpler to
//! read and diff, and every reader accepts it.
//!
//! Functions are identified by (file, name); a frame without a symbol is
//! named `0xADDR` with file `???`, and a stack without frames `[no stack]`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use crate::aggregate::Aggregate;
use crate::model::Frame;

/// The events of every cost line, in order.
pub const EVENTS: [&str; 4] = ["Allocations", "Bytes", "Leaked", "Peak"];

type Cost = [u64; 4];

/// The function every stack is called from.
pub const ROOT: &str = "[root]";
/// The function of an allocation whose stack has no frames.
pub const NO_STACK: &str = "[no stack]";

fn add(a: &mut Cost, b: &Cost) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.wrapping_add(*y);
    }
}

/// The callgrind profile format, rendered by [`render`].
pub struct Callgrind;

impl crate::aggregate::Render for Callgrind {
    fn render(agg: &Aggregate, out: &mut dyn Write) -> io::Result<()> {
        render(agg, out)
    }
}

/// Writes a callgrind profile of the records it is given, at `finish`.
pub type Writer<W> = crate::aggregate::ProfileWriter<W, Callgrind>;

#[derive(Default)]
struct Function {
    /// Self cost per line.
    lines: BTreeMap<u32, Cost>,
    /// (caller line, callee function, callee line) → (calls, inclusive cost).
    calls: BTreeMap<(u32, usize, u32), (u64, Cost)>,
}

/// A frame as callgrind sees it: function (file, name) and line.
fn place(agg: &Aggregate, f: &Frame) -> ((String, String), u32) {
    let sym = agg.symbol(f);
    let file = match &sym {
        Some(s) if !s.file.is_empty() => s.file.clone(),
        _ => "???".to_string(),
    };
    let line = sym.as_ref().map(|s| s.line).unwrap_or(0);
    let name = agg.frame_name(f).replace(['\n', '\r'], " ");
    ((file, name), line)
}

/// Writes the callgrind profile of `agg` to `out`.
pub fn render<W: Write>(agg: &Aggregate, out: W) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    let mut ids: HashMap<(String, String), usize> = HashMap::new();
    let mut names: Vec<(String, String)> = Vec::new();
    let mut funcs: Vec<Function> = Vec::new();
    let mut intern = |key: (String, String), funcs: &mut Vec<Function>| -> usize {
        *ids.entry(key.clone()).or_insert_with(|| {
            names.push(key);
            funcs.push(Function::default());
            names.len() - 1
        })
    };
    let root = intern(("???".to_string(), ROOT.to_string()), &mut funcs);
    let mut total: Cost = [0; 4];
    for (id, st) in agg.stack_stats() {
        let cost: Cost = [
            st.alloc.count,
            st.alloc.sum,
            st.alive_bytes,
            agg.peak_bytes_of(id),
        ];
        add(&mut total, &cost);
        // Outermost first.
        let mut chain: Vec<(usize, u32)> = agg
            .frames(id)
            .iter()
            .rev()
            .map(|f| {
                let (key, line) = place(agg, f);
                (intern(key, &mut funcs), line)
            })
            .collect();
        if chain.is_empty() {
            let key = ("???".to_string(), NO_STACK.to_string());
            chain.push((intern(key, &mut funcs), 0));
        }
        chain.insert(0, (root, 0));
        let (leaf, leaf_line) = *chain.last().expect("non-empty");
        add(funcs[leaf].lines.entry(leaf_line).or_default(), &cost);
        // Each function gets this stack's cost through one incoming edge:
        // the one into its outermost occurrence.
        let mut seen: Vec<usize> = Vec::new();
        for i in 1..chain.len() {
            let (callee, callee_line) = chain[i];
            if seen.contains(&callee) {
                continue;
            }
            seen.push(callee);
            let (caller, line) = chain[i - 1];
            let e = funcs[caller]
                .calls
                .entry((line, callee, callee_line))
                .or_default();
            e.0 = e.0.wrapping_add(st.alloc.count);
            add(&mut e.1, &cost);
        }
    }

    let process = agg.process.clone().unwrap_or_default();
    writeln!(out, "# callgrind format")?;
    writeln!(out, "version: 1")?;
    writeln!(out, "creator: libtracer {}", env!("CARGO_PKG_VERSION"))?;
    if process.pid != 0 {
        writeln!(out, "pid: {}", process.pid)?;
    }
    let cmd = if process.command_line.is_empty() {
        process.executable.clone()
    } else {
        process.command_line.join(" ")
    };
    if !cmd.is_empty() {
        writeln!(out, "cmd: {}", cmd.replace(['\n', '\r'], " "))?;
    }
    writeln!(out, "positions: line")?;
    writeln!(out, "event: Allocations : allocation calls")?;
    writeln!(out, "event: Bytes : bytes allocated")?;
    writeln!(out, "event: Leaked : bytes live at exit")?;
    writeln!(out, "event: Peak : bytes live at the heap peak")?;
    writeln!(out, "events: {}", EVENTS.join(" "))?;
    let line = |c: &Cost| format!("{} {} {} {}", c[0], c[1], c[2], c[3]);
    writeln!(out, "summary: {}", line(&total))?;
    for (k, f) in funcs.iter().enumerate() {
        let (file, name) = &names[k];
        writeln!(out)?;
        writeln!(out, "fl={file}")?;
        writeln!(out, "fn={name}")?;
        for (l, c) in &f.lines {
            writeln!(out, "{l} {}", line(c))?;
        }
        for ((l, callee, callee_line), (calls, c)) in &f.calls {
            let (cfile, cname) = &names[*callee];
            writeln!(out, "cfl={cfile}")?;
            writeln!(out, "cfn={cname}")?;
            writeln!(out, "calls={calls} {callee_line}")?;
            writeln!(out, "{l} {}", line(c))?;
        }
    }
    writeln!(out)?;
    writeln!(out, "totals: {}", line(&total))?;
    out.flush()
}
