//! Per-thread rings of captured system calls: the hot path of syscall
//! capture allocates nothing, takes no lock and wakes nobody per call.
//!
//! Each thread that makes a captured call owns one [`Ring`] (a single
//! producer), which only the writer thread reads (a single consumer). A ring
//! is a power-of-two byte array and two monotonically increasing byte
//! counters: `head` (bytes published by the producer, `Release`) and `tail`
//! (bytes consumed by the writer, `Release`). Records are 8-byte aligned and
//! never straddle the end of the array: when one would not fit before the
//! end, the producer writes a skip marker over the rest and starts again at
//! offset 0.
//!
//! ```text
//! record  = size u32 | nr u16 | nargs u8 | flags u8      (size: whole record, multiple of 8)
//!         | tid u32 | errno i32 | entry ns u64 | duration ns u64 | result i64
//!         | kinds [u8; 8] (one per argument)
//!         | value u64 per argument
//!         | per path/buffer argument, in order: n u64, n bytes, padding to 8
//! skip    = size u32 | nr u16 = 0xffff | …                (ignored up to size)
//! boxed   = the header with flag BOXED, then one u64: a `Box<Syscall>` pointer
//! ```
//!
//! A record too large for a quarter of the ring (huge paths, large
//! `TRACER_SYSCALL_DATA` buffers) is built as a boxed [`Syscall`] and only its
//! pointer goes through the ring, so a thread's records keep their order.
//!
//! The writer polls every ring on its own schedule (its idle sleep is at most
//! 10 ms); a producer wakes it only when its ring is more than half full, and
//! waits (never drops) when the ring is full while tracing goes on. Rings
//! are never freed: a thread's ring is given back by a `pthread` key
//! destructor when the thread exits, and reused once the writer has drained
//! it. At exit, exec and abort the writer drains every ring as it drains the
//! channel; a fork child discards the parent's records.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

use format_writers::{Syscall, SyscallArg, SyscallArgView, SyscallView};

use crate::{lifecycle, sys, tls, writer};

/// Bytes of one ring (a power of two).
const CAP: usize = 128 * 1024;
/// Records larger than this travel boxed.
const MAX_INLINE: usize = CAP / 4;
/// Fixed part of a record: the header fields and the argument kinds.
const HEAD: usize = 48;
/// Arguments a record holds.
pub const MAX_ARGS: usize = 6;

const SKIP: u16 = 0xffff;
const HAS_DURATION: u8 = 1;
const FAILED: u8 = 2;
const BOXED: u8 = 4;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const ABANDONED: u8 = 2;

/// Argument kinds, as stored in a record.
pub mod kind {
    pub const INT: u8 = 1;
    pub const FLAGS: u8 = 2;
    pub const FD: u8 = 3;
    pub const POINTER: u8 = 4;
    pub const PATH: u8 = 5;
    pub const BUFFER: u8 = 6;
}

#[repr(C, align(64))]
struct Padded<T>(T);

/// One thread's ring.
pub struct Ring {
    head: Padded<AtomicU64>,
    tail: Padded<AtomicU64>,
    state: AtomicU8,
    next: AtomicPtr<Ring>,
    bytes: UnsafeCell<[u64; CAP / 8]>,
}

// SAFETY: `bytes` is written by the ring's one producer in [head, head + n)
// before `head` is published, and read by the one consumer in [tail, head)
// after loading `head`; the two ranges never overlap (see the module doc).
unsafe impl Sync for Ring {}

/// Every ring ever created (a push-only list; rings are never freed).
static RINGS: AtomicPtr<Ring> = AtomicPtr::new(core::ptr::null_mut());
/// The `pthread` key whose destructor gives a thread's ring back.
static KEY: AtomicU64 = AtomicU64::new(u64::MAX);

/// Rings made ready by the constructor besides the calling thread's, so the
/// first threads' first captured calls do not allocate (an allocation of ours
/// can make a system call, `mmap` or `brk`, that `strace` would show between
/// the program's own).
const SPARE_RINGS: usize = 3;

