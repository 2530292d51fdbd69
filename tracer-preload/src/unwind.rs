//! Capturing the stack of an allocation: return addresses, innermost first,
//! starting at the caller of the allocation function.
//!
//! Two methods behind [`capture`]:
//! - `dwarf`: unwinding by `.eh_frame` rules. Complete on programs built
//!   without frame pointers, such as Debian's python3, perl and git, so it is
//!   the default. The cached unwinder of [`crate::cfi`] handles almost every
//!   stack; the rest (and everything before our constructor ran) goes through
//!   libgcc's `_Unwind_Backtrace` (the `backtrace` crate's unsynchronized
//!   entry point).
//! - `fp`: follows the saved frame-pointer chain. Nanoseconds per frame, but it
//!   stops (or skips callers) wherever code omits frame pointers. Every frame
//!   address is checked against the thread's stack bounds before it is read,
//!   so a garbage chain ends the walk instead of faulting.
//!
//! Whatever the compiler inlined, the tracer's own frames are recognised by
//! address (this library's executable segment) and dropped from the top.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::config::Unwind;
use crate::{sys, tls};

static OWN_LO: AtomicU64 = AtomicU64::new(0);
static OWN_HI: AtomicU64 = AtomicU64::new(0);

/// Finds this library's code range; safe to call at any time (memory reads of
/// our own ELF header only).
pub fn init() {
    if OWN_HI.load(Ordering::Relaxed) == 0 {
        let (lo, hi) = sys::own_text_range();
        OWN_LO.store(lo, Ordering::Relaxed);
        OWN_HI.store(hi, Ordering::Relaxed);
    }
}

#[inline]
fn is_own(ip: u64) -> bool {
    ip >= OWN_LO.load(Ordering::Relaxed) && ip < OWN_HI.load(Ordering::Relaxed)
}

/// Fills `buf` with up to `buf.len()` return addresses of the current stack,
/// the tracer's own frames removed; returns how many were written. `state`
/// is the thread's (`tls::Capture`): its unwinding memo and stack bounds
/// (`None` while the thread's TLS is torn down).
#[inline(never)]
///
/// `entry`, when not 0, is the frame of the exported function the program
/// called (`entry_frame`): the walk starts there, instead of walking the
/// tracer's frames below it one by one (~50 instructions an allocation).
pub fn capture(
    method: Unwind,
    buf: &mut [u64],
    state: Option<(&mut crate::cfi::Memo, &mut (u64, u64))>,
    entry: u64,
) -> usize {
    if buf.is_empty() {
        return 0;
    }
    let (memo, bounds) = match state {
        Some((memo, b)) => (Some(memo), known_bounds(b)),
        None => (None, self::bounds()),
    };
    let got = bounds.and_then(|(lo, hi)| match method {
        Unwind::Dwarf => capture_cached(buf, memo, lo, hi, entry),
        Unwind::Fp => capture_fp(buf, lo, hi, entry),
    });
    got.unwrap_or_else(|| capture_dwarf(buf))
}

/// [`capture`] for a signal handler's call that interrupted a hook
/// (`side`): no memo (the interrupted capture may be using it), and the
/// stack bounds only if already known (computing them takes a lock of
/// glibc's that the interrupted code may hold). A handler on an alternate
/// signal stack is outside the bounds: libgcc's unwinder takes it, through
/// the signal frame.
pub fn capture_in_handler(method: Unwind, buf: &mut [u64], entry: u64) -> usize {
    if buf.is_empty() {
        return 0;
    }
    let (lo, hi) = tls::stack_bounds();
    let got = (hi != 0)
        .then(|| match method {
            Unwind::Dwarf => capture_cached(buf, None, lo, hi, entry),
            Unwind::Fp => capture_fp(buf, lo, hi, entry),
        })
        .flatten();
    got.unwrap_or_else(|| capture_dwarf(buf))
}

