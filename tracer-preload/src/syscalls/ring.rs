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
//!         | per argument, in order: value u64, and for a path or buffer:
//!             n u64, then n bytes and padding to 8
//!             (kind | 0x80: n u64, then a `Box<[u8]>` pointer u64)
//! skip    = size u32 | nr u16 = 0xffff | …                (ignored up to size)
//! ```
//!
//! The producer writes a record in place ([`Rec`]), in argument order, so a
//! wrapper's record costs a few stores. Paths and buffers longer than 4 KiB
//! (huge paths, large `TRACER_SYSCALL_DATA`) are copied into a box whose
//! pointer the record carries, so a record stays well below a quarter of
//! the ring and a thread's records keep their order.
//!
//! The writer polls every ring on its own schedule (its idle sleep is at most
//! 10 ms, 100 ms once the program has been idle a while, when any record
//! wakes it); a producer wakes it only when its ring is more than half full, and
//! waits (never drops) when the ring is full while tracing goes on. Rings
//! are never freed: a thread's ring is given back by a `pthread` key
//! destructor when the thread exits, and reused once the writer has drained
//! it. At exit, exec and abort the writer drains every ring as it drains the
//! channel; a fork child discards the parent's records.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

use format_writers::{SyscallArgView, SyscallView};

use crate::{lifecycle, plist, sys, tls, writer};

/// Bytes of one ring (a power of two).
const CAP: usize = 128 * 1024;
/// Fixed part of a record: the header fields and the argument kinds.
const HEAD: usize = 48;
/// Arguments a record holds.
pub const MAX_ARGS: usize = 6;

const SKIP: u16 = 0xffff;
const HAS_DURATION: u8 = 1;
const FAILED: u8 = 2;
/// Set in an argument's kind: its bytes are in a box, not in the ring.
const BOXED_BYTES: u8 = 0x80;
/// Bytes of one path or buffer argument copied into the ring itself.
const MAX_INLINE_BYTES: usize = 4096;

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

/// Every ring ever created (rings are never freed).
static RINGS: plist::List<Ring> = plist::List::new();

impl plist::Node for Ring {
    fn next(&self) -> &AtomicPtr<Ring> {
        &self.next
    }
}
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
    rings()
        .find(|r| {
            r.state
                .compare_exchange(FREE, OWNED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
        .or_else(|| new_ring(OWNED))
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
    RINGS.push(r);
    Some(r)
}

fn rings() -> impl Iterator<Item = &'static Ring> {
    RINGS.iter()
}

// ---------------------------------------------------------------- producer

/// This thread's ring for a new record, or `None` when the tracer is not
/// running (the record is dropped, as the channel would).
#[inline(always)]
pub fn for_record() -> Option<&'static Ring> {
    if !lifecycle::accepting() {
        return None;
    }
    mine()
}

/// A record being written straight into its ring, argument after argument,
/// and published by [`Rec::finish`]. The producer writes past `head` in
/// the free part of the ring, which the writer never reads; each write
/// checks that it stays below `limit` (the end of the array or of the
/// free bytes, whichever comes first), and only when it would not does
/// [`Rec::grow`] wait for the writer or move the record to offset 0.
/// Inlined into each wrapper, where the argument kinds and count are
/// constants: a scalar argument is one compare and one store.
pub struct Rec<'r> {
    ring: &'r Ring,
    /// The ring's published bytes when the record began.
    head: u64,
    /// The ring's consumed bytes, as last read.
    tail: u64,
    /// Bytes skipped before the record (it moved to offset 0).
    skip: usize,
    start: *mut u8,
    cur: *mut u8,
    /// Null once the record is abandoned (tracing stopped while waiting).
    limit: *mut u8,
    n: usize,
    kinds: u64,
}

