//! Profiles for other tools, end to end: real examples run under
//! libtracer.so, their traces converted by `tracer convert` (callgrind, MALT
//! JSON, folded stacks) and `tracer flamegraph`, and the results read by the
//! tools users open them with (`callgrind_annotate`) or checked section by
//! section against `tracer report --json` and the examples' documented
//! figures (`examples/leak.c`: 3 allocations of 600 bytes, 1 free, 400 bytes
//! live; `examples/chain10.c`: one malloc(4242) at the bottom of
//! main → f1 → … → f10, never freed).
//!
//! Needs `tracer`, `libtracer.so` (release build) and valgrind's
//! `callgrind_annotate` (CI installs valgrind).

use std::ffi::OsStr;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

use format_writers::{dumpalloc, Record, TraceWriter};
use serde_json::Value;
use tracer_tests::*;

/// Runs an example under libtracer and returns its one trace file.
fn traced_example(name: &str) -> PathBuf {
    let mut run = run_traced(&Cmd::new(example(name)), &[]);
    assert!(
        run.output.status.success(),
        "{name}: {}",
        status_text(&run.output.status)
    );
    recover_spools(&mut run);
    let trace = single_trace(&run);
    trace.path
}

/// `tracer convert IN --to TO -o OUT [extra]`, which must succeed.
fn convert(input: &Path, to: &str, out: &Path, extra: &[&str]) {
    let mut args: Vec<&OsStr> = vec![
        "convert".as_ref(),
        input.as_os_str(),
        "--to".as_ref(),
        to.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let o = tracer(&args);
    assert!(
        o.status.success(),
        "tracer convert --to {to} {}: {}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {key:?} in {v}"))
}

/// The numbers of `callgrind_annotate`'s `PROGRAM TOTALS` line, in event
/// order (`1,234 (100.0%)` → 1234).
fn annotate_totals(stdout: &str) -> Vec<u64> {
    let line = stdout
        .lines()
        .find(|l| l.contains("PROGRAM TOTALS"))
        .unwrap_or_else(|| panic!("no PROGRAM TOTALS in:\n{stdout}"));
    line.split_whitespace()
        .take_while(|w| *w != "PROGRAM")
        .filter(|w| !w.starts_with('('))
        .map(|w| {
            w.replace(',', "")
                .parse()
                .unwrap_or_else(|_| panic!("{w:?} in {line:?}"))
        })
        .collect()
}

