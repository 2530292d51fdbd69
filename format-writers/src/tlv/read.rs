//! The reader: both dialects, either byte order, one segment at a time.
//!
//! Memory is bounded by one segment's IEs (each at most 64 KiB, at most
//! [`MAX_ARGS`] per syscall); lengths are checked against the enclosing segment
//! before anything is read, and byte runs grow only as the file delivers them.

use std::io::Read;

use super::{
    arg, decode_duration, flags, header_ie, segment, FLAG_BIG_ENDIAN, MAGIC, MAX_ARGS, MAX_ARGV,
    MAX_INFO, TRACER_VERSION_KEY, UNAME_KEYS, VERSION,
};
use crate::bytes::ByteSource;
use crate::error::{FormatError, Result};
use crate::model::{Event, Process, Record, Syscall, SyscallArg};

const NS_PER_S: u64 = 1_000_000_000;

enum State {
    Header,
    Segments,
    Done,
}

/// Streaming reader of syscall capture TLV files (ours and the original tool's).
pub struct Reader<R> {
    src: ByteSource<R>,
    big: bool,
    state: State,
    /// Epoch nanoseconds of the header's whole second.
    base_ns: u64,
    /// Fast-clock reading at `base_ns`.
    reference: u64,
    /// Records decoded ahead (the process and host facts), next one last.
    ahead: Vec<Record>,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Self {
        Reader {
            src: ByteSource::new(inner),
            big: false,
            state: State::Header,
            base_ns: 0,
            reference: 0,
            ahead: Vec::new(),
        }
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.src.read_array(what)?;
        Ok(if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.src.read_array(what)?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.src.read_array(what)?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// Skips the padding that brings `len` bytes up to a multiple of 4.
    fn skip_padding(&mut self, len: u64, what: &str) -> Result<()> {
        self.src.skip((4 - len % 4) % 4, what)
    }

    fn read_header(&mut self) -> Result<()> {
        let magic: [u8; 4] = self.src.read_array("the magic bytes 78 06 17 a5")?;
        if magic != MAGIC {
            return Err(FormatError::invalid(
                0,
                "the magic bytes 78 06 17 a5",
                format!("{magic:02x?}"),
            ));
        }
        let version = self.src.read_u8("the version byte")?;
        if version != VERSION {
            return Err(FormatError::invalid(4, "version 1", version.to_string()));
        }
        let hflags = self.src.read_u8("the header flags")?;
        self.big = hflags & FLAG_BIG_ENDIAN != 0;
        self.src.skip(2, "the 2 unused header bytes")?;
        let pid = self.u32("the process id")?;
        let seconds = self.u64("the epoch seconds")?;
        self.base_ns = seconds.checked_mul(NS_PER_S).ok_or_else(|| {
            FormatError::invalid(
                12,
                "epoch seconds that fit 64-bit nanoseconds",
                seconds.to_string(),
            )
        })?;
        self.reference = self.u64("the fast-clock reference")?;

        let mut process = Process {
            pid,
            start_time_ns: self.base_ns,
            ..Process::default()
        };
        let mut info = Vec::new();
        if !self.src.at_eof()? {
            self.read_variable_header(&mut process, &mut info)?;
        }
        if !info.is_empty() {
            self.ahead.push(Record::Info(info));
        }
        self.ahead.push(Record::Process(process));
        Ok(())
    }

    /// The first segment, whatever its tag: IEs of process and host facts.
    fn read_variable_header(
        &mut self,
        process: &mut Process,
        info: &mut Vec<(String, String)>,
    ) -> Result<()> {
        let seg_at = self.src.offset();
        let _tag = self.u32("the variable header tag")?;
        let len = self.u32("the variable header length")?;
        let mut body = Body::new(seg_at, len);
        // The string IE being assembled (its tag and bytes so far), for continuations.
        let mut pending: Option<(u16, Vec<u8>)> = None;
        while body.left > 0 {
            let (tag, value, at) = self.read_ie(&mut body)?;
            if tag == header_ie::CONTINUATION {
                match pending.as_mut() {
                    Some((_, bytes)) => bytes.extend_from_slice(&value),
                    None => {
                        return Err(FormatError::invalid(
                            at,
                            "a continuation element right after a string element",
                            "a continuation with nothing to continue",
                        ))
                    }
                }
                continue;
            }
            if let Some((t, bytes)) = pending.take() {
                apply_string(t, bytes, process, info, at)?;
            }
            match tag {
                header_ie::UNAME => {
                    let fields = parse_uname(&value).ok_or_else(|| {
                        FormatError::invalid(
                            at,
                            "six NUL-terminated uname strings",
                            format!("{} bytes without six NULs", value.len()),
                        )
                    })?;
                    check_info_room(info.len() + 6, at)?;
                    for (k, v) in UNAME_KEYS.iter().zip(fields) {
                        info.push((k.to_string(), v));
                    }
                }
                header_ie::START_NS => {
                    let b: [u8; 8] = value.as_slice().try_into().map_err(|_| {
                        FormatError::invalid(
                            at,
                            "an 8-byte start time",
                            format!("{} bytes", value.len()),
                        )
                    })?;
                    process.start_time_ns = if self.big {
                        u64::from_be_bytes(b)
                    } else {
                        u64::from_le_bytes(b)
                    };
                }
                header_ie::EXECUTABLE
                | header_ie::ARGUMENT
                | header_ie::TRACER_VERSION
                | header_ie::INFO => pending = Some((tag, value)),
                _ => {} // unknown: skipped
            }
        }
        if let Some((t, bytes)) = pending.take() {
            apply_string(t, bytes, process, info, self.src.offset())?;
        }
        self.skip_padding(u64::from(len), "padding after the variable header")
    }

    /// Reads one IE inside `body`: its tag, its value, and the IE's offset.
    fn read_ie(&mut self, body: &mut Body) -> Result<(u16, Vec<u8>, u64)> {
        let at = self.src.offset();
        body.take(4, at, "an element tag and length")?;
        let tag = self.u16("an element tag")?;
        let len = self.u16("an element length")?;
        body.take(u64::from(len), at + 4, "the element's value")?;
        let value = self.src.read_vec(u64::from(len), "an element value")?;
        // Padding cut short by the end of the segment is covered by the segment's.
        let pad = ((4 - u64::from(len) % 4) % 4).min(body.left);
        body.left -= pad;
        self.src.skip(pad, "element padding")?;
        Ok((tag, value, at))
    }

    /// The next syscall, skipping segments that carry none; `None` at the end.
    fn next_syscall(&mut self) -> Result<Option<Syscall>> {
        loop {
            if self.src.at_eof()? {
                return Ok(None);
            }
            let seg_at = self.src.offset();
            let tag = self.u32("a segment tag")?;
            let len = self.u32("a segment length")?;
            let call = match tag {
                segment::SYSCALL => Some(self.read_syscall(seg_at, len, false)?),
                segment::SYSCALL_ORIGINAL => Some(self.read_syscall(seg_at, len, true)?),
                _ => {
                    self.src
                        .skip(u64::from(len), "the body of a skipped segment")?;
                    None
                }
            };
            self.skip_padding(u64::from(len), "segment padding")?;
            if call.is_some() {
                return Ok(call);
            }
        }
    }

    fn read_syscall(&mut self, seg_at: u64, len: u32, original: bool) -> Result<Syscall> {
        let mut body = Body::new(seg_at, len);
        let at = self.src.offset();
        body.take(4, at, "the syscall number, flags and unused byte")?;
        let number = self.u16("the syscall number")?;
        let f = self.src.read_u8("the syscall flags")?;
        self.src.skip(1, "the unused byte")?;
        let known = 0x0f;
        if f & !known != 0 {
            return Err(FormatError::invalid(
                at + 2,
                "syscall flags with only bits 0-3 set",
                format!("{f:#04x}"),
            ));
        }
        let (has_result, th, ts, du, er) = if original {
            use flags::original as o;
            (
                f & o::RESULT != 0,
                f & o::THREAD,
                f & o::TIMESTAMP,
                f & o::DURATION,
                0,
            )
        } else {
            (
                true,
                f & flags::THREAD,
                f & flags::TIMESTAMP,
                f & flags::DURATION,
                f & flags::ERRNO,
            )
        };
        let mut call = Syscall {
            number,
            ..Syscall::default()
        };
        if has_result {
            body.take(8, self.src.offset(), "the return value")?;
            call.result = self.u64("the return value")? as i64;
        }
        if th != 0 {
            body.take(4, self.src.offset(), "the thread id")?;
            call.thread = Some(self.u32("the thread id")?);
        }
        if ts != 0 {
            let at = self.src.offset();
            body.take(8, at, "the entry timestamp")?;
            let t = self.u64("the entry timestamp")?;
            let ns = i128::from(self.base_ns) + i128::from(t) - i128::from(self.reference);
            call.time_ns = Some(u64::try_from(ns).map_err(|_| {
                FormatError::invalid(
                    at,
                    "an entry timestamp between the Unix epoch and 2554",
                    format!("{t} ns against a reference of {} ns", self.reference),
                )
            })?);
        }
        if du != 0 {
            let at = self.src.offset();
            body.take(4, at, "the duration")?;
            let raw = self.u32("the duration")?;
            call.duration_ns = Some(if original {
                let d = f32::from_bits(raw);
                if !(d.is_finite() && d >= 0.0) {
                    return Err(FormatError::invalid(
                        at,
                        "a finite, non-negative f32 duration",
                        d.to_string(),
                    ));
                }
                d.round() as u64
            } else {
                decode_duration(raw)
            });
        }
        if er != 0 {
            body.take(4, self.src.offset(), "the error number")?;
            call.errno = Some(self.u32("the error number")? as i32);
        }
        while body.left > 0 {
            let (tag, value, at) = self.read_ie(&mut body)?;
            if call.args.len() == MAX_ARGS {
                return Err(FormatError::invalid(
                    at,
                    format!("at most {MAX_ARGS} argument elements in one syscall"),
                    "more",
                ));
            }
            call.args.push(decode_arg(tag, value, at, self.big)?);
        }
        Ok(call)
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(r) = self.ahead.pop() {
            return Some(Ok(r));
        }
        let step = match self.state {
            State::Done => return None,
            State::Header => self.read_header().map(|()| {
                self.state = State::Segments;
                self.ahead.pop()
            }),
            State::Segments => self
                .next_syscall()
                .map(|c| c.map(|c| Record::Event(Event::Syscall(c)))),
        };
        match step {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.state = State::Done;
                None
            }
            Err(e) => {
                self.state = State::Done;
                self.ahead.clear();
                Some(Err(e))
            }
        }
    }
}

/// What is left of a segment's declared length.
struct Body {
    seg_at: u64,
    len: u32,
    left: u64,
}

impl Body {
    fn new(seg_at: u64, len: u32) -> Self {
        Body {
            seg_at,
            len,
            left: u64::from(len),
        }
    }