/// Creates the thread-exit key and the first rings (from the constructor,
/// once): the calling thread's and a few spare ones.
pub fn init() {
    if KEY.load(Ordering::Relaxed) != u64::MAX {
        return;
    }
    for _ in 0..SPARE_RINGS {
        new_ring(FREE);
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is writable; the destructor is a plain function valid for
    // the life of the process.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_gone)) } == 0 {
        KEY.store(u64::from(key), Ordering::Release);
    }
    let _ = mine();
}

/// Key destructor: the thread is exiting; its ring is abandoned (the writer
/// frees it for reuse once drained). A later captured call of this thread
/// (another destructor's) takes a new ring.
unsafe extern "C" fn thread_gone(p: *mut c_void) {
    let ring = p.cast::<Ring>();
    let hot = tls::hot();
    if hot.ring.get() == p {
        hot.ring.set(core::ptr::null_mut());
    }
    if !ring.is_null() {
        // SAFETY: rings are never freed.
        (*ring).state.store(ABANDONED, Ordering::Release);
    }
}

/// This thread's ring, taken (a free one or a new one) on first use.
#[inline]
fn mine() -> Option<&'static Ring> {
    let p = tls::hot().ring.get().cast::<Ring>();
    if !p.is_null() {
        // SAFETY: rings are never freed.
        return Some(unsafe { &*p });
    }
    sys::keep_errno(first_ring)
}

/// Takes a ring for this thread and registers it for the thread's exit.
#[cold]
fn first_ring() -> Option<&'static Ring> {
    let ring = take_ring()?;
    let p = ring as *const Ring as *mut Ring;
    tls::hot().ring.set(p.cast());
    let key = KEY.load(Ordering::Acquire);
    if key != u64::MAX {
        // SAFETY: the key was created by `init`; the value is our ring.
        unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, p.cast()) };
    }
    Some(ring)
}

#[cold]
fn take_ring() -> Option<&'static Ring> {
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: rings are never freed.
        let r = unsafe { &*p };
        if r.state
            .compare_exchange(FREE, OWNED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Some(r);
        }
        p = r.next.load(Ordering::Acquire);
    }
    new_ring(OWNED)
}

/// A new ring in `state`, added to the list.
#[cold]
fn new_ring(state: u8) -> Option<&'static Ring> {
    let layout = std::alloc::Layout::new::<Ring>();
    // SAFETY: the layout is non-zero; an all-zero Ring is a valid empty ring
    // (counters 0, state FREE, no next).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Ring>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a fresh, exclusively owned allocation.
    let r = unsafe { &*p };
    r.state.store(state, Ordering::Relaxed);
    let mut first = RINGS.load(Ordering::Acquire);
    loop {
        r.next.store(first, Ordering::Relaxed);
        match RINGS.compare_exchange_weak(first, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(r),
            Err(now) => first = now,
        }
    }
}

fn rings() -> impl Iterator<Item = &'static Ring> {
    let mut p = RINGS.load(Ordering::Acquire);
    core::iter::from_fn(move || {
        if p.is_null() {
            return None;
        }
        // SAFETY: rings are never freed.
        let r = unsafe { &*p };
        p = r.next.load(Ordering::Acquire);
        Some(r)
    })
}

// ---------------------------------------------------------------- producer

/// A record being assembled on the producer's stack: fixed fields, argument
/// values, and where the bytes of paths and buffers are (copied only into
/// the ring).
pub struct Draft {
    pub nr: u16,
    pub tid: u32,
    pub errno: Option<i32>,
    pub time_ns: u64,
    pub duration_ns: Option<u64>,
    pub result: i64,
    pub n: usize,
    pub kinds: [u8; MAX_ARGS],
    pub values: [u64; MAX_ARGS],
    /// Source and length of the bytes of a path or buffer argument.
    pub bytes: [(*const u8, usize); MAX_ARGS],
}

impl Draft {
    #[inline(always)]
    fn size(&self) -> usize {
        let mut size = HEAD + 8 * self.n;
        for i in 0..self.n {
            if matches!(self.kinds[i], kind::PATH | kind::BUFFER) {
                size += 8 + self.bytes[i].1.next_multiple_of(8);
            }
        }
        size
    }

