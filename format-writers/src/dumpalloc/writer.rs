//! Encoder: model records in, dumpalloc records out.
//!
//! Records are encoded into an in-memory buffer that is handed to the output
//! whenever it passes 64 KiB, on [`TraceWriter::flush`] and on finish, so a
//! process killed between flushes loses at most the unflushed tail and leaves a
//! file whose complete records all read back. Each record's length is patched
//! in after its body is encoded, and a record that would exceed the reader's
//! caps is removed from the buffer and refused.

use std::io::{self, Write};

use super::*;
use crate::model::{Event, Frame, Process, Record, StackId, Syscall, SyscallArg};
use crate::TraceWriter;

const FLUSH_AT: usize = 64 << 10;

/// Streaming dumpalloc writer.
///
/// The first record written is always a `PROC` (the format's magic bytes): if
/// the first record given is not a [`Record::Process`], a placeholder `PROC`
/// with pid 0 and an empty name is written first.
pub struct Writer<W: Write> {
    out: Option<W>,
    buf: Vec<u8>,
    /// Encoded `FRAM` records (including the closing `TERM`) of every stack.
    stacks: FastMap<StackId, Box<[u8]>>,
    started: bool,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer {
            out: Some(out),
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            stacks: FastMap::default(),
            started: false,
        }
    }

    /// Writes the buffered records and returns the output (without `finish`'s
    /// placeholder `PROC` when nothing was written).
    pub fn into_inner(mut self) -> io::Result<W> {
        self.drain()?;
        Ok(self
            .out
            .take()
            .expect("the output is present until into_inner or drop"))
    }

    /// Encodes one record into the buffer.
    pub fn encode(&mut self, record: &Record) -> io::Result<()> {
        if !self.started {
            self.started = true;
            if !matches!(record, Record::Process(_)) {
                encode_process(&mut self.buf, &Process::default())?;
            }
        }
        let buf = &mut self.buf;
        match record {
            Record::Process(p) => encode_process(buf, p)?,
            Record::Object(o) => {
                let at = begin(buf, OBJE);
                put_str(buf, &o.path);
                put_u64(buf, o.load_address);
                put_u64(buf, o.size);
                end(buf, at, MAX_RECORD_LEN)?;
            }
            Record::Stack(s) => {
                let mut frames = Vec::with_capacity(s.frames.len() * 20 + 12);
                encode_frames(&mut frames, &s.frames)?;
                self.stacks.insert(s.id, frames.into_boxed_slice());
            }
            Record::Thread(t) => {
                let at = begin(buf, THRD);
                put_u32(buf, t.tid);
                put_str(buf, &t.name);
                end(buf, at, MAX_RECORD_LEN)?;
            }
            Record::Event(Event::Alloc(a)) => {
                let frames = self.stacks.get(&a.stack).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "dumpalloc: an allocation names stack {} but no Stack record defined it",
                            a.stack
                        ),
                    )
                })?;
                buf.extend_from_slice(&ALOC);
                put_u32(buf, 8 + 12 + 8 + 4);
                put_u64(buf, a.address);
                put_time(buf, a.time_ns);
                put_u64(buf, a.size);
                put_u32(buf, a.thread);
                buf.extend_from_slice(frames);
            }
            Record::Event(Event::Free(f)) => {
                buf.extend_from_slice(&DALC);
                put_u32(buf, 8 + 12 + 4);
                put_u64(buf, f.address);
                put_time(buf, f.time_ns);
                put_u32(buf, f.thread);
            }
            Record::Event(Event::Gc(g)) => {
                buf.extend_from_slice(&GCOL);
                put_u32(buf, 12 + 8 + 8);
                put_time(buf, g.time_ns);
                put_u64(buf, g.objects);
                put_u64(buf, g.bytes);
            }
            Record::Event(Event::Marker(m)) => {
                let at = begin(buf, MARK);
                put_time(buf, m.time_ns);
                put_u32(buf, m.thread);
                put_str(buf, &m.name);
                end(buf, at, MAX_RECORD_LEN)?;
            }
            Record::Event(Event::Syscall(s)) => encode_syscall(buf, s)?,
            Record::Info(pairs) => {
                let at = begin(buf, INFO);
                put_u32(buf, u32::try_from(pairs.len()).unwrap_or(u32::MAX));
                for (k, v) in pairs {
                    put_str(buf, k);
                    put_str(buf, v);
                    if buf.len() - at > MAX_RECORD_LEN as usize + 8 {
                        break; // `end` refuses it; stop copying.
                    }
                }
                end(buf, at, MAX_RECORD_LEN)?;
            }
            Record::AddressSymbol { address, symbol } => {
                let at = begin(buf, ASYM);
                put_u64(buf, *address);
                put_str(buf, &symbol.function);
                put_str(buf, &symbol.file);
                put_u32(buf, symbol.line);
                end(buf, at, MAX_RECORD_LEN)?;
            }
            Record::LeakScan { time_ns } => {
                buf.extend_from_slice(&LSCN);
                put_u32(buf, 12);
                put_time(buf, *time_ns);
            }
            Record::BlockClass { address, kind } => {
                buf.extend_from_slice(&BCLS);
                put_u32(buf, 8 + 1);
                put_u64(buf, *address);
                buf.push(kind.code());
            }
        }
        if self.buf.len() >= FLUSH_AT {
            self.drain()?;
        }
        Ok(())
    }

    /// Hands the buffered bytes to the output (without flushing the output).
    fn drain(&mut self) -> io::Result<()> {
        if let Some(out) = self.out.as_mut() {
            if !self.buf.is_empty() {
                let r = out.write_all(&self.buf);
                self.buf.clear();
                r?;
            }
        }
        Ok(())
    }
}

