//! The tracer's own heap: glibc's allocator called under its `__libc_*` names.
//!
//! Every Rust allocation inside libtracer (the channel, the writer's tables,
//! file buffers, symbolization) goes here and therefore never reaches our
//! exported `malloc`/`free`: the tracer's memory is invisible in the trace and
//! cannot recurse into the hooks.

use core::alloc::{GlobalAlloc, Layout};

use crate::sys;

/// glibc's `malloc` alignment on 64-bit Linux.
const MALLOC_ALIGN: usize = 16;

pub struct LibcAlloc;

// SAFETY: every method returns memory from glibc's allocator that satisfies the
// layout (alignment above 16 goes through memalign) or null on failure, and
// frees only what it returned.
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            sys::__libc_malloc(layout.size()).cast()
        } else {
            sys::__libc_memalign(layout.align(), layout.size()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            sys::__libc_calloc(1, layout.size()).cast()
        } else {
            let p = self.alloc(layout);
            if !p.is_null() {
                core::ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        sys::__libc_free(ptr.cast())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            return sys::__libc_realloc(ptr.cast(), new_size).cast();
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