/// `callgrind_annotate --inclusive=yes FILE`: no warning, stdout returned.
fn callgrind_annotate(file: &Path) -> String {
    let o = Command::new("callgrind_annotate")
        .arg("--inclusive=yes")
        .arg(file)
        .output()
        .expect("callgrind_annotate (valgrind) must be installed");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "callgrind_annotate failed: {err}");
    assert!(!err.contains("WARNING"), "callgrind_annotate warned: {err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Callgrind totals by `callgrind_annotate` equal `tracer report --json`'s.
fn check_callgrind(trace: &Path, dir: &Path, allocations: u64, bytes: u64) -> String {
    let report = cli_report(trace);
    assert_eq!(u(&report, "allocations"), allocations);
    assert_eq!(u(&report, "bytes_allocated"), bytes);
    let cg = dir.join("out.callgrind");
    convert(trace, "callgrind", &cg, &[]);
    let annotated = callgrind_annotate(&cg);
    // Events: Allocations Bytes Leaked Peak.
    assert_eq!(
        annotate_totals(&annotated),
        [
            u(&report, "allocations"),
            u(&report, "bytes_allocated"),
            u(&report, "live_at_exit_bytes"),
            u(&report, "peak_bytes"),
        ],
        "{annotated}"
    );
    annotated
}

/// The MALT profile has the sections MALT's reader requires, typed as it
/// wants, and its per-stack sums equal the report's figures.
fn check_malt(trace: &Path, dir: &Path) {
    let report = cli_report(trace);
    let out = dir.join("out.malt.json");
    convert(trace, "malt", &out, &[]);
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["run"]["formatVersion"], "1.6");
    for k in ["exe", "command", "hostname"] {
        assert!(j["run"][k].is_string(), "run.{k}: {}", j["run"]);
    }
    for k in [
        "config", "stacks", "sites", "scatter", "globals", "domains", "memStats",
    ] {
        assert!(j[k].is_object(), "{k} is not an object");
    }
    assert!(j["threads"].is_array());
    assert!(j["leaks"].is_array());
    assert!(j["globals"]["ticksPerSecond"].is_u64());
    assert_eq!(j["sites"]["strings"][0], "??");
    for t in ["memoryTimeline", "systemTimeline", "memoryBandwidth"] {
        for k in ["start", "fields", "perPoints", "peak", "values", "callsite"] {
            assert!(!j["timeline"][t][k].is_null(), "timeline.{t}.{k} missing");
        }
    }
    for d in ["counters", "mem", "localPeak", "atGlobalPeak"] {
        assert!(j["domains"][d]["c"].is_u64(), "domains.{d}.c");
    }
    let stats = j["stacks"]["stats"].as_array().unwrap();
    let sum = |f: &dyn Fn(&Value) -> u64| -> u64 { stats.iter().map(f).sum() };
    for s in stats {
        for a in s["stack"].as_array().unwrap() {
            assert!(a.as_str().unwrap().starts_with("0x"), "{a}");
            // Every frame is described in sites.instr.
            assert!(
                j["sites"]["instr"][a.as_str().unwrap()].is_object(),
                "{a} not in sites.instr"
            );
        }
    }
    assert_eq!(
        sum(&|s| u(&s["infos"]["alloc"], "count")),
        u(&report, "allocations")
    );
    assert_eq!(
        sum(&|s| u(&s["infos"]["alloc"], "sum")),
        u(&report, "bytes_allocated")
    );
    assert_eq!(
        sum(&|s| u(&s["infos"]["free"], "count")),
        u(&report, "frees") - u(&report, "frees_of_untracked_blocks")
    );
    assert_eq!(
        sum(&|s| u(&s["infos"], "aliveReq")),
        u(&report, "live_at_exit_bytes")
    );
    assert_eq!(
        sum(&|s| u(&s["infos"], "globalPeak")),
        u(&report, "peak_bytes")
    );
    // MALT's leaks are the blocks never freed: the report's live-at-exit
    // figures (its `leaked_*` count only definite and indirect blocks when the
    // trace holds the reachability scan, which MALT cannot express).
    let leaks = j["leaks"].as_array().unwrap();
    assert_eq!(
        leaks.iter().map(|l| u(l, "memory")).sum::<u64>(),
        u(&report, "live_at_exit_bytes")
    );
    assert_eq!(
        leaks.iter().map(|l| u(l, "count")).sum::<u64>(),
        u(&report, "live_at_exit_blocks")
    );
    assert_eq!(
        j["timeline"]["memoryTimeline"]["peak"][0].as_u64(),
        Some(u(&report, "peak_bytes"))
    );

    // Read back by our MALT reader: the same totals.
    let back = cli_report(&out);
    assert_eq!(back["format"], "malt");
    for k in [
        "allocations",
        "bytes_allocated",
        "live_at_exit_bytes",
        "live_at_exit_blocks",
        "peak_bytes",
    ] {
        assert_eq!(back[k], report[k], "{k} after the MALT round trip");
    }
}

#[test]
fn leak_example_callgrind_and_malt() {
    let trace = traced_example("leak");
    let dir = fresh_dir("profiles-leak");
    // examples/leak.c: 3 allocations, 600 bytes.
    check_callgrind(&trace, &dir, 3, 600);
    check_malt(&trace, &dir);
}

/// The chain `main;f1;…;f10`, outermost first, as folded stacks write it.
const CHAIN: &str = "main;f1;f2;f3;f4;f5;f6;f7;f8;f9;f10";

