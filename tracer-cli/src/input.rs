//! Opening a trace of any format and walking its records, with the file name
//! attached to every error so the verbs can print the interface's one line.
//!
//! Inputs are the binary trace formats, recognised by their magic bytes
//! ([`format_writers::detect`]), and MALT JSON profiles (ours and MALT's own),
//! recognised by [`malt::detect`] when the first bytes are no binary magic: a
//! profile is a summary, which [`malt::open`] replays as records that give the
//! same per-stack counts and sums. A replay cannot reproduce the heap peak or
//! the run time (its blocks are replayed one stack after another), so
//! [`analyze`] takes those two figures from MALT's own summary.

use std::io::Read;
use std::path::{Path, PathBuf};

use format_writers::malt::{self, MaltSummary};
use format_writers::{Format, FormatError, Record, TraceReader};

use crate::failure::Failure;

/// What kind of file an input is: a trace format, or a MALT profile (which
/// is not a [`Format`]: nothing writes it record by record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    Trace(Format),
    Malt,
}

impl InputFormat {
    /// The name `report` prints (`mlyze`, `dumpalloc`, `tlv`, `malt`).
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::Trace(f) => f.name(),
            InputFormat::Malt => "malt",
        }
    }
}

impl PartialEq<Format> for InputFormat {
    fn eq(&self, other: &Format) -> bool {
        *self == InputFormat::Trace(*other)
    }
}

/// Bytes of the file's start looked at to recognise a MALT profile.
const SNIFF: usize = 256;

/// The first bytes of `path` (up to [`SNIFF`]).
fn prefix(path: &Path) -> Result<Vec<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| Failure::io(path, e))?;
    let mut head = Vec::with_capacity(SNIFF);
    file.take(SNIFF as u64)
        .read_to_end(&mut head)
        .map_err(|e| Failure::io(path, e))?;
    Ok(head)
}

/// An open trace: its detected format and a record stream.
pub struct Trace {
    pub path: PathBuf,
    pub format: InputFormat,
    reader: TraceReader,
    /// Records yielded so far (the 1-based index of the last one).
    pub records: u64,
    /// MALT's own totals, when the input is a MALT profile.
    pub malt: Option<MaltSummary>,
}

impl Trace {
    /// Opens `path`, detecting the format from its magic bytes (or, for a
    /// MALT profile, its opening `{"run"`).
    pub fn open(path: &Path) -> Result<Trace, Failure> {
        let head = prefix(path)?;
        if format_writers::detect(&head).is_none() {
            if malt::detect(&head) {
                let (summary, reader) = malt::open(path).map_err(|e| Failure::format(path, e))?;
                return Ok(Trace {
                    path: path.to_path_buf(),
                    format: InputFormat::Malt,
                    reader,
                    records: 0,
                    malt: Some(summary),
                });
            }
            let shown = &head[..head.len().min(4)];
            return Err(Failure::format(
                path,
                FormatError::invalid(
                    0,
                    "the magic bytes of a trace (\"PROC\" dumpalloc, \"MTRC\" mlyze, \
                     78 06 17 a5 syscall TLV) or a MALT JSON profile ({\"run\"...)",
                    format!("{shown:02x?}"),
                ),
            ));
        }
        let (format, reader) = format_writers::open(path).map_err(|e| Failure::format(path, e))?;
        Ok(Trace {
            path: path.to_path_buf(),
            format: InputFormat::Trace(format),
            reader,
            records: 0,
            malt: None,
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
pub fn analyze(path: &Path) -> Result<(InputFormat, crate::analysis::Analysis), Failure> {
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
    if let Some(summary) = &trace.malt {
        apply_malt_summary(&mut analysis, summary);
    }
    Ok((trace.format, analysis))
}

/// Puts MALT's own peak and run time into the analysis of its replay, which
/// cannot reproduce them (see the module's documentation). The peak's block
/// count and time are unknown: 0.
pub fn apply_malt_summary(analysis: &mut crate::analysis::Analysis, summary: &MaltSummary) {
    analysis.heap.peak_bytes = summary.peak_bytes;
    analysis.heap.peak_blocks = 0;
    analysis.heap.peak_time_ns = analysis.start_ns().unwrap_or(0);
    if summary.ticks_per_second > 0 {
        let runtime_ns = (u128::from(summary.runtime_ticks) * 1_000_000_000
            / u128::from(summary.ticks_per_second))
        .min(u128::from(u64::MAX)) as u64;
        if let Some(start) = analysis.start_ns() {
            analysis.last_time_ns = Some(start.saturating_add(runtime_ns));
        }
    }
}