impl<'r> Rec<'r> {
    /// Starts a record in `ring`.
    ///
    /// # Safety
    /// The caller is `ring`'s one producer, with no other record open.
    #[inline(always)]
    pub unsafe fn begin(ring: &'r Ring) -> Rec<'r> {
        let head = ring.head.0.load(Ordering::Relaxed);
        let tail = ring.tail.0.load(Ordering::Acquire);
        let pos = (head as usize) & (CAP - 1);
        let free = CAP - (head - tail) as usize;
        let start = ring.bytes.get().cast::<u8>().add(pos);
        let mut r = Rec {
            ring,
            head,
            tail,
            skip: 0,
            start,
            cur: start,
            limit: start.add(free.min(CAP - pos)),
            n: 0,
            kinds: 0,
        };
        if r.room(HEAD) {
            r.cur = r.cur.add(HEAD);
        }
        r
    }

    /// Whether `need` more bytes fit at `cur` (after waiting or moving if
    /// they did not); false when the record is abandoned.
    #[inline(always)]
    fn room(&mut self, need: usize) -> bool {
        if (self.cur as usize) + need <= self.limit as usize {
            return true;
        }
        // By value, so that the record's fields never have their address
        // taken and stay in registers on the fast path.
        let (ring, head, skip, start, cur, limit) = (
            self.ring, self.head, self.skip, self.start, self.cur, self.limit,
        );
        match sys::keep_errno(|| grow(ring, head, skip, start, cur, limit, need)) {
            Some(g) => {
                (self.start, self.cur, self.limit, self.skip, self.tail) =
                    (g.start, g.cur, g.limit, g.skip, g.tail);
                true
            }
            None => {
                self.limit = core::ptr::null_mut();
                false
            }
        }
    }

    #[inline(always)]
    fn add_kind(&mut self, kind: u8) {
        debug_assert!(self.n < MAX_ARGS);
        self.kinds |= u64::from(kind) << (8 * (self.n & 7));
        self.n += 1;
    }

    /// A scalar argument.
    #[inline(always)]
    pub fn scalar(&mut self, kind: u8, value: u64) {
        if self.room(8) {
            // SAFETY: `room` checked 8 bytes at `cur`, 8-aligned.
            unsafe {
                self.cur.cast::<u64>().write(value);
                self.cur = self.cur.add(8);
            }
        }
        // Counted even in an abandoned record (never published), so the
        // count and kinds stay constants the compiler folds.
        self.add_kind(kind);
    }

    /// A path or buffer argument: `value` (a buffer's length), then `len`
    /// bytes from `src`.
    ///
    /// # Safety
    /// `src` is readable for `len` bytes.
    #[inline(always)]
    pub unsafe fn bytes(&mut self, kind: u8, value: u64, src: *const u8, len: usize) {
        if len > MAX_INLINE_BYTES {
            // The copy is made out of line, by value (see `room`).
            let copy = boxed_copy(src, len);
            if self.room(24) {
                self.cur.cast::<u64>().write(value);
                self.cur.add(8).cast::<u64>().write(len as u64);
                self.cur.add(16).cast::<u64>().write(copy as u64);
                self.cur = self.cur.add(24);
            } else {
                drop(Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                    copy, len,
                )));
            }
            self.add_kind(kind | BOXED_BYTES);
            return;
        }
        let padded = len.next_multiple_of(8);
        if self.room(16 + padded) {
            self.cur.cast::<u64>().write(value);
            self.cur.add(8).cast::<u64>().write(len as u64);
            if len > 0 {
                core::ptr::copy_nonoverlapping(src, self.cur.add(16), len);
            }
            self.cur = self.cur.add(16 + padded);
        }
        self.add_kind(kind);
    }

    /// Writes the header and publishes the record; false if it was
    /// abandoned.
    #[inline(always)]
    pub fn finish(self, f: &Fixed) -> bool {
        if self.limit.is_null() {
            return false;
        }
        let size = self.cur as usize - self.start as usize;
        let mut flags = 0;
        if f.duration_ns.is_some() {
            flags |= HAS_DURATION;
        }
        if f.errno.is_some() {
            flags |= FAILED;
        }
        let at = self.start;
        // SAFETY: `begin` reserved HEAD bytes at `start` (the record is not
        // abandoned); the skip marker goes where `head` points, in the
        // free part of the ring.
        unsafe {
            // size u32 | nr u16 | nargs u8 | flags u8, as one little-endian word.
            at.cast::<u64>().write(
                size as u64
                    | u64::from(f.nr) << 32
                    | (self.n as u64) << 48
                    | u64::from(flags) << 56,
            );
            at.add(8)
                .cast::<u64>()
                .write(u64::from(f.tid) | u64::from(f.errno.unwrap_or(0) as u32) << 32);
            at.add(16).cast::<u64>().write(f.time_ns);
            at.add(24).cast::<u64>().write(f.duration_ns.unwrap_or(0));
            at.add(32).cast::<i64>().write(f.result);
            at.add(40).cast::<u64>().write(self.kinds);
            if self.skip > 0 {
                let base = self.ring.bytes.get().cast::<u8>();
                let marker = base.add((self.head as usize) & (CAP - 1));
                marker
                    .cast::<u64>()
                    .write(self.skip as u64 | u64::from(SKIP) << 32);
            }
        }
        let new_head = self.head + (self.skip + size) as u64;
        self.ring.head.0.store(new_head, Ordering::Release);
        // Past half full (past nothing while the writer sleeps long: see
        // `wake_on_any`): make sure the writer is not asleep.
        if new_head - self.tail > WAKE_PAST.load(Ordering::Relaxed) {
            sys::keep_errno(writer::wake_if_sleeping);
        }
        true
    }
}

