//! What can go wrong in a verb, rendered as the single stderr line the
//! interface promises, with the exit status that goes with it.
//!
//! Format errors print as `tracer: FILE: byte N: expected X, found Y` (the
//! [`FormatError`]'s own Display after the file name), I/O errors as
//! `tracer: FILE: <error>`, errors that span records as
//! `tracer: FILE: record N: ...`. A closed stdout is not an error at all: the
//! reader of our output has simply stopped listening.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use format_writers::FormatError;

/// Exit status for bad usage and bad input.
pub const EXIT_BAD: i32 = 1;
/// Exit status when leaks remain and `--fail`/`--fail-on-leak` was given
/// (LeakSanitizer's code).
pub const EXIT_LEAKS: i32 = 23;

/// A verb's failure.
#[derive(Debug)]
pub enum Failure {
    /// The input is not a valid trace.
    Format { path: PathBuf, error: FormatError },
    /// A rule that spans records is broken (e.g. an event names a stack no
    /// record defined). `record` counts from 1.
    Model {
        path: PathBuf,
        record: u64,
        message: String,
    },
    /// Opening, reading or writing a file failed.
    Io { path: PathBuf, error: io::Error },
    /// Anything else worth one line.
    Message(String),
    /// Standard output was closed under us (`tracer dump x | head`).
    BrokenPipe,
}

impl Failure {
    pub fn io(path: &Path, error: io::Error) -> Failure {
        Failure::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    pub fn format(path: &Path, error: FormatError) -> Failure {
        // `open` reports a failure to open the file as an I/O error at offset 0:
        // that is not about the file's contents, so it reads better without
        // a byte offset.
        match error {
            FormatError::Io { offset: 0, source } => Failure::io(path, source),
            error => Failure::Format {
                path: path.to_path_buf(),
                error,
            },
        }
    }

    /// Maps a write error on standard output.
    pub fn stdout(error: io::Error) -> Failure {
        if error.kind() == io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::io(Path::new("standard output"), error)
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::BrokenPipe => 0,
            _ => EXIT_BAD,
        }
    }
}

/// An I/O error's text without Rust's ` (os error N)` suffix, which tells a
/// user nothing the message did not.
pub fn io_text(error: &io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Format { path, error } => {
                let error = match error {
                    FormatError::Io { offset, source } => {
                        format!("byte {offset}: read error: {}", io_text(source))
                    }
                    other => other.to_string(),
                };
                write!(f, "tracer: {}: {error}", path.display())
            }
            Failure::Model {
                path,
                record,
                message,
            } => write!(f, "tracer: {}: record {record}: {message}", path.display()),
            Failure::Io { path, error } => {
                write!(f, "tracer: {}: {}", path.display(), io_text(error))
            }
            Failure::Message(m) => write!(f, "tracer: {m}"),
            Failure::BrokenPipe => Ok(()),
        }
    }
}

/// Prints `failure` (unless it is a closed pipe) and returns its exit status.
pub fn report(failure: &Failure) -> i32 {
    if !matches!(failure, Failure::BrokenPipe) {
        eprintln!("{failure}");
    }
    failure.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_error_line_names_file_and_offset() {
        let f = Failure::format(
            Path::new("t.mlyze"),
            FormatError::invalid(300, "an event type 0..3", "9"),
        );
        assert_eq!(
            f.to_string(),
            "tracer: t.mlyze: byte 300: expected an event type 0..3, found 9"
        );
        assert_eq!(f.exit_code(), 1);
    }

    #[test]
    fn open_failure_has_no_offset_and_no_os_error_suffix() {
        let e = io::Error::from_raw_os_error(2);
        let f = Failure::format(
            Path::new("x"),
            FormatError::Io {
                offset: 0,
                source: e,
            },
        );
        assert_eq!(f.to_string(), "tracer: x: No such file or directory");
    }

    #[test]
    fn broken_pipe_is_quiet_success() {
        let f = Failure::stdout(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(f.exit_code(), 0);
        assert_eq!(f.to_string(), "");
    }
}
