//! Corrupted dumpalloc input: 100,000+ files mutated from valid seeds by a
//! deterministic generator (bit flips, byte writes, truncations, insertions,
//! deletions, duplicated chunks, absurd length fields). Every file must end in
//! a clean parse or one error inside the file; the reader must not panic, must
//! not loop (each record consumes bytes), and must never make an allocation
//! larger than max(4 × file size, 1 MiB), measured by a counting global
//! allocator installed in this test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read;

use format_writers::dumpalloc::{Reader, Writer};
use format_writers::*;

// ---- largest single allocation, per thread ----

struct Counting;

thread_local! {
    // Const-initialised, no destructor: usable from inside the allocator.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size);
        }
    });
}

// SAFETY: every call forwards to the system allocator with the caller's
// arguments unchanged; the only addition is a thread-local counter update,
// which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn reset_largest() {
    LARGEST.with(|l| l.set(0));
}

fn largest() -> usize {
    LARGEST.with(|l| l.get())
}

// ---- deterministic generator ----

/// SplitMix64: small, fast, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

// ---- seeds ----

fn write(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w: Box<dyn TraceWriter> = Box::new(Writer::new(&mut out));
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let sym = |f: &str| Symbol {
        function: f.into(),
        file: "src/lib.rs".into(),
        line: 17,
    };
    let every_record = write(&[
        Record::Process(Process {
            pid: 4242,
            executable: "/usr/bin/example".into(),
            command_line: vec!["example".into(), "--flag".into()],
            start_time_ns: 1_700_000_000_000_000_000,
        }),
        Record::Info(vec![
            ("os".into(), "Linux".into()),
            ("arch".into(), "x86_64".into()),
        ]),
        Record::Object(Object {
            path: "/usr/lib/libc.so.6".into(),
            load_address: 0x7f00_0000_0000,
            size: 0x20_0000,
        }),
        Record::Thread(Thread {
            tid: 4243,
            name: "worker".into(),
        }),
        Record::Stack(Stack {
            id: 1,
            frames: vec![
                Frame {
                    address: 0x401000,
                    symbol: None,
                },
                Frame {
                    address: 0x401100,
                    symbol: Some(sym("inner")),
                },
                Frame {
                    address: 0,
                    symbol: Some(sym("interpreted")),
                },
            ],
        }),
        Record::Stack(Stack {
            id: 2,
            frames: vec![],
        }),
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1_700_000_000_000_000_500,
            thread: 4243,
            address: 0x1000,
            size: 64,
            stack: 1,
        })),
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1_700_000_000_000_000_600,
            thread: 4242,
            address: 0x2000,
            size: 0,
            stack: 2,
        })),
        Record::Event(Event::Marker(Marker {
            time_ns: 1_700_000_000_000_000_700,
            thread: 4243,
            name: "phase".into(),
        })),
        Record::Event(Event::Gc(Gc {
            time_ns: 1_700_000_000_000_000_800,
            objects: 5,
            bytes: 500,
        })),
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1_700_000_000_000_000_900,
            thread: 4243,
            address: 0x3000,
            size: 8,
            stack: 1,
        })),
        Record::AddressSymbol {
            address: 0x401000,
            symbol: sym("outer"),
        },
        Record::Event(Event::Syscall(Syscall {
            number: 257,
            result: 3,
            errno: None,
            thread: Some(4243),
            time_ns: Some(1_700_000_000_000_000_950),
            duration_ns: Some(1200),
            args: vec![
                SyscallArg::Fd(-100),
                SyscallArg::Path(b"/etc/hosts".to_vec()),
                SyscallArg::Flags(0x80000),
                SyscallArg::Buffer {
                    len: 100,
                    data: b"abc".to_vec(),
                },
                SyscallArg::Unknown {
                    tag: 9,
                    raw: vec![1],
                },
            ],
        })),
        Record::Event(Event::Free(Free {
            time_ns: 1_700_000_000_000_001_000,
            thread: 4243,
            address: 0x1000,
        })),
    ]);

    // Many small events over a handful of stacks.
    let mut busy = vec![Record::Process(Process {
        pid: 1,
        executable: "busy".into(),
        ..Default::default()
    })];
    for s in 0..4u64 {
        busy.push(Record::Stack(Stack {
            id: s,
            frames: (0..s + 1)
                .map(|i| Frame {
                    address: 0x400000 + i * 16 + s,
                    symbol: None,
                })
                .collect(),
        }));
    }
    for i in 0..24u64 {
        busy.push(Record::Event(Event::Alloc(Alloc {
            time_ns: i,
            thread: (i % 3) as u32,
            address: 0x10_0000 + i * 32,
            size: i,
            stack: i % 4,
        })));
        if i % 2 == 1 {
            busy.push(Record::Event(Event::Free(Free {
                time_ns: i,
                thread: 0,
                address: 0x10_0000 + (i - 1) * 32,
            })));
        }
    }
    let busy = write(&busy);

    // Only the document's fields (no extensions), with a PCAL frame.
    let document_only: Vec<u8> = [
        &b"PROC"[..],
        &[9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, b'a'],
        b"OBJE",
        &[5, 0, 0, 0, 1, 0, 0, 0, b'b'],
        b"ALOC",
        &[
            20, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
        ],
        b"FRAM",
        &[12, 0, 0, 0],
        b"NTVE",
        &[0x34, 0x12, 0, 0, 0, 0, 0, 0],
        b"FRAM",
        &[17, 0, 0, 0],
        b"PCAL",
        &[0, 0, 0, 0, 1, 0, 0, 0, b'c', 5, 0, 0, 0],
        b"FRAM",
        &[4, 0, 0, 0],
        b"TERM",
        b"DALC",
        &[8, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0],
    ]
    .concat();

    vec![every_record, busy, document_only]
}