/// Takes the calling thread's lane and its stack bounds now (inside the
/// guard), so that its next allocation makes no system call of its own:
/// the lane's `mmap` and `prctl`, and glibc's `/proc/self/maps`,
/// `prlimit64` and `sched_getaffinity` for the bounds would otherwise come
/// at the first allocation after start-up, which a program that installs a
/// seccomp filter first in `main` (or right after `fork`) may be killed for.
pub fn prepare_this_thread() {
    let _ = crate::lane::with_capture(|c| known_bounds(&mut c.bounds));
}

/// The thread's stack bounds from `cached`, computed into it the first time.
#[inline(always)]
fn known_bounds(cached: &mut (u64, u64)) -> Option<(u64, u64)> {
    if cached.1 != 0 {
        return Some(*cached);
    }
    let b = bounds()?;
    *cached = b;
    Some(b)
}

/// Stacks taken by libgcc's unwinder (`TRACER_STACK_STATS`): a frame whose
/// rule the cached walk cannot express, or no stack bounds. Each costs
/// microseconds where the cached walk costs tens of nanoseconds.
static BY_LIBGCC: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// How many stacks libgcc's unwinder took so far.
pub fn by_libgcc() -> u64 {
    BY_LIBGCC.load(Ordering::Relaxed)
}

/// libgcc's unwinder. The tracer's own frames are dropped from the top.
/// After a signal frame (glibc's `sigreturn` trampoline as a return
/// address) the interrupted code comes; when it was a hook (a signal
/// handler that interrupted one), every frame up to the hook's last own
/// frame is dropped as well, those of libc or the vDSO it called included:
/// the stack reads handler, trampoline, then the program's call of the
/// allocation function.
fn capture_dwarf(buf: &mut [u64]) -> usize {
    BY_LIBGCC.fetch_add(1, Ordering::Relaxed);
    let restorer = crate::side::restorer();
    let mut n = 0;
    let mut skipping = true;
    // Where the frames after the latest signal frame start, until the
    // program's frames after an interrupted hook's.
    let mut after_signal: Option<usize> = None;
    let mut hook_seen = false;
    // SAFETY: trace_unsynchronized is unsafe only because it must not run
    // concurrently with itself on the same thread's unwinder state when the
    // unwinder is not thread-safe; libgcc's `_Unwind_Backtrace` keeps its
    // state on the caller's stack, so a capture by a signal handler that
    // interrupted one (`side`) is safe as well.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if ip == 0 {
                return false;
            }
            if skipping && is_own(ip) {
                return true;
            }
            skipping = false;
            if let Some(start) = after_signal {
                if is_own(ip) {
                    n = start;
                    hook_seen = true;
                    return true;
                }
                if hook_seen {
                    after_signal = None;
                }
            }
            buf[n] = ip;
            n += 1;
            if restorer != 0 && ip == restorer {
                after_signal = Some(n);
                hook_seen = false;
            }
            n < buf.len()
        });
    }
    n
}

/// The thread's stack bounds, computed once per thread.
fn bounds() -> Option<(u64, u64)> {
    let (lo, hi) = tls::stack_bounds();
    if hi != 0 {
        return Some((lo, hi));
    }
    // Inside the program's own pthread_getattr_np, glibc holds this thread's
    // lock while it allocates: asking again would wait for ever (a thread
    // whose first allocation is that one, as in a JVM's or rustc's threads).
    // That capture goes to the unwinder that needs no bounds.
    if tls::in_getattr() {
        return None;
    }
    // SAFETY: `attr` is initialised by pthread_getattr_np before use and
    // destroyed afterwards; the out-pointers are valid locals. The allocations
    // and file reads glibc makes here pass through our guard.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || size == 0 {
            return None;
        }
        let lo = addr as u64;
        let hi = lo + size as u64;
        tls::set_stack_bounds(lo, hi);
        Some((lo, hi))
    }
}

