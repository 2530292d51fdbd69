//! mlyze: golden bytes from the document, round trips, a document-only reader,
//! the original recorder's sample, spool recovery.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use format_writers::mlyze::{self, Reader, Writer};
use format_writers::*;
use proptest::prelude::*;

// ---------------------------------------------------------------- helpers

fn write_all(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

fn read_all(bytes: &[u8]) -> Vec<Record> {
    Reader::new(bytes)
        .collect::<Result<Vec<_>>>()
        .unwrap_or_else(|e| panic!("read failed: {e}"))
}

/// The error reading `bytes` ends with (the test fails if it reads whole).
fn read_error(bytes: &[u8]) -> String {
    match Reader::new(bytes).collect::<Result<Vec<_>>>() {
        Ok(records) => panic!("read {} records without an error", records.len()),
        Err(e) => e.to_string(),
    }
}

fn meta_len(file: &[u8]) -> usize {
    u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize
}

/// The event stream: everything after the header and the metadata.
fn events_part(file: &[u8]) -> &[u8] {
    &file[256 + meta_len(file)..]
}

fn alloc(time_ns: u64, thread: u32, address: u64, size: u64, stack: u64) -> Record {
    Record::Event(Event::Alloc(Alloc {
        time_ns,
        thread,
        address,
        size,
        stack,
    }))
}

fn free(time_ns: u64, thread: u32, address: u64) -> Record {
    Record::Event(Event::Free(Free {
        time_ns,
        thread,
        address,
    }))
}

fn sym(function: &str, file: &str, line: u32) -> Option<Symbol> {
    Some(Symbol {
        function: function.into(),
        file: file.into(),
        line,
    })
}

fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mlyze-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A new output file and its spool (readable and writable) in `dir`, named
/// after `tag`: their paths and files.
fn out_and_spool(dir: &Path, tag: &str) -> (PathBuf, std::fs::File, PathBuf, std::fs::File) {
    let out_path = dir.join(format!("out-{tag}.mlyze"));
    let spool_path = dir.join(format!("out-{tag}.spool"));
    let out = std::fs::File::create_new(&out_path).unwrap();
    let spool = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&spool_path)
        .unwrap();
    (out_path, out, spool_path, spool)
}

// ---------------------------------------------------------------- 1. golden bytes

#[test]
fn golden_header() {
    // Process start 0x0001020304050607 µs (+999 ns that µs cannot hold); no events,
    // so the header's start is the process start.
    let file = write_all(&[Record::Process(Process {
        pid: 7,
        start_time_ns: 0x0001_0203_0405_0607 * 1000 + 999,
        ..Process::default()
    })]);
    // "| 0 | 4 | char[] | Magic bytes: "MTRC" |"
    assert_eq!(&file[0..4], b"MTRC");
    // "| 4 | 4 | uint32 | Format version (1) |", little-endian ("Cross-platform")
    assert_eq!(&file[4..8], &[1, 0, 0, 0]);
    // "| 8 | 8 | uint64 | Start timestamp (microseconds) |"
    assert_eq!(&file[8..16], &[7, 6, 5, 4, 3, 2, 1, 0]);
    // "| 16 | 4 | uint32 | Metadata length in bytes |": the JSON runs to the end
    // (no events), so the length is everything after the 256-byte header.
    let len = file.len() - 256;
    assert_eq!(&file[16..20], &(len as u32).to_le_bytes());
    // "| 20 | 236 | - | Reserved (padding) |"
    assert!(file[20..256].iter().all(|&b| b == 0));
    // "Immediately follows the header": JSON object with the three documented keys.
    let v: serde_json::Value = serde_json::from_slice(&file[256..]).unwrap();
    for key in ["stack_traces", "files", "functions"] {
        assert!(v[key].is_object(), "{key}");
    }
}

#[test]
fn golden_events() {
    let t0 = 1_000_000_000u64; // µs; the first event defines the start (no Process)
    let ns = |us: u64| us * 1000;
    let records = vec![
        // ALLOC at the start: delta 0; addr 0x1000; size 128; stack 1; first thread → slot 0.
        alloc(ns(t0), 4242, 0x1000, 128, 1),
        // ALLOC 127 µs later, size 127, stack 2^32-1, second thread → slot 1.
        alloc(
            ns(t0 + 127),
            77,
            0x1122_3344_5566_7788,
            127,
            u32::MAX as u64,
        ),
        // FREE 128 µs later.
        free(ns(t0 + 255), 4242, 0x1000),
        // GC 16384 µs later: 0 objects, 2^64-1 bytes.
        Record::Event(Event::Gc(Gc {
            time_ns: ns(t0 + 255 + 16_384),
            objects: 0,
            bytes: u64::MAX,
        })),
        // MARKER 1 µs later; "phase" is the first name put in "functions" → id 0.
        Record::Event(Event::Marker(Marker {
            time_ns: ns(t0 + 255 + 16_384 + 1),
            thread: 4242,
            name: "phase".into(),
        })),
        // ALLOC of 2^64-1 bytes, stack 0, same time (delta 0), first thread again → slot 0.
        alloc(ns(t0 + 255 + 16_384 + 1), 4242, 0, u64::MAX, 0),
    ];
    let file = write_all(&records);
    // Header start timestamp = t0 µs.
    assert_eq!(&file[8..16], &t0.to_le_bytes());
    #[rustfmt::skip]
    let expected: Vec<u8> = vec![
        // ALLOC: "Type: uint8 = 0", "Delta: varint" (0 → 0x00), "Address: uint64" LE,
        // "Size: varint" (128 → 0x80 0x01, the document's example), "Stack ID: varint" 1,
        // "Thread: uint16" slot 0.
        0x00, 0x00, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x80, 0x01, 0x01, 0x00, 0x00,
        // ALLOC: delta 127 → 0x7f (document example), address LE, size 127 → 0x7f,
        // stack 2^32-1 → ff ff ff ff 0f, slot 1.
        0x00, 0x7f, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x7f,
        0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x00,
        // FREE: "Type: uint8 = 1", delta 128 → 0x80 0x01, address 0x1000.
        0x01, 0x80, 0x01, 0x00, 0x10, 0, 0, 0, 0, 0, 0,
        // GC: "Type: uint8 = 2", delta 16384 → 0x80 0x80 0x01 (document example),
        // objects 0 → 0x00, bytes 2^64-1 → nine 0xff then 0x01.
        0x02, 0x80, 0x80, 0x01, 0x00,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        // MARKER: "Type: uint8 = 3", delta 1, "Name ID: varint" 0.
        0x03, 0x01, 0x00,
        // ALLOC: delta 0, address 0, size 2^64-1, stack 0, slot 0.
        0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00, 0x00,
    ];
    assert_eq!(events_part(&file), &expected[..]);
    let v: serde_json::Value = serde_json::from_slice(&file[256..256 + meta_len(&file)]).unwrap();
    assert_eq!(v["functions"]["0"], "phase");
    // The slot map: slot 0 = tid 4242 from event 0, slot 1 = tid 77 from event 1.
    assert_eq!(
        v["libtracer"]["thread_slots"],
        serde_json::json!([[0, 0, 4242], [1, 1, 77]])
    );
    assert_eq!(v["libtracer"]["marker_threads"], serde_json::json!([4242]));
}

#[test]
fn golden_stack_metadata() {
    // frames[0] innermost in the model; the file lists the outermost first, like
    // the document's example ("main" before "process_data").
    let stack = Stack {
        id: 3,
        frames: vec![
            Frame {
                address: 0x401010,
                symbol: sym("process_data", "/path/to/other.py", 123),
            },
            Frame {
                address: 0x400500,
                symbol: sym("main", "/path/to/file.py", 42),
            },
            Frame {
                address: 0x7f00_0000_1234,
                symbol: None,
            },
        ],
    };
    let file = write_all(&[Record::Stack(stack)]);
    let v: serde_json::Value = serde_json::from_slice(&file[256..]).unwrap();
    // Ids are assigned as frames arrive (innermost first); the unresolved frame
    // gets function "??" and file "" (ids 2). Listed outermost first.
    assert_eq!(
        v["functions"],
        serde_json::json!({"0": "process_data", "1": "main", "2": "??"})
    );
    assert_eq!(
        v["files"],
        serde_json::json!({"0": "/path/to/other.py", "1": "/path/to/file.py", "2": ""})
    );
    assert_eq!(
        v["stack_traces"]["3"],
        serde_json::json!([
            {"file_id": 2, "line": 0, "func_id": 2},
            {"file_id": 1, "line": 42, "func_id": 1},
            {"file_id": 0, "line": 123, "func_id": 0},
        ])
    );
    assert_eq!(v["libtracer"]["unresolved_function"], 2);
    assert_eq!(
        v["libtracer"]["stack_addresses_delta"],
        serde_json::json!([[3, 0, 0x7f00_0000_1234u64, 0x400500, 0x401010]])
    );
}

fn stack_at(id: u64, innermost_first: &[u64]) -> Record {
    Record::Stack(Stack {
        id,
        frames: innermost_first
            .iter()
            .map(|&address| Frame {
                address,
                symbol: None,
            })
            .collect(),
    })
}

