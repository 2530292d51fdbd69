//! MALT JSON: the real MALT 1.6 sample reads with the totals worked out by
//! hand from it; our profile of a hand-made trace has every required section,
//! typed as MALT's readers want (checked on `serde_json::Value`, not through
//! our structs), with figures derived by hand; it reads back to the same
//! per-stack counts and sums; corrupt input is one error with an offset.

mod malt_common;

use std::collections::HashMap;

use format_writers::aggregate::Aggregate;
use format_writers::malt::{self, MaltSummary};
use format_writers::{FormatError, Record};
use malt_common::{records, write_with};
use serde_json::Value;

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/data/malt-example.json"
);

fn replay(
    records: impl Iterator<Item = format_writers::Result<Record>>,
) -> (Aggregate, Vec<Record>) {
    let mut agg = Aggregate::new();
    let mut stacks = Vec::new();
    for r in records {
        let r = r.unwrap();
        agg.add(&r);
        if matches!(r, Record::Stack(_)) {
            stacks.push(r);
        }
    }
    (agg, stacks)
}

/// Totals summed by hand from the sample (python over the JSON):
/// alloc.count 0+1+0+0+1+1+1 = 4, alloc.sum 8+1048576+16+73728 = 1122328,
/// free.count 3, free.sum 8+1048576+16 = 1048600, leaks 1 block of 73728,
/// memoryTimeline.peak[0] = 1122320 (= Σ globalPeak 1048576+16+73728).
#[test]
fn sample_reads_with_hand_totals() {
    let p = malt::read(std::fs::File::open(SAMPLE).unwrap()).unwrap();
    let s = &p.summary;
    assert_eq!(
        *s,
        MaltSummary {
            format_version: "1.6".into(),
            tool: "malt-1.6.2".into(),
            exe: "extractor-example".into(),
            command: "src/reader/libreader/extractors/tests/extractor-example".into(),
            hostname: "sebv4".into(),
            date: "2026-01-21 18:48".into(),
            runtime_ticks: 855304811,
            ticks_per_second: 3411818790,
            stacks: 7,
            allocations: 4,
            bytes_allocated: 1122328,
            frees: 3,
            bytes_freed: 1048600,
            peak_bytes: 1122320,
            leaked_blocks: 1,
            leaked_bytes: 73728,
            reallocs: 0,
        }
    );
    let (agg, stacks) = replay(p.records);
    assert_eq!(agg.allocations, 4);
    assert_eq!(agg.bytes_allocated, 1122328);
    // MALT counts frees on the free call's stack; the replay frees each
    // non-leaked block of an allocating stack: the same 3 blocks and bytes.
    assert_eq!(agg.frees, 3);
    assert_eq!(agg.bytes_freed, 1048600);
    assert_eq!((agg.live_blocks, agg.live_bytes), (1, 73728));
    assert_eq!(stacks.len(), 7);
    // Stack 0x7f8411642120 allocated the 1 MiB block; its innermost frame
    // 0x5644c11e12a8 is sites.instr {file 22, function 23, line 25}:
    // strings[22] = ".../example.cpp", strings[23] = "leaf()".
    let Record::Stack(big) = &stacks[4] else {
        unreachable!()
    };
    assert_eq!(big.frames.len(), 11);
    assert_eq!(big.frames[0].address, 0x5644c11e12a8);
    let sym = big.frames[0].symbol.as_ref().unwrap();
    assert_eq!(sym.function, "leaf()");
    assert_eq!(
        sym.file,
        "src/reader/libreader/extractors/tests/example.cpp"
    );
    assert_eq!(sym.line, 25);
    let st = agg.stack_stats();
    let (_, s4) = st.iter().find(|(id, _)| *id == big.id).unwrap();
    assert_eq!((s4.alloc.count, s4.alloc.sum), (1, 1048576));
    // Lifetime 4503715 ticks at 3411818790 ticks/s = 1320037 ns.
    assert_eq!(s4.lifetime.sum, 4503715u64 * 1_000_000_000 / 3411818790);
    // The sample's detection.
    assert!(malt::detect(&std::fs::read(SAMPLE).unwrap()[..64]));
}

fn our_profile() -> Value {
    let bytes = write_with(malt::Writer::new, &records());
    assert!(malt::detect(&bytes), "our profile starts with {{\"run\"");
    serde_json::from_slice(&bytes).unwrap()
}

fn is_hex(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.strip_prefix("0x"))
        .is_some_and(|d| !d.is_empty() && u64::from_str_radix(d, 16).is_ok())
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

