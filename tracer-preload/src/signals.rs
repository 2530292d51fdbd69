//! Fatal signals: the trace keeps every event up to the signal.
//!
//! A program killed by a signal whose default action ends it (a crash:
//! SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS; or SIGTERM, SIGINT, SIGHUP,
//! SIGQUIT, SIGPIPE, SIGXCPU, SIGXFSZ) never reaches `exit`. For each such
//! signal left at its default disposition when our constructor runs, a
//! handler is installed. For a crash it asks the writer to put everything
//! queued into the files (the mlyze spool then holds every event; `tracer`
//! reads it as it is, `tracer recover` finishes it) and waits at most a
//! second; for a signal that ends a sane process (SIGTERM, SIGINT, ...) it
//! has the files finished as at exit, without the leak scan (bounded as at
//! exit). Then it raises the signal again with the default disposition
//! restored, so the process dies of it exactly as it would have (status,
//! core dump).
//!
//! The handler must not be visible to the program: `sigaction` queries
//! of these signals report the default disposition while our handler is in
//! place, and a handler the program installs (with `sigaction`, `signal`,
//! `sysv_signal`, `bsd_signal` or `sigset`) replaces ours and reports the
//! default as the previous one. (CPython, for one, installs its SIGINT
//! handler only when it finds SIG_DFL there.) Only the raw `rt_sigaction`
//! system call sees ours.

use core::sync::atomic::{AtomicU64, Ordering};

use libc::{c_int, c_void};

use crate::{lifecycle, sys, tls};

/// The crashes handled: the heap may be damaged, the files are only
/// flushed before the process dies.
const CRASHES: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGSYS,
];

/// The other signals handled, which end a process in a sane state (sent to
/// it, or a write to a closed pipe): before dying of one the files are
/// finished, as at exit (no leak scan), so the trace needs no `tracer
/// recover`.
const TERMINATING: [c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGXCPU,
    libc::SIGXFSZ,
];

/// The name of a signal that ends a sane process ([`TERMINATING`]), as
/// the files say it ended.
pub fn name(sig: c_int) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "a signal",
    }
}

/// Bit `n` set: our handler is installed for signal `n`.
static OURS: AtomicU64 = AtomicU64::new(0);

fn bit(sig: c_int) -> u64 {
    if (1..64).contains(&sig) {
        1 << sig
    } else {
        0
    }
}

/// Whether our handler holds `sig`.
pub fn is_ours(sig: c_int) -> bool {
    OURS.load(Ordering::Acquire) & bit(sig) != 0
}

/// Our handler no longer holds `sig` (the program installed its own).
pub fn forget(sig: c_int) {
    OURS.fetch_and(!bit(sig), Ordering::AcqRel);
}

/// Installs the handler for every fatal signal still at its default.
/// Called once by the constructor, before any thread of the program starts.
pub fn install() {
    for sig in CRASHES.into_iter().chain(TERMINATING) {
        // SAFETY: sigaction with a null new action only reads the current
        // disposition into `old`, a valid local.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        if unsafe { real_sigaction(sig, core::ptr::null(), &mut old) } != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid value (empty mask); the
        // handler is a function of the right type that lives as long as the
        // process.
        let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
        act.sa_sigaction =
            on_fatal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        // Reset to the default on entry (so raising it again ends the
        // process), not blocked while handled (so that raise is delivered at
        // once), on the alternate stack when the thread has one (stack
        // overflows).
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER | libc::SA_ONSTACK;
        OURS.fetch_or(bit(sig), Ordering::AcqRel);
        // SAFETY: `act` is fully initialised; the old action is not wanted.
        if unsafe { real_sigaction(sig, &act, core::ptr::null_mut()) } != 0 {
            forget(sig);
        } else {
            crate::side::learn_restorer(sig);
        }
    }
}