impl<W: Write + Send> TraceWriter for Writer<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        self.encode(record)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        match self.out.as_mut() {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if !self.started {
            self.started = true;
            encode_process(&mut self.buf, &Process::default())?;
        }
        TraceWriter::flush(&mut *self)
    }
}

impl<W: Write> Drop for Writer<W> {
    /// A writer dropped without `finish` still hands over the complete records
    /// it buffered (errors cannot be reported here and are ignored).
    fn drop(&mut self) {
        let _ = self.drain();
    }
}

fn encode_process(buf: &mut Vec<u8>, p: &Process) -> io::Result<()> {
    let at = begin(buf, PROC);
    put_u32(buf, p.pid);
    put_str(buf, &p.executable);
    put_time(buf, p.start_time_ns);
    put_u32(buf, u32::try_from(p.command_line.len()).unwrap_or(u32::MAX));
    for arg in &p.command_line {
        put_str(buf, arg);
        if buf.len() - at > MAX_RECORD_LEN as usize + 8 {
            break; // `end` refuses it; stop copying.
        }
    }
    end(buf, at, MAX_RECORD_LEN)
}

/// `SYSC`: number `u16`, presence flags `u8`, 0 `u8`, result `i64`, then the
/// optional errno `i32`, thread `u32`, timestamp, duration `u64` (ns) that the
/// flags announce, then an argument count `u32` and per argument a kind byte, a
/// `u32` payload length and the payload.
fn encode_syscall(buf: &mut Vec<u8>, s: &Syscall) -> io::Result<()> {
    let at = begin(buf, SYSC);
    let flags = [
        (s.errno.is_some(), sysc_flag::ERRNO),
        (s.thread.is_some(), sysc_flag::THREAD),
        (s.time_ns.is_some(), sysc_flag::TIME),
        (s.duration_ns.is_some(), sysc_flag::DURATION),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0u8, |acc, (_, bit)| acc | bit);
    buf.extend_from_slice(&s.number.to_le_bytes());
    buf.extend_from_slice(&[flags, 0]);
    buf.extend_from_slice(&s.result.to_le_bytes());
    if let Some(e) = s.errno {
        buf.extend_from_slice(&e.to_le_bytes());
    }
    if let Some(t) = s.thread {
        put_u32(buf, t);
    }
    if let Some(t) = s.time_ns {
        put_time(buf, t);
    }
    if let Some(d) = s.duration_ns {
        put_u64(buf, d);
    }
    put_u32(buf, u32::try_from(s.args.len()).unwrap_or(u32::MAX));
    for arg in &s.args {
        let (kind, fixed, bytes): (u8, [u8; 8], &[u8]) = match arg {
            SyscallArg::Int(v) => (arg_kind::INT, v.to_le_bytes(), &[]),
            SyscallArg::Flags(v) => (arg_kind::FLAGS, v.to_le_bytes(), &[]),
            SyscallArg::Fd(v) => {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&v.to_le_bytes());
                (arg_kind::FD, b, &[])
            }
            SyscallArg::Path(p) => (arg_kind::PATH, [0; 8], p),
            SyscallArg::Buffer { len, data } => (arg_kind::BUFFER, len.to_le_bytes(), data),
            SyscallArg::Pointer(v) => (arg_kind::POINTER, v.to_le_bytes(), &[]),
            SyscallArg::Unknown { tag, raw } => {
                let mut b = [0u8; 8];
                b[..2].copy_from_slice(&tag.to_le_bytes());
                (arg_kind::UNKNOWN, b, raw)
            }
        };
        let fixed_len = match kind {
            arg_kind::PATH => 0,
            arg_kind::FD => 4,
            arg_kind::UNKNOWN => 2,
            _ => 8,
        };
        buf.push(kind);
        put_u32(
            buf,
            u32::try_from(fixed_len + bytes.len()).unwrap_or(u32::MAX),
        );
        buf.extend_from_slice(&fixed[..fixed_len]);
        buf.extend_from_slice(bytes);
        if buf.len() - at > MAX_RECORD_LEN as usize + 8 {
            break; // `end` refuses it; stop copying.
        }
    }
    end(buf, at, MAX_RECORD_LEN)
}