/// Bytes too long for the ring: copied into a box (leaked here, freed by
/// the writer after use, see `free_boxes`).
///
/// # Safety
/// `src` is readable for `len` bytes.
#[cold]
#[inline(never)]
unsafe fn boxed_copy(src: *const u8, len: usize) -> *mut u8 {
    let copy: Box<[u8]> = sys::keep_errno(|| {
        core::slice::from_raw_parts(src, len)
            .to_vec()
            .into_boxed_slice()
    });
    Box::into_raw(copy).cast::<u8>()
}

/// Where a record continues after [`grow`].
struct Grown {
    start: *mut u8,
    cur: *mut u8,
    limit: *mut u8,
    skip: usize,
    tail: u64,
}

/// Makes room for `need` more bytes after the `cur - start` bytes of a
/// record begun at `head`: waits for the writer, and moves the record to
/// offset 0 when it would cross the end of the array. `None` when the
/// record is abandoned (`limit` null: it was already, or tracing stopped
/// while waiting).
#[cold]
#[inline(never)]
fn grow(
    ring: &Ring,
    head: u64,
    skip: usize,
    start: *mut u8,
    cur: *mut u8,
    limit: *mut u8,
    need: usize,
) -> Option<Grown> {
    if limit.is_null() {
        return None;
    }
    let base = ring.bytes.get().cast::<u8>();
    let head_pos = (head as usize) & (CAP - 1);
    let used = cur as usize - start as usize;
    let total = used + need;
    // A record is at most HEAD + MAX_ARGS * (24 + MAX_INLINE_BYTES), well
    // below a quarter of the ring, so one move to offset 0 is enough and
    // the skip plus the record always fit in the ring.
    debug_assert!(total <= CAP / 4);
    let new_skip = if skip == 0 && head_pos + total > CAP {
        CAP - head_pos
    } else {
        skip
    };
    if !wait_for_room(ring, head, (new_skip + total) as u64) {
        return None;
    }
    let tail = ring.tail.0.load(Ordering::Acquire);
    let free = CAP - (head - tail) as usize;
    let (start, room) = if new_skip != skip {
        // SAFETY: both ranges lie in the ring's array, in its free part
        // (the room was waited for); the record's bytes start at
        // `head_pos` > CAP - CAP / 4 and the destination ends at `used` <
        // CAP / 4, so they do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(start, base, used) };
        (base, free - new_skip)
    } else if new_skip > 0 {
        (start, free - new_skip)
    } else {
        (start, free.min(CAP - head_pos))
    };
    // SAFETY: the record's region begins at `start` in the array, and
    // `room` bytes from there are free and contiguous.
    unsafe {
        Some(Grown {
            start,
            cur: start.add(used),
            limit: start.add(room),
            skip: new_skip,
            tail,
        })
    }
}

/// The fixed fields of a record.
pub struct Fixed {
    pub nr: u16,
    pub tid: u32,
    pub errno: Option<i32>,
    pub time_ns: u64,
    /// `None` for calls that do not return (exec, exit).
    pub duration_ns: Option<u64>,
    pub result: i64,
}

