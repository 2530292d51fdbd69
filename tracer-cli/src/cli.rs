//! The command line, declared with clap's derive API, and the exit-status
//! policy: 0 success, 1 bad usage or bad input (clap's own usage errors
//! included: clap would exit 2, the interface says 1), 23 leaks found with
//! `--fail`/`--fail-on-leak`; `run` passes the traced program's status on.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::failure::{self, Failure};

#[derive(Debug, Parser)]
#[command(
    name = "tracer",
    version,
    about = "Record, report on and convert heap and syscall traces of libtracer",
    long_about = "Record, report on and convert heap and syscall traces of libtracer.\n\n\
        Every verb detects the input format (dumpalloc, mlyze, syscall TLV) from the \
        file's magic bytes, never from its name; report, convert and flamegraph also read \
        MALT JSON profiles.\n\n\
        Exit status: 0 success; 1 bad usage or bad input (one line on stderr naming \
        the file, the byte offset and what was expected); 23 leaks found with --fail \
        or --fail-on-leak; `tracer run` otherwise exits with the program's own status."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Verb,
}

#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run a program under libtracer.so and print where its traces went
    #[command(
        long_about = "Run a program under libtracer.so and print where its traces went.\n\n\
        The library is $TRACER_LIB when set, else libtracer.so next to the tracer binary; it \
        is prepended to LD_PRELOAD, and the flags become TRACER_* variables. The exit status \
        is the program's own (128+N when signal N killed it; 127 when it was not found, 126 \
        when it could not be executed); with --fail-on-leak, 23 when leaks remain. Leak \
        reports go to stderr, once per traced process."
    )]
    Run(RunArgs),
    /// Summary: process, duration, allocations, frees, peak, live at exit, top sites
    #[command(
        long_about = "Summary: process, duration, allocation calls, frees, bytes allocated, peak \
        heap and when, live at exit, top sites by bytes, by count and by temporary allocations \
        (freed by the allocating thread before it allocated anything else). Syscall traces get \
        a `strace -c` table.\n\n\
        `frees` counts every free of a non-null address, including blocks allocated before \
        tracing started (they do not change the live figures). leaked_* counts the definite \
        and indirect blocks of the trace's reachability scan at exit; a trace without a scan \
        counts every block live at exit."
    )]
    Report(ReportArgs),
    /// Blocks live at exit, grouped by allocation stack and kind, largest first
    #[command(
        long_about = "Blocks live at exit, grouped by allocation stack and kind, largest first, \
        with symbolized frames (function, file, line, module; inlined calls expanded), in \
        LeakSanitizer's layout, as JSON (--json) or as SARIF 2.1.0 (--sarif).\n\n\
        Kinds come from the tracer's reachability scan at exit, with valgrind's meanings: \
        definite (no pointer to the block), indirect (reachable only from leaked blocks), \
        possible (only through an interior pointer), reachable (from a global, a stack, \
        registers or TLS). Definite and indirect groups are reported by default. A trace \
        without a scan reports every live block as definite, and says so.\n\n\
        Suppressions (LeakSanitizer syntax), tried in order: --suppressions FILE, the file \
        in $TRACER_SUPPRESSIONS, the built-in default list. With --fail the exit status is 23 \
        when any group is reported."
    )]
    Leaks(LeaksArgs),
    /// Every record in order, one line each (strace-like lines for syscalls)
    Dump(FileArg),
    /// Check every rule of the format and of the event model
    #[command(
        long_about = "Read every record, checking every rule of the format and of the event \
        model (an event naming an undefined stack is an error; a free of an address never \
        allocated is a note: blocks allocated before tracing started). Exit 0 with a one-line \
        summary, or 1 with the byte offset and what was expected."
    )]
    Validate(FileArg),
    /// Convert a trace to another format or to a MALT, callgrind or folded-stacks profile
    #[command(
        long_about = "Convert a trace to another format: decode with the input's reader, encode \
        with the target's writer. Targets: the trace formats dumpalloc, mlyze, tlv; the \
        profiles malt (MALT's JSON, for its web viewer), callgrind (KCachegrind, \
        callgrind_annotate) and folded (collapsed stacks of one --metric: bytes, allocations, \
        leaked, peak). Profiles name frames from the binaries' debug info when they are \
        present, else from the trace's own symbols. The input may be a MALT profile.\n\n\
        OUT is created exclusively with mode 0600 and never through a symbolic link; if OUT \
        exists the command fails rather than overwrite it. A partial OUT is removed when the \
        input turns out to be corrupt. The mlyze writer spools events to OUT.spool while it \
        works and appends .mlyze to OUT when it lacks that extension (the name written is \
        then printed)."
    )]
    Convert(ConvertArgs),
    /// An SVG flame graph (or folded stacks) of a trace's allocation stacks
    Flamegraph(crate::flamegraph::Args),
    /// Turn the spool a killed process left (FILE.mlyze.spool) into FILE.mlyze
    #[command(
        long_about = "Turn the spool a killed process left (FILE.mlyze.spool) into the mlyze \
        file it stands for, up to the last complete flush. The spool is kept; the file is \
        created exclusively (FILE.mlyze when it is the empty placeholder the writer reserved, \
        else a numbered alternative)."
    )]
    Recover(FileArg),
}

