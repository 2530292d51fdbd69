//! The tracer's life, in one place: the state machine, start-up, the hand-off
//! of events to the writer, fork, exec, exit.
//!
//! ```text
//!  NOT_YET ──first hook──▶ INITIALISING ──constructor──▶ TRACING ──exit/exec──▶ SHUTTING_DOWN
//!     │                     (events kept in              (channel +          (hooks pass
//!     │                      a static list)               writer thread)      through)
//!     └──────────────── bad configuration, TRACER_FOLLOW_FORK=0 child ──────▶ DISABLED
//! ```
//!
//! The first allocation can come from the dynamic loader before any
//! constructor ran (and before the environment can be read), so the first hook
//! only starts the clock and keeps events in a spin-locked list. Our
//! constructor reads the configuration, creates the files, switches to the
//! channel under that same lock (so the early list precedes everything in the
//! channel) and starts the writer thread with the list. No thread is started
//! and no I/O is done from inside an allocation during start-up.
//!
//! Exit (after the last exit handler: see [`defer_exit`]), `_exit`, and
//! `exec` all stop the writer, which
//! drains the channel, symbolizes, and finishes the files (exit and `_exit`
//! first ask for the leak scan of `scan`, which the writer runs after the
//! drain); the wait is bounded
//! so a stuck writer never holds the process. A fork child (followed) gets a
//! fresh channel, files and writer; its copy of the parent's pending state is
//! dropped unwritten. A `vfork` child shares our memory but not our pid: the
//! lifecycle entry points check the raw pid and leave everything alone there.
//! A child made by the clone system call without `CLONE_VM` runs no fork
//! handler: it is not traced, and stops tracing at its first wait for room
//! (see [`stop_if_left_behind`]).

use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use format_writers::blocks::BlockFile;
use std::cell::UnsafeCell;
use std::os::fd::IntoRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use format_writers::{
    callgrind, dumpalloc, malt, mlyze, output, tlv, Format, Process, TraceWriter,
};

use crate::config::{self, Config, Unwind};
use crate::intern::{stack_key, NO_STACK};
use crate::writer::{self, Control, Msg, PendingOutput, Setup};
use crate::{fds, side, sys, tls, unwind};

const NOT_YET: u8 = 0;
const INITIALISING: u8 = 1;
const TRACING: u8 = 2;
const SHUTTING_DOWN: u8 = 3;
const DISABLED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(NOT_YET);
/// The pid whose trace we write (a vfork child differs and is left alone).
static TRACED_PID: AtomicU32 = AtomicU32::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);
static DEPTH: AtomicUsize = AtomicUsize::new(config::DEFAULT_DEPTH);
static UNWIND_FP: AtomicBool = AtomicBool::new(false);
static SENDER: AtomicPtr<Sender<Msg>> = AtomicPtr::new(core::ptr::null_mut());
static CONTROL: AtomicPtr<Control> = AtomicPtr::new(core::ptr::null_mut());
static WRITER_THREAD: AtomicU64 = AtomicU64::new(0);
static WRITER_RUNNING: AtomicBool = AtomicBool::new(false);
static CONFIG: AtomicPtr<Config> = AtomicPtr::new(core::ptr::null_mut());
/// Allocation events are wanted (false when only system calls are written).
static ALLOCS: AtomicBool = AtomicBool::new(true);

/// Messages the channel holds (56 bytes a slot with its stamp: 28 KiB).
/// Only threads without a lane use it (`TRACER_LANE=0`, or no memory for a
/// lane); the writer is the slower side, so the queue is full most of the
/// time under load whatever its length. The channel writes every slot's
/// stamp when it is made, in every traced process: 4,096 slots were 56
/// page faults of every process's start (~0.1 ms of a traced `/bin/true`).
const CHANNEL_CAPACITY: usize = 512;
/// The exit drain gives up after this long without progress from the writer.
const STALL_LIMIT: Duration = Duration::from_secs(5);
/// … and after this long in total.
const EXIT_LIMIT: Duration = Duration::from_secs(120);

/// The early-event list and its spin lock.
struct Early {
    locked: AtomicBool,
    events: UnsafeCell<Vec<Msg>>,
}

// SAFETY: `events` is only touched by the thread holding `locked`.
unsafe impl Sync for Early {}

static EARLY: Early = Early {
    locked: AtomicBool::new(false),
    events: UnsafeCell::new(Vec::new()),
};

impl Early {
    fn lock(&self) {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
    fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
    /// Runs `f` on the list, under the lock.
    fn with<R>(&self, f: impl FnOnce(&mut Vec<Msg>) -> R) -> R {
        self.lock();
        // SAFETY: we hold the lock, so no other reference to the list exists.
        let r = f(unsafe { &mut *self.events.get() });
        self.unlock();
        r
    }
}

/// Whether `TRACER_QUIET` silences our lines on stderr.
pub fn quiet() -> bool {
    config().is_none_or(|c| c.quiet)
}

fn config() -> Option<&'static Config> {
    let p = CONFIG.load(Ordering::Acquire);
    // SAFETY: CONFIG is set once to a leaked Box and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

// ---------------------------------------------------------------- hot path

/// Called by a hook (inside the guard): hands `msg` to the writer, or to the
/// early list before the writer exists. False if the tracer is not running.
#[inline(always)]
fn deliver(msg: Msg) -> bool {
    match STATE.load(Ordering::Acquire) {
        TRACING => hand_off(msg),
        NOT_YET | INITIALISING => deliver_early(msg),
        _ => false,
    }
}

#[cold]
#[inline(never)]
fn deliver_early(msg: Msg) -> bool {
    if STATE.load(Ordering::Acquire) == NOT_YET {
        begin();
    }
    let mut msg = Some(msg);
    let kept = EARLY.with(|list| {
        if STATE.load(Ordering::Acquire) == INITIALISING {
            list.extend(msg.take());
            true
        } else {
            false
        }
    });
    match msg {
        Some(m) if !kept && STATE.load(Ordering::Acquire) == TRACING => hand_off(m),
        _ => kept,
    }
}

/// First hook call ever: start the clock, learn who we are.
#[cold]
fn begin() {
    if STATE
        .compare_exchange(NOT_YET, INITIALISING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        START_NS.store(sys::now_ns(), Ordering::Relaxed);
        TRACED_PID.store(sys::raw_getpid(), Ordering::Relaxed);
        unwind::init();
    }
}

/// While tracing: into this thread's lane, else (no lane could be had, or
/// `TRACER_LANE=0`) into the channel (see `lane`).
#[inline(always)]
fn hand_off(msg: Msg) -> bool {
    match crate::lane::offer(msg) {
        None => true,
        Some(msg) => send(msg),
    }
}

/// Pushes into the channel; when it is full, waits for the writer (never
/// dropping the event) unless tracing stopped meanwhile.
#[inline(never)]
fn send(msg: Msg) -> bool {
    let tx = SENDER.load(Ordering::Acquire);
    if tx.is_null() {
        return false;
    }
    // SAFETY: senders are leaked boxes, never freed while the process lives.
    let tx = unsafe { &*tx };
    let mut msg = msg;
    let mut wait = writer::RoomWait::default();
    loop {
        match tx.try_send(msg) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(m)) => {
                if STATE.load(Ordering::Acquire) != TRACING {
                    return false;
                }
                msg = m;
                wait.pause();
            }
        }
    }
}

