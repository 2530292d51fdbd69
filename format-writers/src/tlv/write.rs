//! The writer: document dialect (syscall segments tagged 1), native byte order.
//!
//! The header needs the process (pid, start time, argv) and the host facts, which
//! arrive as the first records; it is written when the first event arrives, at a
//! `flush` once the process is known, or at `finish`. Model records the format has
//! no place for (objects, stacks, threads, allocation events, symbols) are ignored.

use std::io::{self, Write};

use super::{
    arg, encode_duration, flags, header_ie, segment, ByteOrder, FLAG_BIG_ENDIAN, MAGIC, MAX_ARGS,
    MAX_ARGV, MAX_IE_VALUE, MAX_INFO, TRACER_VERSION_KEY, UNAME_KEYS, VERSION,
};
use crate::model::{Event, Process, Record, Syscall, SyscallArgView, SyscallView};
use crate::TraceWriter;

const NS_PER_S: u64 = 1_000_000_000;

/// Streaming writer of syscall capture TLV files.
pub struct Writer<W: Write> {
    out: Out<W>,
    order: ByteOrder,
    process: Option<Process>,
    info: Vec<(String, String)>,
    header_written: bool,
    scratch: Vec<u8>,
}

/// Bytes [`Out`] gathers before writing them out: 256 KiB (with 64 KiB,
/// four times as many `write` calls, the preload's writer thread spent
/// ~15% more CPU on a syscall-heavy program).
const OUT_CAP: usize = 1 << 18;

/// The output buffer. Small syscall segments are encoded straight into its
/// free part ([`Out::slot`], [`Out::commit`]): no copy and no `BufWriter`
/// bookkeeping per call. Holds at most [`OUT_CAP`] bytes between calls,
/// so [`SMALL`] bytes past them are always there; zeroed once, at creation.
struct Out<W: Write> {
    /// `None` only once handed back by [`Out::into_inner`].
    inner: Option<W>,
    buf: Box<[u8]>,
    fill: usize,
}

impl<W: Write> Out<W> {
    fn new(inner: W) -> Self {
        Out {
            inner: Some(inner),
            buf: vec![0; OUT_CAP + SMALL].into_boxed_slice(),
            fill: 0,
        }
    }

    /// Writes the gathered bytes to the inner writer (dropped on error:
    /// the trace stops there).
    fn drain(&mut self) -> io::Result<()> {
        let n = std::mem::take(&mut self.fill);
        match self.inner.as_mut() {
            Some(w) if n > 0 => w.write_all(&self.buf[..n]),
            _ => Ok(()),
        }
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        if self.fill + b.len() > OUT_CAP {
            self.drain()?;
            if b.len() > OUT_CAP {
                return match self.inner.as_mut() {
                    Some(w) => w.write_all(b),
                    None => Ok(()),
                };
            }
        }
        self.buf[self.fill..self.fill + b.len()].copy_from_slice(b);
        self.fill += b.len();
        Ok(())
    }

    /// Where the next small segment is built.
    #[inline(always)]
    fn slot(&mut self) -> &mut [u8; SMALL] {
        let at = self.fill;
        (&mut self.buf[at..at + SMALL])
            .try_into()
            .expect("fill <= OUT_CAP leaves SMALL bytes")
    }

