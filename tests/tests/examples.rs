//! The single-process example programs: the trace's figures equal the figures
//! derived by reading each program (stated in its header comment), and
//! valgrind's "total heap usage" / "in use at exit" on the same binary agree
//! with them (or differ by exactly the amount the example documents). Output
//! and exit status are the same with and without libtracer.

use std::path::Path;

use tracer_tests::*;

/// Hand-derived figures: (allocation calls, frees, bytes allocated, live bytes, live blocks).
const LEAK: Figures = Figures::new(3, 1, 600, 400, 2);
const CALLOC: Figures = Figures::new(3, 2, 1081, 1, 1);
const REALLOC: Figures = Figures::new(7, 6, 1490, 8, 1);
const ALIGN: Figures = Figures::new(4, 3, 752, 100, 1);
const PVALLOC: Figures = Figures::new(3, 2, 5100, 100, 1);
/// 72,704-byte libstdc++ pool + 4 + 48 + 100 + 32, and the 136-byte exception
/// libstdc++ throws inside the failing nothrow new[] (see cxx_new.cpp).
const CXX_NEW: Figures = Figures::new(6, 4, 73_024, 72_736, 2);
const EXIT_LIVE: Figures = Figures::new(3, 1, 1050, 1000, 2);
const ABORT: Figures = Figures::new(2, 1, 579, 456, 1);
const CHAIN10: Figures = Figures::new(1, 0, 4242, 4242, 1);

/// Runs `name` natively and under libtracer: same stdout and status, one trace
/// with the expected figures (computed from the records and by `tracer report`).
fn traced_matches(name: &str, expected: Figures) -> Trace {
    cmd_traced_matches(&Cmd::new(example(name)), name, expected)
}

/// [`traced_matches`] for any command line.
fn cmd_traced_matches(cmd: &Cmd, name: &str, expected: Figures) -> Trace {
    let plain = cmd.run_plain();
    let mut run = run_traced(cmd, &[]);
    assert_same_behaviour(&plain, &run, name);
    recover_spools(&mut run);
    let trace = single_trace(&run);
    assert_trace_figures(&trace, expected, name);
    trace
}

/// valgrind on the same binary: one process, with these figures.
fn valgrind_says(name: &str, expected: Figures) {
    let cmd = Cmd::new(example(name));
    let plain = cmd.run_plain();
    let (out, by_pid) = valgrind(&cmd);
    assert_eq!(
        by_pid.len(),
        1,
        "{name}: one valgrind summary expected: {by_pid:?}"
    );
    let v = by_pid.values().next().unwrap();
    assert_eq!(v.figures, expected, "{name}: valgrind's heap summary");
    assert_eq!(
        status_text(&out.status),
        status_text(&plain.status),
        "{name}: status under valgrind"
    );
}

#[test]
fn leak_valgrind() {
    valgrind_says("leak", LEAK);
}
#[test]
fn leak_traced() {
    traced_matches("leak", LEAK);
}

#[test]
fn calloc_valgrind() {
    valgrind_says("calloc", CALLOC);
}
#[test]
fn calloc_traced() {
    traced_matches("calloc", CALLOC);
}

/// valgrind 3.19 also treats realloc(p, 0) as glibc does: one free, no
/// allocation, NULL returned — the figures agree exactly.
#[test]
fn realloc_valgrind() {
    valgrind_says("realloc", REALLOC);
}
#[test]
fn realloc_traced() {
    traced_matches("realloc", REALLOC);
}

#[test]
fn align_valgrind() {
    valgrind_says("align", ALIGN);
}
#[test]
fn align_traced() {
    traced_matches("align", ALIGN);
}

/// No valgrind: valgrind 3.19 aborts the program on pvalloc.
#[test]
fn pvalloc_traced() {
    traced_matches("pvalloc", PVALLOC);
}

/// valgrind replaces `operator new(size, nothrow)` itself, so it never sees
/// the bad_alloc libstdc++ allocates (136 bytes) and frees inside it: exactly
/// one allocation, one free and 136 bytes fewer; live blocks the same.
#[test]
fn cxx_new_valgrind() {
    let expected = Figures::new(
        CXX_NEW.allocations - 1,
        CXX_NEW.frees - 1,
        CXX_NEW.bytes_allocated - 136,
        CXX_NEW.live_bytes,
        CXX_NEW.live_blocks,
    );
    valgrind_says("cxx_new", expected);
}
#[test]
fn cxx_new_traced() {
    let t = traced_matches("cxx_new", CXX_NEW);
    // The pool libstdc++ allocates before main is there, and it is the first
    // allocation of the program.
    assert_eq!(
        t.allocs.first().map(|a| a.0),
        Some(72_704),
        "first allocation: libstdc++'s pool"
    );
}

/// `_exit` runs no exit handlers: valgrind still prints its summary.
#[test]
fn exit_live_valgrind() {
    valgrind_says("exit_live", EXIT_LIVE);
}
/// After `_exit(3)` the trace is complete, or recoverable, with every event
/// before it.
#[test]
fn exit_live_traced() {
    traced_matches("exit_live", EXIT_LIVE);
}