/// `entry`: the exported allocation function's frame (0: unknown), where
/// the capture starts.
#[inline]
fn stack_now(entry: u64) -> u64 {
    let depth = DEPTH.load(Ordering::Relaxed);
    if depth == 0 {
        return NO_STACK;
    }
    let method = unwind_method();
    // Everything a capture of the default depth uses is in one thread-local
    // (`tls::Capture`): the frame buffer (zeroing even 512 bytes on the
    // stack was ~50 instructions an event), the unwinding memo, the stack
    // bounds, the sent stacks. Deeper captures use a fresh array, and
    // threads whose TLS is being torn down neither memo nor sent cache.
    if depth <= config::DEFAULT_DEPTH {
        if let Some(key) = crate::lane::with_capture(|c| {
            let tls::Capture {
                frames,
                memo,
                sent,
                bounds,
            } = c;
            let frames = &mut frames[..depth];
            let n = unwind::capture(method, frames, Some((memo, bounds)), entry);
            send_stack(&frames[..n], Some(sent))
        }) {
            return key;
        }
    }
    let mut large = [0u64; config::MAX_DEPTH];
    let frames = &mut large[..depth.min(config::MAX_DEPTH)];
    let key = crate::lane::with_capture(|c| {
        let n = unwind::capture(method, frames, Some((&mut c.memo, &mut c.bounds)), entry);
        send_stack(&frames[..n], Some(&mut c.sent))
    });
    key.unwrap_or_else(|| {
        let n = unwind::capture(method, frames, None, entry);
        send_stack(&frames[..n], None)
    })
}

/// The capture method `TRACER_UNWIND` chose.
#[inline(always)]
fn unwind_method() -> Unwind {
    if UNWIND_FP.load(Ordering::Relaxed) {
        Unwind::Fp
    } else {
        Unwind::Dwarf
    }
}

/// The key of `frames`; sends the stack if this thread has not yet (`sent`
/// says; always without one).
#[inline(always)]
fn send_stack(frames: &[u64], sent: Option<&mut tls::Sent>) -> u64 {
    let key = stack_key(frames);
    if key == NO_STACK {
        return key;
    }
    match sent {
        Some(sent) => {
            if !sent.already(key) && !deliver_stack(key, frames) {
                sent.forget(key);
            }
        }
        None => {
            deliver_stack(key, frames);
        }
    }
    key
}

/// [`deliver`] for a stack: copied into this thread's lane when it has one,
/// boxed for the channel or the early list otherwise (a block of the
/// program's heap, allocated here and freed by the writer).
#[inline]
fn deliver_stack(key: u64, frames: &[u64]) -> bool {
    tls::count_stack_sent();
    if STATE.load(Ordering::Acquire) == TRACING && crate::lane::offer_stack(key, frames) {
        return true;
    }
    deliver(Msg::Stack {
        key,
        frames: frames.into(),
        tid: tls::tid(),
    })
}

/// Whether hooks should record; starts the tracer on the very first call (so
/// the first stack is already captured without our own frames).
#[inline]
fn active() -> bool {
    match STATE.load(Ordering::Relaxed) {
        INITIALISING | TRACING => true,
        NOT_YET => {
            begin();
            true
        }
        _ => false,
    }
}

/// A new block exists (called after the real allocation returned it);
/// `entry` is the exported function's frame (see `unwind::entry_frame`).
#[inline]
pub fn on_alloc(addr: u64, size: u64, from_realloc: bool, entry: u64) {
    if !active() || !ALLOCS.load(Ordering::Relaxed) {
        return;
    }
    let r = side::Recording::start();
    let Some(g) = tls::enter() else {
        return handler_event(r, side::alloc_kind(from_realloc), addr, size, entry);
    };
    let saved = sys::errno();
    if side::pending() {
        deliver_handler_events();
    }
    let key = stack_now(entry);
    let time_ns = sys::now_ns();
    deliver(Msg::Alloc {
        time_ns,
        tid: tls::tid(),
        addr,
        size,
        key,
        from_realloc,
    });
    done_recording(g, r, saved);
}

/// A block is about to be released (called before the real free runs). With
/// `realloc`, the release is provisional until the realloc's outcome is known.
#[inline]
pub fn on_free(addr: u64, realloc: bool) {
    if !active() || !ALLOCS.load(Ordering::Relaxed) {
        return;
    }
    let r = side::Recording::start();
    let Some(g) = tls::enter() else {
        return handler_event(r, side::free_kind(realloc), addr, 0, 0);
    };
    let saved = sys::errno();
    if side::pending() {
        deliver_handler_events();
    }
    let (time_ns, tid) = (sys::now_ns(), tls::tid());
    if realloc {
        deliver(Msg::ReallocFree { time_ns, tid, addr });
    } else {
        deliver(Msg::Free { time_ns, tid, addr });
    }
    done_recording(g, r, saved);
}

/// The realloc announced by `on_free(_, true)` failed: the old block lives on.
pub fn on_realloc_failed() {
    if !active() || !ALLOCS.load(Ordering::Relaxed) {
        return;
    }
    let r = side::Recording::start();
    let Some(g) = tls::enter() else {
        return handler_event(r, side::REALLOC_FAILED, 0, 0, 0);
    };
    let saved = sys::errno();
    if side::pending() {
        deliver_handler_events();
    }
    deliver(Msg::ReallocFailed { tid: tls::tid() });
    done_recording(g, r, saved);
}

/// The end of an allocation hook's recording: the events of signal
/// handlers that interrupted it follow its own (`side`), then the guard is
/// left, and only then the recording mark (a handler arriving in between
/// records as any call outside the guard does). A handler that came after
/// the last look and before the guard was left leaves its events for the
/// thread's next hook, which delivers them before its own (at its start,
/// above).
#[inline(always)]
fn done_recording(g: tls::Guard, r: side::Recording, errno: libc::c_int) {
    if side::pending() {
        deliver_handler_events();
    }
    sys::set_errno(errno);
    drop(g);
    drop(r);
}

/// An allocation call that arrived under this thread's guard: recorded
/// into the side buffer if a signal handler made it while a hook recorded
/// (`r` holds that hook's mark, put back first).
#[cold]
#[inline(never)]
fn handler_event(r: side::Recording, kind: u64, addr: u64, size: u64, entry: u64) {
    let rec = r.outer();
    drop(r);
    let saved = sys::errno();
    let depth = DEPTH.load(Ordering::Relaxed).min(config::MAX_DEPTH);
    let method = unwind_method();
    side::record(rec, kind, addr, size, depth, |frames| {
        unwind::capture_in_handler(method, frames, entry)
    });
    sys::set_errno(saved);
}

/// Moves the side buffer's events into this thread's lane, in order.
#[cold]
#[inline(never)]
fn deliver_handler_events() {
    let tid = tls::tid();
    side::drain(|kind, time_ns, addr, size, frames| {
        let msg = match kind {
            side::ALLOC | side::REALLOC_ALLOC => {
                // No frames (a stack depth of 0) is `NO_STACK`.
                let key = crate::lane::with_capture(|c| send_stack(frames, Some(&mut c.sent)))
                    .unwrap_or_else(|| send_stack(frames, None));
                Msg::Alloc {
                    time_ns,
                    tid,
                    addr,
                    size,
                    key,
                    from_realloc: kind == side::REALLOC_ALLOC,
                }
            }
            side::FREE => Msg::Free { time_ns, tid, addr },
            side::REALLOC_FREE => Msg::ReallocFree { time_ns, tid, addr },
            side::REALLOC_FAILED => Msg::ReallocFailed { tid },
            _ => return,
        };
        deliver(msg);
    });
}

pub fn on_marker(name: &[u8]) {
    if !active() {
        return;
    }
    let Some(_g) = tls::enter() else { return };
    let saved = sys::errno();
    let name: Box<str> = String::from_utf8_lossy(name).into();
    deliver(Msg::Marker {
        time_ns: sys::now_ns(),
        tid: tls::tid(),
        name,
    });
    sys::set_errno(saved);
}

/// Whether records are taken now (the writer runs or is about to start):
/// system calls go to their thread's ring only then (`syscalls::ring`).
#[inline]
pub fn accepting() -> bool {
    matches!(STATE.load(Ordering::Acquire), INITIALISING | TRACING)
}