/// Appends the `FRAM` records of one stack, `TERM` included. A frame with an
/// address and no symbol is `NTVE`; a symbol without an address is `PCAL`; a
/// frame with both is `NTVE` then `NSYM`.
fn encode_frames(buf: &mut Vec<u8>, frames: &[Frame]) -> io::Result<()> {
    for f in frames {
        match &f.symbol {
            Some(sym) if f.address == 0 => {
                let at = begin(buf, FRAM);
                buf.extend_from_slice(&PCAL);
                put_str(buf, &sym.function);
                put_str(buf, &sym.file);
                put_u32(buf, sym.line);
                end(buf, at, MAX_RECORD_LEN)?;
            }
            symbol => {
                buf.extend_from_slice(&FRAM);
                put_u32(buf, 4 + 8);
                buf.extend_from_slice(&NTVE);
                put_u64(buf, f.address);
                if let Some(sym) = symbol {
                    let at = begin(buf, FRAM);
                    buf.extend_from_slice(&NSYM);
                    put_str(buf, &sym.function);
                    put_str(buf, &sym.file);
                    put_u32(buf, sym.line);
                    end(buf, at, MAX_RECORD_LEN)?;
                }
            }
        }
    }
    buf.extend_from_slice(&FRAM);
    put_u32(buf, 4);
    buf.extend_from_slice(&TERM);
    Ok(())
}

#[inline]
fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// The document's timestamp: `u64` whole seconds, `u32` nanoseconds.
#[inline]
fn put_time(buf: &mut Vec<u8>, ns: u64) {
    put_u64(buf, ns / NS_PER_SEC);
    put_u32(buf, (ns % NS_PER_SEC) as u32);
}

/// The document's string: `u32` byte count, UTF-8 bytes. A string of 4 GiB or
/// more makes its record exceed the cap, which `end` refuses.
#[inline]
fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_u32(buf, u32::try_from(s.len()).unwrap_or(u32::MAX));
    buf.extend_from_slice(s.as_bytes());
}

/// Starts a record whose length is patched by [`end`]; returns its offset.
#[inline]
fn begin(buf: &mut Vec<u8>, code: [u8; 4]) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&code);
    buf.extend_from_slice(&[0; 4]);
    at
}

/// Patches the length of the record started at `at`, or removes the record
/// and fails when it is longer than `cap`.
fn end(buf: &mut Vec<u8>, at: usize, cap: u32) -> io::Result<()> {
    let len = buf.len() - at - 8;
    if len > cap as usize {
        let code = code_str(&[buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        buf.truncate(at);
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("dumpalloc: a {code} record of {len} bytes exceeds the {cap}-byte limit"),
        ));
    }
    buf[at + 4..at + 8].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}
