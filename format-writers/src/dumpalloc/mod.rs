//! The dumpalloc format: a RIFF-like stream of self-describing records.
//!
//! Every record is a four-character type code, a little-endian `u32` length of
//! what follows, then that many bytes:
//!
//! ```text
//! +------+--------+---------------------+
//! | code | len u32| body (len bytes)    |
//! +------+--------+---------------------+
//! ```
//!
//! The document defines `PROC` (pid, executable), `OBJE` (a loaded object),
//! `ALOC` (address, time) followed by its stack as `FRAM` records (subtypes
//! `NTVE` address, `PCAL` function/file/line, `TERM` end of stack) that are not
//! counted in the `ALOC` length, and `DALC` (address). Strings are a `u32` byte
//! count and UTF-8 bytes; timestamps are `u64` seconds and `u32` nanoseconds.
//!
//! libtracer extends the format in the two ways a reader that knows only the
//! document skips without noticing:
//!
//! * trailing fields inside the length of a documented record (block size and
//!   thread of `ALOC`, time and thread of `DALC`, load address and size of
//!   `OBJE`, start time and command line of `PROC`);
//! * record types the document lacks (`THRD`, `MARK`, `GCOL`, `ASYM`, `INFO`,
//!   `SYSC`, `LSCN`, `BCLS`) and
//!   one frame subtype (`NSYM`: the symbol of the `NTVE` frame just before it).
//!
//! The document has no stack references: each `ALOC` repeats its frames. The
//! [`Writer`] therefore remembers the frames of every `Record::Stack` it is given,
//! and the [`Reader`] interns the frame lists it meets back into stack ids
//! (0, 1, 2, … in first-seen order). `docs/formats/dumpalloc.md` lists every
//! decision with a worked byte sequence per record type.

mod reader;
mod writer;

pub use reader::Reader;
pub use writer::Writer;

use crate::fasthash::FastMap;

/// Record type codes of the document.
pub const PROC: [u8; 4] = *b"PROC";
pub const OBJE: [u8; 4] = *b"OBJE";
pub const ALOC: [u8; 4] = *b"ALOC";
pub const FRAM: [u8; 4] = *b"FRAM";
pub const DALC: [u8; 4] = *b"DALC";

/// Record type codes libtracer adds (skipped by readers of the document).
pub const THRD: [u8; 4] = *b"THRD";
pub const MARK: [u8; 4] = *b"MARK";
pub const GCOL: [u8; 4] = *b"GCOL";
pub const ASYM: [u8; 4] = *b"ASYM";
pub const INFO: [u8; 4] = *b"INFO";
pub const SYSC: [u8; 4] = *b"SYSC";
/// The reachability scan at exit (timestamp), then one `BCLS` per classified block.
pub const LSCN: [u8; 4] = *b"LSCN";
/// A block's reachability class: address `u64`, kind `u8` (0 definite,
/// 1 indirect, 2 possible, 3 reachable).
pub const BCLS: [u8; 4] = *b"BCLS";

/// Argument kinds inside a `SYSC` record (one byte each, then a `u32` payload
/// length, then the payload).
pub mod arg_kind {
    pub const INT: u8 = 1;
    pub const FLAGS: u8 = 2;
    pub const FD: u8 = 3;
    pub const PATH: u8 = 4;
    pub const BUFFER: u8 = 5;
    pub const POINTER: u8 = 6;
    pub const UNKNOWN: u8 = 7;
}

/// Presence bits of the optional `SYSC` fields, in field order.
pub mod sysc_flag {
    pub const ERRNO: u8 = 1;
    pub const THREAD: u8 = 2;
    pub const TIME: u8 = 4;
    pub const DURATION: u8 = 8;
}

/// Frame subtypes of the document.
pub const NTVE: [u8; 4] = *b"NTVE";
pub const PCAL: [u8; 4] = *b"PCAL";
pub const TERM: [u8; 4] = *b"TERM";
/// Frame subtype libtracer adds: the resolved symbol of the preceding `NTVE`.
pub const NSYM: [u8; 4] = *b"NSYM";

/// Largest length accepted for a known record that carries strings (`PROC`,
/// `OBJE`, `FRAM`, `THRD`, `MARK`, `ASYM`, `INFO`, `SYSC`). The writer refuses to
/// produce more, the reader refuses to buffer more: a corrupt length cannot make
/// the reader hold more than this in memory.
pub const MAX_RECORD_LEN: u32 = 16 << 20;

/// Largest length accepted for a known record made of fixed-width fields only
/// (`ALOC`, `DALC`, `GCOL`, `LSCN`, `BCLS`): room for future trailing fields, small enough that
/// a corrupt length is reported where it is rather than at the end of the file.
pub const MAX_FIXED_RECORD_LEN: u32 = 4096;

/// Nanoseconds per second, for the document's `(seconds, nanoseconds)` times.
const NS_PER_SEC: u64 = 1_000_000_000;

/// The record types this codec decodes, with the length cap of each.
fn known_record(code: &[u8; 4]) -> Option<u32> {
    match code {
        &ALOC | &DALC | &GCOL | &LSCN | &BCLS => Some(MAX_FIXED_RECORD_LEN),
        &PROC | &OBJE | &FRAM | &THRD | &MARK | &ASYM | &INFO | &SYSC => Some(MAX_RECORD_LEN),
        _ => None,
    }
}

/// Printable form of a type code for error messages.
fn code_str(code: &[u8; 4]) -> String {
    if code.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("'{}'", String::from_utf8_lossy(code))
    } else {
        format!("{code:02x?}")
    }
}
