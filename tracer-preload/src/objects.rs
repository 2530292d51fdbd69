//! The loaded objects (executable, shared libraries, vDSO) and where they sit,
//! from `dl_iterate_phdr`, run on the writer thread only.
//!
//! An object's `load_address` is the address its first `PT_LOAD` segment was
//! mapped at (page-aligned), `size` the extent up to the end of its last
//! `PT_LOAD` segment. Objects are reported once per (path, address) pair, so a
//! library `dlopen`ed later — or unloaded and loaded elsewhere — is reported
//! when it first shows up.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use format_writers::Object;

/// Objects already reported, and their address ranges for lookups.
#[derive(Default)]
pub struct Known {
    ranges: Vec<(u64, u64)>,
    /// Path of each range.
    paths: Vec<String>,
    /// An unknown address was seen while a scan was not due yet.
    pending: bool,
    seen: HashSet<(String, u64)>,
    last_scan: Option<Instant>,
}

/// Minimum time between two scans triggered by unknown addresses (JIT code
/// belongs to no object and must not cause a scan per stack).
const RESCAN_GAP: Duration = Duration::from_millis(20);

impl Known {
    pub fn contains(&self, addr: u64) -> bool {
        self.ranges.iter().any(|&(lo, hi)| addr >= lo && addr < hi)
    }

    /// Scans unless a scan happened very recently (then remembers to scan
    /// once the gap has passed, see `rescan_pending`).
    pub fn rescan_if_due(&mut self) -> Vec<Object> {
        match self.last_scan {
            Some(t) if t.elapsed() < RESCAN_GAP => {
                self.pending = true;
                Vec::new()
            }
            _ => self.rescan(),
        }
    }

    /// The scan postponed by `rescan_if_due`, when its time has come.
    pub fn rescan_pending(&mut self) -> Vec<Object> {
        if self.pending {
            self.rescan_if_due()
        } else {
            Vec::new()
        }
    }

    /// The objects known, one per address range (for the symbolizer).
    pub fn objects(&self) -> Vec<Object> {
        self.paths
            .iter()
            .zip(&self.ranges)
            .map(|(p, &(lo, hi))| Object {
                path: p.clone(),
                load_address: lo,
                size: hi - lo,
            })
            .collect()
    }

    /// `gone` is being unloaded: its ranges no longer name it, so that
    /// another object loaded there is found by the next scan (and reported;
    /// the same object loaded again at the same place is not reported twice:
    /// its record stands).
    pub fn forget(&mut self, gone: &[Object]) {
        for o in gone {
            let range = (o.load_address, o.load_address + o.size);
            if let Some(i) = self.ranges.iter().position(|&r| r == range) {
                self.ranges.remove(i);
                self.paths.remove(i);
            }
        }
    }

    /// Scans the loaded objects; returns the ones not reported before.
    pub fn rescan(&mut self) -> Vec<Object> {
        self.rescan_live().0
    }

    /// [`Known::rescan`], with the objects loaded now beside the ones not
    /// reported before. The known ranges keep objects unloaded since (their
    /// addresses are named at the end); the live list does not.
    pub fn rescan_live(&mut self) -> (Vec<Object>, Vec<Object>) {
        self.last_scan = Some(Instant::now());
        self.pending = false;
        let mut fresh = Vec::new();
        let live = scan();
        for o in &live {
            if o.size > 0 && !self.contains(o.load_address) {
                self.ranges.push((o.load_address, o.load_address + o.size));
                self.paths.push(o.path.clone());
            }
            if self.seen.insert((o.path.clone(), o.load_address)) {
                fresh.push(o.clone());
            }
        }
        (fresh, live)
    }
}

/// Forks in progress (between our prepare and parent/child handlers).
static FORKING: AtomicU32 = AtomicU32::new(0);
/// The writer is inside the loader (`dl_iterate_phdr`, symbolization).
static IN_LOADER: AtomicBool = AtomicBool::new(false);

/// Runs `f`, which takes the loader's internal locks, never across a fork: a
/// child must not inherit a loader lock held by the parent's writer (its own
/// writer would block on it for ever). The fork side is [`fork_prepare`].
pub fn loader_section<R>(f: impl FnOnce() -> R) -> R {
    loop {
        while FORKING.load(Ordering::SeqCst) != 0 {
            crate::sys::sleep_us(100);
        }
        IN_LOADER.store(true, Ordering::SeqCst);
        if FORKING.load(Ordering::SeqCst) == 0 {
            break;
        }
        IN_LOADER.store(false, Ordering::SeqCst);
    }
    let r = f();
    IN_LOADER.store(false, Ordering::SeqCst);
    r
}

