//! The mlyze format: a 256-byte `MTRC` header, JSON metadata, a varint event stream.
//!
//! ```text
//! offset 0    "MTRC"                      magic
//!        4    u32 LE = 1                  version
//!        8    u64 LE                      start time, microseconds since the epoch
//!        16   u32 LE                      metadata length L
//!        20   236 zero bytes              reserved
//!        256  L bytes of JSON             {"stack_traces", "files", "functions", "libtracer"}
//!        256+L events, until end of file:
//!   ALLOC  00 delta:varint addr:u64 size:varint stack:varint thread:u16
//!   FREE   01 delta:varint addr:u64
//!   GC     02 delta:varint objects:varint bytes:varint
//!   MARKER 03 delta:varint name:varint        (name = an id of "functions")
//! ```
//!
//! Varints are protocol-buffers unsigned varints; `delta` is microseconds since
//! the previous event (the first event counts from the header's start time).
//! Worked example, an allocation of 128 bytes at 0x1000, stack 1, thread slot 2,
//! 5 µs after the previous event: `00 05 00 10 00 00 00 00 00 00 80 01 01 02 00`.
//!
//! The document's three metadata tables cannot hold everything the event model
//! carries, so the writer adds one extra top-level key, `"libtracer"`, that a
//! reader knowing only the document ignores: frame addresses, the process,
//! loaded objects, thread names, the map from the 16-bit thread slots of events
//! to OS thread ids, late symbol resolutions, host info, marker threads and
//! the reachability classes of the leak scan at exit (`leak_scans`).
//! `docs/formats/mlyze.md` lists every such decision and its reason.
//!
//! Because the metadata precedes the events but is complete only at the end of a
//! run, the file-backed [`Writer`] spools the encoded events (plus a log of the
//! metadata as it grows) into a side file and assembles the final file in
//! `finish`. A spool left by a killed process is turned into a normal file by
//! [`recover`] (see [`spool`] for its layout).

mod meta;
mod reader;
mod replay;
pub mod spool;
mod writer;

pub use reader::Reader;
pub use spool::{recover, recover_to, spool_names, spool_process, unfinished_spool, RecoverStats};
pub use writer::{HeaderPatcher, SpoolIo, SpoolReader, SpoolRemover, Writer};

/// Magic bytes of a finished file.
pub const MAGIC: &[u8; 4] = b"MTRC";
/// The only version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 256;

pub(crate) const ALLOC: u8 = 0;
pub(crate) const FREE: u8 = 1;
pub(crate) const GC: u8 = 2;
pub(crate) const MARKER: u8 = 3;

/// Longest possible event: ALLOC with three 10-byte varints.
pub(crate) const MAX_EVENT: usize = 1 + 10 + 8 + 10 + 10 + 2;

/// Number of distinct thread slots an event can name.
pub(crate) const SLOTS: usize = 1 << 16;

/// One event as laid out on the wire, before ids are mapped to the model.
/// `a`/`b` are size/stack (ALLOC), objects/bytes (GC), name id (MARKER, in `a`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawEvent {
    pub ty: u8,
    pub delta: u64,
    pub addr: u64,
    pub a: u64,
    pub b: u64,
    pub slot: u16,
}

/// Why a slice did not hold a valid event.
#[derive(Debug)]
pub(crate) enum Bad {
    /// The slice ends before the event does.
    Incomplete,
    /// Bytes that no event may contain, at `pos` in the slice.
    Invalid {
        pos: usize,
        expected: &'static str,
        found: String,
    },
}

pub(crate) const EXPECTED_TYPE: &str = "an event type: 0 (ALLOC), 1 (FREE), 2 (GC) or 3 (MARKER)";

#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize, expected: &'static str) -> Result<u64, Bad> {
    let start = *pos;
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let Some(&b) = buf.get(*pos) else {
            return Err(Bad::Incomplete);
        };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(Bad::Invalid {
                pos: start,
                expected,
                found: "a varint longer than 64 bits".into(),
            });
        }
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(value);
        }
        shift += 7;
    }
}

#[inline(always)]
fn fixed<const N: usize>(buf: &[u8], pos: &mut usize) -> Result<[u8; N], Bad> {
    let bytes = buf.get(*pos..*pos + N).ok_or(Bad::Incomplete)?;
    *pos += N;
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    Ok(out)
}

/// Decodes the event at the start of `buf`; returns it and its length.
#[inline]
pub(crate) fn decode_event(buf: &[u8]) -> Result<(RawEvent, usize), Bad> {
    let ty = *buf.first().ok_or(Bad::Incomplete)?;
    let mut pos = 1;
    let mut ev = RawEvent {
        ty,
        ..RawEvent::default()
    };
    if ty > MARKER {
        return Err(Bad::Invalid {
            pos: 0,
            expected: EXPECTED_TYPE,
            found: format!("type {ty}"),
        });
    }
    ev.delta = varint(buf, &mut pos, "a time delta as a varint of at most 64 bits")?;
    match ty {
        ALLOC => {
            ev.addr = u64::from_le_bytes(fixed(buf, &mut pos)?);
            ev.a = varint(
                buf,
                &mut pos,
                "an ALLOC size as a varint of at most 64 bits",
            )?;
            ev.b = varint(
                buf,
                &mut pos,
                "an ALLOC stack id as a varint of at most 64 bits",
            )?;
            ev.slot = u16::from_le_bytes(fixed(buf, &mut pos)?);
        }
        FREE => ev.addr = u64::from_le_bytes(fixed(buf, &mut pos)?),
        GC => {
            ev.a = varint(
                buf,
                &mut pos,
                "a GC object count as a varint of at most 64 bits",
            )?;
            ev.b = varint(
                buf,
                &mut pos,
                "a GC byte count as a varint of at most 64 bits",
            )?;
        }
        _ => {
            ev.a = varint(
                buf,
                &mut pos,
                "a MARKER name id as a varint of at most 64 bits",
            )?
        }
    }
    Ok((ev, pos))
}

/// Where the header holds the metadata's length (u32, little-endian).
pub(crate) const METADATA_LEN_AT: usize = 16;

/// The 256-byte header.
pub(crate) fn header(start_us: u64, metadata_len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(MAGIC);
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&start_us.to_le_bytes());
    h[METADATA_LEN_AT..METADATA_LEN_AT + 4].copy_from_slice(&metadata_len.to_le_bytes());
    h
}
