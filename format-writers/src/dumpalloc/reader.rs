//! Decoder: dumpalloc records in, model records out.
//!
//! The reader walks the file one record at a time with constant memory apart
//! from the stack intern table: a record that sits whole in the input buffer is
//! decoded in place, a record that straddles the buffer is copied into one
//! reusable body buffer (at most [`MAX_RECORD_LEN`] bytes, and only as many
//! bytes as the file really holds), and a record of an unknown type is skipped
//! without being buffered. Frame lists are reduced to a canonical byte key
//! (address, then the symbol when there is one) that is looked up in the intern
//! table; only a stack never seen before costs an allocation.
//!
//! Errors carry the byte offset of the offending field. After the first error
//! the iterator ends.

use std::borrow::Cow;
use std::io::Read;

use super::*;
use crate::bytes::ByteSource;
use crate::error::{FormatError, Result};
use crate::model::{
    Alloc, Event, Frame, Free, Gc, LeakKind, Marker, Object, Process, Record, Stack, StackId,
    Symbol, Syscall, SyscallArg, Thread,
};

/// Streaming dumpalloc reader: an iterator of model records.
pub struct Reader<R> {
    src: ByteSource<R>,
    /// Body of the current record when it straddles the input buffer.
    spare: Vec<u8>,
    /// Canonical encoding of the frames of the allocation being read.
    key: Vec<u8>,
    /// Canonical frame list → stack id.
    stacks: FastMap<Box<[u8]>, StackId>,
    /// A record decoded together with the one just returned (the `Alloc`
    /// after the `Stack` it introduces).
    pending: Option<Record>,
    done: bool,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Self {
        Reader {
            src: ByteSource::new(inner),
            spare: Vec::new(),
            key: Vec::new(),
            stacks: FastMap::default(),
            pending: None,
            done: false,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.src.offset()
    }

    /// Distinct stacks met so far.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Reads one record header: its offset, type code and length. `None` at a
    /// clean end of file.
    #[inline]
    fn header(&mut self) -> Result<Option<(u64, [u8; 4], u32)>> {
        let start = self.src.offset();
        let buf = self.src.peek_buf()?;
        let mut h = [0u8; 8];
        if buf.len() >= 8 {
            h.copy_from_slice(&buf[..8]);
            self.src.consume(8);
        } else if buf.is_empty() {
            return Ok(None);
        } else {
            self.src
                .read_exact(&mut h, "a record header (4-byte type code, 4-byte length)")?;
        }
        let code = [h[0], h[1], h[2], h[3]];
        Ok(Some((
            start,
            code,
            u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        )))
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        loop {
            let Some((start, code, len)) = self.header()? else {
                return Ok(None);
            };
            let Some(cap) = known_record(&code) else {
                check_code(start, &code)?;
                self.src.skip(
                    u64::from(len),
                    &format!("the {} record at byte {start}", code_str(&code)),
                )?;
                continue;
            };
            check_cap(start, &code, len, cap)?;
            match code {
                ALOC => return self.alloc(start, len).map(Some),
                FRAM => {
                    return Err(FormatError::invalid(
                        start,
                        "a record other than FRAM (frames follow an ALOC record)",
                        "a FRAM record with no ALOC before it",
                    ))
                }
                _ => {}
            }
            let src = &mut self.src;
            let spare = &mut self.spare;
            macro_rules! body {
                ($f:expr) => {
                    with_body(src, spare, code, len, $f)
                };
            }
            let record = match code {
                PROC => body!(|c: &mut Cursor| {
                    let pid = c.u32("the process id")?;
                    let executable = c.string("the process name")?;
                    let start_time_ns = c.opt_time("the start time (extension)")?.unwrap_or(0);
                    let mut command_line = Vec::new();
                    if let Some(argc) = c.opt_u32("the argument count (extension)")? {
                        // The count is untrusted: reserve a little, grow as
                        // arguments really arrive.
                        command_line.reserve((argc as usize).min(64));
                        for _ in 0..argc {
                            command_line.push(c.string("a command-line argument")?);
                        }
                    }
                    Ok(Record::Process(Process {
                        pid,
                        executable,
                        command_line,
                        start_time_ns,
                    }))
                })?,
                OBJE => body!(|c: &mut Cursor| {
                    let path = c.string("the object name")?;
                    let load_address = c.opt_u64("the load address (extension)")?.unwrap_or(0);
                    let size = c.opt_u64("the mapping size (extension)")?.unwrap_or(0);
                    Ok(Record::Object(Object {
                        path,
                        load_address,
                        size,
                    }))
                })?,
                DALC => body!(|c: &mut Cursor| {
                    let address = c.u64("the deallocated address")?;
                    let time_ns = c
                        .opt_time("the deallocation time (extension)")?
                        .unwrap_or(0);
                    let thread = c.opt_u32("the thread id (extension)")?.unwrap_or(0);
                    Ok(Record::Event(Event::Free(Free {
                        time_ns,
                        thread,
                        address,
                    })))
                })?,
                THRD => body!(|c: &mut Cursor| {
                    let tid = c.u32("the thread id")?;
                    let name = c.string("the thread name")?;
                    Ok(Record::Thread(Thread { tid, name }))
                })?,
                MARK => body!(|c: &mut Cursor| {
                    let time_ns = c.time("the marker time")?;
                    let thread = c.u32("the thread id")?;
                    let name = c.string("the marker name")?;
                    Ok(Record::Event(Event::Marker(Marker {
                        time_ns,
                        thread,
                        name,
                    })))
                })?,
                GCOL => body!(|c: &mut Cursor| {
                    let time_ns = c.time("the collection time")?;
                    let objects = c.u64("the collected object count")?;
                    let bytes = c.u64("the collected byte count")?;
                    Ok(Record::Event(Event::Gc(Gc {
                        time_ns,
                        objects,
                        bytes,
                    })))
                })?,
                ASYM => body!(|c: &mut Cursor| {
                    let address = c.u64("the symbolized address")?;
                    let symbol = c.symbol()?;
                    Ok(Record::AddressSymbol { address, symbol })
                })?,
                INFO => body!(|c: &mut Cursor| {
                    let n = c.u32("the number of key/value pairs")?;
                    // The count is untrusted: reserve a little, grow as
                    // pairs really arrive.
                    let mut pairs = Vec::with_capacity((n as usize).min(64));
                    for _ in 0..n {
                        let k = c.string("an information key")?;
                        let v = c.string("an information value")?;
                        pairs.push((k, v));
                    }
                    Ok(Record::Info(pairs))
                })?,
                SYSC => {
                    body!(|c: &mut Cursor| c.syscall().map(|s| Record::Event(Event::Syscall(s))))?
                }
                LSCN => body!(|c: &mut Cursor| {
                    let time_ns = c.time("the time of the leak scan")?;
                    Ok(Record::LeakScan { time_ns })
                })?,
                BCLS => body!(|c: &mut Cursor| {
                    let address = c.u64("the classified block's address")?;
                    let at = c.at();
                    let code = c.array::<1>("the block's leak kind")?[0];
                    let kind = LeakKind::from_code(code.into()).ok_or_else(|| {
                        FormatError::invalid(
                            at,
                            "a leak kind 0 (definite), 1 (indirect), 2 (possible) or 3 (reachable)",
                            code.to_string(),
                        )
                    })?;
                    Ok(Record::BlockClass { address, kind })
                })?,
                _ => unreachable!("known_record lists exactly the codes matched above"),
            };
            return Ok(Some(record));
        }
    }

    /// Reads an `ALOC` record and the `FRAM` records after it, up to `TERM`.
    fn alloc(&mut self, start: u64, len: u32) -> Result<Record> {
        let mut alloc = with_body(
            &mut self.src,
            &mut self.spare,
            ALOC,
            len,
            |c: &mut Cursor| {
                let address = c.u64("the allocated address")?;
                let time_ns = c.time("the allocation time")?;
                let size = c.opt_u64("the block size (extension)")?.unwrap_or(0);
                let thread = c.opt_u32("the thread id (extension)")?.unwrap_or(0);
                Ok(Alloc {
                    time_ns,
                    thread,
                    address,
                    size,
                    stack: 0,
                })
            },
        )?;

        self.key.clear();
        let mut frames = 0usize;
        // Offset in `key` of the symbol flag of the last frame when that frame
        // is an `NTVE` still waiting for a possible `NSYM`.
        let mut open_native: Option<usize> = None;
        loop {
            // Fast path: plain NTVE frames and the closing TERM decoded straight
            // from the input buffer. Anything else (another subtype, a record
            // that is not whole in the buffer, a bad header) stops it, and the
            // general path below takes that one record.
            let buf = self.src.peek_buf()?;
            let mut used = 0;
            let mut ended = false;
            while let Some(rec) = buf.get(used..used + 12) {
                let len = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]) as usize;
                if rec[..4] != FRAM
                    || !(4..=MAX_RECORD_LEN as usize).contains(&len)
                    || buf.len() - used < 8 + len
                {
                    break;
                }
                match [rec[8], rec[9], rec[10], rec[11]] {
                    NTVE if len >= 12 => {
                        self.key.extend_from_slice(&buf[used + 12..used + 20]);
                        self.key.push(0);
                        open_native = Some(self.key.len() - 1);
                        frames += 1;
                    }
                    TERM => ended = true,
                    _ => break,
                }
                used += 8 + len;
                if ended {
                    break;
                }
            }
            self.src.consume(used);
            if ended {
                break;
            }

            let Some((fstart, code, flen)) = self.header()? else {
                return Err(FormatError::truncated(
                    self.src.offset(),
                    format!("a FRAM record (the stack of the ALOC at byte {start} ends with a TERM frame)"),
                ));
            };
            if code != FRAM {
                check_code(fstart, &code)?;
                if known_record(&code).is_some() {
                    return Err(FormatError::invalid(
                        fstart,
                        format!("a FRAM record (the stack of the ALOC at byte {start} ends with a TERM frame)"),
                        format!("a {} record", code_str(&code)),
                    ));
                }
                self.src.skip(
                    u64::from(flen),
                    &format!("the {} record at byte {fstart}", code_str(&code)),
                )?;
                continue;
            }
            check_cap(fstart, &code, flen, MAX_RECORD_LEN)?;
            let key = &mut self.key;
            let frames_ref = &mut frames;
            let open = &mut open_native;
            let ended = with_body(
                &mut self.src,
                &mut self.spare,
                FRAM,
                flen,
                |c: &mut Cursor| {
                    let sub_at = c.at();
                    let sub = c.code("the frame record type")?;
                    match sub {
                        NTVE => {
                            let address = c.u64("the frame address")?;
                            key.extend_from_slice(&address.to_le_bytes());
                            key.push(0);
                            *open = Some(key.len() - 1);
                            *frames_ref += 1;
                        }
                        PCAL => {
                            key.extend_from_slice(&0u64.to_le_bytes());
                            key.push(1);
                            c.symbol_key(key)?;
                            *open = None;
                            *frames_ref += 1;
                        }
                        NSYM => {
                            let Some(flag) = open.take() else {
                                return Err(FormatError::invalid(
                                    sub_at,
                                    "an NSYM frame right after the NTVE frame it names",
                                    "an NSYM frame with no NTVE before it",
                                ));
                            };
                            key[flag] = 1;
                            c.symbol_key(key)?;
                        }
                        TERM => return Ok(true),
                        _ => {} // Unknown subtype: the rest of the record is skipped.
                    }
                    Ok(false)
                },
            )?;
            if ended {
                break;
            }
        }