#[derive(Debug, Args)]
pub struct FileArg {
    /// The trace file
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The trace file
    pub file: PathBuf,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    /// Sites listed in each ranking
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Frames printed per stack in the text report
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub frames: usize,
    #[command(flatten)]
    pub symbols: SymbolArgs,
}

/// Where the traced binaries and their debug info are read.
#[derive(Debug, Args, Default)]
pub struct SymbolArgs {
    /// Read the traced binaries and /usr/lib/debug under DIR (a trace from another machine)
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
    /// Read binaries under FROM from TO instead (a moved build tree); repeatable
    #[arg(long = "path-map", value_name = "FROM=TO", value_parser = parse_path_map)]
    pub path_map: Vec<(PathBuf, PathBuf)>,
    /// Another directory of separate debug files (.build-id/..., debuglink); repeatable
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,
    /// Read no binary: only the names the trace itself holds
    #[arg(long)]
    pub no_debug_info: bool,
}

fn parse_path_map(s: &str) -> Result<(PathBuf, PathBuf), String> {
    symbolizer::Options::parse_path_map(s)
}

impl SymbolArgs {
    pub fn options(&self) -> crate::symbolize::SymbolOptions {
        crate::symbolize::SymbolOptions {
            sysroot: self.sysroot.clone(),
            path_map: self.path_map.clone(),
            debug_dirs: self.debug_dir.clone(),
            no_debug_info: self.no_debug_info,
        }
    }
}

/// Which leaks are reported, and the suppressions.
#[derive(Debug, Args, Default)]
pub struct LeakCheckArgs {
    /// LeakSanitizer-style suppressions (`leak:PATTERN` lines), tried before $TRACER_SUPPRESSIONS
    #[arg(long, value_name = "FILE")]
    pub suppressions: Option<PathBuf>,
    /// Do not apply the built-in suppressions of C/C++ runtime allocations
    #[arg(long)]
    pub no_default_suppressions: bool,
    /// Kinds to report: definite, indirect, possible, reachable, all [default: definite,indirect]
    #[arg(long, value_name = "KINDS", value_parser = parse_kinds)]
    pub show: Option<Kinds>,
    /// Report every kind (same as --show all)
    #[arg(long)]
    pub all: bool,
}

/// The kinds `--show` names (a newtype: clap would read a bare `Vec` as
/// several values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kinds(pub Vec<format_writers::LeakKind>);

fn parse_kinds(s: &str) -> Result<Kinds, String> {
    crate::leaks::parse_show(s).map(Kinds)
}

impl LeakCheckArgs {
    pub fn kinds(&self) -> Vec<format_writers::LeakKind> {
        if self.all {
            return format_writers::LeakKind::ALL.to_vec();
        }
        self.show
            .clone()
            .map(|k| k.0)
            .unwrap_or_else(|| crate::leaks::DEFAULT_SHOW.to_vec())
    }

    pub fn suppressions(&self) -> Result<crate::suppressions::Suppressions, Failure> {
        crate::suppressions::Suppressions::gather(
            self.suppressions.as_deref(),
            std::env::var_os("TRACER_SUPPRESSIONS"),
            self.no_default_suppressions,
        )
    }
}

