//! A counting global allocator shared by the test binaries that bound memory: it
//! remembers the largest single allocation (or reallocation) made by the process,
//! so a test can assert that no length field of a corrupted file sized an
//! allocation, and the bytes live and their peak, so a test can bound what a
//! reader holds at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest single allocation since the last reset (store 0 to reset).
pub static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated and not freed yet.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The largest `LIVE` since the last reset (store `LIVE` to reset).
pub static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the only
// additions are relaxed atomic counters, which cannot affect the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        grew(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        grew(new_size);
        // SAFETY: `ptr` came from `System` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