    /// The model record (for the boxed path).
    ///
    /// # Safety
    /// Every `bytes` source is readable for its length.
    unsafe fn to_syscall(&self) -> Syscall {
        let mut args = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let (p, len) = self.bytes[i];
            args.push(arg(self.kinds[i], self.values[i], || {
                if len == 0 {
                    Vec::new()
                } else {
                    core::slice::from_raw_parts(p, len).to_vec()
                }
            }));
        }
        Syscall {
            number: self.nr,
            result: self.result,
            errno: self.errno,
            thread: Some(self.tid),
            time_ns: Some(self.time_ns),
            duration_ns: self.duration_ns,
            args,
        }
    }
}

fn arg(kind: u8, value: u64, bytes: impl FnOnce() -> Vec<u8>) -> SyscallArg {
    match kind {
        kind::INT => SyscallArg::Int(value as i64),
        kind::FLAGS => SyscallArg::Flags(value),
        kind::FD => SyscallArg::Fd(value as i32),
        kind::PATH => SyscallArg::Path(bytes()),
        kind::BUFFER => SyscallArg::Buffer {
            len: value,
            data: bytes(),
        },
        _ => SyscallArg::Pointer(value),
    }
}

/// Appends `d` to this thread's ring (inside the guard). False when the
/// tracer is not running (the record is dropped, as the channel would).
/// Inlined into each wrapper, where the argument kinds are constants.
///
/// # Safety
/// Every `bytes` source of `d` is readable for its length.
#[inline(always)]
pub unsafe fn push(d: &Draft) -> bool {
    if !lifecycle::accepting() {
        return false;
    }
    let Some(ring) = mine() else { return false };
    push_into(ring, d)
}

/// # Safety
/// As [`push`]; the caller is `ring`'s one producer.
#[inline(always)]
unsafe fn push_into(ring: &Ring, d: &Draft) -> bool {
    let size = d.size();
    if size > MAX_INLINE {
        return sys::keep_errno(|| push_boxed(ring, d));
    }
    let Some((at, head)) = reserve(ring, size) else {
        return false;
    };
    write_head(at, d, size, 0);
    let vals = at.add(HEAD).cast::<u64>();
    let mut tailp = at.add(HEAD + 8 * d.n);
    for i in 0..d.n {
        vals.add(i).write(d.values[i]);
        if matches!(d.kinds[i], kind::PATH | kind::BUFFER) {
            let (src, len) = d.bytes[i];
            tailp.cast::<u64>().write(len as u64);
            if len > 0 {
                core::ptr::copy_nonoverlapping(src, tailp.add(8), len);
            }
            tailp = tailp.add(8 + len.next_multiple_of(8));
        }
    }
    publish(ring, head);
    true
}

/// A record too large for the ring: its model record in a box, the pointer
/// in the ring.
///
/// # Safety
/// As [`push_into`].
#[cold]
#[inline(never)]
unsafe fn push_boxed(ring: &Ring, d: &Draft) -> bool {
    let boxed = Box::into_raw(Box::new(d.to_syscall()));
    let Some((at, head)) = reserve(ring, HEAD + 8) else {
        drop(Box::from_raw(boxed));
        return false;
    };
    write_head(at, d, HEAD + 8, BOXED);
    at.add(HEAD).cast::<u64>().write(boxed as u64);
    publish(ring, head);
    true
}

