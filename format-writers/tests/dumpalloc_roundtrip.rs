//! Round trips through the dumpalloc writer and reader over generated traces
//! with boundary values, and a reader that knows only the format document
//! reading files that carry every libtracer extension.

use std::collections::HashMap;

use format_writers::dumpalloc::{Reader, Writer};
use format_writers::*;
use proptest::collection::vec;
use proptest::prelude::*;

// ---- generators ----

fn num64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(127),
        Just(128),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn num32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(127),
        Just(128),
        Just(u32::MAX),
        any::<u32>()
    ]
}

fn short_text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "\\PC{0,12}"]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => short_text(),
        1 => (any::<char>(), 1000usize..70_000).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
}

fn symbol<S: Strategy<Value = String>>(s: fn() -> S) -> impl Strategy<Value = Symbol> {
    (s(), s(), num32()).prop_map(|(function, file, line)| Symbol {
        function,
        file,
        line,
    })
}

fn frames() -> impl Strategy<Value = Vec<Frame>> {
    let frame = (num64(), proptest::option::of(symbol(text)))
        .prop_map(|(address, symbol)| Frame { address, symbol });
    let small = (num64(), proptest::option::weighted(0.2, symbol(short_text)))
        .prop_map(|(address, symbol)| Frame { address, symbol });
    prop_oneof![
        8 => vec(frame, 0..6),
        1 => vec(small, 1000..=1000),
    ]
}

/// One item of a generated trace; an allocation names a stack by index.
#[derive(Debug, Clone)]
enum Item {
    Rec(Record),
    Alloc { stack: usize, alloc: Alloc },
}

fn item(stacks: usize) -> impl Strategy<Value = Item> {
    let alloc = (num64(), num32(), num64(), num64(), 0..stacks).prop_map(
        |(time_ns, thread, address, size, stack)| Item::Alloc {
            stack,
            alloc: Alloc {
                time_ns,
                thread,
                address,
                size,
                stack: 0,
            },
        },
    );
    let free = (num64(), num32(), num64()).prop_map(|(time_ns, thread, address)| {
        Record::Event(Event::Free(Free {
            time_ns,
            thread,
            address,
        }))
    });
    let gc = (num64(), num64(), num64()).prop_map(|(time_ns, objects, bytes)| {
        Record::Event(Event::Gc(Gc {
            time_ns,
            objects,
            bytes,
        }))
    });
    let marker = (num64(), num32(), text()).prop_map(|(time_ns, thread, name)| {
        Record::Event(Event::Marker(Marker {
            time_ns,
            thread,
            name,
        }))
    });
    let object = (text(), num64(), num64()).prop_map(|(path, load_address, size)| {
        Record::Object(Object {
            path,
            load_address,
            size,
        })
    });
    let thread = (num32(), text()).prop_map(|(tid, name)| Record::Thread(Thread { tid, name }));
    let process = (num32(), text(), vec(text(), 0..4), num64()).prop_map(
        |(pid, executable, command_line, start_time_ns)| {
            Record::Process(Process {
                pid,
                executable,
                command_line,
                start_time_ns,
            })
        },
    );
    let info = vec((short_text(), text()), 0..5).prop_map(Record::Info);
    let asym = (num64(), symbol(text))
        .prop_map(|(address, symbol)| Record::AddressSymbol { address, symbol });
    let arg = prop_oneof![
        any::<i64>().prop_map(SyscallArg::Int),
        num64().prop_map(SyscallArg::Flags),
        any::<i32>().prop_map(SyscallArg::Fd),
        vec(any::<u8>(), 0..40).prop_map(SyscallArg::Path),
        (num64(), vec(any::<u8>(), 0..40)).prop_map(|(len, data)| SyscallArg::Buffer { len, data }),
        num64().prop_map(SyscallArg::Pointer),
        (any::<u16>(), vec(any::<u8>(), 0..8))
            .prop_map(|(tag, raw)| SyscallArg::Unknown { tag, raw }),
    ];
    let syscall = (
        (
            any::<u16>(),
            any::<i64>(),
            proptest::option::of(any::<i32>()),
        ),
        (
            proptest::option::of(num32()),
            proptest::option::of(num64()),
            proptest::option::of(num64()),
        ),
        vec(arg, 0..7),
    )
        .prop_map(
            |((number, result, errno), (thread, time_ns, duration_ns), args)| {
                Record::Event(Event::Syscall(Syscall {
                    number,
                    result,
                    errno,
                    thread,
                    time_ns,
                    duration_ns,
                    args,
                }))
            },
        );
    prop_oneof![
        6 => alloc,
        4 => free.prop_map(Item::Rec),
        1 => gc.prop_map(Item::Rec),
        1 => marker.prop_map(Item::Rec),
        1 => object.prop_map(Item::Rec),
        1 => thread.prop_map(Item::Rec),
        1 => process.prop_map(Item::Rec),
        1 => info.prop_map(Item::Rec),
        1 => asym.prop_map(Item::Rec),
        1 => syscall.prop_map(Item::Rec),
    ]
}