/// Waits until `need` bytes past `head` are free; false when tracing
/// stopped meanwhile.
fn wait_for_room(ring: &Ring, head: u64, need: u64) -> bool {
    let mut wait = writer::RoomWait::default();
    loop {
        let tail = ring.tail.0.load(Ordering::Acquire);
        if CAP as u64 - (head - tail) >= need {
            return true;
        }
        if !lifecycle::accepting() {
            return false;
        }
        wait.pause();
    }
}

// ---------------------------------------------------------------- consumer

/// Reads every record published so far, ring after ring (each thread's in
/// its order), handing each to `emit` as a view borrowing the ring's bytes
/// (nothing is allocated or copied); returns how many there were. Only the
/// writer thread calls this. Rings of exited threads are freed for reuse
/// once empty.
pub fn drain(mut emit: impl FnMut(&SyscallView<'_>)) -> usize {
    rings().map(|ring| drain_ring(ring, &mut emit)).sum()
}

/// Drains one ring; returns its records. Its `tail` is stored only when
/// it moved: a store, even of the same value, takes the line from the
/// producer, which reads it for every record.
fn drain_ring(ring: &Ring, emit: &mut impl FnMut(&SyscallView<'_>)) -> usize {
    let mut count = 0;
    let abandoned = ring.state.load(Ordering::Acquire) == ABANDONED;
    let head = ring.head.0.load(Ordering::Acquire);
    let first = ring.tail.0.load(Ordering::Relaxed);
    let mut tail = first;
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
    if tail != first {
        ring.tail.0.store(tail, Ordering::Release);
    }
    if abandoned {
        let _ = ring
            .state
            .compare_exchange(ABANDONED, FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
    count
}

/// Bytes in a ring past which a record wakes a sleeping writer: half the
/// ring, or 0 while the writer sleeps long in an idle program.
static WAKE_PAST: AtomicU64 = AtomicU64::new(CAP as u64 / 2);

/// Whether any record wakes the writer (`true`: it is about to sleep long),
/// or only one past half its ring; read without a fence, as the lanes'.
pub fn wake_on_any(any: bool) {
    let past = if any { 0 } else { CAP as u64 / 2 };
    WAKE_PAST.store(past, Ordering::Release);
}

/// Whether every ring is empty.
pub fn all_empty() -> bool {
    rings().all(|r| r.head.0.load(Ordering::Acquire) == r.tail.0.load(Ordering::Relaxed))
}

/// Hands the record at `at` to `emit` as a view of the ring's bytes (boxed
/// bytes: a view of the box, freed afterwards).
///
/// # Safety
/// `at` is a complete, published, non-skip record, unchanged while `emit`
/// runs.
unsafe fn read_record(at: *const u8, emit: &mut impl FnMut(&SyscallView<'_>)) {
    let n = usize::from(at.add(6).read()).min(MAX_ARGS);
    let flags = at.add(7).read();
    let errno = at.add(12).cast::<i32>().read();
    let d = at.add(24).cast::<u64>().read();
    // One kind per byte, the first argument's in the lowest (as
    // `Rec::add_kind` builds the word).
    let kinds = at.add(40).cast::<u64>().read();
    let mut p = at.add(HEAD);
    // Only the first `n` are written and read (no zeroing per record).
    let mut args = [core::mem::MaybeUninit::<SyscallArgView<'_>>::uninit(); MAX_ARGS];
    let mut boxed = false;
    for (i, slot) in args.iter_mut().enumerate().take(n) {
        let k = (kinds >> (8 * i)) as u8;
        let v = p.cast::<u64>().read();
        p = p.add(8);
        let view = match k {
            kind::INT => SyscallArgView::Int(v as i64),
            kind::FLAGS => SyscallArgView::Flags(v),
            kind::FD => SyscallArgView::Fd(v as i32),
            kind::PATH | kind::BUFFER => {
                let len = p.cast::<u64>().read() as usize;
                let bytes = core::slice::from_raw_parts(p.add(8), len);
                p = p.add(8 + len.next_multiple_of(8));
                byte_view(k, v, bytes)
            }
            _ if k & BOXED_BYTES != 0 => {
                let len = p.cast::<u64>().read() as usize;
                let ptr = p.add(8).cast::<u64>().read() as *const u8;
                p = p.add(16);
                boxed = true;
                byte_view(k & !BOXED_BYTES, v, core::slice::from_raw_parts(ptr, len))
            }
            _ => SyscallArgView::Pointer(v),
        };
        *slot = core::mem::MaybeUninit::new(view);
    }
    // SAFETY: the loop above wrote `args[..n]`; `MaybeUninit<T>` has the
    // layout of `T`.
    let args = core::slice::from_raw_parts(args.as_ptr().cast::<SyscallArgView<'_>>(), n);
    emit(&SyscallView {
        number: at.add(4).cast::<u16>().read(),
        result: at.add(32).cast::<i64>().read(),
        errno: (flags & FAILED != 0).then_some(errno),
        thread: Some(at.add(8).cast::<u32>().read()),
        time_ns: Some(at.add(16).cast::<u64>().read()),
        duration_ns: (flags & HAS_DURATION != 0).then_some(d),
        args,
    });
    if boxed {
        free_boxes(at);
    }
}

/// The view of a path or buffer argument (`kind` without the boxed bit).
#[inline(always)]
fn byte_view(kind: u8, value: u64, bytes: &[u8]) -> SyscallArgView<'_> {
    if kind == kind::PATH {
        SyscallArgView::Path(bytes)
    } else {
        SyscallArgView::Buffer {
            len: value,
            data: bytes,
        }
    }
}

/// Frees the boxed bytes of the record at `at` (after its view was used).
///
/// # Safety
/// As [`read_record`]; the boxes were made by [`boxed_copy`] and
/// are freed once.
#[cold]
unsafe fn free_boxes(at: *const u8) {
    let n = usize::from(at.add(6).read()).min(MAX_ARGS);
    let kinds = at.add(40).cast::<[u8; 8]>().read();
    let mut p = at.add(HEAD + 8);
    for &k in kinds.iter().take(n) {
        if matches!(k & !BOXED_BYTES, kind::PATH | kind::BUFFER) {
            let len = p.cast::<u64>().read() as usize;
            if k & BOXED_BYTES != 0 {
                let ptr = p.add(8).cast::<u64>().read() as *mut u8;
                drop(Box::from_raw(core::ptr::slice_from_raw_parts_mut(ptr, len)));
                p = p.wrapping_add(24);
            } else {
                p = p.wrapping_add(8 + len.next_multiple_of(8) + 8);
            }
        } else {
            p = p.wrapping_add(8);
        }
    }
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
    use format_writers::{Syscall, SyscallArg};

    fn new_ring() -> Box<Ring> {
        let layout = std::alloc::Layout::new::<Ring>();
        // SAFETY: an all-zero Ring is a valid empty ring; the Box frees it
        // with the same layout.
        unsafe { Box::from_raw(std::alloc::alloc_zeroed(layout).cast::<Ring>()) }
    }

    fn fixed(nr: u16, i: u64) -> Fixed {
        Fixed {
            nr,
            tid: 42,
            errno: None,
            time_ns: 1_000 + i,
            duration_ns: Some(7),
            result: i as i64,
        }
    }

    /// One argument as the test pushes it: kind, value, bytes.
    type Raw<'a> = (u8, u64, &'a [u8]);

    /// Writes one record through `Rec`, as the wrappers do: scalars, and
    /// byte arguments (paths, buffers) by kind.
    fn push(ring: &Ring, f: &Fixed, args: &[Raw<'_>]) -> bool {
        // SAFETY: the test is the ring's one producer; every byte source
        // is a live slice.
        unsafe {
            let mut r = Rec::begin(ring);
            for &(k, v, bytes) in args {
                if matches!(k, kind::PATH | kind::BUFFER) {
                    r.bytes(k, v, bytes.as_ptr(), bytes.len());
                } else {
                    r.scalar(k, v);
                }
            }
            r.finish(f)
        }
    }

    fn model(f: &Fixed, args: Vec<SyscallArg>) -> Syscall {
        Syscall {
            number: f.nr,
            result: f.result,
            errno: f.errno,
            thread: Some(f.tid),
            time_ns: Some(f.time_ns),
            duration_ns: f.duration_ns,
            args,
        }
    }

    fn drain_all(ring: &Ring) -> Vec<Syscall> {
        let mut got = Vec::new();
        drain_ring(ring, &mut |c: &SyscallView<'_>| got.push(c.to_syscall()));
        got
    }

    /// Every argument kind, a failed call, a call without duration, bytes
    /// too long for the ring (boxed), and enough records of varying sizes
    /// to wrap the ring many times (records that reach the end of the array
    /// move to its start): each comes back as the model record.
    #[test]
    fn records_come_back_exactly_in_order_across_wraps() {
        let ring = new_ring();
        let path = b"/etc/hosts".to_vec();
        let data: Vec<u8> = (0..13).collect();
        let huge = vec![b'x'; MAX_INLINE_BYTES + 1];
        let mut expected = Vec::new();
        let mut seen = Vec::new();
        for i in 0..20_000u64 {
            let mut f = fixed((i % 300) as u16, i);
            let varying: Vec<u8> = (0..(i % 61) as u8).collect();
            let (raw, args): (Vec<Raw<'_>>, Vec<SyscallArg>) = match i % 6 {
                0 => (
                    vec![
                        (kind::FD, (-100i32) as u32 as u64, &[]),
                        (kind::PATH, 0, &path),
                        (kind::FLAGS, 0x80000, &[]),
                    ],
                    vec![
                        SyscallArg::Fd(-100),
                        SyscallArg::Path(path.clone()),
                        SyscallArg::Flags(0x80000),
                    ],
                ),
                1 => (
                    vec![
                        (kind::FD, 3, &[]),
                        (kind::BUFFER, 64, &data),
                        (kind::INT, (-5i64) as u64, &[]),
                        (kind::POINTER, 0xdead_beef, &[]),
                        (kind::BUFFER, 9, &[]),
                        (kind::INT, u64::MAX, &[]),
                    ],
                    vec![
                        SyscallArg::Fd(3),
                        SyscallArg::Buffer {
                            len: 64,
                            data: data.clone(),
                        },
                        SyscallArg::Int(-5),
                        SyscallArg::Pointer(0xdead_beef),
                        SyscallArg::Buffer {
                            len: 9,
                            data: vec![],
                        },
                        SyscallArg::Int(-1),
                    ],
                ),
                2 => {
                    f.errno = Some(2);
                    f.result = -1;
                    f.duration_ns = None;
                    (vec![], vec![])
                }
                3 if i % 1000 == 3 => (
                    vec![(kind::INT, 1, &[]), (kind::PATH, 0, &huge)],
                    vec![SyscallArg::Int(1), SyscallArg::Path(huge.clone())],
                ),
                4 => (
                    vec![(kind::BUFFER, 1 << 20, &varying), (kind::PATH, 0, &varying)],
                    vec![
                        SyscallArg::Buffer {
                            len: 1 << 20,
                            data: varying.clone(),
                        },
                        SyscallArg::Path(varying.clone()),
                    ],
                ),
                _ => (vec![], vec![]),
            };
            expected.push(model(&f, args));
            assert!(push(&ring, &f, &raw));
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

    /// A full ring while the tracer is not running (as in these tests: no
    /// writer would ever make room): the record that does not fit is
    /// dropped whole, every earlier one comes back intact, and once drained
    /// the ring takes records again.
    #[test]
    fn a_record_that_finds_the_ring_full_is_dropped_whole() {
        assert!(!lifecycle::accepting());
        let ring = new_ring();
        let data = vec![7u8; 200];
        let mut pushed = 0u64;
        while push(
            &ring,
            &fixed(1, pushed),
            &[(kind::FD, 1, &[]), (kind::BUFFER, 200, &data)],
        ) {
            pushed += 1;
            assert!(pushed < CAP as u64, "never filled");
        }
        let per = (HEAD + 8 + 16 + 200) as u64;
        assert_eq!(pushed, CAP as u64 / per);
        let got = drain_all(&ring);
        assert_eq!(got.len() as u64, pushed);
        for (i, c) in got.iter().enumerate() {
            let expect = model(
                &fixed(1, i as u64),
                vec![
                    SyscallArg::Fd(1),
                    SyscallArg::Buffer {
                        len: 200,
                        data: data.clone(),
                    },
                ],
            );
            assert_eq!(c, &expect, "record {i}");
        }
        assert!(push(&ring, &fixed(2, 0), &[(kind::INT, 5, &[])]));
        let got = drain_all(&ring);
        assert_eq!(got, vec![model(&fixed(2, 0), vec![SyscallArg::Int(5)])]);
    }
}