    /// Keeps the `n` bytes built in [`Out::slot`].
    #[inline(always)]
    fn commit(&mut self, n: usize) -> io::Result<()> {
        self.fill += n;
        if self.fill > OUT_CAP {
            return self.drain();
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        match self.inner.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    fn into_inner(mut self) -> io::Result<W> {
        self.drain()?;
        Ok(self.inner.take().expect("handed back once"))
    }
}

impl<W: Write> Drop for Out<W> {
    /// Best effort, as `BufWriter`'s: a writer dropped without `finish`
    /// still writes what it gathered.
    fn drop(&mut self) {
        let _ = self.drain();
    }
}

impl<W: Write> Writer<W> {
    /// A writer in the machine's byte order.
    pub fn new(out: W) -> Self {
        Self::with_byte_order(out, ByteOrder::NATIVE)
    }

    /// A writer in a chosen byte order (header flag B0 records it).
    pub fn with_byte_order(out: W, order: ByteOrder) -> Self {
        Writer {
            out: Out::new(out),
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
        self.out.into_inner()
    }

    #[cold]
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

    /// One system call from a borrowed view, without building the model
    /// record: the bytes `write_record` writes for `call.to_syscall()`.
    pub fn write_syscall_view(&mut self, call: &SyscallView<'_>) -> io::Result<()> {
        if !self.header_written {
            self.ensure_header()?;
        }
        let slot = self.out.slot();
        let small = if self.order == ByteOrder::Big {
            encode_small::<true>(slot, call)
        } else {
            encode_small::<false>(slot, call)
        };
        if let Some(n) = small {
            return self.out.commit(n);
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let r = encode_syscall_view(&mut Enc::new(&mut buf, self.order), call)
            .and_then(|()| self.out.write_all(&buf));
        self.scratch = buf;
        r
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

    fn write_syscall(&mut self, call: &SyscallView<'_>) -> io::Result<()> {
        self.write_syscall_view(call)
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
    let head = SyscallView {
        number: s.number,
        result: s.result,
        errno: s.errno,
        thread: s.thread,
        time_ns: s.time_ns,
        duration_ns: s.duration_ns,
        args: &[],
    };
    encode_call(
        e,
        &head,
        s.args.len(),
        s.args.iter().map(SyscallArgView::of),
    )
}

/// One syscall segment from a borrowed view: the same bytes as
/// [`encode_syscall`] of `v.to_syscall()` (both go through [`encode_call`]).
pub(super) fn encode_syscall_view(e: &mut Enc<'_>, v: &SyscallView<'_>) -> io::Result<()> {
    encode_call(e, v, v.args.len(), v.args.iter().copied())
}

/// `v` in the segment's byte order (`big`: big-endian).
#[inline(always)]
fn ne16(big: bool, v: u16) -> [u8; 2] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

#[inline(always)]
fn ne32(big: bool, v: u32) -> [u8; 4] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

#[inline(always)]
fn ne64(big: bool, v: u64) -> [u8; 8] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

/// The flags byte of a syscall segment: which optional fields follow.
fn flag_bits(s: &SyscallView<'_>) -> u8 {
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
    f
}

/// Largest segment [`encode_small`] builds, plus 4 bytes of slack: an IE's
/// padding is written as one 4-byte store of zeros (see [`Cursor::ie`]).
const SMALL: usize = 512 + 4;

/// A cursor over a stack buffer, for [`encode_small`].
/// `BIG`: big-endian (a constant, so no field store tests the order).
struct Cursor<'b, const BIG: bool> {
    buf: &'b mut [u8; SMALL],
    at: usize,
}

impl<const BIG: bool> Cursor<'_, BIG> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    /// `N` bytes known at compile time: plain stores, no `memcpy` call.
    #[inline(always)]
    fn put_n<const N: usize>(&mut self, b: [u8; N]) {
        self.buf[self.at..self.at + N].copy_from_slice(&b);
        self.at += N;
    }
    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.put_n(ne32(BIG, v));
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.put_n(ne64(BIG, v));
    }
    /// Tag and length of an IE, as one 4-byte store.
    #[inline(always)]
    fn ie_head(&mut self, tag: u16, len: usize) {
        let (tag, len) = (u32::from(tag), len as u32);
        self.u32(if BIG {
            tag << 16 | len
        } else {
            len << 16 | tag
        });
    }
    /// Zeros up to a multiple of 4, written (the buffer holds the previous
    /// call's bytes) as one 4-byte store, of which only the padding counts:
    /// no `memset` call for 0 to 3 bytes.
    #[inline(always)]
    fn pad4(&mut self) {
        let pad = self.at.wrapping_neg() & 3;
        self.put_n([0u8; 4]);
        self.at -= 4 - pad;
    }
    /// One IE whose value is `N` bytes known at compile time (padding: none).
    #[inline(always)]
    fn ie_n<const N: usize>(&mut self, tag: u16, v: [u8; N]) {
        self.ie_head(tag, N);
        self.put_n(v);
        if !N.is_multiple_of(4) {
            self.pad4();
        }
    }
    /// One IE: tag, length, `head` then `rest`, zeros up to a multiple of 4.
    /// `rest` is copied only when not empty (a buffer whose bytes are not
    /// captured: no `memcpy` call for nothing).
    #[inline(always)]
    fn ie<const N: usize>(&mut self, tag: u16, head: [u8; N], rest: &[u8]) {
        self.ie_head(tag, N + rest.len());
        self.put_n(head);
        if !rest.is_empty() {
            self.put(rest);
            self.pad4();
        } else if !N.is_multiple_of(4) {
            self.pad4();
        }
    }
}

/// Bytes of a path, buffer prefix or unknown value [`encode_small`] takes.
const SMALL_VALUE: usize = 64;

/// The segment [`encode_syscall_view`] writes, built in `out` with plain
/// stores when every byte value of the call is at most [`SMALL_VALUE`]
/// bytes and there are at most 6 arguments (the calls the preload library
/// captures without `TRACER_SYSCALL_DATA`); its length, or `None` (then
/// the general encoder runs, and what this one wrote in `out` is
/// scratch). Same rules as [`encode_arg`]: with values this short, no cut
/// applies.
fn encode_small<const BIG: bool>(out: &mut [u8; SMALL], s: &SyscallView<'_>) -> Option<usize> {
    // Bound: 8 (segment) + 28 (fixed) + 6 * (4 + 8 + 64 + 3) = 510.
    if s.args.len() > 6 {
        return None;
    }
    let big = BIG;
    let mut c = Cursor::<BIG> { buf: out, at: 0 };
    // Segment tag, then its length (patched below).
    c.u32(segment::SYSCALL);
    c.u32(0);
    // Number, flags byte, reserved byte: one 4-byte store.
    let nb = ne16(big, s.number);
    c.put_n([nb[0], nb[1], flag_bits(s), 0]);
    c.u64(s.result as u64);
    if let Some(t) = s.thread {
        c.u32(t);
    }
    if let Some(t) = s.time_ns {
        c.u64(t);
    }
    if let Some(d) = s.duration_ns {
        c.u32(encode_duration(d));
    }
    if let Some(n) = s.errno {
        c.u32(n as u32);
    }
    for &a in s.args {
        match a {
            SyscallArgView::Int(v) => match i32::try_from(v) {
                Ok(small) => c.ie_n(arg::INT, ne32(big, small as u32)),
                Err(_) => c.ie_n(arg::INT, ne64(big, v as u64)),
            },
            SyscallArgView::Flags(v) => c.ie_n(arg::FLAGS, ne64(big, v)),
            SyscallArgView::Fd(fd) => c.ie_n(arg::FD, ne32(big, fd as u32)),
            SyscallArgView::Pointer(p) => c.ie_n(arg::POINTER, ne64(big, p)),
            SyscallArgView::Path(p) => {
                if p.len() > SMALL_VALUE {
                    return None;
                }
                c.ie(arg::PATH, [], p);
            }
            SyscallArgView::Unknown { tag, raw } => {
                if raw.len() > SMALL_VALUE {
                    return None;
                }
                c.ie(tag, [], raw);
            }
            SyscallArgView::Buffer { len, data } => {
                if data.len() > SMALL_VALUE {
                    return None;
                }
                let data = &data[..data.len().min(usize::try_from(len).unwrap_or(usize::MAX))];
                if data.len() as u64 == len {
                    c.ie(arg::DATA, [], data);
                } else if let Ok(len32) = u32::try_from(len) {
                    c.ie(arg::PARTIAL_DATA, ne32(big, len32), data);
                } else {
                    c.ie(arg::LONG_PARTIAL_DATA, ne64(big, len), data);
                }
            }
        }
    }
    let n = c.at;
    let body = (n - 8) as u32;
    c.at = 4;
    c.u32(body);
    Some(n)
}

/// The segment of the call whose fixed fields are `s` (its `args` ignored)
/// and whose `n` arguments are `args`.
fn encode_call<'a>(
    e: &mut Enc<'_>,
    s: &SyscallView<'_>,
    n: usize,
    args: impl Iterator<Item = SyscallArgView<'a>>,
) -> io::Result<()> {
    if n > MAX_ARGS {
        return Err(invalid(format!(
            "a syscall with {n} arguments (at most {MAX_ARGS})"
        )));
    }
    let f = flag_bits(s);
    // Fixed part and small arguments in one reservation.
    e.buf.reserve(8 + 36 + 12 * n);
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
    for a in args {
        encode_arg(e, a);
    }
    e.close_segment(body)
}

/// One argument IE. Values that cannot fit an IE are cut (documented): paths and
/// unknown values at 65,535 bytes, captured buffer prefixes so that the IE fits.
fn encode_arg(e: &mut Enc<'_>, a: SyscallArgView<'_>) {
    let big = e.big;
    let ne64 = |v: u64| ne64(big, v);
    let ne32 = |v: u32| ne32(big, v);
    match a {
        SyscallArgView::Int(v) => match i32::try_from(v) {
            Ok(small) => e.ie(arg::INT, &ne32(small as u32)),
            Err(_) => e.ie(arg::INT, &ne64(v as u64)),
        },
        SyscallArgView::Flags(v) => e.ie(arg::FLAGS, &ne64(v)),
        SyscallArgView::Fd(fd) => e.ie(arg::FD, &ne32(fd as u32)),
        SyscallArgView::Pointer(p) => e.ie(arg::POINTER, &ne64(p)),
        SyscallArgView::Path(p) => e.ie(arg::PATH, &p[..p.len().min(MAX_IE_VALUE)]),
        SyscallArgView::Unknown { tag, raw } => e.ie(tag, &raw[..raw.len().min(MAX_IE_VALUE)]),
        SyscallArgView::Buffer { len, data } => {
            // A prefix never exceeds the buffer's length.
            let data = &data[..data.len().min(usize::try_from(len).unwrap_or(usize::MAX))];
            if data.len() as u64 == len && data.len() <= MAX_IE_VALUE {
                e.ie(arg::DATA, data);
            } else if let Ok(len32) = u32::try_from(len) {
                let data = &data[..data.len().min(MAX_IE_VALUE - 4)];
                e.ie2(arg::PARTIAL_DATA, &ne32(len32), data);
            } else {
                let data = &data[..data.len().min(MAX_IE_VALUE - 8)];
                e.ie2(arg::LONG_PARTIAL_DATA, &ne64(len), data);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes of every size class (small, up to the buffer's capacity,
    /// larger than it) and segments built in place, mixed so that each
    /// kind crosses the capacity: the inner writer gets exactly their
    /// concatenation, in order, by `into_inner` and by drop.
    #[test]
    fn out_passes_every_byte_in_order() {
        let mut expected = Vec::new();
        let mut out = Out::new(Vec::new());
        let mut k = 0u32;
        let mut piece = |n: usize| -> Vec<u8> {
            k += 1;
            (0..n)
                .map(|i| (i as u32 ^ k.wrapping_mul(0x9e37_79b9)) as u8)
                .collect()
        };
        let mut j = 0usize;
        for round in 0..40 {
            let sizes = [
                1,
                3,
                100,
                OUT_CAP - 7,
                OUT_CAP,
                OUT_CAP + 1,
                2 * OUT_CAP + 5,
            ];
            let b = piece(sizes[round % sizes.len()]);
            out.write_all(&b).unwrap();
            expected.extend_from_slice(&b);
            for _ in 0..(round * 37 % 5000) {
                j += 1;
                let b = piece(1 + (j * 7919 % (SMALL - 4)));
                out.slot()[..b.len()].copy_from_slice(&b);
                out.commit(b.len()).unwrap();
                expected.extend_from_slice(&b);
            }
        }
        // Scratch left in the slot and not committed is not written.
        out.slot().fill(0xee);
        assert_eq!(out.into_inner().unwrap(), expected);

        let mut sink = Vec::new();
        {
            let mut out = Out::new(&mut sink);
            out.write_all(b"kept by drop").unwrap();
        }
        assert_eq!(sink, b"kept by drop");
    }
}