        let key = self.key.as_slice();
        if let Some(&id) = self.stacks.get(key) {
            alloc.stack = id;
            return Ok(Record::Event(Event::Alloc(alloc)));
        }
        let id = self.stacks.len() as StackId;
        let frames = decode_key(key, frames);
        self.stacks.insert(key.into(), id);
        alloc.stack = id;
        self.pending = Some(Record::Event(Event::Alloc(alloc)));
        Ok(Record::Stack(Stack { id, frames }))
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if let Some(r) = self.pending.take() {
            return Some(Ok(r));
        }
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// An unknown record type is skipped only when its code looks like one: four
/// printable ASCII characters (the document's FOURCC). Anything else is
/// reported as corruption where it is, rather than skipped by a garbage length.
fn check_code(start: u64, code: &[u8; 4]) -> Result<()> {
    if code.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        return Ok(());
    }
    Err(FormatError::invalid(
        start,
        "a record type code of four printable ASCII characters",
        format!("{code:02x?}"),
    ))
}

fn check_cap(start: u64, code: &[u8; 4], len: u32, cap: u32) -> Result<()> {
    if len > cap {
        return Err(FormatError::invalid(
            start + 4,
            format!("a {} record length of at most {cap}", code_str(code)),
            len.to_string(),
        ));
    }
    Ok(())
}

