//! Write → read round trips over every model variant and boundary values, and a
//! reader written from the document alone (not from our code) reading our files.

use format_writers::model::{
    Event, Process, Record, Syscall, SyscallArg, SyscallArgView, SyscallView,
};
use format_writers::tlv::{self, ByteOrder, Reader, Writer};
use format_writers::TraceWriter;
use proptest::prelude::*;

fn u64_edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            127,
            128,
            (1 << 31) - 1,
            1 << 31,
            u64::from(u32::MAX),
            1 << 32,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
        ]),
        any::<u64>(),
    ]
}

fn i64_edge() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            -1,
            127,
            128,
            i64::from(i32::MAX),
            i64::from(i32::MAX) + 1,
            i64::from(i32::MIN),
            i64::from(i32::MIN) - 1,
            i64::from(u32::MAX),
            i64::MAX,
            i64::MIN,
        ]),
        any::<i64>(),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(Vec::new()), prop::collection::vec(any::<u8>(), 0..max),]
}

fn known_tag(t: u16) -> bool {
    (1..=7).contains(&t) || (0x0101..=0x0105).contains(&t)
}

fn arg() -> impl Strategy<Value = SyscallArg> {
    prop_oneof![
        i64_edge().prop_map(SyscallArg::Int),
        u64_edge().prop_map(SyscallArg::Flags),
        any::<i32>().prop_map(SyscallArg::Fd),
        bytes(300).prop_map(SyscallArg::Path),
        u64_edge().prop_map(SyscallArg::Pointer),
        (bytes(300), u64_edge()).prop_map(|(data, extra)| SyscallArg::Buffer {
            // Half captured in full, half a prefix of a longer buffer.
            len: if extra % 2 == 0 {
                data.len() as u64
            } else {
                (data.len() as u64).saturating_add(extra)
            },
            data,
        }),
        (
            any::<u16>().prop_filter("unknown tag", |t| !known_tag(*t)),
            bytes(64)
        )
            .prop_map(|(tag, raw)| SyscallArg::Unknown { tag, raw }),
    ]
}

fn syscall() -> impl Strategy<Value = Syscall> {
    (
        any::<u16>(),
        i64_edge(),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<u32>()),
        prop::option::of(u64_edge()),
        prop::option::of(u64_edge()),
        prop_oneof![
            prop::collection::vec(arg(), 0..8),
            prop::collection::vec(arg(), 0..80),
        ],
    )
        .prop_map(
            |(number, result, errno, thread, time_ns, duration_ns, args)| Syscall {
                number,
                result,
                errno,
                thread,
                time_ns,
                duration_ns,
                args,
            },
        )
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), ".{0,40}", "[a-z/._-]{0,300}"]
}

fn process() -> impl Strategy<Value = Process> {
    (
        any::<u32>(),
        text(),
        prop::collection::vec(text(), 0..6),
        u64_edge(),
    )
        .prop_map(|(pid, executable, command_line, start_time_ns)| Process {
            pid,
            executable,
            command_line,
            start_time_ns,
        })
}

/// Host facts in the canonical shape that round-trips exactly: the six `uname`
/// keys together and in order (or absent), other keys free of NUL.
fn info() -> impl Strategy<Value = Vec<(String, String)>> {
    let key = "[a-z_]{0,12}".prop_filter("not a uname key", |k| {
        !tlv::UNAME_KEYS.contains(&k.as_str())
    });
    (
        prop::collection::vec((key, text()), 0..5),
        prop::option::of(prop::collection::vec("[ -~]{0,20}", 6)),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut pairs, uname, at)| {
            if let Some(values) = uname {
                let at = at.index(pairs.len() + 1);
                for (i, v) in values.into_iter().enumerate() {
                    pairs.insert(at + i, (tlv::UNAME_KEYS[i].to_string(), v));
                }
            }
            pairs
        })
}

fn encode(order: ByteOrder, records: &[Record]) -> Vec<u8> {
    let mut w = Writer::with_byte_order(Vec::new(), order);
    for r in records {
        w.write_record(r).unwrap();
    }
    w.finish_into_inner().unwrap()
}