// ---------------------------------------------------------------- start-up

/// Our constructor: configuration, files, writer thread, fork and exit
/// handlers.
pub fn constructor() {
    let _g = tls::enter();
    sys::remember_stderr();
    begin();
    let (cfg, complaints) = Config::from_lookup(|name| std::env::var(name).ok());
    crate::preload::remember_environment();
    if !cfg.quiet {
        for c in &complaints {
            sys::stderr_line(c);
        }
    }
    crate::cfi::init();
    if cfg.stack_depth == 0 {
        crate::cfi::keep_context();
    }
    crate::hooks::resolve_usable_size();
    // Every wrapper's lookup of glibc's function, now rather than at its
    // first call: glibc's `dlsym` bookkeeping clears the calling thread's
    // pending `dlerror()` message (99 lookups, ~40-70 us on this host; on
    // the writer thread they raced the program's first calls).
    crate::syscalls::resolve_all();
    let redirected = if cfg.enabled && cfg.allocations() {
        crate::got::redirect()
    } else {
        None
    };
    if let (Some(r), false) = (redirected, cfg.quiet) {
        sys::stderr_line(&format!(
            "{} defines malloc itself: {} import slots of {} libraries now lead to the tracer; \
             the program's own calls to it are not recorded",
            sys::exe_path(),
            r.slots,
            r.libraries
        ));
    } else if cfg.enabled && cfg.allocations() && !cfg.quiet {
        if let Some(who) = crate::hooks::malloc_taken_by() {
            sys::stderr_line(&format!(
                "{who} defines malloc ahead of libtracer.so: its allocations go around the \
                 tracer and are not recorded"
            ));
        }
    }
    DEPTH.store(cfg.stack_depth, Ordering::Relaxed);
    UNWIND_FP.store(cfg.unwind == Unwind::Fp, Ordering::Relaxed);
    ALLOCS.store(cfg.allocations(), Ordering::Relaxed);
    if cfg.enabled && cfg.wants_syscalls {
        crate::syscalls::configure(&cfg.syscalls, cfg.syscall_data);
    }
    // With only syscall capture requested no allocation is recorded, so there
    // are no live blocks to classify: the scan would be pure cost at exit.
    crate::scan::set_enabled(cfg.leak_scan && cfg.allocations());
    if crate::scan::env_lowers_mmap_threshold(
        std::env::var_os("MALLOC_MMAP_THRESHOLD_").as_deref(),
        std::env::var_os("GLIBC_TUNABLES").as_deref(),
    ) {
        crate::scan::set_exact_sizes();
    }
    CONFIG.store(Box::into_raw(Box::new(cfg)), Ordering::Release);
    // SAFETY: the handlers are plain functions that stay valid for the life of
    // the process; registering them has no other precondition.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
        sys::at_quick_exit(at_quick_exit);
    }
    let enabled = config().is_some_and(|c| c.enabled);
    if !enabled || !start(None) {
        disable();
        return;
    }
    if crate::scan::enabled() {
        crate::scan::keep_maps_open();
    }
    crate::signals::install();
}

/// Drops every early event and stops tracing for good.
fn disable() {
    EARLY.with(|list| {
        STATE.store(DISABLED, Ordering::Release);
        list.clear();
        list.shrink_to_fit();
    });
}

/// The name the program was started as, for `%e`: the last part of the
/// path given to `exec` (`redis-server`, not the `redis-check-rdb` its
/// symlink leads to; a script's name, not its interpreter's), as a user who
/// typed the command expects. The executable's own file name when `exec`
/// was given a descriptor (`fexecve`: `/dev/fd/N`) or no path.
fn exe_name() -> String {
    let started =
        sys::exec_path().filter(|p| !p.starts_with("/dev/fd/") && !p.starts_with("/proc/"));
    let path = started.as_deref().unwrap_or(sys::exe_path());
    std::path::Path::new(path)
        .file_name()
        .or_else(|| std::path::Path::new(sys::exe_path()).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".to_string())
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        return p;
    }
    std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
}

/// What one output file holds.
#[derive(Clone, Copy)]
enum Kind {
    Trace(Format),
    Profile(config::Profile),
}

/// The files, created now (a failure is reported at once); their writers
/// are built on the writer thread (see `PendingOutput`).
fn create_outputs(cfg: &Config, pid: u32) -> Vec<PendingOutput> {
    let exe = exe_name();
    let names = config::Names {
        pid,
        exe: &exe,
        start_secs: START_NS.load(Ordering::Relaxed) / 1_000_000_000,
    };
    let mut kinds: Vec<Kind> = cfg.formats.iter().map(|&f| Kind::Trace(f)).collect();
    if cfg.wants_syscalls {
        kinds.push(Kind::Trace(Format::Tlv));
    }
    kinds.extend(cfg.profiles.iter().map(|&p| Kind::Profile(p)));
    let mut outputs = Vec::new();
    for kind in kinds {
        let (ext, name) = match kind {
            Kind::Trace(f) => (f.extension(), f.name()),
            Kind::Profile(p) => (p.extension(), p.extension()),
        };
        // Absolute now: the program may change directory before the writer
        // finishes (and deletes the spool by name).
        let wanted = config::expand_output(&cfg.output, &names, ext);
        let wanted = absolute(PathBuf::from(wanted))
            .to_string_lossy()
            .into_owned();
        let created = match kind {
            Kind::Trace(Format::Mlyze) => create_mlyze(&wanted),
            Kind::Trace(Format::Dumpalloc) => create_dumpalloc(&wanted),
            Kind::Trace(Format::Tlv) => create_tlv(&wanted),
            Kind::Profile(p) => create_profile(&wanted, p),
        };
        let (path, slots, writer) = match created {
            Ok(x) => x,
            Err(e) => {
                if !cfg.quiet {
                    sys::stderr_line(&format!(
                        "TRACER_OUTPUT: cannot create {wanted}: {e}; no {name} trace will be written"
                    ));
                }
                continue;
            }
        };
        if let Some(m) = &cfg.manifest {
            append_manifest(m, &path);
        }
        outputs.push(PendingOutput {
            path,
            slots,
            make: writer,
            syscalls: matches!(kind, Kind::Trace(Format::Tlv)),
        });
    }
    outputs
}

/// The syscall capture file: the TLV writer buffers, then writes through a
/// movable descriptor of ours.
fn create_tlv(wanted: &str) -> std::io::Result<Created> {
    let (file, path) = output::create_exclusive(std::path::Path::new(wanted), "tlv")?;
    let Some(slot) = fds::register(file.into_raw_fd()) else {
        return Err(std::io::Error::other("too many trace files"));
    };
    Ok((
        path,
        vec![slot],
        Box::new(move || Ok(Box::new(tlv::Writer::new(fds::FdSink::new(slot))) as _)),
    ))
}

/// MALT JSON and callgrind profiles: aggregated as the events arrive,
/// written at the end.
fn create_profile(wanted: &str, profile: config::Profile) -> std::io::Result<Created> {
    let (file, path) = output::create_exclusive(std::path::Path::new(wanted), profile.extension())?;
    let Some(slot) = fds::register(file.into_raw_fd()) else {
        return Err(std::io::Error::other("too many trace files"));
    };
    let make = move || {
        let sink = BlockFile::new(fds::FdSink::new(slot), 0);
        let writer: Box<dyn TraceWriter> = match profile {
            config::Profile::Malt => Box::new(malt::Writer::new(sink)),
            config::Profile::Callgrind => Box::new(callgrind::Writer::new(sink)),
        };
        Ok(writer)
    };
    Ok((path, vec![slot], Box::new(make)))
}

/// A created file: its name, its descriptors' slots, and what builds its
/// writer (on the writer thread).
type Created = (
    PathBuf,
    Vec<usize>,
    Box<dyn FnOnce() -> std::io::Result<Box<dyn TraceWriter>> + Send>,
);