/// `libtracer.stack_addresses_delta`: each stack's addresses outermost
/// first, after the number of them it shares with the element before it.
/// The text is derived by hand from the decisions in docs/formats/mlyze.md.
#[test]
fn golden_stack_addresses_delta() {
    let records = [
        // Outermost first: 0x7f0000001234, 0x400500, 0x401010.
        stack_at(3, &[0x401010, 0x400500, 0x7f00_0000_1234]),
        // Its two outer addresses are stack 3's.
        stack_at(4, &[0x402000, 0x400500, 0x7f00_0000_1234]),
        // Nothing in common with stack 4.
        stack_at(7, &[0x400600]),
        // 0x400600 outermost, as stack 7's.
        stack_at(9, &[0x400700, 0x400600]),
        // No frames at all.
        stack_at(10, &[]),
    ];
    let file = write_all(&records);
    let meta = std::str::from_utf8(&file[256..256 + meta_len(&file)]).unwrap();
    let want = concat!(
        "\"stack_addresses_delta\":[",
        "[3,0,139637976732212,4195584,4198416],",
        "[4,2,4202496],",
        "[7,0,4195840],",
        "[9,1,4196096],",
        "[10,0]]"
    );
    assert!(meta.contains(want), "{meta}");
    assert!(!meta.contains("\"stack_addresses\""), "{meta}");
    // Read back: every stack with its own addresses.
    let got: Vec<Record> = read_all(&file)
        .into_iter()
        .filter(|r| matches!(r, Record::Stack(_)))
        .collect();
    assert_eq!(got, records);
}

/// Files written before `stack_addresses_delta` hold every address in
/// `libtracer.stack_addresses` (an object of arrays keyed by stack id): they
/// still read, and an element sharing more addresses than the one before it
/// has is an error at the metadata's offset.
#[test]
fn older_stack_addresses_still_read_and_a_bad_delta_is_located() {
    let records = [
        stack_at(3, &[0x401010, 0x400500]),
        stack_at(4, &[0x402000, 0x400500]),
    ];
    let file = write_all(&records);
    let with_meta = |from: &str, to: &str| {
        let len = meta_len(&file);
        let meta = std::str::from_utf8(&file[256..256 + len]).unwrap();
        assert!(meta.contains(from), "{meta}");
        let meta = meta.replace(from, to);
        let mut out = file[..256].to_vec();
        out[16..20].copy_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(meta.as_bytes());
        out.extend_from_slice(&file[256 + len..]);
        out
    };
    let delta = "\"stack_addresses_delta\":[[3,0,4195584,4198416],[4,1,4202496]]";
    let older = with_meta(
        delta,
        "\"stack_addresses\":{\"3\":[4195584,4198416],\"4\":[4195584,4202496]}",
    );
    let got: Vec<Record> = read_all(&older)
        .into_iter()
        .filter(|r| matches!(r, Record::Stack(_)))
        .collect();
    assert_eq!(got, records);

    let bad = with_meta(
        delta,
        "\"stack_addresses_delta\":[[3,0,4195584,4198416],[4,3,4202496]]",
    );
    let err = read_error(&bad);
    assert!(
        err.contains("stack 4 sharing 3 addresses with an element of 2"),
        "{err}"
    );
    // Located inside the element.
    let at = 256
        + std::str::from_utf8(&bad[256..])
            .unwrap()
            .find("[4,3,")
            .unwrap();
    let byte: usize = err
        .strip_prefix("byte ")
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {err}"));
    let end = at + "[4,3,4202496]".len();
    assert!((at..end).contains(&byte), "{err}: the element is at {at}");

    // As many addresses as frames, or none: stack 3 has two frames.
    let short = with_meta(
        delta,
        "\"stack_addresses_delta\":[[3,0,4195584],[4,1,4202496]]",
    );
    let err = read_error(&short);
    assert!(err.contains("stack 3's frame addresses"), "{err}");
    assert!(err.contains("1 addresses"), "{err}");
}

// ---------------------------------------------------------------- 3. document-only reader

/// What a program knowing only the document sees.
#[derive(Debug, Default)]
struct DocTrace {
    start_us: u64,
    /// stack id → [(file, line, function)], as listed.
    stacks: BTreeMap<u64, Vec<(String, u64, String)>>,
    /// (type, absolute µs, fields…)
    events: Vec<DocEvent>,
}

#[derive(Debug, PartialEq, Eq)]
enum DocEvent {
    Alloc {
        us: u64,
        addr: u64,
        size: u64,
        stack: u64,
        thread: u16,
    },
    Free {
        us: u64,
        addr: u64,
    },
    Gc {
        us: u64,
        objects: u64,
        bytes: u64,
    },
    Marker {
        us: u64,
        name: String,
    },
}

fn doc_read(file: &[u8]) -> DocTrace {
    // "Reading Algorithm": header, metadata, then events until the file ends.
    assert_eq!(&file[0..4], b"MTRC");
    assert_eq!(u32::from_le_bytes(file[4..8].try_into().unwrap()), 1);
    let start_us = u64::from_le_bytes(file[8..16].try_into().unwrap());
    let len = meta_len(file);
    let meta: serde_json::Value = serde_json::from_slice(&file[256..256 + len]).unwrap();
    let table = |k: &str| -> HashMap<String, String> {
        meta[k]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect()
    };
    let files = table("files");
    let functions = table("functions");
    let mut stacks = BTreeMap::new();
    for (id, frames) in meta["stack_traces"].as_object().unwrap() {
        let frames = frames
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let file = &files[&f["file_id"].as_u64().unwrap().to_string()];
                let func = &functions[&f["func_id"].as_u64().unwrap().to_string()];
                (file.clone(), f["line"].as_u64().unwrap(), func.clone())
            })
            .collect();
        stacks.insert(id.parse().unwrap(), frames);
    }
    let mut p = 256 + len;
    let varint = |p: &mut usize| {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = file[*p];
            *p += 1;
            v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return v;
            }
        }
    };
    let u64le = |p: &mut usize| {
        let v = u64::from_le_bytes(file[*p..*p + 8].try_into().unwrap());
        *p += 8;
        v
    };
    let mut us = start_us;
    let mut events = Vec::new();
    while p < file.len() {
        let ty = file[p];
        p += 1;
        us += varint(&mut p);
        events.push(match ty {
            0 => {
                let addr = u64le(&mut p);
                let size = varint(&mut p);
                let stack = varint(&mut p);
                let thread = u16::from_le_bytes([file[p], file[p + 1]]);
                p += 2;
                DocEvent::Alloc {
                    us,
                    addr,
                    size,
                    stack,
                    thread,
                }
            }
            1 => DocEvent::Free {
                us,
                addr: u64le(&mut p),
            },
            2 => {
                let objects = varint(&mut p);
                let bytes = varint(&mut p);
                DocEvent::Gc { us, objects, bytes }
            }
            3 => DocEvent::Marker {
                us,
                name: functions[&varint(&mut p).to_string()].clone(),
            },
            t => panic!("document reader: unknown event type {t}"),
        });
    }
    DocTrace {
        start_us,
        stacks,
        events,
    }
}

#[test]
fn document_only_reader_sees_the_documented_fields() {
    let records = vec![
        Record::Process(Process {
            pid: 99,
            executable: "/bin/app".into(),
            command_line: vec!["app".into(), "-x".into()],
            start_time_ns: 5_000_000_000,
        }),
        Record::Stack(Stack {
            id: 10,
            frames: vec![
                Frame {
                    address: 0x1234,
                    symbol: sym("leaf", "a.c", 10),
                },
                Frame {
                    address: 0x5678,
                    symbol: sym("main", "main.c", 3),
                },
            ],
        }),
        Record::Stack(Stack {
            id: 11,
            frames: vec![Frame {
                address: 0x9999,
                symbol: None,
            }],
        }),
        alloc(5_000_010_000, 100_000, 0xdead0, 24, 10),
        alloc(5_000_020_500, 100_001, 0xbeef0, 300, 11),
        free(5_000_030_000, 100_000, 0xdead0),
        Record::Event(Event::Gc(Gc {
            time_ns: 5_000_040_000,
            objects: 3,
            bytes: 96,
        })),
        Record::Event(Event::Marker(Marker {
            time_ns: 5_000_050_000,
            thread: 100_001,
            name: "checkpoint".into(),
        })),
    ];
    let doc = doc_read(&write_all(&records));
    assert_eq!(doc.start_us, 5_000_000);
    assert_eq!(
        doc.stacks[&10],
        vec![
            ("main.c".to_string(), 3, "main".to_string()),
            ("a.c".to_string(), 10, "leaf".to_string())
        ]
    );
    assert_eq!(doc.stacks[&11], vec![(String::new(), 0, "??".to_string())]);
    assert_eq!(
        doc.events,
        vec![
            DocEvent::Alloc {
                us: 5_000_010,
                addr: 0xdead0,
                size: 24,
                stack: 10,
                thread: 0
            },
            DocEvent::Alloc {
                us: 5_000_020,
                addr: 0xbeef0,
                size: 300,
                stack: 11,
                thread: 1
            },
            DocEvent::Free {
                us: 5_000_030,
                addr: 0xdead0
            },
            DocEvent::Gc {
                us: 5_000_040,
                objects: 3,
                bytes: 96
            },
            DocEvent::Marker {
                us: 5_000_050,
                name: "checkpoint".into()
            },
        ]
    );
}

