//! The spool: where a file-backed mlyze writer keeps a run until `finish`.
//!
//! ```text
//! offset 0   "MTRS"            magic (mlyze spool)
//!        4   u32 LE = 1        spool version
//!        8   8 zero bytes      reserved
//!        16  chunks until end of file:
//!            u8 kind           1 = metadata log entries, 2 = encoded events
//!            u32 LE length     payload bytes
//!            payload
//! ```
//!
//! An events chunk holds finished mlyze event bytes, exactly as they will appear
//! in the final file. A log chunk holds entries, each a tag byte followed by
//! varints (`v`) and strings (`s` = varint length + UTF-8 bytes):
//!
//! | tag | entry | fields |
//! | --- | --- | --- |
//! | 1 | start | header start time µs `v` |
//! | 2 | process | pid `v`, executable `s`, argc `v`, argv `s`…, start ns `v` |
//! | 3 | object | path `s`, load address `v`, size `v` |
//! | 4 | thread | tid `v`, name `s` |
//! | 5 | function | id `v`, name `s` |
//! | 6 | file | id `v`, name `s` |
//! | 7 | unresolved | id `v` of the `"??"` function unresolved frames use |
//! | 8 | stack | id `v`, frame count `v`, per frame: address, function id, file id, line `v` |
//! | 9 | address symbol | address, function id, file id, line `v` |
//! | 10 | info | pair count `v`, key `s`, value `s`… |
//! | 11 | thread slot | event sequence number, slot, tid `v` |
//! | 12 | marker thread | tid `v` (one per MARKER, in order) |
//! | 13 | dropped syscalls | running total `v` |
//! | 14 | leak scan | events written before it `v`, time ns `v` |
//! | 15 | block class | address `v`, kind `v` (0 definite, 1 indirect, 2 possible, 3 reachable), for the last leak scan |
//! | 16 | stack sharing frames | id `v`, frame count `v`, shared `v`, then per frame not shared: address, function id, file id, line `v` |
//!
//! A stack that shares its outermost frames with the stack logged just
//! before it (tag 16) gives their number and writes out only the others
//! (innermost first, as tag 8 does; the shared ones follow them): new
//! stacks come in the order the program makes them, and one often differs
//! from the last in its innermost calls alone (cc1plus: 58% of its 4.2M
//! frames are shared so). The log is then less than half as long, and
//! `finish` reads it three times. Reading needs the previous stack alone.
//!
//! Function and file ids are logged in the order they are assigned, so replaying
//! the log rebuilds the writer's tables exactly, and the ids baked into the event
//! bytes (stack ids, marker names, thread slots) keep their meaning. The writer
//! relies on it: while spooling it keeps no tables, and its `finish` replays the
//! log chunks (skipping the event chunks) as recovery does. A flush
//! writes the log chunk before the events chunk that may depend on it. A process
//! killed in the middle of a write leaves a torn last chunk, which recovery drops.
//! The writer flushes everything pending before it logs a leak scan, so the
//! scan's entries start a log chunk that follows every event written before it.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::header;
use super::writer::{copy_ranges, FrameRef, LeakScan, Tables};
use crate::bytes::{put_varint, ByteSource};
use crate::error::{FormatError, Result};
use crate::model::{Frame, LeakKind, Object, Process, Record, Stack, Symbol, Thread};
use crate::output;

pub const SPOOL_MAGIC: &[u8; 4] = b"MTRS";
pub const SPOOL_VERSION: u32 = 1;
pub(super) const SPOOL_HEADER_LEN: usize = 16;
pub(super) const CHUNK_HEAD: usize = 5;
pub(super) const CHUNK_RECORDS: u8 = 1;
pub(super) const CHUNK_EVENTS: u8 = 2;

/// Encoders of log entries.
pub(super) mod entry {
    use super::*;

    pub const START: u8 = 1;
    pub const PROCESS: u8 = 2;
    pub const OBJECT: u8 = 3;
    pub const THREAD: u8 = 4;
    pub const FUNCTION: u8 = 5;
    pub const FILE: u8 = 6;
    pub const UNRESOLVED: u8 = 7;
    pub const STACK: u8 = 8;
    pub const ADDRESS_SYMBOL: u8 = 9;
    pub const INFO: u8 = 10;
    pub const THREAD_SLOT: u8 = 11;
    pub const MARKER_THREAD: u8 = 12;
    pub const DROPPED: u8 = 13;
    pub const LEAK_SCAN: u8 = 14;
    pub const BLOCK_CLASS: u8 = 15;
    pub const STACK_SHARED: u8 = 16;

