//! Settings and trace files: bad values are reported once and change
//! nothing; files are private and never overwritten.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use tracer_tests::*;

const LEAK: Figures = Figures::new(3, 1, 600, 400, 2);

/// A bad value: exactly one stderr line naming the variable (besides the
/// library's "libtracer: wrote …" exit line), the program's output and exit
/// status unchanged.
fn bad_setting(var: &str, value: &str) {
    let cmd = Cmd::new(example("exit_live"));
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[(var, value), ("TRACER_QUIET", "0")]);
    assert_same_behaviour(&plain, &run, &format!("{var}={value}"));
    let stderr = run.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("libtracer: wrote"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{var}={value}: one line on stderr, got {stderr:?}"
    );
    assert!(
        lines[0].contains(var),
        "{var}={value}: the line names the variable: {:?}",
        lines[0]
    );
}

#[test]
fn bad_stack_depth_is_one_line() {
    bad_setting("TRACER_STACK_DEPTH", "abc");
}

#[test]
fn bad_format_is_one_line() {
    bad_setting("TRACER_FORMAT", "bogus");
}

#[test]
fn trace_files_are_private() {
    let run = run_traced(&Cmd::new(example("leak")), &[]);
    let trace = single_trace(&run);
    let mode = fs::metadata(&trace.path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{} has mode {mode:o}", trace.path.display());
}

/// An existing file of the chosen name is left untouched: `.1` is used.
#[test]
fn existing_file_never_overwritten() {
    let dir = fresh_dir("taken");
    let taken = dir.join("t-fixed.mlyze");
    fs::write(&taken, b"precious, not a trace").unwrap();
    let out = dir.join("t-fixed");
    let cmd = Cmd::new(example("leak"));
    let run = run_traced(&cmd, &[("TRACER_OUTPUT", out.to_str().unwrap())]);
    assert!(run.output.status.success());
    assert_eq!(fs::read(&taken).unwrap(), b"precious, not a trace");
    let next = dir.join("t-fixed.1.mlyze");
    let trace = read_trace(&next).unwrap_or_else(|e| panic!("{e}"));
    assert_trace_figures(&trace, LEAK, "leak written beside a taken name");
    let mode = fs::metadata(&next).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// The dumpalloc format carries the same figures.
#[test]
fn dumpalloc_output_same_figures() {
    let run = run_traced(
        &Cmd::new(example("realloc")),
        &[("TRACER_FORMAT", "dumpalloc")],
    );
    let trace = single_trace(&run);
    assert!(trace.path.to_string_lossy().ends_with(".dumpalloc"));
    assert_trace_figures(
        &trace,
        Figures::new(7, 6, 1490, 8, 1),
        "realloc in dumpalloc",
    );
}

/// `%e` is the name the program was started as: the last part of the path
/// given to `exec` (a symlink's own name, as in `redis-server` ->
/// `redis-check-rdb` or `python3` -> `python3.11`; a script's own name, not
/// its interpreter's), as heaptrack names its files after the command.
#[test]
fn the_executable_name_is_the_name_it_was_run_as() {
    let real = example("leak");
    let dir = fresh_dir("exe-name");
    let alias = dir.join("renamed-leak");
    std::os::unix::fs::symlink(&real, &alias).unwrap();
    let script = dir.join("my-tool");
    fs::write(&script, format!("#!{}\n", real.display())).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let real_name = real.file_name().unwrap().to_string_lossy().to_string();
    for (program, name) in [
        (real.clone(), real_name.as_str()),
        (alias, "renamed-leak"),
        (script, "my-tool"),
    ] {
        let out = dir.join("t-%e-%p");
        let run = run_traced(
            &Cmd::new(&program),
            &[("TRACER_OUTPUT", out.to_str().unwrap())],
        );
        assert!(run.output.status.success(), "{}", run.stderr());
        let expected = dir.join(format!("t-{name}-{}.mlyze", run.pid));
        let trace = read_trace(&expected).unwrap_or_else(|e| {
            panic!("{}: {e}; files: {:?}", program.display(), trace_files(&dir))
        });
        assert_trace_figures(&trace, LEAK, &format!("{} as {name}", program.display()));
        // The metadata still names the file that was run.
        let exe = fs::canonicalize(&real).unwrap();
        let process = trace.process.as_ref().expect("the process record");
        assert_eq!(process.executable, exe.to_string_lossy(), "{name}");
        fs::remove_file(&expected).unwrap();
    }
}