/// Offsets of every record header's length field in a valid file (FRAM
/// records included), to aim absurd lengths at.
fn length_fields(file: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= file.len() {
        out.push(at + 4);
        let len = u32::from_le_bytes(file[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 8 + len;
    }
    out
}

const ABSURD: [u32; 8] = [
    0xffff_ffff,
    0x7fff_ffff,
    0x8000_0000,
    0,
    1,
    3,
    0x0100_0001,
    0x00ff_ffff,
];

fn mutate(rng: &mut Rng, seed: &[u8], lengths: &[usize]) -> Vec<u8> {
    let mut f = seed.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let n = f.len();
        match rng.below(9) {
            0 if n > 0 => {
                let i = rng.below(n);
                f[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n);
                f[i] = rng.next() as u8;
            }
            2 => f.truncate(rng.below(n + 1)),
            3 => {
                let at = rng.below(n + 1);
                let k = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..k).map(|_| rng.next() as u8).collect();
                f.splice(at..at, bytes);
            }
            4 if n > 0 => {
                let at = rng.below(n);
                let k = (1 + rng.below(16)).min(n - at);
                f.drain(at..at + k);
            }
            5 | 6 => {
                // An absurd value in a length field (or anywhere, 1 time in 3).
                let at = if rng.below(3) == 0 || lengths.is_empty() {
                    rng.below(n.saturating_sub(3).max(1))
                } else {
                    lengths[rng.below(lengths.len())]
                };
                let v = ABSURD[rng.below(ABSURD.len())].to_le_bytes();
                for (k, b) in v.iter().enumerate() {
                    if let Some(slot) = f.get_mut(at + k) {
                        *slot = *b;
                    }
                }
            }
            7 if n > 0 => {
                let from = rng.below(n);
                let k = (1 + rng.below(48)).min(n - from);
                let chunk = f[from..from + k].to_vec();
                let to = rng.below(n + 1);
                f.splice(to..to, chunk);
            }
            _ => {
                // Insert a whole plausible header with a random known code.
                let codes: [&[u8; 4]; 6] = [b"ALOC", b"FRAM", b"PROC", b"DALC", b"NTVE", b"TERM"];
                let at = rng.below(n + 1);
                let mut h = codes[rng.below(codes.len())].to_vec();
                h.extend_from_slice(&ABSURD[rng.below(ABSURD.len())].to_le_bytes());
                f.splice(at..at, h);
            }
        }
    }
    f
}