    fn put_str(log: &mut Vec<u8>, s: &str) {
        put_varint(log, s.len() as u64);
        log.extend_from_slice(s.as_bytes());
    }

    pub fn put_start(log: &mut Vec<u8>, us: u64) {
        log.push(START);
        put_varint(log, us);
    }

    pub fn put_process(log: &mut Vec<u8>, p: &Process) {
        log.push(PROCESS);
        put_varint(log, p.pid.into());
        put_str(log, &p.executable);
        put_varint(log, p.command_line.len() as u64);
        for a in &p.command_line {
            put_str(log, a);
        }
        put_varint(log, p.start_time_ns);
    }

    pub fn put_object(log: &mut Vec<u8>, o: &Object) {
        log.push(OBJECT);
        put_str(log, &o.path);
        put_varint(log, o.load_address);
        put_varint(log, o.size);
    }

    pub fn put_thread(log: &mut Vec<u8>, t: &Thread) {
        log.push(THREAD);
        put_varint(log, t.tid.into());
        put_str(log, &t.name);
    }

    pub fn put_named(log: &mut Vec<u8>, tag: u8, id: u32, name: &str) {
        log.push(tag);
        put_varint(log, id.into());
        put_str(log, name);
    }

    pub fn put_unresolved(log: &mut Vec<u8>, id: u32) {
        log.push(UNRESOLVED);
        put_varint(log, id.into());
    }

    #[cfg(test)]
    pub fn put_stack(log: &mut Vec<u8>, id: u64, frames: &[FrameRef]) {
        log.push(STACK);
        put_varint(log, id);
        put_varint(log, frames.len() as u64);
        for f in frames {
            put_varint(log, f.addr);
            put_varint(log, f.func.into());
            put_varint(log, f.file.into());
            put_varint(log, f.line.into());
        }
    }

    /// A stack (innermost frame first) whose last `shared` frames are the
    /// last ones of the stack logged before it.
    pub fn put_stack_shared(log: &mut Vec<u8>, id: u64, frames: &[FrameRef], shared: usize) {
        log.push(STACK_SHARED);
        put_varint(log, id);
        put_varint(log, frames.len() as u64);
        put_varint(log, shared as u64);
        for f in &frames[..frames.len() - shared] {
            put_varint(log, f.addr);
            put_varint(log, f.func.into());
            put_varint(log, f.file.into());
            put_varint(log, f.line.into());
        }
    }

    pub fn put_address_symbol(log: &mut Vec<u8>, addr: u64, func: u32, file: u32, line: u32) {
        log.push(ADDRESS_SYMBOL);
        put_varint(log, addr);
        put_varint(log, func.into());
        put_varint(log, file.into());
        put_varint(log, line.into());
    }

    pub fn put_info(log: &mut Vec<u8>, pairs: &[(String, String)]) {
        log.push(INFO);
        put_varint(log, pairs.len() as u64);
        for (k, v) in pairs {
            put_str(log, k);
            put_str(log, v);
        }
    }

    pub fn put_thread_slot(log: &mut Vec<u8>, seq: u64, slot: u16, tid: u32) {
        log.push(THREAD_SLOT);
        put_varint(log, seq);
        put_varint(log, slot.into());
        put_varint(log, tid.into());
    }

    pub fn put_marker_thread(log: &mut Vec<u8>, tid: u32) {
        log.push(MARKER_THREAD);
        put_varint(log, tid.into());
    }

    pub fn put_dropped(log: &mut Vec<u8>, total: u64) {
        log.push(DROPPED);
        put_varint(log, total);
    }

    pub fn put_leak_scan(log: &mut Vec<u8>, event_seq: u64, time_ns: u64) {
        log.push(LEAK_SCAN);
        put_varint(log, event_seq);
        put_varint(log, time_ns);
    }

    pub fn put_block_class(log: &mut Vec<u8>, address: u64, kind: LeakKind) {
        log.push(BLOCK_CLASS);
        put_varint(log, address);
        put_varint(log, kind.code().into());
    }
}

/// The 16-byte spool header.
pub(super) fn header_bytes() -> [u8; SPOOL_HEADER_LEN] {
    let mut head = [0u8; SPOOL_HEADER_LEN];
    head[..4].copy_from_slice(SPOOL_MAGIC);
    head[4..8].copy_from_slice(&SPOOL_VERSION.to_le_bytes());
    head
}

