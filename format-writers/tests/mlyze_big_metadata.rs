//! The mlyze reader on metadata far larger than what it describes.
//!
//! The document gives every frame of every stack its own JSON object, so a
//! trace with many distinct stacks has a metadata section of hundreds of
//! megabytes (a million stacks of 25 frames: ~1 GB) while the stacks share a
//! few hundred distinct frames. The reader must not hold that JSON (nor a tree
//! of JSON values) in memory: it streams it and keeps each distinct frame once.
//! Here 20,000 stacks of 40 frames drawn from 64 distinct frames make ~37 MB of
//! metadata; reading the whole file must never hold more than a third of it,
//! and every stack must come back exactly as written.

mod common;

use std::sync::atomic::Ordering;

use common::{LIVE, PEAK};
use format_writers::mlyze::{Reader, Writer};
use format_writers::*;

const STACKS: u64 = 20_000;
const DEPTH: u64 = 40;

/// Stack `id`: frame k is one of two functions per level, picked by bit k%16 of the id,
/// so stacks are distinct and share 64 distinct frames (addresses and symbols).
fn stack(id: u64) -> Stack {
    let frames = (0..DEPTH)
        .map(|k| {
            let pick = (id >> (k % 16)) & 1;
            let n = (k % 32) * 2 + pick;
            Frame {
                address: 0x40_0000 + n * 0x40,
                symbol: Some(Symbol {
                    function: format!("level_{n}_function_with_a_long_name"),
                    file: format!("src/module_{}.c", n % 8),
                    line: 100 + n as u32,
                }),
            }
        })
        .collect();
    Stack { id, frames }
}

#[test]
fn large_metadata_is_streamed_and_interned() {
    let mut file = Vec::new();
    {
        let mut w = Writer::new(&mut file);
        w.write(&Record::Process(Process {
            pid: 7,
            executable: "/bin/x".into(),
            command_line: vec!["x".into()],
            start_time_ns: 1_700_000_000_000_000_000,
        }))
        .unwrap();
        for id in 0..STACKS {
            w.write(&Record::Stack(stack(id))).unwrap();
            w.write(&Record::Event(Event::Alloc(Alloc {
                time_ns: 1_700_000_000_000_000_000 + id * 1000,
                thread: 7,
                address: 0x1000 + id * 16,
                size: 16,
                stack: id,
            })))
            .unwrap();
        }
        w.finish().unwrap();
    }
    let meta_len = u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize;
    assert!(meta_len > 25_000_000, "the metadata is {meta_len} bytes");

    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let base = LIVE.load(Ordering::Relaxed);
    let mut stacks = 0u64;
    let mut allocs = 0u64;
    for r in Reader::new(&file[..]) {
        match r.unwrap() {
            Record::Stack(s) => {
                assert_eq!(s, stack(stacks), "stack {stacks} reads back as written");
                stacks += 1;
            }
            Record::Event(Event::Alloc(a)) => {
                assert_eq!(a.stack, allocs);
                allocs += 1;
            }
            _ => {}
        }
    }
    let held = PEAK.load(Ordering::Relaxed) - base;
    assert_eq!((stacks, allocs), (STACKS, STACKS));
    // 20,000 x 40 indices of 4 bytes = 3.2 MB a table, and three tables at
    // the reader's peak (frames, addresses, both merged) plus growth slack:
    // ~11 MB. The JSON itself is ~37 MB (the reader before this test held it
    // whole, and a map of 800,000 decoded frames besides).
    assert!(
        held < meta_len / 3,
        "the reader held {held} bytes at once for {meta_len} bytes of metadata"
    );
}
