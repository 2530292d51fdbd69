//! Syscall capture TLV: a fixed header, then 4-byte-aligned segments of
//! tag–length–value information elements (IEs).
//!
//! ```text
//! file    = header  variable-header-segment  segment*
//! header  = 78 06 17 a5 | version u8 = 1 | flags u8 (B0: 1 = big-endian) | 2 unused
//!         | pid u32 | epoch seconds u64 | fast-clock reference ns u64        (28 bytes)
//! segment = tag u32 | length u32 | length bytes | padding to 4              (top level)
//! IE      = tag u16 | length u16 | length bytes | padding to 4              (inside)
//! ```
//!
//! Every multi-byte field is in the byte order header flag B0 names; the magic
//! is a byte sequence, the same in both orders. The first segment is always the
//! variable header (we tag it 1, as the original tool does). After it:
//!
//! | tag | segment | fixed part after `nr u16, flags u8, unused u8` |
//! | --- | --- | --- |
//! | 1 | captured syscall, as the document draws it (what we write) | result i64; thread u32 (B0); entry ns u64 (B1); duration u32 (B2, ns, or ms when bit 31 is set); errno i32 (B3) |
//! | 2 | captured syscall, the original tool's dialect (read only) | result i64 (0x01, else 0); thread i32 (0x02); entry ns i64 (0x04); duration f32 ns (0x08) |
//! | 3 | filler (the original's flush padding), skipped | — |
//! | other | skipped by length | — |
//!
//! Argument IEs follow the fixed part; the tags below 0x100 are the original
//! tool's, ours start at 0x100 (see [`arg`]). The variable header's IEs are in
//! [`header_ie`].
//!
//! Worked example: the document-dialect record of `close(3) = 0` by thread 7 at
//! epoch ns 0x10, 5 ns, no errno, little-endian:
//!
//! ```text
//! 01 00 00 00  24 00 00 00            tag 1, length 36
//! 03 00 07 00                         nr 3, flags Th|Ts|D, unused
//! 00 00 00 00 00 00 00 00             result 0
//! 07 00 00 00                         thread 7
//! 10 00 00 00 00 00 00 00             entry timestamp (fast clock)
//! 05 00 00 00                         duration 5 ns
//! 02 01 04 00 03 00 00 00             arg IE 0x0102 (fd), length 4, fd 3
//! ```
//!
//! The full description, the dialect table and every decision is in
//! `docs/formats/syscall-tlv.md`.

mod read;
mod write;

pub use read::Reader;
pub use write::Writer;

/// The four bytes every file starts with.
pub const MAGIC: [u8; 4] = [0x78, 0x06, 0x17, 0xa5];
/// The only version of the grammar.
pub const VERSION: u8 = 1;
/// Header flag B0: multi-byte fields are big-endian.
pub const FLAG_BIG_ENDIAN: u8 = 0x01;
/// Bytes of the fixed header before the first segment.
pub const HEADER_LEN: usize = 28;

/// Top-level segment tags.
pub mod segment {
    /// The variable header (always the first segment; 1 is what we and the original write).
    pub const VARIABLE_HEADER: u32 = 1;
    /// A captured syscall in the document's layout (after the first segment).
    pub const SYSCALL: u32 = 1;
    /// A captured syscall in the original tool's layout.
    pub const SYSCALL_ORIGINAL: u32 = 2;
    /// Padding the original tool writes; carries nothing.
    pub const FILLER: u32 = 3;
}

/// Flags of a document-dialect syscall segment.
pub mod flags {
    pub const THREAD: u8 = 0x01;
    pub const TIMESTAMP: u8 = 0x02;
    pub const DURATION: u8 = 0x04;
    pub const ERRNO: u8 = 0x08;
    /// Flags of an original-dialect syscall segment.
    pub mod original {
        pub const RESULT: u8 = 0x01;
        pub const THREAD: u8 = 0x02;
        pub const TIMESTAMP: u8 = 0x04;
        pub const DURATION: u8 = 0x08;
    }
}

