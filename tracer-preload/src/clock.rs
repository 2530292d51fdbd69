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
//! `CLOCK_REALTIME` over the process's first 2 ms, or longer when its
//! calibration points were too loose for that (at most 20 ms): until then,
//! and for good when the counter is unfit, the vDSO is read. Each
//! calibration point pairs a vDSO read with the counter read before and
//! after it, rejected when those are far apart (the thread was preempted);
//! the vDSO read its own counter between the two, so the point's counter
//! value is off by at most half their distance. The rate is taken once the
//! two points' uncertainties add up to at most 50 parts per million of the
//! ticks between them (see [`rate_ready`]): typical points (reads ~50
//! ticks apart here) allow it after ~0.4 ms, so the 2 ms floor decides; a
//! process's first point, often cold, gives way to a tighter one
//! ([`calibration_step`]). With a fixed 20 ms the vDSO's ~45 ns reads held
//! alloc_chain for a tenth of its run (133 -> 128 ms with 2 ms). The
//! mapping starts 1 µs ahead of the real time, so a thread's first counter
//! time is never below a vDSO time it read before the switch (the error of
//! a calibration point is well below that). A fork child keeps the parent's
//! mapping (same counter, same machine). The rate error is at most 50 parts
//! per million of elapsed time when taken before 20 ms (~10 with the ~26
//! ticks of uncertainty points usually have here), against
//! `CLOCK_REALTIME`'s NTP adjustments made during the run, which the
//! counter does not follow.

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
/// The calibration's starting point (0 = none yet): read and written only
/// by the thread holding `T0_HELD`.
static T0_TSC: AtomicU64 = AtomicU64::new(0);
static T0_NS: AtomicU64 = AtomicU64::new(0);
/// Half the distance of the counter reads around the starting point.
static T0_ERR: AtomicU64 = AtomicU64::new(0);
/// The time of the first point of all: a tighter point replaces the
/// starting point until `WINDOW_NS` after it.
static FIRST_NS: AtomicU64 = AtomicU64::new(0);
/// When the rate was taken, after the first point (ns), and the bound of
/// its error (parts per million): for `TRACER_STACK_STATS`.
static TAKEN_AFTER_NS: AtomicU64 = AtomicU64::new(0);
static TAKEN_PPM: AtomicU64 = AtomicU64::new(0);
/// Taken, never waited for, by a thread working on the calibration: a
/// thread that finds it taken (another thread, or this one interrupted by a
/// signal handler that reads the clock) reads the vDSO and moves on.
static T0_HELD: AtomicBool = AtomicBool::new(false);

/// Shortest calibration window.
const WINDOW_NS: u64 = 2_000_000;
/// Longest: the rate is taken then whatever the points' uncertainty.
const MAX_WINDOW_NS: u64 = 20_000_000;
/// The largest uncertainty of the rate taken before `MAX_WINDOW_NS`, in
/// parts per million.
const RATE_PPM: u64 = 50;
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

/// In a fork's child, which has only the forking thread: a calibration
/// step or installation another thread of the parent was inside is
/// abandoned (its flag would otherwise hold the child on the vDSO for
/// good); the calibration goes on from the starting point inherited.
pub fn after_fork_child() {
    T0_HELD.store(false, Ordering::Release);
    let _ = MODE.compare_exchange(INSTALLING, CALIBRATING, Ordering::AcqRel, Ordering::Acquire);
}

