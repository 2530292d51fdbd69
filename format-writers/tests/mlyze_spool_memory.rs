//! What a spooling mlyze writer holds during the run.
//!
//! The file-backed writer logs every stack into its spool and rebuilds the
//! stack tables from that log at `finish`, so the memory it takes from the
//! traced program during the run does not grow with the number of distinct
//! stacks. Here 20,000 stacks of 20 frames, every frame address distinct
//! (400,000 frames: kept in memory they take several MB, ~12 bytes a frame in
//! the prefix tree plus its index), must leave the writer holding no more than
//! its two fixed buffers and its small maps, during the run and at `finish`
//! (which streams the stacks from the log); and the finished file must hold
//! every stack as written.
//!
//! A binary of its own: the counting allocator counts the whole process, so
//! no other test may run beside this one.

mod common;

use std::sync::atomic::Ordering;

use common::{LIVE, PEAK};
use format_writers::mlyze::{Reader, Writer};
use format_writers::*;

const STACKS: u64 = 20_000;
const DEPTH: u64 = 20;

fn stack(id: u64) -> Stack {
    let frames = (0..DEPTH)
        .map(|k| Frame {
            address: 0x40_0000 + (id * DEPTH + k) * 0x10,
            symbol: None,
        })
        .collect();
    Stack { id: id + 1, frames }
}

#[test]
fn spooling_writer_holds_no_per_stack_state_during_the_run() {
    let dir = std::env::temp_dir().join(format!("mlyze-spool-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut w, path) = Writer::create(&dir.join("m")).unwrap();
    w.write(&Record::Process(Process {
        pid: 7,
        executable: "/bin/x".into(),
        command_line: vec!["x".into()],
        start_time_ns: 1_700_000_000_000_000_000,
    }))
    .unwrap();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    for id in 0..STACKS {
        w.write(&Record::Stack(stack(id))).unwrap();
        w.write(&Record::Event(Event::Alloc(Alloc {
            time_ns: 1_700_000_000_000_000_000 + id * 1000,
            thread: 7,
            address: 0x1000 + id * 16,
            size: 16,
            stack: id + 1,
        })))
        .unwrap();
    }
    let run = PEAK.load(Ordering::Relaxed) - base;
    // The log buffer grows to 128 KiB once (it spills past 64 KiB), the
    // events buffer was sized when the spool was attached, the maps hold
    // "??" and "". Keeping the stacks in a prefix tree, as the writer did
    // before, held 13.5 MB here.
    assert!(
        run < 256 << 10,
        "the spooling writer held {run} bytes more after {STACKS} stacks"
    );

    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let before_finish = LIVE.load(Ordering::Relaxed);
    Box::new(w).finish().unwrap();
    let finish = PEAK.load(Ordering::Relaxed) - before_finish;
    // The ids ascend in the log, so the finish streams the stacks from it
    // (reading each 64 KiB log chunk back, four times: two sections, counted
    // then written) instead of rebuilding them: it holds a chunk, the other
    // tables and its buffers. Rebuilt as the in-memory writer keeps them, the
    // stacks took 13.4 MB here.
    assert!(finish < 512 << 10, "finish held {finish} bytes at its peak");

    let bytes = std::fs::read(&path).unwrap();
    let mut stacks = 0u64;
    for r in Reader::new(&bytes[..]) {
        if let Record::Stack(s) = r.unwrap() {
            assert_eq!(s, stack(stacks));
            stacks += 1;
        }
    }
    assert_eq!(stacks, STACKS);
    std::fs::remove_dir_all(&dir).unwrap();
}
