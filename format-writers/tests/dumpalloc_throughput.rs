//! Decode and encode throughput of the dumpalloc codec on the benchmark's
//! shape (4096 distinct 20-frame stacks, allocation/free pairs). Ignored by
//! default; run with
//! `cargo test --release -p format-writers --test dumpalloc_throughput -- --ignored --nocapture`.
//! It asserts only that the events come back, and prints the rates.

use std::time::Instant;

use format_writers::dumpalloc::{Reader, Writer};
use format_writers::*;

#[test]
#[ignore = "measurement; run in --release with --ignored --nocapture"]
fn throughput() {
    const PAIRS: u64 = 2_000_000;
    let mut out = Vec::new();
    let t = Instant::now();
    {
        let mut w = Writer::new(&mut out);
        w.encode(&Record::Process(Process {
            pid: 1,
            executable: "bench".into(),
            ..Default::default()
        }))
        .unwrap();
        for s in 0..4096u64 {
            let frames = (0..20)
                .map(|i| Frame {
                    address: 0x40_0000 + s * 64 + i * 8,
                    symbol: None,
                })
                .collect();
            w.encode(&Record::Stack(Stack { id: s, frames })).unwrap();
        }
        for i in 0..PAIRS {
            let address = 0x1000_0000 + (i % 1000) * 64;
            w.encode(&Record::Event(Event::Alloc(Alloc {
                time_ns: i,
                thread: 7,
                address,
                size: 48,
                stack: i % 4096,
            })))
            .unwrap();
            w.encode(&Record::Event(Event::Free(Free {
                time_ns: i + 1,
                thread: 7,
                address,
            })))
            .unwrap();
        }
        w.into_inner().unwrap();
    }
    let write_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut events = 0u64;
    for r in Reader::new(&out[..]) {
        if let Record::Event(_) = r.unwrap() {
            events += 1;
        }
    }
    let read_s = t.elapsed().as_secs_f64();
    assert_eq!(events, 2 * PAIRS);
    println!(
        "dumpalloc: {} bytes, {:.1} bytes/event; write {:.1} M events/s; read {:.1} M events/s",
        out.len(),
        out.len() as f64 / events as f64,
        events as f64 / write_s / 1e6,
        events as f64 / read_s / 1e6
    );
}
