//! `tracer convert`: decode with the input's reader, encode with the target
//! format's [`TraceWriter`]. No format talks to another directly.
//!
//! Targets are the trace formats (dumpalloc, mlyze, tlv), which keep every
//! record, and the *aggregate* profiles (MALT JSON, callgrind, folded stacks,
//! SVG flame graphs for `tracer flamegraph`), whose writers sum the run up at
//! `finish`. Frames of the aggregate profiles are named by
//! [`crate::resolve::FrameNames`] as `report` names them (the debug info of
//! the trace's binaries, then the trace's own symbols); a MALT input is named by its own profile
//! (MALT symbolized it where it ran, and its addresses need not match any
//! binary here). Inputs are any trace or a MALT profile
//! ([`crate::input::Trace`]).
//!
//! The output is created exclusively (`O_EXCL`, mode 0600, never through a
//! symbolic link) and an existing file is never overwritten: the command fails
//! and names it. Unlike the preload library, which picks `name.1.ext` when a
//! name is taken, `convert` was given an explicit name, and writing somewhere
//! else would surprise the script that asked for it.
//!
//! mlyze stores its metadata before the events but only knows it at the end,
//! so its file writer spools the events to `OUT.spool` and assembles `OUT` in
//! `finish`: memory stays flat whatever the trace's size. That writer names
//! its files the way `TRACER_OUTPUT` does, appending `.mlyze` when OUT lacks
//! it; the name actually written is then printed.
//!
//! When the input turns out to be corrupt halfway, the partial output (and
//! the spool) is removed.

use std::io::{BufWriter, ErrorKind};
use std::path::{Path, PathBuf};

use format_writers::folded::Metric;
use format_writers::{callgrind, dumpalloc, folded, malt, mlyze, output, tlv, Format, TraceWriter};

use crate::failure::Failure;
use crate::input::{InputFormat, Trace};
use crate::resolve::FrameNames;
use crate::symbolize::SymbolOptions;

/// What `convert` (or `flamegraph`) writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A trace format: every record.
    Trace(Format),
    /// A MALT JSON profile.
    Malt,
    /// A callgrind profile.
    Callgrind,
    /// Folded stacks of one metric.
    Folded(Metric),
    /// An SVG flame graph of one metric, with a title (empty: the metric's).
    FlameGraph { metric: Metric, title: String },
}

impl Target {
    /// The target named by `--to`, with `--metric` (folded stacks only).
    pub fn from_cli(to: crate::cli::TargetFormat, metric: Option<&str>) -> Result<Target, Failure> {
        use crate::cli::TargetFormat as T;
        let target = match to {
            T::Dumpalloc => Target::Trace(Format::Dumpalloc),
            T::Mlyze => Target::Trace(Format::Mlyze),
            T::Tlv => Target::Trace(Format::Tlv),
            T::Malt => Target::Malt,
            T::Callgrind => Target::Callgrind,
            T::Folded => Target::Folded(parse_metric(metric.unwrap_or("bytes"))?),
        };
        if metric.is_some() && !matches!(target, Target::Folded(_)) {
            return Err(Failure::Message(
                "--metric applies to --to folded only (callgrind profiles carry every metric)"
                    .into(),
            ));
        }
        Ok(target)
    }

    fn is_aggregate(&self) -> bool {
        !matches!(self, Target::Trace(_))
    }
}

/// A `--metric` value, or the one-line error naming the accepted ones.
pub fn parse_metric(name: &str) -> Result<Metric, Failure> {
    Metric::from_name(name).ok_or_else(|| {
        Failure::Message(format!(
            "unknown metric {name:?}: expected bytes, allocations, leaked or peak"
        ))
    })
}

fn exists_failure(path: &Path) -> Failure {
    Failure::Message(format!(
        "{}: already exists; convert never overwrites a file (remove it or choose another name)",
        path.display()
    ))
}

/// The name mlyze's file writer uses for `path`.
pub fn mlyze_name(path: &Path) -> PathBuf {
    if path.to_string_lossy().ends_with(".mlyze") {
        path.to_path_buf()
    } else {
        let mut s = path.as_os_str().to_os_string();
        s.push(".mlyze");
        PathBuf::from(s)
    }
}

/// An open output: the writer, the file it writes, the spool (if any) to
/// clean up on failure.
type Opened = (Box<dyn TraceWriter>, PathBuf, Option<PathBuf>);