/// # Safety
/// `at` is writable for `HEAD` bytes, 8-aligned.
#[inline(always)]
unsafe fn write_head(at: *mut u8, d: &Draft, size: usize, extra: u8) {
    let mut flags = extra;
    if d.duration_ns.is_some() {
        flags |= HAS_DURATION;
    }
    if d.errno.is_some() {
        flags |= FAILED;
    }
    // size u32 | nr u16 | nargs u8 | flags u8, as one little-endian word.
    at.cast::<u64>()
        .write(size as u64 | u64::from(d.nr) << 32 | (d.n as u64) << 48 | u64::from(flags) << 56);
    at.add(8)
        .cast::<u64>()
        .write(u64::from(d.tid) | u64::from(d.errno.unwrap_or(0) as u32) << 32);
    at.add(16).cast::<u64>().write(d.time_ns);
    at.add(24).cast::<u64>().write(d.duration_ns.unwrap_or(0));
    at.add(32).cast::<i64>().write(d.result);
    let mut kinds = [0u8; 8];
    kinds[..MAX_ARGS].copy_from_slice(&d.kinds);
    at.add(40).cast::<u64>().write(u64::from_le_bytes(kinds));
}

/// Reserves `size` contiguous bytes, waiting for the writer when the ring
/// is full: where to write them, and the head that publishes them (for
/// [`publish`]). `None` when tracing stopped while waiting.
///
/// # Safety
/// The caller is `ring`'s one producer, and writes at most `size` bytes
/// from the pointer returned before publishing.
#[inline(always)]
unsafe fn reserve(ring: &Ring, size: usize) -> Option<(*mut u8, u64)> {
    let head = ring.head.0.load(Ordering::Relaxed);
    let pos = (head as usize) & (CAP - 1);
    let skip = if pos + size > CAP { CAP - pos } else { 0 };
    let need = (skip + size) as u64;
    let tail = ring.tail.0.load(Ordering::Acquire);
    if CAP as u64 - (head - tail) < need && !sys::keep_errno(|| wait_for_room(ring, head, need)) {
        return None;
    }
    let base = ring.bytes.get().cast::<u8>();
    let mut at = base.add(pos);
    if skip > 0 {
        at.cast::<u32>().write(skip as u32);
        at.add(4).cast::<u16>().write(SKIP);
        at = base;
    }
    Some((at, head + need))
}

/// Publishes the bytes reserved up to `new_head`.
#[inline(always)]
fn publish(ring: &Ring, new_head: u64) {
    ring.head.0.store(new_head, Ordering::Release);
    // Past half full: make sure the writer is not asleep.
    let tail = ring.tail.0.load(Ordering::Relaxed);
    if new_head - tail > (CAP / 2) as u64 {
        sys::keep_errno(writer::wake_if_sleeping);
    }
}

/// Waits until `need` bytes past `head` are free; false when tracing
/// stopped meanwhile.
#[cold]
#[inline(never)]
fn wait_for_room(ring: &Ring, head: u64, need: u64) -> bool {
    let mut spins = 0u32;
    loop {
        let tail = ring.tail.0.load(Ordering::Acquire);
        if CAP as u64 - (head - tail) >= need {
            return true;
        }
        if !lifecycle::accepting() {
            return false;
        }
        if spins == 0 {
            writer::wake();
        }
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else if spins < 256 {
            std::thread::yield_now();
        } else {
            sys::sleep_us(50);
        }
    }
}

// ---------------------------------------------------------------- consumer