/// Runs `f` over the `len`-byte body of the record whose header was just read,
/// in place when the input buffer holds it whole, else from `spare`. Bytes the
/// decoder leaves unread are trailing extensions it does not know: skipped.
#[inline]
fn with_body<R: Read, T>(
    src: &mut ByteSource<R>,
    spare: &mut Vec<u8>,
    code: [u8; 4],
    len: u32,
    f: impl FnOnce(&mut Cursor) -> Result<T>,
) -> Result<T> {
    let base = src.offset();
    let len = len as usize;
    let buf = src.peek_buf()?;
    if buf.len() >= len {
        let out = f(&mut Cursor {
            data: &buf[..len],
            pos: 0,
            base,
            code,
        })?;
        src.consume(len);
        return Ok(out);
    }
    spare.clear();
    while spare.len() < len {
        let buf = src.peek_buf()?;
        if buf.is_empty() {
            return Err(FormatError::truncated(
                src.offset(),
                format!(
                    "the rest of the {} record ({len} bytes from byte {base})",
                    code_str(&code)
                ),
            ));
        }
        let n = buf.len().min(len - spare.len());
        spare.extend_from_slice(&buf[..n]);
        src.consume(n);
    }
    let out = f(&mut Cursor {
        data: spare,
        pos: 0,
        base,
        code,
    });
    if spare.capacity() > 1 << 20 {
        *spare = Vec::new();
    }
    out
}

