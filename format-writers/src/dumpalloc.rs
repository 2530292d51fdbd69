//! Placeholder: the dumpalloc codec is being written.

use std::io::{Read, Write};

use crate::error::{FormatError, Result};
use crate::model::Record;
use crate::TraceWriter;

/// Streaming reader.
pub struct Reader<R> {
    _inner: R,
    done: bool,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Self {
        Reader { _inner: inner, done: false }
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.done = true;
        Some(Err(FormatError::invalid(0, "a supported format", "dumpalloc (reader not written yet)")))
    }
}

/// Streaming writer.
pub struct Writer<W> {
    _out: W,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { _out: out }
    }
}

impl<W: Write + Send> TraceWriter for Writer<W> {
    fn write(&mut self, _record: &Record) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}