/// Creates `FINAL.spool` (or `FINAL.spool.1`, … when taken) for reading and
/// writing, exclusively, mode 0600, never through a symbolic link. The file is
/// empty: the writer it is given to writes the spool header.
pub fn create_spool_file(final_path: &Path) -> io::Result<(File, PathBuf)> {
    let base = final_path.as_os_str().to_string_lossy().into_owned();
    for path in spool_names(final_path) {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(O_NOFOLLOW | O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{base}.spool and 999 numbered alternatives all exist"),
    ))
}

/// The names a spool of the mlyze file `final_path` may have, in the order
/// [`create_spool_file`] tries them: `FINAL.spool`, then `FINAL.spool.1`
/// to `.999` (a spool an earlier run left under the first name).
pub fn spool_names(final_path: &Path) -> impl Iterator<Item = PathBuf> {
    let base = final_path.as_os_str().to_string_lossy().into_owned();
    (0..1000u32).map(move |n| {
        PathBuf::from(if n == 0 {
            format!("{base}.spool")
        } else {
            format!("{base}.spool.{n}")
        })
    })
}

/// The spool of the mlyze file `final_path` that its writer has not
/// finished: the last of [`spool_names`] that exists, when it was made no
/// earlier than the file (the writer creates the file, then its spool; a
/// spool an earlier run left is older, and named before this one).
pub fn unfinished_spool(final_path: &Path) -> Option<PathBuf> {
    let made = std::fs::symlink_metadata(final_path)
        .ok()?
        .modified()
        .ok()?;
    let last = spool_names(final_path)
        .take_while(|p| std::fs::symlink_metadata(p).is_ok())
        .last()?;
    let spool_made = std::fs::symlink_metadata(&last).ok()?.modified().ok()?;
    (spool_made >= made).then_some(last)
}

// Linux values (x86-64, aarch64); format-writers has no libc dependency.
const O_NOFOLLOW: i32 = 0o400000;
const O_CLOEXEC: i32 = 0o2000000;

pub(super) fn write_chunk<F: Write + ?Sized>(
    f: &mut F,
    kind: u8,
    payload: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "spool chunk over 4 GiB"))?;
    let mut head = [0u8; CHUNK_HEAD];
    head[0] = kind;
    head[1..].copy_from_slice(&len.to_le_bytes());
    f.write_all(&head)?;
    f.write_all(payload)
}

/// What recovery found in a spool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverStats {
    /// Complete chunks used.
    pub chunks: u64,
    /// Bytes of encoded events copied into the final file.
    pub event_bytes: u64,
    /// Bytes at the end of the spool that did not form a complete chunk
    /// (the process was killed while writing them); they are dropped.
    pub torn_tail_bytes: u64,
}

/// A slice cursor over one log chunk, for entries.
struct Cur<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl Cur<'_> {
    fn at(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// One varint. Most are one byte (ids, lines, counts): those take the
    /// inlined path; the finish of a spooling writer reads every logged frame
    /// back several times (~200,000 frames on python3's 300k-entry dict).
    #[inline]
    fn varint(&mut self, what: &str) -> Result<u64> {
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.long_varint(what)
    }

    /// A well-formed varint, or `None` (position then unspecified).
    #[inline]
    fn quick(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..10u32 {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return None;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(value);
            }
        }
        None
    }

    /// A logged frame's four varints when all are well formed and the ids
    /// fit 32 bits, with no error to build per field; `None` leaves the
    /// position unchanged, for the checked reads to say what is wrong.
    #[inline]
    fn quick_frame(&mut self) -> Option<FrameRef> {
        let start = self.pos;
        let mut one = || {
            Some(FrameRef {
                addr: self.quick()?,
                func: u32::try_from(self.quick()?).ok()?,
                file: u32::try_from(self.quick()?).ok()?,
                line: u32::try_from(self.quick()?).ok()?,
            })
        };
        let f = one();
        if f.is_none() {
            self.pos = start;
        }
        f
    }

    /// A logged frame's address, function id, file id and line.
    #[inline]
    fn frame(&mut self) -> Result<FrameRef> {
        match self.quick_frame() {
            Some(f) => Ok(f),
            None => Ok(FrameRef {
                addr: self.varint("frame address")?,
                func: self.u32("function id")?,
                file: self.u32("file id")?,
                line: self.u32("line")?,
            }),
        }
    }

    #[inline(never)]
    fn long_varint(&mut self, what: &str) -> Result<u64> {
        let start = self.at();
        let mut value = 0u64;
        for i in 0..10u32 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(FormatError::truncated(
                    self.at(),
                    format!("{what} (spool entry)"),
                ));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(FormatError::invalid(
                    start,
                    format!("{what} as a varint of at most 64 bits"),
                    "a longer varint",
                ));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        unreachable!("the tenth byte ends the varint or is rejected")
    }

    #[inline]
    fn u32(&mut self, what: &str) -> Result<u32> {
        let at = self.at();
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| {
            FormatError::invalid(at, format!("{what} of at most 32 bits"), v.to_string())
        })
    }

    fn count(&mut self, what: &str) -> Result<usize> {
        self.count_beyond(what, 0)
    }

    /// A count of items that take at least one byte each of the rest of the
    /// chunk, except `extra` of them: a larger count is corrupt, and never
    /// sizes an allocation.
    fn count_beyond(&mut self, what: &str, extra: usize) -> Result<usize> {
        let at = self.at();
        let n = self.varint(what)?;
        let most = (self.buf.len() - self.pos) as u64 + extra as u64;
        if n > most {
            let rest = if extra == 0 {
                "the rest of the chunk".to_string()
            } else {
                format!("the rest of the chunk and the {extra} frames of the stack before")
            };
            return Err(FormatError::invalid(
                at,
                format!("{what} no larger than {rest}"),
                n.to_string(),
            ));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.at();
        let n = self.count(what)?;
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| FormatError::invalid(at, format!("{what} in UTF-8"), "invalid UTF-8"))
    }
}