/// `quick_exit` (whose last step is glibc's internal `_exit`, which no hook
/// sees) and `syscall(SYS_exit_group)` end the process as `_exit` does:
/// the trace file itself is finished, nothing left to recover, with the
/// exit scan's classes. Before, both left an empty file and an empty spool.
#[test]
fn quick_exit_and_a_raw_exit_group_finish_the_trace() {
    for how in ["quick", "syscall"] {
        let cmd = Cmd::new(example("exit_live")).arg(how);
        let plain = cmd.run_plain();
        assert_eq!(status_text(&plain.status), "exit 3");
        let run = run_traced(&cmd, &[]);
        assert_same_behaviour(&plain, &run, how);
        assert!(spools(&run.dir).is_empty(), "{how}: a spool was left");
        let trace = single_trace(&run);
        assert_trace_figures(&trace, EXIT_LIVE, how);
        let scan = read_scan(&trace.path).unwrap_or_else(|e| panic!("{e}"));
        assert!(scan.scanned, "{how}: no exit scan");
        assert_eq!((scan.unclassified, scan.stray), (0, 0), "{how}");
        // Both blocks are held by the global array.
        let reachable = scan.classes.get(format_writers::LeakKind::Reachable);
        assert_eq!(reachable, (1000, 2), "{how}: {:?}", scan.classes);
    }
}

/// `examples/daemon.c`: a child that detaches with `daemon(1, 0)` leaves
/// through glibc's internal `_exit`; its trace is finished all the same
/// (it was left empty, with its spool), and the daemon's is its own.
#[test]
fn a_process_that_calls_daemon_finishes_its_trace() {
    let cmd = Cmd::new(example("daemon"));
    let plain = cmd.run_plain();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "daemon: child exited with 0\ndaemon: running in the background, cwd kept\n"
    );
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "daemon");
    assert!(
        spools(&run.dir).is_empty(),
        "a spool was left: {:?}",
        run.files
    );
    let by_pid = traces_by_pid(&run);
    assert_eq!(by_pid.len(), 3, "watcher, child, daemon: {:?}", run.files);
    // Each process's own allocations (the daemon inherits the child's lost
    // block: it is in the child's trace) and the scan's definite bytes.
    let mut seen: Vec<(u64, u64, (u64, u64))> = by_pid
        .values()
        .map(|traces| {
            let t = &traces[0];
            assert_validates(&t.path);
            let scan = read_scan(&t.path).unwrap_or_else(|e| panic!("{e}"));
            assert!(scan.scanned, "{}: no exit scan", t.path.display());
            let definite = scan.classes.get(format_writers::LeakKind::Definite);
            (t.figures.allocations, t.figures.bytes_allocated, definite)
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![(0, 0, (0, 0)), (1, 20, (20, 1)), (1, 100, (100, 1))]
    );
}

/// The one line of `stderr` that contains `what` (asserting there is
/// exactly one).
fn said_once<'a>(stderr: &'a str, what: &str) -> &'a str {
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains(what)).collect();
    assert_eq!(said.len(), 1, "{stderr}");
    said[0]
}

/// `examples/own_malloc.c` defines `malloc` and friends in the executable,
/// whose definitions come before any preloaded library's, and calls them
/// directly: its allocations go around libtracer (the imports of libraries
/// are redirected, see `examples/own_alloc`, but it has no such call). The
/// program runs as untraced, and one line on stderr says why its trace
/// holds no allocation (it said nothing).
#[test]
fn a_program_with_its_own_malloc_is_told_it_is_not_traced() {
    let bin = example("own_malloc");
    let cmd = Cmd::new(&bin);
    let plain = cmd.run_plain();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "own_malloc: 100 rounds\n"
    );
    let run = run_traced(&cmd, &[("TRACER_QUIET", "0")]);
    assert_eq!(plain.stdout, run.output.stdout);
    assert_eq!(plain.status.code(), run.output.status.code());
    let stderr = run.stderr();
    let said = said_once(&stderr, "defines malloc");
    assert!(said.contains(&*bin.to_string_lossy()), "{stderr}");
    let trace = single_trace(&run);
    assert_eq!(trace.figures.allocations, 0);
    // Quiet: nothing.
    let run = run_traced(&cmd, &[("TRACER_QUIET", "1")]);
    assert_eq!(run.stderr(), "");
}

/// glibc's malloc checker (`libc_malloc_debug.so`, what `MALLOC_CHECK_`
/// needs since glibc 2.34) preloaded ahead of libtracer: it defines
/// `malloc` only under its version (`malloc@GLIBC_2.2.5`), which programs
/// bind to and a plain `dlsym` does not see. Its allocations go around
/// libtracer, and one line says so.
#[test]
fn a_malloc_preloaded_ahead_under_glibc_s_version_is_named() {
    let debug = Path::new("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0");
    if !debug.exists() {
        eprintln!("skipped: no {}", debug.display());
        return;
    }
    let cmd = Cmd::new(example("leak"));
    let preload = format!("{}:{}", debug.display(), tracer_lib().display());
    let run = run_traced(
        &cmd,
        &[
            ("LD_PRELOAD", preload.as_str()),
            ("TRACER_QUIET", "0"),
            ("MALLOC_CHECK_", "3"),
        ],
    );
    let stderr = run.stderr();
    let said = said_once(&stderr, "defines malloc ahead of libtracer.so");
    assert!(said.contains("libc_malloc_debug.so"), "{stderr}");
    assert_eq!(single_trace(&run).figures.allocations, 0);
}

