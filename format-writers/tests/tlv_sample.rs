//! `tests/data/syscall-capture-ls.dat`, written by the original tool while tracing
//! `ls`, decodes completely. Every expected figure below was read off `xxd` of the
//! file by hand (offsets given), not taken from our reader's output.

use format_writers::model::{Event, Record, Syscall, SyscallArg};
use format_writers::tlv::Reader;

fn sample() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/syscall-capture-ls.dat"
    ))
    .expect("the sample file")
}

/// Header seconds at 0x0c: `5e 2e 02 6b 00 00 00 00` = 0x6b022e5e = 1_795_305_054.
const BASE_NS: u64 = 1_795_305_054 * 1_000_000_000;
/// Fast-clock reference at 0x14: `79 96 17 0d db 00 00 00` = 0xdb0d179679.
const REFERENCE: u64 = 0xdb_0d17_9679;

fn decode() -> (Vec<Record>, Vec<Syscall>) {
    let records: Vec<Record> = Reader::new(&sample()[..])
        .collect::<Result<_, _>>()
        .expect("the sample decodes without error");
    let calls = records
        .iter()
        .filter_map(|r| match r {
            Record::Event(Event::Syscall(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    (records, calls)
}

#[test]
fn header_and_uname() {
    let (records, calls) = decode();
    assert_eq!(calls.len(), 85, "85 syscall segments");
    // Process, Info, then the 85 calls: nothing else.
    assert_eq!(records.len(), 87);
    let Record::Process(p) = &records[0] else {
        panic!("first record {:?}", records[0])
    };
    assert_eq!(p.pid, 0x7328); // 0x08: 28 73 00 00
    assert_eq!(p.start_time_ns, BASE_NS);
    assert!(p.executable.is_empty() && p.command_line.is_empty());
    // Variable header at 0x1c: tag 1, length 0x48; IE tag 1, length 0x41 (65):
    // six NUL-terminated strings.
    let Record::Info(info) = &records[1] else {
        panic!("second record {:?}", records[1])
    };
    let expect = [
        ("sysname", "Linux"),
        ("nodename", "vm"),
        ("release", "6.18.44-fc-v595"),
        ("version", "#1 SMP PREEMPT_DYNAMIC @0"),
        ("machine", "x86_64"),
        ("domainname", "(none)"),
    ];
    let got: Vec<(&str, &str)> = info.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    assert_eq!(got, expect);
}

#[test]
fn first_openat_fails_with_enoent() {
    let (_, calls) = decode();
    // Segment at 0x6c: 02 00 00 00 | 18 00 00 00 | 01 01 0d 00 (nr 0x101 = 257,
    // flags result|timestamp|duration) | fe ff ff ff ff ff ff ff (-2)
    // | 63 42 18 0d db 00 00 00 | 00 ac 48 46.
    let c = &calls[0];
    assert_eq!(c.number, 257);
    assert_eq!(c.result, -2);
    assert_eq!(c.errno, None, "the original dialect records no errno");
    assert_eq!(c.thread, None);
    assert_eq!(c.time_ns, Some(BASE_NS + (0xdb_0d18_4263 - REFERENCE)));
    assert_eq!(c.time_ns, Some(BASE_NS + 44_010));
    // f32 0x4648ac00: exponent 0x8c - 127 = 13, (0x800000 | 0x48ac00) >> 10 = 12843.
    assert_eq!(c.duration_ns, Some(12_843));
    assert!(c.args.is_empty());
}

#[test]
fn newfstatat_without_result_reads_zero() {
    let (_, calls) = decode();
    // Segment at 0xac: length 0x10, 06 01 0c 00: nr 262, flags timestamp|duration only.
    let c = &calls[2];
    assert_eq!(c.number, 262);
    assert_eq!(c.result, 0);
    assert_eq!(c.time_ns, Some(BASE_NS + (0xdb_0d18_b597 - REFERENCE)));
    // 00 40 94 44 = 0x44944000: exponent 0x89 - 127 = 10,
    // (0x800000 | 0x144000) >> 13 = 0x4a2 = 1186.
    assert_eq!(c.duration_ns, Some(1186));
}

#[test]
fn read_of_2996_bytes() {
    let (_, calls) = decode();
    // Segment at 0xc4: length 0x0be0 (3040); 00 00 0d 00: nr 0 (read); result
    // b4 0b 00.. = 2996; timestamp eb be 18 0d db 00 00 00; 00 00 17 45.
    let c = &calls[3];
    assert_eq!(c.number, 0);
    assert_eq!(c.result, 2996);
    assert_eq!(c.time_ns, Some(BASE_NS + (0xdb_0d18_beeb - REFERENCE)));
    // 0x45170000: exponent 11, (0x800000 | 0x170000) >> 12 = 0x970 = 2416.
    assert_eq!(c.duration_ns, Some(2416));
    assert_eq!(c.args.len(), 3);
    // 0xe4: 01 00 04 00 04 00 00 00 — integer IE, fd 4.
    assert_eq!(c.args[0], SyscallArg::Int(4));
    // 0xec: 02 00 b4 0b — full data IE of 2996 bytes.
    let SyscallArg::Buffer { len, data } = &c.args[1] else {
        panic!("{:?}", c.args[1])
    };
    assert_eq!(*len, 2996);
    assert_eq!(data.len(), 2996);
    assert!(data.starts_with(b"# Locale name alias data base.\n"));
    assert!(data.ends_with(b"tr_TR.ISO-8859-9\n"));
    // 0xca4: 01 00 04 00 00 10 00 00 — the count, 4096.
    assert_eq!(c.args[2], SyscallArg::Int(4096));
}

#[test]
fn ioctl_with_an_eight_byte_integer() {
    let (_, calls) = decode();
    // Segment at 0x1770: length 0x34; 10 00 0d 00: nr 16 (ioctl); result e7 ff.. = -25.
    let c = &calls[74];
    assert_eq!(c.number, 16);
    assert_eq!(c.result, -25);
    assert_eq!(c.time_ns, Some(BASE_NS + (0xdb_0d1d_d053 - REFERENCE)));
    // 0x44c5e000: exponent 10, 0xc5e000 >> 13 = 0x62f = 1583.
    assert_eq!(c.duration_ns, Some(1583));
    assert_eq!(
        c.args,
        vec![
            SyscallArg::Int(1),                // 01 00 04 00 01 00 00 00
            SyscallArg::Int(0x5401),           // 01 00 04 00 01 54 00 00 (TCGETS)
            SyscallArg::Int(0x7fff_d37e_f860), // 01 00 08 00 60 f8 7e d3 ff 7f 00 00
        ]
    );
}

#[test]
fn final_write_and_closes() {
    let (_, calls) = decode();
    // Segment at 0x186c: length 0x44; 01 00 0d 00: write; result 0x15 = 21.
    let c = &calls[82];
    assert_eq!(c.number, 1);
    assert_eq!(c.result, 21);
    // 0x46a61a00: exponent 14, 0xa61a00 >> 9 = 0x530d = 21261.
    assert_eq!(c.duration_ns, Some(21_261));
    assert_eq!(
        c.args,
        vec![
            SyscallArg::Int(1),
            SyscallArg::Buffer {
                len: 21,
                data: b"file_format.md\nnotes\n".to_vec(),
            },
            SyscallArg::Int(21),
        ]
    );
    // Then close(1) and close(2) (0x18b8, 0x18d8), and the file ends at 0x18f8.
    assert_eq!(
        (calls[83].number, &calls[83].args[..]),
        (3, &[SyscallArg::Int(1)][..])
    );
    assert_eq!(
        (calls[84].number, &calls[84].args[..]),
        (3, &[SyscallArg::Int(2)][..])
    );
    assert_eq!(sample().len(), 0x18f8);
}