fn check_id(id: u32, len: usize, at: u64, what: &str) -> Result<()> {
    if (id as usize) < len {
        Ok(())
    } else {
        Err(FormatError::invalid(
            at,
            format!("{what} id logged before use (fewer than {len} known)"),
            id.to_string(),
        ))
    }
}

/// The model frame a logged frame stands for (ids already checked).
fn frame_of(t: &Tables, f: &FrameRef) -> Frame {
    let symbol = if Some(f.func) == t.unresolved {
        None
    } else {
        Some(Symbol {
            function: t.functions[f.func as usize].clone(),
            file: t.files[f.file as usize].clone(),
            line: f.line,
        })
    };
    Frame {
        address: f.addr,
        symbol,
    }
}

/// What [`replay`] does with the stack entries.
pub(super) enum Stacks<'a> {
    /// Sets them in the tables, as the writer did.
    Keep,
    /// Leaves them out of the tables, noting whether their ids ascend.
    Skip(&'a mut StackOrder),
    /// Hands each to the callback (id, frames innermost first) and applies
    /// no other entry to the tables (every entry is still parsed).
    Only(&'a mut dyn FnMut(u64, &[FrameRef]) -> io::Result<()>),
}

/// Whether every stack entry so far had an id above the previous one: then
/// the log lists the stacks once each, in the metadata's order.
#[derive(Default)]
pub(super) struct StackOrder {
    last: Option<u64>,
    pub out_of_order: bool,
}

/// Replays one log chunk into `t`; with `emit`, also yields the model records
/// the entries stand for, in log order (the streaming spool reader).
pub(super) fn replay(
    t: &mut Tables,
    buf: &[u8],
    base: u64,
    mut emit: Option<&mut VecDeque<Record>>,
    mut stacks: Stacks<'_>,
) -> Result<()> {
    let keep = !matches!(stacks, Stacks::Only(_));
    let mut frames = Vec::new();
    let cur = &mut Cur { buf, pos: 0, base };
    while cur.pos < cur.buf.len() {
        let at = cur.at();
        let tag = cur.buf[cur.pos];
        cur.pos += 1;
        match tag {
            entry::START => {
                let us = cur.varint("start time")?;
                if keep {
                    t.start_us = Some(us);
                }
            }
            entry::PROCESS => {
                let pid = cur.u32("pid")?;
                let executable = cur.string("executable")?;
                let argc = cur.count("argument count")?;
                let mut command_line = Vec::with_capacity(argc);
                for _ in 0..argc {
                    command_line.push(cur.string("argument")?);
                }
                let start_time_ns = cur.varint("process start time")?;
                let p = Process {
                    pid,
                    executable,
                    command_line,
                    start_time_ns,
                };
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::Process(p.clone()));
                }
                if keep {
                    t.process = Some(p);
                }
            }
            entry::OBJECT => {
                let path = cur.string("object path")?;
                let load_address = cur.varint("load address")?;
                let size = cur.varint("object size")?;
                let o = Object {
                    path,
                    load_address,
                    size,
                };
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::Object(o.clone()));
                }
                if keep {
                    t.objects.push(o);
                }
            }
            entry::THREAD => {
                let tid = cur.u32("thread id")?;
                let name = cur.string("thread name")?;
                let th = Thread { tid, name };
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::Thread(th.clone()));
                }
                if keep {
                    t.threads.push(th);
                }
            }
            entry::FUNCTION | entry::FILE | entry::UNRESOLVED => {
                let id_at = cur.at();
                let id = cur.u32("table id")?;
                let expected = if tag == entry::FILE {
                    t.files.len()
                } else {
                    t.functions.len()
                };
                if !keep {
                    if tag != entry::UNRESOLVED {
                        cur.string("table entry name")?;
                    }
                    continue;
                }
                if id as usize != expected {
                    return Err(FormatError::invalid(
                        id_at,
                        format!("the next table id {expected}"),
                        id.to_string(),
                    ));
                }
                match tag {
                    entry::FUNCTION => t.push_function(cur.string("function name")?),
                    entry::FILE => t.push_file(cur.string("file name")?),
                    _ => {
                        t.functions.push(super::writer::UNRESOLVED_NAME.to_owned());
                        t.unresolved = Some(id);
                    }
                }
            }
            entry::STACK | entry::STACK_SHARED => {
                let id = cur.varint("stack id")?;
                let n = if tag == entry::STACK_SHARED {
                    // Shared frames take no byte of the entry: the count is
                    // bounded by the rest of the chunk and the last stack.
                    cur.count_beyond("frame count", t.last_stack.len())?
                } else {
                    cur.count("frame count")?
                };
                let shared = if tag == entry::STACK_SHARED {
                    let s_at = cur.at();
                    let shared = cur.varint("shared frame count")?;
                    let most = n.min(t.last_stack.len());
                    if shared > most as u64 {
                        return Err(FormatError::invalid(
                            s_at,
                            format!("at most {most} frames shared with the stack logged before"),
                            shared.to_string(),
                        ));
                    }
                    shared as usize
                } else {
                    0
                };
                frames.clear();
                frames.reserve(n);
                for _ in 0..n - shared {
                    let f_at = cur.at();
                    let f = cur.frame()?;
                    if keep {
                        check_id(f.func, t.functions.len(), f_at, "function")?;
                        check_id(f.file, t.files.len(), f_at, "file")?;
                    }
                    frames.push(f);
                }
                let last = &t.last_stack;
                frames.extend_from_slice(&last[last.len() - shared..]);
                t.last_stack.clear();
                t.last_stack.extend_from_slice(&frames);
                if let Some(out) = emit.as_deref_mut() {
                    let frames = frames.iter().map(|f| frame_of(t, f)).collect();
                    out.push_back(Record::Stack(Stack { id, frames }));
                }
                match &mut stacks {
                    Stacks::Keep => t.set_stack(id, std::mem::take(&mut frames)),
                    Stacks::Skip(order) => {
                        if order.last.is_some_and(|last| id <= last) {
                            order.out_of_order = true;
                        }
                        order.last = Some(id);
                    }
                    Stacks::Only(each) => each(id, &frames)
                        .map_err(|source| FormatError::Io { offset: at, source })?,
                }
            }
            entry::ADDRESS_SYMBOL => {
                let addr = cur.varint("address")?;
                let s_at = cur.at();
                let func = cur.u32("function id")?;
                let file = cur.u32("file id")?;
                let line = cur.u32("line")?;
                if !keep {
                    continue;
                }
                check_id(func, t.functions.len(), s_at, "function")?;
                check_id(file, t.files.len(), s_at, "file")?;
                if let Some(out) = emit.as_deref_mut() {
                    let symbol = frame_of(
                        t,
                        &FrameRef {
                            addr,
                            func,
                            file,
                            line,
                        },
                    )
                    .symbol
                    .unwrap_or_else(|| Symbol {
                        function: super::writer::UNRESOLVED_NAME.into(),
                        file: t.files[file as usize].clone(),
                        line,
                    });
                    out.push_back(Record::AddressSymbol {
                        address: addr,
                        symbol,
                    });
                }
                t.address_symbols.push((addr, func, file, line));
            }
            entry::INFO => {
                let n = cur.count("info pair count")?;
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = cur.string("info key")?;
                    let v = cur.string("info value")?;
                    pairs.push((k, v));
                }
                if keep {
                    t.info.extend(pairs.iter().cloned());
                }
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::Info(pairs));
                }
            }
            entry::THREAD_SLOT => {
                let seq = cur.varint("event sequence number")?;
                let s_at = cur.at();
                let slot = cur.u32("thread slot")?;
                let slot = u16::try_from(slot).map_err(|_| {
                    FormatError::invalid(s_at, "a thread slot below 65536", slot.to_string())
                })?;
                let tid = cur.u32("thread id")?;
                if keep {
                    t.thread_slots.push((seq, slot, tid));
                }
            }
            entry::MARKER_THREAD => {
                let tid = cur.u32("marker thread")?;
                if keep {
                    t.marker_threads.push(tid);
                }
            }
            entry::DROPPED => {
                let total = cur.varint("dropped syscall count")?;
                if keep {
                    t.dropped_syscalls = total;
                }
            }
            entry::LEAK_SCAN => {
                let event_seq = cur.varint("event sequence number of the leak scan")?;
                let time_ns = cur.varint("leak scan time")?;
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::LeakScan { time_ns });
                }
                if !keep {
                    continue;
                }
                t.leak_scans.push(LeakScan {
                    event_seq,
                    time_ns,
                    blocks: Vec::new(),
                });
            }
            entry::BLOCK_CLASS => {
                let address = cur.varint("classified block address")?;
                let k_at = cur.at();
                let code = cur.varint("leak kind")?;
                let kind = LeakKind::from_code(code).ok_or_else(|| {
                    FormatError::invalid(k_at, "a leak kind 0..=3", code.to_string())
                })?;
                if !keep {
                    continue;
                }
                let Some(scan) = t.leak_scans.last_mut() else {
                    return Err(FormatError::invalid(
                        at,
                        "a leak scan entry before the first block class entry",
                        "a block class entry",
                    ));
                };
                scan.blocks.push((address, kind));
                if let Some(out) = emit.as_deref_mut() {
                    out.push_back(Record::BlockClass { address, kind });
                }
            }
            other => {
                return Err(FormatError::invalid(
                    at,
                    "a spool log entry tag 1..=15",
                    format!("tag {other}"),
                ))
            }
        }
    }
    Ok(())
}

