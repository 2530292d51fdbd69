//! `tracer leaks`, `tracer report` and `tracer run --leak-check` on traces
//! that hold the reachability scan, built record by record: classes,
//! grouping, JSON, SARIF, suppressions and their counts, malformed
//! suppression files, the run verdict and exit statuses. Every figure is
//! derived in the comment of [`scanned`] from the records themselves.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use format_writers::{
    Alloc, Event, Format, Frame, Free, LeakKind, Object, Process, Record, Stack, Symbol,
};
use serde_json::Value;

mod common;
use common::*;

const S: u64 = 1_600_000_000_000_000_000;

fn alloc(t: u64, address: u64, size: u64, stack: u64) -> Record {
    Record::Event(Event::Alloc(Alloc {
        time_ns: S + t,
        thread: 1,
        address,
        size,
        stack,
    }))
}

fn free(t: u64, address: u64) -> Record {
    Record::Event(Event::Free(Free {
        time_ns: S + t,
        thread: 1,
        address,
    }))
}

fn class(address: u64, kind: LeakKind) -> Record {
    Record::BlockClass { address, kind }
}

/// A stack of frames named in the trace: `(address, function, file, line)`.
fn stack(id: u64, frames: &[(u64, &str, &str, u32)]) -> Record {
    Record::Stack(Stack {
        id,
        frames: frames
            .iter()
            .map(|&(address, function, file, line)| Frame {
                address,
                symbol: Some(Symbol {
                    function: function.into(),
                    file: file.into(),
                    line,
                }),
            })
            .collect(),
    })
}

/// A trace with the reachability scan, pid 77.
///
/// | block | addr | bytes | stack | class | |
/// | - | - | - | - | - | - |
/// | A | 0x1000 | 100 | 0 make_leak leak.c:12 ← main | definite | |
/// | B | 0x2000 | 16 | 1 make_tree tree.c:20 ← main | definite | (root) |
/// | C | 0x3000 | 40 | 2 make_child tree.c:25 | indirect | |
/// | D | 0x4000 | 60 | 2 | indirect | |
/// | E | 0x5000 | 200 | 3 keep_config /src/proj/cfg.c:7 | reachable | freed after the scan |
/// | F | 0x6000 | 64 | 4 cursor cur.c:3 | possible | |
/// | G | 0x7000 | 10 | 0 | definite | |
/// | H | 0x8000 | 5 | 0 | — | freed before the scan |
/// | J | 0xb000 | 8 | 3 | reachable | |
/// | I | 0xa000 | 30 | 5 atexit_alloc dtor.c:9 | — | allocated after the scan |
///
/// The scan also names 0x9999, no live block (ignored). Live at exit: A B C
/// D F G J I = 100+16+40+60+64+10+8+30 = 328 B in 8 blocks. Definite: A G
/// (stack 0: 110 B, 2 blocks) and B (stack 1: 16 B, 1) = 126 B in 3;
/// indirect: C D (stack 2: 100 B in 2); possible: F (64 B in 1); reachable: J
/// (8 B in 1; E was freed); after the scan: I (30 B in 1). Leaked
/// (definite + indirect) = 226 B in 5 blocks. Groups largest first:
/// definite/0 110, indirect/2 100, [possible/4 64], definite/1 16,
/// [reachable/3 8].
fn scanned() -> Vec<Record> {
    vec![
        Record::Process(Process {
            pid: 77,
            executable: "/nonexistent/bin/demo".into(),
            command_line: vec!["demo".into()],
            start_time_ns: S,
        }),
        Record::Object(Object {
            path: "/nonexistent/bin/demo".into(),
            load_address: 0x40_0000,
            size: 0x1_0000,
        }),
        stack(
            0,
            &[
                (0x40_1000, "make_leak", "leak.c", 12),
                (0x40_2000, "main", "leak.c", 30),
            ],
        ),
        stack(
            1,
            &[
                (0x40_1100, "make_tree", "tree.c", 20),
                (0x40_2010, "main", "leak.c", 31),
            ],
        ),
        stack(2, &[(0x40_1200, "make_child", "tree.c", 25)]),
        stack(3, &[(0x40_1300, "keep_config", "/src/proj/cfg.c", 7)]),
        stack(4, &[(0x40_1400, "cursor", "cur.c", 3)]),
        stack(5, &[(0x40_1500, "atexit_alloc", "dtor.c", 9)]),
        alloc(10, 0x1000, 100, 0),
        alloc(20, 0x2000, 16, 1),
        alloc(30, 0x3000, 40, 2),
        alloc(40, 0x4000, 60, 2),
        alloc(50, 0x5000, 200, 3),
        alloc(60, 0x6000, 64, 4),
        alloc(70, 0x7000, 10, 0),
        alloc(80, 0x8000, 5, 0),
        free(90, 0x8000),
        alloc(95, 0xb000, 8, 3),
        Record::LeakScan { time_ns: S + 100 },
        class(0x1000, LeakKind::Definite),
        class(0x2000, LeakKind::Definite),
        class(0x3000, LeakKind::Indirect),
        class(0x4000, LeakKind::Indirect),
        class(0x5000, LeakKind::Reachable),
        class(0x6000, LeakKind::Possible),
        class(0x7000, LeakKind::Definite),
        class(0xb000, LeakKind::Reachable),
        class(0x9999, LeakKind::Definite),
        alloc(110, 0xa000, 30, 5),
        free(120, 0x5000),
    ]
}

