//! The tracer's one clock: nanoseconds since the Unix epoch, for the
//! allocation events and the system calls alike (both read it through
//! `sys::now_ns`, so their times stay comparable).
//!
//! A vDSO `clock_gettime(CLOCK_REALTIME)` costs ~25 ns in a virtual machine
//! and every malloc/free pair took two. When the processor's time-stamp
//! counter is invariant (CPUID 0x8000_0007 EDX bit 8: constant rate, ticking
//! in every power state) and the kernel itself keeps time with it (its
//! clocksource is `tsc`, so the counters of the cores agree), the clock
//! becomes `rdtsc` and one multiplication:
//!
//! `ns = BASE_NS + ((tsc - BASE_TSC) * MULT) >> 32`
//!
//! `MULT` (nanoseconds per tick, 32.32 fixed point) is measured against
//! `CLOCK_REALTIME` over the first ≥ 20 ms of the process: until then, and
//! for good when the counter is unfit, the vDSO is read. Each calibration
//! point pairs a vDSO read with the counter read before and after it,
//! rejected when those are far apart (the thread was preempted). The
//! mapping starts 1 µs ahead of the real time, so a thread's first counter
//! time is never below a vDSO time it read before the switch (the error of
//! a calibration point is well below that). A fork child keeps the parent's
//! mapping (same counter, same machine). The rate error is a few parts per
//! million of elapsed time, against `CLOCK_REALTIME`'s NTP adjustments
//! made during the run, which the counter does not follow.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
/// The counter is unfit: the vDSO for good.
const VDSO: u8 = 1;
const CALIBRATING: u8 = 2;
/// One thread is writing the mapping.
const INSTALLING: u8 = 3;
const TSC: u8 = 4;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);
static BASE_TSC: AtomicU64 = AtomicU64::new(0);
static BASE_NS: AtomicU64 = AtomicU64::new(0);
static MULT: AtomicU64 = AtomicU64::new(0);
/// The first calibration point (`T0_NS` is set last; 0 = none yet).
static T0_TSC: AtomicU64 = AtomicU64::new(0);
static T0_NS: AtomicU64 = AtomicU64::new(0);
static T0_CLAIMED: AtomicBool = AtomicBool::new(false);

/// Calibration window.
const WINDOW_NS: u64 = 20_000_000;
/// How far ahead of the real time the counter's mapping starts.
const AHEAD_NS: u64 = 1_000;
/// Counter ticks allowed around one vDSO read of a calibration point.
const TIGHT_TICKS: u64 = 20_000;

/// Nanoseconds since the Unix epoch.
#[inline]
pub fn now_ns() -> u64 {
    if MODE.load(Ordering::Acquire) == TSC {
        let base = BASE_TSC.load(Ordering::Relaxed);
        // Another core's counter may trail the base by a few ticks.
        let d = (rdtsc() as i64).wrapping_sub(base as i64).max(0) as u64;
        let mult = MULT.load(Ordering::Relaxed);
        return BASE_NS
            .load(Ordering::Relaxed)
            .wrapping_add(((d as u128 * mult as u128) >> 32) as u64);
    }
    slow()
}

/// Whether the counter drives the clock now.
#[cfg(test)]
pub fn uses_tsc() -> bool {
    MODE.load(Ordering::Acquire) == TSC
}

#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC only reads the time-stamp counter (every x86-64
    // processor has it; CR4.TSD is never set for Linux user space).
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// vDSO `clock_gettime(CLOCK_REALTIME)`.
fn vdso_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// A vDSO time and the counter at that moment, when the two reads around
/// it are close together.
fn point() -> (u64, Option<u64>) {
    let a = rdtsc();
    let ns = vdso_ns();
    let b = rdtsc();
    let tight = b >= a && b - a <= TIGHT_TICKS;
    (ns, tight.then(|| a + (b - a) / 2))
}

/// CPUID: the counter runs at a constant rate in every state.
fn invariant_tsc() -> bool {
    crate::sys::extended_cpuid(0x8000_0007).is_some_and(|r| r.edx & (1 << 8) != 0)
}

