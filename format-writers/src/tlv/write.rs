//! The writer: document dialect (syscall segments tagged 1), native byte order.
//!
//! The header needs the process (pid, start time, argv) and the host facts, which
//! arrive as the first records; it is written when the first event arrives, at a
//! `flush` once the process is known, or at `finish`. Model records the format has
//! no place for (objects, stacks, threads, allocation events, symbols) are ignored.

use std::io::{self, BufWriter, Write};

use super::{
    arg, encode_duration, flags, header_ie, segment, ByteOrder, FLAG_BIG_ENDIAN, MAGIC, MAX_ARGS,
    MAX_ARGV, MAX_IE_VALUE, MAX_INFO, TRACER_VERSION_KEY, UNAME_KEYS, VERSION,
};
use crate::model::{Event, Process, Record, Syscall, SyscallArg};
use crate::TraceWriter;

const NS_PER_S: u64 = 1_000_000_000;

/// Streaming writer of syscall capture TLV files.
pub struct Writer<W: Write> {
    out: BufWriter<W>,
    order: ByteOrder,
    process: Option<Process>,
    info: Vec<(String, String)>,
    header_written: bool,
    scratch: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// A writer in the machine's byte order.
    pub fn new(out: W) -> Self {
        Self::with_byte_order(out, ByteOrder::NATIVE)
    }

    /// A writer in a chosen byte order (header flag B0 records it).
    pub fn with_byte_order(out: W, order: ByteOrder) -> Self {
        Writer {
            out: BufWriter::with_capacity(1 << 16, out),
            order,
            process: None,
            info: Vec::new(),
            header_written: false,
            scratch: Vec::with_capacity(256),
        }
    }

    /// Accepts one record (see the module documentation for what is kept).
    pub fn write_record(&mut self, record: &Record) -> io::Result<()> {
        match record {
            Record::Process(p) if !self.header_written => self.process = Some(p.clone()),
            Record::Info(pairs) if !self.header_written => {
                if self.info.len() + pairs.len() > MAX_INFO {
                    return Err(invalid(format!("more than {MAX_INFO} host facts")));
                }
                self.info.extend(pairs.iter().cloned());
            }
            Record::Event(Event::Syscall(s)) => {
                self.ensure_header()?;
                self.write_syscall(s)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Completes the file and hands back the underlying writer.
    pub fn finish_into_inner(mut self) -> io::Result<W> {
        self.ensure_header()?;
        self.out.into_inner().map_err(|e| e.into_error())
    }

    fn ensure_header(&mut self) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        let process = self.process.take().unwrap_or_default();
        let info = std::mem::take(&mut self.info);
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let r = encode_header(&mut Enc::new(&mut buf, self.order), &process, &info)
            .and_then(|()| self.out.write_all(&buf));
        self.scratch = buf;
        r?;
        self.header_written = true;
        Ok(())
    }

    fn write_syscall(&mut self, s: &Syscall) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let r = encode_syscall(&mut Enc::new(&mut buf, self.order), s)
            .and_then(|()| self.out.write_all(&buf));
        self.scratch = buf;
        r
    }
}

impl<W: Write + Send> TraceWriter for Writer<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        self.write_record(record)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.process.is_some() {
            self.ensure_header()?;
        }
        self.out.flush()
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        self.finish_into_inner().map(drop)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Appends fields in one byte order; segments and IEs are opened, filled, then
/// closed (which patches their length and pads to 4).
pub(super) struct Enc<'a> {
    buf: &'a mut Vec<u8>,
    big: bool,
}

