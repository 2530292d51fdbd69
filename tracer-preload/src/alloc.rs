//! The tracer's own heap: glibc's allocator called under its `__libc_*` names.
//!
//! Every Rust allocation inside libtracer (the channel, the writer's tables,
//! file buffers, symbolization) goes here and therefore never reaches our
//! exported `malloc`/`free`: the tracer's memory is invisible in the trace and
//! cannot recurse into the hooks.

//!
//! When glibc has no memory left for us (a program that lowered its
//! `RLIMIT_AS`, a full machine), a Rust allocation failure would abort the
//! program. Our allocations then come from a reserve set aside in the
//! library's zero-initialised data (no memory until used), and allocation
//! events stop being recorded from that moment (one line on stderr), so the
//! program runs on as it would untraced and the files can still be
//! finished.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys;

/// glibc's `malloc` alignment on 64-bit Linux.
const MALLOC_ALIGN: usize = 16;

/// Bytes of the reserve.
const RESERVE: usize = 8 << 20;

#[repr(C, align(4096))]
struct Reserve(UnsafeCell<[u8; RESERVE]>);

// SAFETY: the reserve's bytes are handed out once each, by an atomic bump
// of `USED`, to one owner.
unsafe impl Sync for Reserve {}

static RESERVE_BYTES: Reserve = Reserve(UnsafeCell::new([0; RESERVE]));
/// Bytes of the reserve handed out.
static USED: AtomicUsize = AtomicUsize::new(0);
static SAID: AtomicBool = AtomicBool::new(false);

/// `size` bytes aligned to `align` from the reserve (never given back), or
/// null when it is spent.
fn from_reserve(size: usize, align: usize) -> *mut u8 {
    let base = RESERVE_BYTES.0.get().cast::<u8>();
    let mut used = USED.load(Ordering::Relaxed);
    loop {
        let start = (base as usize + used).next_multiple_of(align) - base as usize;
        let Some(end) = start.checked_add(size).filter(|&e| e <= RESERVE) else {
            return core::ptr::null_mut();
        };
        match USED.compare_exchange_weak(used, end, Ordering::AcqRel, Ordering::Relaxed) {
            // SAFETY: [start, end) lies inside the reserve and is ours alone.
            Ok(_) => return unsafe { base.add(start) },
            Err(now) => used = now,
        }
    }
}

/// Whether `p` was handed out by the reserve.
fn in_reserve(p: *mut u8) -> bool {
    let base = RESERVE_BYTES.0.get() as usize;
    (p as usize).wrapping_sub(base) < RESERVE
}

/// glibc refused us memory: serve it from the reserve, and stop recording
/// allocation events (once, with a line on stderr).
#[cold]
fn out_of_memory(size: usize, align: usize) -> *mut u8 {
    let p = from_reserve(size, align.max(MALLOC_ALIGN));
    if !SAID.swap(true, Ordering::AcqRel) {
        crate::lifecycle::stop_allocations();
        sys::stderr_line("out of memory: allocations from here on are not recorded");
    }
    p
}

/// Whether the tracer ran out of memory (see the module documentation): the
/// writer then leaves out what needs much more (symbols, the leak scan).
pub fn exhausted() -> bool {
    SAID.load(Ordering::Acquire)
}

pub struct LibcAlloc;

// SAFETY: every method returns memory from glibc's allocator that satisfies the
// layout (alignment above 16 goes through memalign) or null on failure, and
// frees only what it returned.
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p: *mut u8 = if layout.align() <= MALLOC_ALIGN {
            sys::__libc_malloc(layout.size()).cast()
        } else {
            sys::__libc_memalign(layout.align(), layout.size()).cast()
        };
        if p.is_null() {
            return out_of_memory(layout.size(), layout.align());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            let p: *mut u8 = sys::__libc_calloc(1, layout.size()).cast();
            if p.is_null() {
                // The reserve's bytes are zero: each is handed out once.
                return out_of_memory(layout.size(), layout.align());
            }
            p
        } else {
            let p = self.alloc(layout);
            if !p.is_null() {
                core::ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        if !in_reserve(ptr) {
            sys::__libc_free(ptr.cast())
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN && !in_reserve(ptr) {
            let q: *mut u8 = sys::__libc_realloc(ptr.cast(), new_size).cast();
            if !q.is_null() || new_size == 0 {
                return q;
            }
            // glibc kept the old block: move it to the reserve.
            let q = out_of_memory(new_size, layout.align());
            if !q.is_null() {
                core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                sys::__libc_free(ptr.cast());
            }
            return q;
        }
        // SAFETY (caller contract): the new layout is valid for this alignment.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        q
    }
}