/// Every section and field `format-notes.md` calls required, with its type.
#[test]
fn required_sections_present_and_typed() {
    let j = our_profile();
    let run = &j["run"];
    assert_eq!(run["formatVersion"], "1.6");
    for k in ["exe", "command", "hostname", "tool", "date"] {
        assert!(run[k].is_string(), "run.{k}");
    }
    assert!(run["runtime"].is_u64());
    assert!(j["config"].is_object());
    for k in [
        "time", "stack", "output", "python", "c", "dump", "filter", "tools",
    ] {
        assert!(j["config"][k].is_object(), "config.{k}");
    }
    // stacks
    let stats = j["stacks"]["stats"].as_array().unwrap();
    assert_eq!(u(&j["stacks"]["count"]), stats.len() as u64);
    for s in stats {
        assert!(s["stack"].as_array().unwrap().iter().all(is_hex));
        assert!(is_hex(&s["stackId"]));
        let i = &s["infos"];
        for k in ["alloc", "free", "lifetime", "mmap", "munmap"] {
            for f in ["count", "min", "max", "sum"] {
                assert!(i[k][f].is_u64(), "infos.{k}.{f}");
            }
        }
        for k in [
            "countZeros",
            "maxAliveReq",
            "aliveReq",
            "globalPeak",
            "reallocCount",
        ] {
            assert!(i[k].is_u64(), "infos.{k}");
        }
        assert!(i["reallocSumDelta"].is_i64());
    }
    // sites
    let sites = &j["sites"];
    assert_eq!(sites["strings"][0], "??");
    let nstrings = sites["strings"].as_array().unwrap().len() as u64;
    for m in sites["map"].as_array().unwrap() {
        assert!(is_hex(&m["lower"]) && is_hex(&m["upper"]) && is_hex(&m["offset"]));
        assert!(m["file"].is_string() && m["aslrOffset"].is_u64());
    }
    let instr = sites["instr"].as_object().unwrap();
    for (k, v) in instr {
        assert!(is_hex(&Value::String(k.clone())), "instr key {k}");
        for f in ["file", "function", "binary", "line"] {
            if let Some(x) = v.get(f) {
                assert!(x.is_u64(), "instr.{k}.{f}");
                if f != "line" {
                    assert!(u(x) < nstrings, "instr.{k}.{f} indexes strings");
                }
            }
        }
        assert!(v.get("function").is_some());
    }
    // every stack address is described
    for s in stats {
        for a in s["stack"].as_array().unwrap() {
            assert!(instr.contains_key(a.as_str().unwrap()));
        }
    }
    // timeline
    for k in ["memoryTimeline", "systemTimeline", "memoryBandwidth"] {
        let t = &j["timeline"][k];
        assert!(t["start"].is_u64() && t["perPoints"].is_u64(), "{k}");
        let fields = t["fields"].as_array().unwrap().len();
        assert_eq!(t["peak"].as_array().unwrap().len(), fields, "{k}.peak");
        let values = t["values"].as_array().unwrap();
        let callsite = t["callsite"].as_array().unwrap();
        assert_eq!(values.len(), callsite.len(), "{k}: a callsite per row");
        assert!(callsite.iter().all(is_hex), "{k}.callsite");
        for row in values {
            assert_eq!(row.as_array().unwrap().len(), fields);
        }
    }
    // scatter, threads, memStats, globals, leaks, domains
    for k in ["sizeOverTime", "lifetimeOverSize"] {
        let s = &j["scatter"][k];
        for a in ["xAxis", "yAxis"] {
            assert!(s["infos"][a]["max"].is_u64() && s["infos"][a]["log"].is_boolean());
        }
        for p in s["points"].as_array().unwrap() {
            assert!(p["x"].is_u64() && p["y"].is_u64() && p["v"].is_u64());
        }
    }
    for t in j["threads"].as_array().unwrap() {
        assert!(t["stackMem"]["timeprofiler"].is_object());
        assert!(t["cntMemOps"].is_u64());
        for f in [
            "malloc",
            "calloc",
            "realloc",
            "free",
            "posix_memalign",
            "aligned_alloc",
            "memalign",
            "valloc",
            "pvalloc",
        ] {
            assert!(t["stats"][f]["count"].is_u64(), "threads.stats.{f}");
        }
    }
    assert!(j["memStats"]["sizeMap"].is_object());
    assert!(j["memStats"]["reallocJump"].is_array());
    assert_eq!(u(&j["globals"]["ticksPerSecond"]), 1_000_000_000);
    for l in j["leaks"].as_array().unwrap() {
        assert!(l["stack"].as_array().unwrap().iter().all(is_hex));
        assert!(l["count"].is_u64() && l["memory"].is_u64());
    }
    for k in ["counters", "mem", "localPeak", "atGlobalPeak"] {
        for f in ["c", "pyObj", "pyMem", "pyRaw", "mmap"] {
            assert!(j["domains"][k][f].is_u64(), "domains.{k}.{f}");
        }
    }
}

