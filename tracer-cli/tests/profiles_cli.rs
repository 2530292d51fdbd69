//! `tracer convert --to malt|callgrind|folded` and `tracer flamegraph` on a
//! hand-built trace, and MALT profiles as input (`report`, `convert`).
//!
//! Every expected figure is derived by hand from the events of [`scenario`]
//! (the table in its comment), or, for the MALT sample, from the sample's
//! JSON sections (named where asserted). None comes from our own output.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

use format_writers::{Alloc, Event, Format, Frame, Free, Object, Process, Record, Stack, Symbol};
use serde_json::Value;

mod common;
use common::*;

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

/// Start of the scenario (ns since the epoch).
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

/// The hand-built trace (the binaries it names do not exist, so frames are
/// named by the trace's own symbols).
///
/// | t (ns) | thread | event | live bytes after |
/// | - | - | - | - |
/// | 1000 | 1 | A = alloc 0x1000 100 B, stack 0 | 100 |
/// | 2000 | 1 | B = alloc 0x2000 200 B, stack 1 | 300 |
/// | 3000 | 1 | C = alloc 0x3000 300 B, stack 0 | 600 |
/// | 4000 | 1 | free B | 400 |
/// | 5000 | 1 | free C | 100 |
/// | 5000 | 1 | D = alloc 0x4000 400 B, stack 0 (a realloc of C: same thread and time) | 500 |
/// | 6000 | 2 | E = alloc 0x5000 50 B, stack 2 | 550 |
/// | 7000 | 1 | F = alloc 0x6000 1000 B, stack 1 | 1550 ← peak (A D E F) |
/// | 8000 | 2 | free E | 1500 |
///
/// allocations 6; bytes 2050; frees 3; live at exit A D F = 1500 B in 3.
/// Per stack: 0 (`main`): 3 allocations, 800 B, 500 B live (A, D), 500 B
/// at the peak; 1 (`make_widget` → 0x7f0000001234 in libfoo): 2, 1200 B,
/// 1000 B live (F), 1000 at the peak; 2 (`parse_args`): 1, 50 B, 0 live,
/// 50 at the peak.
fn scenario() -> Vec<Record> {
    let sym = |function: &str, file: &str, line| Symbol {
        function: function.into(),
        file: file.into(),
        line,
    };
    vec![
        Record::Process(Process {
            pid: 4242,
            executable: "/nonexistent/bin/demo".into(),
            command_line: vec!["demo".into(), "--x".into()],
            start_time_ns: S,
        }),
        Record::Object(Object {
            path: "/nonexistent/bin/demo".into(),
            load_address: 0x40_0000,
            size: 0x1_0000,
        }),
        Record::Object(Object {
            path: "/nonexistent/lib/libfoo.so".into(),
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
                symbol: Some(sym("parse_args", "args.c", 33)),
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
        Record::AddressSymbol {
            address: 0x40_1000,
            symbol: sym("main", "demo.c", 10),
        },
        Record::AddressSymbol {
            address: 0x40_1100,
            symbol: sym("make_widget", "widget.c", 20),
        },
    ]
}

fn write_scenario(path: &Path) {
    write_trace(path, Format::Dumpalloc, &scenario());
}

fn convert(input: &Path, to: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("convert"),
        input.as_os_str(),
        OsStr::new("--to"),
        OsStr::new(to),
        OsStr::new("-o"),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    tracer(&args)
}

fn assert_ok(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
}

/// Exit 1 with exactly one line on stderr, starting `tracer: `.
fn assert_one_line_failure(o: &Output, what: &str) -> String {
    assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("tracer: "), "{what}: {err}");
    err
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn report_json(path: &Path) -> Value {
    let o = tracer(&[OsStr::new("report"), OsStr::new("--json"), path.as_os_str()]);
    assert_ok(&o, "report --json");
    serde_json::from_slice(&o.stdout).expect("report --json prints JSON")
}

#[test]
fn convert_to_callgrind() {
    let dir = scratch("callgrind");
    let input = dir.join("in.dumpalloc");
    write_scenario(&input);
    let out = dir.join("out.callgrind");
    assert_ok(&convert(&input, "callgrind", &out, &[]), "convert");
    assert_eq!(mode(&out), 0o600);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("# callgrind format\n"), "{text}");
    // Allocations, bytes, leaked, peak: 6, 2050, 1500, 1550 (table above).
    assert!(text.contains("\nsummary: 6 2050 1500 1550\n"), "{text}");
    assert!(text.ends_with("\ntotals: 6 2050 1500 1550\n"), "{text}");
    assert!(text.contains("cmd: demo --x\n"), "{text}");
    // Names from the trace's symbols, with their files and lines.
    assert!(
        text.contains("fl=demo.c\nfn=main\n10 3 800 500 500\n"),
        "{text}"
    );
    assert!(
        text.contains("fl=args.c\nfn=parse_args\n33 1 50 0 50\n"),
        "{text}"
    );
    // make_widget (widget.c:20) calls the unnamed libfoo frame: 2 calls,
    // stack 1's cost.
    assert!(
        text.contains("fl=widget.c\nfn=make_widget\ncfl=???\ncfn=0x7f0000001234\ncalls=2 0\n20 2 1200 1000 1000\n"),
        "{text}"
    );
    // Refuses an existing file, which stays as it was.
    let o = convert(&input, "callgrind", &out, &[]);
    let err = assert_one_line_failure(&o, "second convert");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

#[test]
fn convert_to_malt_and_read_it_back() {
    let dir = scratch("malt");
    let input = dir.join("in.dumpalloc");
    write_scenario(&input);
    let out = dir.join("out.json");
    assert_ok(&convert(&input, "malt", &out, &[]), "convert");
    assert_eq!(mode(&out), 0o600);
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "run", "config", "stacks", "sites", "timeline", "scatter", "threads", "memStats",
        "globals", "leaks",
    ] {
        assert!(keys.contains(&k), "section {k} missing: {keys:?}");
    }
    // Per stack, by the allocation's innermost frame.
    let mut per: Vec<(String, u64, u64, u64)> = j["stacks"]["stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let i = &s["infos"];
            (
                s["stack"][0].as_str().unwrap().to_string(),
                i["alloc"]["count"].as_u64().unwrap(),
                i["alloc"]["sum"].as_u64().unwrap(),
                i["aliveReq"].as_u64().unwrap(),
            )
        })
        .collect();
    per.sort();
    assert_eq!(
        per,
        [
            ("0x401000".to_string(), 3, 800, 500),
            ("0x401200".to_string(), 1, 50, 0),
            ("0x7f0000001234".to_string(), 2, 1200, 1000),
        ]
    );
    // sites.instr names frames from the trace's symbols.
    let strings = j["sites"]["strings"].as_array().unwrap();
    let instr = &j["sites"]["instr"]["0x401100"];
    let s = |k: &str| {
        strings[instr[k].as_u64().unwrap() as usize]
            .as_str()
            .unwrap()
    };
    assert_eq!((s("function"), s("file")), ("make_widget", "widget.c"));
    assert_eq!(instr["line"], 20);
    let leaked: u64 = j["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["memory"].as_u64().unwrap())
        .sum();
    assert_eq!(leaked, 1500);

    // Our MALT profile as input: report gives the trace's totals.
    let r = report_json(&out);
    assert_eq!(r["format"], "malt");
    assert_eq!(r["allocations"], 6);
    assert_eq!(r["bytes_allocated"], 2050);
    assert_eq!(r["frees"], 3);
    assert_eq!(r["live_at_exit_bytes"], 1500);
    assert_eq!(r["live_at_exit_blocks"], 3);
    assert_eq!(r["peak_bytes"], 1550);
}

#[test]
fn convert_to_folded_with_each_metric() {
    let dir = scratch("folded");
    let input = dir.join("in.dumpalloc");
    write_scenario(&input);
    // Outermost frame first; stack 1 is make_widget → the libfoo frame.
    let expected = [
        (
            None,
            "main 800\nmake_widget;0x7f0000001234 1200\nparse_args 50\n",
        ),
        (
            Some("allocations"),
            "main 3\nmake_widget;0x7f0000001234 2\nparse_args 1\n",
        ),
        (
            Some("leaked"),
            "main 500\nmake_widget;0x7f0000001234 1000\n",
        ),
        (
            Some("peak"),
            "main 500\nmake_widget;0x7f0000001234 1000\nparse_args 50\n",
        ),
        (
            Some("bytes"),
            "main 800\nmake_widget;0x7f0000001234 1200\nparse_args 50\n",
        ),
    ];
    for (i, (metric, text)) in expected.iter().enumerate() {
        let out = dir.join(format!("out{i}.folded"));
        let extra: Vec<&str> = metric.map(|m| vec!["--metric", m]).unwrap_or_default();
        assert_ok(&convert(&input, "folded", &out, &extra), "convert");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), *text, "{metric:?}");
    }
    // A bad metric, or a metric for a target that has them all: one line,
    // exit 1, no file.
    let out = dir.join("bad.folded");
    let err = assert_one_line_failure(
        &convert(&input, "folded", &out, &["--metric", "calories"]),
        "bad metric",
    );
    assert!(err.contains("unknown metric \"calories\""), "{err}");
    assert!(!out.exists());
    let err = assert_one_line_failure(
        &convert(&input, "callgrind", &out, &["--metric", "bytes"]),
        "metric for callgrind",
    );
    assert!(err.contains("--metric"), "{err}");
    assert!(!out.exists());
}