/// `examples/ahead_malloc.c`, an allocator preloaded ahead of libtracer,
/// under python3: a non-PIE executable that takes `malloc`'s address, so
/// that a lookup of `malloc` finds the executable's stub, not the
/// allocator. The allocator is named all the same.
#[test]
fn an_allocator_preloaded_ahead_is_named_under_a_non_pie_program() {
    let dir = fresh_dir("ahead-malloc");
    let lib = dir.join("libahead_malloc.so");
    let src = repo_root().join("examples/ahead_malloc.c");
    let status = std::process::Command::new("gcc")
        .args(["-O0", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc {}", src.display());
    let cmd = Cmd::new("/usr/bin/python3")
        .arg("-c")
        .arg("print(len([0] * 1000))");
    let preload = format!("{}:{}", lib.display(), tracer_lib().display());
    let run = run_traced(&cmd, &[("LD_PRELOAD", &preload), ("TRACER_QUIET", "0")]);
    assert_eq!(String::from_utf8_lossy(&run.output.stdout), "1000\n");
    let stderr = run.stderr();
    let said = said_once(&stderr, "defines malloc ahead of libtracer.so");
    assert!(said.contains(&*lib.to_string_lossy()), "{stderr}");
    assert_eq!(single_trace(&run).figures.allocations, 0);
}

#[test]
fn abort_valgrind() {
    valgrind_says("abort", ABORT);
}
/// Killed by SIGABRT: the trace is complete or recoverable with every event
/// before the abort.
#[test]
fn abort_traced() {
    traced_matches("abort", ABORT);
}

#[test]
fn chain10_valgrind() {
    valgrind_says("chain10", CHAIN10);
}

/// `examples/crash.c`: 2,000 allocations of 32 bytes, every other one freed,
/// then death by a signal (or the program's own handler).
const CRASH: Figures = Figures::new(2000, 1000, 64_000, 32_000, 1000);

/// Runs `crash MODE` natively and under libtracer: same output (what the
/// program sees of signal dispositions included) and status, and a trace
/// holding every event made before the signal.
fn crash_traced(mode: &str) {
    cmd_traced_matches(&Cmd::new(example("crash")).arg(mode), mode, CRASH);
}

/// Killed by SIGSEGV: every event before the fault is in the trace (the
/// spool is flushed by our handler before the signal is raised again).
#[test]
fn crash_segv_traced() {
    crash_traced("segv");
}

/// Killed by SIGTERM.
#[test]
fn crash_term_traced() {
    crash_traced("term");
}

/// Killed by SIGTERM, the trace is finished as at exit: a readable file and
/// no spool left to recover (a crash leaves the spool: `crash_segv_traced`).
#[test]
fn killed_by_sigterm_the_trace_is_finished() {
    finished_by_sigterm("term");
}

/// `crash MODE` killed by SIGTERM with its trace finished as at exit: its
/// status, no spool left, every event, and the files saying which signal
/// ended it (`ended: signal`, `signal: SIGTERM`).
fn finished_by_sigterm(mode: &str) {
    finished_by_signal(mode, 15, "SIGTERM");
}

fn finished_by_signal(mode: &str, number: i32, name: &str) {
    let what = format!("crash {mode}");
    let cmd = Cmd::new(example("crash")).arg(mode);
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, &what);
    assert_eq!(
        status_text(&run.output.status),
        format!("signal {number}"),
        "{what}"
    );
    assert_eq!(spools(&run.dir), Vec::<std::path::PathBuf>::new(), "{what}");
    let trace = single_trace(&run);
    assert_trace_figures(&trace, CRASH, &what);
    let dump = tracer(&["dump".as_ref(), trace.path.as_os_str()]);
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("info ")
            && l.contains(" ended=\"signal\"")
            && l.contains(&format!(" signal=\"{name}\""))),
        "{what}: {text}"
    );
}

