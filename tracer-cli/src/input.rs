//! Opening a trace of any format and walking its records, with the file name
//! attached to every error so the verbs can print the interface's one line.

use std::path::{Path, PathBuf};

use format_writers::{Format, Record, TraceReader};

use crate::failure::Failure;

/// An open trace: its detected format and a record stream.
pub struct Trace {
    pub path: PathBuf,
    pub format: Format,
    reader: TraceReader,
    /// Records yielded so far (the 1-based index of the last one).
    pub records: u64,
}

impl Trace {
    /// Opens `path`, detecting the format from its magic bytes.
    pub fn open(path: &Path) -> Result<Trace, Failure> {
        let (format, reader) = format_writers::open(path).map_err(|e| Failure::format(path, e))?;
        Ok(Trace {
            path: path.to_path_buf(),
            format,
            reader,
            records: 0,
        })
    }

    /// The next record, `Ok(None)` at the end.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Record>, Failure> {
        match self.reader.next() {
            None => Ok(None),
            Some(Ok(r)) => {
                self.records += 1;
                Ok(Some(r))
            }
            Some(Err(e)) => Err(Failure::format(&self.path, e)),
        }
    }

    /// A failure of a rule spanning records, located at the last record read.
    pub fn model_error(&self, message: impl Into<String>) -> Failure {
        Failure::Model {
            path: self.path.clone(),
            record: self.records,
            message: message.into(),
        }
    }
}

/// Reads the whole trace at `path` through one [`Analysis`] pass.
///
/// The hot loop of `report` and `leaks`: events are matched in place in the
/// reader's result, not moved through [`Trace::next_record`], which saves
/// copying each ~90-byte record twice.
///
/// [`Analysis`]: crate::analysis::Analysis
pub fn analyze(path: &Path) -> Result<(Format, crate::analysis::Analysis), Failure> {
    let mut trace = Trace::open(path)?;
    let mut analysis = crate::analysis::Analysis::new();
    loop {
        match trace.reader.next() {
            None => break,
            Some(Ok(Record::Event(ref event))) => analysis.event(event),
            Some(Ok(record)) => analysis.add_meta(record),
            Some(Err(e)) => return Err(Failure::format(path, e)),
        }
    }
    Ok((trace.format, analysis))
}