/// The mlyze writer spools next to its final file; both descriptors are ours
/// (registered, movable), the writer only sees `Write`/`Read`/`Seek` on them.
fn create_mlyze(wanted: &str) -> std::io::Result<Created> {
    let (out, path) = output::create_exclusive(std::path::Path::new(wanted), "mlyze")?;
    let (spool, spool_path) = match mlyze::spool::create_spool_file(&path) {
        Ok(x) => x,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let too_many = || std::io::Error::other("too many trace files");
    let out_slot = fds::register(out.into_raw_fd()).ok_or_else(too_many)?;
    let Some(spool_slot) = fds::register(spool.into_raw_fd()) else {
        fds::release(out_slot);
        return Err(too_many());
    };
    let make = move || {
        // Both files are new and written from offset 0 in aligned blocks
        // (see `format_writers::blocks`). The events are copied from the
        // spool into the file's blocks with reads and writes: the kernel's
        // `copy_file_range` copied them between unaligned offsets, ~1.5x as
        // slow (python3's 23 MB: ~9 ms against ~6 on ext4).
        let sink = BlockFile::new(fds::FdSink::new(out_slot), 0);
        let mut w = mlyze::Writer::with_spool(
            sink,
            BlockFile::new(fds::FdSink::new(spool_slot), 0),
            Some(spool_path.clone()),
        )?;
        // A replay of the allocations at exit reads the spool beside the
        // thread finishing the file (see `writer::State::finish_alongside_scan`).
        w.set_spool_reader(std::sync::Arc::new(fds::FdSink::new(spool_slot)));
        w.set_spool_remover(Box::new(move || {
            remove_or_empty_spool(&spool_path, spool_slot);
        }));
        // The file is new: the writer's first byte is at offset 0.
        w.set_header_patcher(Box::new(move |off, bytes| {
            use std::os::unix::fs::FileExt as _;
            fds::FdSink::new(out_slot).write_all_at(bytes, off)
        }));
        Ok(Box::new(w) as Box<dyn TraceWriter>)
    };
    Ok((path, vec![out_slot, spool_slot], Box::new(make)))
}

/// Deletes a finished file's spool by its name, when the name still leads
/// to it. A process that can no longer delete it (it gave up root, and the
/// trace directory is root's or sticky like `/tmp`: every worker of a traced
/// nginx), or no longer reach it (it chrooted), empties it through its
/// descriptor instead: a spool of 0 bytes is left beside the finished trace
/// (`tracer run` removes it) rather than a copy of the whole trace. The
/// spool keeps its name until then, so such a process killed before it
/// finishes still leaves everything to `tracer recover`.
fn remove_or_empty_spool(path: &std::path::Path, slot: usize) {
    let ours = match (std::fs::symlink_metadata(path), fds::identity(slot)) {
        (Ok(m), Some(id)) => {
            use std::os::unix::fs::MetadataExt as _;
            (m.dev(), m.ino()) == id
        }
        _ => false,
    };
    if !ours || std::fs::remove_file(path).is_err() {
        fds::truncate(slot);
    }
}

/// dumpalloc writes to any `Write`: a movable descriptor behind an `FdSink`.
fn create_dumpalloc(wanted: &str) -> std::io::Result<Created> {
    let (file, path) = output::create_exclusive(std::path::Path::new(wanted), "dumpalloc")?;
    let Some(slot) = fds::register(file.into_raw_fd()) else {
        return Err(std::io::Error::other("too many trace files"));
    };
    let make = move || {
        let sink = BlockFile::new(fds::FdSink::new(slot), 0);
        Ok(Box::new(dumpalloc::Writer::new(sink)) as Box<dyn TraceWriter>)
    };
    Ok((path, vec![slot], Box::new(make)))
}

/// One line naming a trace file, for `tracer run`.
fn append_manifest(manifest: &str, path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(manifest);
    if let Ok(f) = file {
        let fd = f.into_raw_fd();
        sys::write_all_fd(fd, format!("{}\n", path.display()).as_bytes());
        sys::raw_close(fd);
    }
}

fn process_record(pid: u32) -> Process {
    let executable = sys::exe_path().to_string();
    let command_line = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    Process {
        pid,
        executable,
        command_line,
        start_time_ns: START_NS.load(Ordering::Relaxed),
    }
}

fn info(cfg: &Config) -> Vec<(String, String)> {
    let mut v = vec![
        (
            "tracer".to_string(),
            format!("libtracer {}", env!("CARGO_PKG_VERSION")),
        ),
        (
            "unwind".to_string(),
            if cfg.unwind == Unwind::Fp {
                "fp"
            } else {
                "dwarf"
            }
            .to_string(),
        ),
        ("stack_depth".to_string(), cfg.stack_depth.to_string()),
    ];
    if let Some(slots) = crate::got::redirected_at_start() {
        // Read by `tracer report`: the trace is its libraries' calls only.
        v.push((
            "allocator".to_string(),
            format!("program: {slots} import slots redirected; the program's own calls unrecorded"),
        ));
    }
    // SAFETY: `u` is a writable utsname; uname fills NUL-terminated fields.
    unsafe {
        let mut u: libc::utsname = core::mem::zeroed();
        if libc::uname(&mut u) == 0 {
            for (k, f) in [
                ("sysname", &u.sysname[..]),
                ("nodename", &u.nodename[..]),
                ("release", &u.release[..]),
                ("version", &u.version[..]),
                ("machine", &u.machine[..]),
            ] {
                let s = std::ffi::CStr::from_ptr(f.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                v.push((k.to_string(), s));
            }
        }
    }
    v
}

/// Creates the files and starts a writer (reusing `rx` after a failed exec).
/// On success the state is TRACING; the early list, if any, goes to the writer.
fn start(rx: Option<Receiver<Msg>>) -> bool {
    let Some(cfg) = config() else { return false };
    let pid = sys::raw_getpid();
    TRACED_PID.store(pid, Ordering::Relaxed);
    let outputs = create_outputs(cfg, pid);
    if outputs.is_empty() {
        return false;
    }
    let fresh = rx.is_none();
    let rx = match rx {
        Some(rx) => rx,
        None => {
            let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
            // The previous sender (a fork parent's) is leaked on purpose: its
            // state may be mid-operation by a thread that does not exist here.
            SENDER.store(Box::into_raw(Box::new(tx)), Ordering::Release);
            rx
        }
    };
    let ctl = Arc::new(Control::default());
    CONTROL.store(Arc::into_raw(ctl.clone()).cast_mut(), Ordering::Release);
    if fresh && std::env::var_os("TRACER_LANE").is_some_and(|v| v == "0") {
        crate::lane::refuse();
    }
    crate::lane::init();
    mark_address_space();
    prepare_exit_stream();
    let early = EARLY.with(|list| {
        STATE.store(TRACING, Ordering::Release);
        std::mem::take(list)
    });
    if ALLOCS.load(Ordering::Relaxed) && DEPTH.load(Ordering::Relaxed) > 0 {
        crate::unwind::prepare_this_thread();
    }
    let setup = Setup {
        process: process_record(pid),
        info: info(cfg),
        depth: cfg.stack_depth,
        symbolize: cfg.symbolize,
        quiet: cfg.quiet,
    };
    let job = Box::new(Job {
        rx,
        early,
        outputs,
        setup,
        ctl,
    });
    match spawn_writer(job) {
        Ok(t) => {
            WRITER_THREAD.store(t, Ordering::Release);
            WRITER_RUNNING.store(true, Ordering::Release);
            true
        }
        Err(rc) => {
            if !cfg.quiet {
                sys::stderr_line(&format!(
                    "cannot start the writer thread: {}; tracing disabled",
                    std::io::Error::from_raw_os_error(rc)
                ));
            }
            false
        }
    }
}

/// Everything the writer thread starts with.
struct Job {
    rx: Receiver<Msg>,
    early: Vec<Msg>,
    outputs: Vec<PendingOutput>,
    setup: Setup,
    ctl: Arc<Control>,
}

/// Starts the writer with `pthread_create` rather than `std::thread`: std's
/// spawn registers thread-local destructors (allocated by glibc on the
/// spawning thread and freed by glibc at its exit, outside our guard) before
/// our code could mark the new thread as the tracer's. All signals are blocked
/// in the writer so the program's handlers never run on it.
fn spawn_writer(job: Box<Job>) -> Result<libc::pthread_t, i32> {
    extern "C" fn writer_main(arg: *mut libc::c_void) -> *mut libc::c_void {
        tls::enter_forever();
        // SAFETY: `arg` is the Box<Job> leaked by spawn_writer for this thread.
        let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
        let Job {
            rx,
            early,
            outputs,
            setup,
            ctl,
        } = *job;
        let rx = writer::run(rx, early, outputs, setup, &ctl);
        if orphaned() {
            end_orphaned(&ctl);
        }
        Box::into_raw(Box::new(rx)).cast()
    }
    let arg = Box::into_raw(job);
    // SAFETY: the new thread takes ownership of `arg` (reclaimed below if
    // it could not be created).
    unsafe {
        match create_thread(core::ptr::null(), writer_main, arg.cast(), c"libtracer") {
            Ok(t) => Ok(t),
            Err(rc) => {
                drop(Box::from_raw(arg));
                Err(rc)
            }
        }
    }
}

/// `pthread_create` with every signal blocked in the new thread (the
/// program's handlers never run on the tracer's threads), named `name`.
///
/// # Safety
/// As `pthread_create`: `attr` null or initialised, `arg` what `start`
/// expects.
unsafe fn create_thread(
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
    name: &core::ffi::CStr,
) -> Result<libc::pthread_t, i32> {
    let mut all: libc::sigset_t = core::mem::zeroed();
    let mut old: libc::sigset_t = core::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    let mut t: libc::pthread_t = 0;
    let rc = libc::pthread_create(&mut t, attr, start, arg);
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
    if rc != 0 {
        return Err(rc);
    }
    libc::pthread_setname_np(t, name.as_ptr());
    Ok(t)
}

/// What a thread of [`alongside`] is given and gives back.
struct AlongsideSlot<'a, T> {
    job: Option<Box<dyn FnOnce() -> T + Send + 'a>>,
    out: Option<T>,
}

/// Bytes of an [`alongside`] thread's stack (glibc puts its thread control
/// block and static TLS at the top).
const ALONGSIDE_STACK: usize = 2 << 20;

/// Runs `job` on a new thread while `main` runs on this one, and returns
/// both results once both are done (one after the other when no thread
/// could be made). The thread is the tracer's own (guard entered, every
/// signal blocked) and its stack a mapping made here, not one of glibc's
/// cached stacks of finished threads: those belong to the program's exit
/// scan (their thread blocks and TLS are roots). `job` may borrow from the
/// caller: the thread is joined before this returns (the library aborts
/// rather than unwinds, so `main` cannot leave early).
pub fn alongside<'a, T: Send, R>(
    job: Box<dyn FnOnce() -> T + Send + 'a>,
    main: impl FnOnce() -> R,
) -> (T, R) {
    extern "C" fn start<T>(arg: *mut libc::c_void) -> *mut libc::c_void {
        tls::enter_forever();
        let slot = arg.cast::<AlongsideSlot<'_, T>>();
        // SAFETY: `arg` is the slot `alongside` made for this thread, which
        // does not touch it again before the join.
        unsafe {
            if let Some(job) = (*core::ptr::addr_of_mut!((*slot).job)).take() {
                *core::ptr::addr_of_mut!((*slot).out) = Some(job());
            }
        }
        arg
    }
    let mut slot = AlongsideSlot {
        job: Some(job),
        out: None,
    };
    let arg: *mut AlongsideSlot<'_, T> = &mut slot;
    // SAFETY: an anonymous private mapping of our own, unmapped only after
    // the thread is joined (or at once when it could not be made); the
    // attribute is initialised before use and destroyed after; the slot
    // lives on this frame until the join below.
    let thread = unsafe {
        let stack = libc::mmap(
            core::ptr::null_mut(),
            ALONGSIDE_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            None
        } else {
            let mut attr: libc::pthread_attr_t = core::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            libc::pthread_attr_setstack(&mut attr, stack, ALONGSIDE_STACK);
            crate::scan::BESIDE.fetch_add(1, Ordering::AcqRel);
            let made = create_thread(&attr, start::<T>, arg.cast(), c"libtracer-exit");
            libc::pthread_attr_destroy(&mut attr);
            match made {
                Ok(t) => Some((t, stack)),
                Err(_) => {
                    crate::scan::BESIDE.fetch_sub(1, Ordering::AcqRel);
                    libc::munmap(stack, ALONGSIDE_STACK);
                    None
                }
            }
        }
    };
    let r = main();
    if let Some((t, stack)) = thread {
        // SAFETY: joined once; the stack is unused after that.
        unsafe {
            libc::pthread_join(t, core::ptr::null_mut());
            crate::scan::BESIDE.fetch_sub(1, Ordering::AcqRel);
            libc::munmap(stack, ALONGSIDE_STACK);
        }
    } else if let Some(job) = slot.job.take() {
        slot.out = Some(job());
    }
    match slot.out.take() {
        Some(out) => (out, r),
        None => unreachable!("the job ran, on its thread or here"),
    }
}