#[test]
fn flamegraph_svg_and_folded() {
    let dir = scratch("flame");
    let input = dir.join("in.dumpalloc");
    write_scenario(&input);
    let svg = dir.join("out.svg");
    let o = tracer(&[
        OsStr::new("flamegraph"),
        input.as_os_str(),
        OsStr::new("-o"),
        svg.as_os_str(),
        OsStr::new("--title"),
        OsStr::new("Widget heap"),
    ]);
    assert_ok(&o, "flamegraph");
    assert_eq!(mode(&svg), 0o600);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg"), "{text}");
    assert!(text.contains("Widget heap"));
    // Every frame, with its bytes (inferno writes `NAME (N bytes, P%)`).
    for frame in [
        "main (800 bytes",
        "make_widget (1,200 bytes",
        "0x7f0000001234 (1,200 bytes",
        "parse_args (50 bytes",
        "all (2,050 bytes",
    ] {
        assert!(text.contains(frame), "{frame} missing");
    }
    // Never overwritten.
    let o = tracer(&[
        OsStr::new("flamegraph"),
        input.as_os_str(),
        OsStr::new("-o"),
        svg.as_os_str(),
    ]);
    assert!(assert_one_line_failure(&o, "again").contains("already exists"));
    assert_eq!(std::fs::read_to_string(&svg).unwrap(), text);

    // --folded: the same text as convert --to folded.
    let folded = dir.join("out.folded");
    let o = tracer(&[
        OsStr::new("flamegraph"),
        input.as_os_str(),
        OsStr::new("-o"),
        folded.as_os_str(),
        OsStr::new("--folded"),
        OsStr::new("--metric"),
        OsStr::new("leaked"),
    ]);
    assert_ok(&o, "flamegraph --folded");
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "main 500\nmake_widget;0x7f0000001234 1000\n"
    );

    // Bad metric: one line, exit 1, nothing written.
    let bad = dir.join("bad.svg");
    let o = tracer(&[
        OsStr::new("flamegraph"),
        input.as_os_str(),
        OsStr::new("-o"),
        bad.as_os_str(),
        OsStr::new("--metric"),
        OsStr::new("wallclock"),
    ]);
    assert!(assert_one_line_failure(&o, "bad metric").contains("unknown metric"));
    assert!(!bad.exists());
    // Not a trace: byte 0, one line, nothing written.
    let junk = dir.join("junk");
    std::fs::write(&junk, b"hello world").unwrap();
    let o = tracer(&[
        OsStr::new("flamegraph"),
        junk.as_os_str(),
        OsStr::new("-o"),
        bad.as_os_str(),
    ]);
    let err = assert_one_line_failure(&o, "junk");
    assert!(err.contains("byte 0: expected the magic bytes"), "{err}");
    assert!(!bad.exists());
}

