//! The reachability records (`Record::LeakScan`, `Record::BlockClass`) in every
//! format: golden bytes derived by hand from docs/formats/mlyze.md ("Leak
//! scans") and docs/formats/dumpalloc.md (`LSCN`, `BCLS`), their place in the
//! stream after a round trip, the spool, corrupt input, and TLV ignoring them.

use std::fs::File;
use std::path::PathBuf;

use format_writers::mlyze;
use format_writers::*;

fn alloc(time_ns: u64, address: u64, size: u64) -> Record {
    Record::Event(Event::Alloc(Alloc {
        time_ns,
        thread: 7,
        address,
        size,
        stack: 0,
    }))
}

fn class(address: u64, kind: LeakKind) -> Record {
    Record::BlockClass { address, kind }
}

/// One allocation, the scan (5 ms after the epoch) classifying two
/// addresses, then one allocation after the scan.
fn scanned_trace() -> Vec<Record> {
    vec![
        Record::Stack(Stack {
            id: 0,
            frames: vec![],
        }),
        alloc(1_000, 0x1000, 16),
        Record::LeakScan { time_ns: 5_000_000 },
        class(0x1000, LeakKind::Definite),
        class(0x2000, LeakKind::Indirect),
        alloc(6_000, 0x3000, 32),
    ]
}

fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("leak-classes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ------------------------------------------------------------------ model

#[test]
fn kind_codes_and_names() {
    let all: Vec<(u8, &str)> = LeakKind::ALL.iter().map(|k| (k.code(), k.name())).collect();
    assert_eq!(
        all,
        [
            (0, "definite"),
            (1, "indirect"),
            (2, "possible"),
            (3, "reachable")
        ]
    );
    for k in LeakKind::ALL {
        assert_eq!(LeakKind::from_code(k.code().into()), Some(k));
        assert_eq!(LeakKind::from_name(k.name()), Some(k));
    }
    assert_eq!(LeakKind::from_code(4), None);
    assert_eq!(LeakKind::from_code(u64::MAX), None);
    assert_eq!(LeakKind::from_name("lost"), None);
}

// ------------------------------------------------------------------ mlyze

fn mlyze_bytes(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = mlyze::Writer::new(&mut out);
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

fn metadata(file: &[u8]) -> &str {
    let len = u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize;
    std::str::from_utf8(&file[256..256 + len]).unwrap()
}

fn read<R: std::io::Read>(r: R) -> Vec<Record> {
    mlyze::Reader::new(r).collect::<Result<Vec<_>>>().unwrap()
}

#[test]
fn mlyze_stores_the_scan_in_the_libtracer_metadata() {
    let file = mlyze_bytes(&scanned_trace());
    // docs/formats/mlyze.md, "Leak scans": one object per scan, the number of
    // events before it (1: the first ALLOC), its time in ns, and
    // [address, kind] pairs with kind 0 definite, 1 indirect.
    let meta = metadata(&file);
    assert!(
        meta.ends_with(
            r#""dropped_syscalls":0,"leak_scans":[{"event_seq":1,"time_ns":5000000,"blocks":[[4096,0],[8192,1]]}]}}"#
        ),
        "{meta}"
    );
    // Still JSON, and the scan lives under "libtracer" only.
    let v: serde_json::Value = serde_json::from_str(meta).unwrap();
    assert!(v.get("leak_scans").is_none());
    assert_eq!(v["libtracer"]["leak_scans"][0]["blocks"][1][0], 8192);
    // The event stream is untouched: two 14-byte ALLOCs (type 0, 1-byte
    // delta, 8-byte address, 1-byte size, 1-byte stack, 2-byte slot).
    let len = meta.len();
    let events = &file[256 + len..];
    assert_eq!(events.len(), 2 * 14);
    assert_eq!((events[0], events[14]), (0, 0));
}

#[test]
fn mlyze_without_a_scan_has_no_leak_scans_key() {
    let mut t = scanned_trace();
    t.retain(|r| !matches!(r, Record::LeakScan { .. } | Record::BlockClass { .. }));
    let file = mlyze_bytes(&t);
    assert!(metadata(&file).ends_with(r#""dropped_syscalls":0}}"#));
}

#[test]
fn mlyze_yields_the_scan_at_its_place_in_the_stream() {
    let got = read(&mlyze_bytes(&scanned_trace())[..]);
    // Times come back at microsecond precision, from the header's start (1 µs).
    assert_eq!(got, scanned_trace());
}

#[test]
fn mlyze_scan_after_the_last_event_comes_last() {
    let mut t = scanned_trace();
    t.pop();
    let got = read(&mlyze_bytes(&t)[..]);
    assert_eq!(got, t);
    // And a scan in a trace without any event.
    let t = vec![
        Record::LeakScan { time_ns: 9 },
        class(0x10, LeakKind::Reachable),
    ];
    let got = read(&mlyze_bytes(&t)[..]);
    assert_eq!(&got[got.len() - 2..], &t[..]);
}

#[test]
fn mlyze_block_class_without_a_scan_is_refused() {
    let mut out = Vec::new();
    let mut w = mlyze::Writer::new(&mut out);
    let e = w.write(&class(0x10, LeakKind::Definite)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn mlyze_spool_logs_the_scan_after_the_events_before_it() {
    let dir = scratch_dir("spool");
    let (mut w, path) = mlyze::Writer::create(&dir.join("t")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    for r in scanned_trace() {
        w.write(&r).unwrap();
    }
    w.flush().unwrap();
    let bytes = std::fs::read(&spool).unwrap();
    // docs/formats/mlyze.md spool table: a log chunk (kind 1, 14 bytes) of
    // entry 14 (leak scan: 1 event before it, 5,000,000 ns as a varint
    // c0 96 b1 02) and two entries 15 (address 4096 = 80 20, kind 0;
    // address 8192 = 80 40, kind 1), then the events chunk holding the
    // second ALLOC only: the first went out before the scan was logged.
    let chunk: [u8; 19] = [
        1, 14, 0, 0, 0, // log chunk, 14 bytes
        0x0e, 0x01, 0xc0, 0x96, 0xb1, 0x02, // leak scan
        0x0f, 0x80, 0x20, 0x00, // 0x1000 definite
        0x0f, 0x80, 0x40, 0x01, // 0x2000 indirect
    ];
    let at = bytes
        .windows(chunk.len())
        .position(|w| w == chunk)
        .unwrap_or_else(|| panic!("log chunk not found in {bytes:02x?}"));
    assert_eq!(&bytes[at + 19..at + 24], &[2, 14, 0, 0, 0]);
    assert_eq!(bytes.len(), at + 24 + 14);
    // Read as it stands, the spool gives the same records as the final file.
    let from_spool = read(File::open(&spool).unwrap());
    assert_eq!(from_spool, scanned_trace());
    Box::new(w).finish().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), mlyze_bytes(&scanned_trace()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spooled file written with the records of `before`, then finished
/// with room for a scan at `time_ns` of `blocks` (the classes not given).
fn finished_before_classes(
    dir: &std::path::Path,
    before: &[Record],
    time_ns: u64,
    blocks: &[u64],
) -> (PathBuf, PathBuf, Box<dyn ClassesLater>) {
    let (mut w, path) = mlyze::Writer::create(&dir.join("t")).unwrap();
    let spool = w.spool_path().unwrap().to_path_buf();
    for r in before {
        w.write(r).unwrap();
    }
    let w: Box<dyn TraceWriter> = Box::new(w);
    assert!(w.finishes_before_classes());
    let later = w.finish_before_classes(time_ns, blocks.to_vec()).unwrap();
    (path, spool, later)
}

#[test]
fn mlyze_classes_written_after_the_file_give_the_same_bytes() {
    // The scan after every event, over three blocks (the third at an
    // address of more digits: entries of different lengths).
    let events = vec![
        Record::Stack(Stack {
            id: 0,
            frames: vec![],
        }),
        alloc(1_000, 0x1000, 16),
        alloc(2_000, 0x2000, 24),
        alloc(3_000, 0xff_ffff_fff0, 8),
    ];
    let kinds = [LeakKind::Possible, LeakKind::Reachable, LeakKind::Definite];
    let blocks = [0x1000u64, 0x2000, 0xff_ffff_fff0];
    // The same scan given as records: the bytes to get.
    let mut whole = events.clone();
    whole.push(Record::LeakScan {
        time_ns: 1_700_000_000_123_456_789,
    });
    for (a, k) in blocks.iter().zip(kinds) {
        whole.push(class(*a, k));
    }
    let dir = scratch_dir("later");
    let (path, spool, later) =
        finished_before_classes(&dir, &events, 1_700_000_000_123_456_789, &blocks);
    // Until the classes are in, the scan's room is blank: the file reads
    // as the trace without it (a run killed meanwhile loses the classes
    // alone), and the spool is gone as after any finish.
    let pending = std::fs::read(&path).unwrap();
    assert_eq!(pending.len(), mlyze_bytes(&whole).len());
    assert_eq!(read(&pending[..]), events);
    assert!(metadata(&pending).contains("\"leak_scans\":[     "));
    assert!(!spool.exists());
    later.write(&kinds).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), mlyze_bytes(&whole));
    assert_eq!(read(File::open(&path).unwrap()), whole);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mlyze_classes_written_later_follow_an_earlier_scan() {
    // A scan given as records, then one finished before its classes: the
    // second entry of `leak_scans`, after a comma.
    let before = scanned_trace();
    let mut whole = before.clone();
    whole.push(Record::LeakScan { time_ns: 7_000_000 });
    whole.push(class(0x3000, LeakKind::Indirect));
    let dir = scratch_dir("second");
    let (path, _, later) = finished_before_classes(&dir, &before, 7_000_000, &[0x3000]);
    later.write(&[LeakKind::Indirect]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), mlyze_bytes(&whole));
    assert_eq!(read(File::open(&path).unwrap()), whole);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mlyze_classes_written_later_must_match_the_blocks() {
    let dir = scratch_dir("count");
    let (path, _, later) = finished_before_classes(&dir, &scanned_trace(), 9, &[0x10, 0x20]);
    let e = later.write(&[LeakKind::Definite]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    // Nothing written: the file holds the earlier scan alone.
    assert_eq!(read(File::open(&path).unwrap()), scanned_trace());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mlyze_in_memory_cannot_finish_before_classes() {
    let w: Box<dyn TraceWriter> = Box::new(mlyze::Writer::new(Vec::new()));
    assert!(!w.finishes_before_classes());
    let e = w
        .finish_before_classes(1, vec![16])
        .err()
        .expect("an error");
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
}

fn mlyze_with_metadata(meta: &str) -> Vec<u8> {
    let mut file = vec![0u8; 256];
    file[0..4].copy_from_slice(b"MTRC");
    file[4] = 1;
    file[16..20].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    file.extend_from_slice(meta.as_bytes());
    file
}

fn first_error(file: &[u8]) -> FormatError {
    mlyze::Reader::new(file)
        .find_map(|r| r.err())
        .expect("an error")
}

#[test]
fn mlyze_bad_scans_are_errors_at_the_metadata() {
    let e = first_error(&mlyze_with_metadata(
        r#"{"libtracer":{"version":1,"leak_scans":[{"event_seq":0,"time_ns":1,"blocks":[[16,4]]}]}}"#,
    ));
    assert_eq!(e.offset(), 256);
    assert!(e.to_string().contains("leak kind 0..=3"), "{e}");
    let e = first_error(&mlyze_with_metadata(
        r#"{"libtracer":{"version":1,"leak_scans":[{"event_seq":2,"time_ns":1,"blocks":[]},{"event_seq":1,"time_ns":2,"blocks":[]}]}}"#,
    ));
    assert_eq!(e.offset(), 256);
    assert!(e.to_string().contains("event order"), "{e}");
    // A well-formed scan of a file with no events reads.
    let ok = read(
        &mlyze_with_metadata(
            r#"{"libtracer":{"version":1,"leak_scans":[{"event_seq":0,"time_ns":1,"blocks":[[16,3]]}]}}"#,
        )[..],
    );
    assert_eq!(
        ok,
        [
            Record::LeakScan { time_ns: 1 },
            class(16, LeakKind::Reachable)
        ]
    );
}

// ------------------------------------------------------------------ dumpalloc

fn dumpalloc_bytes(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w: Box<dyn TraceWriter> = Box::new(dumpalloc::Writer::new(&mut out));
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

/// The placeholder `PROC` (docs/formats/dumpalloc.md, "The first record").
const PLACEHOLDER_PROC: [u8; 32] = [
    b'P', b'R', b'O', b'C', 24, 0, 0, 0, // code, length 24
    0, 0, 0, 0, 0, 0, 0, 0, // pid 0, empty name
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // start time 0 s 0 ns
    0, 0, 0, 0, // no arguments
];

#[test]
fn dumpalloc_golden_scan_records() {
    let bytes = dumpalloc_bytes(&[
        Record::LeakScan {
            time_ns: 1_000_000_002,
        },
        class(0x5555_0000_0010, LeakKind::Indirect),
    ]);
    let mut expected = PLACEHOLDER_PROC.to_vec();
    expected.extend_from_slice(&[
        b'L', b'S', b'C', b'N', 12, 0, 0, 0, // 'LSCN', length 12
        1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, // timestamp 1 s, 2 ns
        b'B', b'C', b'L', b'S', 9, 0, 0, 0, // 'BCLS', length 9
        0x10, 0, 0, 0, 0x55, 0x55, 0, 0, // address
        1, // kind 1 = indirect
    ]);
    assert_eq!(bytes, expected);
}

#[test]
fn dumpalloc_round_trip_keeps_the_order() {
    let bytes = dumpalloc_bytes(&scanned_trace());
    let got: Vec<Record> = dumpalloc::Reader::new(&bytes[..])
        .collect::<Result<_>>()
        .unwrap();
    let mut want = vec![Record::Process(Process::default())];
    want.extend(scanned_trace());
    assert_eq!(got, want);
}

#[test]
fn dumpalloc_bad_scan_records() {
    let good = dumpalloc_bytes(&[
        Record::LeakScan { time_ns: 1 },
        class(0x10, LeakKind::Possible),
    ]);
    // The kind byte is the last byte: 32 (PROC) + 20 (LSCN) + 8 + 8.
    assert_eq!(good.len(), 69);
    let mut bad = good.clone();
    bad[68] = 4;
    let e = dumpalloc::Reader::new(&bad[..])
        .find_map(|r| r.err())
        .unwrap();
    assert_eq!(e.offset(), 68);
    assert!(e.to_string().contains("leak kind"), "{e}");
    // A BCLS whose length leaves out the kind byte.
    let mut short = good[..68].to_vec();
    short[52 + 4] = 8;
    let e = dumpalloc::Reader::new(&short[..])
        .find_map(|r| r.err())
        .unwrap();
    assert_eq!(e.offset(), 68);
    // Truncated inside the record.
    let e = dumpalloc::Reader::new(&good[..66])
        .find_map(|r| r.err())
        .unwrap();
    assert!(matches!(e, FormatError::Truncated { .. }), "{e:?}");
}

// ------------------------------------------------------------------ TLV

#[test]
fn tlv_ignores_scan_records() {
    let call = Record::Event(Event::Syscall(Syscall {
        number: 39,
        result: 42,
        errno: None,
        thread: Some(1),
        time_ns: Some(1_000),
        duration_ns: Some(10),
        args: vec![],
    }));
    let encode = |records: &[Record]| {
        let mut out = Vec::new();
        let mut w: Box<dyn TraceWriter> = Box::new(tlv::Writer::new(&mut out));
        for r in records {
            w.write(r).unwrap();
        }
        w.finish().unwrap();
        out
    };
    let with = encode(&[
        call.clone(),
        Record::LeakScan { time_ns: 5 },
        class(0x10, LeakKind::Definite),
    ]);
    assert_eq!(with, encode(&[call]));
}