/// The one trace of a run in `dir`: the finished file, or the one `tracer
/// recover` makes of the spool left beside its empty name; and whether it
/// was recovered. Its figures must be those of `exit_in_handler`'s loop
/// stopped anywhere: every block freed but the 64 or 65 live (fewer when the
/// trace stops in the first turns).
fn loop_trace(dir: &std::path::Path, what: &str) -> (Trace, bool) {
    let left = spools(dir);
    for spool in &left {
        let out = tracer(&["recover".as_ref(), spool.as_os_str()]);
        assert!(
            out.status.success(),
            "{what}: tracer recover {}: {}",
            spool.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let files = trace_files(dir);
    assert_eq!(files.len(), 1, "{what}: {files:?}");
    let trace = read_trace(&files[0]).unwrap_or_else(|e| panic!("{what}: {e}"));
    let f = trace.figures;
    assert!(
        f.live_blocks <= 65 && f.allocations - f.frees == f.live_blocks,
        "{what}: {f:?}"
    );
    (trace, !left.is_empty())
}

/// `examples/exit_in_handler.c timer MS`: a SIGALRM handler calls `exit`
/// while the program allocates in a loop, often inside glibc's `malloc`
/// with the allocator's lock held. Our exit handler made its stdio stream
/// there, a block of the program's heap: about one run in eight waited
/// forever on the lock its own thread held. Each run must end at once, with
/// status 0 (24 runs with timers of 10 to 56 ms). An exit that interrupted
/// the allocator leaves what the writer flushed, as a crash does (the
/// scan and the writer's finish may need that lock); any other finishes the
/// file.
#[test]
fn exit_from_a_handler_that_interrupted_malloc_ends_the_program() {
    let mut finished = 0;
    for ms in (10..58).step_by(2) {
        let dir = fresh_dir("exit-in-handler");
        let cmd = Cmd::new(example("exit_in_handler"))
            .arg("timer")
            .arg(ms.to_string());
        let child = spawn_traced(&cmd, &dir);
        let begun = std::time::Instant::now();
        let status = wait_within(child, std::time::Duration::from_secs(20))
            .unwrap_or_else(|| panic!("timer {ms} ms: the traced program hung at exit"));
        assert!(status.success(), "timer {ms} ms: {}", status_text(&status));
        // Not a wait for a stalled writer either (the exit gives up after
        // 5 s without progress): a stall, not a speed, is what this bounds.
        assert!(
            begun.elapsed() < std::time::Duration::from_millis(4500),
            "{ms} ms: {:?}",
            begun.elapsed()
        );
        let (_, recovered) = loop_trace(&dir, &format!("timer {ms} ms"));
        finished += usize::from(!recovered);
    }
    assert!(finished > 0, "no run finished its file");
}

/// SIGTERM, at its default disposition, sent at moments spread over the run
/// of a program allocating in a loop: it often lands inside glibc's
/// `malloc`. Our handler finished the files, then waited for the writer's
/// thread to end, and that thread, as it ended, gave its allocator cache
/// back to the arena whose lock the interrupted thread held: about one
/// `kill` in ten left the program running for ever; and the writer's finish
/// itself may need that lock (a stall of 5 s, then a spool). Each of 20
/// must end the program before such a stall, its trace finished, or, when
/// the signal arrived inside the allocator, flushed as after a crash.
#[test]
fn sigterm_inside_malloc_still_ends_the_program() {
    for round in 0..20u64 {
        let dir = fresh_dir("term-in-malloc");
        let cmd = Cmd::new(example("exit_in_handler")).arg("forever");
        let child = spawn_traced(&cmd, &dir);
        std::thread::sleep(std::time::Duration::from_millis(60 + round * 37 % 240));
        let begun = std::time::Instant::now();
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_within(child, std::time::Duration::from_secs(15))
            .unwrap_or_else(|| panic!("round {round}: SIGTERM did not end the traced program"));
        assert_eq!(status_text(&status), "signal 15", "round {round}");
        // Not a wait for a stalled writer either (5 s without progress):
        // a stall, not a speed, is what this bounds.
        assert!(
            begun.elapsed() < std::time::Duration::from_millis(4500),
            "round {round}: {:?}",
            begun.elapsed()
        );
        loop_trace(&dir, &format!("round {round}"));
    }
}

/// A program whose own handler cleans up, restores the default and raises
/// the signal again (Node.js does it for SIGINT and SIGTERM): the signal
/// that ends it comes from `raise`, with no handler of ours to see it.
/// Before, its trace was a spool holding what the writer had flushed (about
/// every 100 ms: nothing of this short run); now `raise` finishes the files
/// first for SIGTERM, as our handler does (the trace says `ended: signal`),
/// and flushes them, the spool then holding every event, where the signal
/// is blocked in the handler (it ends the process when the handler
/// returns) and for SIGSEGV, as after any crash.
#[test]
fn a_signal_the_program_raises_again_from_its_own_handler() {
    finished_by_sigterm("reraise");
    // The signal blocked in the handler (Node.js's way): it ends the
    // process when the handler returns, and the spool holds every event.
    cmd_traced_matches(
        &Cmd::new(example("crash")).arg("reraise-blocked"),
        "crash reraise-blocked",
        CRASH,
    );
    // A crash re-raised: the spool holds every event.
    cmd_traced_matches(
        &Cmd::new(example("crash")).arg("segv-reraise"),
        "crash segv-reraise",
        CRASH,
    );
}

/// A handler that sends its signal again with `kill(getpid(), sig)` (the
/// older idiom) or `pthread_kill(pthread_self(), sig)`: the files are
/// finished first, as for `raise`.
#[test]
fn a_signal_the_handler_sends_again_with_kill_or_pthread_kill() {
    finished_by_sigterm("reraise-kill");
    finished_by_sigterm("reraise-pthread");
    // To its own process group, at a default disposition it set itself.
    finished_by_sigterm("group");
    finished_by_sigterm("killpg");
}

/// The same signals sent with the raw system calls through `syscall()`:
/// `tgkill` and `tkill` to the handler's own thread, `kill` to the process.
#[test]
fn a_signal_sent_to_itself_through_syscall_finishes_the_files() {
    finished_by_sigterm("reraise-tgkill");
    finished_by_sigterm("reraise-tkill");
    finished_by_sigterm("syscall-kill");
}

/// SIGKILL sent by another thread of the process with the raw `tkill`
/// through `syscall()` (`crash thread-tkill`): nothing of ours runs after
/// it, so the library asks the kernel whether the target is one of the
/// process's threads and finishes the files before the call (a SIGTERM
/// would meet the library's own handler anyway). pthread_create's own
/// allocations come on top of the program's: its 2,000 blocks of 32 bytes
/// are counted exactly.
#[test]
fn sigkill_sent_by_another_thread_through_syscall_finishes_the_files() {
    let what = "crash thread-tkill";
    let cmd = Cmd::new(example("crash")).arg("thread-tkill");
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, what);
    assert_eq!(status_text(&run.output.status), "signal 9", "{what}");
    assert_eq!(spools(&run.dir), Vec::<std::path::PathBuf>::new(), "{what}");
    let trace = single_trace(&run);
    assert_eq!(trace.double_allocs, 0, "{what}");
    assert_validates(&trace.path);
    // The program's 2,000 blocks of 32 bytes and 1,000 frees, then
    // pthread_create's own blocks, which stay live (the thread is never
    // joined).
    let of_32 = trace.allocs.iter().filter(|a| a.0 == 32).count();
    assert_eq!(of_32, 2_000, "{what}: {:?}", trace.figures);
    let theirs: Vec<u64> = (trace.allocs.iter())
        .filter(|a| a.0 != 32)
        .map(|a| a.0)
        .collect();
    let expected = Figures::new(
        2_000 + theirs.len() as u64,
        1_000,
        64_000 + theirs.iter().sum::<u64>(),
        32_000 + theirs.iter().sum::<u64>(),
        1_000 + theirs.len() as u64,
    );
    assert_eq!(trace.figures, expected, "{what}");
    assert_eq!(cli_figures(&trace.path), expected, "{what}: tracer report");
    let dump = tracer(&["dump".as_ref(), trace.path.as_os_str()]);
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("info ")
            && l.contains(" ended=\"signal\"")
            && l.contains(" signal=\"SIGKILL\"")),
        "{what}: {text}"
    );
}