#[test]
fn corrupt_input_leaves_no_profile_behind() {
    let dir = scratch("corrupt");
    let input = dir.join("in.dumpalloc");
    write_scenario(&input);
    let bytes = std::fs::read(&input).unwrap();
    let cut = dir.join("cut.dumpalloc");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    for to in ["malt", "callgrind", "folded"] {
        let out = dir.join(format!("out.{to}"));
        let err = assert_one_line_failure(&convert(&cut, to, &out, &[]), to);
        assert!(err.contains(": byte "), "{err}");
        assert!(!out.exists(), "{to}");
    }
    // A MALT profile cut short: one line with a byte offset.
    let malt = std::fs::read(sample("malt-example.json")).unwrap();
    let half = dir.join("half.json");
    std::fs::write(&half, &malt[..malt.len() / 2]).unwrap();
    let o = tracer(&[OsStr::new("report"), half.as_os_str()]);
    let err = assert_one_line_failure(&o, "half MALT");
    assert!(err.contains(": byte "), "{err}");
    // JSON that is not a MALT profile: the expected magic names MALT too.
    let other = dir.join("other.json");
    std::fs::write(&other, b"{\"stacks\": []}").unwrap();
    let o = tracer(&[OsStr::new("report"), other.as_os_str()]);
    let err = assert_one_line_failure(&o, "other JSON");
    assert!(
        err.contains("byte 0: expected the magic bytes of a trace")
            && err.contains("or a MALT JSON profile"),
        "{err}"
    );
    // A MALT profile that starts with whitespace is still one.
    let spaced = dir.join("spaced.json");
    let mut text = b"\n  ".to_vec();
    text.extend_from_slice(&malt);
    std::fs::write(&spaced, text).unwrap();
    assert_eq!(report_json(&spaced)["allocations"], 4);
}