// ---------------------------------------------------------------- 4. the original recorder's sample

fn sample() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/memlyze-leak.mlyze");
    std::fs::read(path).unwrap()
}

#[test]
fn original_sample_reads_completely() {
    let bytes = sample();
    assert_eq!(bytes.len(), 497);
    let records = read_all(&bytes);
    // Header (xxd line 0): start = 61 c9 bf e4 d1 60 06 00 LE = 0x000660d1e4bfc961 µs.
    let start_us = 0x0006_60d1_e4bf_c961u64;
    assert_eq!(start_us, 1_795_304_462_469_473);
    assert_eq!(
        records[0],
        Record::Process(Process {
            start_time_ns: start_us * 1000,
            ..Process::default()
        })
    );
    let events: Vec<&Event> = records
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    // Events from 0x132 to the end (0x1f1): 17-byte ALLOCs at 0x132, 0x143, 0x154,
    // 0x165, 0x182, 0x193, 0x1a4 (size varint 98 01 = 2 bytes), 16-byte ALLOCs at
    // 0x1b5, 0x1c5, 0x1e1 (one-byte sizes 48, 40, 38), 12-byte FREEs at 0x176, 0x1d5.
    assert_eq!(count(|e| matches!(e, Event::Alloc(_))), 10);
    assert_eq!(count(|e| matches!(e, Event::Free(_))), 2);
    assert_eq!(events.len(), 12);
    // Every delta is 95 e0 7d = 0x15 + 0x60<<7 + 0x7d<<14 = 2,060,309 µs.
    let delta = 0x15 + (0x60 << 7) + (0x7d << 14);
    assert_eq!(delta, 2_060_309u64);
    // First event at 0x132: 00 | 95 e0 7d | 00×8 | bb 37 | 00 | 80 3b:
    // size 0x3b + 0x37<<7 = 7099, stack 0, thread 0x3b80 = 15232 (no slot map: raw).
    assert_eq!(
        *events[0],
        Event::Alloc(Alloc {
            time_ns: (start_us + delta) * 1000,
            thread: 0x3b80,
            address: 0,
            size: 7099,
            stack: 0,
        })
    );
    // Fifth event at 0x176: 01 | 95 e0 7d | 00×8 — a FREE of address 0.
    assert_eq!(
        *events[4],
        Event::Free(Free {
            time_ns: (start_us + 5 * delta) * 1000,
            thread: 0,
            address: 0,
        })
    );
    // Last event at 0x1e1: 00 | 95 e0 7d | 00×8 | 38 | 09 | 80 3b: 56 bytes, stack 9.
    assert_eq!(
        *events[11],
        Event::Alloc(Alloc {
            time_ns: (start_us + 12 * delta) * 1000,
            thread: 15232,
            address: 0,
            size: 56,
            stack: 9,
        })
    );
    // Stack ids 0..=9 are referenced but the metadata is empty: each gets an empty
    // stack record right before its first use.
    let stacks: Vec<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Stack(s) => {
                assert!(s.frames.is_empty());
                Some(s.id)
            }
            _ => None,
        })
        .collect();
    assert_eq!(stacks, (0..10).collect::<Vec<_>>());
    // The document-only reader agrees on the events.
    assert_eq!(doc_read(&bytes).events.len(), 12);
}

#[test]
fn open_detects_and_reads_the_sample() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/memlyze-leak.mlyze");
    let (format, reader) = open(&path).unwrap();
    assert_eq!(format, Format::Mlyze);
    assert_eq!(
        reader.filter(|r| matches!(r, Ok(Record::Event(_)))).count(),
        12
    );
}

// ---------------------------------------------------------------- errors

#[test]
fn errors_name_offsets() {
    let bytes = sample();
    let err = |b: &[u8]| Reader::new(b).find_map(|r| r.err()).expect("an error");
    // Truncated inside the last ALLOC (starts at 0x1e1, its thread at 0x1ef).
    let e = err(&bytes[..0x1f0]);
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    assert_eq!(
        e.offset(),
        0x1f0,
        "where the file ends, inside the thread field"
    );
    assert!(e.to_string().contains("thread of an ALLOC"), "{e}");
    // Unknown event type 7 at the second event (0x143).
    let mut b = bytes.clone();
    b[0x143] = 7;
    let e = err(&b);
    assert_eq!(e.offset(), 0x143);
    assert!(e.to_string().contains("type 7"), "{e}");
    // Bad magic, bad version.
    let mut b = bytes.clone();
    b[0] = b'X';
    assert_eq!(err(&b).offset(), 0);
    let mut b = bytes.clone();
    b[4] = 2;
    assert_eq!(err(&b).offset(), 4);
    // Metadata length beyond the file: truncated at the end of the file.
    let mut b = bytes.clone();
    b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = err(&b);
    assert_eq!(e.offset(), 497);
    // JSON error: the comma after "{}" at metadata byte 19 becomes 'x' → offset 256 + 19.
    let mut b = bytes.clone();
    assert_eq!(b[256 + 19], b',');
    b[256 + 19] = b'x';
    assert_eq!(err(&b).offset(), 256 + 19);
    // An 11-byte varint in the first delta (event at 0x132, delta at 0x133).
    let mut b = bytes[..0x133].to_vec();
    b.extend_from_slice(&[0xff; 11]);
    b.extend_from_slice(&[0; 20]);
    let e = err(&b);
    assert_eq!(e.offset(), 0x133);
}

#[test]
fn dangling_frame_ids_are_rejected() {
    let meta = br#"{"stack_traces":{"0":[{"file_id":0,"line":1,"func_id":5}]},"files":{"0":"a"},"functions":{}}"#;
    let mut file = vec![0u8; 256];
    file[0..4].copy_from_slice(b"MTRC");
    file[4] = 1;
    file[16..20].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    file.extend_from_slice(meta);
    let e = Reader::new(&file[..]).find_map(|r| r.err()).unwrap();
    assert!(e.to_string().contains("func_id 5"), "{e}");
}

// ---------------------------------------------------------------- 2. round trips

/// What reading back must give, by the rules of docs/formats/mlyze.md: metadata
/// records first (process, info, objects, threads, stacks by id, address
/// symbols), then events with µs times clamped to never run backwards, FREE
/// threads lost (0), syscalls dropped, late symbols filled into unresolved frames.
fn expected(input: &[Record]) -> Vec<Record> {
    let mut process = None;
    let mut info = Vec::new();
    let mut objects = Vec::new();
    let mut threads = Vec::new();
    let mut stacks: BTreeMap<u64, Vec<Frame>> = BTreeMap::new();
    let mut late = Vec::new();
    let mut events = Vec::new();
    // Leak scan records, each with the number of events before it: they come
    // back at the same place in the event stream.
    let mut scan_records: Vec<(usize, Record)> = Vec::new();
    for r in input {
        match r {
            Record::LeakScan { .. } | Record::BlockClass { .. } => {
                scan_records.push((events.len(), r.clone()))
            }
            Record::Process(p) => process = Some(p.clone()),
            Record::Info(p) => info.extend(p.iter().cloned()),
            Record::Object(o) => objects.push(Record::Object(o.clone())),
            Record::Thread(t) => threads.push(Record::Thread(t.clone())),
            Record::Stack(s) => {
                stacks.insert(s.id, s.frames.clone());
            }
            Record::AddressSymbol { address, symbol } => late.push((*address, symbol.clone())),
            Record::Event(Event::Syscall(_)) => {}
            Record::Event(e) => events.push(e.clone()),
        }
    }
    let mut out = Vec::new();
    if let Some(p) = &process {
        out.push(Record::Process(p.clone()));
    }
    if !info.is_empty() {
        out.push(Record::Info(info));
    }
    out.extend(objects);
    out.extend(threads);
    let by_addr: HashMap<u64, Symbol> = late.iter().cloned().collect();
    for (id, mut frames) in stacks.clone() {
        for f in &mut frames {
            if f.symbol.is_none() {
                f.symbol = by_addr.get(&f.address).cloned();
            }
        }
        out.push(Record::Stack(Stack { id, frames }));
    }
    for (address, symbol) in late {
        out.push(Record::AddressSymbol { address, symbol });
    }
    let first_us = events.first().and_then(|e| e.time_ns()).map(|t| t / 1000);
    let mut last_us = match (&process, first_us) {
        (Some(p), Some(f)) if p.start_time_ns != 0 => (p.start_time_ns / 1000).min(f),
        (_, Some(f)) => f,
        _ => 0,
    };
    let mut seen: std::collections::HashSet<u64> = stacks.keys().copied().collect();
    let mut scan_records = scan_records.into_iter().peekable();
    for (i, mut e) in events.into_iter().enumerate() {
        while let Some((_, r)) = scan_records.next_if(|(at, _)| *at <= i) {
            out.push(r);
        }
        let us = e.time_ns().unwrap() / 1000;
        last_us = last_us.max(us);
        let t = last_us * 1000;
        match &mut e {
            Event::Alloc(a) => {
                a.time_ns = t;
                if seen.insert(a.stack) {
                    out.push(Record::Stack(Stack {
                        id: a.stack,
                        frames: Vec::new(),
                    }));
                }
            }
            Event::Free(f) => {
                f.time_ns = t;
                f.thread = 0;
            }
            Event::Gc(g) => g.time_ns = t,
            Event::Marker(m) => m.time_ns = t,
            Event::Syscall(_) => unreachable!(),
        }
        out.push(Record::Event(e));
    }
    out.extend(scan_records.map(|(_, r)| r));
    out
}

