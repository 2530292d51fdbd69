//! The reachability scan at exit against valgrind memcheck.
//!
//! Each example of `examples/leaks/` runs three ways: under valgrind
//! (`--leak-check=full --show-leak-kinds=all --run-libc-freeres=no
//! --run-cxx-freeres=no`, one log per process), under libtracer (whose
//! `LeakScan`/`BlockClass` records are read back with `format_writers::open`
//! and summed per class with each block's allocated size), and under
//! `tracer run --leak-check --fail-on-leak`. Per process, every class's bytes
//! and blocks must equal valgrind's, and valgrind's must equal what reading
//! the example's code gives (so a misparsed log cannot make a test pass).
//!
//! The one documented difference: a thread's DTV (glibc's dynamic thread
//! vector, calloc'd by `pthread_create`, "possibly lost" for both) has one
//! 16-byte slot per loaded module with TLS, and the preloaded objects differ
//! (valgrind's `vgpreload_*` against libtracer.so and what it needs). Both
//! sizes are computed from the objects' program headers and asserted exactly.

use std::path::{Path, PathBuf};

use format_writers::LeakKind;
use tracer_tests::{
    assert_same_behaviour, assert_trace_figures, assert_validates, cli_report, dtv_bytes_for,
    dtv_bytes_under_valgrind, example, example_with, fresh_dir, read_scan, read_trace, repo_root,
    run_traced, single_trace, spools, status_text, tracer, tracer_lib, valgrind_leaks, Cmd,
    Figures, LeakClasses, ScanResult, Traced,
};

const NONE: LeakClasses = LeakClasses::new([(0, 0); 4]);

/// Classes in the order definite, indirect, possible, reachable.
const fn classes(d: (u64, u64), i: (u64, u64), p: (u64, u64), r: (u64, u64)) -> LeakClasses {
    LeakClasses::new([d, i, p, r])
}

/// valgrind's and libtracer's classes of the first process and, when the
/// example forks, of its child.
struct Compared {
    valgrind: Vec<LeakClasses>,
    ours: Vec<LeakClasses>,
    scans: Vec<ScanResult>,
}

fn run_both(cmd: &Cmd) -> Compared {
    let (vg_out, logs) = valgrind_leaks(cmd);
    assert!(
        vg_out.status.success(),
        "{cmd:?} under valgrind: {}",
        status_text(&vg_out.status)
    );
    // The first process is the one whose parent is not among the logs.
    let pids: Vec<u32> = logs.iter().map(|l| l.pid).collect();
    let first = logs
        .iter()
        .find(|l| !pids.contains(&l.parent_pid))
        .expect("valgrind log of the first process");
    let mut valgrind = vec![first.classes];
    valgrind.extend(
        logs.iter()
            .filter(|l| l.parent_pid == first.pid)
            .map(|l| l.classes),
    );

    let traced = run_traced(cmd, &[]);
    assert!(
        traced.output.status.success(),
        "{cmd:?} under libtracer: {}; stderr: {}",
        status_text(&traced.output.status),
        traced.stderr()
    );
    let mut scans: Vec<ScanResult> = traced
        .files
        .iter()
        .map(|f| read_scan(f).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    scans.sort_by_key(|s| (s.pid != traced.pid, s.pid));
    for s in &scans {
        assert!(s.scanned, "process {}: no LeakScan record", s.pid);
        assert_eq!(
            (s.unclassified, s.stray),
            (0, 0),
            "process {}: every block live at the scan has exactly one class",
            s.pid
        );
    }
    let ours = scans.iter().map(|s| s.classes).collect();
    Compared {
        valgrind,
        ours,
        scans,
    }
}

/// Both tools agree with each other and with the expected classes.
fn check_equal(name: &str, expected: &[LeakClasses]) {
    check_equal_with(name, &[], expected);
}

/// [`check_equal`] with arguments for the example.
fn check_equal_with(name: &str, args: &[&str], expected: &[LeakClasses]) {
    let mut cmd = Cmd::new(example(&format!("leaks/{name}")));
    for a in args {
        cmd = cmd.arg(a);
    }
    let c = run_both(&cmd);
    let name = format!("{name} {args:?}");
    assert_eq!(c.valgrind, expected, "{name}: valgrind's classes");
    assert_eq!(
        c.ours,
        c.valgrind,
        "{name}: libtracer's classes against valgrind's (blocks: {:?})",
        c.scans.iter().map(|s| &s.blocks).collect::<Vec<_>>()
    );
}

#[test]
fn direct_leak_is_definite() {
    // make_leak: 100 bytes, make_small_leak: 28 bytes, both lost.
    check_equal("direct", &[classes((128, 2), (0, 0), (0, 0), (0, 0))]);
}

/// A program that lowers its descriptor limit below where the tracer keeps
/// its descriptors: the scan still reads the process's mappings (it found
/// no roots, and every block came out definitely lost, until /proc files
/// were read from a low descriptor where no high one could be had).
#[test]
fn a_program_with_few_descriptors_left_is_scanned_whole() {
    check_equal(
        "few_descriptors",
        &[classes((77, 1), (0, 0), (0, 0), (40, 1))],
    );
}

/// The same program once it has used every descriptor its limit allows: no
/// /proc path opens at exit, and the mappings come through the descriptor
/// kept since start-up (the path a chroot takes, without needing root).
#[test]
fn a_program_out_of_descriptors_is_scanned_whole() {
    check_equal_with(
        "few_descriptors",
        &["exhaust"],
        &[classes((77, 1), (0, 0), (0, 0), (40, 1))],
    );
}

/// examples/leaks/chroot.c: a process that chroots into an empty directory
/// before it exits. Its scan still has its roots and its trace is finished
/// (the scan found no roots, every block came out definitely lost, and
/// the file was "cannot finish" for a spool out of reach, until the maps
/// were kept open from start-up and a spool out of reach was left whole;
/// it is now emptied).
#[test]
fn a_process_that_chroots_is_scanned_and_its_trace_finished() {
    let jail = fresh_dir("jail");
    let cmd = Cmd::new(example("leaks/chroot")).arg(&jail);
    let plain = cmd.run_plain();
    if String::from_utf8_lossy(&plain.stdout) == "no chroot\n" {
        eprintln!("skipped: chroot needs root here");
        return;
    }
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "done\n");
    let traced = run_traced(&cmd, &[("TRACER_QUIET", "0")]);
    assert_same_behaviour(&plain, &traced, "chroot");
    assert!(
        traced.stderr().contains("libtracer: wrote "),
        "{}",
        traced.stderr()
    );
    assert_eq!(traced.files.len(), 1, "{:?}", traced.files);
    // The spool, out of reach by its name, is emptied, not left whole.
    let left = spools(&traced.dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(std::fs::metadata(&left[0]).unwrap().len(), 0);
    let s = read_scan(&traced.files[0]).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.scanned);
    assert_eq!((s.unclassified, s.stray), (0, 0));
    assert_eq!(s.classes, classes((77, 1), (0, 0), (0, 0), (40, 1)));
}