/// Reads every record published so far, ring after ring (each thread's in
/// its order), handing each to `emit` as a view borrowing the ring's bytes
/// (nothing is allocated or copied); returns how many there were. Only the
/// writer thread calls this. Rings of exited threads are freed for reuse
/// once empty.
pub fn drain(mut emit: impl FnMut(&SyscallView<'_>)) -> usize {
    let mut count = 0;
    for ring in rings() {
        count += drain_ring(ring, &mut emit);
    }
    count
}

fn drain_ring(ring: &Ring, emit: &mut impl FnMut(&SyscallView<'_>)) -> usize {
    let mut count = 0;
    let abandoned = ring.state.load(Ordering::Acquire) == ABANDONED;
    let head = ring.head.0.load(Ordering::Acquire);
    let mut tail = ring.tail.0.load(Ordering::Relaxed);
    let base = ring.bytes.get().cast::<u8>().cast_const();
    while tail != head {
        let pos = (tail as usize) & (CAP - 1);
        // SAFETY: [tail, head) was published by the producer (Acquire
        // above) and is not written again until `tail` moves past it
        // (after `emit` returned, so the view's borrows end in time).
        let size = unsafe {
            let at = base.add(pos);
            let size = at.cast::<u32>().read() as usize;
            if at.add(4).cast::<u16>().read() != SKIP {
                read_record(at, emit);
                count += 1;
            }
            size
        };
        tail += size as u64;
    }
    ring.tail.0.store(tail, Ordering::Release);
    if abandoned {
        let _ = ring
            .state
            .compare_exchange(ABANDONED, FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
    count
}

/// Whether every ring is empty.
pub fn all_empty() -> bool {
    rings().all(|r| r.head.0.load(Ordering::Acquire) == r.tail.0.load(Ordering::Relaxed))
}

/// Hands the record at `at` to `emit` as a view of the ring's bytes (a
/// boxed record: a view of the box, freed afterwards).
///
/// # Safety
/// `at` is a complete, published, non-skip record, unchanged while `emit`
/// runs.
unsafe fn read_record(at: *const u8, emit: &mut impl FnMut(&SyscallView<'_>)) {
    let n = usize::from(at.add(6).read()).min(MAX_ARGS);
    let flags = at.add(7).read();
    if flags & BOXED != 0 {
        let boxed = Box::from_raw(at.add(HEAD).cast::<u64>().read() as *mut Syscall);
        let args: Vec<SyscallArgView<'_>> = boxed.args.iter().map(SyscallArgView::of).collect();
        emit(&SyscallView {
            number: boxed.number,
            result: boxed.result,
            errno: boxed.errno,
            thread: boxed.thread,
            time_ns: boxed.time_ns,
            duration_ns: boxed.duration_ns,
            args: &args,
        });
        return;
    }
    let errno = at.add(12).cast::<i32>().read();
    let d = at.add(24).cast::<u64>().read();
    let kinds = at.add(40).cast::<[u8; 8]>().read();
    let vals = at.add(HEAD).cast::<u64>();
    let mut tailp = at.add(HEAD + 8 * n);
    let mut args = [SyscallArgView::Int(0); MAX_ARGS];
    for (i, &k) in kinds.iter().enumerate().take(n) {
        let v = vals.add(i).read();
        args[i] = match k {
            kind::INT => SyscallArgView::Int(v as i64),
            kind::FLAGS => SyscallArgView::Flags(v),
            kind::FD => SyscallArgView::Fd(v as i32),
            kind::PATH | kind::BUFFER => {
                let len = tailp.cast::<u64>().read() as usize;
                let bytes = core::slice::from_raw_parts(tailp.add(8), len);
                tailp = tailp.add(8 + len.next_multiple_of(8));
                if k == kind::PATH {
                    SyscallArgView::Path(bytes)
                } else {
                    SyscallArgView::Buffer {
                        len: v,
                        data: bytes,
                    }
                }
            }
            _ => SyscallArgView::Pointer(v),
        };
    }
    emit(&SyscallView {
        number: at.add(4).cast::<u16>().read(),
        result: at.add(32).cast::<i64>().read(),
        errno: (flags & FAILED != 0).then_some(errno),
        thread: Some(at.add(8).cast::<u32>().read()),
        time_ns: Some(at.add(16).cast::<u64>().read()),
        duration_ns: (flags & HAS_DURATION != 0).then_some(d),
        args: &args[..n],
    });
}

/// In a fork child: the parent's unwritten records are the parent's; every
/// ring is emptied, and those of threads that do not exist here are freed.
pub fn after_fork_child() {
    let me = tls::hot().ring.get().cast::<Ring>().cast_const();
    for ring in rings() {
        let head = ring.head.0.load(Ordering::Relaxed);
        ring.tail.0.store(head, Ordering::Relaxed);
        if !core::ptr::eq(ring, me) {
            ring.state.store(FREE, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_ring() -> Box<Ring> {
        let layout = std::alloc::Layout::new::<Ring>();
        // SAFETY: an all-zero Ring is a valid empty ring; the Box frees it
        // with the same layout.
        unsafe { Box::from_raw(std::alloc::alloc_zeroed(layout).cast::<Ring>()) }
    }

    fn draft(nr: u16, i: u64) -> Draft {
        Draft {
            nr,
            tid: 42,
            errno: None,
            time_ns: 1_000 + i,
            duration_ns: Some(7),
            result: i as i64,
            n: 0,
            kinds: [0; MAX_ARGS],
            values: [0; MAX_ARGS],
            bytes: [(core::ptr::null(), 0); MAX_ARGS],
        }
    }

    fn add(d: &mut Draft, kind: u8, value: u64, bytes: &[u8]) {
        d.kinds[d.n] = kind;
        d.values[d.n] = value;
        d.bytes[d.n] = (bytes.as_ptr(), bytes.len());
        d.n += 1;
    }

    fn drain_all(ring: &Ring) -> Vec<Syscall> {
        let mut got = Vec::new();
        drain_ring(ring, &mut |c: &SyscallView<'_>| got.push(c.to_syscall()));
        got
    }

    /// Every argument kind, a failed call, a call without duration, the
    /// boxed path, and enough records to wrap the ring several times: each
    /// comes back as the model record the old boxed hand-off carried.
    #[test]
    fn records_come_back_exactly_in_order_across_wraps() {
        let ring = new_ring();
        let path = b"/etc/hosts".to_vec();
        let data: Vec<u8> = (0..13).collect();
        let huge = vec![b'x'; MAX_INLINE + 1];
        let mut expected = Vec::new();
        let mut seen = Vec::new();
        for i in 0..20_000u64 {
            let mut d = draft((i % 300) as u16, i);
            let mut args = Vec::new();
            match i % 5 {
                0 => {
                    add(&mut d, kind::FD, (-100i32) as u32 as u64, &[]);
                    add(&mut d, kind::PATH, 0, &path);
                    add(&mut d, kind::FLAGS, 0x80000, &[]);
                    args.push(SyscallArg::Fd(-100));
                    args.push(SyscallArg::Path(path.clone()));
                    args.push(SyscallArg::Flags(0x80000));
                }
                1 => {
                    add(&mut d, kind::FD, 3, &[]);
                    add(&mut d, kind::BUFFER, 64, &data);
                    add(&mut d, kind::INT, (-5i64) as u64, &[]);
                    add(&mut d, kind::POINTER, 0xdead_beef, &[]);
                    add(&mut d, kind::BUFFER, 9, &[]);
                    add(&mut d, kind::INT, u64::MAX, &[]);
                    args.push(SyscallArg::Fd(3));
                    args.push(SyscallArg::Buffer {
                        len: 64,
                        data: data.clone(),
                    });
                    args.push(SyscallArg::Int(-5));
                    args.push(SyscallArg::Pointer(0xdead_beef));
                    args.push(SyscallArg::Buffer {
                        len: 9,
                        data: vec![],
                    });
                    args.push(SyscallArg::Int(-1));
                }
                2 => {
                    d.errno = Some(2);
                    d.result = -1;
                    d.duration_ns = None;
                }
                3 if i % 1000 == 3 => {
                    add(&mut d, kind::PATH, 0, &huge);
                    args.push(SyscallArg::Path(huge.clone()));
                }
                _ => {}
            }
            expected.push(Syscall {
                number: d.nr,
                result: d.result,
                errno: d.errno,
                thread: Some(42),
                time_ns: Some(d.time_ns),
                duration_ns: d.duration_ns,
                args,
            });
            // SAFETY: every byte source above is a live vector.
            assert!(unsafe { push_into(&ring, &d) });
            if i % 97 == 0 {
                seen.extend(drain_all(&ring));
            }
        }
        seen.extend(drain_all(&ring));
        assert!(
            ring.head.0.load(Ordering::Relaxed) > 4 * CAP as u64,
            "wrapped"
        );
        assert_eq!(seen.len(), expected.len());
        for (i, (s, e)) in seen.iter().zip(&expected).enumerate() {
            assert_eq!(s, e, "record {i}");
        }
    }
}