/// When the counter's rate was taken (microseconds after the first
/// calibration point) and the bound of its error (parts per million), once
/// the counter drives the clock.
pub fn calibration() -> Option<(u64, u64)> {
    (MODE.load(Ordering::Acquire) == TSC).then(|| {
        (
            TAKEN_AFTER_NS.load(Ordering::Relaxed) / 1000,
            TAKEN_PPM.load(Ordering::Relaxed),
        )
    })
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

/// A vDSO time and the counter at that moment (with its uncertainty, half
/// the distance of the two reads around it), when those reads are close
/// together.
fn point() -> (u64, Option<(u64, u64)>) {
    let a = rdtsc();
    let ns = vdso_ns();
    let b = rdtsc();
    let tight = b >= a && b - a <= TIGHT_TICKS;
    (ns, tight.then(|| (a + (b - a) / 2, (b - a).div_ceil(2))))
}

/// Adds the point (`ns`, `tsc` uncertain by `err` ticks) to the
/// calibration, `T0_HELD` held: the starting point when there is none, or
/// in its place when it is tighter and the first point of all was less
/// than `WINDOW_NS` ago (a process's first point is often cold: ~10,000
/// ticks of uncertainty in python3, which alone would hold the rate back
/// to `MAX_WINDOW_NS`). Returns the starting point's time and counter, and
/// both points' uncertainty in ticks, when the rate from it to this point
/// is to be taken.
fn calibration_step(ns: u64, tsc: u64, err: u64) -> Option<(u64, u64, u64)> {
    let n0 = T0_NS.load(Ordering::Relaxed);
    if n0 == 0 {
        FIRST_NS.store(ns, Ordering::Relaxed);
    }
    let early = ns < FIRST_NS.load(Ordering::Relaxed).saturating_add(WINDOW_NS);
    if n0 == 0 || (early && err < T0_ERR.load(Ordering::Relaxed)) {
        T0_TSC.store(tsc, Ordering::Relaxed);
        T0_ERR.store(err, Ordering::Relaxed);
        T0_NS.store(ns, Ordering::Relaxed);
        return None;
    }
    let t0 = T0_TSC.load(Ordering::Relaxed);
    let err0 = T0_ERR.load(Ordering::Relaxed);
    (tsc > t0 && rate_ready(ns.saturating_sub(n0), tsc - t0, err0 + err)).then_some((
        n0,
        t0,
        err0 + err,
    ))
}

/// Whether a rate measured between two calibration points is taken: `ns`
/// nanoseconds and `ticks` counter ticks apart, their counter values
/// uncertain by `err` ticks in all. From `WINDOW_NS` on when the
/// uncertainty is at most `RATE_PPM` of the ticks, from `MAX_WINDOW_NS`
/// on whatever it is.
fn rate_ready(ns: u64, ticks: u64, err: u64) -> bool {
    ns >= MAX_WINDOW_NS || (ns >= WINDOW_NS && err.saturating_mul(1_000_000 / RATE_PPM) <= ticks)
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
            let (ns, point) = point();
            let Some((tsc, err)) = point else { return ns };
            if T0_HELD.swap(true, Ordering::Acquire) {
                return ns;
            }
            let ready = calibration_step(ns, tsc, err);
            T0_HELD.store(false, Ordering::Release);
            let Some((n0, t0, err)) = ready else {
                return ns;
            };
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
                let after = ns.saturating_sub(FIRST_NS.load(Ordering::Relaxed));
                TAKEN_AFTER_NS.store(after, Ordering::Relaxed);
                TAKEN_PPM.store((err * 1_000_000).div_ceil(tsc - t0), Ordering::Relaxed);
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
        while vdso_ns() < start + 3 * MAX_WINDOW_NS {
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

    /// The rate is taken after 2 ms when the points are as tight as they
    /// usually are, later when they are loose, and at 20 ms in any case.
    #[test]
    fn the_rate_is_taken_once_its_points_allow_50_ppm() {
        // 3 GHz: 2 ms is 6M ticks; two points 100 ticks apart each.
        let ticks = |ns: u64| ns * 3;
        assert!(!rate_ready(1_999_999, ticks(1_999_999), 100));
        assert!(rate_ready(2_000_000, ticks(2_000_000), 100));
        // 50 ppm of 6M ticks is 300: an uncertainty of 301 waits.
        assert!(rate_ready(2_000_000, 6_000_000, 300));
        assert!(!rate_ready(2_000_000, 6_000_000, 301));
        // Looser points (1,000 ticks of uncertainty): 20M ticks, ~6.7 ms
        // at 3 GHz.
        assert!(!rate_ready(6_000_000, ticks(6_000_000), 1_000));
        assert!(rate_ready(7_000_000, ticks(7_000_000), 1_000));
        // 20 ms: taken, however loose.
        assert!(!rate_ready(19_999_999, 1_000, 1_000_000));
        assert!(rate_ready(20_000_000, 1_000, 1_000_000));
        assert!(rate_ready(20_000_000, 1_000, u64::MAX));
    }

    /// The clock's rate: over 100 ms after the switch, reads taken between
    /// two close vDSO reads stay within the rate's bound of them (50 ppm:
    /// 5 µs) plus the 1 µs head start, far inside what a rate measured
    /// over a window a tenth as long as it should be would miss by.
    #[test]
    fn the_rate_follows_the_real_time_within_its_bound() {
        let start = vdso_ns();
        while vdso_ns() < start + 2 * MAX_WINDOW_NS {
            now_ns();
        }
        if !uses_tsc() {
            return;
        }
        let base = vdso_ns();
        while vdso_ns() < base + 100_000_000 {}
        // The closest of many tries: a preempted try is far off.
        let worst = (0..1000)
            .filter_map(|_| {
                let a = vdso_ns();
                let t = now_ns();
                let b = vdso_ns();
                (b - a < 2_000).then(|| t.abs_diff(a + (b - a) / 2))
            })
            .min()
            .expect("a try between two close vDSO reads");
        // NTP may slew CLOCK_REALTIME by up to 500 ppm meanwhile: 50 µs
        // over the 100 ms, on top of the bound.
        assert!(worst < 60_000, "{worst} ns off CLOCK_REALTIME");
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
                    while vdso_ns() < start + 2 * MAX_WINDOW_NS {
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