impl<'a> Enc<'a> {
    pub(super) fn new(buf: &'a mut Vec<u8>, order: ByteOrder) -> Self {
        Enc {
            buf,
            big: order == ByteOrder::Big,
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u16(&mut self, v: u16) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.bytes(&b);
    }
    fn u32(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.bytes(&b);
    }
    fn u64(&mut self, v: u64) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.bytes(&b);
    }
    fn pad4(&mut self) {
        let n = self.buf.len().next_multiple_of(4);
        self.buf.resize(n, 0);
    }
    /// Writes a segment tag and a length placeholder; returns where the body starts.
    fn open_segment(&mut self, tag: u32) -> usize {
        self.u32(tag);
        self.u32(0);
        self.buf.len()
    }
    fn close_segment(&mut self, body: usize) -> io::Result<()> {
        let len = u32::try_from(self.buf.len() - body)
            .map_err(|_| invalid("a segment longer than 4 GiB".into()))?;
        let b = if self.big {
            len.to_be_bytes()
        } else {
            len.to_le_bytes()
        };
        self.buf[body - 4..body].copy_from_slice(&b);
        self.pad4();
        Ok(())
    }
    /// One IE; `value` must be at most [`MAX_IE_VALUE`] bytes (callers cut it).
    fn ie(&mut self, tag: u16, value: &[u8]) {
        self.ie2(tag, &[], value);
    }
    /// One IE whose value is `head` then `rest` (a length field and a
    /// captured prefix), without assembling it first; at most
    /// [`MAX_IE_VALUE`] bytes in all.
    fn ie2(&mut self, tag: u16, head: &[u8], rest: &[u8]) {
        let len = head.len() + rest.len();
        debug_assert!(len <= MAX_IE_VALUE);
        self.buf.reserve(4 + len + 3);
        self.u16(tag);
        self.u16(len as u16);
        self.bytes(head);
        self.bytes(rest);
        self.pad4();
    }
    /// A string IE, continued in [`header_ie::CONTINUATION`] IEs past 65,535 bytes.
    fn long_ie(&mut self, tag: u16, value: &[u8]) {
        let mut chunks = value.chunks(MAX_IE_VALUE);
        self.ie(tag, chunks.next().unwrap_or(&[]));
        for c in chunks {
            self.ie(header_ie::CONTINUATION, c);
        }
    }
}

/// The fixed header and the variable-header segment.
pub(super) fn encode_header(
    e: &mut Enc<'_>,
    p: &Process,
    info: &[(String, String)],
) -> io::Result<()> {
    if p.command_line.len() > MAX_ARGV {
        return Err(invalid(format!("more than {MAX_ARGV} argv elements")));
    }
    let seconds = p.start_time_ns / NS_PER_S;
    e.bytes(&MAGIC);
    e.u8(VERSION);
    e.u8(if e.big { FLAG_BIG_ENDIAN } else { 0 });
    e.u16(0);
    e.u32(p.pid);
    e.u64(seconds);
    // Our fast clock is the epoch clock in nanoseconds, so its reading at the
    // whole second `seconds` is `seconds * 10^9` and entry timestamps are epoch
    // nanoseconds as they are.
    e.u64(seconds * NS_PER_S);

    let body = e.open_segment(segment::VARIABLE_HEADER);
    if !p.executable.is_empty() {
        e.long_ie(header_ie::EXECUTABLE, p.executable.as_bytes());
    }
    for a in &p.command_line {
        e.long_ie(header_ie::ARGUMENT, a.as_bytes());
    }
    if p.start_time_ns != 0 {
        e.ie(header_ie::START_NS, &start_bytes(p.start_time_ns, e.big));
    }
    let uname = uname_block(info);
    let mut uname_done = false;
    for (k, v) in info {
        if let Some(block) = uname.as_ref().filter(|_| UNAME_KEYS.contains(&k.as_str())) {
            if !uname_done {
                e.ie(header_ie::UNAME, block);
                uname_done = true;
            }
        } else if k == TRACER_VERSION_KEY {
            e.long_ie(header_ie::TRACER_VERSION, v.as_bytes());
        } else {
            let key = k.split('\0').next().unwrap_or("");
            let mut kv = Vec::with_capacity(key.len() + 1 + v.len());
            kv.extend_from_slice(key.as_bytes());
            kv.push(0);
            kv.extend_from_slice(v.as_bytes());
            e.long_ie(header_ie::INFO, &kv);
        }
    }
    e.close_segment(body)
}

