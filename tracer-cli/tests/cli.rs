//! End-to-end tests of the `tracer` binary: traces built record by record,
//! written with the real codecs, read back by the command.
//!
//! Every expected figure is derived by hand from the events of
//! [`scenario`]; the comments there walk through the arithmetic.

use std::ffi::OsStr;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

use format_writers::{
    dumpalloc, mlyze, Alloc, Event, Format, Frame, Free, Marker, Object, Process, Record, Stack,
    Symbol, TraceWriter,
};
use serde_json::Value;

mod common;
use common::*;

/// Start of the scenario: 2020-09-13 12:26:40 UTC, a whole number of
/// microseconds (mlyze keeps microseconds).
const S: u64 = 1_600_000_000_000_000_000;

fn frame(address: u64) -> Frame {
    Frame {
        address,
        symbol: None,
    }
}

fn alloc(t: u64, thread: u32, address: u64, size: u64, stack: u64) -> Record {
    Record::Event(Event::Alloc(Alloc {
        time_ns: S + t,
        thread,
        address,
        size,
        stack,
    }))
}

fn free(t: u64, thread: u32, address: u64) -> Record {
    Record::Event(Event::Free(Free {
        time_ns: S + t,
        thread,
        address,
    }))
}

/// The hand-built trace.
///
/// | # | t (ns) | thread | event | live bytes after |
/// | - | - | - | - | - |
/// | 1 | 1000 | 1 | A = alloc 0x1000 100 B, stack 0 | 100 |
/// | 2 | 2000 | 1 | B = alloc 0x2000 200 B, stack 1 | 300 |
/// | 3 | 3000 | 1 | C = alloc 0x3000 300 B, stack 0 | 600 |
/// | 4 | 4000 | 1 | free B (not temporary: C came after B) | 400 |
/// | 5 | 5000 | 1 | realloc C → D: free C (temporary: C was thread 1's last allocation) | 100 |
/// | 6 | 5000 | 1 | D = alloc 0x4000 400 B, stack 0 | 500 |
/// | 7 | 6000 | 2 | E = alloc 0x5000 50 B, stack 2 | 550 |
/// | 8 | 7000 | 1 | F = alloc 0x6000 1000 B, stack 1 | 1550 ← peak, 4 blocks (A D E F) |
/// | 9 | 8000 | 2 | free E (temporary: thread 2's last allocation) | 1500 |
/// | 10 | 9000 | 1 | free 0xdead0 (never allocated: counted in frees, live unchanged) | 1500 |
/// | 11 | 10000 | 1 | marker "done" | |
///
/// allocations 6 (A B C D E F); frees 4 (B C E 0xdead0); bytes allocated
/// 100+200+300+400+50+1000 = 2050; temporary 2 (C, E); peak 1550 B at +7000
/// ns; live at exit A+D+F = 1500 B in 3 blocks: stack 1 → 1000 B in 1 (F),
/// stack 0 → 500 B in 2 (A, D). Per site: stack 0 → 3 calls, 800 B, 1
/// temporary; stack 1 → 2 calls, 1200 B; stack 2 → 1 call, 50 B, 1 temporary.
fn scenario() -> Vec<Record> {
    vec![
        Record::Process(Process {
            pid: 4242,
            executable: "/usr/bin/demo".into(),
            command_line: vec!["demo".into(), "--x".into()],
            start_time_ns: S,
        }),
        Record::Object(Object {
            path: "/usr/bin/demo".into(),
            load_address: 0x40_0000,
            size: 0x1_0000,
        }),
        Record::Object(Object {
            path: "/usr/lib/libfoo.so".into(),
            load_address: 0x7f00_0000_0000,
            size: 0x10_0000,
        }),
        Record::Stack(Stack {
            id: 0,
            frames: vec![frame(0x40_1000)],
        }),
        Record::Stack(Stack {
            id: 1,
            frames: vec![frame(0x7f00_0000_1234), frame(0x40_1100)],
        }),
        Record::Stack(Stack {
            id: 2,
            frames: vec![Frame {
                address: 0x40_1200,
                symbol: Some(Symbol {
                    function: "parse_args".into(),
                    file: "args.c".into(),
                    line: 33,
                }),
            }],
        }),
        alloc(1000, 1, 0x1000, 100, 0),
        alloc(2000, 1, 0x2000, 200, 1),
        alloc(3000, 1, 0x3000, 300, 0),
        free(4000, 1, 0x2000),
        free(5000, 1, 0x3000),
        alloc(5000, 1, 0x4000, 400, 0),
        alloc(6000, 2, 0x5000, 50, 2),
        alloc(7000, 1, 0x6000, 1000, 1),
        free(8000, 2, 0x5000),
        free(9000, 1, 0xdead0),
        Record::Event(Event::Marker(Marker {
            time_ns: S + 10_000,
            thread: 1,
            name: "done".into(),
        })),
        Record::AddressSymbol {
            address: 0x40_1000,
            symbol: Symbol {
                function: "main".into(),
                file: "demo.c".into(),
                line: 10,
            },
        },
        Record::AddressSymbol {
            address: 0x40_1100,
            symbol: Symbol {
                function: "make_widget".into(),
                file: "widget.c".into(),
                line: 20,
            },
        },
    ]
}