/// Reads a spool: the replayed tables, the event chunks' `(offset, length)`.
/// `(offset, length)` of event bytes in the spool.
type Ranges = Vec<(u64, u64)>;

fn read_spool(file: &File) -> Result<(Tables, Ranges, RecoverStats)> {
    let io = |source| FormatError::Io { offset: 0, source };
    let file_len = file.metadata().map_err(io)?.len();
    let mut src = ByteSource::new(file);
    let magic: [u8; 4] = src.read_array("the spool magic \"MTRS\"")?;
    if &magic != SPOOL_MAGIC {
        return Err(FormatError::invalid(
            0,
            "the spool magic \"MTRS\"",
            format!("{magic:02x?}"),
        ));
    }
    let version = src.read_u32_le("the spool version")?;
    if version != SPOOL_VERSION {
        return Err(FormatError::invalid(
            4,
            format!("spool version {SPOOL_VERSION}"),
            version.to_string(),
        ));
    }
    src.skip(8, "the reserved spool header bytes")?;

    let mut t = Tables::default();
    let mut ranges: Ranges = Vec::new();
    let mut stats = RecoverStats::default();
    while !src.at_eof()? {
        let at = src.offset();
        if file_len - at < CHUNK_HEAD as u64 {
            stats.torn_tail_bytes = file_len - at;
            break;
        }
        let kind = src.read_u8("a spool chunk kind")?;
        let len = u64::from(src.read_u32_le("a spool chunk length")?);
        if kind != CHUNK_RECORDS && kind != CHUNK_EVENTS {
            return Err(FormatError::invalid(
                at,
                "a spool chunk kind 1 (log) or 2 (events)",
                kind.to_string(),
            ));
        }
        let payload_at = src.offset();
        if file_len - payload_at < len {
            stats.torn_tail_bytes = file_len - at;
            break;
        }
        if kind == CHUNK_RECORDS {
            let buf = src.read_vec(len, "a spool log chunk")?;
            replay(&mut t, &buf, payload_at, None, Stacks::Keep)?;
        } else {
            src.skip(len, "a spool events chunk")?;
            ranges.push((payload_at, len));
            stats.event_bytes += len;
        }
        stats.chunks += 1;
    }
    Ok((t, ranges, stats))
}