/// Called before a fork: waits (bounded, 2 s) until the writer is out of
/// the loader, and keeps it out until [`fork_done`].
pub fn fork_prepare() {
    FORKING.fetch_add(1, Ordering::SeqCst);
    let mut waited = 0;
    while IN_LOADER.load(Ordering::SeqCst) && waited < 20_000 {
        crate::sys::sleep_us(100);
        waited += 1;
    }
}

/// After a fork, in the parent (`child == false`) or the child.
pub fn fork_done(child: bool) {
    if child {
        FORKING.store(0, Ordering::SeqCst);
        IN_LOADER.store(false, Ordering::SeqCst);
    } else {
        FORKING.fetch_sub(1, Ordering::SeqCst);
    }
}

fn scan() -> Vec<Object> {
    let mut out: Vec<Object> = Vec::new();
    // SAFETY: the callback receives `out` back as its data pointer, and runs
    // synchronously inside dl_iterate_phdr while `out` is alive.
    loader_section(|| unsafe {
        libc::dl_iterate_phdr(Some(callback), (&mut out as *mut Vec<Object>).cast());
    });
    let exe = crate::sys::exe_path();
    for o in &mut out {
        if o.path.is_empty() {
            o.path = exe.to_string();
        }
    }
    out
}

unsafe extern "C" fn callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call,
    // whose phdr array has dlpi_phnum entries; `data` is the Vec from `scan`.
    unsafe {
        let out = &mut *(data as *mut Vec<Object>);
        let info = &*info;
        let path = if info.dlpi_name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned()
        };
        if let Some((lo, hi)) = load_extent(info) {
            out.push(Object {
                path,
                load_address: lo,
                size: hi - lo,
            });
        }
    }
    0
}

/// Where an object's `PT_LOAD` segments lie in memory: from its first
/// segment's page to the end of its last, or `None` without segments.
///
/// # Safety
/// `info` is what `dl_iterate_phdr` passed, during its callback (its phdr
/// array has `dlpi_phnum` entries).
unsafe fn load_extent(info: &libc::dl_phdr_info) -> Option<(u64, u64)> {
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: i < dlpi_phnum (the caller's contract).
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD {
            lo = lo.min(ph.p_vaddr & !0xfff);
            hi = hi.max(ph.p_vaddr + ph.p_memsz);
        }
    }
    let base = info.dlpi_addr;
    (lo < hi).then(|| (base.wrapping_add(lo), base.wrapping_add(hi)))
}

/// The loaded objects' address ranges and the loader's counts of objects
/// ever added and removed, read on the calling thread: a `dlclose` hook
/// reads them before and after glibc's `dlclose` to tell which code went
/// (the object and any library only it had pulled in).
pub struct Loaded {
    adds: u64,
    subs: u64,
    ranges: Vec<(u64, u64)>,
}

/// glibc's `struct dl_phdr_info` up to the counts (the `libc` crate's
/// definition stops before them); the callback's `size` says whether the
/// loader passes them.
#[repr(C)]
struct PhdrInfoCounts {
    addr: u64,
    name: *const libc::c_char,
    phdr: *const libc::Elf64_Phdr,
    phnum: u16,
    adds: u64,
    subs: u64,
}

/// The loader's counts in `info`, when its `size` covers them.
///
/// # Safety
/// `info` is the valid `dl_phdr_info` of `size` bytes `dl_iterate_phdr`
/// passed to a callback, read only during that call.
unsafe fn counts<'a>(
    info: *const libc::dl_phdr_info,
    size: libc::size_t,
) -> Option<&'a PhdrInfoCounts> {
    // SAFETY: the caller's: `size` bytes of `info` are readable, and the
    // counts lie within them when `size` covers the struct.
    (size >= core::mem::size_of::<PhdrInfoCounts>())
        .then(|| unsafe { &*info.cast::<PhdrInfoCounts>() })
}