/// What the reader must give back: the duration rule of the document is the
/// only loss (`docs/formats/syscall-tlv.md`).
fn expected(s: &Syscall) -> Syscall {
    let mut s = s.clone();
    s.duration_ns = s.duration_ns.map(|d| {
        if d < 1 << 31 {
            d
        } else {
            (d / 1_000_000).min((1 << 31) - 1) * 1_000_000
        }
    });
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(
        p in process(),
        info in info(),
        calls in prop::collection::vec(syscall(), 0..12),
        big in any::<bool>(),
    ) {
        let order = if big { ByteOrder::Big } else { ByteOrder::Little };
        let mut input = vec![Record::Process(p.clone())];
        if !info.is_empty() {
            input.push(Record::Info(info.clone()));
        }
        input.extend(calls.iter().cloned().map(|c| Record::Event(Event::Syscall(c))));
        let file = encode(order, &input);
        let back: Vec<Record> = Reader::new(&file[..]).collect::<Result<_, _>>().unwrap();
        let mut want = vec![Record::Process(p)];
        if !info.is_empty() {
            want.push(Record::Info(info));
        }
        want.extend(calls.iter().map(|c| Record::Event(Event::Syscall(expected(c)))));
        prop_assert_eq!(back, want);
    }

    #[test]
    fn a_document_only_reader_reads_our_files(
        p in process(),
        calls in prop::collection::vec(syscall(), 0..12),
    ) {
        let mut input = vec![Record::Process(p.clone())];
        input.extend(calls.iter().cloned().map(|c| Record::Event(Event::Syscall(c))));
        let file = encode(ByteOrder::Little, &input);
        let doc = document_reader(&file);
        prop_assert_eq!(doc.pid, p.pid);
        prop_assert_eq!(doc.calls.len(), calls.len());
        for (d, c) in doc.calls.iter().zip(&calls) {
            let e = expected(c);
            prop_assert_eq!(d.number, c.number);
            prop_assert_eq!(d.result, c.result);
            prop_assert_eq!(d.thread, c.thread);
            prop_assert_eq!(d.errno, c.errno);
            prop_assert_eq!(d.duration_ns, e.duration_ns);
            // Entry time = header seconds + (fast clock − reference), in ns.
            let t = d.timestamp.map(|ts| {
                (i128::from(doc.seconds) * 1_000_000_000 + i128::from(ts) - i128::from(doc.reference)) as u64
            });
            prop_assert_eq!(t, c.time_ns);
            prop_assert_eq!(d.ie_count, c.args.len());
        }
    }

    /// The borrowed fast path the preload library uses
    /// (`TraceWriter::write_syscall` with a `SyscallView`) writes the very
    /// bytes of the model path, in both byte orders; and a writer without
    /// a fast path gets the same owned record through the default method.
    #[test]
    fn view_path_is_byte_identical(
        p in process(),
        calls in prop::collection::vec(syscall(), 0..12),
        big in any::<bool>(),
    ) {
        let order = if big { ByteOrder::Big } else { ByteOrder::Little };
        let mut input = vec![Record::Process(p.clone())];
        input.extend(calls.iter().cloned().map(|c| Record::Event(Event::Syscall(c))));
        let model = encode(order, &input);

        let mut w: Box<Writer<Vec<u8>>> = Box::new(Writer::with_byte_order(Vec::new(), order));
        w.write_record(&Record::Process(p)).unwrap();
        for c in &calls {
            let args: Vec<SyscallArgView<'_>> = c.args.iter().map(SyscallArgView::of).collect();
            let view = SyscallView {
                number: c.number,
                result: c.result,
                errno: c.errno,
                thread: c.thread,
                time_ns: c.time_ns,
                duration_ns: c.duration_ns,
                args: &args,
            };
            prop_assert_eq!(&view.to_syscall(), c);
            TraceWriter::write_syscall(&mut *w, &view).unwrap();
        }
        let fast = w.finish_into_inner().unwrap();
        prop_assert_eq!(fast, model);
    }

    /// The document's duration rule, and only it, loses precision.
    #[test]
    fn duration_rule(d in u64_edge()) {
        let raw = tlv::encode_duration(d);
        let back = tlv::decode_duration(raw);
        if d < 1 << 31 {
            prop_assert_eq!(raw, d as u32);
            prop_assert_eq!(back, d);
        } else {
            prop_assert!(raw & 0x8000_0000 != 0);
            prop_assert_eq!(u64::from(raw & 0x7fff_ffff), (d / 1_000_000).min((1 << 31) - 1));
            prop_assert!(back <= d && (d - back < 1_000_000 || d >= 0x7fff_ffff * 1_000_000));
        }
    }
}

