//! Corrupted mlyze files and spools: every mutation must end in a typed error or a
//! valid parse, never a panic, a hang, or an allocation out of proportion to the file.
//!
//! This binary installs a counting global allocator that remembers the largest
//! single allocation; run in `--release` it takes a few seconds.

use std::path::Path;

use format_writers::mlyze::{self, Reader, Writer};
use format_writers::*;

mod common;
use common::{largest, reset_largest};

/// The tests of this binary measure one global maximum: they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// xorshift64*: deterministic, no dependency.
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

fn seed_records(k: u64) -> Vec<Record> {
    let mut v = vec![
        Record::Process(Process {
            pid: 42,
            executable: "/usr/bin/seed".into(),
            command_line: vec!["seed".into(), "--x".into()],
            start_time_ns: 1_700_000_000_000_000_000,
        }),
        Record::Object(Object {
            path: "/lib/x.so".into(),
            load_address: 0x7f00_0000_0000,
            size: 4096,
        }),
        Record::Thread(Thread {
            tid: 70_000,
            name: "worker".into(),
        }),
        Record::Info(vec![("host".into(), "h".into())]),
    ];
    for id in 0..4u64 {
        v.push(Record::Stack(Stack {
            id: id * k,
            frames: (0..id + 1)
                .map(|i| Frame {
                    address: 0x1000 + i,
                    symbol: (i % 2 == 0).then(|| Symbol {
                        function: format!("f{i}"),
                        file: "a.c".into(),
                        line: i as u32,
                    }),
                })
                .collect(),
        }));
    }
    for i in 0..60u64 {
        let t = 1_700_000_000_000_000_000 + i * 1_234_567;
        v.push(Record::Event(match i % 4 {
            0 | 1 => Event::Alloc(Alloc {
                time_ns: t,
                thread: 70_000 + (i % 3) as u32,
                address: 0x55_0000 + i * 32,
                size: i * 300,
                stack: (i % 4) * k,
            }),
            2 => Event::Free(Free {
                time_ns: t,
                thread: 1,
                address: 0x55_0000 + (i - 2) * 32,
            }),
            _ if i % 8 == 3 => Event::Gc(Gc {
                time_ns: t,
                objects: i,
                bytes: i << 40,
            }),
            _ => Event::Marker(Marker {
                time_ns: t,
                thread: 3,
                name: format!("m{i}"),
            }),
        }));
    }
    v.push(Record::AddressSymbol {
        address: 0x1001,
        symbol: Symbol {
            function: "late".into(),
            file: "b.c".into(),
            line: 7,
        },
    });
    v
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    out
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut f = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        let len = f.len();
        match rng.below(9) {
            0 | 1 => {
                let i = rng.below(len);
                f[i] ^= 1 << rng.below(8);
            }
            2 => {
                let i = rng.below(len);
                f[i] = rng.next() as u8;
            }
            3 => f.truncate(rng.below(len + 1)),
            4 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                f.splice(i..i, bytes);
            }
            5 => {
                // Absurd or off-by-some metadata length.
                let v = match rng.below(4) {
                    0 => u32::MAX,
                    1 => rng.next() as u32,
                    _ => (len as u32)
                        .wrapping_add(rng.below(64) as u32)
                        .wrapping_sub(32),
                };
                if len >= 20 {
                    f[16..20].copy_from_slice(&v.to_le_bytes());
                }
            }
            6 => {
                // A run of 0xff: overlong varints, huge ids and counts.
                let i = rng.below(len);
                let end = (i + 1 + rng.below(12)).min(len);
                f[i..end].fill(0xff);
            }
            7 => {
                // A JSON digit made huge (ids, lines, counts in the metadata).
                if let Some(i) = (0..8)
                    .map(|_| rng.below(len))
                    .find(|&i| f[i].is_ascii_digit())
                {
                    f.splice(i..i, b"99999999999999999999".iter().copied());
                }
            }
            _ => {
                let i = rng.below(len);
                let n = rng.below(len - i + 1);
                f.drain(i..i + n);
            }
        }
        if f.is_empty() {
            break;
        }
    }
    f
}

fn check_read(file: &[u8]) {
    let bound = (4 * file.len()).max(1 << 20);
    reset_largest();
    let mut n = 0usize;
    for r in Reader::new(file) {
        n += 1;
        // Each event takes at least 3 bytes; a made-up stack precedes at most one event.
        assert!(
            n <= 2 * file.len() + 64,
            "too many records from {} bytes",
            file.len()
        );
        if r.is_err() {
            break;
        }
    }
    let largest = largest();
    assert!(
        largest <= bound,
        "allocation of {largest} bytes for a {}-byte file",
        file.len()
    );
}

#[test]
fn mutated_files_error_or_parse_within_bounds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sample = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/memlyze-leak.mlyze"),
    )
    .unwrap();
    let seeds = [
        sample,
        encode(&seed_records(1)),
        encode(&seed_records(u64::MAX / 3)),
    ];
    for s in &seeds {
        assert!(Reader::new(&s[..]).all(|r| r.is_ok()), "seeds are valid");
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut errors = 0usize;
    const N: usize = 120_000;
    for i in 0..N {
        let f = mutate(&mut rng, &seeds[i % seeds.len()]);
        check_read(&f);
        if Reader::new(&f[..]).any(|r| r.is_err()) {
            errors += 1;
        }
    }
    // The mutations must really exercise the error paths.
    assert!(errors > N / 4, "only {errors} of {N} mutated files failed");
}

#[test]
fn mutated_spools_error_or_recover() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("mlyze-fuzz-spool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut w, _) = Writer::create(&dir.join("seed")).unwrap();
    let spool_path = w.spool_path().unwrap().to_path_buf();
    for (k, r) in seed_records(5).iter().enumerate() {
        w.write(r).unwrap();
        if k % 9 == 0 {
            w.flush().unwrap();
        }
    }
    w.flush().unwrap();
    drop(w);
    let seed = std::fs::read(&spool_path).unwrap();
    let probe = dir.join("probe.mlyze.spool");
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut recovered = 0;
    for _ in 0..4000 {
        let f = mutate(&mut rng, &seed);
        check_read(&f); // the reader accepts spools directly
        std::fs::write(&probe, &f).unwrap();
        let bound = (4 * f.len()).max(1 << 20);
        reset_largest();
        let mut out = Vec::new();
        let res = mlyze::recover_to(&probe, &mut out);
        assert!(
            largest() <= bound,
            "largest {} for a spool of {} bytes",
            largest(),
            f.len()
        );
        if res.is_ok() {
            recovered += 1;
            // Whatever recovery writes, our reader reads it without panicking.
            check_read(&out);
        }
    }
    assert!(recovered > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