/// A trace in model order: stacks are emitted (under scattered ids) just
/// before their first use, plus a prefix of many threads.
fn trace() -> impl Strategy<Value = Vec<Record>> {
    (vec(frames(), 1..6), 0usize..200, any::<u64>())
        .prop_flat_map(|(stacks, threads, salt)| {
            let n = stacks.len();
            (
                Just(stacks),
                Just(threads),
                Just(salt),
                vec(item(n), 0..40),
                vec(short_text(), threads),
            )
        })
        .prop_map(|(stacks, threads, salt, items, names)| {
            let id = |i: usize| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt;
            let mut out = Vec::new();
            for (i, name) in names.into_iter().enumerate().take(threads) {
                let tid = if i == 0 { u32::MAX } else { i as u32 * 977 };
                out.push(Record::Thread(Thread { tid, name }));
            }
            let mut emitted = vec![false; stacks.len()];
            for it in items {
                match it {
                    Item::Rec(r) => out.push(r),
                    Item::Alloc { stack, mut alloc } => {
                        if !emitted[stack] {
                            emitted[stack] = true;
                            out.push(Record::Stack(Stack {
                                id: id(stack),
                                frames: stacks[stack].clone(),
                            }));
                        }
                        alloc.stack = id(stack);
                        out.push(Record::Event(Event::Alloc(alloc)));
                    }
                }
            }
            out
        })
}

// ---- helpers ----

fn write(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w: Box<dyn TraceWriter> = Box::new(Writer::new(&mut out));
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

/// A record with stacks resolved: allocations carry their frames and stack
/// ids are gone, so traces that number stacks differently compare equal.
#[derive(Debug, PartialEq)]
enum Canon {
    Rec(Record),
    Alloc(Alloc, Vec<Frame>),
}

/// What the writer was given, as the reader should give it back: a leading
/// placeholder `Process` when none came first, no `Stack` records
/// (docs/formats/dumpalloc.md).
fn canon_input(records: &[Record]) -> Vec<Canon> {
    let mut stacks = HashMap::new();
    let mut out = Vec::new();
    if !matches!(records.first(), Some(Record::Process(_))) {
        out.push(Canon::Rec(Record::Process(Process::default())));
    }
    for r in records {
        match r {
            Record::Stack(s) => {
                stacks.insert(s.id, s.frames.clone());
            }
            Record::Event(Event::Alloc(a)) => out.push(Canon::Alloc(
                Alloc { stack: 0, ..*a },
                stacks[&a.stack].clone(),
            )),
            r => out.push(Canon::Rec(r.clone())),
        }
    }
    out
}

/// The reader's output, checking its stack discipline on the way: ids 0, 1,
/// 2, … in order, each defined before use, each frame list defined once.
fn canon_output(records: &[Record]) -> Vec<Canon> {
    let mut stacks: Vec<Vec<Frame>> = Vec::new();
    let mut out = Vec::new();
    for r in records {
        match r {
            Record::Stack(s) => {
                assert_eq!(
                    s.id,
                    stacks.len() as u64,
                    "stack ids are assigned in first-seen order"
                );
                assert!(!stacks.contains(&s.frames), "a frame list is interned once");
                stacks.push(s.frames.clone());
            }
            Record::Event(Event::Alloc(a)) => {
                let frames = stacks
                    .get(a.stack as usize)
                    .expect("a Stack precedes its first use");
                out.push(Canon::Alloc(Alloc { stack: 0, ..*a }, frames.clone()));
            }
            r => out.push(Canon::Rec(r.clone())),
        }
    }
    out
}

/// Gives bytes back in reads of 1 to 13 bytes.
struct Chunky<'a> {
    data: &'a [u8],
    state: u64,
}