#[test]
fn chain10_flamegraph_callgrind_and_malt() {
    let trace = traced_example("chain10");
    let dir = fresh_dir("profiles-chain10");
    // examples/chain10.c: 1 allocation of 4242 bytes.
    let annotated = check_callgrind(&trace, &dir, 1, 4242);
    // Every function of the chain is charged the whole allocation, and is
    // placed in chain10.c.
    for f in ["main", "f1", "f5", "f10"] {
        let found = annotated.lines().any(|l| {
            l.trim_end().ends_with(&format!("chain10.c:{f}"))
                && l.trim_start().starts_with("1 ")
                && l.contains("4,242")
        });
        assert!(found, "no inclusive line for {f}:\n{annotated}");
    }
    check_malt(&trace, &dir);

    // The flame graph: every frame of the chain with the 4242 bytes.
    let svg = dir.join("chain.svg");
    let o = tracer(&[
        "flamegraph".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    for f in CHAIN.split(';') {
        assert!(
            text.contains(&format!("<title>{f} (4,242 bytes, 100.00%)</title>")),
            "{f} missing from the flame graph"
        );
    }
    // Folded, bytes and leaked: one chain ending main;f1;…;f10 with 4242.
    for metric in ["bytes", "leaked", "peak"] {
        let folded = dir.join(format!("chain.{metric}.folded"));
        let o = tracer(&[
            "flamegraph".as_ref(),
            trace.as_os_str(),
            "-o".as_ref(),
            folded.as_os_str(),
            "--folded".as_ref(),
            "--metric".as_ref(),
            metric.as_ref(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&folded).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{metric}: {text}");
        assert!(
            lines[0].ends_with(&format!("{CHAIN} 4242")),
            "{metric}: {text}"
        );
    }
}

/// With every symbol taken out of the trace, the names come from the
/// symbolizer reading the example's own DWARF: the same chain, in chain10.c.
#[test]
fn chain10_names_come_from_the_binary_when_the_trace_has_none() {
    let trace = traced_example("chain10");
    let dir = fresh_dir("profiles-nosym");
    let bare = dir.join("bare.dumpalloc");
    {
        let (_, reader) = format_writers::open(&trace).unwrap();
        let out = BufWriter::new(std::fs::File::create(&bare).unwrap());
        let mut w: Box<dyn TraceWriter> = Box::new(dumpalloc::Writer::new(out));
        let mut dropped = 0;
        for r in reader {
            let mut r = r.unwrap();
            match &mut r {
                Record::AddressSymbol { .. } => {
                    dropped += 1;
                    continue;
                }
                Record::Stack(s) => {
                    for f in &mut s.frames {
                        dropped += usize::from(f.symbol.take().is_some());
                    }
                }
                _ => {}
            }
            w.write(&r).unwrap();
        }
        w.finish().unwrap();
        assert!(dropped > 0, "the trace carried no symbols to take out");
    }
    let folded = dir.join("bare.folded");
    convert(&bare, "folded", &folded, &[]);
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(
        text.trim_end().ends_with(&format!("{CHAIN} 4242")),
        "{text}"
    );
    // Told not to read the binaries, the bare trace has only addresses...
    let blind = dir.join("blind.folded");
    convert(&bare, "folded", &blind, &["--no-debug-info"]);
    let text = std::fs::read_to_string(&blind).unwrap();
    // By frame, not by substring: an address's hex digits can spell "f10"
    // (0x557ceaf10091 did, in a CI run).
    let frames: Vec<&str> = text
        .lines()
        .flat_map(|l| l.rsplit_once(' ').map_or(l, |(stack, _)| stack).split(';'))
        .collect();
    assert!(
        !frames.is_empty() && frames.iter().all(|f| f.starts_with("0x")),
        "{text}"
    );
    // ... while the original trace still names them itself.
    let own = dir.join("own.folded");
    convert(&trace, "folded", &own, &["--no-debug-info"]);
    let text = std::fs::read_to_string(&own).unwrap();
    assert!(
        text.trim_end().ends_with(&format!("{CHAIN} 4242")),
        "{text}"
    );
    let cg = dir.join("bare.callgrind");
    convert(&bare, "callgrind", &cg, &[]);
    let text = std::fs::read_to_string(&cg).unwrap();
    let fl = text
        .lines()
        .zip(text.lines().skip(1))
        .find(|(_, next)| *next == "fn=f10")
        .map(|(fl, _)| fl)
        .unwrap_or_else(|| panic!("no fn=f10 in:\n{text}"));
    assert!(fl.starts_with("fl=") && fl.ends_with("chain10.c"), "{fl}");
    callgrind_annotate(&cg);
}

/// MALT's sample reports MALT's own totals (from its JSON: Σ alloc 4 calls
/// of 1,122,328 B, Σ free 3, memoryTimeline peak 1,122,320, one leak of
/// 73,728 B).
#[test]
fn the_malt_sample_reports_malts_totals() {
    let r = cli_report(&repo_root().join("tests/data/malt-example.json"));
    assert_eq!(r["format"], "malt");
    assert_eq!(u(&r, "allocations"), 4);
    assert_eq!(u(&r, "bytes_allocated"), 1_122_328);
    assert_eq!(u(&r, "frees"), 3);
    assert_eq!(u(&r, "peak_bytes"), 1_122_320);
    assert_eq!(u(&r, "leaked_blocks"), 1);
    assert_eq!(u(&r, "leaked_bytes"), 73_728);
}
