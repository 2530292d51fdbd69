//! Folded (collapsed) stacks and SVG flame graphs of a heap trace.
//!
//! The folded format is one line per distinct call chain, `outer;…;inner N`,
//! outermost function first and a count after the last space: the input of
//! every flame-graph tool (Brendan Gregg's `flamegraph.pl`, inferno, speedscope).
//! `N` is the chosen [`Metric`] for the allocation stacks whose frames have
//! those names; chains with `N == 0` are left out. Lines are sorted, so the
//! output of one trace is always the same bytes.
//!
//! Frame names are the frames' functions, else `0xADDR`; `;` inside a name
//! (it separates frames) becomes `:`, line breaks become spaces. A stack
//! without frames is `[no stack]`.
//!
//! The SVG is drawn by the `inferno` crate (the Rust port of flamegraph.pl,
//! maintained and widely used): an interactive, searchable, zoomable graph.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::aggregate::{Aggregate, Resolver};
use crate::model::Record;
use crate::TraceWriter;

/// What a flame graph measures per allocation stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Bytes allocated.
    Bytes,
    /// Allocation calls.
    Allocations,
    /// Bytes still live at exit.
    Leaked,
    /// Bytes live when the heap reached its peak.
    Peak,
}

impl Metric {
    pub fn from_name(name: &str) -> Option<Metric> {
        match name {
            "bytes" => Some(Metric::Bytes),
            "allocations" => Some(Metric::Allocations),
            "leaked" => Some(Metric::Leaked),
            "peak" => Some(Metric::Peak),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Bytes => "bytes",
            Metric::Allocations => "allocations",
            Metric::Leaked => "leaked",
            Metric::Peak => "peak",
        }
    }

    /// The unit shown in the flame graph's tooltips.
    fn unit(self) -> &'static str {
        match self {
            Metric::Allocations => "allocations",
            _ => "bytes",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Metric::Bytes => "Bytes allocated",
            Metric::Allocations => "Allocation calls",
            Metric::Leaked => "Bytes live at exit",
            Metric::Peak => "Bytes live at the heap peak",
        }
    }
}

fn clean(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded lines of `agg` for `metric` (without line breaks), sorted.
pub fn lines(agg: &Aggregate, metric: Metric) -> Vec<String> {
    let mut chains: BTreeMap<String, u64> = BTreeMap::new();
    for (id, st) in agg.stack_stats() {
        let value = match metric {
            Metric::Bytes => st.alloc.sum,
            Metric::Allocations => st.alloc.count,
            Metric::Leaked => st.alive_bytes,
            Metric::Peak => agg.peak_bytes_of(id),
        };
        if value == 0 {
            continue;
        }
        let frames = agg.frames(id);
        let chain = if frames.is_empty() {
            "[no stack]".to_string()
        } else {
            frames
                .iter()
                .rev()
                .map(|f| clean(&agg.frame_name(f)))
                .collect::<Vec<_>>()
                .join(";")
        };
        let e = chains.entry(chain).or_default();
        *e = e.wrapping_add(value);
    }
    chains
        .into_iter()
        .map(|(chain, n)| format!("{chain} {n}"))
        .collect()
}

/// Writes the folded lines of `agg` for `metric`.
pub fn write_folded<W: Write>(agg: &Aggregate, metric: Metric, mut out: W) -> io::Result<()> {
    for l in lines(agg, metric) {
        writeln!(out, "{l}")?;
    }
    out.flush()
}

/// Writes an SVG flame graph of `agg` for `metric`; `title` defaults to the
/// metric's description when empty. A trace with nothing to draw gives an
/// SVG that says so (inferno's), not an error.
pub fn write_svg<W: Write>(agg: &Aggregate, metric: Metric, title: &str, out: W) -> io::Result<()> {
    let lines = lines(agg, metric);
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = if title.is_empty() {
        metric.title().to_string()
    } else {
        title.to_string()
    };
    opt.count_name = metric.unit().to_string();
    opt.name_type = "Function:".to_string();
    opt.deterministic = true;
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)
}

/// What a [`Writer`] produces at `finish`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Folded,
    /// An SVG flame graph with this title (empty: the metric's description).
    Svg(String),
}

/// Writes folded stacks or a flame graph of the records it is given.
pub struct Writer<W: Write + Send> {
    out: W,
    agg: Aggregate,
    metric: Metric,
    output: Output,
}

impl<W: Write + Send> Writer<W> {
    /// Folded stacks for `metric`.
    pub fn new(out: W, metric: Metric) -> Self {
        Writer {
            out,
            agg: Aggregate::new(),
            metric,
            output: Output::Folded,
        }
    }

    /// An SVG flame graph for `metric`.
    pub fn svg(out: W, metric: Metric, title: &str) -> Self {
        Writer {
            output: Output::Svg(title.to_string()),
            ..Writer::new(out, metric)
        }
    }

    /// Names addresses that the trace leaves unnamed (a symbolizer hook).
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.agg.set_resolver(resolver);
        self
    }
}

impl<W: Write + Send> TraceWriter for Writer<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        self.agg.add(record);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        let out = io::BufWriter::new(&mut self.out);
        match &self.output {
            Output::Folded => write_folded(&self.agg, self.metric, out)?,
            Output::Svg(title) => write_svg(&self.agg, self.metric, title, out)?,
        }
        self.out.flush()
    }
}