extern "C" fn on_fatal(sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SA_RESETHAND restored the default: the next delivery ends the process.
    forget(sig);
    let saved = sys::errno();
    before_death(sig, TERMINATING.contains(&sig));
    // SAFETY: tgkill on our own thread with a valid signal number; the
    // disposition is the default now and the signal is not blocked (it was
    // just delivered, and SA_NODEFER keeps it unblocked in the handler).
    unsafe {
        libc::syscall(libc::SYS_tgkill, sys::raw_getpid(), sys::raw_gettid(), sig);
    }
    // Still alive (the program raced us to a new handler): return to it.
    sys::set_errno(saved);
}

/// Before the program raises `sig` at itself (`raise`): when the signal
/// will end the process (one of ours, at its default disposition now, and
/// our handler not in place), the files are finished first, as our handler
/// does for a signal that arrives. The idiom of a handler that cleans up,
/// restores the default and raises the signal again (Node.js for SIGINT and
/// SIGTERM, coreutils' `sort`) ended the process with its trace a spool of
/// what the writer had flushed before (nothing of a short run). When the
/// signal is blocked on this thread (inside a handler of it, without
/// `SA_NODEFER`: Node.js's; or a program that takes it with `sigwait` and
/// runs on), or for a crash, the files are only flushed: the spool then
/// holds every event, and tracing goes on should the process live.
pub fn before_raise(sig: c_int) {
    before_signal_to_self(sig, true);
}

/// Before `kill(pid, sig)` (and `killpg`, as `kill(-pgrp, sig)`): as for
/// `raise` when the signal reaches this process: `pid` is ours, 0 (our
/// process group) or minus our group (Linux leaves the caller out of
/// `kill(-1, ..)`). The older idiom of a handler that restores the default
/// and signals itself again uses `kill(getpid(), sig)` (as do `kill -TERM
/// $$` in a shell and `kill(0, ..)` to end a process group), and
/// `kill(getpid(), SIGKILL)` ends the process with nothing left to run: the
/// files are finished first.
pub fn before_kill(pid: libc::pid_t, sig: c_int) {
    if !ends_process(sig) {
        return;
    }
    let me = sys::raw_getpid() as libc::pid_t;
    let reaches = pid == me
        || pid == 0
        || (pid < -1 && {
            // SAFETY: getpgrp has no arguments and cannot fail. (A group
            // id is positive: its negation cannot overflow, `-pid` could.)
            pid == -unsafe { libc::getpgrp() }
        });
    if reaches {
        before_signal_to_self(sig, true);
    }
}

/// Before `pthread_kill(thread, sig)`: as for `raise` when `thread` is the
/// caller. Sent to another thread of the process, whose signal mask this
/// one cannot see, the files are only flushed: the spool then holds every
/// event if the signal ends the process, and tracing goes on if it does not.
pub fn before_pthread_kill(thread: libc::pthread_t, sig: c_int) {
    if ends_process(sig) {
        // SAFETY: pthread_self has no preconditions.
        let own = thread == unsafe { libc::pthread_self() };
        before_signal_to_self(sig, own);
    }
}

/// Before the raw `tgkill(tgid, tid, sig)` (through `syscall()`): as for
/// `pthread_kill` when `tgid` is this process, the calling thread's own
/// when `tid` is.
pub fn before_tgkill(tgid: libc::pid_t, tid: libc::pid_t, sig: c_int) {
    if ends_process(sig) && tgid == sys::raw_getpid() as libc::pid_t {
        before_signal_to_self(sig, tid == sys::raw_gettid() as libc::pid_t);
    }
}

/// Before the raw `tkill(tid, sig)`: as for `tgkill` when `tid` is a thread
/// of this process (asked of the kernel with signal 0, only for a signal
/// that would end it).
pub fn before_tkill(tid: libc::pid_t, sig: c_int) {
    if !ends_process(sig) {
        return;
    }
    let pid = sys::raw_getpid() as libc::pid_t;
    let own = tid == sys::raw_gettid() as libc::pid_t;
    // SAFETY: signal 0 only checks that the thread exists in the group
    // (the program's errno kept).
    let ours = own
        || sys::keep_errno(|| unsafe {
            sys::direct_syscall(
                libc::SYS_tgkill,
                &[libc::c_long::from(pid), libc::c_long::from(tid), 0],
            )
        }) == 0;
    if ours {
        before_signal_to_self(sig, own);
    }
}