/// Decoding position inside one record body. Reading past the body is an error
/// about the record's length, reported at the field that did not fit.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    code: [u8; 4],
}

impl<'a> Cursor<'a> {
    #[inline]
    fn at(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline]
    fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    #[cold]
    fn short(&self, what: &str, need: usize) -> FormatError {
        FormatError::invalid(
            self.at(),
            format!(
                "{what} ({need} bytes) within the {} record length",
                code_str(&self.code)
            ),
            format!("{} bytes left in the record", self.left()),
        )
    }

    #[inline]
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.left() < n {
            return Err(self.short(what, n));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    #[inline]
    fn code(&mut self, what: &str) -> Result<[u8; 4]> {
        self.array(what)
    }

    #[inline]
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    #[inline]
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A timestamp: `u64` seconds, `u32` nanoseconds, as nanoseconds since the
    /// epoch.
    #[inline]
    fn time(&mut self, what: &str) -> Result<u64> {
        let at = self.at();
        let secs = self.u64(what)?;
        let ns_at = self.at();
        let ns = self.u32(what)?;
        if u64::from(ns) >= NS_PER_SEC {
            return Err(FormatError::invalid(
                ns_at,
                format!("the nanoseconds of {what} (below 1000000000)"),
                ns.to_string(),
            ));
        }
        secs.checked_mul(NS_PER_SEC)
            .and_then(|t| t.checked_add(u64::from(ns)))
            .ok_or_else(|| {
                FormatError::invalid(
                    at,
                    format!("{what} within 2^64 nanoseconds of the epoch (year 2554)"),
                    format!("{secs} seconds"),
                )
            })
    }

    /// A trailing extension field: absent when the record ends before it.
    #[inline]
    fn opt_u32(&mut self, what: &str) -> Result<Option<u32>> {
        if self.left() == 0 {
            return Ok(None);
        }
        self.u32(what).map(Some)
    }

    #[inline]
    fn opt_u64(&mut self, what: &str) -> Result<Option<u64>> {
        if self.left() == 0 {
            return Ok(None);
        }
        self.u64(what).map(Some)
    }

    #[inline]
    fn opt_time(&mut self, what: &str) -> Result<Option<u64>> {
        if self.left() == 0 {
            return Ok(None);
        }
        self.time(what).map(Some)
    }

    /// The bytes of a string (`u32` length, then the bytes).
    #[inline]
    fn str_bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let len = self.u32(what)? as usize;
        self.take(len, what)
    }

    /// A string; bytes that are not UTF-8 become U+FFFD.
    fn string(&mut self, what: &str) -> Result<String> {
        Ok(String::from_utf8_lossy(self.str_bytes(what)?).into_owned())
    }