fn boundary_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(127),
        Just(128),
        Just(16_383),
        Just(16_384),
        Just(u32::MAX as u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>(),
        0u64..1000,
    ]
}

fn boundary_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(65_535),
        Just(65_536),
        Just(u32::MAX),
        any::<u32>(),
        1u32..5,
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        1 => Just("??".to_string()),
        1 => Just("\u{0}\u{1f}\"\\\n\t\u{7f}".to_string()),
        6 => "[a-z_:]{1,12}",
        3 => "\\PC{0,40}",
        1 => "[a-z]{2000,3000}",
    ]
}

fn symbol() -> impl Strategy<Value = Symbol> {
    (text(), text(), boundary_u32()).prop_map(|(function, file, line)| Symbol {
        function,
        file,
        line,
    })
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        prop_oneof![boundary_u64(), 0x1000u64..0x1010],
        prop::option::of(symbol()),
    )
        .prop_map(|(address, symbol)| Frame { address, symbol })
}

fn event(stack_ids: Vec<u64>) -> impl Strategy<Value = Record> {
    let stack = prop_oneof![
        4 => prop::sample::select(if stack_ids.is_empty() { vec![0] } else { stack_ids }),
        1 => boundary_u64(),
    ];
    let time = prop_oneof![
        boundary_u64(),
        1_700_000_000_000_000_000u64..1_700_000_000_100_000_000
    ];
    prop_oneof![
        (
            time.clone(),
            boundary_u32(),
            boundary_u64(),
            boundary_u64(),
            stack
        )
            .prop_map(|(t, th, a, s, st)| alloc(t, th, a, s, st)),
        (time.clone(), boundary_u32(), boundary_u64()).prop_map(|(t, th, a)| free(t, th, a)),
        (time.clone(), boundary_u64(), boundary_u64()).prop_map(|(time_ns, objects, bytes)| {
            Record::Event(Event::Gc(Gc {
                time_ns,
                objects,
                bytes,
            }))
        }),
        (time.clone(), boundary_u32(), text()).prop_map(|(time_ns, thread, name)| {
            Record::Event(Event::Marker(Marker {
                time_ns,
                thread,
                name,
            }))
        }),
        time.prop_map(|t| Record::Event(Event::Syscall(Syscall {
            number: 1,
            time_ns: Some(t),
            ..Syscall::default()
        }))),
    ]
}

/// A leak scan and its block classes, and where among the events it goes.
fn leak_scan() -> impl Strategy<Value = (prop::sample::Index, Vec<Record>)> {
    (
        any::<prop::sample::Index>(),
        boundary_u64(),
        prop::collection::vec((boundary_u64(), 0u64..4), 0..8),
    )
        .prop_map(|(at, time_ns, blocks)| {
            let mut v = vec![Record::LeakScan { time_ns }];
            v.extend(blocks.into_iter().map(|(address, k)| Record::BlockClass {
                address,
                kind: LeakKind::from_code(k).unwrap(),
            }));
            (at, v)
        })
}

fn trace() -> impl Strategy<Value = Vec<Record>> {
    let process = prop::option::of(
        (
            boundary_u32(),
            text(),
            prop::collection::vec(text(), 0..4),
            boundary_u64(),
        )
            .prop_map(|(pid, executable, command_line, start_time_ns)| {
                Record::Process(Process {
                    pid,
                    executable,
                    command_line,
                    start_time_ns,
                })
            }),
    );
    let stacks = prop::collection::btree_map(
        boundary_u64(),
        prop_oneof![
            4 => prop::collection::vec(frame(), 0..6),
            1 => prop::collection::vec(frame(), 100..300),
        ],
        0..6,
    );
    let meta = (
        process,
        prop::collection::vec(
            (text(), boundary_u64(), boundary_u64()).prop_map(|(path, load_address, size)| {
                Record::Object(Object {
                    path,
                    load_address,
                    size,
                })
            }),
            0..3,
        ),
        prop::collection::vec(
            (boundary_u32(), text()).prop_map(|(tid, name)| Record::Thread(Thread { tid, name })),
            0..3,
        ),
        prop::collection::vec((text(), text()), 0..3),
        prop::collection::vec(
            (0x1000u64..0x1010, symbol())
                .prop_map(|(address, symbol)| Record::AddressSymbol { address, symbol }),
            0..4,
        ),
        stacks,
    );
    meta.prop_flat_map(|(process, objects, threads, info, late, stacks)| {
        let ids: Vec<u64> = stacks.keys().copied().collect();
        let mut head: Vec<Record> = process.into_iter().collect();
        head.extend(objects);
        head.extend(threads);
        if !info.is_empty() {
            head.push(Record::Info(info));
        }
        for (id, frames) in stacks {
            head.push(Record::Stack(Stack { id, frames }));
        }
        (
            Just(head),
            prop::collection::vec(event(ids), 0..60),
            Just(late),
            prop::option::of(leak_scan()),
        )
            .prop_map(|(mut head, mut events, late, scan)| {
                if let Some((at, scan)) = scan {
                    let at = at.index(events.len() + 1);
                    events.splice(at..at, scan);
                }
                head.extend(events);
                head.extend(late);
                head
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(input in trace()) {
        let file = write_all(&input);
        let got = read_all(&file);
        prop_assert_eq!(got, expected(&input));
        // The document-only reader reads the same number of events.
        let n = input.iter().filter(|r| matches!(r, Record::Event(e) if !matches!(e, Event::Syscall(_)))).count();
        prop_assert_eq!(doc_read(&file).events.len(), n);
    }

    #[test]
    fn one_byte_reads_match_buffered_reads(input in trace()) {
        let file = write_all(&input);
        let slow: Vec<Record> = Reader::new(OneByte(&file)).collect::<Result<_>>().unwrap();
        prop_assert_eq!(slow, read_all(&file));
    }
}

proptest! {
    // Touches the disk: fewer cases.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The three ways to a file agree byte for byte: in memory, `finish` through
    /// a spool, and recovery of a spool flushed at arbitrary points.
    #[test]
    fn spool_finish_and_recovery_match_the_in_memory_writer(
        input in trace(),
        flush_every in 1usize..20,
    ) {
        let reference = write_all(&input);
        let dir = scratch_dir(&format!("prop-{}", flush_every));
        for kill in [false, true] {
            let (mut w, path) = Writer::create(&dir.join("p")).unwrap();
            let spool = w.spool_path().unwrap().to_path_buf();
            for (i, r) in input.iter().enumerate() {
                w.write(r).unwrap();
                if i % flush_every == 0 {
                    w.flush().unwrap();
                }
            }
            if kill {
                w.flush().unwrap();
                drop(w);
                let (p, stats) = mlyze::recover(&spool).unwrap();
                prop_assert_eq!(&p, &path);
                prop_assert_eq!(stats.torn_tail_bytes, 0);
            } else {
                Box::new(w).finish().unwrap();
            }
            prop_assert_eq!(std::fs::read(&path).unwrap(), reference.clone());
            std::fs::remove_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

}

/// A reader that returns one byte per call, forcing the cross-buffer path.
struct OneByte<'a>(&'a [u8]);

impl Read for OneByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() || buf.is_empty() {
            return Ok(0);
        }
        buf[0] = self.0[0];
        self.0 = &self.0[1..];
        Ok(1)
    }
}

#[test]
fn more_than_65536_threads_stay_distinct() {
    // 70,000 distinct tids, then the first 10 again (their slots were reused by
    // tids 65,536.. in between), then a tid above 16 bits.
    let mut input = vec![Record::Stack(Stack::default())];
    let mut t = 1_000_000u64;
    let mut tids: Vec<u32> = (0..70_000u32).map(|i| 100_000 + i).collect();
    tids.extend((0..10u32).map(|i| 100_000 + i));
    tids.push(4_000_000);
    tids.push(100_000 + 69_999);
    for &tid in &tids {
        t += 1000;
        input.push(alloc(t, tid, u64::from(tid), 1, 0));
    }
    let file = write_all(&input);
    let got: Vec<u32> = read_all(&file)
        .into_iter()
        .filter_map(|r| match r {
            Record::Event(Event::Alloc(a)) => {
                assert_eq!(a.address, u64::from(a.thread));
                Some(a.thread)
            }
            _ => None,
        })
        .collect();
    assert_eq!(got, tids);
}

#[test]
fn out_of_order_times_clamp_to_zero_deltas() {
    let file = write_all(&[
        alloc(10_000_000, 1, 1, 1, 0),
        alloc(9_000_000, 1, 2, 1, 0), // 1 ms earlier: delta 0, keeps 10 ms
        alloc(10_500_000, 1, 3, 1, 0),
    ]);
    let times: Vec<u64> = read_all(&file)
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) => e.time_ns(),
            _ => None,
        })
        .collect();
    assert_eq!(times, vec![10_000_000, 10_000_000, 10_500_000]);
    // deltas on the wire: 0, 0, 500 (→ f4 03); each ALLOC here is 1+1+8+1+1+2 = 14 bytes.
    let ev = events_part(&file);
    assert_eq!(ev.len(), 14 + 14 + 15);
    assert_eq!(ev[1], 0);
    assert_eq!(ev[15], 0);
    assert_eq!(&ev[28..31], &[0x00, 0xf4, 0x03]);
}