/// The MALT sample's own totals, from its JSON: Σ stacks.stats[].infos.alloc
/// = 4 calls, 1,122,328 B; Σ free = 3, 1,048,600 B;
/// timeline.memoryTimeline.peak[0] = 1,122,320; leaks = 1 block of 73,728 B;
/// run.runtime / globals.ticksPerSecond = 855304811 / 3411818790 s.
#[test]
fn the_malt_sample_reports_malts_totals() {
    let r = report_json(&sample("malt-example.json"));
    assert_eq!(r["format"], "malt");
    assert_eq!(r["allocations"], 4);
    assert_eq!(r["bytes_allocated"], 1_122_328);
    assert_eq!(r["frees"], 3);
    assert_eq!(r["peak_bytes"], 1_122_320);
    assert_eq!(r["leaked_blocks"], 1);
    assert_eq!(r["leaked_bytes"], 73_728);
    assert_eq!(r["live_at_exit_bytes"], 73_728);
    // 855304811 * 1e9 / 3411818790 = 250688815.6… ns.
    assert_eq!(r["duration_ns"], 250_688_815);
    assert_eq!(r["process"]["executable"], "extractor-example");
    // MALT's own symbols name the frames.
    let top = &r["top_sites"]["by_bytes"][0]["stack"][0];
    assert_eq!(top["function"], "leaf()");
    assert_eq!(top["line"], 25);

    // And as the input of convert: callgrind and folded keep MALT's totals
    // and names.
    let dir = scratch("malt-in");
    let cg = dir.join("sample.callgrind");
    assert_ok(
        &convert(&sample("malt-example.json"), "callgrind", &cg, &[]),
        "convert",
    );
    let text = std::fs::read_to_string(&cg).unwrap();
    let totals = text.lines().last().unwrap();
    let t: Vec<&str> = totals.split(' ').collect();
    assert_eq!(t[..4], ["totals:", "4", "1122328", "73728"], "{totals}");
    assert!(text.contains("fn=leaf()\n"), "{text}");
    let folded = dir.join("sample.folded");
    assert_ok(
        &convert(&sample("malt-example.json"), "folded", &folded, &[]),
        "convert",
    );
    let folded = std::fs::read_to_string(&folded).unwrap();
    let sum: u64 = folded
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, 1_122_328);
    assert!(folded.contains("main;main_sim();caller2() 8\n"), "{folded}");
}