/// Strings and buffers past one IE: argv elements continue in continuation IEs
/// (exact), paths and captured prefixes are cut to fit (documented losses).
#[test]
fn long_values() {
    let long_arg: String = "x".repeat(200_000);
    let p = Process {
        pid: 1,
        executable: "e".repeat(70_000),
        command_line: vec![long_arg.clone(), String::new(), "y".into()],
        start_time_ns: 5,
    };
    let info = vec![("k".to_string(), "v".repeat(65_534))]; // "k\0" + value = 65,536 bytes
    let call = Syscall {
        number: 0,
        args: vec![
            SyscallArg::Path(vec![b'p'; 70_000]),
            SyscallArg::Buffer {
                len: 100_000,
                data: vec![7; 100_000],
            },
            SyscallArg::Buffer {
                len: 65_535,
                data: vec![8; 65_535],
            },
            SyscallArg::Buffer {
                len: 1 << 40,
                data: vec![9; 70_000],
            },
            SyscallArg::Unknown {
                tag: 0x300,
                raw: vec![1; 70_000],
            },
        ],
        ..Syscall::default()
    };
    let file = encode(
        ByteOrder::NATIVE,
        &[
            Record::Process(p.clone()),
            Record::Info(info.clone()),
            Record::Event(Event::Syscall(call)),
        ],
    );
    let back: Vec<Record> = Reader::new(&file[..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(back[0], Record::Process(p));
    assert_eq!(back[1], Record::Info(info));
    let Record::Event(Event::Syscall(c)) = &back[2] else {
        panic!("{:?}", back[2])
    };
    assert_eq!(c.args[0], SyscallArg::Path(vec![b'p'; 65_535]));
    // Not captured in full: partial data, prefix cut to 65,535 − 4 bytes.
    assert_eq!(
        c.args[1],
        SyscallArg::Buffer {
            len: 100_000,
            data: vec![7; 65_531]
        }
    );
    // Exactly one IE's worth: full data.
    assert_eq!(
        c.args[2],
        SyscallArg::Buffer {
            len: 65_535,
            data: vec![8; 65_535]
        }
    );
    assert_eq!(
        c.args[3],
        SyscallArg::Buffer {
            len: 1 << 40,
            data: vec![9; 65_527]
        }
    );
    assert_eq!(
        c.args[4],
        SyscallArg::Unknown {
            tag: 0x300,
            raw: vec![1; 65_535]
        }
    );
}

/// Records the format cannot hold are ignored; the process and host facts that
/// arrive after the first event are too (the header is already written).
#[test]
fn ignored_records() {
    use format_writers::model::{Alloc, Object, Thread};
    let call = Syscall {
        number: 1,
        ..Syscall::default()
    };
    let file = encode(
        ByteOrder::NATIVE,
        &[
            Record::Object(Object::default()),
            Record::Thread(Thread {
                tid: 3,
                name: "t".into(),
            }),
            Record::Event(Event::Alloc(Alloc::default())),
            Record::Event(Event::Syscall(call.clone())),
            Record::Process(Process {
                pid: 9,
                ..Process::default()
            }),
            Record::Info(vec![("a".into(), "b".into())]),
        ],
    );
    let back: Vec<Record> = Reader::new(&file[..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        back,
        vec![
            Record::Process(Process::default()),
            Record::Event(Event::Syscall(call))
        ]
    );
}

// ---------------------------------------------------------------------------
// A reader built from the document's diagrams only: header rows, a variable
// header skipped by its length, captured syscalls tagged 0x0001 with the fixed
// fields the flags announce, IEs skipped by their 2-byte length padded to 4.

struct DocCall {
    number: u16,
    result: i64,
    thread: Option<u32>,
    timestamp: Option<u64>,
    duration_ns: Option<u64>,
    errno: Option<i32>,
    ie_count: usize,
}

struct DocFile {
    pid: u32,
    seconds: u64,
    reference: u64,
    calls: Vec<DocCall>,
}

fn document_reader(b: &[u8]) -> DocFile {
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let pad4 = |n: usize| (n + 3) & !3;
    assert_eq!(&b[..4], &[0x78, 0x06, 0x17, 0xa5]);
    assert_eq!(b[4], 1, "version");
    assert_eq!(b[5] & 1, 0, "little-endian");
    let pid = u32_at(8);
    let seconds = u64_at(12);
    let reference = u64_at(20);
    // Variable header: tag, length, IEs — skipped as a whole.
    let mut o = 28 + 8 + pad4(u32_at(32) as usize);
    let mut calls = Vec::new();
    while o < b.len() {
        let (tag, len) = (u32_at(o), u32_at(o + 4) as usize);
        let body = o + 8;
        let end = body + len;
        if tag == 0x0001 {
            let number = u16_at(body);
            let flags = b[body + 2];
            let mut p = body + 4;
            let result = u64_at(p) as i64;
            p += 8;
            let thread = (flags & 1 != 0).then(|| {
                p += 4;
                u32_at(p - 4)
            });
            let timestamp = (flags & 2 != 0).then(|| {
                p += 8;
                u64_at(p - 8)
            });
            let duration_ns = (flags & 4 != 0).then(|| {
                p += 4;
                let raw = u32_at(p - 4);
                if raw >> 31 == 1 {
                    u64::from(raw & 0x7fff_ffff) * 1_000_000
                } else {
                    u64::from(raw)
                }
            });
            let errno = (flags & 8 != 0).then(|| {
                p += 4;
                u32_at(p - 4) as i32
            });
            let mut ie_count = 0;
            while p < end {
                p += 4 + pad4(u16_at(p + 2) as usize);
                ie_count += 1;
            }
            assert_eq!(p, end, "IEs fill the record exactly");
            calls.push(DocCall {
                number,
                result,
                thread,
                timestamp,
                duration_ns,
                errno,
                ie_count,
            });
        }
        o = body + pad4(len);
    }
    assert_eq!(o, b.len());
    DocFile {
        pid,
        seconds,
        reference,
        calls,
    }
}