/// A 64 MiB mapping written only on its last page: the pointer there is
/// found, and the pages never written are not read (the statistics line
/// counts them; the kernel's page tables tell which pages were written).
#[test]
fn a_mapping_written_only_at_its_end_is_read_only_there() {
    check_equal("unwritten", &[classes((200, 1), (0, 0), (0, 0), (100, 1))]);
    let (_, s, stats) = scan_with_stats(&Cmd::new(example("leaks/unwritten")));
    assert_eq!(s.classes, classes((200, 1), (0, 0), (0, 0), (100, 1)));
    let never: u64 = stats
        .split(", ")
        .find_map(|f| f.strip_suffix(" bytes never written (not read)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no unwritten bytes in: {stats}"));
    assert!(
        never >= (64 << 20) - 4096,
        "{never} bytes skipped of the mapping's 64 MiB: {stats}"
    );
}

/// Runs `cmd` under libtracer with the scan's statistics line
/// (`TRACER_SCAN_STATS`); the run must succeed and its scan classify every
/// block live at the scan exactly once. Returns the run, its scan read back
/// and the statistics line (without its `libtracer: leak scan: ` prefix).
fn scan_with_stats(cmd: &Cmd) -> (Traced, ScanResult, String) {
    let traced = run_traced(cmd, &[("TRACER_SCAN_STATS", "1")]);
    assert!(
        traced.output.status.success(),
        "{}; stderr: {}",
        status_text(&traced.output.status),
        traced.stderr()
    );
    let stats = traced
        .stderr()
        .lines()
        .find_map(|l| l.strip_prefix("libtracer: leak scan: "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no scan statistics line: {}", traced.stderr()));
    let s = read_scan(&traced.files[0]).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.scanned);
    assert_eq!((s.unclassified, s.stray), (0, 0));
    (traced, s, stats)
}

/// The "sizes replayed" count of a run's scan statistics line.
fn sizes_replayed(bin: &Path) -> u64 {
    let (_, _, stats) = scan_with_stats(&Cmd::new(bin));
    stats
        .split(", ")
        .nth(1)
        .and_then(|f| f.split_once(" sizes replayed in "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no replayed sizes in: {stats}"))
}

/// Ten blocks lost at the start (exact sizes kept: few blocks live then),
/// five lost while 10,000 blocks are live (sizes read back from the trace at
/// exit): valgrind's classes and bytes, exactly, both ways. The last lost
/// block lies below glibc's top chunk, whose address (held by the arena in
/// libc's data) falls inside its requested bytes: still definitely lost. A
/// small program needs no replay at all.
#[test]
fn leaks_from_the_start_and_from_a_crowded_heap_keep_their_sizes() {
    check_equal("survivors", &[classes((390, 15), (0, 0), (0, 0), (0, 0))]);
    let late = sizes_replayed(&example("leaks/survivors"));
    assert!((5..=64).contains(&late), "sizes replayed: {late}");
    assert_eq!(sizes_replayed(&example("leaks/direct")), 0);
}

#[test]
fn blocks_behind_a_lost_struct_are_indirect() {
    // The 16-byte root is lost; 40 + 60 + 24 bytes hang from it.
    check_equal("indirect", &[classes((16, 1), (124, 3), (0, 0), (0, 0))]);
}

#[test]
fn blocks_held_by_globals_are_reachable() {
    // 200 (a global), 32 (a static struct), 8 (inside the 32-byte block).
    check_equal("global", &[classes((0, 0), (0, 0), (0, 0), (240, 3))]);
}

#[test]
fn a_block_held_only_by_an_interior_pointer_is_possible() {
    check_equal("interior", &[classes((0, 0), (0, 0), (64, 1), (0, 0))]);
}

#[test]
fn a_stale_pointer_past_the_requested_size_keeps_nothing_alive() {
    // `lost` (24 bytes) is definite; the 105-byte block holding a stale
    // copy of its address in its spare bytes is reachable.
    let expected = [classes((24, 1), (0, 0), (0, 0), (105, 1))];
    let bin = example("leaks/slack");
    let c = run_both(&Cmd::new(&bin));
    assert_eq!(c.valgrind, expected, "slack: valgrind's classes");
    assert_eq!(c.ours, c.valgrind, "slack: libtracer's classes");
    // The case is real only if glibc gave the freed chunk back, stale
    // address and all (valgrind's allocator never does: not asked there).
    let traced = run_traced(&Cmd::new(&bin), &[]);
    assert_eq!(
        String::from_utf8_lossy(&traced.output.stdout),
        "slack: chunk reused\n"
    );
}

#[test]
fn a_leak_in_a_forked_child_is_the_childs() {
    // The parent frees its only block before forking; the child loses 80.
    check_equal("fork", &[NONE, classes((80, 1), (0, 0), (0, 0), (0, 0))]);
}

#[test]
fn clean_program_has_no_live_block() {
    check_equal("clean", &[NONE]);
}

#[test]
fn a_leak_in_a_thread_and_the_dtv_of_the_finished_thread() {
    let bin = example("leaks/thread");
    let c = run_both(&Cmd::new(&bin));
    // The DTV is reached only through the pointer to its second word in the
    // control block of the cached thread stack: possibly lost for both.
    let dtv_vg = dtv_bytes_under_valgrind(&bin);
    let dtv_ours = dtv_bytes_for(&bin, Some(&tracer_lib()));
    assert_eq!(
        c.valgrind,
        vec![classes((48, 1), (0, 0), (dtv_vg, 1), (0, 0))],
        "thread: valgrind's classes"
    );
    assert_eq!(
        c.ours,
        vec![classes((48, 1), (0, 0), (dtv_ours, 1), (0, 0))],
        "thread: libtracer's classes (blocks {:?})",
        c.scans[0].blocks
    );
    // The documented difference only: one DTV slot per extra TLS module.
    let mut adjusted = c.ours[0];
    adjusted.set(LeakKind::Possible, (dtv_vg, 1));
    assert_eq!(adjusted, c.valgrind[0]);
    assert_eq!(dtv_ours % 16, 0);
}

/// leaks/main_exit.c: `main` calls pthread_exit, its worker is the last
/// thread. Traced, the process must end as it does untraced (it never
/// ended: the writer thread kept it alive), with a scan that still reads
/// memory once the main thread is gone (its /proc/self/maps is empty then):
/// the worker's lost block definite, its kept one reachable.
#[test]
fn the_last_thread_ending_ends_the_traced_process_with_its_scan() {
    let bin = example("leaks/main_exit");
    let cmd = Cmd::new(&bin);
    let plain = cmd.run_plain();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "main_exit: worker done\n"
    );
    let traced = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &traced, "leaks/main_exit");
    let s = read_scan(&traced.files[0]).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.scanned, "a LeakScan record");
    assert_eq!((s.unclassified, s.stray), (0, 0));
    let kind_of = |size: u64| -> Vec<LeakKind> {
        s.blocks
            .iter()
            .filter(|b| b.1 == size)
            .map(|b| b.2)
            .collect()
    };
    assert_eq!(kind_of(48), vec![LeakKind::Definite], "{:?}", s.blocks);
    assert_eq!(kind_of(64), vec![LeakKind::Reachable], "{:?}", s.blocks);
    assert_eq!(
        s.classes.get(LeakKind::Definite),
        (48, 1),
        "one definite leak, the worker's: {:?}",
        s.blocks
    );
}

