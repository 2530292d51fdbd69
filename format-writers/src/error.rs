//! The one error type every reader returns.
//!
//! Each variant carries the byte offset in the input where the problem was found
//! and what the reader expected there, so a command-line tool can print one line
//! that tells the user exactly where the file went wrong.

use std::fmt;
use std::io;

/// A decoding error, with the byte offset it was found at.
#[derive(Debug)]
#[non_exhaustive]
pub enum FormatError {
    /// Reading the underlying file failed.
    Io { offset: u64, source: io::Error },
    /// The input ended in the middle of something.
    Truncated { offset: u64, expected: String },
    /// A value was found that the format does not allow.
    Invalid {
        offset: u64,
        expected: String,
        found: String,
    },
}

impl FormatError {
    pub fn truncated(offset: u64, expected: impl Into<String>) -> Self {
        FormatError::Truncated {
            offset,
            expected: expected.into(),
        }
    }

    pub fn invalid(offset: u64, expected: impl Into<String>, found: impl Into<String>) -> Self {
        FormatError::Invalid {
            offset,
            expected: expected.into(),
            found: found.into(),
        }
    }

    /// Byte offset in the input where the error was detected.
    pub fn offset(&self) -> u64 {
        match self {
            FormatError::Io { offset, .. }
            | FormatError::Truncated { offset, .. }
            | FormatError::Invalid { offset, .. } => *offset,
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Io { offset, source } => {
                write!(f, "byte {offset}: read error: {source}")
            }
            FormatError::Truncated { offset, expected } => {
                write!(f, "byte {offset}: file ends, expected {expected}")
            }
            FormatError::Invalid {
                offset,
                expected,
                found,
            } => write!(f, "byte {offset}: expected {expected}, found {found}"),
        }
    }
}

impl std::error::Error for FormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FormatError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
