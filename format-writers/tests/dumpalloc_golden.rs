//! Byte-exact dumpalloc records, derived by hand from the format document
//! (seeds 000, "Dumpalloc File Format") and from the extensions documented in
//! docs/formats/dumpalloc.md, plus the reader's handling of document-only
//! files, unknown records and malformed input at exact offsets.
//!
//! Document sections cited: "Overall Design Principals" (little endian,
//! 8-byte pointers), "Composite Types / String" (u32 length + bytes),
//! "Composite Types / Timestamp" (u64 seconds + u32 nanoseconds), "Record
//! Types" (4-char code + u32 length of the rest), and the per-record tables.

use format_writers::dumpalloc::{Reader, Writer};
use format_writers::*;

fn written(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w: Box<dyn TraceWriter> = Box::new(Writer::new(&mut out));
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

fn read_all(bytes: &[u8]) -> Vec<Record> {
    Reader::new(bytes).map(|r| r.unwrap()).collect()
}

fn read_err(bytes: &[u8]) -> (Vec<Record>, FormatError) {
    let mut ok = Vec::new();
    for r in Reader::new(bytes) {
        match r {
            Ok(r) => ok.push(r),
            Err(e) => return (ok, e),
        }
    }
    panic!("expected an error, read {ok:?}");
}

/// The `PROC` record the writer puts first when no Process record came first
/// (docs/formats/dumpalloc.md, "The first record").
const PLACEHOLDER_PROC: [u8; 32] = [
    b'P', b'R', b'O', b'C', // Process Record, row 'Record Type'
    24, 0, 0, 0, // row 'Record Length': 4 + 4 + 12 + 4
    0, 0, 0, 0, // row 'Process ID': 0 = unknown
    0, 0, 0, 0, // row 'Process Name': String of length 0
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // extension: start Timestamp 0 s, 0 ns
    0, 0, 0, 0, // extension: argument count 0
];

fn proc_example() -> Process {
    Process {
        pid: 0x1234,
        executable: "/bin/ls".into(),
        command_line: vec!["ls".into(), "-l".into()],
        start_time_ns: 1_000_000_002,
    }
}

const PROC_EXAMPLE: [u8; 51] = [
    b'P', b'R', b'O', b'C', // Process Record, row 'Record Type'
    43, 0, 0, 0, // row 'Record Length': 4 + 11 + 12 + 4 + 6 + 6
    0x34, 0x12, 0, 0, // row 'Process ID' (4-byte integer, little endian)
    7, 0, 0, 0, b'/', b'b', b'i', b'n', b'/', b'l', b's', // row 'Process Name': String
    1, 0, 0, 0, 0, 0, 0, 0, // extension: start time, Timestamp row 0-7 (seconds)
    2, 0, 0, 0, // Timestamp row 8-11 (nanoseconds)
    2, 0, 0, 0, // extension: argument count
    2, 0, 0, 0, b'l', b's', // argv[0] as a String
    2, 0, 0, 0, b'-', b'l', // argv[1] as a String
];

#[test]
fn proc_record() {
    let bytes = written(&[Record::Process(proc_example())]);
    assert_eq!(bytes, PROC_EXAMPLE);
    assert_eq!(read_all(&bytes), vec![Record::Process(proc_example())]);
}

#[test]
fn placeholder_proc_when_no_process_comes_first() {
    let thread = Record::Thread(Thread {
        tid: 42,
        name: "worker".into(),
    });
    let bytes = written(std::slice::from_ref(&thread));
    let mut expected = PLACEHOLDER_PROC.to_vec();
    expected.extend_from_slice(&[
        b'T', b'H', b'R', b'D', // extension record THRD
        14, 0, 0, 0, // length: 4 + 4 + 6
        42, 0, 0, 0, // thread id
        6, 0, 0, 0, b'w', b'o', b'r', b'k', b'e', b'r', // name, a String
    ]);
    assert_eq!(bytes, expected);
    assert_eq!(
        read_all(&bytes),
        vec![Record::Process(Process::default()), thread]
    );
    // An empty trace is still a dumpalloc file: it starts with PROC.
    assert_eq!(written(&[]), PLACEHOLDER_PROC);
}

#[test]
fn obje_record() {
    let obj = Object {
        path: "/lib/libc.so.6".into(),
        load_address: 0x7f00_0000_1000,
        size: 0x1e_0000,
    };
    let bytes = written(&[
        Record::Process(Process::default()),
        Record::Object(obj.clone()),
    ]);
    let expected: &[u8] = &[
        b'O', b'B', b'J', b'E', // Object Record, row 'Record Type'
        34, 0, 0, 0, // row 'Record Length': 4 + 14 + 8 + 8
        14, 0, 0, 0, // row 'Object Name': String length ...
        b'/', b'l', b'i', b'b', b'/', b'l', b'i', b'b', b'c', b'.', b's', b'o', b'.', b'6', 0x00,
        0x10, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, // extension: load address (8-byte pointer)
        0x00, 0x00, 0x1e, 0x00, 0x00, 0x00, 0x00, 0x00, // extension: mapping size
    ];
    assert_eq!(&bytes[PLACEHOLDER_PROC.len()..], expected);
    assert_eq!(read_all(&bytes)[1], Record::Object(obj));
}

/// ALOC followed by two NTVE frames and TERM.
const ALOC_NTVE: [u8; 92] = [
    b'A', b'L', b'O', b'C', // Allocation Record, row 'Record Type'
    32, 0, 0, 0, // row 'Record Length': 8 + 12 + 8 + 4 (frames not counted)
    0x10, 0, 0, 0, 0x55, 0x55, 0, 0, // row 'Memory Address': pointer, 8 bytes
    5, 0, 0, 0, 0, 0, 0, 0, // row 'Allocation Time': Timestamp seconds
    7, 0, 0, 0, // Timestamp nanoseconds
    24, 0, 0, 0, 0, 0, 0, 0, // extension: block size
    42, 0, 0, 0, // extension: thread id
    b'F', b'R', b'A', b'M', // Frame Record, row 'Record Type'
    12, 0, 0, 0, // row 'Record Length': subtype 4 + pointer 8
    b'N', b'T', b'V', b'E', // row 'Frame Record Type': 'NTVE' Native Frame
    0x00, 0x10, 0x40, 0, 0, 0, 0, 0, // payload: pointer 0x401000
    b'F', b'R', b'A', b'M', 12, 0, 0, 0, b'N', b'T', b'V', b'E', // second frame
    0xbc, 0x2a, 0x40, 0, 0, 0, 0, 0, // pointer 0x402abc
    b'F', b'R', b'A', b'M', // Frame Record
    4, 0, 0, 0, // length: the subtype only
    b'T', b'E', b'R', b'M', // 'TERM' Termination Frame, payload None
];

#[test]
fn aloc_with_native_frames() {
    let stack = Stack {
        id: 7,
        frames: vec![
            Frame {
                address: 0x401000,
                symbol: None,
            },
            Frame {
                address: 0x402abc,
                symbol: None,
            },
        ],
    };
    let alloc = Alloc {
        time_ns: 5_000_000_007,
        thread: 42,
        address: 0x5555_0000_0010,
        size: 24,
        stack: 7,
    };
    let bytes = written(&[
        Record::Process(Process::default()),
        Record::Stack(stack.clone()),
        Record::Event(Event::Alloc(alloc)),
    ]);
    assert_eq!(&bytes[..32], PLACEHOLDER_PROC);
    assert_eq!(&bytes[32..], ALOC_NTVE);
    // The reader numbers stacks 0, 1, … in first-seen order.
    let back = read_all(&bytes);
    assert_eq!(
        back[1..],
        [
            Record::Stack(Stack { id: 0, ..stack }),
            Record::Event(Event::Alloc(Alloc { stack: 0, ..alloc })),
        ]
    );
}

#[test]
fn aloc_with_pcal_frame_and_empty_stack() {
    let sym = Symbol {
        function: "main".into(),
        file: "a.c".into(),
        line: 12,
    };
    let bytes = written(&[
        Record::Process(Process::default()),
        Record::Stack(Stack {
            id: 1,
            frames: vec![Frame {
                address: 0,
                symbol: Some(sym.clone()),
            }],
        }),
        Record::Stack(Stack {
            id: 2,
            frames: vec![],
        }),
        Record::Event(Event::Alloc(Alloc {
            address: 1,
            stack: 1,
            ..Default::default()
        })),
        Record::Event(Event::Alloc(Alloc {
            address: 2,
            stack: 2,
            ..Default::default()
        })),
    ]);
    let expected: &[u8] = &[
        b'A', b'L', b'O', b'C', 32, 0, 0, 0, // Allocation Record header
        1, 0, 0, 0, 0, 0, 0, 0, // Memory Address 1
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // Allocation Time 0 s 0 ns
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // extensions: size 0, thread 0
        b'F', b'R', b'A', b'M', // Frame Record
        23, 0, 0, 0, // length: 4 + (4 + 4) + (4 + 3) + 4
        b'P', b'C', b'A', b'L', // 'PCAL' Precalculated record
        4, 0, 0, 0, b'm', b'a', b'i', b'n', // Function Name: String
        3, 0, 0, 0, b'a', b'.', b'c', // Source Filename: String
        12, 0, 0, 0, // Line Number: integer, 4 bytes
        b'F', b'R', b'A', b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M', // TERM
        b'A', b'L', b'O', b'C', 32, 0, 0, 0, // second allocation
        2, 0, 0, 0, 0, 0, 0, 0, // Memory Address 2
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'F', b'R', b'A',
        b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M', // zero frames, then TERM
    ];
    assert_eq!(&bytes[32..], expected);
    let back = read_all(&bytes);
    assert_eq!(
        back[1],
        Record::Stack(Stack {
            id: 0,
            frames: vec![Frame {
                address: 0,
                symbol: Some(sym)
            }]
        })
    );
    assert_eq!(
        back[3],
        Record::Stack(Stack {
            id: 1,
            frames: vec![]
        })
    );
}

#[test]
fn ntve_followed_by_nsym_extension_frame() {
    let frame = Frame {
        address: 0x401000,
        symbol: Some(Symbol {
            function: "f".into(),
            file: "x.rs".into(),
            line: 3,
        }),
    };
    let bytes = written(&[
        Record::Process(Process::default()),
        Record::Stack(Stack {
            id: 0,
            frames: vec![frame.clone()],
        }),
        Record::Event(Event::Alloc(Alloc {
            address: 1,
            stack: 0,
            ..Default::default()
        })),
    ]);
    let frames: &[u8] = &[
        b'F', b'R', b'A', b'M', 12, 0, 0, 0, b'N', b'T', b'V', b'E', // Native Frame
        0x00, 0x10, 0x40, 0, 0, 0, 0, 0, // pointer 0x401000
        b'F', b'R', b'A', b'M', // Frame Record, extension subtype
        21, 0, 0, 0, // length: 4 + (4 + 1) + (4 + 4) + 4
        b'N', b'S', b'Y', b'M', // 'NSYM': symbol of the NTVE just before
        1, 0, 0, 0, b'f', // function, laid out as PCAL's Function Name
        4, 0, 0, 0, b'x', b'.', b'r', b's', // source file
        3, 0, 0, 0, // line
        b'F', b'R', b'A', b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M', // TERM
    ];
    assert_eq!(&bytes[32 + 8 + 32..], frames);
    assert_eq!(
        read_all(&bytes)[1],
        Record::Stack(Stack {
            id: 0,
            frames: vec![frame]
        })
    );
}

#[test]
fn dalc_record() {
    let free = Free {
        time_ns: 5_000_000_007,
        thread: 42,
        address: 0x5555_0000_0010,
    };
    let bytes = written(&[
        Record::Process(Process::default()),
        Record::Event(Event::Free(free)),
    ]);
    let expected: &[u8] = &[
        b'D', b'A', b'L', b'C', // Deallocation Record, row 'Record Type'
        24, 0, 0, 0, // row 'Record Length': 8 + 12 + 4
        0x10, 0, 0, 0, 0x55, 0x55, 0, 0, // row 'Memory Address'
        5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, // extension: Timestamp 5 s 7 ns
        42, 0, 0, 0, // extension: thread id
    ];
    assert_eq!(&bytes[32..], expected);
    assert_eq!(read_all(&bytes)[1], Record::Event(Event::Free(free)));
}

#[test]
fn extension_records() {
    let records = vec![
        Record::Process(Process::default()),
        Record::Event(Event::Marker(Marker {
            time_ns: 1_700_000_000_123_456_789,
            thread: 7,
            name: "phase".into(),
        })),
        Record::Event(Event::Gc(Gc {
            time_ns: 1_000_000_002,
            objects: 3,
            bytes: 0x100,
        })),
        Record::AddressSymbol {
            address: 0x401000,
            symbol: Symbol {
                function: "main".into(),
                file: "a.c".into(),
                line: 12,
            },
        },
        Record::Info(vec![
            ("os".into(), "Linux".into()),
            ("tracer".into(), "0.1".into()),
        ]),
    ];
    let bytes = written(&records);
    let expected: &[u8] = &[
        b'M', b'A', b'R', b'K', // marker
        25, 0, 0, 0, // 12 + 4 + (4 + 5)
        0x00, 0xf1, 0x53, 0x65, 0, 0, 0, 0, // 1_700_000_000 s = 0x6553f100
        0x15, 0xcd, 0x5b, 0x07, // 123_456_789 ns = 0x075bcd15
        7, 0, 0, 0, // thread
        5, 0, 0, 0, b'p', b'h', b'a', b's', b'e', // name
        b'G', b'C', b'O', b'L', // garbage collection
        28, 0, 0, 0, // 12 + 8 + 8
        1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, // 1 s 2 ns
        3, 0, 0, 0, 0, 0, 0, 0, // objects
        0, 1, 0, 0, 0, 0, 0, 0, // bytes 0x100
        b'A', b'S', b'Y', b'M', // address symbol
        27, 0, 0, 0, // 8 + (4 + 4) + (4 + 3) + 4
        0x00, 0x10, 0x40, 0, 0, 0, 0, 0, // address
        4, 0, 0, 0, b'm', b'a', b'i', b'n', // function
        3, 0, 0, 0, b'a', b'.', b'c', // file
        12, 0, 0, 0, // line
        b'I', b'N', b'F', b'O', // host information
        36, 0, 0, 0, // 4 + (4 + 2 + 4 + 5) + (4 + 6 + 4 + 3)
        2, 0, 0, 0, // pair count
        2, 0, 0, 0, b'o', b's', 5, 0, 0, 0, b'L', b'i', b'n', b'u', b'x', 6, 0, 0, 0, b't', b'r',
        b'a', b'c', b'e', b'r', 3, 0, 0, 0, b'0', b'.', b'1',
    ];
    assert_eq!(&bytes[32..], expected);
    assert_eq!(read_all(&bytes), records);
}

#[test]
fn sysc_extension_record() {
    let full = Syscall {
        number: 257,
        result: -1,
        errno: Some(2),
        thread: Some(42),
        time_ns: Some(5_000_000_007),
        duration_ns: Some(1500),
        args: vec![
            SyscallArg::Fd(-100),
            SyscallArg::Path(b"/etc/x".to_vec()),
            SyscallArg::Flags(0x80000),
        ],
    };
    let bare = Syscall {
        number: 0,
        result: 5,
        errno: None,
        thread: None,
        time_ns: None,
        duration_ns: None,
        args: vec![
            SyscallArg::Int(i64::MIN),
            SyscallArg::Buffer {
                len: 10,
                data: b"ab".to_vec(),
            },
            SyscallArg::Pointer(0x7ffc_0000),
            SyscallArg::Unknown {
                tag: 9,
                raw: vec![1, 2],
            },
        ],
    };
    let records = vec![
        Record::Process(Process::default()),
        Record::Event(Event::Syscall(full)),
        Record::Event(Event::Syscall(bare)),
    ];
    let bytes = written(&records);
    let expected: &[u8] = &[
        b'S', b'Y', b'S', b'C', // extension record SYSC
        77, 0, 0, 0, // 4 + 8 + 4 + 4 + 12 + 8 + 4 + (1+4+4) + (1+4+6) + (1+4+8)
        0x01, 0x01, // number 257 (u16)
        0x0f, 0, // presence: errno | thread | time | duration; reserved 0
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // result -1 (i64)
        2, 0, 0, 0, // errno 2
        42, 0, 0, 0, // thread 42
        5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, // Timestamp 5 s 7 ns
        0xdc, 0x05, 0, 0, 0, 0, 0, 0, // duration 1500 ns
        3, 0, 0, 0, // 3 arguments
        3, 4, 0, 0, 0, 0x9c, 0xff, 0xff, 0xff, // kind 3 fd, 4 bytes, -100
        4, 6, 0, 0, 0, b'/', b'e', b't', b'c', b'/', b'x', // kind 4 path, 6 bytes
        2, 8, 0, 0, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, // kind 2 flags, 0x80000
        b'S', b'Y', b'S', b'C', //
        66, 0, 0, 0, // 4 + 8 + 4 + (1+4+8) + (1+4+10) + (1+4+8) + (1+4+4)
        0, 0, 0, 0, // number 0, no optional field, reserved
        5, 0, 0, 0, 0, 0, 0, 0, // result 5
        4, 0, 0, 0, // 4 arguments
        1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, // kind 1 int, i64::MIN
        5, 10, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, b'a',
        b'b', // kind 5 buffer: length 10, data "ab"
        6, 8, 0, 0, 0, 0, 0, 0xfc, 0x7f, 0, 0, 0, 0, // kind 6 pointer 0x7ffc0000
        7, 4, 0, 0, 0, 9, 0, 1, 2, // kind 7 unknown: tag 9, raw 01 02
    ];
    assert_eq!(&bytes[32..], expected);
    assert_eq!(read_all(&bytes), records);
}

#[test]
fn allocation_naming_an_undefined_stack_is_refused() {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    let e = w
        .encode(&Record::Event(Event::Alloc(Alloc {
            stack: 9,
            ..Default::default()
        })))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    w.into_inner().unwrap();
    assert_eq!(
        out, PLACEHOLDER_PROC,
        "nothing but the leading PROC was written"
    );
}

#[test]
fn oversized_record_is_refused_and_leaves_the_file_consistent() {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    let big = "x".repeat(dumpalloc::MAX_RECORD_LEN as usize);
    let e = w
        .encode(&Record::Thread(Thread { tid: 1, name: big }))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    w.encode(&Record::Thread(Thread {
        tid: 2,
        name: "ok".into(),
    }))
    .unwrap();
    w.into_inner().unwrap();
    assert_eq!(
        read_all(&out)[1],
        Record::Thread(Thread {
            tid: 2,
            name: "ok".into()
        })
    );
}

// ---- reading files that only follow the document ----

/// A file with the document's fields only: PROC, OBJE, ALOC (no size),
/// NTVE/PCAL/TERM frames, DALC (no time).
const DOCUMENT_ONLY: &[u8] = &[
    b'P', b'R', b'O', b'C', 9, 0, 0, 0, // Process Record, length 4 + 5
    1, 0, 0, 0, // Process ID 1
    1, 0, 0, 0, b'a', // Process Name "a"
    b'O', b'B', b'J', b'E', 5, 0, 0, 0, // Object Record, length 4 + 1
    1, 0, 0, 0, b'b', // Object Name "b"
    b'A', b'L', b'O', b'C', 20, 0, 0, 0, // Allocation Record, length 8 + 12
    0, 0x20, 0, 0, 0, 0, 0, 0, // Memory Address 0x2000
    9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, // Allocation Time 9 s 1 ns
    b'F', b'R', b'A', b'M', 12, 0, 0, 0, b'N', b'T', b'V', b'E', 0x34, 0x12, 0, 0, 0, 0, 0, 0,
    b'F', b'R', b'A', b'M', 17, 0, 0, 0, b'P', b'C', b'A', b'L', // PCAL, 4 + 4 + (4 + 1) + 4
    0, 0, 0, 0, // Function Name ""
    1, 0, 0, 0, b'c', // Source Filename "c"
    0, 0, 0, 0, // Line Number 0
    b'F', b'R', b'A', b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M', b'D', b'A', b'L', b'C', 8, 0, 0,
    0, // Deallocation Record, length 8
    0, 0x20, 0, 0, 0, 0, 0, 0, // Memory Address 0x2000
];

#[test]
fn document_only_file_reads_with_unknown_extensions_as_zero() {
    assert_eq!(
        read_all(DOCUMENT_ONLY),
        vec![
            Record::Process(Process {
                pid: 1,
                executable: "a".into(),
                ..Default::default()
            }),
            Record::Object(Object {
                path: "b".into(),
                load_address: 0,
                size: 0
            }),
            Record::Stack(Stack {
                id: 0,
                frames: vec![
                    Frame {
                        address: 0x1234,
                        symbol: None
                    },
                    Frame {
                        address: 0,
                        symbol: Some(Symbol {
                            function: String::new(),
                            file: "c".into(),
                            line: 0
                        })
                    },
                ],
            }),
            Record::Event(Event::Alloc(Alloc {
                time_ns: 9_000_000_001,
                thread: 0,
                address: 0x2000,
                size: 0,
                stack: 0
            })),
            Record::Event(Event::Free(Free {
                time_ns: 0,
                thread: 0,
                address: 0x2000
            })),
        ]
    );
}

#[test]
fn unknown_records_subtypes_and_trailing_fields_are_skipped() {
    let bytes: &[u8] = &[
        b'P', b'R', b'O', b'C', 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, b'a', // PROC pid 1 "a"
        b'Z', b'Z', b'Z', b'Z', 3, 0, 0, 0, 1, 2, 3, // unknown record type, skipped by length
        b'A', b'L', b'O', b'C', 36, 0, 0, 0, // ALOC with 4 bytes past the known extensions
        1, 0, 0, 0, 0, 0, 0, 0, // address 1
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // time 0
        8, 0, 0, 0, 0, 0, 0, 0, // size 8
        5, 0, 0, 0, // thread 5
        0xde, 0xad, 0xbe, 0xef, // a future field: skipped
        b'F', b'R', b'A', b'M', 6, 0, 0, 0, b'Q', b'Q', b'Q', b'Q', 0, 0, // unknown subtype
        b'Y', b'Y', b'Y', b'Y', 0, 0, 0, 0, // unknown record inside a stack: skipped
        b'F', b'R', b'A', b'M', 13, 0, 0, 0, b'N', b'T', b'V', b'E', 7, 0, 0, 0, 0, 0, 0, 0,
        0xff, // NTVE + 1 extra byte
        b'F', b'R', b'A', b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M',
    ];
    let records = read_all(bytes);
    assert_eq!(records.len(), 3);
    assert_eq!(
        records[1],
        Record::Stack(Stack {
            id: 0,
            frames: vec![Frame {
                address: 7,
                symbol: None
            }]
        })
    );
    assert_eq!(
        records[2],
        Record::Event(Event::Alloc(Alloc {
            time_ns: 0,
            thread: 5,
            address: 1,
            size: 8,
            stack: 0
        }))
    );
}

#[test]
fn identical_stacks_are_interned_by_content() {
    // Two ALOCs with the same frames (written under different stack ids) and
    // one with different frames: ids 0, 0, 1.
    let f = |a| Frame {
        address: a,
        symbol: None,
    };
    let bytes = written(&[
        Record::Stack(Stack {
            id: 100,
            frames: vec![f(1), f(2)],
        }),
        Record::Stack(Stack {
            id: 200,
            frames: vec![f(1), f(2)],
        }),
        Record::Stack(Stack {
            id: 300,
            frames: vec![f(2), f(1)],
        }),
        Record::Event(Event::Alloc(Alloc {
            address: 1,
            stack: 200,
            ..Default::default()
        })),
        Record::Event(Event::Alloc(Alloc {
            address: 2,
            stack: 100,
            ..Default::default()
        })),
        Record::Event(Event::Alloc(Alloc {
            address: 3,
            stack: 300,
            ..Default::default()
        })),
    ]);
    let ids: Vec<String> = read_all(&bytes)
        .iter()
        .filter_map(|r| match r {
            Record::Stack(s) => Some(format!("S{}", s.id)),
            Record::Event(Event::Alloc(a)) => Some(format!("A{}", a.stack)),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["S0", "A0", "A0", "S1", "A1"]);
}

// ---- malformed input: one typed error at the right offset ----

#[test]
fn truncated_header_is_reported_at_end_of_file() {
    let mut bytes = PROC_EXAMPLE.to_vec();
    bytes.extend_from_slice(b"DAL"); // 3 bytes of a header
    let (ok, e) = read_err(&bytes);
    assert_eq!(ok.len(), 1);
    assert!(
        matches!(e, FormatError::Truncated { offset: 54, .. }),
        "{e}"
    );
}

#[test]
fn truncated_body_and_stack_are_reported_at_end_of_file() {
    let mut file = PLACEHOLDER_PROC.to_vec();
    file.extend_from_slice(&ALOC_NTVE);
    for cut in 33..file.len() {
        let (ok, e) = read_err(&file[..cut]);
        assert_eq!(
            ok,
            vec![Record::Process(Process::default())],
            "cut at {cut}"
        );
        assert!(
            matches!(e, FormatError::Truncated { .. }),
            "cut at {cut}: {e}"
        );
        assert_eq!(e.offset(), cut as u64, "cut at {cut}: {e}");
    }
}

#[test]
fn absurd_length_on_a_known_record_is_rejected_at_the_length_field() {
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'A', b'L', b'O', b'C', 0xff, 0xff, 0xff, 0xff]);
    let (_, e) = read_err(&bytes);
    assert!(matches!(e, FormatError::Invalid { offset: 36, .. }), "{e}");
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'O', b'B', b'J', b'E', 0x01, 0x00, 0x00, 0x01]); // 16 MiB + 1
    let (_, e) = read_err(&bytes);
    assert!(matches!(e, FormatError::Invalid { offset: 36, .. }), "{e}");
}