/// The writer for `to` writing to (about) `path`; aggregate writers name
/// frames through `names` when given.
fn open_writer(to: &Target, path: &Path, names: Option<&FrameNames>) -> Result<Opened, Failure> {
    if *to == Target::Trace(Format::Mlyze) {
        let wanted = mlyze_name(path);
        if std::fs::symlink_metadata(&wanted).is_ok() {
            return Err(exists_failure(&wanted));
        }
        let (w, final_path) = mlyze::Writer::create(path).map_err(|e| Failure::io(path, e))?;
        let spool = w.spool_path().map(Path::to_path_buf);
        if final_path != wanted {
            // Someone created `wanted` between our check and the writer's
            // exclusive create: do not write elsewhere.
            drop(w);
            let _ = std::fs::remove_file(&final_path);
            if let Some(s) = spool {
                let _ = std::fs::remove_file(s);
            }
            return Err(exists_failure(&wanted));
        }
        return Ok((Box::new(w), final_path, spool));
    }
    let file = output::open_new(path).map_err(|e| match e.kind() {
        ErrorKind::AlreadyExists => exists_failure(path),
        _ => Failure::io(path, e),
    })?;
    let out = BufWriter::with_capacity(1 << 16, file);
    let resolver = || names.map(FrameNames::resolver);
    let w: Box<dyn TraceWriter> = match to {
        Target::Trace(Format::Dumpalloc) => Box::new(dumpalloc::Writer::new(out)),
        Target::Trace(Format::Tlv) => Box::new(tlv::Writer::new(out)),
        Target::Trace(Format::Mlyze) => unreachable!("handled above"),
        Target::Malt => {
            let w = malt::Writer::new(out);
            Box::new(match resolver() {
                Some(r) => w.with_resolver(r),
                None => w,
            })
        }
        Target::Callgrind => {
            let w = callgrind::Writer::new(out);
            Box::new(match resolver() {
                Some(r) => w.with_resolver(r),
                None => w,
            })
        }
        Target::Folded(metric) => {
            let w = folded::Writer::new(out, *metric);
            Box::new(match resolver() {
                Some(r) => w.with_resolver(r),
                None => w,
            })
        }
        Target::FlameGraph { metric, title } => {
            let w = folded::Writer::svg(out, *metric, title);
            Box::new(match resolver() {
                Some(r) => w.with_resolver(r),
                None => w,
            })
        }
    };
    Ok((w, path.to_path_buf(), None))
}

/// Runs the verb (and `tracer flamegraph`).
///
/// `symbols` says where the binaries of the trace are read to name the frames
/// of aggregate targets (ignored for trace targets, which copy records).
pub fn execute(
    input: &Path,
    to: &Target,
    output_path: &Path,
    symbols: &SymbolOptions,
) -> Result<i32, Failure> {
    let mut trace = Trace::open(input)?;
    let names = (to.is_aggregate() && trace.format != InputFormat::Malt)
        .then(|| FrameNames::new(symbols.clone()));
    let (mut writer, written, spool) = open_writer(to, output_path, names.as_ref())?;
    let mut copy = || -> Result<(), Failure> {
        while let Some(mut r) = trace.next_record()? {
            if let Some(n) = &names {
                if !n.pass(&mut r) {
                    continue;
                }
            }
            writer.write(&r).map_err(|e| Failure::io(&written, e))?;
        }
        Ok(())
    };
    let result = copy().and_then(|()| writer.finish().map_err(|e| Failure::io(&written, e)));
    if result.is_err() {
        // We created these files exclusively a moment ago: they are ours.
        let _ = std::fs::remove_file(&written);
        if let Some(s) = &spool {
            let _ = std::fs::remove_file(s);
        }
    } else if written != output_path {
        eprintln!("tracer: wrote {}", written.display());
    }
    result.map(|()| 0)
}

/// `tracer recover SPOOL`: turns the spool a killed process left next to its
/// mlyze file into that file.
pub fn recover(spool: &Path) -> Result<i32, Failure> {
    if std::fs::metadata(spool).is_ok_and(|m| m.is_file() && m.len() == 0) {
        // What the library leaves of a spool it could not delete.
        return Err(Failure::Message(format!(
            "{}: byte 0: an empty file, expected the spool magic \"MTRS\": nothing to \
             recover (the library empties the spool of a finished trace that its process, \
             having given up root or chrooted, can no longer delete; a process that died \
             before its writer wrote anything leaves one empty too)",
            spool.display()
        )));
    }
    let (path, stats) = mlyze::recover(spool).map_err(|e| Failure::format(spool, e))?;
    let mut line = format!(
        "tracer: recovered {} from {} ({} chunks, {} bytes of events",
        path.display(),
        spool.display(),
        stats.chunks,
        stats.event_bytes
    );
    if stats.torn_tail_bytes > 0 {
        line.push_str(&format!(
            "; {} bytes of an unfinished write dropped",
            stats.torn_tail_bytes
        ));
    }
    line.push(')');
    eprintln!("{line}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlyze_names() {
        assert_eq!(mlyze_name(Path::new("a.mlyze")), Path::new("a.mlyze"));
        assert_eq!(mlyze_name(Path::new("a.bin")), Path::new("a.bin.mlyze"));
    }
}
