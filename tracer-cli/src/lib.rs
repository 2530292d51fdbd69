//! The `tracer` command: reads, reports on, converts and records traces.
//!
//! Every verb reads its input through [`format_writers::open`], which detects
//! the format from the file's magic bytes, and works on the one event model
//! ([`format_writers::Record`]). The crate root is the table of contents:
//!
//! | module | job |
//! | --- | --- |
//! | [`cli`] | the command line (clap derive), exit-status policy |
//! | [`failure`] | the one-line error messages and their exit codes |
//! | [`input`] | opening a trace and iterating its records with error context |
//! | [`out`] | buffered stdout that treats a closed pipe as a quiet end |
//! | [`analysis`] | the single pass over a trace: live blocks, peak, sites, syscalls |
//! | [`symbolize`] | frames to `0xADDR in func file:line (module+0xoff)`, through the debug info |
//! | [`clock`] | wall-clock rendering of nanosecond timestamps (UTC) |
//! | [`strace`] | strace-like syscall lines and the `strace -c` table |
//! | [`report`] | `tracer report` (text and JSON) |
//! | [`leaks`] | `tracer leaks` (text and JSON) |
//! | [`sarif`] | `tracer leaks --sarif` (SARIF 2.1.0) |
//! | [`suppressions`] | LeakSanitizer-style `leak:PATTERN` files |
//! | [`dump`] | `tracer dump` |
//! | [`validate`] | `tracer validate` |
//! | [`convert`] | `tracer convert`, `tracer recover` |
//! | [`flamegraph`] | `tracer flamegraph` |
//! | [`resolve`] | frame names for the profiles, through [`symbolize`]'s resolver |
//! | [`run`] | `tracer run` |

pub mod analysis;
pub mod cli;
pub mod clock;
pub mod convert;
pub mod dump;
pub mod failure;
pub mod flamegraph;
pub mod input;
pub mod leaks;
pub mod out;
pub mod report;
pub mod resolve;
pub mod run;
pub mod sarif;
pub mod strace;
pub mod suppressions;
pub mod symbolize;
pub mod validate;

use std::ffi::OsString;

/// Runs the command line `args` (program name first) and returns the process
/// exit status. Never panics on user input; errors are printed as one line on
/// stderr.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    cli::main_with_args(args)
}