/// Whether the kernel keeps time with the counter (raw system calls: this
/// may run inside any hook, before or after the syscall capture starts).
fn kernel_uses_tsc() -> bool {
    let path = c"/sys/devices/system/clocksource/clocksource0/current_clocksource";
    let mut buf = [0u8; 16];
    // SAFETY: raw openat/read/close on a NUL-terminated path and a local
    // buffer of the length given; the descriptor is closed before return.
    let n = unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        crate::sys::raw_close(fd as core::ffi::c_int);
        n
    };
    n >= 3 && buf[..n as usize].trim_ascii_end() == b"tsc"
}

#[cold]
fn slow() -> u64 {
    match MODE.load(Ordering::Acquire) {
        UNKNOWN => {
            // Both checks run here, at the first clock read (start-up), so the
            // raw openat/read/close of the clocksource check never lands in the
            // middle of the program's own system calls.
            let next = if invariant_tsc() && kernel_uses_tsc() {
                CALIBRATING
            } else {
                VDSO
            };
            let _ = MODE.compare_exchange(UNKNOWN, next, Ordering::AcqRel, Ordering::Acquire);
            slow()
        }
        CALIBRATING => {
            let (ns, tsc) = point();
            let Some(tsc) = tsc else { return ns };
            let n0 = T0_NS.load(Ordering::Acquire);
            if n0 == 0 {
                if !T0_CLAIMED.swap(true, Ordering::AcqRel) {
                    T0_TSC.store(tsc, Ordering::Relaxed);
                    T0_NS.store(ns, Ordering::Release);
                }
                return ns;
            }
            let t0 = T0_TSC.load(Ordering::Relaxed);
            if ns < n0 + WINDOW_NS || tsc <= t0 {
                return ns;
            }
            if MODE
                .compare_exchange(CALIBRATING, INSTALLING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return ns;
            }
            let mult = (((ns - n0) as u128) << 32) / (tsc - t0) as u128;
            // Between 0.1 and 10 ns a tick (10 GHz .. 100 MHz).
            let sane = (1u128 << 32) / 10..=10u128 << 32;
            if sane.contains(&mult) {
                BASE_TSC.store(tsc, Ordering::Relaxed);
                BASE_NS.store(ns + AHEAD_NS, Ordering::Relaxed);
                MULT.store(mult as u64, Ordering::Relaxed);
                MODE.store(TSC, Ordering::Release);
            } else {
                MODE.store(VDSO, Ordering::Release);
            }
            ns
        }
        TSC => now_ns(),
        _ => vdso_ns(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the calibration window the clock follows CLOCK_REALTIME closely
    /// and never goes back on one thread, across the switch too.
    #[test]
    fn follows_the_real_time_and_never_goes_back() {
        let start = vdso_ns();
        let mut last = 0u64;
        let mut reads = 0u64;
        while vdso_ns() < start + 3 * WINDOW_NS {
            for _ in 0..1000 {
                let t = now_ns();
                assert!(t >= last, "went back from {last} to {t}");
                last = t;
                reads += 1;
            }
        }
        assert!(reads > 1000);
        if invariant_tsc() && kernel_uses_tsc() {
            assert!(uses_tsc(), "the counter should drive the clock by now");
        }
        // Against the vDSO, in both orders: within 1 µs ahead plus the
        // calibration error (generous: a shared machine may preempt us).
        for _ in 0..100 {
            let a = vdso_ns();
            let t = now_ns();
            let b = vdso_ns();
            assert!(
                t + 200_000 >= a && t <= b + AHEAD_NS + 200_000,
                "{a} {t} {b}"
            );
        }
    }

    /// Reads ordered between threads (here by a lock) come out in order up
    /// to the processor's reordering of `rdtsc`, well under a microsecond:
    /// through the switch from the vDSO to the counter when this test
    /// starts the clock, on the counter alone otherwise.
    #[test]
    fn reads_ordered_between_threads_go_back_by_less_than_a_microsecond() {
        use std::sync::{Arc, Mutex};
        let last = Arc::new(Mutex::new((0u64, 0u64)));
        let start = vdso_ns();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let last = Arc::clone(&last);
                std::thread::spawn(move || {
                    while vdso_ns() < start + 2 * WINDOW_NS {
                        let mut l = last.lock().unwrap();
                        let t = now_ns();
                        let (latest, back) = *l;
                        *l = (latest.max(t), back.max(latest.saturating_sub(t)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let back = last.lock().unwrap().1;
        assert!(
            back < 1_000,
            "a read came out {back} ns before one ordered ahead of it"
        );
    }
}
