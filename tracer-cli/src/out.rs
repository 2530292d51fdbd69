//! Standard output for the verbs: one buffered, locked handle, so printing a
//! million dump lines costs a few large writes rather than a million small
//! ones. Verbs write into any `dyn Write` (tests pass a `Vec<u8>`); a write
//! error converts into a [`Failure`] through `?`, and a closed pipe becomes
//! [`Failure::BrokenPipe`], which ends the verb quietly with status 0 (Rust
//! ignores SIGPIPE, so without this `tracer dump x | head` would fail loudly).

use std::io::{self, BufWriter, StdoutLock};

use crate::failure::Failure;

/// Buffered, locked standard output.
pub fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(1 << 16, io::stdout().lock())
}

/// Write errors reaching a verb through `?` are errors of its output stream.
impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure::stdout(error)
    }
}