/// Waits for the writer thread to end, at most [`JOIN_LIMIT`], and takes
/// back its receiver. Bounded: the writer's thread, its files finished,
/// gives its allocator cache back to glibc's arenas as it ends, and an arena
/// whose lock the stopping thread itself holds (it was interrupted inside
/// `malloc`) never comes free.
fn join_writer() -> Option<Receiver<Msg>> {
    if !WRITER_RUNNING.swap(false, Ordering::AcqRel) {
        return None;
    }
    let t = WRITER_THREAD.load(Ordering::Acquire) as libc::pthread_t;
    let mut ret: *mut libc::c_void = core::ptr::null_mut();
    // SAFETY: a timespec is plain integers; clock_gettime fills it in.
    let mut deadline: libc::timespec = unsafe { core::mem::zeroed() };
    // SAFETY: `deadline` is a live timespec; CLOCK_REALTIME is always there.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut deadline) };
    deadline.tv_sec += JOIN_LIMIT.as_secs() as libc::time_t;
    // SAFETY: `t` is the writer thread, joined at most once (WRITER_RUNNING;
    // after a timeout it is never joined again); it returns a leaked
    // Box<Receiver>.
    unsafe {
        if libc::pthread_timedjoin_np(t, &mut ret, &deadline) != 0 || ret.is_null() {
            return None;
        }
        Some(*Box::from_raw(ret.cast::<Receiver<Msg>>()))
    }
}

/// How long [`join_writer`] waits for the writer's thread to end.
const JOIN_LIMIT: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- the end