fn start_bytes(ns: u64, big: bool) -> [u8; 8] {
    if big {
        ns.to_be_bytes()
    } else {
        ns.to_le_bytes()
    }
}

/// The original tool's `uname` IE value when `info` holds each of the six `uname`
/// keys exactly once, with NUL-free values that fit in one IE; otherwise those
/// keys are written as ordinary key/value IEs.
fn uname_block(info: &[(String, String)]) -> Option<Vec<u8>> {
    let mut block = Vec::new();
    for key in UNAME_KEYS {
        let mut found = info.iter().filter(|(k, _)| k == key);
        let (_, v) = found.next()?;
        if found.next().is_some() || v.contains('\0') {
            return None;
        }
        block.extend_from_slice(v.as_bytes());
        block.push(0);
    }
    (block.len() <= MAX_IE_VALUE).then_some(block)
}

/// One document-dialect syscall segment.
pub(super) fn encode_syscall(e: &mut Enc<'_>, s: &Syscall) -> io::Result<()> {
    if s.args.len() > MAX_ARGS {
        return Err(invalid(format!(
            "a syscall with {} arguments (at most {MAX_ARGS})",
            s.args.len()
        )));
    }
    let mut f = 0;
    if s.thread.is_some() {
        f |= flags::THREAD;
    }
    if s.time_ns.is_some() {
        f |= flags::TIMESTAMP;
    }
    if s.duration_ns.is_some() {
        f |= flags::DURATION;
    }
    if s.errno.is_some() {
        f |= flags::ERRNO;
    }
    let body = e.open_segment(segment::SYSCALL);
    e.u16(s.number);
    e.u8(f);
    e.u8(0);
    e.u64(s.result as u64);
    if let Some(t) = s.thread {
        e.u32(t);
    }
    if let Some(t) = s.time_ns {
        e.u64(t);
    }
    if let Some(d) = s.duration_ns {
        e.u32(encode_duration(d));
    }
    if let Some(n) = s.errno {
        e.u32(n as u32);
    }
    for a in &s.args {
        encode_arg(e, a);
    }
    e.close_segment(body)
}

/// One argument IE. Values that cannot fit an IE are cut (documented): paths and
/// unknown values at 65,535 bytes, captured buffer prefixes so that the IE fits.
fn encode_arg(e: &mut Enc<'_>, a: &SyscallArg) {
    let big = e.big;
    let ne64 = |v: u64| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let ne32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    match a {
        SyscallArg::Int(v) => match i32::try_from(*v) {
            Ok(small) => e.ie(arg::INT, &ne32(small as u32)),
            Err(_) => e.ie(arg::INT, &ne64(*v as u64)),
        },
        SyscallArg::Flags(v) => e.ie(arg::FLAGS, &ne64(*v)),
        SyscallArg::Fd(fd) => e.ie(arg::FD, &ne32(*fd as u32)),
        SyscallArg::Pointer(p) => e.ie(arg::POINTER, &ne64(*p)),
        SyscallArg::Path(p) => e.ie(arg::PATH, &p[..p.len().min(MAX_IE_VALUE)]),
        SyscallArg::Unknown { tag, raw } => e.ie(*tag, &raw[..raw.len().min(MAX_IE_VALUE)]),
        SyscallArg::Buffer { len, data } => {
            // A prefix never exceeds the buffer's length.
            let data = &data[..data.len().min(usize::try_from(*len).unwrap_or(usize::MAX))];
            if data.len() as u64 == *len && data.len() <= MAX_IE_VALUE {
                e.ie(arg::DATA, data);
            } else if let Ok(len32) = u32::try_from(*len) {
                let data = &data[..data.len().min(MAX_IE_VALUE - 4)];
                e.ie2(arg::PARTIAL_DATA, &ne32(len32), data);
            } else {
                let data = &data[..data.len().min(MAX_IE_VALUE - 8)];
                e.ie2(arg::LONG_PARTIAL_DATA, &ne64(*len), data);
            }
        }
    }
}