#[derive(Debug, Args)]
pub struct LeaksArgs {
    /// The trace file
    pub file: PathBuf,
    /// Print one JSON object
    #[arg(long, conflicts_with = "sarif")]
    pub json: bool,
    /// Print the report as SARIF 2.1.0 (for code-scanning annotations)
    #[arg(long)]
    pub sarif: bool,
    /// SARIF: make source file URIs relative to DIR (the repository root)
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// Exit with status 23 when any (unsuppressed) leak is reported
    #[arg(long)]
    pub fail: bool,
    #[command(flatten)]
    pub check: LeakCheckArgs,
    #[command(flatten)]
    pub symbols: SymbolArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TargetFormat {
    Dumpalloc,
    Mlyze,
    Tlv,
    Malt,
    Callgrind,
    Folded,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The input trace (any format)
    pub input: PathBuf,
    /// The output format
    #[arg(long, value_enum)]
    pub to: TargetFormat,
    /// The output file: created exclusively, never overwritten
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// For --to folded: bytes (default), allocations, leaked, peak
    #[arg(long, value_name = "M")]
    pub metric: Option<String>,
    /// Where frame names of malt, callgrind and folded profiles come from
    #[command(flatten)]
    pub symbols: SymbolArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Trace formats, comma-separated: mlyze, dumpalloc, tlv (TRACER_FORMAT)
    #[arg(long, value_name = "F,..")]
    pub format: Option<String>,
    /// Output path template: %p pid, %e executable, %t start time (TRACER_OUTPUT)
    #[arg(long, value_name = "T")]
    pub output: Option<String>,
    /// Syscalls to capture: names, %file, %net, %mem, %process, all (TRACER_SYSCALLS)
    #[arg(long, value_name = "S")]
    pub syscalls: Option<String>,
    /// Frames kept per stack, 0 for none (TRACER_STACK_DEPTH)
    #[arg(long, value_name = "N")]
    pub stack_depth: Option<u32>,
    /// Print nothing but the program's own output (TRACER_QUIET=1)
    #[arg(long)]
    pub quiet: bool,
    /// Print the leak report of each allocation trace written (on stderr)
    #[arg(long)]
    pub leak_check: bool,
    /// Like --leak-check, and exit with status 23 when leaks remain
    #[arg(long)]
    pub fail_on_leak: bool,
    #[command(flatten)]
    pub check: LeakCheckArgs,
    /// The program and its arguments (after --)
    // Not `allow_hyphen_values`: an unknown option before the program's name
    // is a usage error, not a program to run. From the name on, every
    // argument is the program's (`trailing_var_arg`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Parses `args` and runs the verb; returns the exit status.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { failure::EXIT_BAD } else { 0 };
            // Printing help to a closed pipe is no reason to panic either.
            let _ = e.print();
            return code;
        }
    };
    match execute(cli.command) {
        Ok(code) => code,
        Err(f) => failure::report(&f),
    }
}

fn execute(verb: Verb) -> Result<i32, Failure> {
    let mut out = crate::out::stdout();
    let code = match verb {
        Verb::Report(a) => crate::report::execute(
            &a.file,
            &crate::report::Options {
                json: a.json,
                top: a.top,
                frames: a.frames,
                symbols: a.symbols.options(),
            },
            &mut out,
        )?,
        Verb::Leaks(a) => {
            let mut supp = a.check.suppressions()?;
            let (_, analysis) = crate::input::analyze(&a.file)?;
            crate::leaks::print(
                &analysis,
                &mut supp,
                &crate::leaks::Options {
                    json: a.json,
                    sarif: a.sarif,
                    fail: a.fail,
                    show: a.check.kinds(),
                    source_root: a.source_root.clone(),
                    symbols: a.symbols.options(),
                },
                &mut out,
            )?
        }
        Verb::Dump(a) => crate::dump::execute(&a.file, &mut out)?,
        Verb::Validate(a) => crate::validate::execute(&a.file, &mut out)?,
        Verb::Convert(a) => {
            let to = crate::convert::Target::from_cli(a.to, a.metric.as_deref())?;
            crate::convert::execute(&a.input, &to, &a.output, &a.symbols.options())?
        }
        Verb::Flamegraph(a) => crate::flamegraph::execute(&a)?,
        Verb::Recover(a) => crate::convert::recover(&a.file)?,
        Verb::Run(a) => {
            let opts = crate::run::Options {
                format: a.format,
                output: a.output,
                syscalls: a.syscalls,
                stack_depth: a.stack_depth,
                quiet: a.quiet,
                leak_check: a.leak_check,
                fail_on_leak: a.fail_on_leak,
                suppressions: a.check.suppressions.clone(),
                no_default_suppressions: a.check.no_default_suppressions,
                show: (a.check.all || a.check.show.is_some()).then(|| a.check.kinds()),
                command: a.command,
            };
            let mut err = std::io::stderr().lock();
            crate::run::execute(&opts, &mut err)?
        }
    };
    out.flush()?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_double_dash() {
        let cli =
            Cli::try_parse_from(["tracer", "run", "--format", "tlv", "--", "ls", "-l"]).unwrap();
        match cli.command {
            Verb::Run(r) => {
                assert_eq!(r.format.as_deref(), Some("tlv"));
                assert_eq!(r.command, ["ls", "-l"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
