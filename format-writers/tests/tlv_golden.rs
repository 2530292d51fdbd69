//! Byte-exact records derived by hand from the format document
//! (`seeds/004_…`: "Header", "TLV schematic", "Captured System Call"), plus the
//! decisions of `docs/formats/syscall-tlv.md` for what the document leaves open
//! (variable-header IE tags, argument IE tags, 64-bit clock fields). Each line of
//! expected bytes names the diagram row it comes from.

use format_writers::model::{Event, Process, Record, Syscall, SyscallArg};
use format_writers::tlv::{ByteOrder, Reader, Writer};
use format_writers::FormatError;

/// 2023-11-14T22:13:20.123456789Z.
const START: u64 = 1_700_000_000_123_456_789;

fn process() -> Process {
    Process {
        pid: 0x1234,
        executable: "/bin/ls".into(),
        command_line: vec!["ls".into(), "-l".into()],
        start_time_ns: START,
    }
}

fn info() -> Vec<(String, String)> {
    [
        ("sysname", "Linux"),
        ("nodename", "host"),
        ("release", "6.1"),
        ("version", "#1"),
        ("machine", "x86_64"),
        ("domainname", "(none)"),
        ("tracer_version", "0.1.0"),
        ("cpu", "x"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A call with every optional field and each argument element type.
fn full_call() -> Syscall {
    Syscall {
        number: 257,
        result: -2,
        errno: Some(2),
        thread: Some(0x4321),
        time_ns: Some(START + 1000),
        duration_ns: Some(12_843),
        args: vec![
            SyscallArg::Fd(-100),
            SyscallArg::Path(b"/etc/hosts".to_vec()),
            SyscallArg::Flags(0x80000),
            SyscallArg::Int(-1),
            SyscallArg::Int(1 << 40),
            SyscallArg::Buffer {
                len: 5,
                data: b"hello".to_vec(),
            },
            SyscallArg::Buffer {
                len: 4096,
                data: b"ab".to_vec(),
            },
            SyscallArg::Buffer {
                len: 1 << 33,
                data: b"z".to_vec(),
            },
            SyscallArg::Pointer(0x7fff_0000),
            SyscallArg::Unknown {
                tag: 0x0200,
                raw: vec![1, 2, 3],
            },
        ],
    }
}

fn write(order: ByteOrder, records: &[Record]) -> Vec<u8> {
    let mut w = Writer::with_byte_order(Vec::new(), order);
    for r in records {
        w.write_record(r).unwrap();
    }
    w.finish_into_inner().unwrap()
}

#[rustfmt::skip]
fn golden_header_le() -> Vec<u8> {
    let mut b = vec![
        0x78, 0x06, 0x17, 0xa5,                         // Magic Number row: the literal byte sequence
        0x01, 0x00, 0x00, 0x00,                         // Version 1 | Flags (B0 = 0: little-endian) | Unused
        0x34, 0x12, 0x00, 0x00,                         // Process ID 0x1234
        0x00, 0xf1, 0x53, 0x65, 0x00, 0x00, 0x00, 0x00, // Timestamp (seconds since epoch): 1_700_000_000 = 0x6553f100
        0x00, 0x00, 0x2a, 0x36, 0xfe, 0x9c, 0x97, 0x17, // Timestamp (fast clock reference): 1_700_000_000 × 10^9 = 0x17979cfe362a0000
        0x01, 0x00, 0x00, 0x00,                         // Variable Header Part Tag: 1
        0x64, 0x00, 0x00, 0x00,                         // Variable Header Part Length: 100, covers the IEs below
        // IE (TLV schematic: Tag 2 bytes | Length 2 bytes | value | padding to 4)
        0x02, 0x00, 0x07, 0x00, b'/', b'b', b'i', b'n', b'/', b'l', b's', 0x00, // executable, 7 bytes + 1 pad
        0x03, 0x00, 0x02, 0x00, b'l', b's', 0x00, 0x00,                         // argv[0], 2 + 2 pad
        0x03, 0x00, 0x02, 0x00, b'-', b'l', 0x00, 0x00,                         // argv[1]
        0x06, 0x00, 0x08, 0x00, 0x15, 0xcd, 0x85, 0x3d, 0xfe, 0x9c, 0x97, 0x17, // start ns 0x17979cfe3d85cd15
        0x01, 0x00, 0x20, 0x00,                                                 // uname: 32 bytes, no pad
    ];
    b.extend_from_slice(b"Linux\0host\x006.1\0#1\0x86_64\0(none)\0");
    b.extend_from_slice(&[0x04, 0x00, 0x05, 0x00]); // tracer version, 5 bytes + 3 pad
    b.extend_from_slice(b"0.1.0\0\0\0");
    b.extend_from_slice(&[0x05, 0x00, 0x05, 0x00]); // key NUL value, 5 bytes + 3 pad
    b.extend_from_slice(b"cpu\0x\0\0\0");
    b
}

#[rustfmt::skip]
fn golden_full_call_le() -> Vec<u8> {
    let mut b = vec![
        0x01, 0x00, 0x00, 0x00,                         // Tag (0x0001), a full 32-bit row
        0x94, 0x00, 0x00, 0x00,                         // Length: 32 fixed + 116 of IEs = 148
        0x01, 0x01, 0x0f, 0x00,                         // System Call Num 257 | Flags Th|Ts|D|E | Unused
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // Return value -2 (two rows)
        0x21, 0x43, 0x00, 0x00,                         // Process / Thread ID 0x4321 (B0)
        0xfd, 0xd0, 0x85, 0x3d, 0xfe, 0x9c, 0x97, 0x17, // Entry Timestamp (B1): START + 1000 on our fast clock
        0x2b, 0x32, 0x00, 0x00,                         // In Kernel Duration (B2): 12843 ns, MSB 0
        0x02, 0x00, 0x00, 0x00,                         // Error Number (B3): ENOENT
        // Arg IEs (TLV schematic)
        0x02, 0x01, 0x04, 0x00, 0x9c, 0xff, 0xff, 0xff, // fd 0x0102: -100 (AT_FDCWD)
        0x03, 0x01, 0x0a, 0x00,                         // path 0x0103, 10 bytes + 2 pad
    ];
    b.extend_from_slice(b"/etc/hosts\0\0");
    b.extend_from_slice(&[
        0x01, 0x01, 0x08, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, // flags 0x0101: O_CLOEXEC
        0x01, 0x00, 0x04, 0x00, 0xff, 0xff, 0xff, 0xff,                         // int 1, fits i32: 4 bytes
        0x01, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, // int 1, 2^40: 8 bytes
        0x02, 0x00, 0x05, 0x00, b'h', b'e', b'l', b'l', b'o', 0x00, 0x00, 0x00, // full data 2, 5 + 3 pad
        0x03, 0x00, 0x06, 0x00, 0x00, 0x10, 0x00, 0x00, b'a', b'b', 0x00, 0x00, // partial 3: u32 4096, "ab"
        0x05, 0x01, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // partial 0x0105: u64 2^33,
        b'z', 0x00, 0x00, 0x00,                                                 //   "z" + 3 pad
        0x04, 0x01, 0x08, 0x00, 0x00, 0x00, 0xff, 0x7f, 0x00, 0x00, 0x00, 0x00, // pointer 0x0104
        0x00, 0x02, 0x03, 0x00, 0x01, 0x02, 0x03, 0x00,                         // unknown tag 0x0200, 3 + 1 pad
    ]);
    b
}

#[test]
fn header_and_variable_header_bytes() {
    let got = write(
        ByteOrder::Little,
        &[Record::Process(process()), Record::Info(info())],
    );
    assert_eq!(got, golden_header_le());
}

#[test]
fn full_syscall_bytes() {
    let got = write(
        ByteOrder::Little,
        &[
            Record::Process(process()),
            Record::Info(info()),
            Record::Event(Event::Syscall(full_call())),
        ],
    );
    let header = golden_header_le();
    assert_eq!(&got[..header.len()], &header[..]);
    assert_eq!(&got[header.len()..], &golden_full_call_le()[..]);
}

#[test]
#[rustfmt::skip]
fn minimal_syscall_and_millisecond_duration_bytes() {
    let bare = Syscall { number: 3, ..Syscall::default() };
    let slow = Syscall { number: 7, duration_ns: Some(3_000_000_000), ..Syscall::default() };
    let got = write(ByteOrder::Little, &[bare.clone().into_record(), slow.into_record()]);
    let expect_tail: &[u8] = &[
        0x01, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, // Tag 1, Length 12
        0x03, 0x00, 0x00, 0x00,                         // close, no flags
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Return value, always present
        0x01, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, // Tag 1, Length 16
        0x07, 0x00, 0x04, 0x00,                         // poll, D only
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xb8, 0x0b, 0x00, 0x80,                         // 3e9 ns ≥ 2^31: MSB 1, 3000 ms = 0xbb8
    ];
    // The header of an empty process: pid 0, seconds 0, reference 0, an empty
    // variable header (tag 1, length 0).
    let mut expect = vec![0x78, 0x06, 0x17, 0xa5, 1, 0, 0, 0];
    expect.extend_from_slice(&[0; 20]);
    expect.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    expect.extend_from_slice(expect_tail);
    assert_eq!(got, expect);
    let back = read_all(&got).unwrap();
    assert_eq!(back[1], bare.into_record());
    let Record::Event(Event::Syscall(s)) = &back[2] else { panic!() };
    assert_eq!(s.duration_ns, Some(3_000_000_000));
}

trait IntoRecord {
    fn into_record(self) -> Record;
}
impl IntoRecord for Syscall {
    fn into_record(self) -> Record {
        Record::Event(Event::Syscall(self))
    }
}

fn read_all(bytes: &[u8]) -> Result<Vec<Record>, FormatError> {
    Reader::new(bytes).collect()
}

#[test]
fn golden_bytes_decode_to_the_model() {
    let mut file = golden_header_le();
    file.extend_from_slice(&golden_full_call_le());
    let got = read_all(&file).unwrap();
    assert_eq!(
        got,
        vec![
            Record::Process(process()),
            Record::Info(info()),
            full_call().into_record()
        ]
    );
}

/// Flag B0 = 1: every multi-byte field big-endian, the magic unchanged.
#[test]
#[rustfmt::skip]
fn big_endian_file() {
    let p = Process { pid: 0x1234, start_time_ns: START, ..Process::default() };
    let call = Syscall {
        number: 0x0102,
        result: 5,
        thread: Some(9),
        time_ns: Some(START + 1000),
        args: vec![SyscallArg::Int(-100), SyscallArg::Flags(0x80000)],
        ..Syscall::default()
    };
    let expect: Vec<u8> = vec![
        0x78, 0x06, 0x17, 0xa5,                         // Magic
        0x01, 0x01, 0x00, 0x00,                         // Version 1 | Flags B0 = 1 (big-endian)
        0x00, 0x00, 0x12, 0x34,                         // Process ID
        0x00, 0x00, 0x00, 0x00, 0x65, 0x53, 0xf1, 0x00, // seconds
        0x17, 0x97, 0x9c, 0xfe, 0x36, 0x2a, 0x00, 0x00, // fast clock reference
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0c, // Variable Header Part Tag 1, Length 12
        0x00, 0x06, 0x00, 0x08, 0x17, 0x97, 0x9c, 0xfe, 0x3d, 0x85, 0xcd, 0x15, // start ns IE
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2c, // Tag 1, Length 44
        0x01, 0x02, 0x03, 0x00,                         // nr 0x0102 | Th|Ts | unused
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // Return value 5
        0x00, 0x00, 0x00, 0x09,                         // Thread 9
        0x17, 0x97, 0x9c, 0xfe, 0x3d, 0x85, 0xd0, 0xfd, // Entry timestamp
        0x00, 0x01, 0x00, 0x04, 0xff, 0xff, 0xff, 0x9c, // int -100
        0x01, 0x01, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, // flags
    ];
    let got = write(ByteOrder::Big, &[Record::Process(p.clone()), call.clone().into_record()]);
    assert_eq!(got, expect);
    assert_eq!(read_all(&expect).unwrap(), vec![Record::Process(p), call.into_record()]);
}

/// The original tool's segments (tag 2) and ours (tag 1) may share a file; the
/// filler (tag 3) and unknown segments are skipped by length.
#[test]
#[rustfmt::skip]
fn mixed_dialects_filler_and_unknown_segments() {
    let mut f = vec![0x78, 0x06, 0x17, 0xa5, 1, 0, 0, 0,
        1, 0, 0, 0,                     // pid 1
        10, 0, 0, 0, 0, 0, 0, 0,        // 10 s
        0x64, 0, 0, 0, 0, 0, 0, 0,      // reference 100 (a monotonic clock)
        1, 0, 0, 0, 0, 0, 0, 0];        // empty variable header
    f.extend_from_slice(&[3, 0, 0, 0, 5, 0, 0, 0, 9, 9, 9, 9, 9, 0, 0, 0]); // filler, 5 + 3 pad
    f.extend_from_slice(&[0x63, 0, 0, 0, 0, 0, 0, 0]);                         // unknown tag 0x63, empty
    f.extend_from_slice(&[2, 0, 0, 0, 0x14, 0, 0, 0,                           // original syscall, 20 bytes
        0x27, 0, 0x0e, 0,                                                      // getpid, thread|ts|duration
        0x05, 0, 0, 0,                                                         // thread 5
        0x6e, 0, 0, 0, 0, 0, 0, 0,                                             // ts 110 → 10 s + 10 ns
        0x00, 0x00, 0x20, 0x41]);                                              // f32 10.0
    f.extend_from_slice(&[1, 0, 0, 0, 0x0c, 0, 0, 0, 0x27, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
    let got = read_all(&f).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1], Syscall {
        number: 39, result: 0, thread: Some(5), time_ns: Some(10_000_000_010),
        duration_ns: Some(10), ..Syscall::default()
    }.into_record());
    assert_eq!(got[2], Syscall { number: 39, result: 7, ..Syscall::default() }.into_record());
}

fn first_error(bytes: &[u8]) -> FormatError {
    Reader::new(bytes).find_map(Result::err).expect("an error")
}

#[test]
fn errors_name_the_offset_and_what_was_expected() {
    let mut good = golden_header_le();
    good.extend_from_slice(&golden_full_call_le());
    let hdr = golden_header_le().len() as u64; // 128

    let mut bad = good.clone();
    bad[1] = 0;
    let e = first_error(&bad);
    assert_eq!(e.offset(), 0);
    assert!(e.to_string().contains("78 06 17 a5"), "{e}");

    let mut bad = good.clone();
    bad[4] = 2;
    let e = first_error(&bad);
    assert_eq!(e.offset(), 4);
    assert!(e.to_string().contains("version 1"), "{e}");

    // Unknown syscall flag bit B4.
    let mut bad = good.clone();
    bad[hdr as usize + 10] = 0x1f;
    let e = first_error(&bad);
    assert_eq!(e.offset(), hdr + 10);
    assert!(e.to_string().contains("flags"), "{e}");

    // The fd IE claims 0x7fff bytes: more than the segment has left (148 - 32 - 4).
    let mut bad = good.clone();
    let ie = hdr as usize + 8 + 32;
    bad[ie + 2..ie + 4].copy_from_slice(&0x7fffu16.to_le_bytes());
    let e = first_error(&bad);
    assert_eq!(e.offset(), ie as u64 + 4);
    assert!(
        e.to_string().contains("112 bytes left in the segment"),
        "{e}"
    );

    // The fd IE has 2 bytes instead of 4 (the segment stays consistent).
    let mut bad = good.clone();
    bad[ie + 2] = 2;
    bad[ie + 6..ie + 8].copy_from_slice(&[0, 0]);
    let e = first_error(&bad);
    assert_eq!(e.offset(), ie as u64);
    assert!(
        e.to_string().contains("4 bytes in argument element 0x0102"),
        "{e}"
    );

    // Cut in the middle of the syscall: truncated at the end of the input.
    let e = first_error(&good[..good.len() - 6]);
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    assert_eq!(e.offset(), good.len() as u64 - 6);

    // A segment length of 4 GiB - 1 in a small file: an error, not an allocation.
    let mut bad = good.clone();
    bad[hdr as usize + 4..hdr as usize + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(read_all(&bad).is_err());

    // After an error the reader stops.
    let mut r = Reader::new(&good[..20]);
    assert!(r.next().unwrap().is_err());
    assert!(r.next().is_none());
}

/// The worked example of `docs/formats/syscall-tlv.md` is what the writer emits.
#[test]
#[rustfmt::skip]
fn documented_worked_syscall() {
    let call = Syscall {
        number: 257,
        result: -2,
        errno: Some(2),
        thread: Some(0x4321),
        time_ns: Some(START + 1000),
        duration_ns: Some(12_843),
        args: vec![
            SyscallArg::Fd(-100),
            SyscallArg::Path(b"/etc/hosts".to_vec()),
            SyscallArg::Flags(0x80000),
        ],
    };
    let got = write(ByteOrder::Little, &[Record::Process(process()), call.into_record()]);
    let mut expect = vec![
        0x01, 0x00, 0x00, 0x00, 0x44, 0x00, 0x00, 0x00,
        0x01, 0x01, 0x0f, 0x00,
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0x21, 0x43, 0x00, 0x00,
        0xfd, 0xd0, 0x85, 0x3d, 0xfe, 0x9c, 0x97, 0x17,
        0x2b, 0x32, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00,
        0x02, 0x01, 0x04, 0x00, 0x9c, 0xff, 0xff, 0xff,
        0x03, 0x01, 0x0a, 0x00,
    ];
    expect.extend_from_slice(b"/etc/hosts\0\0");
    expect.extend_from_slice(&[0x01, 0x01, 0x08, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00]);
    assert!(got.ends_with(&expect), "{:02x?}", &got[got.len().saturating_sub(expect.len())..]);
}
