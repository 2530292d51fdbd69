//! `tracer convert`: decode with the input's reader, encode with the target
//! format's [`TraceWriter`]. No format talks to another directly.
//!
//! The output is created exclusively (`O_EXCL`, mode 0600, never through a
//! symbolic link) and an existing file is never overwritten: the command fails
//! and names it. Unlike the preload library, which picks `name.1.ext` when a
//! name is taken, `convert` was given an explicit name, and writing somewhere
//! else would surprise the script that asked for it. When the input turns out
//! to be corrupt halfway, the partial output is removed.

use std::io::{BufWriter, ErrorKind};
use std::path::Path;

use format_writers::{dumpalloc, mlyze, output, tlv, Format, TraceWriter};

use crate::failure::Failure;
use crate::input::Trace;

/// Runs the verb.
pub fn execute(input: &Path, to: Format, output_path: &Path) -> Result<i32, Failure> {
    let mut trace = Trace::open(input)?;
    let file = output::open_new(output_path).map_err(|e| match e.kind() {
        ErrorKind::AlreadyExists => Failure::Message(format!(
            "{}: already exists; convert never overwrites a file (remove it or choose another name)",
            output_path.display()
        )),
        _ => Failure::io(output_path, e),
    })?;
    let out = BufWriter::with_capacity(1 << 16, file);
    let mut writer: Box<dyn TraceWriter> = match to {
        Format::Dumpalloc => Box::new(dumpalloc::Writer::new(out)),
        Format::Mlyze => Box::new(mlyze::Writer::new(out)),
        Format::Tlv => Box::new(tlv::Writer::new(out)),
    };
    let mut copy = || -> Result<(), Failure> {
        while let Some(r) = trace.next_record()? {
            writer.write(&r).map_err(|e| Failure::io(output_path, e))?;
        }
        Ok(())
    };
    let result = copy().and_then(|()| writer.finish().map_err(|e| Failure::io(output_path, e)));
    if result.is_err() {
        // We created the file exclusively a moment ago: it is ours to remove.
        let _ = std::fs::remove_file(output_path);
    }
    result.map(|()| 0)
}