// ---------------------------------------------------------------- 6. spool and recovery

fn sample_records(n: usize, base: u64) -> Vec<Record> {
    let mut v = vec![Record::Stack(Stack {
        id: base,
        frames: vec![Frame {
            address: 0x4000 + base,
            symbol: if base & 1 == 0 {
                sym("f", "f.c", 1)
            } else {
                None
            },
        }],
    })];
    for i in 0..n as u64 {
        v.push(alloc(
            1_700_000_000_000_000_000 + (base * 1000 + i) * 1000,
            (base + i % 3) as u32,
            0x10_0000 + i * 16,
            i,
            base,
        ));
    }
    v
}

#[test]
fn killed_writer_leaves_a_recoverable_spool() {
    let dir = scratch_dir("kill");
    let (mut w, final_path) = Writer::create(&dir.join("run")).unwrap();
    assert_eq!(final_path, dir.join("run.mlyze"));
    let spool = w.spool_path().unwrap().to_path_buf();
    assert_eq!(spool, dir.join("run.mlyze.spool"));
    let mut flushed = vec![
        Record::Process(Process {
            pid: 1,
            executable: "/bin/x".into(),
            command_line: vec!["x".into()],
            start_time_ns: 1_700_000_000_000_000_000,
        }),
        Record::Thread(Thread {
            tid: 1,
            name: "main".into(),
        }),
        Record::Object(Object {
            path: "/lib/libc.so.6".into(),
            load_address: 0x7f00_0000_0000,
            size: 0x20_0000,
        }),
        Record::Info(vec![("kernel".into(), "6.1".into())]),
    ];
    flushed.extend(sample_records(1000, 0));
    flushed.extend(sample_records(10, 1));
    flushed.push(Record::AddressSymbol {
        address: 0x4001,
        symbol: Symbol {
            function: "late".into(),
            file: "l.c".into(),
            line: 9,
        },
    });
    flushed.push(Record::Event(Event::Marker(Marker {
        time_ns: 1_800_000_000_000_000_000,
        thread: 2,
        name: "m".into(),
    })));
    for r in &flushed {
        w.write(r).unwrap();
    }
    w.flush().unwrap();
    // Written after the last flush: lost with the process.
    for r in sample_records(5, 2) {
        w.write(&r).unwrap();
    }
    drop(w); // the process is killed: no finish

    assert_eq!(std::fs::metadata(&final_path).unwrap().len(), 0);
    let (path, stats) = mlyze::recover(&spool).unwrap();
    assert_eq!(
        path, final_path,
        "the reserved empty file is filled in place"
    );
    assert_eq!(stats.torn_tail_bytes, 0);
    let recovered = std::fs::read(&path).unwrap();
    assert_eq!(read_all(&recovered), expected(&flushed));
    // Byte-identical to what an in-memory writer produces from the flushed records.
    assert_eq!(recovered, write_all(&flushed));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn torn_last_chunk_is_dropped() {
    let dir = scratch_dir("torn");
    let (mut w, final_path) = Writer::create(&dir.join("t.mlyze")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    let first = sample_records(100, 4);
    for r in &first {
        w.write(r).unwrap();
    }
    w.flush().unwrap();
    let len_after_first = std::fs::metadata(&spool).unwrap().len();
    for r in sample_records(100, 6) {
        w.write(&r).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    // Cut the spool 7 bytes into the second flush's last chunk (a kill mid-write).
    let full = std::fs::read(&spool).unwrap();
    let cut = full.len() - 7;
    std::fs::write(&spool, &full[..cut]).unwrap();
    let (path, stats) = mlyze::recover(&spool).unwrap();
    assert_eq!(path, final_path);
    // The second flush wrote a log chunk then an events chunk; the events chunk is torn.
    assert!(stats.torn_tail_bytes > 0 && (cut as u64) > len_after_first);
    let got = read_all(&std::fs::read(&path).unwrap());
    let mut expect_in = first.clone();
    expect_in.extend(sample_records(0, 6)); // the second log chunk (its stack) survived
    assert_eq!(got, expected(&expect_in));
    // Recovering again cannot overwrite the now non-empty file: a new name.
    let (again, _) = mlyze::recover(&spool).unwrap();
    assert_eq!(again, dir.join("t.1.mlyze"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn finish_writes_the_same_bytes_as_the_in_memory_writer_and_removes_the_spool() {
    let dir = scratch_dir("finish");
    let (mut w, final_path) = Writer::create(&dir.join("f")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    let mut all = Vec::new();
    for k in 0..5u64 {
        // Enough events to cross the 1 MiB spill threshold once.
        let part = sample_records(if k == 2 { 90_000 } else { 100 }, k);
        for r in &part {
            w.write(r).unwrap();
        }
        w.flush().unwrap();
        all.extend(part);
    }
    Box::new(w).finish().unwrap();
    assert!(!spool.exists());
    let bytes = std::fs::read(&final_path).unwrap();
    assert_eq!(bytes, write_all(&all));
    assert_eq!(read_all(&bytes), expected(&all));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_caller_provided_spool_gives_the_same_file() {
    let mut all = Vec::new();
    for k in 0..3u64 {
        all.extend(sample_records(if k == 1 { 80_000 } else { 50 }, k));
    }
    let mut out = Vec::new();
    let spool = std::io::Cursor::new(Vec::new());
    let mut w = Writer::with_spool(&mut out, spool, None).unwrap();
    for (i, r) in all.iter().enumerate() {
        w.write(r).unwrap();
        if i % 1000 == 0 {
            w.flush().unwrap();
        }
    }
    w.finish().unwrap();
    assert_eq!(out, write_all(&all));
}

/// A spool that counts the reads of a spool chunk's 5-byte head.
struct HeadCounting {
    inner: std::io::Cursor<Vec<u8>>,
    heads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Read for HeadCounting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.len() == 5 {
            self.heads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.read(buf)
    }
}

impl std::io::Write for HeadCounting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for HeadCounting {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// `finish` takes the logged tables (stacks, objects...) back from the
/// spool's log chunks, which the writer knows: it reads them without
/// walking the event chunks between them (a read of each chunk's head and
/// a seek, three passes: ~35,000 system calls at cc1plus's exit), and the
/// file is the one written without a spool.
#[test]
fn finish_reads_the_log_chunks_without_walking_the_event_chunks() {
    let mut all = Vec::new();
    for k in 0..4u64 {
        all.extend(sample_records(if k % 2 == 1 { 60_000 } else { 50 }, k));
    }
    let heads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let spool = HeadCounting {
        inner: std::io::Cursor::new(Vec::new()),
        heads: heads.clone(),
    };
    let mut out = Vec::new();
    let mut w = Writer::with_spool(&mut out, spool, None).unwrap();
    for r in &all {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    assert_eq!(out, write_all(&all));
    assert_eq!(heads.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// A spool remover is called once, after a successful finish, in place of
/// deleting the path: the spool is left to the remover (whose caller checks
/// the path leads to it, or empties it), and a failed finish calls it not at all.
#[test]
fn a_spool_remover_takes_the_place_of_deleting_the_path() {
    let dir = std::env::temp_dir().join(format!("mlyze-remover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let records = sample_records(500, 3);
    for fail in [false, true] {
        let spool_path = dir.join(format!("t-{fail}.mlyze.spool"));
        let spool = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&spool_path)
            .unwrap();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = calls.clone();
        let out = Failing {
            inner: Vec::new(),
            fail,
        };
        let mut w = Writer::with_spool_file(out, spool, Some(spool_path.clone())).unwrap();
        w.set_spool_remover(Box::new(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        for r in &records {
            w.write(r).unwrap();
        }
        w.flush().unwrap();
        let result = w.finish();
        assert_eq!(result.is_err(), fail);
        let called = calls.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            called,
            u32::from(!fail),
            "remover calls, finish failing: {fail}"
        );
        assert!(spool_path.exists(), "the spool is the remover's to delete");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An output that fails every write when `fail` is set.
struct Failing {
    inner: Vec<u8>,
    fail: bool,
}

impl std::io::Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.fail {
            return Err(std::io::Error::other("disk full"));
        }
        self.inner.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The output and spool of the copier test, shared with the copier.
#[derive(Clone, Default)]
struct Shared<T>(std::sync::Arc<std::sync::Mutex<T>>);

impl std::io::Write for Shared<Vec<u8>> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Write for Shared<std::io::Cursor<Vec<u8>>> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Read for Shared<std::io::Cursor<Vec<u8>>> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().read(buf)
    }
}

impl std::io::Seek for Shared<std::io::Cursor<Vec<u8>>> {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.0.lock().unwrap().seek(pos)
    }
}

/// The preload's set-up: the file and its spool both written in aligned
/// blocks (`blocks::BlockFile`, small blocks here so that every chunk
/// straddles some), flushed now and then as the writer thread does. The
/// file is the same as the one written in memory, the spool holds every
/// flushed chunk at each flush (a killed process leaves them to
/// `recover`), and with a header patcher the length is filled in once, at
/// offset 16, without a later block write undoing it.
#[test]
fn a_file_and_spool_written_in_blocks_give_the_same_file() {
    use format_writers::blocks::BlockFile;
    use std::os::unix::fs::FileExt as _;
    let dir = scratch_dir("blocks");
    let mut all = Vec::new();
    for k in 0..4u64 {
        all.extend(sample_records(if k % 2 == 1 { 80_000 } else { 50 }, k));
    }
    let want = write_all(&all);
    for (patch, block) in [(false, 4096), (true, 4096), (true, 1 << 16)] {
        let tag = format!("{patch}-{block}");
        let (out_path, out, spool_path, spool) = out_and_spool(&dir, &tag);
        let patched = Shared::<Vec<(u64, Vec<u8>)>>::default();
        let at = out.try_clone().unwrap();
        let mut w = Writer::with_spool(
            BlockFile::with_block(out, 0, block),
            BlockFile::with_block(spool, 0, block),
            None,
        )
        .unwrap();
        if patch {
            let log = patched.clone();
            w.set_header_patcher(Box::new(move |off, bytes| {
                log.0.lock().unwrap().push((off, bytes.to_vec()));
                at.write_all_at(bytes, off)
            }));
        }
        for (i, r) in all.iter().enumerate() {
            w.write(r).unwrap();
            if i % 1000 == 999 {
                TraceWriter::flush(&mut w).unwrap();
                if i % 16_000 != 15_999 {
                    continue;
                }
                // What a kill now leaves: every event written so far.
                let copy = dir.join(format!("{tag}.copy.spool"));
                std::fs::copy(&spool_path, &copy).unwrap();
                let mut recovered = Vec::new();
                mlyze::recover_to(&copy, &mut recovered).unwrap();
                let events = read_all(&recovered)
                    .into_iter()
                    .filter(|r| matches!(r, Record::Event(_)))
                    .count();
                let written = all[..=i]
                    .iter()
                    .filter(|r| matches!(r, Record::Event(_)))
                    .count();
                assert_eq!(events, written, "{tag}: recovered after record {i}");
            }
        }
        w.finish().unwrap();
        let got = std::fs::read(&out_path).unwrap();
        assert!(
            got == want,
            "{tag}: {} bytes, {} expected",
            got.len(),
            want.len()
        );
        let patches = patched.0.lock().unwrap().clone();
        if patch {
            assert_eq!(patches, vec![(16, want[16..20].to_vec())], "{tag}");
            assert_ne!(want[16..20], [0, 0, 0, 0]);
        } else {
            assert!(patches.is_empty());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spooling writer keeps no tables during the run and rebuilds them from
/// the spool's log at `finish`: every kind of fact must come back exactly,
/// in both orders that matter (a stack set again keeps only its last frames;
/// ids are numbered in first-use order across stacks, late symbols and
/// marker names), whether the entries were spilled (several log chunks
/// between event chunks) or still pending at `finish`.
#[test]
fn spooled_finish_rebuilds_every_table_byte_for_byte() {
    let unresolved = |a: u64| Frame {
        address: a,
        symbol: None,
    };
    let resolved = |a: u64, f: &str, l: u32| Frame {
        address: a,
        symbol: sym(f, "src/r.c", l),
    };
    let mut all = vec![
        Record::Process(Process {
            pid: 42,
            executable: "/usr/bin/prog".into(),
            command_line: vec!["prog".into(), "-x".into()],
            start_time_ns: 1_700_000_000_000_000_000,
        }),
        Record::Object(Object {
            path: "/lib/libc.so.6".into(),
            load_address: 0x7f00_0000_0000,
            size: 0x20_0000,
        }),
        Record::Thread(Thread {
            tid: 42,
            name: "main".into(),
        }),
        Record::Info(vec![("kernel".into(), "6.1".into())]),
    ];
    // Ids out of order (the map path), then consecutive ones (the computed path).
    for id in [7u64, 3, 5] {
        all.push(Record::Stack(Stack {
            id,
            frames: vec![
                unresolved(0x1000 + id),
                unresolved(0x2000),
                unresolved(0x3000),
            ],
        }));
    }
    all.push(Record::Stack(Stack {
        id: 9,
        frames: vec![resolved(0x1009, "alloc_here", 12), unresolved(0x2000)],
    }));
    all.push(Record::Stack(Stack {
        id: 10,
        frames: vec![],
    }));
    // Stack 3 set again: first resolved, then unresolved frames again (last wins).
    all.push(Record::Stack(Stack {
        id: 3,
        frames: vec![resolved(0x1003, "again", 30)],
    }));
    all.push(Record::Stack(Stack {
        id: 5,
        frames: vec![resolved(0x1005, "five", 5), unresolved(0x3000)],
    }));
    all.push(Record::Stack(Stack {
        id: 5,
        frames: vec![unresolved(0x1105), unresolved(0x2000), unresolved(0x3000)],
    }));
    for i in 0..30_000u64 {
        all.push(alloc(
            1_700_000_000_000_000_000 + i * 1000,
            42 + (i % 3) as u32,
            0x10_0000 + i * 16,
            i,
            [7, 3, 5, 9, 10][i as usize % 5],
        ));
        if i % 7_000 == 0 {
            all.push(Record::Event(Event::Marker(Marker {
                time_ns: 1_700_000_000_000_000_000 + i * 1000,
                thread: 43,
                name: format!("phase {}", i / 7_000),
            })));
            all.push(Record::Stack(Stack {
                id: 100 + i,
                frames: vec![unresolved(0x5000 + i), unresolved(0x3000)],
            }));
        }
        if i % 2 == 1 {
            all.push(free(
                1_700_000_000_000_000_000 + i * 1000,
                42,
                0x10_0000 + (i - 1) * 16,
            ));
        }
    }
    all.push(Record::Event(Event::Syscall(Syscall {
        number: 0,
        result: 0,
        errno: None,
        thread: Some(42),
        time_ns: Some(1_700_000_000_100_000_000),
        duration_ns: None,
        args: vec![],
    })));
    all.push(Record::LeakScan {
        time_ns: 1_700_000_000_200_000_000,
    });
    for (k, kind) in [LeakKind::Definite, LeakKind::Indirect, LeakKind::Reachable]
        .into_iter()
        .enumerate()
    {
        all.push(Record::BlockClass {
            address: 0x10_0000 + 32 * k as u64,
            kind,
        });
    }
    // Late symbols, one naming a function a stack already uses.
    for (a, f, l) in [
        (0x2000, "caller", 20),
        (0x3000, "main", 1),
        (0x1007, "alloc_here", 3),
    ] {
        all.push(Record::AddressSymbol {
            address: a,
            symbol: Symbol {
                function: f.into(),
                file: "src/main.c".into(),
                line: l,
            },
        });
    }
    let dir = scratch_dir("rebuild");
    let spooled = spooled_file(&dir, "r", &all);
    assert_eq!(spooled, write_all(&all));
    // And the file says what was written: stack 3's and 5's last frames.
    let back = read_all(&spooled);
    let stack = |id| {
        back.iter().find_map(|r| match r {
            Record::Stack(s) if s.id == id => Some(s.frames.clone()),
            _ => None,
        })
    };
    assert_eq!(stack(3).unwrap(), vec![resolved(0x1003, "again", 30)]);
    assert_eq!(
        stack(5)
            .unwrap()
            .iter()
            .map(|f| f.address)
            .collect::<Vec<_>>(),
        [0x1105, 0x2000, 0x3000]
    );

    // The same stream with every stack entry whose id does not ascend left
    // out: the finish then streams the stacks from the log (the other path).
    let mut last = None;
    let ascending: Vec<Record> = all
        .iter()
        .filter(|r| match r {
            Record::Stack(s) if last.is_some_and(|l| s.id <= l) => false,
            Record::Stack(s) => {
                last = Some(s.id);
                true
            }
            _ => true,
        })
        .cloned()
        .collect();
    assert_eq!(
        ascending.len(),
        all.len() - 5,
        "3 and 5 (below 7), then 3 set again once and 5 twice"
    );
    assert_eq!(spooled_file(&dir, "a", &ascending), write_all(&ascending));
    // With the last stack still pending at finish (not spilled).
    let mut tail = ascending.clone();
    tail.push(Record::Stack(Stack {
        id: 1_000_000,
        frames: vec![unresolved(0x9000), resolved(0x9001, "late_one", 8)],
    }));
    assert_eq!(spooled_file(&dir, "p", &tail), write_all(&tail));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The file a spooling writer finishes for `records` (spilled as it goes,
/// flushed every 9,999 records; the last ones still pending at finish).
fn spooled_file(dir: &Path, name: &str, records: &[Record]) -> Vec<u8> {
    let (mut w, final_path) = Writer::create(&dir.join(name)).unwrap();
    for (i, r) in records.iter().enumerate() {
        w.write(r).unwrap();
        if i % 9_999 == 0 {
            w.flush().unwrap();
        }
    }
    Box::new(w).finish().unwrap();
    std::fs::read(&final_path).unwrap()
}

#[test]
fn create_never_overwrites() {
    let dir = scratch_dir("excl");
    std::fs::write(dir.join("a.mlyze"), b"keep").unwrap();
    std::fs::write(dir.join("a.1.mlyze.spool"), b"keep").unwrap();
    let (w, p) = Writer::create(&dir.join("a.mlyze")).unwrap();
    assert_eq!(p, dir.join("a.1.mlyze"));
    assert_eq!(w.spool_path().unwrap(), dir.join("a.1.mlyze.spool.1"));
    assert_eq!(std::fs::read(dir.join("a.mlyze")).unwrap(), b"keep");
    assert_eq!(std::fs::read(dir.join("a.1.mlyze.spool")).unwrap(), b"keep");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(w.spool_path().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(w);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What reading a spool directly must give: the records in the order they were
/// written (each flush's log before its events), events transformed as in a
/// finished file, late symbols not folded into frames.
fn expected_stream(input: &[Record]) -> Vec<Record> {
    let process_start = input.iter().find_map(|r| match r {
        Record::Process(p) if p.start_time_ns != 0 => Some(p.start_time_ns / 1000),
        _ => None,
    });
    let first_us = input.iter().find_map(|r| match r {
        Record::Event(e) if !matches!(e, Event::Syscall(_)) => e.time_ns().map(|t| t / 1000),
        _ => None,
    });
    let mut last_us = match (process_start, first_us) {
        (Some(p), Some(f)) => p.min(f),
        (_, Some(f)) => f,
        _ => 0,
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for r in input {
        match r {
            Record::Stack(s) => {
                seen.insert(s.id);
                out.push(r.clone());
            }
            Record::Event(Event::Syscall(_)) => {}
            Record::Event(e) => {
                let mut e = e.clone();
                last_us = last_us.max(e.time_ns().unwrap() / 1000);
                let t = last_us * 1000;
                match &mut e {
                    Event::Alloc(a) => {
                        a.time_ns = t;
                        if seen.insert(a.stack) {
                            out.push(Record::Stack(Stack {
                                id: a.stack,
                                frames: Vec::new(),
                            }));
                        }
                    }
                    Event::Free(f) => {
                        f.time_ns = t;
                        f.thread = 0;
                    }
                    Event::Gc(g) => g.time_ns = t,
                    Event::Marker(m) => m.time_ns = t,
                    Event::Syscall(_) => unreachable!(),
                }
                out.push(Record::Event(e));
            }
            other => out.push(other.clone()),
        }
    }
    out
}

#[test]
fn a_spool_reads_directly_up_to_the_last_flush() {
    let dir = scratch_dir("direct");
    let (mut w, _) = Writer::create(&dir.join("d")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    let mut groups: Vec<Vec<Record>> = vec![vec![
        Record::Process(Process {
            pid: 3,
            executable: "/bin/d".into(),
            command_line: vec![],
            start_time_ns: 1_700_000_000_000_000_000,
        }),
        Record::Thread(Thread {
            tid: 9,
            name: "t".into(),
        }),
        Record::Info(vec![("a".into(), "b".into())]),
    ]];
    for k in 0..4 {
        let mut g = sample_records(200, k);
        g.push(Record::Event(Event::Marker(Marker {
            time_ns: 1_700_000_000_000_000_000 + k * 5_000_000_000,
            thread: k as u32,
            name: format!("phase{k}"),
        })));
        g.push(alloc(1_700_000_000_000_000_000, 5, 1, 1, 999)); // unknown stack, old time
        groups.push(g);
    }
    groups.push(vec![Record::AddressSymbol {
        address: 0x4001,
        symbol: Symbol {
            function: "late".into(),
            file: "l.c".into(),
            line: 2,
        },
    }]);
    let mut flushed = Vec::new();
    for g in &groups {
        for r in g {
            w.write(r).unwrap();
        }
        w.flush().unwrap();
        flushed.extend(g.iter().cloned());
    }
    w.write(&alloc(1, 1, 1, 1, 0)).unwrap(); // not flushed
    drop(w);
    let (format, reader) = open(&spool).unwrap();
    assert_eq!(format, Format::Mlyze);
    let got: Vec<Record> = reader.collect::<Result<_>>().unwrap();
    assert_eq!(got, expected_stream(&flushed));
    // A torn spool reads up to the tear, then reports it.
    let bytes = std::fs::read(&spool).unwrap();
    let cut = &bytes[..bytes.len() - 3];
    let results: Vec<Result<Record>> = Reader::new(cut).collect();
    let err = results.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    assert_eq!(err.offset(), cut.len() as u64);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------- throughput (manual)

/// `cargo test --release -p format-writers --test mlyze -- --ignored --nocapture throughput`
#[test]
#[ignore = "measurement: 10M events, run by hand in --release"]
fn throughput() {
    const N: u64 = 10_000_000;
    let mut records = Vec::new();
    for s in 0..4096u64 {
        records.push(Record::Stack(Stack {
            id: s,
            frames: (0..20)
                .map(|i| Frame {
                    address: 0x40_0000 + s * 64 + i,
                    symbol: None,
                })
                .collect(),
        }));
    }
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    for r in &records {
        w.write(r).unwrap();
    }
    let t = std::time::Instant::now();
    let mut time = 1_700_000_000_000_000_000u64;
    let mut live = std::collections::VecDeque::new();
    for i in 0..N {
        time += 700 + (i % 5) * 300;
        let r = if i % 2 == 0 || live.is_empty() {
            let addr = 0x5555_0000_0000 + i * 48;
            live.push_back(addr);
            alloc(
                time,
                1000 + (i % 4) as u32,
                addr,
                16 + (i * 7) % 2000,
                (i * 31) % 4096,
            )
        } else {
            free(time, 1000, live.pop_front().unwrap())
        };
        w.write(&r).unwrap();
    }
    w.finish().unwrap();
    let enc = t.elapsed();
    let ev_bytes = events_part(&out).len();
    println!(
        "encode: {:.1} M events/s; {:.2} bytes/event; file {} MB",
        N as f64 / enc.as_secs_f64() / 1e6,
        ev_bytes as f64 / N as f64,
        out.len() >> 20
    );
    let t = std::time::Instant::now();
    let mut n = 0u64;
    for r in Reader::new(&out[..]) {
        if let Record::Event(_) = r.unwrap() {
            n += 1;
        }
    }
    let dec = t.elapsed();
    assert_eq!(n, N);
    println!(
        "decode (memory): {:.1} M events/s",
        N as f64 / dec.as_secs_f64() / 1e6
    );
    let dir = scratch_dir("throughput");
    let path = dir.join("big.mlyze");
    std::fs::write(&path, &out).unwrap();
    drop(out);
    let t = std::time::Instant::now();
    let (_, reader) = open(&path).unwrap();
    let n = reader.filter(|r| matches!(r, Ok(Record::Event(_)))).count() as u64;
    let dec = t.elapsed();
    assert_eq!(n, N);
    println!(
        "decode (file, open): {:.1} M events/s",
        N as f64 / dec.as_secs_f64() / 1e6
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `replay_allocations` hands back every allocation written, in order, from
/// both the spool's event chunks and the events still in memory; the events
/// written after a replay and the finished file are unaffected by it.
#[test]
fn replay_allocations_reads_back_spooled_and_pending_events() {
    let dir = scratch_dir("replay");
    let (mut w, path) = Writer::create(&dir.join("r")).unwrap();
    let (records, expect) = replay_workload();
    let (first, second) = records.split_at(records.len() * 2 / 3);
    for r in first {
        w.write(r).unwrap();
    }
    w.flush().unwrap();
    let first_allocs = first
        .iter()
        .filter(|r| matches!(r, Record::Event(Event::Alloc(_))))
        .count();
    let mut got = Vec::new();
    assert!(w.replay_allocations(&mut |a, s| got.push((a, s))).unwrap());
    assert_eq!(got, expect[..first_allocs], "after a flush");
    for r in &second[..10] {
        w.write(r).unwrap();
    }
    // Now with events pending in memory as well.
    got.clear();
    assert!(w.replay_allocations(&mut |a, s| got.push((a, s))).unwrap());
    let n = first_allocs
        + second[..10]
            .iter()
            .filter(|r| matches!(r, Record::Event(Event::Alloc(_))))
            .count();
    assert_eq!(got, expect[..n], "with pending events");
    for r in &second[10..] {
        w.write(r).unwrap();
    }
    TraceWriter::finish(Box::new(w)).unwrap();
    let back = read_all(&std::fs::read(&path).unwrap());
    let allocs: Vec<(u64, u64)> = back
        .iter()
        .filter_map(|r| match r {
            Record::Event(Event::Alloc(a)) => Some((a.address, a.size)),
            _ => None,
        })
        .collect();
    assert_eq!(allocs, expect, "the finished file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Allocations, frees and markers enough to spill several 64 KiB event
/// chunks, with sizes of every varint length; and the `(address, size)` of
/// every allocation, in order.
fn replay_workload() -> (Vec<Record>, Vec<(u64, u64)>) {
    let mut expect = Vec::new();
    let mut records = vec![Record::Stack(Stack {
        id: 1,
        frames: vec![Frame {
            address: 0x401000,
            symbol: None,
        }],
    })];
    for i in 0..30_000u64 {
        let addr = 0x10_0000 + i * 48;
        let size = [1, 127, 128, 16_383, 16_384, 1 << 40][i as usize % 6] + i;
        records.push(alloc(1_000 + i, 7, addr, size, 1));
        expect.push((addr, size));
        if i % 3 == 0 {
            records.push(free(1_000 + i, 7, addr));
        }
        if i % 1000 == 0 {
            records.push(Record::Event(Event::Marker(Marker {
                time_ns: 1_000 + i,
                thread: 7,
                name: format!("m{i}"),
            })));
        }
    }
    (records, expect)
}

/// A detached replay (`detach_allocation_replay`) hands back every
/// allocation, from the spool and from the events still in memory, while
/// another thread finishes the file and deletes the spool; the file is the
/// same as without a replay. A spool given as a plain file needs no reader,
/// one behind `SpoolIo` needs `set_spool_reader`, and without it there is no
/// detached replay (the in-thread one still works).
#[test]
fn a_detached_replay_reads_the_spool_while_the_writer_finishes() {
    let dir = scratch_dir("detached");
    let (records, expect) = replay_workload();
    let plain = {
        let (mut w, path) = Writer::create(&dir.join("plain")).unwrap();
        for r in &records {
            w.write(r).unwrap();
        }
        TraceWriter::finish(Box::new(w)).unwrap();
        std::fs::read(&path).unwrap()
    };
    for (with_reader, in_blocks) in [
        (None, false),
        (Some(false), false),
        (Some(true), false),
        (Some(true), true),
    ] {
        // None: a plain spool file; Some(r): a spool behind `SpoolIo`, with a
        // reader when r; in blocks: the spool a `BlockFile` (the preload's),
        // whose staged bytes the reader must find in the file.
        let tag = format!("{with_reader:?}-{in_blocks}");
        let (out, sink, spool_path, spool) = out_and_spool(&dir, &tag);
        let mut w: Box<dyn TraceWriter> = match with_reader {
            None => {
                Box::new(Writer::with_spool_file(sink, spool, Some(spool_path.clone())).unwrap())
            }
            Some(reader) => {
                let clone = spool.try_clone().unwrap();
                let mut w = if in_blocks {
                    let spool = format_writers::blocks::BlockFile::with_block(spool, 0, 4096);
                    Writer::with_spool(sink, spool, Some(spool_path.clone())).unwrap()
                } else {
                    Writer::with_spool(sink, spool, Some(spool_path.clone())).unwrap()
                };
                if reader {
                    w.set_spool_reader(std::sync::Arc::new(clone));
                }
                Box::new(w)
            }
        };
        for r in &records {
            w.write(r).unwrap();
        }
        let Some(job) = w.detach_allocation_replay() else {
            assert_eq!(with_reader, Some(false), "{tag}: no detached replay");
            let mut got = Vec::new();
            assert!(w.replay_allocations(&mut |a, s| got.push((a, s))).unwrap());
            assert_eq!(got, expect, "{tag}: the replay in the writer's thread");
            continue;
        };
        assert_ne!(
            with_reader,
            Some(false),
            "{tag}: a detached replay without a reader"
        );
        let replaying = std::thread::spawn(move || {
            let mut got = Vec::new();
            let ok = job(&mut |a, s| got.push((a, s))).unwrap();
            (ok, got)
        });
        if in_blocks {
            // Done before `finish`, whose reads of the spool would write the
            // staged bytes anyway: the replay must find them on its own.
            while !replaying.is_finished() {
                std::thread::yield_now();
            }
        }
        w.finish().unwrap();
        let (ok, got) = replaying.join().unwrap();
        assert!(ok, "{tag}");
        assert_eq!(got.len(), expect.len(), "{tag}");
        assert_eq!(got, expect, "{tag}: the detached replay");
        assert!(!spool_path.exists(), "{tag}: the spool is deleted");
        assert_eq!(std::fs::read(&out).unwrap(), plain, "{tag}: the file");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example spool of `docs/formats/mlyze.md` ("The spool and recovery"),
/// byte for byte: one stack (tag 16, no frame shared with a stack before)
/// and one ALLOC, after one flush.
#[test]
fn the_documented_spool_example_is_what_the_writer_spools() {
    let spool = Shared::<std::io::Cursor<Vec<u8>>>::default();
    let mut w = Writer::with_spool(Vec::new(), spool.clone(), None).unwrap();
    w.write(&Record::Stack(Stack {
        id: 7,
        frames: vec![Frame {
            address: 0x401000,
            symbol: Some(Symbol {
                function: "main".into(),
                file: String::new(),
                line: 3,
            }),
        }],
    }))
    .unwrap();
    w.write(&alloc(1_700_000_000_000_000_000, 4242, 0x1000, 128, 7))
        .unwrap();
    w.flush().unwrap();
    #[rustfmt::skip]
    let want: Vec<u8> = vec![
        0x4d, 0x54, 0x52, 0x53, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x01, 0x23, 0, 0, 0,
        0x05, 0x00, 0x04, b'm', b'a', b'i', b'n',
        0x06, 0x00, 0x00,
        0x10, 0x07, 0x01, 0x00, 0x80, 0xa0, 0x80, 0x02, 0x00, 0x00, 0x03,
        0x0b, 0x00, 0x00, 0x92, 0x21,
        0x01, 0x80, 0x80, 0xf9, 0xc0, 0xc1, 0xc4, 0x82, 0x03,
        0x02, 0x0f, 0, 0, 0,
        0x00, 0x00, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x80, 0x01, 0x07, 0x00, 0x00,
    ];
    assert_eq!(spool.0.lock().unwrap().get_ref(), &want);
}

/// Metadata written over many lines (as a pretty-printer or another writer
/// may write it), longer than the reader's 64 KiB steps, with one line that
/// spans several of them: a JSON error is located at the byte that made it,
/// wherever lines and steps begin.
#[test]
fn json_errors_are_located_exactly_in_metadata_of_many_lines() {
    let long_name = "n".repeat(150_000);
    let mut meta = String::from("{\n  \"stack_traces\": {\n");
    for id in 0..6000 {
        if id > 0 {
            meta.push_str(",\n");
        }
        meta.push_str(&format!(
            "    \"{id}\": [\n      {{\"file_id\": 0, \"line\": {id}, \"func_id\": {}}}\n    ]",
            id % 2
        ));
    }
    meta.push_str(&format!(
        "\n  }},\n  \"files\": {{\"0\": \"a.c\"}},\n  \"functions\": {{\"0\": \"{long_name}\", \"1\": \"f\"}}\n}}\n"
    ));
    let mut file = vec![0u8; 256];
    file[0..4].copy_from_slice(b"MTRC");
    file[4] = 1;
    file[16..20].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    file.extend_from_slice(meta.as_bytes());
    // The file reads whole as it is.
    let stacks = read_all(&file)
        .iter()
        .filter(|r| matches!(r, Record::Stack(_)))
        .count();
    assert_eq!(stacks, 6000);
    let err = |b: &[u8]| Reader::new(b).find_map(|r| r.err()).expect("an error");
    let m = meta.as_bytes();
    // Places to break: near every 64 KiB step and every 10,007 bytes.
    let mut near: Vec<usize> = (1..m.len() / 65536 + 1)
        .flat_map(|k| (65536 * k).saturating_sub(4)..65536 * k + 4)
        .collect();
    near.extend((0..m.len()).step_by(10_007));
    let mut checked = 0;
    for p in near {
        // The first ':' or ',' from there: an 'x' in its place is an error
        // at that very byte.
        let Some(q) = (p..m.len()).find(|&q| m[q] == b':' || m[q] == b',') else {
            continue;
        };
        let mut b = file.clone();
        b[256 + q] = b'x';
        let e = err(&b);
        assert_eq!(e.offset(), (256 + q) as u64, "{e}");
        assert!(e.to_string().contains("'x'"), "{e}");
        checked += 1;
    }
    assert!(checked > 30, "{checked}");
    // A newline inside a string is an error at the newline: the parser's
    // column is then 0, on the line after it.
    for name_at in [
        meta.find("\"a.c\"").unwrap() + 2,
        meta.find(&long_name).unwrap() + 70_000,
    ] {
        let mut b = file.clone();
        b[256 + name_at] = b'\n';
        let e = err(&b);
        assert_eq!(e.offset(), (256 + name_at) as u64, "{e}");
        assert!(e.to_string().contains("0x0a"), "{e}");
    }
}