/// `kill(getpid(), SIGKILL)`: nothing runs after it, so the files are
/// finished before the call, and say SIGKILL ended the process.
#[test]
fn a_program_that_sends_itself_sigkill_leaves_a_finished_trace() {
    finished_by_signal("kill9", 9, "SIGKILL");
}

/// `examples/killed.c`: 100 allocations of 48 bytes, 40 freed, then a
/// pause and SIGKILL.
const KILLED: Figures = Figures::new(100, 40, 4_800, 2_880, 60);

/// Killed by SIGKILL after 300 ms: no handler of ours runs, so the trace is
/// the spool the writer flushed (it does when the program pauses),
/// recovered with every event.
#[test]
fn killed_by_sigkill_after_a_pause_the_spool_holds_every_event() {
    killed_by_sigkill(Cmd::new(example("killed")));
}

/// The same after the program idled 520 ms first, when the writer sleeps
/// 100 ms at a time: the allocations themselves wake it, and the spool
/// has them 60 ms later.
#[test]
fn a_program_that_wakes_from_idling_has_its_events_in_the_spool_at_once() {
    killed_by_sigkill(Cmd::new(example("killed")).arg("idle"));
}

fn killed_by_sigkill(cmd: Cmd) {
    let plain = cmd.run_plain();
    let mut run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "killed");
    assert_eq!(status_text(&run.output.status), "signal 9");
    assert_eq!(
        recover_spools(&mut run),
        1,
        "one spool left: {:?}",
        spools(&run.dir)
    );
    let trace = single_trace(&run);
    assert_trace_figures(&trace, KILLED, "killed");
}

/// The program's own SIGSEGV handler replaces ours and runs (exit status 3).
#[test]
fn crash_handled_traced() {
    crash_traced("handled");
}

/// CPython installs its KeyboardInterrupt handler only where it finds the
/// default disposition, and reports the others as it finds them: with our
/// fatal-signal handlers in place it must see the same as without.
#[test]
fn python_sees_the_same_signal_dispositions() {
    let script = "import signal; print([str(signal.getsignal(s)) for s in \
                  (signal.SIGINT, signal.SIGSEGV, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)])";
    // The dispositions python3 starts with are the defaults whatever the
    // test runs under (a job started in the background without job
    // control ignores SIGINT, nohup SIGHUP): `env` resets them, then
    // execs python3.
    let cmd = Cmd::new("env")
        .arg("--default-signal=INT,HUP,TERM,PIPE,SEGV")
        .arg("python3")
        .arg("-c")
        .arg(script);
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "python3 signal.getsignal");
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("default_int_handler"),
        "{}",
        String::from_utf8_lossy(&plain.stdout)
    );
}