/// Whether `sig` at its default disposition ends the process.
fn ends_process(sig: c_int) -> bool {
    sig == libc::SIGKILL || TERMINATING.contains(&sig) || CRASHES.contains(&sig)
}

/// `sig` is about to be sent to this process, to the calling thread when
/// `own_thread`: see [`before_raise`]. SIGKILL always ends it.
fn before_signal_to_self(sig: c_int, own_thread: bool) {
    let saved = sys::errno();
    if sig == libc::SIGKILL {
        before_death(sig, true);
        sys::set_errno(saved);
        return;
    }
    let terminating = TERMINATING.contains(&sig);
    if (!terminating && !CRASHES.contains(&sig)) || is_ours(sig) {
        return;
    }
    // SAFETY: sigaction is a C struct of integers and pointers, for which
    // zero is valid; the query writes it and changes nothing.
    let dfl = unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        real_sigaction(sig, core::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
    };
    if !dfl {
        return;
    }
    // SAFETY: a sigset_t is plain data; the query fills it and changes
    // nothing; sigismember reads it.
    let blocked = !own_thread
        || unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set) == 0
                && libc::sigismember(&set, sig) == 1
        };
    before_death(sig, terminating && !blocked);
    sys::set_errno(saved);
}

/// Before `sig` ends the process: the files finished when `finish` (a
/// signal that ends a sane process, delivered now), flushed otherwise (a
/// crash; a raised signal still blocked). `lifecycle::before_kill` itself
/// only flushes on a thread inside glibc's allocator.
fn before_death(sig: c_int, finish: bool) {
    let _g = tls::enter();
    if finish {
        lifecycle::before_kill(sig);
    } else {
        lifecycle::before_abort();
    }
}

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// glibc's `sigaction`.
///
/// # Safety
/// Same contract as `sigaction(2)`.
pub unsafe fn real_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    crate::syscalls::real!(REAL, "sigaction\0");
    // SAFETY: glibc's sigaction has this type.
    match unsafe { REAL.get::<SigactionFn>() } {
        // SAFETY: forwarded unchanged from our caller.
        Some(f) => unsafe { f(sig, act, old) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// The `sigaction` the program sees: ours hidden behind the default.
///
/// # Safety
/// Same contract as `sigaction(2)`.
pub unsafe fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !is_ours(sig) {
        // SAFETY: forwarded unchanged.
        let r = unsafe { real_sigaction(sig, act, old) };
        if r == 0 && !act.is_null() {
            crate::side::learn_restorer(sig);
        }
        return r;
    }
    // SAFETY: forwarded with the old action not asked for (it is ours).
    let r = unsafe { real_sigaction(sig, act, core::ptr::null_mut()) };
    if r == 0 {
        crate::side::learn_restorer(sig);
        if !act.is_null() {
            forget(sig);
        }
        if !old.is_null() {
            // SAFETY: the caller passed a writable sigaction; the default
            // disposition is all zeros (SIG_DFL, empty mask, no flags).
            unsafe { core::ptr::write(old, core::mem::zeroed()) };
        }
    }
    r
}

/// For `signal` and its relatives: calls glibc's function `real` and, when
/// our handler was the one replaced, reports the default as the previous
/// handler.
///
/// # Safety
/// `real` names a function of type `fn(c_int, sighandler_t) -> sighandler_t`.
pub unsafe fn replace_with(
    real: &crate::syscalls::Real,
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    type F = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    // SAFETY: the function `real` names has this type (caller's contract).
    let Some(f) = (unsafe { real.get::<F>() }) else {
        sys::set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    };
    let ours = is_ours(sig);
    // SAFETY: forwarded unchanged.
    let prev = unsafe { f(sig, handler) };
    if prev != libc::SIG_ERR {
        crate::side::learn_restorer(sig);
    }
    if ours && prev != libc::SIG_ERR {
        forget(sig);
        return libc::SIG_DFL;
    }
    prev
}