/// IE tags inside the variable header.
pub mod header_ie {
    /// Six NUL-terminated `uname` strings: sysname, nodename, release, version,
    /// machine, domainname (the original tool's only header IE).
    pub const UNAME: u16 = 1;
    /// Path of the executable (UTF-8, no NUL).
    pub const EXECUTABLE: u16 = 2;
    /// One `argv` element; repeated in order.
    pub const ARGUMENT: u16 = 3;
    /// Version of the tracer that wrote the file.
    pub const TRACER_VERSION: u16 = 4;
    /// Any other host fact: `key NUL value`.
    pub const INFO: u16 = 5;
    /// Exact start of tracing, u64 nanoseconds since the Unix epoch.
    pub const START_NS: u16 = 6;
    /// More bytes of the string IE just before it (strings over 65,535 bytes).
    pub const CONTINUATION: u16 = 7;
}

/// Argument IE tags inside a syscall segment.
pub mod arg {
    /// Integer, 4 bytes when it fits in `i32`, else 8 (original's tag 1).
    pub const INT: u16 = 1;
    /// A buffer captured in full (original's tag 2).
    pub const DATA: u16 = 2;
    /// A buffer prefix: u32 full length, then the bytes (original's tag 3).
    pub const PARTIAL_DATA: u16 = 3;
    /// The original's `struct stat` (read as unknown).
    pub const STAT: u16 = 4;
    /// The original's `pollfd` array (read as unknown).
    pub const POLLFDS: u16 = 5;
    /// The original's `struct sigaction` (read as unknown).
    pub const SIGACTION: u16 = 6;
    /// The original's pointed-to integer (read as unknown).
    pub const INT_POINTER: u16 = 7;
    /// Flag bits, u64.
    pub const FLAGS: u16 = 0x0101;
    /// File descriptor, i32.
    pub const FD: u16 = 0x0102;
    /// Path bytes, no NUL.
    pub const PATH: u16 = 0x0103;
    /// Pointer whose target is not captured, u64.
    pub const POINTER: u16 = 0x0104;
    /// A buffer prefix whose full length needs 64 bits: u64 length, then the bytes.
    pub const LONG_PARTIAL_DATA: u16 = 0x0105;
}

/// The `uname` fields of [`header_ie::UNAME`], as the keys of `Record::Info`.
pub const UNAME_KEYS: [&str; 6] = [
    "sysname",
    "nodename",
    "release",
    "version",
    "machine",
    "domainname",
];
/// `Record::Info` key of [`header_ie::TRACER_VERSION`].
pub const TRACER_VERSION_KEY: &str = "tracer_version";

/// Largest IE value.
pub const MAX_IE_VALUE: usize = u16::MAX as usize;
/// Most argument IEs one syscall segment may carry (a bound on reader memory).
pub const MAX_ARGS: usize = 1024;
/// Most `Record::Info` pairs a variable header may carry.
pub const MAX_INFO: usize = 4096;
/// Most `argv` elements a variable header may carry.
pub const MAX_ARGV: usize = 1 << 17;

/// Bit 31 of a document-dialect duration: the low 31 bits count milliseconds.
pub const DURATION_MS_BIT: u32 = 1 << 31;

/// Encodes a duration the document's way: nanoseconds below 2^31, otherwise
/// whole milliseconds (rounded down) with bit 31 set, saturating at 2^31 − 1 ms
/// (about 24.8 days).
pub fn encode_duration(ns: u64) -> u32 {
    if ns < u64::from(DURATION_MS_BIT) {
        ns as u32
    } else {
        let ms = (ns / 1_000_000).min(u64::from(DURATION_MS_BIT - 1));
        DURATION_MS_BIT | ms as u32
    }
}

/// Decodes a document-dialect duration into nanoseconds.
pub fn decode_duration(raw: u32) -> u64 {
    if raw & DURATION_MS_BIT != 0 {
        u64::from(raw & !DURATION_MS_BIT) * 1_000_000
    } else {
        u64::from(raw)
    }
}

/// Byte order of a file's multi-byte fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// The byte order of the machine we run on: what the writer uses by default.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "big") {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_rule() {
        assert_eq!(encode_duration(0), 0);
        assert_eq!(encode_duration((1 << 31) - 1), 0x7fff_ffff);
        // 2^31 ns = 2147.483648 ms → 2147 ms with bit 31.
        assert_eq!(encode_duration(1 << 31), 0x8000_0000 | 2147);
        assert_eq!(decode_duration(0x8000_0000 | 2147), 2_147_000_000);
        assert_eq!(encode_duration(u64::MAX), 0xffff_ffff);
        assert_eq!(decode_duration(0xffff_ffff), 0x7fff_ffff * 1_000_000);
    }
}