/// `examples/own_alloc/lib.c` built as a shared library with `extra` flags
/// (each set of flags its own file), as a path.
fn own_alloc_lib(extra: &[&str]) -> String {
    let flags = [
        &["-O0", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC"][..],
        extra,
    ]
    .concat();
    example_with("own_alloc/lib", &flags)
        .to_string_lossy()
        .to_string()
}

/// `examples/own_alloc/main.c` linked with the library at `lib`.
fn own_alloc_main(lib: &str) -> std::path::PathBuf {
    example_with(
        "own_alloc/main",
        &[
            "-O0",
            "-g",
            "-fno-omit-frame-pointer",
            "-Wl,--no-as-needed",
            lib,
            "-ldl",
        ],
    )
}

/// examples/own_alloc: a program that defines the allocation functions
/// itself (as rustc does, linked with jemalloc), so the loader finds its
/// `malloc` before ours, and a library of its that allocates through its
/// imports. Every allocation the library makes is recorded, from its eight
/// kinds of calls and libc's `strdup` (libc imports `malloc` too), with
/// exact figures; the program's own direct calls are not. So are those of
/// a second build of the library that the program loads with `dlopen`
/// afterwards (patched at the tracer's next look at the loader's count,
/// which the first library's next rounds bring). The blocks stay the
/// program's allocator's: its `free` ends the program on any other block.
/// Without the redirection the trace held no allocation at all. The
/// libraries are linked with lazy binding (their imports still point to
/// their stubs) and with `-z now`.
#[test]
fn a_program_that_defines_malloc_itself_has_its_libraries_calls_recorded() {
    const ROUNDS: u64 = 500;
    // Per round (examples/own_alloc/lib.c): 8 allocations and 8 frees; the
    // program runs ROUNDS, 64 more once the plugin is loaded, then ROUNDS
    // of the plugin's.
    let sizes = [100u64, 150, 300, 200, 64, 128, 10, 11];
    let rounds = 2 * ROUNDS + 64;
    let expected = Figures::new(
        8 * rounds,
        8 * rounds,
        sizes.iter().sum::<u64>() * rounds,
        0,
        0,
    );
    for binding in ["-Wl,-z,lazy", "-Wl,-z,now"] {
        let lib = own_alloc_lib(&[binding, "-DLINKED"]);
        let plugin = own_alloc_lib(&[binding, "-DPLUGIN"]);
        let bin = own_alloc_main(&lib);
        let cmd = Cmd::new(bin).arg(ROUNDS.to_string()).arg(&plugin);
        let plain = cmd.run_plain();
        assert!(
            String::from_utf8_lossy(&plain.stdout).starts_with(&format!("ok {ROUNDS} ")),
            "{binding}: {plain:?}"
        );
        let run = run_traced(&cmd, &[("TRACER_QUIET", "0")]);
        assert_same_behaviour(&plain, &run, binding);
        assert!(
            run.stderr().contains("defines malloc itself"),
            "{binding}: {}",
            run.stderr()
        );
        let trace = single_trace(&run);
        assert_trace_figures(&trace, expected, binding);
        assert_eq!(trace.unknown_frees, 0, "{binding}");
        let mut counts = std::collections::BTreeMap::new();
        for &(size, stack) in &trace.allocs {
            *counts.entry(size).or_insert(0u64) += 1;
            let frames = trace.symbolized(stack);
            assert!(
                frames
                    .iter()
                    .any(|(_, s)| s.as_ref().is_some_and(|s| s.function == "lib_work")),
                "{binding}: a block of {size} bytes not from lib_work: {frames:x?}"
            );
        }
        let want: std::collections::BTreeMap<u64, u64> =
            sizes.iter().map(|&s| (s, rounds)).collect();
        assert_eq!(counts, want, "{binding}: allocations by size");
        // The report says what the trace leaves out.
        let report = tracer(&["report".as_ref(), trace.path.as_os_str()]);
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            text.contains("note: the program defines malloc itself"),
            "{binding}: {text}"
        );
    }
    // Not of a program that leaves `malloc` to glibc.
    let run = run_traced(&Cmd::new(example("leak")), &[]);
    let report = tracer(&["report".as_ref(), single_trace(&run).path.as_os_str()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("allocation calls:"), "{text}");
    assert!(!text.contains("defines malloc itself"), "{text}");
}

/// examples/own_alloc with `leak`: the library leaves a block reachable
/// from a global (64 bytes), one nothing points to (48) and one only that
/// one points to (24). The exit scan of the program's own allocator's
/// blocks (not glibc's: the sizes are the recorded ones) classes them as
/// the program says, and as valgrind does when told the allocator is the
/// executable's (`--soname-synonyms=somalloc=NONE`).
#[test]
fn the_leaks_of_a_program_that_defines_malloc_itself_are_classed_as_valgrind_does() {
    let bin = own_alloc_main(&own_alloc_lib(&[]));
    let cmd = Cmd::new(&bin).arg("100").arg("leak");
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "own_alloc leak");
    let scan = read_scan(&single_trace(&run).path).unwrap_or_else(|e| panic!("{e}"));
    let mut expected = LeakClasses::default();
    expected.set(format_writers::LeakKind::Definite, (48, 1));
    expected.set(format_writers::LeakKind::Indirect, (24, 1));
    expected.set(format_writers::LeakKind::Reachable, (64, 1));
    assert_eq!(scan.classes, expected, "ours");
    let vg = std::process::Command::new("valgrind")
        .args([
            "--soname-synonyms=somalloc=NONE",
            "--leak-check=full",
            "--show-leak-kinds=all",
            "--run-libc-freeres=no",
        ])
        .arg(&bin)
        .args(["100", "leak"])
        .output()
        .expect("valgrind runs");
    let summary = parse_valgrind_leaks(&String::from_utf8_lossy(&vg.stderr))
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&vg.stderr)));
    assert_eq!(summary.classes, expected, "valgrind");
}