/// Writes the mlyze file a spool stands for to `out`: what the writer would have
/// produced had `finish` run after the last complete flush.
pub fn recover_to<W: Write>(spool: &Path, mut out: W) -> Result<RecoverStats> {
    let io = |source| FormatError::Io { offset: 0, source };
    let mut file = File::open(spool).map_err(io)?;
    let (t, ranges, stats) = read_spool(&file)?;
    let meta = t.metadata_json();
    let meta_len = u32::try_from(meta.len()).map_err(|_| {
        FormatError::invalid(0, "metadata under 4 GiB", format!("{} bytes", meta.len()))
    })?;
    out.write_all(&header(t.header_start_us(), meta_len))
        .map_err(io)?;
    out.write_all(&meta).map_err(io)?;
    copy_ranges(&mut file, &ranges, &mut out).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(stats)
}

/// Turns a spool left by a killed process into the final file it stands for.
///
/// The target name is the spool's without `.spool` (and without a `.spool.N`
/// suffix). When that file exists and is empty (the name the writer reserved), it
/// is filled in place; otherwise a new name is chosen as
/// [`output::create_exclusive`] does. The spool itself is left in place.
/// Returns the file written and what recovery found.
pub fn recover(spool: &Path) -> Result<(PathBuf, RecoverStats)> {
    let io = |source| FormatError::Io { offset: 0, source };
    let text = spool.as_os_str().to_string_lossy().into_owned();
    let target = match text.rfind(".spool") {
        Some(i) if i > 0 => PathBuf::from(&text[..i]),
        _ => PathBuf::from(format!("{text}.mlyze")),
    };
    let reserved = std::fs::symlink_metadata(&target)
        .map(|m| m.file_type().is_file() && m.len() == 0)
        .unwrap_or(false);
    let (file, path) = if reserved {
        let f = OpenOptions::new()
            .write(true)
            .custom_flags(O_NOFOLLOW | O_CLOEXEC)
            .open(&target)
            .map_err(io)?;
        (f, target)
    } else {
        output::create_exclusive(&target, "mlyze").map_err(io)?
    };
    let stats = recover_to(spool, io::BufWriter::new(file))?;
    Ok((path, stats))
}