    /// The body of a `SYSC` record (see the writer for the layout).
    fn syscall(&mut self) -> Result<Syscall> {
        let number = u16::from_le_bytes(self.array("the syscall number")?);
        let flags_at = self.at();
        let [flags, _] = self.array::<2>("the syscall presence flags")?;
        if flags & !0x0f != 0 {
            return Err(FormatError::invalid(
                flags_at,
                "syscall presence flags among 0x0f",
                format!("{flags:#04x}"),
            ));
        }
        let result = i64::from_le_bytes(self.array("the syscall result")?);
        let errno = if flags & sysc_flag::ERRNO != 0 {
            Some(i32::from_le_bytes(self.array("the errno")?))
        } else {
            None
        };
        let thread = if flags & sysc_flag::THREAD != 0 {
            Some(self.u32("the thread id")?)
        } else {
            None
        };
        let time_ns = if flags & sysc_flag::TIME != 0 {
            Some(self.time("the syscall time")?)
        } else {
            None
        };
        let duration_ns = if flags & sysc_flag::DURATION != 0 {
            Some(self.u64("the syscall duration")?)
        } else {
            None
        };
        let n = self.u32("the argument count")?;
        // The count is untrusted: reserve a little, grow as arguments arrive.
        let mut args = Vec::with_capacity((n as usize).min(16));
        for _ in 0..n {
            let kind_at = self.at();
            let [kind] = self.array::<1>("an argument kind")?;
            let len = self.u32("an argument length")? as usize;
            let payload_at = self.at();
            let mut p = Cursor {
                data: self.take(len, "an argument payload")?,
                pos: 0,
                base: payload_at,
                code: self.code,
            };
            args.push(match kind {
                arg_kind::INT => {
                    SyscallArg::Int(i64::from_le_bytes(p.array("an integer argument")?))
                }
                arg_kind::FLAGS => SyscallArg::Flags(p.u64("a flags argument")?),
                arg_kind::FD => {
                    SyscallArg::Fd(i32::from_le_bytes(p.array("a descriptor argument")?))
                }
                arg_kind::PATH => SyscallArg::Path(p.data.to_vec()),
                arg_kind::BUFFER => {
                    let len = p.u64("a buffer length")?;
                    SyscallArg::Buffer {
                        len,
                        data: p.data[p.pos..].to_vec(),
                    }
                }
                arg_kind::POINTER => SyscallArg::Pointer(p.u64("a pointer argument")?),
                arg_kind::UNKNOWN => {
                    let tag = u16::from_le_bytes(p.array("an unknown argument's tag")?);
                    SyscallArg::Unknown {
                        tag,
                        raw: p.data[p.pos..].to_vec(),
                    }
                }
                other => {
                    return Err(FormatError::invalid(
                        kind_at,
                        "an argument kind from 1 to 7",
                        other.to_string(),
                    ))
                }
            });
        }
        Ok(Syscall {
            number,
            result,
            errno,
            thread,
            time_ns,
            duration_ns,
            args,
        })
    }

    /// A `PCAL`-style symbol: function, source file, line.
    fn symbol(&mut self) -> Result<Symbol> {
        let function = self.string("the function name")?;
        let file = self.string("the source file name")?;
        let line = self.u32("the line number")?;
        Ok(Symbol {
            function,
            file,
            line,
        })
    }

    /// Appends a `PCAL`-style symbol to a stack key: both strings (as valid
    /// UTF-8, each with its `u32` length) and the line.
    fn symbol_key(&mut self, key: &mut Vec<u8>) -> Result<()> {
        for what in ["the function name", "the source file name"] {
            let s = String::from_utf8_lossy(self.str_bytes(what)?);
            key.extend_from_slice(&(s.len() as u32).to_le_bytes());
            key.extend_from_slice(s.as_bytes());
        }
        let line = self.u32("the line number")?;
        key.extend_from_slice(&line.to_le_bytes());
        Ok(())
    }
}

/// Rebuilds the frames of a stack key made by [`Reader::alloc`]: per frame the
/// address (`u64`), a symbol flag byte, and when it is 1 the function and file
/// (`u32` length + UTF-8) and the line (`u32`).
fn decode_key(key: &[u8], count: usize) -> Vec<Frame> {
    fn take<'k>(key: &mut &'k [u8], n: usize) -> &'k [u8] {
        let (head, tail) = key.split_at(n);
        *key = tail;
        head
    }
    fn u32_of(key: &mut &[u8]) -> u32 {
        let b = take(key, 4);
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn str_of(key: &mut &[u8]) -> String {
        let n = u32_of(key) as usize;
        match String::from_utf8_lossy(take(key, n)) {
            Cow::Borrowed(s) => s.to_owned(),
            Cow::Owned(s) => s,
        }
    }
    let mut rest = key;
    let mut frames = Vec::with_capacity(count);
    while !rest.is_empty() {
        let mut a = [0u8; 8];
        a.copy_from_slice(take(&mut rest, 8));
        let address = u64::from_le_bytes(a);
        let symbol = if take(&mut rest, 1)[0] == 1 {
            let function = str_of(&mut rest);
            let file = str_of(&mut rest);
            let line = u32_of(&mut rest);
            Some(Symbol {
                function,
                file,
                line,
            })
        } else {
            None
        };
        frames.push(Frame { address, symbol });
    }
    frames
}
