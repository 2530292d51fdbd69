//! A counting global allocator shared by the test binaries that bound memory: it
//! remembers the largest single allocation (or reallocation) made by each
//! thread, so a test can assert that no length field of a corrupted file sized
//! an allocation (per thread: the test harness runs a binary's tests in
//! parallel, and one test's allocations must not count against another's),
//! and the bytes live in the process and their peak, so a test can bound what
//! a reader holds at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The largest single allocation of this thread since [`reset_largest`].
#[allow(dead_code)]
pub fn largest() -> usize {
    LARGEST.with(|l| l.get())
}

/// Starts this thread's count of the largest allocation over.
#[allow(dead_code)]
pub fn reset_largest() {
    LARGEST.with(|l| l.set(0));
}

fn note_size(size: usize) {
    // `try_with`: the allocator also serves threads being torn down.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}
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
        note_size(layout.size());
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
        note_size(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        grew(new_size);
        // SAFETY: `ptr` came from `System` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