impl std::io::Read for Chunky<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = (1 + (self.state >> 60) as usize % 13)
            .min(buf.len())
            .min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

// ---- a reader that knows only the document ----

#[derive(Debug, PartialEq)]
enum DocFrame {
    Native(u64),
    Precalculated(String, String, u32),
}

#[derive(Debug, PartialEq)]
enum DocRecord {
    Process(u32, String),
    Object(String),
    Alloc {
        address: u64,
        seconds: u64,
        nanoseconds: u32,
        frames: Vec<DocFrame>,
    },
    Dealloc(u64),
}

/// Reads PROC, OBJE, ALOC + FRAM (NTVE, PCAL, TERM) and DALC exactly as the
/// document lays them out, using each record's length to skip whatever
/// follows the fields it knows and every record or frame type it does not.
fn doc_only_read(mut b: &[u8]) -> Vec<DocRecord> {
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }
    fn string_at(b: &[u8], at: usize) -> (String, usize) {
        let n = u32_at(b, at) as usize;
        (
            String::from_utf8(b[at + 4..at + 4 + n].to_vec()).unwrap(),
            at + 4 + n,
        )
    }
    // Splits one record off the front: (type, body).
    fn record<'a>(b: &mut &'a [u8]) -> ([u8; 4], &'a [u8]) {
        let code: [u8; 4] = b[..4].try_into().unwrap();
        let len = u32_at(b, 4) as usize;
        let body = &b[8..8 + len];
        *b = &b[8 + len..];
        (code, body)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let (code, body) = record(&mut b);
        match &code {
            b"PROC" => out.push(DocRecord::Process(u32_at(body, 0), string_at(body, 4).0)),
            b"OBJE" => out.push(DocRecord::Object(string_at(body, 0).0)),
            b"DALC" => out.push(DocRecord::Dealloc(u64_at(body, 0))),
            b"ALOC" => {
                let (address, seconds, nanoseconds) =
                    (u64_at(body, 0), u64_at(body, 8), u32_at(body, 16));
                let mut frames = Vec::new();
                loop {
                    let (code, body) = record(&mut b);
                    if &code != b"FRAM" {
                        continue; // not a frame: skipped like any unknown record
                    }
                    match &body[..4] {
                        b"NTVE" => frames.push(DocFrame::Native(u64_at(body, 4))),
                        b"PCAL" => {
                            let (function, at) = string_at(body, 4);
                            let (file, at) = string_at(body, at);
                            frames.push(DocFrame::Precalculated(function, file, u32_at(body, at)));
                        }
                        b"TERM" => break,
                        _ => {}
                    }
                }
                out.push(DocRecord::Alloc {
                    address,
                    seconds,
                    nanoseconds,
                    frames,
                });
            }
            _ => {}
        }
    }
    out
}