/// Stops the writer and waits (bounded) for the files to be finished; with
/// `rejoin`, also for its thread to end (bounded), and returns the channel's
/// receiver, for a restart. Without, the thread ends on its own: a process
/// that exits or dies of a signal has no use for the receiver, and a thread
/// interrupted inside `malloc` (a SIGTERM at its default disposition arrives
/// there about one time in ten in an allocation loop) holds the arena lock
/// the writer's thread needs to end: a join there waited forever, and
/// `kill` no longer ended the program.
fn stop_writer(print: bool, rejoin: bool) -> Option<Receiver<Msg>> {
    if sys::raw_getpid() != TRACED_PID.load(Ordering::Relaxed) {
        return None; // a vfork child: the parent's trace is not ours to end
    }
    if STATE
        .compare_exchange(TRACING, SHUTTING_DOWN, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let _g = tls::enter();
    let ctl = CONTROL.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if ctl.is_null() {
        return None;
    }
    // SAFETY: CONTROL held one strong count of an Arc<Control>; that count is
    // never given back (a few bytes per writer), so the Control outlives every
    // reader of a pointer loaded from CONTROL (see `before_abort`).
    let ctl: &Control = unsafe { &*ctl };
    ctl.stop.store(true, Ordering::SeqCst);
    writer::wake();
    let begun = Instant::now();
    // The writer's own progress marks, and its file I/O (a finish writing
    // a large mlyze file reads the spool's log back, then streams the
    // metadata, without other marks).
    let progress = || ctl.progress.load(Ordering::Relaxed) + crate::fds::io_done();
    let mut last = (progress(), Instant::now());
    while !ctl.done.load(Ordering::SeqCst) {
        // Short naps first: a small process's whole finish takes about a
        // millisecond, and a fork-heavy shell script pays it per process.
        sys::sleep_us(if begun.elapsed() < Duration::from_millis(5) {
            50
        } else {
            1000
        });
        // Signals held for the exit scan come back as soon as it is over.
        crate::scan::release_exit(false);
        let p = progress();
        if p != last.0 {
            last = (p, Instant::now());
        }
        if last.1.elapsed() > STALL_LIMIT || begun.elapsed() > EXIT_LIMIT {
            if print && config().is_some_and(|c| !c.quiet) {
                sys::stderr_line(&format!(
                    "gave up waiting for the trace files after {:.1} s, {:.1} s of them without \
                     progress; what was recorded stays in their spools (`tracer recover FILE.spool`)",
                    begun.elapsed().as_secs_f64(),
                    last.1.elapsed().as_secs_f64()
                ));
            }
            return None;
        }
    }
    if print {
        say_written(ctl);
    }
    if rejoin {
        join_writer()
    } else {
        None
    }
}

/// The summary line naming the files the writer finished (unless quiet).
fn say_written(ctl: &Control) {
    if config().is_none_or(|c| c.quiet) {
        return;
    }
    let lost = side::lost();
    if lost > 0 {
        sys::stderr_line(&format!(
            "{lost} allocation events made by signal handlers were not recorded: a handler \
             made more than its thread's side buffer holds ({} at the default stack depth) \
             while one hook was interrupted",
            side::capacity()
        ));
    }
    if let Ok(w) = ctl.written.lock() {
        if !w.is_empty() {
            let first = ctl.stderr_first.load(Ordering::SeqCst);
            sys::stderr_line_if(first, &format!("wrote {}", w.join(", ")));
        }
    }
}

/// `dlclose` is about to unload the object at `path`: the writer reports it
/// and symbolizes the addresses inside it while they are still mapped.
/// Returns whether the writer was told (then the hook tells it when it
/// returns: `writer::dlclose_returned`).
pub fn before_dlclose(path: String) -> bool {
    let Some(ctl) = tracing_control() else {
        return false;
    };
    if let Ok(mut v) = ctl.unloading.lock() {
        v.push((path, tls::tid()));
    }
    request_flush(ctl, Duration::from_secs(5), false);
    true
}

/// `dlclose` returned after the unloaded object's destructors recorded
/// events: the writer takes them (and names their frames from the object's
/// file) before the program can load other code in its place.
pub fn after_dlclose() {
    if let Some(ctl) = tracing_control() {
        request_flush(ctl, Duration::from_secs(5), false);
    }
}

/// The writer's control block while this process is tracing.
fn tracing_control() -> Option<&'static Control> {
    if !is_traced_process() || STATE.load(Ordering::Acquire) != TRACING {
        return None;
    }
    // SAFETY: a Control published in CONTROL is never freed (see
    // stop_writer), so it outlives every reader.
    unsafe { CONTROL.load(Ordering::Acquire).as_ref() }
}

/// Asks the writer to handle what is queued, and with `files` to write it
/// to the files too; waits for it at most `limit`, asleep on the word the
/// writer bumps when it has served a request (a `dlclose` in a loop paid a
/// nap of the writer's and a 200 us poll each).
fn request_flush(ctl: &Control, limit: Duration, files: bool) {
    if files {
        ctl.flush_files.store(true, Ordering::SeqCst);
    }
    let ticket = ctl
        .flush_requested
        .fetch_add(1, Ordering::SeqCst)
        .wrapping_add(1);
    writer::interrupt_nap();
    let begun = Instant::now();
    loop {
        let done = ctl.flush_done.load(Ordering::SeqCst);
        // Served once the writer's count reached the ticket (wrapping).
        if done.wrapping_sub(ticket) as i32 >= 0 {
            return;
        }
        let left = limit.saturating_sub(begun.elapsed());
        if left.is_zero() {
            return;
        }
        // Bounded steps: the wait ends even if a wake-up were missed.
        sys::futex_wait(&ctl.flush_done, done, left.min(Duration::from_millis(10)));
    }
}

/// The process is about to die abnormally (`abort`, a failed `assert`): have
/// the writer put everything queued so far into the files (the mlyze spool is
/// then recoverable with every event), waiting at most a second.
///
/// A thread inside glibc's allocator (a signal arrived there; glibc's own
/// `abort` on a corrupted heap) may hold the allocator's lock, which the
/// writer's flush may need: it waits a quarter of a second at most, and the
/// spool keeps what the writer flushed before (about every 100 ms).
pub fn before_abort() {
    if let Some(ctl) = tracing_control() {
        let limit = if tls::interrupted_allocator() {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        };
        request_flush(ctl, limit, true);
    }
}

/// The process is about to die of a signal sent to it (SIGTERM, SIGINT,
/// ...; see `signals`): the files are finished as at exit, without the leak
/// scan, so the trace is complete without `tracer recover`, and say which
/// signal ended it (`ended: signal`): no exit ran, so no leak check applies.
/// On a thread inside glibc's allocator, which may hold the lock the
/// writer's finish needs, they are only flushed ([`before_abort`]), as for
/// an exit there ([`exit_inside_allocator`]).
pub fn before_kill(sig: libc::c_int) {
    if tls::interrupted_allocator() {
        before_abort();
        return;
    }
    ENDED_BY_SIGNAL.store(sig, Ordering::SeqCst);
    stop_writer(false, false);
}