fn report_json(path: &Path) -> Value {
    let o = tracer(&[OsStr::new("report"), OsStr::new("--json"), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report --json prints JSON")
}

/// The figures of [`scenario`], whatever the file's format.
fn check_scenario_figures(j: &Value) {
    assert_eq!(j["allocations"], 6);
    assert_eq!(j["frees"], 4);
    assert_eq!(j["bytes_allocated"], 2050);
    assert_eq!(j["peak_bytes"], 1550);
    assert_eq!(j["peak_blocks"], 4);
    assert_eq!(j["peak_time_ns"], S + 7000);
    assert_eq!(j["peak_offset_ns"], 7000);
    assert_eq!(j["live_at_exit_bytes"], 1500);
    assert_eq!(j["live_at_exit_blocks"], 3);
    assert_eq!(j["leaked_bytes"], 1500);
    assert_eq!(j["leaked_blocks"], 3);
    assert_eq!(j["temporary_allocations"], 2);
    assert_eq!(j["frees_of_untracked_blocks"], 1);
    assert_eq!(j["duration_ns"], 10_000);
    assert_eq!(j["markers"], 1);
    assert_eq!(j["process"]["pid"], 4242);
    let bytes: Vec<(u64, u64)> = j["top_sites"]["by_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["bytes"].as_u64().unwrap(),
                s["allocations"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(bytes, [(1200, 2), (800, 3), (50, 1)]);
    let counts: Vec<u64> = j["top_sites"]["by_count"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["allocations"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [3, 2, 1]);
    let temps: Vec<(u64, u64)> = j["top_sites"]["by_temporary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["temporary"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(temps, [(1, 800), (1, 50)]);
    // The largest site is make_widget's, called from libfoo (frame 0).
    let top = &j["top_sites"]["by_bytes"][0]["stack"];
    assert_eq!(top[0]["module"], "/usr/lib/libfoo.so");
    assert_eq!(top[0]["offset"], "0x1234");
    assert_eq!(top[1]["function"], "make_widget");
    assert_eq!(top[1]["file"], "widget.c");
    assert_eq!(top[1]["line"], 20);
}

#[test]
fn report_json_figures_dumpalloc() {
    let dir = scratch("report-dumpalloc");
    let path = dir.join("t.bin"); // the name says nothing: magic bytes decide
    write_trace(&path, Format::Dumpalloc, &scenario());
    let j = report_json(&path);
    assert_eq!(j["format"], "dumpalloc");
    check_scenario_figures(&j);
}

#[test]
fn report_text_figures() {
    let dir = scratch("report-text");
    let path = dir.join("t.dumpalloc");
    write_trace(&path, Format::Dumpalloc, &scenario());
    let o = tracer(&[OsStr::new("report"), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    for line in [
        "process: 4242 /usr/bin/demo (demo --x)\n",
        "duration: 0.000010 s\n",
        "allocation calls: 6\n",
        "temporary allocations: 2\n",
        "frees: 4 (1 of blocks not allocated in the trace)\n",
        "bytes allocated: 2050 B (2.00 KiB)\n",
        "peak heap: 1550 B (1.51 KiB) in 4 blocks at +0.000007 s (12:26:40.000007000)\n",
        "live at exit: 1500 B (1.46 KiB) in 3 blocks\n",
        "      #1 0x401100 in make_widget widget.c:20 (/usr/bin/demo+0x1100)\n",
        "      #0 0x401200 in parse_args args.c:33 (/usr/bin/demo+0x1200)\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
}

#[test]
fn leaks_text_json_suppressions_and_fail() {
    let dir = scratch("leaks");
    let path = dir.join("t.dumpalloc");
    write_trace(&path, Format::Dumpalloc, &scenario());
    let p = path.as_os_str();

    let o = tracer(&[OsStr::new("leaks"), p]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    let expected_start = "Direct leak of 1000 byte(s) in 1 object(s) allocated from:\n\
        \x20   #0 0x7f0000001234 (/usr/lib/libfoo.so+0x1234)\n\
        \x20   #1 0x401100 in make_widget widget.c:20 (/usr/bin/demo+0x1100)\n\
        \n\
        Direct leak of 500 byte(s) in 2 object(s) allocated from:\n\
        \x20   #0 0x401000 in main demo.c:10 (/usr/bin/demo+0x1000)\n\
        \n\
        SUMMARY: 1500 byte(s) leaked in 3 allocation(s).\n";
    assert!(t.starts_with(expected_start), "{t}");
    assert!(t.contains("no reachability scan"), "{t}");

    let o = tracer(&[OsStr::new("leaks"), OsStr::new("--fail"), p]);
    assert_eq!(o.status.code(), Some(23));

    let o = tracer(&[OsStr::new("leaks"), OsStr::new("--json"), p]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["leaked_bytes"], 1500);
    assert_eq!(j["leaked_blocks"], 3);
    let leaks = j["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 2);
    assert_eq!(leaks[0]["kind"], "definite");
    assert_eq!(leaks[0]["bytes"], 1000);
    assert_eq!(leaks[0]["blocks"], 1);
    assert_eq!(leaks[1]["bytes"], 500);
    assert_eq!(leaks[1]["blocks"], 2);
    let f = &leaks[1]["stack"][0];
    assert_eq!(f["function"], "main");
    assert_eq!(f["file"], "demo.c");
    assert_eq!(f["line"], 10);
    assert_eq!(f["module"], "/usr/bin/demo");

    // A module pattern suppresses the libfoo group; a comment and an unused
    // rule are fine; --fail still fails on main's 500 B.
    let supp = dir.join("supp.txt");
    std::fs::write(&supp, "# third party\nleak:libfoo*\nleak:never_called\n").unwrap();
    let args = [
        OsStr::new("leaks"),
        OsStr::new("--json"),
        OsStr::new("--fail"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        p,
    ];
    let o = tracer(&args);
    assert_eq!(o.status.code(), Some(23));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["leaked_bytes"], 500);
    assert_eq!(j["leaked_blocks"], 2);
    assert_eq!(j["suppressed_bytes"], 1000);
    assert_eq!(j["suppressions"][0]["hits"], 1);
    assert_eq!(j["suppressions"][1]["hits"], 0);

    // Suppressing both groups (by function, and by source file): no leak
    // left, --fail exits 0, and the text lists the rules used.
    std::fs::write(&supp, "leak:make_widget\nleak:demo.c\n").unwrap();
    let args = [
        OsStr::new("leaks"),
        OsStr::new("--fail"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        p,
    ];
    let o = tracer(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let t = stdout(&o);
    assert!(t.contains("      1       1000 make_widget\n"), "{t}");
    assert!(t.contains("      1        500 demo.c\n"), "{t}");

    // A malformed suppression file is bad input.
    std::fs::write(&supp, "leak:ok\nrace:foo\n").unwrap();
    let o = tracer(&args);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "tracer: {}: line 2: expected leak:PATTERN, found \"race:foo\"\n",
            supp.display()
        )
    );
}

#[test]
fn validate_good_truncated_and_foreign_files() {
    let dir = scratch("validate");
    let path = dir.join("t.dumpalloc");
    write_trace(&path, Format::Dumpalloc, &scenario());
    let o = tracer(&[OsStr::new("validate"), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stdout(&o);
    assert_eq!(line.lines().count(), 1);
    assert!(line.contains("valid dumpalloc trace"), "{line}");
    assert!(line.contains("6 allocations, 4 frees"), "{line}");
    // The free of 0xdead0 is a note, not an error.
    assert!(stderr(&o).contains("note: 1 frees of addresses not allocated"));

    // Cut in the middle of the last record: one line, exit 1, byte offset.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.dumpalloc");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    for verb in ["validate", "report", "leaks", "dump"] {
        let o = tracer(&[OsStr::new(verb), cut.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{verb}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{verb}: {err}");
        let prefix = format!("tracer: {}: byte ", cut.display());
        assert!(err.starts_with(&prefix), "{verb}: {err}");
        let offset: u64 = err[prefix.len()..]
            .split(':')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a byte offset");
        assert!(offset <= bytes.len() as u64 - 3, "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    // Not a trace at all: byte 0, the magic bytes expected.
    let junk = dir.join("junk");
    std::fs::write(&junk, b"hello world").unwrap();
    let o = tracer(&[OsStr::new("validate"), junk.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "tracer: {}: byte 0: expected the magic bytes of a trace",
            junk.display()
        )),
        "{err}"
    );

    // A missing file: the OS error, no offset.
    let o = tracer(&[OsStr::new("report"), dir.join("missing").as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "tracer: {}: No such file or directory\n",
            dir.join("missing").display()
        )
    );
}

#[test]
fn dump_lines() {
    let dir = scratch("dump");
    let path = dir.join("t.dumpalloc");
    write_trace(&path, Format::Dumpalloc, &scenario());
    let o = tracer(&[OsStr::new("dump"), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    for line in [
        "12:26:40.000001000 [1] alloc 0x1000 100 B stack 0",
        "12:26:40.000004000 [1] free 0x2000",
        "12:26:40.000010000 [1] marker \"done\"",
        "symbol 0x401000 in main demo.c:10",
    ] {
        assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
    }
    let allocs = t.lines().filter(|l| l.contains("] alloc ")).count();
    let frees = t.lines().filter(|l| l.contains("] free ")).count();
    assert_eq!((allocs, frees), (6, 4));
}

#[test]
fn dump_of_the_syscall_sample() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/syscall-capture-ls.dat");
    let o = tracer(&[OsStr::new("dump"), sample.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    // format-notes: 1 header segment and 85 syscall segments; the header
    // gives the process (start-up thread 29480 in the sample) and uname.
    let calls = t.lines().filter(|l| l.contains(") = ")).count();
    assert_eq!(calls, 85, "{t}");
    assert!(t.starts_with("process 29480"), "{t}");
    assert!(t
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("info sysname=\"Linux\""));
    assert!(t.contains(" = -1 ENOENT (No such file or directory)"));

    let o = tracer(&[
        OsStr::new("report"),
        OsStr::new("--json"),
        sample.as_os_str(),
    ]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["system_calls"], 85);
    assert_eq!(j["allocations"], 0);
    let total: u64 = j["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 85);
}

#[test]
fn closed_stdout_is_not_an_error() {
    let dir = scratch("pipe");
    let path = dir.join("t.dumpalloc");
    let mut records = scenario();
    // Enough lines to overflow the pipe buffer.
    for i in 0..20_000u64 {
        records.push(alloc(20_000 + i, 1, 0x10_0000 + i * 16, 16, 0));
    }
    write_trace(&path, Format::Dumpalloc, &records);
    let mut child = Command::new(TRACER)
        .arg("dump")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close our end (like `| head -1`).
    {
        use std::io::{BufRead, BufReader};
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("process 4242"));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stderr(&o), "");
}

#[test]
fn convert_refuses_to_overwrite_and_writes_0600() {
    let dir = scratch("convert-excl");
    let input = dir.join("in.dumpalloc");
    write_trace(&input, Format::Dumpalloc, &scenario());
    let out = dir.join("out.dumpalloc");
    std::fs::write(&out, b"precious").unwrap();
    let o = tracer(&[
        OsStr::new("convert"),
        input.as_os_str(),
        OsStr::new("--to"),
        OsStr::new("dumpalloc"),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");

    let fresh = dir.join("fresh.bin");
    let o = tracer(&[
        OsStr::new("convert"),
        input.as_os_str(),
        OsStr::new("--to"),
        OsStr::new("dumpalloc"),
        OsStr::new("-o"),
        fresh.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    check_scenario_figures(&report_json(&fresh));

    // A corrupt input leaves no partial output behind.
    let bytes = std::fs::read(&input).unwrap();
    let cut = dir.join("cut.dumpalloc");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let partial = dir.join("partial.dumpalloc");
    let o = tracer(&[
        OsStr::new("convert"),
        cut.as_os_str(),
        OsStr::new("--to"),
        OsStr::new("dumpalloc"),
        OsStr::new("-o"),
        partial.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!partial.exists());
}

#[test]
fn convert_round_trip_dumpalloc_mlyze_keeps_the_figures() {
    let dir = scratch("convert-rt");
    let a = dir.join("a.dumpalloc");
    write_trace(&a, Format::Dumpalloc, &scenario());
    let m = dir.join("b.mlyze");
    let back = dir.join("c.dumpalloc");
    for (from, to, fmt) in [(&a, &m, "mlyze"), (&m, &back, "dumpalloc")] {
        let o = tracer(&[
            OsStr::new("convert"),
            from.as_os_str(),
            OsStr::new("--to"),
            OsStr::new(fmt),
            OsStr::new("-o"),
            to.as_os_str(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let jm = report_json(&m);
    assert_eq!(jm["format"], "mlyze");
    check_scenario_figures(&jm);
    let jb = report_json(&back);
    assert_eq!(jb["format"], "dumpalloc");
    check_scenario_figures(&jb);
}

#[test]
fn convert_to_mlyze_names_and_spool() {
    let dir = scratch("convert-mlyze");
    let input = dir.join("in.dumpalloc");
    write_trace(&input, Format::Dumpalloc, &scenario());
    let args = |out: &Path| {
        vec![
            OsStr::new("convert").to_os_string(),
            input.clone().into_os_string(),
            "--to".into(),
            "mlyze".into(),
            "-o".into(),
            out.as_os_str().to_os_string(),
        ]
    };
    // Without the extension, the mlyze writer appends it; the name is told.
    let o = tracer(&args(&dir.join("out")));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written = dir.join("out.mlyze");
    assert_eq!(stderr(&o), format!("tracer: wrote {}\n", written.display()));
    check_scenario_figures(&report_json(&written));
    // The spool is gone after a finished conversion.
    let left: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("spool"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Converting again to the same name fails and leaves the file alone.
    let before = std::fs::read(&written).unwrap();
    let o = tracer(&args(&dir.join("out")));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "tracer: {}: already exists; convert never overwrites a file (remove it or choose \
             another name)\n",
            written.display()
        )
    );
    assert_eq!(std::fs::read(&written).unwrap(), before);
}

#[test]
fn recover_a_spool_left_by_a_killed_writer() {
    let dir = scratch("recover");
    let (mut w, final_path) = mlyze::Writer::create(&dir.join("killed")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    for r in scenario() {
        TraceWriter::write(&mut w, &r).unwrap();
    }
    TraceWriter::flush(&mut w).unwrap();
    // The process dies here: no finish. Forgetting the writer keeps its
    // drop glue from doing anything a killed process would not.
    std::mem::forget(w);
    assert_eq!(std::fs::metadata(&final_path).unwrap().len(), 0);
    let o = tracer(&[OsStr::new("recover"), spool.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with(&format!("tracer: recovered {}", final_path.display())),
        "{}",
        stderr(&o)
    );
    check_scenario_figures(&report_json(&final_path));

    // Not a spool: one line with the offset.
    let junk = dir.join("junk.spool");
    std::fs::write(&junk, b"nothing here").unwrap();
    let o = tracer(&[OsStr::new("recover"), junk.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with(&format!("tracer: {}: byte ", junk.display())),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1);
}

/// Counts the events of an mlyze file by walking the document's layout
/// (seeds 003: 256-byte header, u32 metadata length at offset 16, then type
/// byte, varint delta, and per type: ALLOC addr u64, size varint, stack
/// varint, thread u16; FREE addr u64; GC two varints; MARKER one varint).
/// Returns (allocs, frees, bytes allocated, markers).
fn walk_mlyze(bytes: &[u8]) -> (u64, u64, u64, u64) {
    fn varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        for i in 0.. {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                break;
            }
        }
        v
    }
    let meta_len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let mut at = 256 + meta_len;
    let (mut allocs, mut frees, mut total, mut markers) = (0, 0, 0, 0);
    while at < bytes.len() {
        let ty = bytes[at];
        at += 1;
        varint(bytes, &mut at);
        match ty {
            0 => {
                at += 8;
                total += varint(bytes, &mut at);
                varint(bytes, &mut at);
                at += 2;
                allocs += 1;
            }
            1 => {
                at += 8;
                frees += 1;
            }
            2 => {
                varint(bytes, &mut at);
                varint(bytes, &mut at);
            }
            3 => {
                varint(bytes, &mut at);
                markers += 1;
            }
            other => panic!("event type {other} at byte {}", at - 1),
        }
    }
    (allocs, frees, total, markers)
}

#[test]
fn the_memlyze_sample_reads() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/memlyze-leak.mlyze");
    let (allocs, frees, total, _) = walk_mlyze(&std::fs::read(&sample).unwrap());
    let o = tracer(&[OsStr::new("validate"), sample.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("{allocs} allocations, {frees} frees")));
    let j = report_json(&sample);
    assert_eq!(j["allocations"], allocs);
    assert_eq!(j["frees"], frees);
    assert_eq!(j["bytes_allocated"], total);
    // The original recorder writes address 0 for every block: no free can
    // be matched, so every block stays live.
    assert_eq!(j["allocations_without_address"], allocs);
    assert_eq!(j["live_at_exit_blocks"], allocs);
    assert_eq!(j["live_at_exit_bytes"], total);
    let o = tracer(&[OsStr::new("dump"), sample.as_os_str()]);
    assert_eq!(o.status.code(), Some(0));
    let t = stdout(&o);
    assert_eq!(
        t.lines().filter(|l| l.contains("] alloc ")).count() as u64,
        allocs
    );
    assert_eq!(
        t.lines().filter(|l| l.contains("] free ")).count() as u64,
        frees
    );
}

#[test]
fn usage_errors_exit_1() {
    for args in [
        &["report"][..],
        &["nonsense"],
        &["convert", "x", "--to", "pdf", "-o", "y"],
        &["leaks", "--bogus", "x"],
        &["run"],
        // A misspelled or unknown option of `run` is a usage error, not the
        // name of a program to run (which would exit 127).
        &["run", "--bogus", "--", "true"],
        &["run", "-o", "out", "--", "true"],
        &["run", "--leak-check", "--outptu", "x", "--", "true"],
    ] {
        let o = tracer(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty());
    }
    let o = tracer(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("report"));
}

#[test]
fn run_with_a_missing_library_names_it() {
    let o = Command::new(TRACER)
        .args(["run", "--", "true"])
        .env("TRACER_LIB", "/nonexistent/libtracer.so")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "tracer: TRACER_LIB=/nonexistent/libtracer.so: No such file or directory; expected \
         the path of libtracer.so\n"
    );
}

/// `run`'s own logic, without the real library: an empty file stands in for
/// it (the loader ignores an object it cannot preload, with a warning), and
/// the "program" writes the manifest line the library would.
#[test]
fn run_passes_status_on_and_reads_the_manifest() {
    let dir = scratch("run");
    let fake_lib = dir.join("libtracer.so");
    std::fs::write(&fake_lib, b"").unwrap();
    let run = |args: &[&OsStr]| {
        Command::new(TRACER)
            .arg("run")
            .args(args)
            .env("TRACER_LIB", &fake_lib)
            .output()
            .unwrap()
    };
    let sh = |script: &str| -> Vec<std::ffi::OsString> {
        vec!["--".into(), "sh".into(), "-c".into(), script.into()]
    };

    let args = sh("exit 7");
    let refs: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    assert_eq!(run(&refs).status.code(), Some(7));

    let args = sh("kill -9 $$");
    let refs: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    assert_eq!(run(&refs).status.code(), Some(128 + 9));

    // The variables reach the program.
    let args = [
        "--format",
        "dumpalloc,tlv",
        "--output",
        "out-%p",
        "--syscalls",
        "%file",
        "--stack-depth",
        "8",
        "--",
        "sh",
        "-c",
        "echo \"$TRACER_FORMAT|$TRACER_OUTPUT|$TRACER_SYSCALLS|$TRACER_STACK_DEPTH\"; \
         case \"$LD_PRELOAD\" in */libtracer.so*) echo preloaded;; esac; \
         test -n \"$TRACER_MANIFEST\" && echo manifest",
    ];
    let refs: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let o = run(&refs);
    assert_eq!(o.status.code(), Some(0));
    // A relative template is anchored in tracer's working directory.
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        stdout(&o),
        format!(
            "dumpalloc,tlv|{}/out-%p|%file|8\npreloaded\nmanifest\n",
            cwd.display()
        )
    );

    // A trace listed in the manifest is announced and leak-checked.
    let trace = dir.join("leaky.dumpalloc");
    write_trace(&trace, Format::Dumpalloc, &scenario());
    let script = format!("echo '{}' >> \"$TRACER_MANIFEST\"", trace.display());
    let mut args: Vec<std::ffi::OsString> = vec!["--fail-on-leak".into()];
    args.extend(sh(&script));
    let refs: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = run(&refs);
    assert_eq!(o.status.code(), Some(23), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("tracer: wrote {}\n", trace.display())),
        "{err}"
    );
    assert!(
        err.contains("SUMMARY: 1500 byte(s) leaked in 3 allocation(s)."),
        "{err}"
    );

    // Without --fail-on-leak the program's status stands.
    let script = format!("echo '{}' >> \"$TRACER_MANIFEST\"; exit 3", trace.display());
    let mut args: Vec<std::ffi::OsString> = vec!["--leak-check".into()];
    args.extend(sh(&script));
    let refs: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    assert_eq!(run(&refs).status.code(), Some(3));

    // A program that does not exist: 127, as a shell says.
    let o = run(&[OsStr::new("--"), OsStr::new("/nonexistent/program")]);
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("/nonexistent/program: No such file or directory"));

    // An output directory that does not exist is a usage error found before
    // the program runs (each process would otherwise say it cannot write).
    let marker = dir.join("ran");
    let missing = dir.join("no-such-dir");
    let template = format!("{}/%e-%p", missing.display());
    let script = format!("touch '{}'", marker.display());
    let o = run(&["--output", &template, "--", "sh", "-c", &script].map(OsStr::new));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "tracer: --output {template}: {}: No such file or directory; expected an \
             existing directory\n",
            missing.display()
        )
    );
    assert!(!marker.exists());
    // The same for TRACER_OUTPUT; a directory made of the template's
    // fields cannot be checked beforehand and is left to the library.
    let o = Command::new(TRACER)
        .args(["run", "--", "sh", "-c", &script])
        .env("TRACER_LIB", &fake_lib)
        .env("TRACER_OUTPUT", &template)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("tracer: TRACER_OUTPUT="),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists());
    let per_pid = format!("{}/%p/trace", missing.display());
    let o = run(&["--output", &per_pid, "--", "sh", "-c", &script].map(OsStr::new));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(marker.exists());

    // Without `--`, the program's own options after its name are its own;
    // after `--`, a name that starts with a hyphen is still a program's.
    let o = run(&["sh", "-c", "echo \"$1\"", "sh", "--format"].map(OsStr::new));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "--format\n");
    let o = run(&["--", "-no-such-program"].map(OsStr::new));
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("-no-such-program: No such file or directory"));
}

/// `cargo test --release -p tracer-cli --test cli throughput -- --ignored
/// --nocapture [FORMAT]`: end-to-end `tracer report` speed on a generated
/// trace of 10M events (short-lived blocks, 4096 stacks of 20 frames).
#[test]
#[ignore]
fn report_throughput() {
    let formats: Vec<Format> = match std::env::var("TRACER_BENCH_FORMATS") {
        Ok(v) => v.split(',').filter_map(Format::from_name).collect(),
        Err(_) => vec![Format::Dumpalloc, Format::Mlyze],
    };
    let dir = scratch("throughput");
    let n: u64 = 10_000_000;
    for format in formats {
        let path = dir.join(format!("big.{}", format.extension()));
        let file = std::fs::File::create(&path).unwrap();
        let out = BufWriter::with_capacity(1 << 20, file);
        let mut w: Box<dyn TraceWriter> = match format {
            Format::Dumpalloc => Box::new(dumpalloc::Writer::new(out)),
            Format::Mlyze => Box::new(mlyze::Writer::new(out)),
            Format::Tlv => continue,
        };
        for id in 0..4096u64 {
            let frames = (0..20).map(|d| frame(0x40_0000 + id * 64 + d)).collect();
            w.write(&Record::Stack(Stack { id, frames })).unwrap();
        }
        let mut x: u64 = 88172645463325252;
        let mut live: Vec<u64> = Vec::with_capacity(2048);
        let mut events = 0u64;
        let mut i = 0u64;
        while events < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let address = 0x1000_0000 + (i << 4);
            i += 1;
            w.write(&alloc(i * 1000, (x % 4) as u32, address, x % 512, x % 4096))
                .unwrap();
            live.push(address);
            events += 1;
            if live.len() > 1000 || x & 3 != 0 {
                let k = (x as usize / 7) % live.len();
                let a = live.swap_remove(k);
                w.write(&free(i * 1000, (x % 4) as u32, a)).unwrap();
                events += 1;
            }
        }
        w.finish().unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let start = std::time::Instant::now();
        let o = tracer(&[OsStr::new("report"), path.as_os_str()]);
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        eprintln!(
            "{}: {events} events, {size} bytes: tracer report {secs:.3} s = {:.1} M events/s",
            format.name(),
            events as f64 / secs / 1e6
        );
    }
}

/// Whether libtracer.so was built next to the binary; tests that need it
/// skip when not (`cargo test -p tracer-cli` alone), but CI runs
/// scripts/test.sh, which builds the library first: there a missing
/// library is a failure, not a reason to skip.
fn real_library_built() -> bool {
    let lib = Path::new(TRACER).with_file_name("libtracer.so");
    if lib.is_file() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} not built under CI",
        lib.display()
    );
    eprintln!("skipped: {} not built", lib.display());
    false
}

/// `tracer run` with the real library, when it was built next to the
/// binary (the CI builds every artifact before testing; `cargo test -p
/// tracer-cli` alone does not build the library, and the test says so).
#[test]
fn run_with_the_real_library() {
    if !real_library_built() {
        return;
    }
    let dir = scratch("run-real");
    let template = dir.join("t-%p");
    let o = Command::new(TRACER)
        .args(["run", "--format", "mlyze,dumpalloc", "--output"])
        .arg(&template)
        .args(["--", "sh", "-c", "exit 5"])
        .env_remove("TRACER_LIB")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    let err = stderr(&o);
    let written: Vec<PathBuf> = err
        .lines()
        .filter_map(|l| l.strip_prefix("tracer: wrote "))
        .map(PathBuf::from)
        .collect();
    assert_eq!(written.len(), 2, "{err}");
    for (file, ext) in written.iter().zip(["mlyze", "dumpalloc"]) {
        assert!(file.starts_with(&*dir), "{err}");
        assert_eq!(file.extension().unwrap(), ext, "{err}");
        let v = tracer(&[OsStr::new("validate"), file.as_os_str()]);
        assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));
    }
    // Both formats hold the same process: the same figures.
    let a = report_json(&written[0]);
    let b = report_json(&written[1]);
    for key in [
        "allocations",
        "frees",
        "bytes_allocated",
        "live_at_exit_bytes",
    ] {
        assert_eq!(a[key], b[key], "{key}");
    }
}

/// A relative template names a place in the directory `tracer run` was
/// started in, for every process of the run: one that changed directory
/// before it started (a build's `make -C`, a launcher script) writes beside
/// the others, where the library alone would have resolved the template in
/// that process's own working directory.
#[test]
fn a_relative_output_is_anchored_where_tracer_run_started() {
    if !real_library_built() {
        return;
    }
    let dir = scratch("run-relative");
    std::fs::create_dir(dir.join("out")).unwrap();
    std::fs::create_dir(dir.join("elsewhere")).unwrap();
    // The shell's file is made where it starts; `true`'s after the `cd`.
    let script = "cd elsewhere && exec /bin/true";
    for (output, expected_dir) in [
        (Some("out/t-%p"), dir.join("out")),
        (None, dir.to_path_buf()),
    ] {
        let mut cmd = Command::new(TRACER);
        cmd.arg("run").current_dir(&*dir).env_remove("TRACER_LIB");
        cmd.env_remove("TRACER_OUTPUT");
        if let Some(t) = output {
            cmd.args(["--output", t]);
        }
        let o = cmd.args(["--", "/bin/sh", "-c", script]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let written: Vec<PathBuf> = err
            .lines()
            .filter_map(|l| l.strip_prefix("tracer: wrote "))
            .map(PathBuf::from)
            .collect();
        assert_eq!(written.len(), 2, "{output:?}: {err}");
        for file in &written {
            assert_eq!(file.parent(), Some(expected_dir.as_path()), "{err}");
            assert!(file.is_file(), "{}", file.display());
        }
        assert!(!err.contains("cannot create"), "{err}");
        let elsewhere: Vec<_> = std::fs::read_dir(dir.join("elsewhere")).unwrap().collect();
        assert!(elsewhere.is_empty(), "{output:?}: {elsewhere:?}");
        for file in written {
            std::fs::remove_file(file).unwrap();
        }
    }
}

/// Corrupted inputs: every verb's code path either succeeds or returns one
/// error; none panics. Mutations are deterministic (a fixed xorshift seed)
/// single-byte changes and truncations of a trace in each format.
#[test]
fn corrupted_traces_never_panic() {
    let dir = scratch("corrupt");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut checked = 0;
    for format in [Format::Dumpalloc, Format::Mlyze] {
        let good = dir.join(format!("good.{}", format.extension()));
        write_trace(&good, format, &scenario());
        let bytes = std::fs::read(&good).unwrap();
        let bad = dir.join(format!("bad.{}", format.extension()));
        for round in 0..400 {
            let mut b = bytes.clone();
            if round % 4 == 0 {
                b.truncate((next() as usize) % b.len());
            } else {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            std::fs::write(&bad, &b).unwrap();
            match tracer_cli::input::analyze(&bad) {
                Ok((f, a)) => {
                    let _ = tracer_cli::report::json(&a, f.name(), 10);
                    let mut supp = tracer_cli::suppressions::Suppressions::default();
                    let _ = tracer_cli::leaks::compute(
                        &a,
                        &mut supp,
                        &tracer_cli::leaks::Options::default(),
                    );
                    let mut out = Vec::new();
                    let opts = tracer_cli::report::Options {
                        json: false,
                        top: 10,
                        frames: 16,
                        symbols: Default::default(),
                    };
                    tracer_cli::report::text(&mut out, &a, f.name(), &opts).unwrap();
                }
                Err(e) => {
                    let line = e.to_string();
                    assert!(line.starts_with("tracer: "), "{line}");
                    assert!(!line.contains('\n'), "{line}");
                }
            }
            let mut out = Vec::new();
            let _ = tracer_cli::dump::execute(&bad, &mut out);
            checked += 1;
        }
    }
    assert_eq!(checked, 800);

    // Absurd sizes: sums wrap or saturate, the binary reports and exits 0.
    let huge = dir.join("huge.dumpalloc");
    let mut records = scenario();
    records.push(alloc(20_000, 1, 0x7000, u64::MAX, 0));
    records.push(alloc(20_001, 1, 0x8000, u64::MAX, 0));
    records.push(free(20_002, 1, 0x7000));
    write_trace(&huge, Format::Dumpalloc, &records);
    for verb in ["report", "leaks", "validate"] {
        let o = tracer(&[OsStr::new(verb), huge.as_os_str()]);
        assert_eq!(o.status.code(), Some(0), "{verb}: {}", stderr(&o));
    }
}