    /// Claims `n` bytes of the segment, or explains that they are not there.
    fn take(&mut self, n: u64, at: u64, what: &str) -> Result<()> {
        if n > self.left {
            return Err(FormatError::invalid(
                at,
                format!(
                    "{what} ({n} bytes) inside the segment of {} bytes at byte {}",
                    self.len, self.seg_at
                ),
                format!("{} bytes left in the segment", self.left),
            ));
        }
        self.left -= n;
        Ok(())
    }
}

fn check_info_room(n: usize, at: u64) -> Result<()> {
    if n > MAX_INFO {
        return Err(FormatError::invalid(
            at,
            format!("at most {MAX_INFO} host facts"),
            "more",
        ));
    }
    Ok(())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Stores a completed string IE of the variable header.
fn apply_string(
    tag: u16,
    bytes: Vec<u8>,
    process: &mut Process,
    info: &mut Vec<(String, String)>,
    at: u64,
) -> Result<()> {
    let s = String::from_utf8(bytes).unwrap_or_else(|e| text(e.as_bytes()));
    match tag {
        header_ie::EXECUTABLE => process.executable = s,
        header_ie::ARGUMENT => {
            if process.command_line.len() == MAX_ARGV {
                return Err(FormatError::invalid(
                    at,
                    format!("at most {MAX_ARGV} argv elements"),
                    "more",
                ));
            }
            process.command_line.push(s);
        }
        header_ie::TRACER_VERSION => {
            check_info_room(info.len() + 1, at)?;
            info.push((TRACER_VERSION_KEY.to_string(), s));
        }
        _ => {
            check_info_room(info.len() + 1, at)?;
            let (k, v) = s.split_once('\0').unwrap_or((&s, ""));
            info.push((k.to_string(), v.to_string()));
        }
    }
    Ok(())
}

/// The six NUL-terminated strings of a `uname` IE (bytes after the sixth NUL
/// are ignored).
fn parse_uname(value: &[u8]) -> Option<Vec<String>> {
    let mut fields = Vec::with_capacity(6);
    let mut rest = value;
    for _ in 0..6 {
        let nul = rest.iter().position(|&b| b == 0)?;
        fields.push(text(&rest[..nul]));
        rest = &rest[nul + 1..];
    }
    Some(fields)
}

fn decode_arg(tag: u16, value: Vec<u8>, at: u64, big: bool) -> Result<SyscallArg> {
    let n = value.len();
    let wrong = |expected: &str| {
        FormatError::invalid(
            at,
            format!("{expected} in argument element {tag:#06x}"),
            format!("{n} bytes"),
        )
    };
    let u32_of = |b: &[u8]| {
        let b: [u8; 4] = b[..4].try_into().unwrap_or_default();
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let u64_of = |b: &[u8]| {
        let b: [u8; 8] = b[..8].try_into().unwrap_or_default();
        if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    };
    let prefix_too_long = |len: u64, data: usize| {
        FormatError::invalid(
            at,
            format!("a captured prefix no longer than the buffer's {len} bytes"),
            format!("{data} bytes"),
        )
    };
    Ok(match tag {
        arg::INT => match n {
            4 => SyscallArg::Int(i64::from(u32_of(&value) as i32)),
            8 => SyscallArg::Int(u64_of(&value) as i64),
            _ => return Err(wrong("a 4- or 8-byte integer")),
        },
        arg::DATA => SyscallArg::Buffer {
            len: n as u64,
            data: value,
        },
        arg::PARTIAL_DATA | arg::LONG_PARTIAL_DATA => {
            let head = if tag == arg::PARTIAL_DATA { 4 } else { 8 };
            if n < head {
                return Err(wrong(if head == 4 {
                    "a 4-byte length before the data"
                } else {
                    "an 8-byte length before the data"
                }));
            }
            let len = if head == 4 {
                u64::from(u32_of(&value))
            } else {
                u64_of(&value)
            };
            if (n - head) as u64 > len {
                return Err(prefix_too_long(len, n - head));
            }
            let mut data = value;
            data.drain(..head);
            SyscallArg::Buffer { len, data }
        }
        arg::FLAGS if n == 8 => SyscallArg::Flags(u64_of(&value)),
        arg::POINTER if n == 8 => SyscallArg::Pointer(u64_of(&value)),
        arg::FD if n == 4 => SyscallArg::Fd(u32_of(&value) as i32),
        arg::FLAGS | arg::POINTER => return Err(wrong("8 bytes")),
        arg::FD => return Err(wrong("4 bytes")),
        arg::PATH => SyscallArg::Path(value),
        _ => SyscallArg::Unknown { tag, raw: value },
    })
}
