//! Keeping the trace files' descriptors out of the program's reach.
//!
//! Trace files are parked at high descriptor numbers and registered here. The
//! program's `close`, `dup2`, `dup3`, `close_range` and `closefrom` pass
//! through our hooks: closing one of ours pretends success, and a `dup2` onto
//! one of ours first moves ours elsewhere, so the program can neither close the
//! trace nor make us write into its own files under a reused number.
//!
//! The writer reads and writes through [`FdSink`] (behind the block writer of
//! `format_writers::blocks`), which looks the current number up in the
//! registry on every call and announces the call in `BUSY`; a hook that
//! moves a descriptor waits until no call uses the old number (both sides
//! use sequentially consistent operations, so one of them always sees the
//! other). The format writers never hold a descriptor number of their own.

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::io;

use crate::sys;

const SLOTS: usize = 8;
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
/// Calls in progress on registered descriptors (at exit, the file's thread
/// and the scan's replay of the spool may both be in one).
static BUSY: AtomicU32 = AtomicU32::new(0);
/// The tracer closed `fd` itself: forget it (the number is free again).
pub fn forget(fd: i32) {
    if let Some(i) = slot_of(fd) {
        FDS[i].store(-1, Ordering::SeqCst);
    }
}

/// Registers a descriptor of ours (moving it to a high number first) and
/// returns its slot, or `None` when the registry is full.
pub fn register(fd: i32) -> Option<usize> {
    let high = sys::dup_high(fd, sys::high_fd_base());
    let fd = if high >= 0 {
        sys::raw_close(fd);
        high
    } else {
        fd
    };
    for (i, slot) in FDS.iter().enumerate() {
        if slot
            .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Some(i);
        }
    }
    None
}

/// Closes and forgets the descriptor in `slot`.
pub fn release(slot: usize) {
    let fd = FDS[slot].swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        sys::raw_close(fd);
    }
}

/// Forgets every registered descriptor after closing it (fork child: the
/// parent's trace files are not ours to write).
pub fn release_all() {
    for i in 0..SLOTS {
        release(i);
    }
}

fn slot_of(fd: i32) -> Option<usize> {
    if fd < 0 {
        return None;
    }
    FDS.iter().position(|s| s.load(Ordering::SeqCst) == fd)
}

/// Whether `fd` is one of ours.
pub fn is_ours(fd: i32) -> bool {
    slot_of(fd).is_some()
}

/// If `fd` is ours, moves it to another number so the caller may reuse `fd`.
pub fn evacuate(fd: i32) {
    let Some(i) = slot_of(fd) else { return };
    let mut moved = sys::dup_high(fd, sys::high_fd_base());
    if moved < 0 {
        moved = sys::dup_high(fd, 3);
    }
    // No number left to move to: the writer loses this output (its next write
    // fails with EBADF and says so) rather than write into the program's file.
    FDS[i].store(moved.max(-1), Ordering::SeqCst);
    let mut spins = 0u32;
    while BUSY.load(Ordering::SeqCst) != 0 && spins < 1_000_000 {
        std::thread::yield_now();
        spins += 1;
    }
    if moved >= 0 {
        sys::raw_close(fd);
    }
}

/// The registered descriptors inside `[first, last]`, sorted.
pub fn ours_in(first: u32, last: u32) -> Vec<u32> {
    let mut v: Vec<u32> = FDS
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .filter(|&fd| fd >= 0 && (fd as u32) >= first && (fd as u32) <= last)
        .map(|fd| fd as u32)
        .collect();
    v.sort_unstable();
    v
}

/// Splits `[first, last]` into the sub-ranges that avoid every fd in `holes`
/// (sorted).
pub fn split_range(first: u32, last: u32, holes: &[u32]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut start = first;
    for &h in holes {
        if h < start || h > last {
            continue;
        }
        if h > start {
            out.push((start, h - 1));
        }
        match h.checked_add(1) {
            Some(s) => start = s,
            None => return out,
        }
    }
    if start <= last {
        out.push((start, last));
    }
    out
}