#[test]
fn absurd_length_on_an_unknown_record_is_a_truncation() {
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'X', b'X', b'X', b'X', 0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
    let (_, e) = read_err(&bytes);
    assert!(
        matches!(e, FormatError::Truncated { offset: 43, .. }),
        "{e}"
    );
}

#[test]
fn string_longer_than_its_record_is_rejected() {
    // OBJE of length 8 whose string claims 100 bytes.
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[
        b'O', b'B', b'J', b'E', 8, 0, 0, 0, 100, 0, 0, 0, b'a', b'b', b'c', b'd',
    ]);
    let (_, e) = read_err(&bytes);
    // The string's bytes would start at 32 + 8 + 4.
    assert!(matches!(e, FormatError::Invalid { offset: 44, .. }), "{e}");
}

#[test]
fn bad_type_code_nanoseconds_and_frame_order_are_rejected() {
    // Non-printable type code.
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[0, 1, 2, 3, 0, 0, 0, 0]);
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 32, .. }
    ));

    // DALC whose nanoseconds are 1e9.
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'D', b'A', b'L', b'C', 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // seconds
    bytes.extend_from_slice(&1_000_000_000u32.to_le_bytes()); // nanoseconds
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 56, .. }
    ));

    // FRAM with no ALOC before it.
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'F', b'R', b'A', b'M', 4, 0, 0, 0, b'T', b'E', b'R', b'M']);
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 32, .. }
    ));

    // A DALC inside an ALOC's stack (before TERM).
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&ALOC_NTVE[..80]); // ALOC (40) + two NTVE frames (20 each)
    bytes.extend_from_slice(&[b'D', b'A', b'L', b'C', 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 112, .. }
    ));

    // NSYM as the first frame.
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&ALOC_NTVE[..40]); // ALOC alone
    bytes.extend_from_slice(&[b'F', b'R', b'A', b'M', 16, 0, 0, 0, b'N', b'S', b'Y', b'M']);
    bytes.extend_from_slice(&[0; 12]); // "", "", line 0
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 80, .. }
    ));
}

