//! 100,000+ mutated files from valid seeds (ours, big-endian ours, the original
//! tool's sample): every one must end in records or one error — no panic, no
//! hang — and no single allocation may exceed max(4 × file size, 1 MiB), which a
//! counting global allocator in this test binary checks.

use format_writers::model::{Event, Process, Record, Syscall, SyscallArg};
use format_writers::tlv::{ByteOrder, Reader, Writer};

mod common;
use common::{largest, reset_largest};

/// xorshift64*: deterministic, seeded, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn ours(order: ByteOrder) -> Vec<u8> {
    let mut w = Writer::with_byte_order(Vec::new(), order);
    let p = Process {
        pid: 42,
        executable: "/usr/bin/prog".into(),
        command_line: vec!["prog".into(), "--flag".into(), "x".repeat(300)],
        start_time_ns: 1_700_000_000_123_456_789,
    };
    w.write_record(&Record::Process(p)).unwrap();
    let uname = ["Linux", "h", "6.1", "#1", "x86_64", "(none)"];
    let mut info: Vec<(String, String)> = format_writers::tlv::UNAME_KEYS
        .iter()
        .zip(uname)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    info.push(("tracer_version".into(), "0.1".into()));
    info.push(("k".into(), "v".into()));
    w.write_record(&Record::Info(info)).unwrap();
    for i in 0..6u16 {
        let call = Syscall {
            number: i,
            result: -2,
            errno: (i % 2 == 0).then_some(2),
            thread: (i % 3 == 0).then_some(7),
            time_ns: Some(1_700_000_000_123_456_789 + u64::from(i)),
            duration_ns: Some(u64::from(i) << 30),
            args: vec![
                SyscallArg::Fd(-100),
                SyscallArg::Path(b"/etc/hosts".to_vec()),
                SyscallArg::Flags(0x80000),
                SyscallArg::Int(1 << 40),
                SyscallArg::Buffer {
                    len: 9,
                    data: b"abc".to_vec(),
                },
                SyscallArg::Buffer {
                    len: 3,
                    data: b"xyz".to_vec(),
                },
                SyscallArg::Buffer {
                    len: 1 << 33,
                    data: b"q".to_vec(),
                },
                SyscallArg::Pointer(0xdead_beef),
                SyscallArg::Unknown {
                    tag: 0x0200,
                    raw: vec![1, 2],
                },
            ],
        };
        w.write_record(&Record::Event(Event::Syscall(call)))
            .unwrap();
    }
    w.finish_into_inner().unwrap()
}

fn sample() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/syscall-capture-ls.dat"
    ))
    .unwrap()
}

const ABSURD: [u32; 8] = [
    0,
    3,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffc,
    u32::MAX,
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut f = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        match rng.below(7) {
            0 => {
                let i = rng.below(f.len());
                if let Some(b) = f.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = rng.below(f.len());
                if let Some(b) = f.get_mut(i) {
                    *b = rng.next() as u8;
                }
            }
            2 => {
                let n = rng.below(f.len() + 1);
                f.truncate(n);
            }
            3 => {
                let at = rng.below(f.len() + 1);
                let n = 1 + rng.below(16);
                let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                f.splice(at..at, ins);
            }
            4 => {
                // An absurd 32- or 16-bit length at an aligned offset.
                let at = rng.below(f.len() / 2 + 1) * 2;
                let v = ABSURD[rng.below(ABSURD.len())];
                let b = if rng.below(2) == 0 {
                    v.to_le_bytes().to_vec()
                } else {
                    (v as u16).to_le_bytes().to_vec()
                };
                for (k, x) in b.into_iter().enumerate() {
                    if let Some(y) = f.get_mut(at + k) {
                        *y = x;
                    }
                }
            }
            5 => {
                let a = rng.below(f.len());
                let n = rng.below(64).min(f.len() - a.min(f.len()));
                f.drain(a..a + n);
            }
            _ => {
                // Duplicate a chunk elsewhere.
                let a = rng.below(f.len());
                let n = rng.below(256).min(f.len() - a.min(f.len()));
                let chunk = f[a..a + n].to_vec();
                let at = rng.below(f.len() + 1);
                f.splice(at..at, chunk);
            }
        }
    }
    f
}

#[test]
fn mutated_files_error_or_parse_without_panic_or_big_allocations() {
    let seeds = [ours(ByteOrder::Little), ours(ByteOrder::Big), sample()];
    for s in &seeds {
        assert!(Reader::new(&s[..]).all(|r| r.is_ok()), "seeds are valid");
    }
    let mut rng = Rng(0x5eed_0004_7e57_0001);
    let (mut ok, mut bad) = (0u32, 0u32);
    let iterations = 100_000;
    for i in 0..iterations {
        let file = mutate(&mut rng, &seeds[i % seeds.len()]);
        reset_largest();
        let mut records = 0usize;
        let mut failed = false;
        for r in Reader::new(&file[..]) {
            records += 1;
            if r.is_err() {
                failed = true;
            }
            // Every record costs at least 8 bytes of file: more means a loop.
            assert!(records <= file.len() / 8 + 3, "iteration {i}: no progress");
        }
        let largest = largest();
        let bound = (4 * file.len()).max(1 << 20);
        assert!(
            largest <= bound,
            "iteration {i}: an allocation of {largest} bytes for a file of {}",
            file.len()
        );
        if failed {
            bad += 1;
        } else {
            ok += 1;
        }
    }
    // Both outcomes occur: the mutations are neither all harmless nor all fatal.
    assert!(ok > 1000 && bad > 1000, "ok {ok}, errors {bad}");
}

#[test]
fn absurd_lengths_in_a_tiny_file_allocate_little() {
    // Header, then a variable header claiming 4 GiB - 1 with one IE claiming 65,535.
    let mut f = vec![0x78, 0x06, 0x17, 0xa5, 1, 0, 0, 0];
    f.extend_from_slice(&[0; 20]);
    f.extend_from_slice(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 0xff, 0xff, b'a']);
    reset_largest();
    let r: Vec<_> = Reader::new(&f[..]).collect();
    assert!(r.len() == 1 && r[0].is_err());
    // The 64 KiB read buffer is the largest thing allocated.
    assert!(largest() <= 1 << 16);
}
