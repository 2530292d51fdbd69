//! Encoders and decoders of the trace formats libtracer writes and reads.
//!
//! Every format encodes the one event model of [`model`]; a reader yields
//! [`Record`]s, a writer accepts them, and a conversion is decode-then-encode.
//! This crate knows nothing of interposition: it serves the preload library, the
//! `tracer` command and anything else that wants to read a trace.
//!
//! | module | format | magic |
//! | --- | --- | --- |
//! | [`dumpalloc`] | RIFF-like `PROC`/`OBJE`/`ALOC`/`FRAM`/`DALC` records | `PROC` |
//! | [`mlyze`] | 256-byte `MTRC` header, JSON metadata, varint event stream | `MTRC` |
//! | [`tlv`] | syscall capture TLV | `78 06 17 a5` |

pub mod aggregate;
pub mod blocks;
pub mod bytes;
pub mod callgrind;
pub mod dumpalloc;
pub mod error;
mod fasthash;
pub mod folded;
pub mod malt;
pub mod mlyze;
pub mod model;
pub mod output;
pub mod syscalls;
pub mod tlv;

use std::fs::File;
use std::io::Read;
use std::path::Path;

pub use error::{FormatError, Result};
pub use model::*;

/// A streaming writer of one format. Records must arrive in model order (a stack
/// before the first event naming it). `finish` completes the file; a writer
/// dropped without `finish` leaves whatever the format can recover from.
pub trait TraceWriter: Send {
    fn write(&mut self, record: &Record) -> std::io::Result<()>;
    /// Pushes what has been written so far to the file, so that a process killed
    /// now leaves a trace that can be read or recovered up to this point.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<()>;
    /// One system call given as a borrowed view; the same as writing it as
    /// `Record::Event(Event::Syscall(..))`. Writers with a fast path (the
    /// TLV writer) encode it without building the owned record.
    fn write_syscall(&mut self, call: &SyscallView<'_>) -> std::io::Result<()> {
        self.write(&Record::Event(Event::Syscall(call.to_syscall())))
    }
    /// Whether [`TraceWriter::replay_allocations`] can read back this
    /// writer's allocations.
    fn replays_allocations(&self) -> bool {
        false
    }
    /// Calls `f(address, size)` for every allocation event written so far,
    /// in the order written (the last call for an address is the block there
    /// now); `Ok(false)` when this writer cannot read its events back. The
    /// preload's leak scan learns the sizes of the blocks live at exit this
    /// way instead of keeping every live block's size during the run.
    fn replay_allocations(&mut self, f: &mut dyn FnMut(u64, u64)) -> std::io::Result<bool> {
        let _ = f;
        Ok(false)
    }
    /// The calls [`TraceWriter::replay_allocations`] would make now, made by
    /// the returned job instead, which may run on another thread while this
    /// writer is finished there (it reads the writer's spool at offsets of
    /// its own and copies the events still in memory). `None` when this
    /// writer cannot detach one; no event may be written after a detach.
    fn detach_allocation_replay(&mut self) -> Option<AllocationReplay> {
        None
    }
    /// Whether [`TraceWriter::finish_before_classes`] can finish this writer.
    fn finishes_before_classes(&self) -> bool {
        false
    }
    /// Finishes the file now, keeping room for one leak scan, after every
    /// event written, at `time_ns`, over the blocks at `blocks` (in the
    /// order their classes will come): the same bytes as `LeakScan` and a
    /// `BlockClass` per block written before `finish`, once the returned
    /// [`ClassesLater`] has written the classes; until then the room is
    /// blank and the file reads as a trace without that scan. For the
    /// preload's exit, which writes the file while the scan runs. Only when
    /// [`TraceWriter::finishes_before_classes`].
    fn finish_before_classes(
        self: Box<Self>,
        time_ns: u64,
        blocks: Vec<u64>,
    ) -> std::io::Result<Box<dyn ClassesLater>> {
        let _ = (time_ns, blocks);
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// The classes of a leak scan a finished file keeps room for
/// ([`TraceWriter::finish_before_classes`]).
pub trait ClassesLater: Send {
    /// Writes one kind per block named, in that order; the file is complete.
    fn write(self: Box<Self>, kinds: &[LeakKind]) -> std::io::Result<()>;
}

/// A replay of the allocations written ([`TraceWriter::detach_allocation_replay`]):
/// calls its argument with `(address, size)` for each, in order; `Ok(false)`
/// when it cannot read them back.
pub type AllocationReplay =
    Box<dyn FnOnce(&mut dyn FnMut(u64, u64)) -> std::io::Result<bool> + Send>;

/// A streaming reader of any format.
pub type TraceReader = Box<dyn Iterator<Item = Result<Record>> + Send>;

/// The formats this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Dumpalloc,
    Mlyze,
    Tlv,
}

impl Format {
    /// The file extension (without the dot) files of this format are given.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Dumpalloc => "dumpalloc",
            Format::Mlyze => "mlyze",
            Format::Tlv => "tlv",
        }
    }

    pub fn name(self) -> &'static str {
        self.extension()
    }

    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "dumpalloc" => Some(Format::Dumpalloc),
            "mlyze" => Some(Format::Mlyze),
            "tlv" => Some(Format::Tlv),
            _ => None,
        }
    }
}

/// Recognises a format from the first bytes of a file (at least 4 needed).
pub fn detect(magic: &[u8]) -> Option<Format> {
    match magic.get(..4)? {
        b"PROC" => Some(Format::Dumpalloc),
        b"MTRC" => Some(Format::Mlyze),
        // The spool of an unfinished mlyze writer: `mlyze::Reader` reads it too.
        b"MTRS" => Some(Format::Mlyze),
        [0x78, 0x06, 0x17, 0xa5] => Some(Format::Tlv),
        _ => None,
    }
}

/// Opens a trace file of any format, detected from its magic bytes.
pub fn open(path: &Path) -> Result<(Format, TraceReader)> {
    let io = |source| FormatError::Io { offset: 0, source };
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match file.read(&mut magic[got..]).map_err(io)? {
            0 => break,
            n => got += n,
        }
    }
    let format = detect(&magic[..got]).ok_or_else(|| {
        FormatError::invalid(
            0,
            "the magic bytes of a trace (\"PROC\" dumpalloc, \"MTRC\" mlyze, 78 06 17 a5 syscall TLV)",
            format!("{:02x?}", &magic[..got]),
        )
    })?;
    let file = File::open(path).map_err(io)?;
    let reader: TraceReader = match format {
        Format::Dumpalloc => Box::new(dumpalloc::Reader::new(file)),
        Format::Mlyze => Box::new(mlyze::Reader::new(file)),
        Format::Tlv => Box::new(tlv::Reader::new(file)),
    };
    Ok((format, reader))
}