/// Gives the bytes back in short reads of 1 to 7 bytes, so that records
/// straddle the reader's buffer and take its copying path.
struct Chunky<'a> {
    data: &'a [u8],
    rng: Rng,
}

impl Read for Chunky<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (1 + self.rng.below(7)).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Reads a whole file: the records and the error that ended it, if any.
fn read(
    reader: impl Iterator<Item = Result<Record>>,
) -> (Vec<Record>, Option<String>, Option<u64>) {
    let mut records = Vec::new();
    for r in reader {
        match r {
            Ok(r) => records.push(r),
            Err(e) => {
                let offset = e.offset();
                return (records, Some(e.to_string()), Some(offset));
            }
        }
    }
    (records, None, None)
}

#[test]
fn counting_allocator_sees_large_allocations() {
    reset_largest();
    let v: Vec<u8> = Vec::with_capacity(3 << 20);
    drop(std::hint::black_box(v));
    assert!(largest() >= 3 << 20, "the allocator counter works");
}

#[test]
fn mutated_files_end_cleanly_without_panic_or_large_allocation() {
    const FILES: usize = 100_000;
    let seeds = seeds();
    for s in &seeds {
        assert!(Reader::new(&s[..]).all(|r| r.is_ok()), "seeds are valid");
    }
    let lengths: Vec<Vec<usize>> = seeds.iter().map(|s| length_fields(s)).collect();
    let mut rng = Rng(0x0d0e_a110_c5ee_d5ed);
    let (mut clean, mut failed) = (0usize, 0usize);
    for i in 0..FILES {
        let k = i % seeds.len();
        let file = mutate(&mut rng, &seeds[k], &lengths[k]);
        let bound = (file.len() * 4).max(1 << 20);

        reset_largest();
        let (records, error, offset) = read(Reader::new(&file[..]));
        let peak = largest();
        assert!(
            peak <= bound,
            "file {i}: an allocation of {peak} bytes for a {}-byte file",
            file.len()
        );
        // Every record is at least an 8-byte header; a Stack and its Alloc
        // together take at least 40 bytes.
        assert!(
            records.len() <= file.len() / 4 + 1,
            "file {i}: {} records from {} bytes",
            records.len(),
            file.len()
        );
        match offset {
            Some(o) => {
                failed += 1;
                assert!(
                    o <= file.len() as u64,
                    "file {i}: error offset {o} beyond the file ({})",
                    file.len()
                );
            }
            None => clean += 1,
        }

        // One file in eight is read again in short reads: same outcome.
        if i % 8 == 0 {
            let chunky = Chunky {
                data: &file,
                rng: Rng(i as u64),
            };
            let (r2, e2, _) = read(Reader::new(chunky));
            assert_eq!(records, r2, "file {i}: short reads change the records");
            assert_eq!(error, e2, "file {i}: short reads change the error");
        }
    }
    // Both outcomes occur often: the mutations are neither all fatal nor all
    // harmless, so the checks above were exercised.
    assert!(failed > FILES / 4, "{failed} failures");
    assert!(clean > FILES / 50, "{clean} clean parses");
}

#[test]
fn every_truncation_of_every_seed_yields_its_complete_records_then_an_error_at_the_cut() {
    for seed in seeds() {
        let full: Vec<Record> = Reader::new(&seed[..]).map(|r| r.unwrap()).collect();
        for cut in 0..seed.len() {
            let (records, error, offset) = read(Reader::new(&seed[..cut]));
            assert_eq!(
                records[..],
                full[..records.len()],
                "cut {cut}: a prefix of the records"
            );
            match offset {
                Some(o) => assert_eq!(o, cut as u64, "cut {cut}: {error:?}"),
                // A cut between records is a shorter valid file, unless it
                // falls inside an allocation's frames (then it is an error).
                None => assert!(records.len() < full.len() || cut == seed.len()),
            }
        }
    }
}