#[test]
fn scan_can_be_switched_off() {
    let bin = example("leaks/direct");
    let traced = run_traced(&Cmd::new(&bin), &[("TRACER_LEAK_SCAN", "0")]);
    assert!(traced.output.status.success());
    let s = read_scan(&traced.files[0]).unwrap_or_else(|e| panic!("{e}"));
    assert!(!s.scanned, "TRACER_LEAK_SCAN=0 writes no scan");
    assert!(s.blocks.is_empty());
    // Same trace with both formats: the classes agree between them.
    let traced = run_traced(&Cmd::new(&bin), &[("TRACER_FORMAT", "mlyze,dumpalloc")]);
    assert_eq!(traced.files.len(), 2);
    let a = read_scan(&traced.files[0]).unwrap_or_else(|e| panic!("{e}"));
    let b = read_scan(&traced.files[1]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.classes, classes((128, 2), (0, 0), (0, 0), (0, 0)));
    assert_eq!(a.blocks, b.blocks);
}

/// `tracer run --leak-check --fail-on-leak -- BIN`: its exit status.
fn run_fail_on_leak(bin: &Path) -> (i32, String) {
    let dir = fresh_dir("run-leak-check");
    tracer_run(
        &["--leak-check", "--fail-on-leak"],
        &dir.join("t-%p"),
        &[bin.as_os_str()],
    )
}