/// examples/usable_size.c linked with another allocator: jemalloc, which
/// does not define glibc's `__libc_*` functions (our hooks then hand the
/// program glibc's blocks), and tcmalloc, which does (our hooks then hand
/// it tcmalloc's). Either way `malloc_usable_size` must answer for the
/// allocator the blocks came from: linked with jemalloc, the traced program
/// died of SIGSEGV in jemalloc's `malloc_usable_size` until libtracer
/// exported its own. `.ci/run` installs both allocators.
#[test]
fn a_program_linked_with_another_allocator_keeps_one_heap() {
    let n: u64 = 100_000;
    let bytes = (0..n).map(|i| 24 + i % 200).sum::<u64>();
    let expected = Figures::new(n, n, bytes, 0, 0);
    for link in [
        "-ljemalloc",
        "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    ] {
        let bin = example_with("usable_size", &["-O0", "-g", "-Wl,--no-as-needed", link]);
        // Both allocators need libstdc++, whose start-up allocates its
        // 72,704-byte emergency exception pool (see `cxx_new_traced`).
        let stdcxx = loaded_objects(&bin, None)
            .iter()
            .any(|o| o.to_string_lossy().contains("libstdc++"));
        let expected = if stdcxx {
            expected.plus_live(1, 72_704)
        } else {
            expected
        };
        let cmd = Cmd::new(bin);
        let plain = cmd.run_plain();
        assert_eq!(
            String::from_utf8_lossy(&plain.stdout),
            "ok 100000\n",
            "{link}"
        );
        let run = run_traced(&cmd, &[]);
        assert_same_behaviour(&plain, &run, link);
        assert_trace_figures(&single_trace(&run), expected, link);
    }
}

/// `examples/signal_alloc.c`: a `SIGPROF` handler allocates, frees and
/// reallocs while `main` makes malloc/free pairs. Most signals land while
/// a hook records its event, inside the tracer's guard. Every call of the
/// handler is in the trace (its figures are the program's own count), in
/// an order the trace reads without a free of an unknown block, nothing is
/// live at exit, and each handler block's stack goes from the handler
/// through the signal frame to `main`: on the thread's stack and on an
/// alternate signal stack.
#[test]
fn a_signal_handlers_allocations_inside_a_hook_are_recorded() {
    for mode in ["", "altstack"] {
        let mut cmd = Cmd::new(example("signal_alloc"));
        if !mode.is_empty() {
            cmd = cmd.arg(mode);
        }
        let run = run_traced(&cmd, &[("TRACER_STACK_STATS", "1")]);
        assert!(run.output.status.success(), "{mode}: {}", run.stderr());
        // Some of the handler's calls did arrive inside a hook (the
        // private statistics line counts them), or this run proves nothing.
        let [recorded, lost, _] = inside_hook_stats(&run);
        assert!(
            recorded > 0 && lost == 0,
            "{mode}: events recorded inside hooks {recorded}, lost {lost}; {}",
            run.stderr()
        );
        let out = String::from_utf8_lossy(&run.output.stdout).to_string();
        let n: Vec<u64> = out
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let [pairs, runs, bytes] = n[..] else {
            panic!("{mode}: unexpected output {out:?}");
        };
        let trace = single_trace(&run);
        let what = format!("signal_alloc {mode} ({out})");
        assert_trace_figures(
            &trace,
            Figures::new(pairs + 3 * runs, pairs + 3 * runs, bytes, 0, 0),
            &what,
        );
        assert_eq!(trace.unknown_frees, 0, "{what}: frees of unknown blocks");
        assert_eq!(
            trace.double_allocs, 0,
            "{what}: allocations at live addresses"
        );
        let handler_blocks: Vec<u64> = trace
            .allocs
            .iter()
            .filter(|a| a.0 == 4093)
            .map(|a| a.1)
            .collect();
        assert_eq!(
            handler_blocks.len() as u64,
            runs,
            "{what}: 4093-byte blocks"
        );
        for stack in handler_blocks {
            let names: Vec<String> = trace
                .symbolized(stack)
                .into_iter()
                .map(|(_, s)| s.map(|s| s.function).unwrap_or_default())
                .collect();
            assert_eq!(
                names.first().map(String::as_str),
                Some("handler"),
                "{what}: {names:?}"
            );
            assert!(names.iter().any(|n| n == "main"), "{what}: {names:?}");
        }
    }
}