fn groups(j: &Value) -> Vec<(String, u64, u64, u64)> {
    j["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_string(),
                l["stack_id"].as_u64().unwrap(),
                l["bytes"].as_u64().unwrap(),
                l["blocks"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn g(kind: &str, stack: u64, bytes: u64, blocks: u64) -> (String, u64, u64, u64) {
    (kind.to_string(), stack, bytes, blocks)
}

#[test]
fn classes_grouping_and_json_in_both_formats() {
    let dir = scratch("json");
    for format in [Format::Dumpalloc, Format::Mlyze] {
        let path = dir.join(format!("t.{}", format.extension()));
        write_trace(&path, format, &scanned());
        let o = tracer(&[
            OsStr::new("leaks"),
            OsStr::new("--json"),
            OsStr::new("--no-debug-info"),
            path.as_os_str(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        // Stack ids are re-interned by the dumpalloc reader in first-use
        // order, which here is the order they were defined in.
        assert_eq!(
            groups(&j),
            [
                g("definite", 0, 110, 2),
                g("indirect", 2, 100, 2),
                g("definite", 1, 16, 1)
            ],
            "{format:?}"
        );
        assert_eq!(j["leaked_bytes"], 226);
        assert_eq!(j["leaked_blocks"], 5);
        assert_eq!(j["reachability_scan"], true);
        assert_eq!(j["by_kind"]["definite"]["bytes"], 126);
        assert_eq!(j["by_kind"]["definite"]["blocks"], 3);
        assert_eq!(j["by_kind"]["indirect"]["bytes"], 100);
        assert_eq!(j["by_kind"]["possible"]["bytes"], 64);
        assert_eq!(j["by_kind"]["reachable"]["bytes"], 8);
        assert_eq!(j["by_kind"]["reachable"]["blocks"], 1);
        assert_eq!(j["after_scan"]["bytes"], 30);
        assert_eq!(j["after_scan"]["blocks"], 1);
        assert_eq!(j["unclassified"]["blocks"], 0);
        let f = &j["leaks"][0]["stack"][0];
        assert_eq!(f["function"], "make_leak");
        assert_eq!(f["file"], "leak.c");
        assert_eq!(f["line"], 12);
        assert_eq!(f["module"], "/nonexistent/bin/demo");

        // report --json follows the interface: leaked = definite + indirect.
        let o = tracer(&[OsStr::new("report"), OsStr::new("--json"), path.as_os_str()]);
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["leaked_bytes"], 226);
        assert_eq!(r["leaked_blocks"], 5);
        assert_eq!(r["live_at_exit_bytes"], 328);
        assert_eq!(r["live_at_exit_blocks"], 8);
        assert_eq!(r["reachability_scan"], true);
    }
}

#[test]
fn show_and_all_add_kinds_and_fail_follows_what_is_shown() {
    let dir = scratch("show");
    let path = dir.join("t.mlyze");
    write_trace(&path, Format::Mlyze, &scanned());
    let p = path.as_os_str();
    let all_groups = [
        g("definite", 0, 110, 2),
        g("indirect", 2, 100, 2),
        g("possible", 4, 64, 1),
        g("definite", 1, 16, 1),
        g("reachable", 3, 8, 1),
    ];
    for flags in [
        &["--all"][..],
        &["--show", "all"],
        &["--show", "reachable,possible,indirect,definite"],
    ] {
        let mut args: Vec<&OsStr> = vec![OsStr::new("leaks"), OsStr::new("--json")];
        args.extend(flags.iter().map(OsStr::new));
        args.push(p);
        let o = tracer(&args);
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(groups(&j), all_groups, "{flags:?}");
        // leaked_* stays definite + indirect.
        assert_eq!(j["leaked_bytes"], 226);
    }
    // Only reachable: one group; --fail fails on what is shown.
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--json"),
        OsStr::new("--fail"),
        OsStr::new("--show"),
        OsStr::new("reachable"),
        p,
    ]);
    assert_eq!(o.status.code(), Some(23));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(groups(&j), [g("reachable", 3, 8, 1)]);
    assert_eq!(j["leaked_bytes"], 226);
    // A bad kind is bad usage.
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--show"),
        OsStr::new("lost"),
        p,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("lost"), "{}", stderr(&o));
}

#[test]
fn text_layout_with_a_scan() {
    let dir = scratch("text");
    let path = dir.join("t.dumpalloc");
    write_trace(&path, Format::Dumpalloc, &scanned());
    let o = tracer(&[OsStr::new("leaks"), OsStr::new("--fail"), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(23));
    let t = stdout(&o);
    let expected = "Direct leak of 110 byte(s) in 2 object(s) allocated from:\n\
        \x20   #0 0x401000 in make_leak leak.c:12 (/nonexistent/bin/demo+0x1000)\n\
        \x20   #1 0x402000 in main leak.c:30 (/nonexistent/bin/demo+0x2000)\n\
        \n\
        Indirect leak of 100 byte(s) in 2 object(s) allocated from:\n\
        \x20   #0 0x401200 in make_child tree.c:25 (/nonexistent/bin/demo+0x1200)\n\
        \n\
        Direct leak of 16 byte(s) in 1 object(s) allocated from:\n\
        \x20   #0 0x401100 in make_tree tree.c:20 (/nonexistent/bin/demo+0x1100)\n\
        \x20   #1 0x402010 in main leak.c:31 (/nonexistent/bin/demo+0x2010)\n\
        \n\
        SUMMARY: 226 byte(s) leaked in 5 allocation(s).\n\
        Blocks live at exit, by the reachability scan at exit:\n\
        \x20          definitely lost: 126 byte(s) in 3 block(s)\n\
        \x20          indirectly lost: 100 byte(s) in 2 block(s)\n\
        \x20            possibly lost: 64 byte(s) in 1 block(s) (not shown; --show possible)\n\
        \x20          still reachable: 8 byte(s) in 1 block(s) (not shown; --show reachable)\n\
        \x20 allocated after the scan: 30 byte(s) in 1 block(s)\n";
    assert!(t.starts_with(expected), "{t}");
    // The binary is not on this machine: said, with the names' origin.
    assert!(
        t.contains("  /nonexistent/bin/demo: 5 frame(s): cannot open /nonexistent/bin/demo: No such file or directory; names taken from the trace\n"),
        "{t}"
    );
    assert!(t.contains("allocated after the reachability scan"), "{t}");
    assert!(!t.contains("no reachability scan"), "{t}");
}

#[test]
fn suppressions_hide_exactly_their_groups_and_count_them() {
    let dir = scratch("supp");
    let path = dir.join("t.mlyze");
    write_trace(&path, Format::Mlyze, &scanned());
    let supp = dir.join("supp.txt");
    // make_leak hides stack 0 (110 B, 2 blocks); tree.c (a file, anywhere in
    // the stack) hides stacks 1 and 2 (16 + 100 B, 1 + 2 blocks); the
    // wildcard rule matches nothing shown (the possible group is not shown).
    std::fs::write(
        &supp,
        "# ours\nleak:make_leak\n\n  leak:tree.c  \nleak:cur*r\n",
    )
    .unwrap();
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--json"),
        OsStr::new("--fail"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        path.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(groups(&j).is_empty());
    assert_eq!(j["leaked_bytes"], 0);
    assert_eq!(j["suppressed_bytes"], 226);
    assert_eq!(j["suppressed_blocks"], 5);
    let mine: Vec<(String, u64, u64, u64)> = j["suppressions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] != "default")
        .map(|s| {
            (
                s["pattern"].as_str().unwrap().to_string(),
                s["hits"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
                s["blocks"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mine,
        [
            g("make_leak", 1, 110, 2),
            g("tree.c", 2, 116, 3),
            g("cur*r", 0, 0, 0)
        ]
    );
    // With --all the wildcard takes the possible group (cursor in cur.c).
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--all"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        path.as_os_str(),
    ]);
    let t = stdout(&o);
    assert!(
        t.starts_with("Still reachable: 8 byte(s) in 1 object(s) allocated from:\n"),
        "{t}"
    );
    assert!(t.contains("      1         64 cur*r\n"), "{t}");
    assert!(t.contains("      2        116 tree.c\n"), "{t}");
    assert!(
        t.contains("  blocks hidden: 2 by make_leak, 3 by tree.c, 1 by cur*r\n"),
        "{t}"
    );

    // TRACER_SUPPRESSIONS is read too (after --suppressions).
    let env_file = dir.join("env.txt");
    std::fs::write(&env_file, "leak:main\n").unwrap();
    let o = tracer_env(
        &[OsStr::new("leaks"), OsStr::new("--json"), path.as_os_str()],
        &[("TRACER_SUPPRESSIONS", env_file.as_os_str())],
    );
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    // main is in stacks 0 and 1; stack 2 (make_child) stays.
    assert_eq!(groups(&j), [g("indirect", 2, 100, 2)]);
    assert_eq!(j["suppressed_bytes"], 126);
}

#[test]
fn malformed_suppression_files_name_file_and_line() {
    let dir = scratch("badsupp");
    let path = dir.join("t.mlyze");
    write_trace(&path, Format::Mlyze, &scanned());
    let supp = dir.join("bad.supp");
    std::fs::write(&supp, "# fine\nleak:ok\nleak\n").unwrap();
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        path.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "tracer: {}: line 3: expected leak:PATTERN, found \"leak\"\n",
            supp.display()
        )
    );
    // Through the environment: the variable is named.
    let o = tracer_env(
        &[OsStr::new("leaks"), path.as_os_str()],
        &[("TRACER_SUPPRESSIONS", supp.as_os_str())],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("tracer: TRACER_SUPPRESSIONS: "),
        "{}",
        stderr(&o)
    );
    let o = tracer_env(
        &[OsStr::new("leaks"), path.as_os_str()],
        &[("TRACER_SUPPRESSIONS", OsStr::new("/nonexistent/x.supp"))],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "tracer: TRACER_SUPPRESSIONS=/nonexistent/x.supp: No such file or directory\n"
    );
}

/// The required properties of SARIF 2.1.0 (sarif-schema-2.1.0.json):
/// `version`, `runs`; a run's `tool.driver.name`; a result's `message`
/// (`text`); a location's `physicalLocation.artifactLocation.uri` and a
/// region's `startLine` (>= 1) when present.
fn check_sarif_structure(doc: &Value) {
    assert_eq!(doc["version"], "2.1.0");
    assert!(doc["$schema"]
        .as_str()
        .unwrap()
        .contains("sarif-schema-2.1.0"));
    let runs = doc["runs"].as_array().expect("runs is an array");
    assert!(!runs.is_empty());
    for run in runs {
        assert!(run["tool"]["driver"]["name"].is_string());
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        for r in rules {
            assert!(r["id"].is_string());
        }
        for res in run["results"].as_array().expect("results is an array") {
            assert!(res["message"]["text"].is_string(), "{res}");
            let id = res["ruleId"].as_str().unwrap();
            let idx = res["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[idx]["id"], id);
            assert!(["error", "warning", "note"].contains(&res["level"].as_str().unwrap()));
            for loc in res["locations"].as_array().into_iter().flatten() {
                let p = &loc["physicalLocation"];
                assert!(p["artifactLocation"]["uri"].is_string(), "{loc}");
                if let Some(region) = p.get("region") {
                    assert!(region["startLine"].as_u64().unwrap() >= 1);
                }
            }
        }
    }
}

#[test]
fn sarif_one_result_per_group_pointing_at_the_leaking_line() {
    let dir = scratch("sarif");
    let path = dir.join("t.mlyze");
    write_trace(&path, Format::Mlyze, &scanned());
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--sarif"),
        OsStr::new("--all"),
        OsStr::new("--source-root"),
        OsStr::new("/src/proj"),
        path.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    check_sarif_structure(&doc);
    let run = &doc["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "tracer");
    assert_eq!(
        run["originalUriBaseIds"]["SRCROOT"]["uri"],
        "file:///src/proj/"
    );
    let results = run["results"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str, u64)> = results
        .iter()
        .map(|r| {
            let p = &r["locations"][0]["physicalLocation"];
            (
                r["ruleId"].as_str().unwrap(),
                r["level"].as_str().unwrap(),
                p["artifactLocation"]["uri"].as_str().unwrap(),
                p["region"]["startLine"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("definite-leak", "error", "leak.c", 12),
            ("indirect-leak", "warning", "tree.c", 25),
            ("possible-leak", "warning", "cur.c", 3),
            ("definite-leak", "error", "tree.c", 20),
            ("reachable-block", "note", "cfg.c", 7),
        ]
    );
    // The file under --source-root is relative to SRCROOT.
    assert_eq!(
        results[4]["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"],
        "SRCROOT"
    );
    assert_eq!(
        results[0]["message"]["text"],
        "Direct leak of 110 byte(s) in 2 object(s) allocated from make_leak (pid 77 /nonexistent/bin/demo)"
    );
    // The whole stack rides along.
    let frames = results[0]["stacks"][0]["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 2);
    assert_eq!(
        frames[1]["location"]["physicalLocation"]["region"]["startLine"],
        30
    );
    assert_eq!(frames[1]["module"], "/nonexistent/bin/demo");
    // --json and --sarif together are bad usage.
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--sarif"),
        OsStr::new("--json"),
        path.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn run_verdict_exit_23_and_status_passthrough() {
    let dir = scratch("run");
    let fake_lib = dir.join("libtracer.so");
    std::fs::write(&fake_lib, b"").unwrap();
    // Three "processes": the scanned one, a clean one (everything freed, a
    // scan with no class), and the scanned one written again in another
    // format (same pid and start: reported once).
    let leaky = dir.join("leaky.mlyze");
    write_trace(&leaky, Format::Mlyze, &scanned());
    let leaky2 = dir.join("leaky.dumpalloc");
    write_trace(&leaky2, Format::Dumpalloc, &scanned());
    let clean = dir.join("clean.mlyze");
    let mut c = vec![
        Record::Process(Process {
            pid: 78,
            executable: "/nonexistent/bin/clean".into(),
            command_line: vec![],
            start_time_ns: S,
        }),
        stack(0, &[(0x40_1000, "f", "f.c", 1)]),
        alloc(1, 0x1000, 10, 0),
        free(2, 0x1000),
    ];
    c.push(Record::LeakScan { time_ns: S + 3 });
    write_trace(&clean, Format::Mlyze, &c);
    let run = |flags: &[&str], files: &[&Path], exit: i32| {
        let mut script = String::new();
        for f in files {
            script.push_str(&format!("echo '{}' >> \"$TRACER_MANIFEST\"; ", f.display()));
        }
        script.push_str(&format!("exit {exit}"));
        let mut args: Vec<OsString> = vec!["run".into()];
        args.extend(flags.iter().map(OsString::from));
        args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
        Command::new(TRACER)
            .args(&args)
            .env("TRACER_LIB", &fake_lib)
            .env_remove("TRACER_SUPPRESSIONS")
            .output()
            .unwrap()
    };
    let o = run(&["--fail-on-leak"], &[&leaky, &clean, &leaky2], 0);
    assert_eq!(o.status.code(), Some(23), "{}", stderr(&o));
    let err = stderr(&o);
    // One report, for the process that leaked.
    assert_eq!(err.matches("tracer: leak report for").count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "tracer: leak report for process 77 (/nonexistent/bin/demo), {}\n",
            leaky.display()
        )),
        "{err}"
    );
    // 3 groups, 226 bytes in 5 blocks, in 1 of 2 processes.
    assert!(
        err.ends_with("tracer: 3 leaks (226 bytes in 5 blocks) in 1 of 2 processes\n"),
        "{err}"
    );
    // Without --fail-on-leak the program's status stands, leaks or not.
    let o = run(&["--leak-check"], &[&leaky], 4);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).ends_with("tracer: 3 leaks (226 bytes in 5 blocks) in 1 of 1 process\n"));
    // No leak: the program's own status, with or without --fail-on-leak.
    let o = run(&["--fail-on-leak"], &[&clean], 0);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).ends_with("tracer: no leaks in 1 process\n"),
        "{}",
        stderr(&o)
    );
    let o = run(&["--fail-on-leak"], &[&clean], 5);
    assert_eq!(o.status.code(), Some(5));
    // A suppression file applies to every process; a bad one stops before
    // the program runs.
    let supp = dir.join("s.supp");
    std::fs::write(&supp, "leak:main\nleak:make_child\n").unwrap();
    let o = run(
        &["--fail-on-leak", "--suppressions", supp.to_str().unwrap()],
        &[&leaky, &clean],
        0,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).ends_with("tracer: no leaks in 2 processes\n"));
    std::fs::write(&supp, "leek:main\n").unwrap();
    let o = run(
        &["--fail-on-leak", "--suppressions", supp.to_str().unwrap()],
        &[&leaky],
        0,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("line 1: expected leak:PATTERN"));
    // --show reachable makes the reachable block fail the run too.
    let o = run(&["--fail-on-leak", "--show", "reachable"], &[&leaky], 0);
    assert_eq!(o.status.code(), Some(23));
    assert!(stderr(&o).ends_with("tracer: 1 leak (8 bytes in 1 block) in 1 of 1 process\n"));
}

#[test]
fn a_trace_without_a_scan_keeps_every_live_block_as_definite() {
    let dir = scratch("noscan");
    let path = dir.join("t.mlyze");
    let mut t = scanned();
    t.retain(|r| !matches!(r, Record::LeakScan { .. } | Record::BlockClass { .. }));
    write_trace(&path, Format::Mlyze, &t);
    let o = tracer(&[OsStr::new("leaks"), OsStr::new("--json"), path.as_os_str()]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Live at exit: A G (stack 0: 110/2), B (16/1), C D (100/2), F (64/1),
    // J (8/1), I (30/1); E freed. All definite.
    assert_eq!(
        groups(&j),
        [
            g("definite", 0, 110, 2),
            g("definite", 2, 100, 2),
            g("definite", 4, 64, 1),
            g("definite", 5, 30, 1),
            g("definite", 1, 16, 1),
            g("definite", 3, 8, 1),
        ]
    );
    assert_eq!(j["reachability_scan"], false);
    assert_eq!(j["leaked_bytes"], 328);
    let o = tracer(&[OsStr::new("leaks"), path.as_os_str()]);
    assert!(stdout(&o).contains("holds no reachability scan"));
}

/// Inlined frames come from the debug info, and suppressions see them: a
/// small C program built with `gcc -g -O2 -no-pie` allocates through an
/// always-inlined helper; a trace naming a return address inside the helper's
/// inlined code reports `helper (inlined)` then `outer`, and `leak:helper`
/// hides the group although no recorded frame is the helper's own.
#[test]
fn inlined_frames_are_expanded_and_suppressible() {
    let dir = scratch("inline");
    let src = dir.join("inl.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n\
         void *volatile sink;\n\
         static inline __attribute__((always_inline)) void helper(unsigned n) {\n\
         \x20   sink = malloc(n);\n\
         }\n\
         __attribute__((noinline)) void outer(void) {\n\
         \x20   helper(24);\n\
         \x20   sink = 0;\n\
         }\n\
         int main(void) { outer(); return 0; }\n",
    )
    .unwrap();
    let bin = dir.join("inl");
    let built = Command::new("gcc")
        .args(["-g", "-O2", "-no-pie", "-fno-pie", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        eprintln!("gcc unavailable: skipping");
        return;
    }
    let exe = bin.to_str().unwrap().to_string();
    // A non-PIE executable is mapped at its link address (0x400000).
    let object = Object {
        path: exe.clone(),
        load_address: 0x40_0000,
        size: 0,
    };
    // Find, inside outer, a return address whose lookup gives the inlined
    // helper then outer: the instruction after the call to malloc.
    let mut sym = symbolizer::Symbolizer::new(
        std::slice::from_ref(&object),
        "",
        symbolizer::Options::default(),
    );
    let nm = Command::new("nm").arg(&bin).output().unwrap();
    let outer = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(" outer"))
        .map(|l| u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap())
        .expect("outer in nm's output");
    let ret = (outer + 1..outer + 64)
        .find(|&a| {
            let r = sym.symbolize(a, true);
            r.frames.len() == 2
                && r.frames[0].function.as_deref() == Some("helper")
                && r.frames[0].line == Some(4)
        })
        .expect("an address in outer whose line is helper's malloc call");
    let trace = dir.join("t.mlyze");
    write_trace(
        &trace,
        Format::Mlyze,
        &[
            Record::Process(Process {
                pid: 9,
                executable: exe.clone(),
                command_line: vec![],
                start_time_ns: S,
            }),
            Record::Object(object.clone()),
            Record::Stack(Stack {
                id: 0,
                frames: vec![Frame {
                    address: ret,
                    symbol: None,
                }],
            }),
            alloc(1, 0x1000, 24, 0),
        ],
    );
    let o = tracer(&[OsStr::new("leaks"), trace.as_os_str()]);
    let t = stdout(&o);
    let src_name = src.to_str().unwrap();
    assert!(
        t.starts_with(&format!(
            "Direct leak of 24 byte(s) in 1 object(s) allocated from:\n\
             \x20   #0 {ret:#x} in helper {src_name}:4 ({exe}+{:#x}) (inlined)\n\
             \x20   #1 {ret:#x} in outer {src_name}:7 ({exe}+{:#x})\n",
            ret - 0x40_0000,
            ret - 0x40_0000
        )),
        "{t}"
    );
    let supp = dir.join("s.supp");
    std::fs::write(&supp, "leak:^helper$\n").unwrap();
    let o = tracer(&[
        OsStr::new("leaks"),
        OsStr::new("--json"),
        OsStr::new("--suppressions"),
        supp.as_os_str(),
        trace.as_os_str(),
    ]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(groups(&j).is_empty(), "{j}");
    assert_eq!(j["suppressions"][0]["blocks"], 1);
    assert_eq!(j["suppressions"][0]["bytes"], 24);
}