/// Completed reads and writes on registered descriptors: the exit wait
/// counts them as the writer's progress, since a writer finishing a large
/// file (replaying the spool's log, then writing the metadata) does nothing
/// else observable for seconds.
static IO_DONE: AtomicU64 = AtomicU64::new(0);

/// Reads and writes done so far on registered descriptors (see `IO_DONE`).
pub fn io_done() -> u64 {
    IO_DONE.load(Ordering::Relaxed)
}

/// Runs a system call on the descriptor currently registered in `slot`,
/// retrying on EINTR; `-2` from `call` stands for "no descriptor".
fn with_fd(slot: usize, mut call: impl FnMut(i32) -> isize) -> io::Result<usize> {
    IO_DONE.fetch_add(1, Ordering::Relaxed);
    loop {
        BUSY.fetch_add(1, Ordering::SeqCst);
        let fd = FDS[slot].load(Ordering::SeqCst);
        let n = if fd < 0 { -2 } else { call(fd) };
        let err = sys::errno();
        BUSY.fetch_sub(1, Ordering::SeqCst);
        if n >= 0 {
            return Ok(n as usize);
        }
        if n == -2 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        if err != libc::EINTR {
            return Err(io::Error::from_raw_os_error(err));
        }
    }
}

/// The size of the file registered in `slot` (`fstat`), or `None`.
pub fn file_size(slot: usize) -> Option<u64> {
    u64::try_from(stat(slot)?.st_size).ok()
}

/// The device and inode of the file in a slot.
pub fn identity(slot: usize) -> Option<(u64, u64)> {
    stat(slot).map(|st| (st.st_dev, st.st_ino))
}

/// `fstat` of the file in a slot.
fn stat(slot: usize) -> Option<libc::stat> {
    // SAFETY: `stat` is a C struct of integers, for which zero is valid.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a live, writable `stat` the kernel fills in.
    with_fd(slot, |fd| unsafe { libc::fstat(fd, &mut st) as isize }).ok()?;
    Some(st)
}

/// Empties the file in a slot (its pages and blocks are given back).
pub fn truncate(slot: usize) {
    // SAFETY: ftruncate on a descriptor of ours; no memory is passed.
    let _ = with_fd(slot, |fd| unsafe { libc::ftruncate(fd, 0) as isize });
}

/// A `Write` onto the descriptor registered in a slot.
pub struct FdSink {
    slot: usize,
}

impl FdSink {
    pub fn new(slot: usize) -> Self {
        FdSink { slot }
    }
}

/// Positioned reads and writes (`pread`, `pwrite`: the file's own offset
/// does not move); `write_all_at` comes with the trait.
impl std::os::unix::fs::FileExt for FdSink {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        // SAFETY: pointer and length describe the live, writable slice `buf`.
        with_fd(self.slot, |fd| unsafe {
            libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t)
        })
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        // SAFETY: pointer and length describe the live slice `buf`.
        with_fd(self.slot, |fd| unsafe {
            libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t)
        })
    }
}

impl io::Write for FdSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: pointer and length describe the live slice `buf`.
        with_fd(self.slot, |fd| unsafe {
            libc::write(fd, buf.as_ptr().cast(), buf.len())
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::split_range;

    #[test]
    fn ranges_skip_our_descriptors() {
        assert_eq!(split_range(3, 100, &[]), vec![(3, 100)]);
        assert_eq!(split_range(3, 100, &[50]), vec![(3, 49), (51, 100)]);
        assert_eq!(split_range(3, 100, &[3, 100]), vec![(4, 99)]);
        assert_eq!(split_range(3, 5, &[3, 4, 5]), Vec::<(u32, u32)>::new());
        assert_eq!(
            split_range(3, u32::MAX, &[960, 961]),
            vec![(3, 959), (962, u32::MAX)]
        );
        assert_eq!(
            split_range(3, u32::MAX, &[u32::MAX]),
            vec![(3, u32::MAX - 1)]
        );
        assert_eq!(split_range(10, 20, &[5, 30]), vec![(10, 20)]);
    }
}