/// What a document-only reader should find in our file for `records`.
fn doc_expected(records: &[Record]) -> Vec<DocRecord> {
    let mut stacks = HashMap::new();
    let mut out = Vec::new();
    if !matches!(records.first(), Some(Record::Process(_))) {
        out.push(DocRecord::Process(0, String::new()));
    }
    for r in records {
        match r {
            Record::Process(p) => out.push(DocRecord::Process(p.pid, p.executable.clone())),
            Record::Object(o) => out.push(DocRecord::Object(o.path.clone())),
            Record::Stack(s) => {
                stacks.insert(s.id, s.frames.clone());
            }
            Record::Event(Event::Alloc(a)) => out.push(DocRecord::Alloc {
                address: a.address,
                seconds: a.time_ns / 1_000_000_000,
                nanoseconds: (a.time_ns % 1_000_000_000) as u32,
                frames: stacks[&a.stack]
                    .iter()
                    .map(|f| match &f.symbol {
                        Some(s) if f.address == 0 => {
                            DocFrame::Precalculated(s.function.clone(), s.file.clone(), s.line)
                        }
                        _ => DocFrame::Native(f.address),
                    })
                    .collect(),
            }),
            Record::Event(Event::Free(f)) => out.push(DocRecord::Dealloc(f.address)),
            _ => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_gives_the_same_trace(records in trace()) {
        let bytes = write(&records);
        prop_assert_eq!(&bytes[..4], b"PROC");
        let back: Vec<Record> = Reader::new(&bytes[..]).collect::<Result<_>>().unwrap();
        prop_assert_eq!(canon_output(&back), canon_input(&records));
        // Short reads (records straddling the reader's buffer, so the copying
        // path instead of the in-place one) give the same records.
        let chunky = Chunky { data: &bytes, state: bytes.len() as u64 };
        let back2: Vec<Record> = Reader::new(chunky).collect::<Result<_>>().unwrap();
        prop_assert_eq!(&back2, &back);
        // Writing what was read gives the same bytes: the encoding is canonical.
        prop_assert_eq!(write(&back), bytes);
    }

    #[test]
    fn document_only_reader_finds_the_documented_fields(records in trace()) {
        let bytes = write(&records);
        prop_assert_eq!(doc_only_read(&bytes), doc_expected(&records));
    }
}

#[test]
fn document_only_reader_on_a_file_with_every_extension() {
    let sym = Symbol {
        function: "alloc_it".into(),
        file: "m.c".into(),
        line: 40,
    };
    let records = vec![
        Record::Info(vec![("os".into(), "Linux".into())]),
        Record::Process(Process {
            pid: 77,
            executable: "/usr/bin/prog".into(),
            command_line: vec!["prog".into(), "--x".into()],
            start_time_ns: 1_700_000_000_000_000_001,
        }),
        Record::Object(Object {
            path: "/usr/bin/prog".into(),
            load_address: 0x5555_0000_0000,
            size: 0x4000,
        }),
        Record::Thread(Thread {
            tid: 78,
            name: "w".into(),
        }),
        Record::Stack(Stack {
            id: 5,
            frames: vec![
                Frame {
                    address: 0x5555_0000_1234,
                    symbol: Some(sym.clone()),
                },
                Frame {
                    address: 0,
                    symbol: Some(sym.clone()),
                },
                Frame {
                    address: 0x5555_0000_0042,
                    symbol: None,
                },
            ],
        }),
        Record::Event(Event::Marker(Marker {
            time_ns: 3,
            thread: 78,
            name: "start".into(),
        })),
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1_700_000_000_500_000_000,
            thread: 78,
            address: 0x6000,
            size: 100,
            stack: 5,
        })),
        Record::Event(Event::Gc(Gc {
            time_ns: 4,
            objects: 1,
            bytes: 2,
        })),
        Record::AddressSymbol {
            address: 0x5555_0000_0042,
            symbol: sym.clone(),
        },
        Record::Event(Event::Free(Free {
            time_ns: 1_700_000_001_000_000_000,
            thread: 78,
            address: 0x6000,
        })),
    ];
    let bytes = write(&records);
    assert_eq!(
        doc_only_read(&bytes),
        vec![
            DocRecord::Process(0, String::new()), // placeholder: INFO came first
            DocRecord::Process(77, "/usr/bin/prog".into()),
            DocRecord::Object("/usr/bin/prog".into()),
            DocRecord::Alloc {
                address: 0x6000,
                seconds: 1_700_000_000,
                nanoseconds: 500_000_000,
                frames: vec![
                    DocFrame::Native(0x5555_0000_1234),
                    DocFrame::Precalculated("alloc_it".into(), "m.c".into(), 40),
                    DocFrame::Native(0x5555_0000_0042),
                ],
            },
            DocRecord::Dealloc(0x6000),
        ]
    );
}