fn mms(v: &Value) -> [u64; 4] {
    [u(&v["count"]), u(&v["min"]), u(&v["max"]), u(&v["sum"])]
}

/// The figures of the hand-made trace, worked out in `malt_common`.
#[test]
fn figures_match_the_hand_derivation() {
    let j = our_profile();
    assert_eq!(j["run"]["exe"], "app");
    assert_eq!(j["run"]["command"], "./app arg");
    assert_eq!(j["run"]["hostname"], "testhost");
    assert_eq!(u(&j["run"]["runtime"]), 90);
    let stats = j["stacks"]["stats"].as_array().unwrap();
    assert_eq!(stats.len(), 2);
    let a = &stats[0];
    assert_eq!(
        a["stack"],
        serde_json::json!(["0x1010", "0x2020", "0x3030"])
    );
    assert_eq!(a["stackId"], "0x1");
    let i = &a["infos"];
    assert_eq!(mms(&i["alloc"]), [4, 100, 400, 1000]);
    assert_eq!(mms(&i["free"]), [3, 100, 300, 600]);
    assert_eq!(mms(&i["lifetime"]), [3, 30, 50, 120]);
    assert_eq!(u(&i["aliveReq"]), 400);
    assert_eq!(u(&i["maxAliveReq"]), 500);
    assert_eq!(u(&i["globalPeak"]), 500);
    assert_eq!(u(&i["reallocCount"]), 1);
    assert_eq!(i["reallocSumDelta"], 100);
    let b = &stats[1]["infos"];
    assert_eq!(mms(&b["alloc"]), [2, 50, 70, 120]);
    assert_eq!(mms(&b["free"]), [1, 70, 70, 70]);
    assert_eq!(mms(&b["lifetime"]), [1, 10, 10, 10]);
    assert_eq!(
        [u(&b["aliveReq"]), u(&b["maxAliveReq"]), u(&b["globalPeak"])],
        [50, 120, 50]
    );
    // sites: symbols from frames and from late AddressSymbol records
    let strings: Vec<&str> = j["sites"]["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let name = |addr: &str, f: &str| strings[u(&j["sites"]["instr"][addr][f]) as usize];
    assert_eq!(name("0x1010", "function"), "leaf");
    assert_eq!(name("0x2020", "function"), "mid");
    assert_eq!(name("0x1050", "file"), "b.c");
    assert_eq!(u(&j["sites"]["instr"]["0x3030"]["line"]), 30);
    assert_eq!(name("0x3030", "binary"), "/usr/bin/app");
    // one timeline point (all events within 1 µs): peak 550 with 3 blocks,
    // reached by stack A; 6 allocations of 1120 bytes, 4 known frees of
    // 100+200+70+300 = 670 bytes.
    let mt = &j["timeline"]["memoryTimeline"];
    assert_eq!(u(&mt["start"]), malt_common::T);
    assert_eq!(mt["values"], serde_json::json!([[550, 0, 0, 0, 3]]));
    assert_eq!(mt["callsite"], serde_json::json!(["0x1"]));
    assert_eq!(
        j["timeline"]["memoryBandwidth"]["values"],
        serde_json::json!([[6, 1120, 4, 670]])
    );
    let t = &j["threads"][0];
    assert_eq!(u(&t["cntMemOps"]), 11);
    assert_eq!(
        [
            u(&t["stats"]["malloc"]["count"]),
            u(&t["stats"]["malloc"]["sum"])
        ],
        [5, 720]
    );
    assert_eq!(
        [
            u(&t["stats"]["realloc"]["count"]),
            u(&t["stats"]["realloc"]["sum"])
        ],
        [1, 400]
    );
    assert_eq!(
        [
            u(&t["stats"]["free"]["count"]),
            u(&t["stats"]["free"]["sum"])
        ],
        [5, 670]
    );
    assert_eq!(
        j["memStats"]["sizeMap"],
        serde_json::json!({"50": 1, "70": 1, "100": 1, "200": 1, "300": 1, "400": 1})
    );
    assert_eq!(
        j["memStats"]["reallocJump"],
        serde_json::json!([{"oldSize": 300, "newSize": 400, "count": 1}])
    );
    assert_eq!(
        j["leaks"],
        serde_json::json!([
            {"stack": ["0x1010", "0x2020", "0x3030"], "count": 1, "memory": 400},
            {"stack": ["0x1050", "0x3030"], "count": 1, "memory": 50}
        ])
    );
    assert_eq!(u(&j["domains"]["counters"]["c"]), 6);
    assert_eq!(u(&j["domains"]["mem"]["c"]), 1120);
    assert_eq!(u(&j["domains"]["atGlobalPeak"]["c"]), 550);
    assert_eq!(u(&j["globals"]["maxThreadCount"]), 1);
}

/// trace → MALT → read back: the same per-stack counts and sums.
#[test]
fn round_trip_keeps_per_stack_figures() {
    let bytes = write_with(malt::Writer::new, &records());
    let p = malt::from_slice(&bytes).unwrap();
    assert_eq!(p.summary.allocations, 6);
    assert_eq!(p.summary.bytes_allocated, 1120);
    assert_eq!(p.summary.frees, 4);
    assert_eq!(p.summary.bytes_freed, 670);
    assert_eq!(p.summary.peak_bytes, 550);
    assert_eq!((p.summary.leaked_blocks, p.summary.leaked_bytes), (2, 450));
    assert_eq!(p.summary.reallocs, 1);
    let (agg, stacks) = replay(p.records);
    let by_frames: HashMap<Vec<u64>, u64> = stacks
        .iter()
        .map(|r| match r {
            Record::Stack(s) => (s.frames.iter().map(|f| f.address).collect(), s.id),
            _ => unreachable!(),
        })
        .collect();
    let st: HashMap<u64, _> = agg.stack_stats().into_iter().collect();
    let a = st[&by_frames[&vec![0x1010, 0x2020, 0x3030]]];
    assert_eq!(
        (a.alloc.count, a.alloc.sum, a.alloc.min, a.alloc.max),
        (4, 1000, 100, 400)
    );
    assert_eq!((a.free.count, a.free.sum), (3, 600));
    assert_eq!((a.alive_blocks, a.alive_bytes), (1, 400));
    let b = st[&by_frames[&vec![0x1050, 0x3030]]];
    assert_eq!((b.alloc.count, b.alloc.sum), (2, 120));
    assert_eq!((b.free.count, b.free.sum), (1, 70));
    assert_eq!((b.alive_blocks, b.alive_bytes), (1, 50));
    // Mean lifetimes survive: A 120/3 = 40 ns, B 10 ns.
    assert_eq!(a.lifetime.sum / a.lifetime.count, 40);
    assert_eq!(b.lifetime.sum, 10);
    // Symbols come back folded into the frames.
    let Record::Stack(sa) = &stacks[0] else {
        unreachable!()
    };
    assert_eq!(sa.frames[1].symbol.as_ref().unwrap().function, "mid");
    // Writing the replay again gives the same per-stack figures.
    let again = write_with(malt::Writer::new, &{
        let p = malt::from_slice(&bytes).unwrap();
        p.records.map(Result::unwrap).collect::<Vec<_>>()
    });
    let j: Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(
        mms(&j["stacks"]["stats"][0]["infos"]["alloc"]),
        [4, 100, 400, 1000]
    );
    assert_eq!(j["leaks"][0]["memory"], 400);
}

#[test]
fn corrupt_input_is_one_error_with_an_offset() {
    let good = std::fs::read(SAMPLE).unwrap();
    // Not MALT at all.
    let e = malt::from_slice(b"PROC....").err().unwrap();
    assert_eq!(e.offset(), 0);
    // Truncated in the middle.
    let cut = &good[..good.len() / 2];
    match malt::from_slice(cut).err().unwrap() {
        FormatError::Truncated { offset, .. } => assert_eq!(offset, cut.len() as u64),
        other => panic!("{other}"),
    }
    // An integer where an address string belongs: the offset points into
    // the first stack array.
    let text = String::from_utf8(good.clone()).unwrap();
    let at = text.find("\"0x5644c11e1454\"").unwrap();
    let bad = text.replacen("\"0x5644c11e1454\"", "94844029113428", 1);
    let e = malt::from_slice(bad.as_bytes()).err().unwrap();
    assert!(matches!(e, FormatError::Invalid { .. }), "{e}");
    assert!(
        e.offset() >= at as u64 && e.offset() <= at as u64 + 16,
        "{e} vs {at}"
    );
    assert!(e.to_string().contains("hex address"), "{e}");
    // A required section missing.
    let bad = text.replacen("\"globals\"", "\"globalz\"", 1);
    let e = malt::from_slice(bad.as_bytes()).err().unwrap();
    assert!(e.to_string().contains("globals"), "{e}");
    // Counts no replay can reproduce are refused, not replayed for years.
    // (the first "count":1 of the stacks is stack 0x7f8411642330's free count,
    // the next one stack 0x7f8411642270's alloc count)
    let stacks_at = text.find("\"stacks\"").unwrap();
    let first = stacks_at + text[stacks_at..].find("\"count\":1,").unwrap();
    let second = first + 1 + text[first + 1..].find("\"count\":1,").unwrap();
    let bad = format!(
        "{}\"count\":100000000000000,{}",
        &text[..second],
        &text[second + 10..]
    );
    let e = malt::from_slice(bad.as_bytes()).err().unwrap();
    assert_eq!(e.offset(), stacks_at as u64, "{e}");
}