/// `examples/signal_longjmp.c`: a `SIGPROF` handler leaves the code it
/// interrupted with `siglongjmp` when that code is the tracer's (30 times),
/// while `main` makes malloc/free pairs. The thread's later allocations
/// are all recorded: 100 blocks of 4000 bytes after the timer stops. (The
/// jump used to leave the thread inside the tracer's guard: none of them.)
#[test]
fn a_signal_handler_that_jumps_out_of_a_hook_leaves_the_thread_traced() {
    let run = run_traced(
        &Cmd::new(example("signal_longjmp")),
        &[("TRACER_STACK_STATS", "1")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(String::from_utf8_lossy(&run.output.stdout), "jumps 30\n");
    // Some jumps did leave a hook while it recorded (the private
    // statistics line counts them), or this run proves nothing.
    let [_, _, left] = inside_hook_stats(&run);
    assert!(left > 0, "hooks left by a jump: {left}; {}", run.stderr());
    let trace = single_trace(&run);
    let last = trace.allocs.iter().filter(|a| a.0 == 4000).count();
    assert_eq!(last, 100, "allocations of 4000 bytes after the jumps");
}

/// `examples/syscall_unwind.c`: a signal handler walks its stack with
/// glibc's `backtrace()` while the program is blocked in `syscall()`, which
/// is libtracer's (an assembly entry). The walk reaches the program's
/// caller traced as untraced; without unwind rules for our entry it
/// stopped there ("not found").
#[test]
fn a_stack_walk_through_our_syscall_entry_reaches_the_caller() {
    let cmd = Cmd::new(example_with(
        "syscall_unwind",
        &["-O0", "-g", "-rdynamic", "-fno-omit-frame-pointer"],
    ));
    let plain = cmd.run_plain();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "syscall_unwind: blocked_call found\n"
    );
    let traced = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &traced, "syscall_unwind");
}

/// The private `TRACER_STACK_STATS` line about signal handlers inside
/// hooks: events recorded, lost, and hooks left by a jump.
fn inside_hook_stats(run: &Traced) -> [u64; 3] {
    let stats = run.stderr();
    let n: Vec<u64> = stats
        .lines()
        .find_map(|l| l.strip_prefix("libtracer: signal handlers inside hooks: "))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    n.try_into()
        .unwrap_or_else(|n| panic!("the statistics line, three figures: {n:?}; {stats}"))
}

/// `examples/split_tables.c`: the unwind tables 16 MiB above the code, as
/// node's binary has them. glibc's `_dl_find_object` then gives the range
/// of the code's segment alone, and the tables lay beyond it: every stack
/// went to libgcc's unwinder, microseconds each (node: 1.6 s traced
/// against 0.05 untraced). The tables' segment is now found from the
/// program's headers: no stack goes to libgcc, each is complete to
/// `main`, and the figures are the program's. As an executable and as a
/// position-independent one.
#[test]
fn unwind_tables_in_a_segment_apart_from_the_code_are_read() {
    for pie in ["-no-pie", "-pie"] {
        let what = format!("split_tables {pie}");
        let bin = example_with(
            "split_tables",
            &[
                "-O1",
                "-g",
                "-fomit-frame-pointer",
                pie,
                "-Wl,--section-start=.rodata=0x1000000",
            ],
        );
        let run = run_traced(&Cmd::new(&bin), &[("TRACER_STACK_STATS", "1")]);
        assert!(run.output.status.success(), "{what}: {}", run.stderr());
        assert_eq!(String::from_utf8_lossy(&run.output.stdout), "done\n");
        let by_libgcc: u64 = run
            .stderr()
            .lines()
            .find_map(|l| l.strip_prefix("libtracer: unwind rules: "))
            .and_then(|l| l.split("; ").nth(1))
            .and_then(|l| l.strip_suffix(" stacks by libgcc's unwinder"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no rules line: {}", run.stderr()));
        assert_eq!(by_libgcc, 0, "{what}");
        let trace = single_trace(&run);
        assert_trace_figures(&trace, Figures::new(1000, 1000, 47_020, 0, 0), &what);
        for &(size, stack) in &trace.allocs {
            let names: Vec<String> = trace
                .symbolized(stack)
                .into_iter()
                .map(|(_, s)| s.map(|s| s.function).unwrap_or_default())
                .filter(|n| !n.contains("malloc"))
                .collect();
            assert_eq!(
                names[..3],
                ["leaf", "middle", "main"],
                "{what}: {size} B: {names:?}"
            );
        }
    }
}
