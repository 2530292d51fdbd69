//! `tracer flamegraph`: an interactive SVG flame graph of a trace's
//! allocation stacks (drawn by `format_writers::folded`, through the
//! `inferno` crate), or with `--folded` the collapsed-stack text
//! (`main;f1;f2 4242`) that other flame-graph tools read.
//!
//! A flame graph is one more aggregate target of `convert`: the same input
//! detection (any trace, or a MALT profile), the same frame naming
//! ([`crate::resolve`]) and the same exclusive creation of the output (never
//! overwritten, mode 0600, removed when the input turns out corrupt).
//!
//! `--metric` is what a frame's width measures: `bytes` allocated (the
//! default), `allocations` (calls), `leaked` (bytes live at exit) or `peak`
//! (bytes live when the heap peaked). A metric the trace has none of gives
//! an SVG that says there is nothing to draw (or an empty folded file).

use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;

use crate::convert::{self, Target};
use crate::failure::Failure;

/// The verb's arguments.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The input trace (any format) or MALT profile
    pub file: PathBuf,
    /// The output file: created exclusively, never overwritten
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// What widths measure: bytes, allocations, leaked, peak
    #[arg(long, value_name = "M", default_value = "bytes")]
    pub metric: String,
    /// Write the folded (collapsed) stacks instead of the SVG
    #[arg(long)]
    pub folded: bool,
    /// Title of the SVG (default: the metric's description)
    #[arg(long, value_name = "T")]
    pub title: Option<String>,
    #[command(flatten)]
    pub symbols: crate::cli::SymbolArgs,
}

/// Runs the verb.
pub fn execute(args: &Args) -> Result<i32, Failure> {
    let metric = convert::parse_metric(&args.metric)?;
    let target = if args.folded {
        if args.title.is_some() {
            return Err(Failure::Message(
                "--title applies to the SVG, not to --folded output".into(),
            ));
        }
        Target::Folded(metric)
    } else {
        Target::FlameGraph {
            metric,
            title: args.title.clone().unwrap_or_default(),
        }
    };
    convert::execute(
        &args.file,
        &target,
        Path::new(&args.output),
        &args.symbols.options(),
    )
}
