//! Language runtimes no one here wrote, hard on a tracer in ways small
//! programs are not: node (V8, with worker threads) and java (HotSpot: ~25
//! threads, a Java heap committed far larger than it touches, memory it
//! maps and unmaps on threads that run on through the exit). Each program
//! runs three times under libtracer: the same output and exit status as
//! untraced; one trace, that `tracer validate` accepts and `tracer report`
//! reads back to the figures of its records, with no address allocated
//! twice; and an exit scan that finished and classified every block live at
//! it (a run whose exit gives up leaves its spool for `tracer recover`
//! instead of a trace). Three runs, since what breaks here breaks by
//! timing. (The chunk walk that wrapped around on a JVM's pages, fixed in
//! 0f8d20d, is not caught here: put back, it passed 2 runs of this test;
//! its unit tests in `scan.rs` catch it.) `.ci/run` installs both.

use std::path::{Path, PathBuf};

use tracer_tests::*;

fn program(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} not found: .ci/run installs it"))
}

/// `expected`: what the program prints, untraced (and so traced).
fn check_runs(cmd: Cmd, what: &str, expected: &str) {
    let plain = cmd.run_plain();
    assert!(
        plain.status.success(),
        "{what} untraced: {}",
        status_text(&plain.status)
    );
    assert_eq!(String::from_utf8_lossy(&plain.stdout), expected, "{what}");
    for round in 1..=3 {
        let run = run_traced(&cmd, &[]);
        let what = format!("{what} (run {round})");
        assert_same_behaviour(&plain, &run, &what);
        assert_eq!(
            run.files.len(),
            1,
            "{what}: one trace: {:?} in {}; stderr {}",
            run.files,
            run.dir.display(),
            run.stderr()
        );
        let f = &run.files[0];
        assert_validates(f);
        let t = read_trace(f).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(t.figures.allocations > 10_000, "{what}: {:?}", t.figures);
        assert_eq!(t.double_allocs, 0, "{what}: an address allocated twice");
        assert_eq!(cli_figures(f), t.figures, "{what}: tracer report");
        let s = read_scan(f).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(s.scanned, "{what}: no exit scan in {}", f.display());
        assert_eq!(
            (s.unclassified, s.stray),
            (0, 0),
            "{what}: every block live at the scan has one class"
        );
    }
}

/// examples/runtimes/workers.js: four worker threads building arrays,
/// their counts posted back.
#[test]
fn node_with_worker_threads() {
    let script = repo_root().join("examples/runtimes/workers.js");
    let cmd = Cmd::new(program("node"))
        .arg(&script)
        .cwd(fresh_dir("node"));
    check_runs(cmd, "node", "400000\n");
}

/// examples/runtimes/Fill.java: four threads filling hash maps, run from
/// source (the launcher compiles it in the same process).
#[test]
fn java_with_threads() {
    let source = repo_root().join("examples/runtimes/Fill.java");
    // The JVM's performance-data file would go to /tmp: not needed.
    let cmd = Cmd::new(program("java"))
        .arg("-XX:-UsePerfData")
        .arg(&source)
        .cwd(fresh_dir("java"));
    check_runs(cmd, "java", "400000\n");
}