#[test]
fn time_beyond_u64_nanoseconds_is_rejected() {
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'D', b'A', b'L', b'C', 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&18_446_744_074u64.to_le_bytes()); // one second past 2^64 ns
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 48, .. }
    ));
    // u64::MAX nanoseconds itself is representable and round-trips.
    let free = Free {
        time_ns: u64::MAX,
        thread: u32::MAX,
        address: u64::MAX,
    };
    let back = read_all(&written(&[Record::Event(Event::Free(free))]));
    assert_eq!(back[1], Record::Event(Event::Free(free)));
}

#[test]
fn errors_end_the_iteration_and_name_the_problem() {
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'A', b'L', b'O', b'C', 0xff, 0xff, 0xff, 0xff]);
    let mut r = Reader::new(&bytes[..]);
    assert!(r.next().unwrap().is_ok());
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(
        e.to_string(),
        "byte 36: expected a 'ALOC' record length of at most 4096, found 4294967295"
    );
    assert!(r.next().is_none());
}

#[test]
fn records_straddling_the_input_buffer_decode_the_same() {
    // A reader fed one byte per read call takes the copying path for every
    // record; it must agree with the in-place path.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }
    let mut file = PROC_EXAMPLE.to_vec();
    file.extend_from_slice(&ALOC_NTVE);
    file.extend_from_slice(&DOCUMENT_ONLY[17..]);
    let direct = read_all(&file);
    let trickled: Vec<Record> = Reader::new(Trickle(&file)).map(|r| r.unwrap()).collect();
    assert_eq!(direct.len(), 7); // PROC, Stack+Alloc, OBJE, Stack+Alloc, Free
    assert_eq!(direct, trickled);
}

#[test]
fn sysc_unknown_argument_kind_and_presence_bit_are_rejected() {
    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'S', b'Y', b'S', b'C', 22, 0, 0, 0]); // at 32, body at 40
    bytes.extend_from_slice(&[0, 0, 0, 0]); // number 0, no optional field
    bytes.extend_from_slice(&[0; 8]); // result 0
    bytes.extend_from_slice(&[1, 0, 0, 0]); // 1 argument
    bytes.extend_from_slice(&[8, 1, 0, 0, 0, 0]); // kind 8 (unknown) at 56
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 56, .. }
    ));

    let mut bytes = PLACEHOLDER_PROC.to_vec();
    bytes.extend_from_slice(&[b'S', b'Y', b'S', b'C', 16, 0, 0, 0]);
    bytes.extend_from_slice(&[0, 0, 0x10, 0]); // presence bit 0x10 is not defined (at 42)
    bytes.extend_from_slice(&[0; 12]);
    assert!(matches!(
        read_err(&bytes).1,
        FormatError::Invalid { offset: 42, .. }
    ));
}