/// The signal the files being finished end the process with (0: none).
static ENDED_BY_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The signal that ends the process whose files are being finished, if one does.
pub fn ending_by_signal() -> Option<libc::c_int> {
    Some(ENDED_BY_SIGNAL.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Allocation events are no longer recorded (the tracer ran out of memory,
/// `alloc`): the program runs on, the files are finished at exit.
pub fn stop_allocations() {
    ALLOCS.store(false, Ordering::Relaxed);
}

/// The thread running `exit` (0: none yet).
static EXITING: AtomicU32 = AtomicU32::new(0);

/// Called first thing in `exit`: a thread that calls it while another
/// thread's `exit` runs waits there for the process to end, as glibc 2.41
/// makes it. glibc 2.36 let the second thread find the exit handlers taken
/// and end the process at once, while the first one was still in ours
/// finishing the files (several threads calling `exit` together left an
/// empty trace). The same thread calling `exit` again from an exit handler
/// goes on, as glibc allows.
pub fn exit_gate() {
    if !is_traced_process() {
        return;
    }
    let me = sys::raw_gettid();
    match EXITING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(first) if first == me => {}
        Err(_) => loop {
            // The first thread's exit ends the process (and this thread).
            sys::sleep_us(1_000_000);
        },
    }
}

/// Set by the writer once it found every thread of the program gone with
/// the process still there (see [`program_gone`]): the trace is finished
/// and the writer calls `exit(0)` itself, as glibc does when the last thread
/// ends, so the exit handlers below have nothing left to do.
static ORPHANED: AtomicBool = AtomicBool::new(false);

/// Whether every thread of the program has ended and the writer alone keeps
/// the process alive: glibc ends a process when its last thread returns or
/// calls `pthread_exit`, and counts the writer among them (a `main` that
/// called `pthread_exit` and its last thread gone, or a thread leaving
/// with the raw `exit` system call). Asked by the writer when idle; if so,
/// tracing stops here (the leak scan is asked with no thread's stack or
/// registers among its roots: the writer's are the tracer's, and hold the
/// addresses of the last blocks it recorded) and the writer finishes the
/// files, then calls [`end_orphaned`].
pub fn program_gone() -> bool {
    if !is_traced_process() || STATE.load(Ordering::Acquire) != TRACING || !sys::alone() {
        return false;
    }
    if STATE
        .compare_exchange(TRACING, SHUTTING_DOWN, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    ORPHANED.store(true, Ordering::SeqCst);
    if crate::scan::enabled() {
        crate::scan::request(crate::scan::ExitPoint::no_thread());
    }
    true
}

/// After the writer finished the files of an orphaned process: the summary
/// line, then `exit(0)` from the writer thread (the program's exit handlers
/// run there, unrecorded: the writer is the tracer's own thread).
pub fn end_orphaned(ctl: &Control) -> ! {
    say_written(ctl);
    // SAFETY: exit is what glibc itself calls when a process's last thread
    // ends; every file of ours is finished and released.
    unsafe { libc::exit(0) }
}

/// Whether the writer ended an orphaned process (see [`program_gone`]).
pub fn orphaned() -> bool {
    ORPHANED.load(Ordering::SeqCst)
}

extern "C" fn at_exit() {
    if orphaned() || !defer_exit() {
        at_exit_of(c"exit");
    }
}

/// Set by our `atexit` handler once the exit's work waits for the end of
/// the exit handlers ([`defer_exit`]); taken by the first callback of the
/// stream that runs.
static EXIT_DEFERRED: AtomicBool = AtomicBool::new(false);

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut libc::c_void, *mut libc::c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut libc::c_void, *const libc::c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut libc::c_void, *mut i64, libc::c_int) -> libc::c_int>,
    close: Option<unsafe extern "C" fn(*mut libc::c_void) -> libc::c_int>,
}

extern "C" {
    fn fopencookie(
        cookie: *mut libc::c_void,
        mode: *const libc::c_char,
        io: CookieIo,
    ) -> *mut libc::FILE;
}

/// Our `atexit` handler runs before the handlers registered ahead of it:
/// those of every library whose constructor ran before ours (a preloaded
/// library's runs after the program's libraries'), among them the
/// destructors of their C++ globals. Blocks those free were still live at
/// the scan, and blocks that only a freed container pointed to came out
/// reachable, where valgrind, which checks at the very end, says
/// definitely lost (`examples/leaks/late_atexit.c`). So the scan and the
/// files wait for the end of the exit handlers: `exit` flushes every
/// stdio stream after the last of them (`_IO_cleanup`, before `_exit`),
/// and a stream of ours ([`prepare_exit_stream`]), given one byte here,
/// has its write callback run then. Should a later handler flush every
/// stream or end the process with `_exit` first, the work is done there.
/// False when there is no stream: the work is done now.
fn defer_exit() -> bool {
    if !is_traced_process() || STATE.load(Ordering::Acquire) != TRACING {
        return false;
    }
    let f = EXIT_STREAM.load(Ordering::Acquire);
    if f.is_null() {
        return false;
    }
    let _g = tls::enter();
    EXIT_DEFERRED.store(true, Ordering::SeqCst);
    // SAFETY: `f` is our open stream (a close clears EXIT_STREAM first); the
    // byte stays in its static buffer until a flush: no allocation.
    if unsafe { libc::fputc(i32::from(b'.'), f) } == libc::EOF {
        EXIT_DEFERRED.store(false, Ordering::SeqCst);
        return false;
    }
    true
}

/// The stream [`defer_exit`] gives its byte to: null until made, or once
/// closed (by a program's `fcloseall`).
static EXIT_STREAM: AtomicPtr<libc::FILE> = AtomicPtr::new(core::ptr::null_mut());

/// Makes [`defer_exit`]'s stream, once per address space (a fork's child
/// has its parent's), when tracing starts. Made at exit, it took a block of
/// the program's heap there: a program that calls `exit` from a signal
/// handler that interrupted `malloc` (a timer's handler, a SIGINT handler)
/// holds the allocator's lock, and waited on it forever
/// (`examples/exit_in_handler.c`).
fn prepare_exit_stream() {
    if !EXIT_STREAM.load(Ordering::Acquire).is_null() {
        return;
    }
    let _g = tls::enter();
    let io = CookieIo {
        read: None,
        write: Some(exit_stream_write),
        seek: None,
        close: Some(exit_stream_close),
    };
    // SAFETY: a write-only stream over callbacks that ignore the cookie;
    // glibc keeps it until the process ends.
    let f = unsafe { fopencookie(core::ptr::null_mut(), c"w".as_ptr(), io) };
    if f.is_null() {
        return;
    }
    // The stream's buffer is ours, not one of BUFSIZ from the program's
    // heap: a request that large makes glibc consolidate every free chunk
    // in its fast bins first, and a program that freed a heap of small
    // blocks before exiting paid for it at exit (perl's 300k-entry hash:
    // ~190 ms, 16% of the traced run, in `malloc_consolidate` under our
    // `fputc`).
    // SAFETY: the buffer is static, used by this stream alone (made once
    // per address space), and outlives it.
    let set = unsafe {
        libc::setvbuf(
            f,
            EXIT_STREAM_BUFFER.0.get().cast(),
            libc::_IOFBF,
            EXIT_STREAM_BUFFER_LEN,
        )
    };
    if set != 0 {
        // SAFETY: `f` is the stream just opened, not yet shared.
        unsafe { libc::fclose(f) };
        return;
    }
    EXIT_STREAM.store(f, Ordering::Release);
}

/// The buffer of [`defer_exit`]'s stream (one byte is ever written).
struct ExitStreamBuffer(core::cell::UnsafeCell<[u8; EXIT_STREAM_BUFFER_LEN]>);
// SAFETY: only glibc's stdio touches it, through the one stream it buffers.
unsafe impl Sync for ExitStreamBuffer {}
const EXIT_STREAM_BUFFER_LEN: usize = 64;
static EXIT_STREAM_BUFFER: ExitStreamBuffer =
    ExitStreamBuffer(core::cell::UnsafeCell::new([0; EXIT_STREAM_BUFFER_LEN]));

unsafe extern "C" fn exit_stream_write(
    _cookie: *mut libc::c_void,
    _buf: *const libc::c_char,
    size: usize,
) -> isize {
    run_deferred_exit();
    size as isize
}

unsafe extern "C" fn exit_stream_close(_cookie: *mut libc::c_void) -> libc::c_int {
    EXIT_STREAM.store(core::ptr::null_mut(), Ordering::Release);
    run_deferred_exit();
    0
}

/// The exit's work [`defer_exit`] put off, once.
fn run_deferred_exit() {
    if EXIT_DEFERRED.swap(false, Ordering::SeqCst) {
        let saved = sys::errno();
        at_exit_of(c"exit");
        sys::set_errno(saved);
    }
}

/// `quick_exit` runs the `at_quick_exit` handlers, ours last, then ends the
/// process with glibc's internal `_exit`, which no hook of ours sees.
extern "C" fn at_quick_exit() {
    at_exit_of(c"quick_exit");
}

/// The last exit handler of `exit` or `quick_exit` (`name`): the scan from
/// the frame that called it, then the files.
fn at_exit_of(name: &core::ffi::CStr) {
    if orphaned() || exit_inside_allocator() {
        return;
    }
    crate::syscalls::before_exit_handler();
    if is_traced_process() && crate::scan::enabled() {
        let g = tls::enter();
        let at = crate::scan::ExitPoint::here().above_call_of(name);
        drop(g);
        stop_after_scan(at);
        return;
    }
    stop_writer(true, false);
}

/// An exit from a signal handler that interrupted glibc's allocator (`_exit`
/// is allowed there, and `exit` is common): this thread may hold the
/// allocator's lock, which the scan and the writer's finish may need, and
/// nothing would release it. The files keep what the writer flushed (a
/// spool for `tracer recover`, as after a crash), and the process ends at
/// once. True when that was done.
fn exit_inside_allocator() -> bool {
    if !tls::interrupted_allocator() || !is_traced_process() {
        return false;
    }
    before_abort();
    true
}

/// `_exit`/`_Exit`: finish the files, then leave.
#[inline(always)]
pub fn before_exit() {
    before_exit_from(0);
}

/// [`before_exit`] for a caller that knows where the program's frames
/// start (`daemon`'s parent): the scan's live stack begins at `sp` or
/// higher.
#[inline(always)]
pub fn before_exit_from(sp: u64) {
    if orphaned() || exit_inside_allocator() {
        return;
    }
    if is_traced_process() && crate::scan::enabled() {
        let mut at = crate::scan::ExitPoint::here();
        if sp != 0 {
            at.sp = at.sp.max(sp);
            at = at.with_program_registers();
        }
        stop_after_scan(at);
        return;
    }
    stop_writer(true, false);
}

/// The process ends at `at`: asks for the leak scan, with this thread's
/// signals held while the scan may copy memory directly, and stops the
/// writer.
fn stop_after_scan(at: crate::scan::ExitPoint) {
    let g = tls::enter();
    crate::scan::hold_exit();
    crate::scan::request(at);
    drop(g);
    stop_writer(true, false);
    crate::scan::release_exit(true);
}

// ---------------------------------------------------------------- fork

extern "C" fn fork_prepare() {
    // Nobody may be half-way through the early list, nor the writer inside the
    // loader, when the address space is copied; every other tracer structure
    // is replaced in the child.
    crate::objects::fork_prepare();
    EARLY.lock();
}

extern "C" fn fork_parent() {
    EARLY.unlock();
    crate::objects::fork_done(false);
}

extern "C" fn fork_child() {
    EARLY.unlock();
    EXITING.store(0, Ordering::Release);
    crate::objects::fork_done(true);
    let _g = tls::enter();
    tls::reset_after_fork();
    let state = STATE.load(Ordering::Acquire);
    TRACED_PID.store(sys::raw_getpid(), Ordering::Relaxed);
    crate::syscalls::ring::after_fork_child();
    crate::lane::after_fork_child();
    crate::clock::after_fork_child();
    writer::after_fork_child();
    match state {
        NOT_YET | DISABLED => {}
        INITIALISING => EARLY.with(|list| list.clear()),
        _ => {
            // The parent's channel, writer and files stay with the parent.
            STATE.store(SHUTTING_DOWN, Ordering::Release);
            CONTROL.store(core::ptr::null_mut(), Ordering::Release);
            WRITER_RUNNING.store(false, Ordering::Release);
            fds::release_all();
            crate::scan::forget_kept_maps();
            let follow = config().is_some_and(|c| c.follow_fork && c.enabled);
            if state != TRACING || !follow || !start(None) {
                disable();
            } else if crate::scan::enabled() {
                crate::scan::keep_maps_open();
            }
        }
    }
}

// ---------------------------------------------------------------- a copy without fork

/// 1 in the process whose writer runs (set by [`start`], so again by a
/// followed fork's child); the kernel zeroes it in any child made without
/// `CLONE_VM` ([`sys::wiped_in_copies`]). A child made by the clone system
/// call itself (container runtimes, sandboxes, zygotes) runs no fork
/// handler: it has our copied state, lanes and rings, but no writer. Null
/// where the kernel refuses the advice.
static MARK: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());