/// The loader's count of objects ever loaded (`dlpi_adds`), 0 when it
/// gives none; the walk stops at the first object. Takes the loader's
/// lock briefly.
pub fn loader_adds() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info of `size` bytes;
        // `data` is the u64 below.
        unsafe {
            if let Some(c) = counts(info, size) {
                *data.cast::<u64>() = c.adds;
            }
        }
        1
    }
    let mut adds = 0u64;
    // SAFETY: the callback writes the u64 it is given, alive meanwhile.
    unsafe {
        libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast());
    }
    adds
}

impl Loaded {
    /// Reads them. Takes the loader's lock: only where the program itself
    /// may call the loader (not on the writer thread, see [`loader_section`]).
    pub fn read() -> Loaded {
        let mut out = Loaded {
            adds: 0,
            subs: 0,
            ranges: Vec::new(),
        };
        // SAFETY: the callback receives `out` back as its data pointer and
        // runs synchronously inside dl_iterate_phdr while `out` is alive.
        unsafe {
            libc::dl_iterate_phdr(Some(loaded_callback), (&mut out as *mut Loaded).cast());
        }
        out
    }

    /// The objects' address ranges, `[start, end)`.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// The address ranges `before` (read earlier) held and `self` no longer
    /// does: empty when nothing was unloaded in between. `None` when that
    /// cannot be told (the loader gave no counts, or loaded something in
    /// between, possibly where the unloaded code was): then every cached
    /// rule must go.
    pub fn unloaded_since(&self, before: &Loaded) -> Option<Vec<(u64, u64)>> {
        if self.subs == u64::MAX || before.subs == u64::MAX {
            return None;
        }
        if self.subs == before.subs {
            return Some(Vec::new());
        }
        if self.adds != before.adds {
            return None;
        }
        let gone: Vec<(u64, u64)> = before
            .ranges
            .iter()
            .filter(|r| !self.ranges.contains(r))
            .copied()
            .collect();
        (!gone.is_empty()).then_some(gone)
    }
}

unsafe extern "C" fn loaded_callback(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info of `size` bytes for the
    // duration of the call, whose phdr array has dlpi_phnum entries; the
    // counts are read only when `size` covers them; `data` is the Loaded
    // from `Loaded::read`.
    unsafe {
        let out = &mut *(data as *mut Loaded);
        match counts(info, size) {
            Some(c) => (out.adds, out.subs) = (c.adds, c.subs),
            None => out.subs = u64::MAX,
        }
        out.ranges.extend(load_extent(&*info));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(adds: u64, subs: u64, ranges: &[(u64, u64)]) -> Loaded {
        Loaded {
            adds,
            subs,
            ranges: ranges.to_vec(),
        }
    }

    /// What went between two readings: nothing when the loader removed
    /// nothing (a handle held twice), the ranges no longer there when it
    /// did, and "cannot tell" when it also added something meanwhile or
    /// gave no counts.
    #[test]
    fn what_was_unloaded_between_two_readings() {
        let (a, b, c) = ((0x1000, 0x5000), (0x8000, 0x9000), (0x20000, 0x30000));
        let before = loaded(5, 1, &[a, b, c]);
        assert_eq!(
            loaded(5, 1, &[a, b, c]).unloaded_since(&before),
            Some(vec![])
        );
        assert_eq!(
            loaded(6, 1, &[a, b, c, (1, 2)]).unloaded_since(&before),
            Some(vec![])
        );
        assert_eq!(loaded(5, 3, &[a]).unloaded_since(&before), Some(vec![b, c]));
        assert_eq!(
            loaded(6, 3, &[a, (0x8000, 0x8800)]).unloaded_since(&before),
            None
        );
        assert_eq!(loaded(5, 2, &[a, b, c]).unloaded_since(&before), None);
        assert_eq!(loaded(5, u64::MAX, &[a]).unloaded_since(&before), None);
        assert_eq!(
            loaded(5, 1, &[a]).unloaded_since(&loaded(5, u64::MAX, &[a, b])),
            None
        );
    }

    /// Read in this process: the executable and libc are there, and two
    /// readings in a row agree that nothing was unloaded.
    #[test]
    fn reading_the_loaded_objects() {
        let first = Loaded::read();
        assert_ne!(first.subs, u64::MAX, "glibc passes the counts");
        assert!(first.ranges.len() >= 2, "{:x?}", first.ranges);
        let here = reading_the_loaded_objects as *const () as u64;
        assert!(first.ranges.iter().any(|&(lo, hi)| lo <= here && here < hi));
        assert_eq!(Loaded::read().unloaded_since(&first), Some(vec![]));
    }
}