/// `tracer run FLAGS --output OUTPUT -- CMD`: its exit status (-1 when
/// killed) and its stderr.
fn tracer_run(flags: &[&str], output: &Path, cmd: &[&std::ffi::OsStr]) -> (i32, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["run".as_ref()];
    args.extend(flags.iter().map(std::ffi::OsStr::new));
    args.extend(["--output".as_ref(), output.as_os_str(), "--".as_ref()]);
    args.extend(cmd);
    let out = tracer(&args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fail_on_leak_exit_statuses() {
    // A leak is a definite or indirect block (LeakSanitizer's and the
    // report's default): 23 for those, 0 for possible/reachable-only
    // programs and the clean one, the program's own status otherwise.
    for (name, want) in [
        ("leaks/direct", 23),
        ("leaks/indirect", 23),
        ("leaks/thread", 23),
        ("leaks/fork", 23),
        ("leaks/global", 0),
        ("leaks/interior", 0),
        ("leaks/clean", 0),
        ("scan/fails", 3),
    ] {
        let bin: PathBuf = example(name);
        let (code, stderr) = run_fail_on_leak(&bin);
        assert_eq!(code, want, "tracer run --fail-on-leak -- {name}: {stderr}");
    }
}

/// A program LD_PRELOAD cannot reach (statically linked) is not checked:
/// `tracer run` says so in one line naming the program, and a leak check
/// that read no allocation trace fails the run (1) rather than passing a
/// program whose leaks it never saw. The static `leaks/direct` loses 128
/// bytes (see the example); its own status is 0.
#[test]
fn a_program_the_library_cannot_reach_fails_the_leak_check() {
    let bin = example_with("leaks/direct", &["-O0", "-g", "-static"]);
    let (code, stderr) = run_fail_on_leak(&bin);
    assert_eq!(
        code, 1,
        "tracer run --fail-on-leak on a static program: {stderr}"
    );
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("statically linked"))
        .collect();
    assert_eq!(said.len(), 1, "one line says why: {stderr}");
    assert!(said[0].contains(&*bin.to_string_lossy()), "{stderr}");
    // Without a leak check the program's own status stands, and the line
    // is still there.
    let dir = fresh_dir("run-static");
    let (code, stderr) = tracer_run(&[], &dir.join("t"), &[bin.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("no trace was written"), "{stderr}");
    assert!(stderr.contains("statically linked"), "{stderr}");
    // The same program linked dynamically but traced with the syscall
    // capture alone: no allocation trace to check, so no pass either.
    let dynamic = example("leaks/direct");
    let (code, stderr) = tracer_run(
        &["--format", "tlv", "--fail-on-leak"],
        &dir.join("d"),
        &[dynamic.as_os_str()],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no allocation trace"), "{stderr}");
}

/// exit_fastbins.c: the program's freed small blocks are still in glibc's
/// fast bins when its own stream is flushed, the last thing `exit` does,
/// after the tracer's exit work (run from a stream of its own, which the
/// example's preloaded library opened earlier: flushed later). That work
/// must not make glibc consolidate them. It did: its stream's 8 KiB
/// buffer, taken from the main arena, is a request large enough for glibc
/// to consolidate every fast bin first (13 chunks left of the program's
/// 993), which cost perl and cc1plus ~13% of a traced run. The tracer's
/// own small frees at exit may add chunks; none of the program's go, but
/// those glibc served from a free chunk of another size the tracer left
/// (it prints how many) are cached by that size, not counted. The same
/// with `TRACER_STACK_DEPTH=0`: no stack was walked during the run, so
/// the exit's walk was the first to compute an unwind rule, and its
/// context, over a kilobyte, came from the main arena then (perl 300k
/// hash: ~30 ms of consolidation, slower than with stacks).
#[test]
fn the_exit_work_leaves_the_programs_fast_bins_alone() {
    let dir = fresh_dir("exit-fastbins");
    let src = repo_root().join("examples/exit_fastbins.c");
    let lib = dir.join("libexit_fastbins.so");
    let status = std::process::Command::new("gcc")
        .args(["-g", "-O0", "-shared", "-fPIC", "-DSTREAM_LIB", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(status.success(), "gcc {}", src.display());
    let cmd = Cmd::new(example("exit_fastbins"));
    let figures = |out: &[u8]| -> (u64, u64) {
        let text = String::from_utf8_lossy(out);
        let number = |suffix: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix("exit_fastbins: ")?.strip_suffix(suffix))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no \"{suffix}\" line: {text}"))
        };
        (
            number(" chunks in the fast bins at the end"),
            number(" blocks in chunks of another size"),
        )
    };
    let plain = Cmd::new(example("exit_fastbins"))
        .env("LD_PRELOAD", &lib)
        .run_plain();
    let (untraced, _) = figures(&plain.stdout);
    assert!(
        untraced >= 900,
        "the program's frees fill the fast bins: {untraced}"
    );
    let preload = format!("{}:{}", tracer_lib().display(), lib.display());
    for depth in ["64", "0"] {
        let run = run_traced(
            &cmd,
            &[("LD_PRELOAD", &preload), ("TRACER_STACK_DEPTH", depth)],
        );
        assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
        let (traced, other) = figures(&run.output.stdout);
        assert!(
            traced + other >= untraced,
            "depth {depth}: fast-bin chunks at the end: {traced} traced ({other} of the \
             program's blocks in chunks of another size), {untraced} untraced"
        );
        let trace = single_trace(&run);
        assert_eq!(trace.figures.frees, 1000, "the program's frees");
    }
}

/// `examples/leaks/late_atexit.c`: a library's constructor registers an
/// exit handler (before the tracer's constructor runs) that frees a table
/// and not the 4 blocks it points to. valgrind, checking after every
/// handler, finds 400 bytes in 4 blocks definitely lost; the scan now
/// waits for the end of the exit handlers too, and its classes are
/// valgrind's. (It ran in the tracer's own handler before: 432 bytes in 5
/// blocks still reachable, no leak.)
#[test]
fn exit_handlers_registered_before_the_tracers_run_before_the_scan() {
    let dir = fresh_dir("late-atexit");
    let src = repo_root().join("examples/leaks/late_atexit.c");
    let lib = dir.join("liblate_atexit.so");
    let bin = dir.join("late_atexit");
    for args in [vec!["-shared", "-fPIC", "-DLATE_LIB", "-o"], vec!["-o"]] {
        let out = if args.len() > 1 { &lib } else { &bin };
        let mut c = std::process::Command::new("gcc");
        c.args(["-g", "-O0", "-Wall"])
            .args(&args)
            .arg(out)
            .arg(&src);
        if args.len() == 1 {
            c.arg("-L")
                .arg(&dir)
                .arg("-llate_atexit")
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        let r = c.output().expect("gcc runs");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    let c = run_both(&Cmd::new(&bin));
    assert_eq!(c.valgrind[0].get(LeakKind::Definite), (400, 4));
    assert_eq!(c.valgrind[0].get(LeakKind::Reachable), (0, 0));
    assert_eq!(c.ours, c.valgrind, "libtracer's classes against valgrind's");
}

/// `examples/prefixed_alloc.c` calls an allocator of its own by mimalloc's
/// names (as a Rust program with a `#[global_allocator]` does): `tracer
/// run` says in one line that those blocks are not traced, and the trace
/// holds the one block made with the C library's `malloc`. A program that
/// allocates through `malloc` alone gets no such line; nor does the same
/// program stripped (its symbols are gone: documented).
#[test]
fn a_program_with_an_allocator_of_its_own_names_is_told_what_is_not_traced() {
    let bin = example("prefixed_alloc");
    let dir = fresh_dir("run-prefixed");
    let (code, stderr) = tracer_run(&[], &dir.join("t"), &[bin.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    let expected = format!(
        "tracer: {} calls mimalloc by names of its own (mi_malloc): the blocks it allocates \
         that way are not traced, only those of the C library's malloc",
        bin.display()
    );
    assert_eq!(
        stderr.lines().filter(|l| *l == expected).count(),
        1,
        "{stderr}"
    );
    let trace = read_trace(&dir.join("t.mlyze")).unwrap_or_else(|e| panic!("{e}"));
    assert_trace_figures(&trace, Figures::new(1, 1, 24, 0, 0), "prefixed_alloc");
    for (what, program) in [
        ("malloc alone", example("leaks/clean")),
        ("stripped", {
            let stripped = dir.join("stripped");
            let ok = std::process::Command::new("strip")
                .arg("-o")
                .arg(&stripped)
                .arg(&bin)
                .status()
                .expect("strip runs");
            assert!(ok.success());
            stripped
        }),
    ] {
        let out = dir.join(what.replace(' ', "_"));
        let (code, stderr) = tracer_run(&[], &out, &[program.as_os_str()]);
        assert_eq!(code, 0, "{what}: {stderr}");
        assert!(!stderr.contains("names of its own"), "{what}: {stderr}");
    }
}

/// A program that crashes under `tracer run` leaves its trace as a spool:
/// `tracer run` turns it into the trace file once the process is gone
/// (every event before the fault: `examples/crash.c`'s figures), and
/// the leak check says that process was not checked, rather than failing
/// on "byte 0: expected the magic bytes" or calling its live blocks
/// leaks: the status stays the crash's (128 + SIGSEGV), as under
/// LeakSanitizer, whose check never runs in a crashed process.
#[test]
fn a_crashed_program_run_under_tracer_run_gets_its_trace_recovered() {
    let bin = example("crash");
    let dir = fresh_dir("run-crash");
    let (code, stderr) = tracer_run(
        &["--leak-check", "--fail-on-leak"],
        &dir.join("t"),
        &[bin.as_os_str(), "segv".as_ref()],
    );
    assert_eq!(code, 128 + 11, "{stderr}");
    let trace_path = dir.join("t.mlyze");
    assert!(
        stderr.contains(&format!("tracer: recovered {}", trace_path.display())),
        "{stderr}"
    );
    assert!(stderr.contains("not leak-checked"), "{stderr}");
    assert!(!stderr.contains("expected the magic"), "{stderr}");
    assert_validates(&trace_path);
    let trace = read_trace(&trace_path).unwrap_or_else(|e| panic!("{e}"));
    assert_trace_figures(
        &trace,
        Figures::new(2000, 1000, 64_000, 32_000, 1000),
        "crash segv",
    );
}

/// A process that replaces itself with `exec` loses its image's blocks,
/// which are no leaks (valgrind and LeakSanitizer check nothing at exec):
/// the files of an image ended by exec say so (`ended: exec`), and `tracer
/// run --fail-on-leak` leaves them out. `examples/exec.c` keeps 512 bytes
/// live when it execs `leaks/clean`; the shell's background job is the
/// case met in scripts (dash allocates between its fork and the exec).
/// Both exited 23 ("3 leaks (629 bytes in 3 blocks)" for the shell).
#[test]
fn an_image_ended_by_exec_is_not_leak_checked() {
    let dir = fresh_dir("run-exec-image");
    let exec = example("exec");
    let clean = example("leaks/clean");
    let script = dir.join("bg.sh");
    std::fs::write(&script, format!("{} &\nwait\n", clean.display())).unwrap();
    // The verdict: every process that exited checked (exec.c's new image,
    // leaks/clean; the shell and its job's leaks/clean), the image that
    // exec replaced counted apart.
    for (what, cmd, verdict) in [
        (
            "exec",
            vec![
                exec.clone().into_os_string(),
                clean.clone().into_os_string(),
            ],
            "tracer: no leaks in 1 process (1 image replaced by exec, not checked)",
        ),
        (
            "sh &",
            vec!["sh".into(), script.clone().into_os_string()],
            "tracer: no leaks in 2 processes (1 image replaced by exec, not checked)",
        ),
    ] {
        let out_dir = dir.join(what.replace(' ', "_").replace('&', "bg"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let cmd: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_os_str()).collect();
        let (code, stderr) = tracer_run(
            &["--leak-check", "--fail-on-leak"],
            &out_dir.join("t-%p"),
            &cmd,
        );
        assert_eq!(code, 0, "{what}: {stderr}");
        assert!(stderr.lines().any(|l| l == verdict), "{what}: {stderr}");
    }
    // The pre-exec image of exec.c: its files carry the mark.
    let run = run_traced(
        &Cmd::new(&exec).arg(&clean),
        &[("TRACER_FORMAT", "mlyze,dumpalloc")],
    );
    let marked = run
        .files
        .iter()
        .filter(|f| {
            let t = read_trace(f).unwrap_or_else(|e| panic!("{e}"));
            t.figures.allocations == 2
        })
        .count();
    assert_eq!(marked, 2, "{:?}", run.files);
    for f in &run.files {
        let dump = tracer(&["dump".as_ref(), f.as_os_str()]);
        let text = String::from_utf8_lossy(&dump.stdout);
        let pre_exec = read_trace(f).unwrap().figures.allocations == 2;
        let said = text
            .lines()
            .any(|l| l.starts_with("info ") && l.contains(" ended=\"exec\""));
        assert_eq!(said, pre_exec, "{}", f.display());
        if !pre_exec {
            continue;
        }
        // `tracer leaks --fail` and `tracer report` agree with `tracer
        // run`: no leak counted in that image, and the blocks it had live
        // at the exec (exec.c: 512 bytes in 1 block) said.
        let leaks = tracer(&["leaks".as_ref(), "--fail".as_ref(), f.as_os_str()]);
        let text = String::from_utf8_lossy(&leaks.stdout);
        assert_eq!(leaks.status.code(), Some(0), "{}: {text}", f.display());
        assert_eq!(
            text,
            "No leak check: this image was replaced by exec; its 1 block(s) (512 byte(s)) \
             live then went with it.\n",
            "{}",
            f.display()
        );
        let report = cli_report(f);
        assert_eq!(report["leaked_bytes"], 0, "{}", f.display());
        assert_eq!(report["live_at_exit_bytes"], 512, "{}", f.display());
    }
}

/// A process a signal ends (SIGTERM at its default disposition: a pool's
/// workers terminated, a service stopped) runs no exit, so no scan: its
/// blocks live then are not leaks (LeakSanitizer checks none there either).
/// Its files say so (`ended: signal`, `signal: SIGTERM`), and `tracer run
/// --fail-on-leak` leaves it out: Python's `multiprocessing.Pool` ends its
/// workers so, and every block each held was reported as a definite leak
/// (`crash term` keeps 1,000 blocks of 32 bytes in a global array).
#[test]
fn a_process_a_signal_ends_is_not_leak_checked() {
    let dir = fresh_dir("run-signal-ended");
    let crash = example("crash");
    let (code, stderr) = tracer_run(
        &["--leak-check", "--fail-on-leak"],
        &dir.join("t-%p"),
        &[crash.as_os_str(), "term".as_ref()],
    );
    // The shell's status for a death by SIGTERM: the program's, not 23.
    assert_eq!(code, 128 + 15, "{stderr}");
    assert!(
        stderr.lines().any(|l| l
            == "tracer: no process exited to be leak-checked; no leak report (1 process ended by a signal, not checked)"),
        "{stderr}"
    );
    let run = run_traced(
        &Cmd::new(&crash).arg("term"),
        &[("TRACER_FORMAT", "mlyze,dumpalloc")],
    );
    assert_eq!(run.files.len(), 2, "{:?}", run.files);
    for f in &run.files {
        let dump = tracer(&["dump".as_ref(), f.as_os_str()]);
        let text = String::from_utf8_lossy(&dump.stdout);
        assert!(
            text.lines().any(|l| l.starts_with("info ")
                && l.contains(" ended=\"signal\"")
                && l.contains(" signal=\"SIGTERM\"")),
            "{}: {text}",
            f.display()
        );
        let leaks = tracer(&["leaks".as_ref(), "--fail".as_ref(), f.as_os_str()]);
        let text = String::from_utf8_lossy(&leaks.stdout);
        assert_eq!(leaks.status.code(), Some(0), "{}: {text}", f.display());
        assert_eq!(
            text,
            "No leak check: this process was ended by SIGTERM, which runs no exit; its 1000 \
             block(s) (32000 byte(s)) live then are not counted as leaks.\n",
            "{}",
            f.display()
        );
        let report = cli_report(f);
        assert_eq!(report["leaked_bytes"], 0, "{}", f.display());
        assert_eq!(report["live_at_exit_bytes"], 32_000, "{}", f.display());
    }
}

/// `args` run under valgrind (its first process's log alone: the children
/// it starts with vfork open logs of their own that end at their exec)
/// and under libtracer: the first process's indirect and possible classes
/// must be valgrind's, and its definite ones too but for at most `moved`
/// blocks found reachable instead (a stale copy of a lost block's address
/// in memory the scan reads and valgrind knows to be undefined: see
/// tracer-preload/README, "Leak scan"); the count of definite and
/// reachable blocks together must be valgrind's (reachable bytes may
/// differ with the environment, e.g. a copy of `environ` holds one pointer
/// per variable).
fn leaks_are_valgrinds(label: &str, args: &[&std::ffi::OsStr], moved: u64) {
    let dir = fresh_dir(label);
    let vg_out = std::process::Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--show-leak-kinds=all",
            "--run-libc-freeres=no",
            "--run-cxx-freeres=no",
        ])
        .arg(format!("--log-file={}/vg.%p", dir.display()))
        .args(args)
        .output()
        .expect("valgrind runs");
    assert!(
        vg_out.status.success(),
        "{label} under valgrind: {}",
        status_text(&vg_out.status)
    );
    let summaries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            tracer_tests::parse_valgrind_leaks(&std::fs::read_to_string(e.path()).ok()?)
        })
        .collect();
    assert_eq!(
        summaries.len(),
        1,
        "{label}: one summary, the first process's"
    );
    let vg = summaries[0].classes;
    let mut cmd = Cmd::new(args[0]);
    for a in &args[1..] {
        cmd = cmd.arg(a);
    }
    let traced = run_traced(&cmd, &[]);
    assert!(
        traced.output.status.success(),
        "{label}: {}",
        traced.stderr()
    );
    let first = traced
        .files
        .iter()
        .map(|f| read_scan(f).unwrap_or_else(|e| panic!("{e}")))
        .find(|s| s.pid == traced.pid)
        .expect("the first process's trace");
    let ours = first.classes;
    assert_eq!(
        ours.get(LeakKind::Possible),
        vg.get(LeakKind::Possible),
        "{label}, possible: ours {ours:?}, valgrind {vg:?}"
    );
    // Lost blocks, definite and indirect: a stale copy of a lost block's
    // address makes it reachable, and with it the blocks only it points to.
    let lost = |c: &LeakClasses| {
        let (d, i) = (c.get(LeakKind::Definite), c.get(LeakKind::Indirect));
        (d.0 + i.0, d.1 + i.1)
    };
    let (ours_lost, vg_lost) = (lost(&ours), lost(&vg));
    assert!(
        ours_lost.1 <= vg_lost.1 && vg_lost.1 - ours_lost.1 <= moved && ours_lost.0 <= vg_lost.0,
        "{label}, lost: ours {ours:?}, valgrind {vg:?} (at most {moved} blocks found reachable)"
    );
    if ours_lost.1 == vg_lost.1 {
        for kind in [LeakKind::Definite, LeakKind::Indirect] {
            assert_eq!(
                ours.get(kind),
                vg.get(kind),
                "{label}, {kind:?}: ours {ours:?}, valgrind {vg:?}"
            );
        }
    }
    assert_eq!(
        ours_lost.1 + ours.get(LeakKind::Reachable).1,
        vg_lost.1 + vg.get(LeakKind::Reachable).1,
        "{label}, lost and reachable blocks: ours {ours:?}, valgrind {vg:?}"
    );
}

/// gcc's driver at exit. Its 72,704-byte block (libstdc++'s pool) used to
/// be read on its own into the buffer a batch of small blocks had just
/// been read into, before their words were taken: a 72-byte block then
/// read as zeros, and 8,464 bytes of obstack came out lost (1,057 bytes
/// definite in 17 blocks, 8,158 indirect in 4, against valgrind's 721 in
/// 16 and 30 in 2). About one run in six under the test suite's load, two
/// of its lost blocks (88 and 43 bytes, side by side) come out reachable:
/// the heap's layout varies with the writer thread's timing, and a stale
/// copy of an address then lands where the scan reads; allowed here. Once
/// in a fresh-clone CI run the two were a 16-byte definite block and the
/// 68-byte block only it pointed to (indirect): lost blocks of either
/// class may move, two at most.
#[test]
fn gcc_drivers_leaks_are_valgrinds() {
    let dir = fresh_dir("gcc-driver");
    let src = dir.join("f.c");
    std::fs::write(&src, "int f(int x) { return 2 * x; }\n").unwrap();
    let out = dir.join("f.o");
    leaks_are_valgrinds(
        "gcc-driver",
        &[
            "gcc".as_ref(),
            "-c".as_ref(),
            "-O1".as_ref(),
            src.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        2,
    );
}

/// `as --version` calls `exit` with a block's only pointer in a
/// callee-saved register: glibc's `exit` saves it in a frame the scan
/// leaves out and reuses the register before our handler runs. The
/// exported `exit` now takes the program's registers at its entry (a
/// 33-byte block was definitely lost, valgrind's reachable).
#[test]
fn as_versions_leaks_are_valgrinds() {
    leaks_are_valgrinds("as-version", &["as".as_ref(), "--version".as_ref()], 0);
}

/// A failed `dlsym` leaves its error pending in glibc's thread-local
/// state (a 24-byte block and the message): reachable, as valgrind says.
/// The tracer's own `dlsym` of glibc's `exit`, made at exit on the exiting
/// thread, ran glibc's error bookkeeping there and dropped that pointer:
/// both blocks came out definitely lost (curl's `--version` showed it,
/// through libsasl2's probing).
#[test]
fn a_pending_dlerror_stays_reachable() {
    let bin = example("leaks/dlerror");
    let c = run_both(&Cmd::new(&bin));
    assert_eq!(c.valgrind[0].get(LeakKind::Definite), (0, 0));
    assert_eq!(c.valgrind[0].get(LeakKind::Reachable).1, 2);
    assert_eq!(c.ours, c.valgrind, "libtracer's classes against valgrind's");
    // A fork and a wait between the failed dlsym and dlerror(): the first
    // call of a wrapper no longer looks glibc's function up then, which
    // cleared the pending error ("was lost"); with the capture on too.
    // Likewise a call of signal(), whose wrapper looked glibc's up at every
    // call.
    for mode in ["fork", "signal"] {
        let cmd = Cmd::new(&bin).arg(mode);
        let plain = cmd.run_plain();
        assert_eq!(
            String::from_utf8_lossy(&plain.stdout),
            "dlerror: the pending error is kept\n"
        );
        for format in ["mlyze", "mlyze,tlv"] {
            let traced = run_traced(&cmd, &[("TRACER_FORMAT", format)]);
            assert_same_behaviour(&plain, &traced, &format!("{mode} {format}"));
        }
    }
}

fn python3() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a python3 binary")
}

/// Runs python3 with `code` under libtracer with the scan's statistics line;
/// returns the scan read back and that line.
fn python_scan(code: &str) -> (ScanResult, String) {
    let (_, s, stats) = scan_with_stats(&Cmd::new(python3()).arg("-c").arg(code));
    (s, stats)
}

#[test]
fn scan_of_python_import_json_completes() {
    let (s, stats) = python_scan("import json");
    let total: u64 = LeakKind::ALL.iter().map(|&k| s.classes.get(k).1).sum();
    assert!(total > 0);
    eprintln!("python3 -c 'import json': {stats}; {:?}", s.classes);
}

#[test]
fn scan_of_200k_python_objects_left_by_os_exit() {
    // os._exit skips the interpreter's finalization (the `_exit` path): the
    // 200,000 bytes objects of 600 bytes (633-byte blocks: 33 bytes of
    // header, malloc'd as they exceed pymalloc's 512) are all reachable
    // through the list, itself held by pymalloc memory (anonymous mappings).
    let (s, stats) = python_scan("import os\nx = [bytes(600) for _ in range(200000)]\nos._exit(0)");
    let objects: Vec<LeakKind> = s
        .blocks
        .iter()
        .filter(|b| b.1 == 633)
        .map(|b| b.2)
        .collect();
    assert!(
        objects.len() >= 200_000,
        "{} blocks of 633 bytes",
        objects.len()
    );
    assert!(
        objects.iter().all(|&k| k == LeakKind::Reachable),
        "{:?}",
        s.classes
    );
    eprintln!("python3, 200k objects, os._exit: {stats}; {:?}", s.classes);
}

#[test]
fn a_signal_handler_unmapping_memory_at_exit_waits_for_the_scan() {
    // The scan copies blocks directly when the exiting thread is alone, so
    // that thread's signals are held until the scan is over: here a timer's
    // handler unmaps, every millisecond, a block the scan reaches last (see
    // the example). Without the hold this run dies of SIGSEGV every time.
    let bin = example("scan/exit_signal");
    for _ in 0..3 {
        let (traced, s, stats) = scan_with_stats(&Cmd::new(&bin));
        assert_eq!(
            String::from_utf8_lossy(&traced.output.stdout),
            "main done\n"
        );
        // The direct path was the one taken (else this test proves nothing).
        assert!(stats.ends_with("blocks copied directly"), "{stats}");
        assert_small_blocks_reachable(&s);
        // A large block freed by a tick that came before the exit began
        // (a loaded machine) is no longer live; every other one is reached
        // through its small block.
        let big: Vec<LeakKind> = s
            .blocks
            .iter()
            .filter(|b| b.1 == 256 * 1024)
            .map(|b| b.2)
            .collect();
        assert!(
            !big.is_empty() && big.len() <= 64,
            "{} large blocks",
            big.len()
        );
        assert!(big.iter().all(|&k| k == LeakKind::Reachable), "{big:?}");
    }
}

/// exit_signal's 100,000 blocks of 32 bytes, all reachable from its array.
fn assert_small_blocks_reachable(s: &ScanResult) {
    let small: Vec<LeakKind> = s.blocks.iter().filter(|b| b.1 == 32).map(|b| b.2).collect();
    assert_eq!(small.len(), 100_000);
    assert!(small.iter().all(|&k| k == LeakKind::Reachable));
}

#[test]
fn with_another_thread_alive_the_exit_scan_reads_through_the_kernel() {
    // A second thread waits in pause() while the process exits: the
    // exiting thread holds its signals, so the timer's handler runs on the
    // other one and unmaps blocks during the scan, and the kernel's reads
    // fail harmlessly on them.
    let bin = example("scan/exit_signal");
    let (_, s, stats) = scan_with_stats(&Cmd::new(&bin).arg("thread"));
    assert!(stats.ends_with("blocks read through the kernel"), "{stats}");
    assert_small_blocks_reachable(&s);
}

#[test]
fn under_valgrind_the_exit_scan_reads_through_the_kernel() {
    // Under valgrind the process's address space is valgrind's too: its own
    // mappings are listed in /proc/self/maps among the program's and come
    // and go while the program (the writer thread included) runs, whatever
    // the program's threads do. Copied directly, one of them vanished under
    // the scan: `threads` died of SIGSEGV at exit under callgrind, every run.
    let bin = example("threads");
    let plain = Cmd::new(&bin).run_plain();
    let native = scan_with_stats(&Cmd::new(&bin)).1;
    let cmd = Cmd::new("valgrind")
        .arg("--tool=callgrind")
        .arg("-q")
        .arg("--callgrind-out-file=/dev/null")
        .arg(&bin);
    let run = run_traced(&cmd, &[("TRACER_SCAN_STATS", "1")]);
    assert_eq!(
        status_text(&run.output.status),
        status_text(&plain.status),
        "stderr: {}",
        run.stderr()
    );
    assert_eq!(run.output.stdout, plain.stdout);
    // valgrind's launcher is traced too: the program's trace is the one
    // whose scan found the program's blocks.
    let scans: Vec<ScanResult> = run
        .files
        .iter()
        .map(|f| read_scan(f).unwrap_or_else(|e| panic!("{e}")))
        .filter(|s| s.scanned && !s.blocks.is_empty())
        .collect();
    assert_eq!(scans.len(), 1, "{scans:?}");
    let s = &scans[0];
    assert_eq!((s.unclassified, s.stray), (0, 0));
    // The same blocks in the same classes as without valgrind: the four
    // threads' last blocks and their stacks' DTVs (whose sizes differ with
    // valgrind's preloaded objects).
    let counts = |s: &ScanResult| s.classes.0.map(|(_, n)| n);
    assert_eq!(
        counts(s),
        counts(&native),
        "{:?} {:?}",
        s.classes,
        native.classes
    );
    let stderr = run.stderr();
    let stats: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("libtracer: leak scan: "))
        .collect();
    assert!(
        stats
            .iter()
            .all(|l| l.ends_with("blocks read through the kernel")),
        "{stats:?}"
    );
}

#[test]
fn a_crowded_exit_writes_the_trace_beside_the_scan_with_the_same_classes() {
    // 5,015 blocks live at exit (see the example): the trace is written by a
    // thread of its own while the scan runs, and the classes come last.
    let expected = classes((1_032, 11), (63_968, 1_999), (320, 5), (119_952, 3_000));
    check_equal("crowd", &[expected]);
    let bin = example("leaks/crowd");
    let along = run_traced(&Cmd::new(&bin), &[("TRACER_STACK_STATS", "1")]);
    assert!(
        along.stderr().contains("alongside the scan"),
        "{}",
        along.stderr()
    );
    // A second output makes the exit do one thing after the other: the same
    // blocks (by size, addresses move from run to run) in the same classes.
    let apart = run_traced(&Cmd::new(&bin), &[("TRACER_FORMAT", "mlyze,dumpalloc")]);
    assert!(apart.output.status.success(), "{}", apart.stderr());
    let mlyze = |t: &Traced| {
        let mut scans = mlyze_scans(t);
        assert_eq!(scans.len(), 1, "one mlyze trace: {:?}", t.files);
        scans.remove(0)
    };
    let blocks = |s: &ScanResult| {
        let mut v: Vec<(u64, LeakKind)> = s.blocks.iter().map(|b| (b.1, b.2)).collect();
        v.sort_by_key(|&(size, kind)| (size, kind.code()));
        v
    };
    let (a, b) = (mlyze(&along), mlyze(&apart));
    assert_eq!((a.classes, a.unclassified, a.stray), (expected, 0, 0));
    assert_eq!((b.classes, b.unclassified, b.stray), (expected, 0, 0));
    assert_eq!(blocks(&a), blocks(&b));
}

/// 10,000 blocks live at exit, the last ~1,800 allocated after the live
/// table stopped keeping exact sizes: the trace is written by a thread of
/// its own while the scan, once its roots are planned, reads those sizes
/// back from the same spool (forced: with a trace this small the exit
/// replays them before the file's thread starts). valgrind's classes; and
/// the sizes came from the trace, not from the chunk headers (fails when
/// the replay beside the file cannot read the spool).
#[test]
fn a_crowded_exit_reads_late_sizes_back_beside_the_file() {
    let expected = classes((790, 10), (0, 0), (0, 0), (644_210, 9_990));
    check_equal("late_crowd", &[expected]);
    let bin = example("leaks/late_crowd");
    let (_, s, stats) = scan_with_stats(&Cmd::new(&bin));
    assert!(stats.contains(", once the roots were planned"), "{stats}");
    assert_eq!(s.classes, expected);
    let run = run_traced(
        &Cmd::new(&bin),
        &[
            ("TRACER_SCAN_STATS", "1"),
            ("TRACER_STACK_STATS", "1"),
            ("TRACER_REPLAY_BESIDE", "1"),
        ],
    );
    let stderr = run.stderr();
    assert!(run.output.status.success(), "{stderr}");
    assert!(stderr.contains("alongside the scan"), "{stderr}");
    let stats = stderr
        .lines()
        .find_map(|l| l.strip_prefix("libtracer: leak scan: "))
        .unwrap_or_else(|| panic!("no scan statistics line: {stderr}"));
    let replayed: u64 = stats
        .split_once(" sizes replayed in ")
        .and_then(|(head, _)| head.rsplit(", ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sizes replayed from the trace: {stats}"));
    assert!((1_000..=2_000).contains(&replayed), "{stats}");
    assert!(stats.contains(", beside the file's thread"), "{stats}");
    let scans = mlyze_scans(&run);
    assert_eq!(scans.len(), 1, "{:?}", run.files);
    let s = &scans[0];
    assert_eq!((s.classes, s.unclassified, s.stray), (expected, 0, 0));
}

/// The scans of a run's mlyze traces, in the files' order.
fn mlyze_scans(t: &Traced) -> Vec<ScanResult> {
    t.files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "mlyze"))
        .map(|f| read_scan(f).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// Where `process_vm_readv` is refused (a container's seccomp profile may
/// withhold it), the scan copies what `/proc/self/maps` lists as readable
/// directly. `examples/scan/no_vm_readv.c` runs the crowd of blocks with
/// the call answering EPERM (it checks the refusal itself, or exits 125):
/// the same classes as valgrind's (fails with the list of readable ranges
/// left empty: 507 blocks "definitely lost").
#[test]
fn refused_process_vm_readv_the_scan_copies_directly_with_the_same_classes() {
    let expected = classes((1_032, 11), (63_968, 1_999), (320, 5), (119_952, 3_000));
    let launcher = example("scan/no_vm_readv");
    let crowd = example("leaks/crowd");
    let run = run_traced(&Cmd::new(&launcher).arg(&crowd), &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    // The launcher's trace (nothing live) and the crowd's.
    let scans = mlyze_scans(&run);
    assert_eq!(scans.len(), 2, "{:?}", run.files);
    let s = scans
        .iter()
        .find(|s| s.blocks.len() == 5_015)
        .unwrap_or_else(|| panic!("the crowd's scan: {:?}", run.files));
    assert_eq!((s.classes, s.unclassified, s.stray), (expected, 0, 0));
}

/// examples/sandboxed.c (see its header) filters its own system calls with
/// seccomp: any outside a short list kills it. Traced, it must end as it
/// does untraced, with its exact figures and the scan's classes. Before
/// the exit stopped making other calls on the exiting thread, it died of
/// SIGSYS in `exit` (`process_vm_readv`, then the `fstat` of descriptor 2
/// for the summary line), its trace unfinished; with the filter before
/// its first allocation, it died there (the lane's `prctl`, the stack
/// bounds' `/proc/self/maps`) until start-up took both for the main thread.
#[test]
fn a_program_that_filters_its_own_system_calls_is_not_killed_by_the_tracer() {
    let pairs: u64 = 100_000;
    let bytes = 10 + 48 + (0..pairs).map(|i| 32 + i % 100).sum::<u64>();
    let expected = Figures::new(pairs + 2, pairs, bytes, 58, 2);
    for (when, formats) in [
        ("", "mlyze"),
        ("", "mlyze,tlv"),
        ("", "dumpalloc"),
        ("first", "mlyze"),
    ] {
        let cmd = Cmd::new(example("sandboxed"))
            .arg(pairs.to_string())
            .arg(when);
        let plain = cmd.run_plain();
        assert_eq!(String::from_utf8_lossy(&plain.stdout), "done\n");
        let what = format!("sandboxed {when}, TRACER_FORMAT={formats}");
        let run = run_traced(&cmd, &[("TRACER_FORMAT", formats), ("TRACER_QUIET", "0")]);
        assert_same_behaviour(&plain, &run, &what);
        assert!(
            run.stderr().contains("libtracer: wrote "),
            "{what}: no summary line: {}",
            run.stderr()
        );
        let allocations = run
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e != "tlv"))
            .unwrap_or_else(|| panic!("{what}: no trace in {:?}", run.files));
        for f in &run.files {
            assert_validates(f);
        }
        let trace = read_trace(allocations).unwrap_or_else(|e| panic!("{e}"));
        assert_trace_figures(&trace, expected, &what);
        let s = read_scan(allocations).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.scanned, "{what}: no scan");
        assert_eq!((s.unclassified, s.stray), (0, 0), "{what}");
        assert_eq!(
            s.classes,
            classes((48, 1), (0, 0), (0, 0), (10, 1)),
            "{what}"
        );
    }
}