fn mark_address_space() {
    let mut p = MARK.load(Ordering::Acquire);
    // `TRACER_NO_COPY_MARK` (private, for the tests): as where the kernel
    // refuses the advice.
    if p.is_null() && std::env::var_os("TRACER_NO_COPY_MARK").is_none() {
        if let Some(word) = sys::wiped_in_copies() {
            p = (word as *const AtomicU64).cast_mut();
            MARK.store(p, Ordering::Release);
        }
    }
    // SAFETY: MARK holds null or a word of a page kept for the process's life.
    if let Some(word) = unsafe { p.as_ref() } {
        word.store(1, Ordering::Release);
    }
}

/// Called by a producer waiting for room (`writer::RoomWait`): when this
/// process is a copy of the traced one that no fork handler of ours saw,
/// no writer will ever make room, so tracing stops here (one line on
/// stderr) and the wait ends. `waited_long`: the producer has waited over a
/// second, which is the test where the kernel refused the mark (then also
/// only in a process whose pid is not the traced one: a `vfork` child
/// shares our memory, and the writer drains its lane).
pub fn stop_if_left_behind(waited_long: bool) {
    if !accepting() {
        return;
    }
    // SAFETY: as in `mark_address_space`.
    let copied = match unsafe { MARK.load(Ordering::Acquire).as_ref() } {
        Some(word) => word.load(Ordering::Acquire) == 0,
        None => waited_long && !is_traced_process(),
    };
    if !copied {
        return;
    }
    // Our memory is a copy: this changes nothing in the traced process.
    STATE.store(DISABLED, Ordering::Release);
    if config().is_some_and(|c| !c.quiet) {
        sys::stderr_line(&format!(
            "process {} was made by a clone without fork handlers: not traced",
            sys::raw_getpid()
        ));
    }
}

// ---------------------------------------------------------------- exec

/// Whether this is the traced process itself (not a vfork child).
pub fn is_traced_process() -> bool {
    sys::raw_getpid() == TRACED_PID.load(Ordering::Relaxed)
}

/// Before a real exec: finish the files. Returns whether tracing must be
/// resumed should the exec fail.
pub fn before_exec() -> bool {
    if !is_traced_process() || STATE.load(Ordering::Acquire) != TRACING {
        return false;
    }
    ENDED_BY_EXEC.store(true, Ordering::SeqCst);
    match stop_writer(true, true) {
        Some(rx) => {
            RESUME_RX.store(Box::into_raw(Box::new(rx)), Ordering::Release);
            true
        }
        None => {
            ENDED_BY_EXEC.store(false, Ordering::SeqCst);
            false
        }
    }
}

static RESUME_RX: AtomicPtr<Receiver<Msg>> = AtomicPtr::new(core::ptr::null_mut());

/// Set while the files end because the process replaces itself with
/// `exec`: they then say so (`ended: exec`), and a leak check leaves that
/// image out (its blocks vanish with it; no checker counts them).
static ENDED_BY_EXEC: AtomicBool = AtomicBool::new(false);

/// Whether the files being finished end an image replaced by `exec`.
pub fn ending_by_exec() -> bool {
    ENDED_BY_EXEC.load(Ordering::SeqCst)
}

/// The exec failed: trace on, into new files.
pub fn after_failed_exec() {
    let _g = tls::enter();
    let rx = RESUME_RX.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if rx.is_null() {
        return;
    }
    // SAFETY: RESUME_RX held a leaked Box<Receiver>, taken back exactly once.
    let rx = unsafe { *Box::from_raw(rx) };
    ENDED_BY_EXEC.store(false, Ordering::SeqCst);
    tls::new_epoch();
    if !start(Some(rx)) {
        disable();
    }
}

/// Whether exec'd programs should be traced too.
pub fn follow_exec() -> bool {
    config().is_none_or(|c| c.follow_exec)
}