/// The process a spool belongs to (its first record), `None` when the spool
/// names none yet.
pub fn spool_process(spool: &Path) -> Result<Option<Process>> {
    let io = |source| FormatError::Io { offset: 0, source };
    let file = File::open(spool).map_err(io)?;
    let (t, _, _) = read_spool(&file)?;
    Ok(t.process)
}

/// True when `magic` starts a spool.
pub fn is_spool(magic: &[u8]) -> bool {
    magic.get(..4) == Some(&SPOOL_MAGIC[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spool an earlier run left under the first name is older than the
    /// file and is not the one its writer uses; the writer's own is the
    /// last name that exists, made after the file.
    #[test]
    fn the_unfinished_spool_is_the_writers_own() {
        use std::time::{Duration, SystemTime};
        let dir = std::env::temp_dir().join(format!("fw-spool-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs);
        let make = |name: &str, secs: u64| {
            let f = File::create(dir.join(name)).unwrap();
            f.set_modified(at(secs)).unwrap();
        };
        let final_path = dir.join("t.mlyze");
        make("t.mlyze.spool", 10);
        make("t.mlyze", 20);
        // Only the stale spool: none is this file's.
        assert_eq!(unfinished_spool(&final_path), None);
        make("t.mlyze.spool.1", 21);
        assert_eq!(
            unfinished_spool(&final_path),
            Some(dir.join("t.mlyze.spool.1"))
        );
        // No file: nothing to say.
        assert_eq!(unfinished_spool(&dir.join("u.mlyze")), None);
        let names: Vec<PathBuf> = spool_names(&final_path).take(3).collect();
        assert_eq!(names[0], dir.join("t.mlyze.spool"));
        assert_eq!(names[2], dir.join("t.mlyze.spool.2"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn frame(addr: u64, func: u32, file: u32, line: u32) -> FrameRef {
        FrameRef {
            addr,
            func,
            file,
            line,
        }
    }

    /// The stacks a log holds, as the finish's passes see them, read as two
    /// chunks split at `cut` (the previous stack is remembered across them).
    fn stacks_of(log: &[u8], cut: usize) -> Result<Vec<(u64, Vec<FrameRef>)>> {
        let mut got = Vec::new();
        let mut each = |id: u64, f: &[FrameRef]| {
            got.push((id, f.to_vec()));
            Ok(())
        };
        let mut t = Tables::default();
        replay(&mut t, &log[..cut], 100, None, Stacks::Only(&mut each))?;
        replay(
            &mut t,
            &log[cut..],
            100 + cut as u64,
            None,
            Stacks::Only(&mut each),
        )?;
        Ok(got)
    }

    /// Three stacks logged by a spooling writer's tables, the second and
    /// third sharing outer frames with the one before: bytes derived by
    /// hand from the entry table above.
    #[test]
    fn stacks_share_their_outer_frames_with_the_previous_one() {
        let main = frame(0x1000, 1, 0, 7);
        let run = frame(0x2000, 2, 0, 0);
        let a = frame(0x3000, 3, 1, 300);
        let b = frame(0x4000, 4, 1, 0);
        let mut t = Tables::default();
        t.log = Some(Vec::new());
        // Innermost first.
        t.set_stack(1, vec![a, run, main]);
        t.set_stack(2, vec![b, run, main]);
        t.set_stack(3, vec![main]);
        let log = t.log.take().unwrap();
        #[rustfmt::skip]
        let want = [
            16, 1, 3, 0,                       // stack 1: 3 frames, none shared
            0x80, 0x60, 3, 1, 0xac, 0x02,      //   0x3000, func 3, file 1, line 300
            0x80, 0x40, 2, 0, 0,               //   0x2000, func 2
            0x80, 0x20, 1, 0, 7,               //   0x1000, func 1, line 7
            16, 2, 3, 2,                       // stack 2: 3 frames, 2 shared
            0x80, 0x80, 0x01, 4, 1, 0,         //   0x4000, func 4, file 1
            16, 3, 1, 1,                       // stack 3: its one frame shared
        ];
        assert_eq!(log, want);
        let all = vec![
            (1, vec![a, run, main]),
            (2, vec![b, run, main]),
            (3, vec![main]),
        ];
        for cut in [0, 20, 30, log.len()] {
            assert_eq!(stacks_of(&log, cut).unwrap(), all, "cut at {cut}");
        }
        // The earlier form, every frame written out (tag 8), reads the same.
        let mut old = Vec::new();
        for (id, f) in &all {
            entry::put_stack(&mut old, *id, f);
        }
        assert_eq!(stacks_of(&old, 0).unwrap(), all);
    }

    #[test]
    fn sharing_more_frames_than_the_previous_stack_had_is_an_error_at_its_offset() {
        let mut log = Vec::new();
        entry::put_stack_shared(&mut log, 1, &[frame(0x10, 0, 0, 0)], 0);
        let cut = log.len();
        let at = cut as u64 + 3; // tag, id, count, then the shared count
        log.extend([16, 2, 2, 2]);
        let e = stacks_of(&log, cut).unwrap_err();
        assert_eq!(e.offset(), 100 + at, "{e}");
        assert!(
            e.to_string()
                .contains("shared with the stack logged before"),
            "{e}"
        );
        // More than the stack's own count, with enough before: also refused.
        let mut log = Vec::new();
        entry::put_stack_shared(&mut log, 1, &[frame(0x10, 0, 0, 0); 3], 0);
        log.extend([16, 2, 1, 2]);
        assert!(stacks_of(&log, 0).is_err());
        // A count beyond the bytes left and the stack before.
        let mut log = Vec::new();
        entry::put_stack_shared(&mut log, 1, &[frame(0x10, 0, 0, 0); 3], 0);
        let cut = log.len();
        log.extend([16, 2, 5, 0]);
        let e = stacks_of(&log, cut).unwrap_err();
        assert!(
            e.to_string().contains("the 3 frames of the stack before"),
            "{e}"
        );
    }

    /// A deep stack sharing all but one frame ends a chunk: its count is
    /// larger than the bytes left, and still valid.
    #[test]
    fn a_deep_shared_stack_may_end_a_chunk() {
        let deep: Vec<FrameRef> = (0..40).map(|i| frame(0x1000 + i, 0, 0, 0)).collect();
        let mut next = deep.clone();
        next[0] = frame(0x99, 0, 0, 0);
        let mut t = Tables::default();
        t.log = Some(Vec::new());
        t.set_stack(1, deep.clone());
        t.set_stack(2, next.clone());
        let log = t.log.take().unwrap();
        let cut = log.len() - 9;
        assert_eq!(&log[cut..], &[16, 2, 40, 39, 0x99, 0x01, 0, 0, 0]);
        assert_eq!(stacks_of(&log, cut).unwrap(), vec![(1, deep), (2, next)]);
    }
}