/// The calling function's frame: its saved `rbp` at this address, its
/// return address above. The exported allocation functions pass theirs to
/// the capture (this crate keeps frame pointers: `.cargo/config.toml`).
#[inline(always)]
pub fn entry_frame() -> u64 {
    frame_pointer()
}

/// A function returning the value of one register: `$x86` on x86-64,
/// `$arm` on aarch64 (0 elsewhere).
macro_rules! register_reader {
    ($(#[$doc:meta])* $vis:vis $name:ident, $x86:literal, $arm:literal) => {
        $(#[$doc])*
        #[inline(always)]
        $vis fn $name() -> u64 {
            let v: u64;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: reads a register, no memory access.
            unsafe {
                core::arch::asm!(concat!("mov {}, ", $x86), out(reg) v, options(nomem, nostack, preserves_flags))
            };
            #[cfg(target_arch = "aarch64")]
            // SAFETY: reads a register, no memory access.
            unsafe {
                core::arch::asm!(concat!("mov {}, ", $arm), out(reg) v, options(nomem, nostack, preserves_flags))
            };
            #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
            {
                v = 0;
            }
            v
        }
    };
}

register_reader!(frame_pointer, "rbp", "x29");
register_reader!(
    /// The current stack pointer.
    pub stack_pointer, "rsp", "sp"
);

/// Where a frame-pointer walk starts: the exported function's frame when
/// known, else the current one. Only an outer frame of the current one is
/// taken (a frame of this thread's stack that is live now); the walk checks
/// every frame against the stack's bounds and skips the tracer's own.
#[inline(always)]
fn start_frame(entry: u64) -> u64 {
    let here = frame_pointer();
    if entry > here {
        entry
    } else {
        here
    }
}

/// Walks the tracer's own frames by frame pointer (this crate is built with
/// them) from `entry` (or from here when 0), then hands the first foreign
/// frame to the cached CFI unwinder.
#[inline(never)]
fn capture_cached(
    buf: &mut [u64],
    memo: Option<&mut crate::cfi::Memo>,
    lo: u64,
    hi: u64,
    entry: u64,
) -> Option<usize> {
    // The tests of `is_own` and of the loop below with the bounds loaded
    // once: `a - x < n` (wrapping) is `x <= a < x + n`. An empty or unset
    // range of our code (`own` 0) holds no address.
    let own_lo = OWN_LO.load(Ordering::Relaxed);
    let own = OWN_HI.load(Ordering::Relaxed).saturating_sub(own_lo);
    // `fp - lo <= span16` is `lo <= fp && fp + 16 <= hi`.
    let span16 = hi.checked_sub(lo)?.checked_sub(16)?;
    let mut fp = start_frame(entry);
    for _ in 0..64 {
        if fp.wrapping_sub(lo) > span16 || !fp.is_multiple_of(8) {
            return None;
        }
        // SAFETY: [fp, fp+16) lies inside this thread's stack (checked above).
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if ret.wrapping_sub(own_lo) >= own {
            return crate::cfi::capture(memo, buf, ret, fp + 16, next, lo, hi);
        }
        if next <= fp {
            return None;
        }
        fp = next;
    }
    None
}

/// The frame-pointer walk within the thread's stack `[lo, hi)`.
#[inline(never)]
fn capture_fp(buf: &mut [u64], lo: u64, hi: u64, entry: u64) -> Option<usize> {
    let mut fp = start_frame(entry);
    let mut n = 0;
    let mut skipping = true;
    while n < buf.len() {
        if fp < lo || fp.checked_add(16).is_none_or(|end| end > hi) || !fp.is_multiple_of(8) {
            break;
        }
        // SAFETY: [fp, fp+16) lies inside this thread's mapped stack (checked
        // above), so both words are readable; their values are only trusted
        // after the same check on the next round.
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if ret == 0 {
            break;
        }
        if !(skipping && is_own(ret)) {
            skipping = false;
            buf[n] = ret;
            n += 1;
        }
        if next <= fp {
            break;
        }
        fp = next;
    }
    Some(n)
}
