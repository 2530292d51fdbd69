//! The hand-made trace the MALT, callgrind and folded tests share, with the
//! figures every test derives from it (worked out by hand below).
#![allow(dead_code)]

use format_writers::{
    Alloc, Event, Frame, Free, Object, Process, Record, Stack, Symbol, Thread, TraceWriter,
};

pub const T: u64 = 1_700_000_000_000_000_000;
pub const TID: u32 = 7;

fn sym(function: &str, file: &str, line: u32) -> Symbol {
    Symbol {
        function: function.into(),
        file: file.into(),
        line,
    }
}

fn alloc(dt: u64, address: u64, size: u64, stack: u64) -> Record {
    Record::Event(Event::Alloc(Alloc {
        time_ns: T + dt,
        thread: TID,
        address,
        size,
        stack,
    }))
}

fn free(dt: u64, address: u64) -> Record {
    Record::Event(Event::Free(Free {
        time_ns: T + dt,
        thread: TID,
        address,
    }))
}

/// Stack A (id 0): leaf (a.c:10) ← mid (a.c:20) ← main (a.c:30).
/// Stack B (id 1): other (b.c:5) ← main (a.c:30).
///
/// | t | event | live A | live B | live |
/// | --- | --- | --- | --- | --- |
/// | 0 | A alloc 0x100 100 | 100 | 0 | 100 |
/// | 10 | A alloc 0x200 200 | 300 | 0 | 300 |
/// | 20 | B alloc 0x300 50 | 300 | 50 | 350 |
/// | 30 | free 0x100 (lifetime 30) | 200 | 50 | 250 |
/// | 40 | A alloc 0x400 300 | 500 | 50 | **550 peak** |
/// | 50 | free 0x200 (lifetime 40) | 300 | 50 | 350 |
/// | 60 | B alloc 0x500 70 | 300 | 120 | 420 |
/// | 70 | free 0x500 (lifetime 10) | 300 | 50 | 350 |
/// | 80 | free 0x999 (never allocated) | 300 | 50 | 350 |
/// | 90 | free 0x400 (lifetime 50) + A alloc 0x600 400, same thread and time: a realloc 300 → 400 | 400 | 50 | 450 |
///
/// A: allocs 100,200,300,400 (4, sum 1000); frees 100,200,300 (3, sum 600);
/// lifetimes 30,40,50; live at exit 400 in 1 block; most live 500; at peak 500.
/// B: allocs 50,70 (2, sum 120); free 70; lifetime 10; live at exit 50; most
/// live 120; at peak 50. Totals: 6 allocations, 1120 bytes, 5 frees, peak 550,
/// 450 bytes in 2 blocks live at exit.
pub fn records() -> Vec<Record> {
    let main = Frame {
        address: 0x3030,
        symbol: None,
    };
    vec![
        Record::Process(Process {
            pid: 4242,
            executable: "/usr/bin/app".into(),
            command_line: vec!["./app".into(), "arg".into()],
            start_time_ns: T,
        }),
        Record::Info(vec![("nodename".into(), "testhost".into())]),
        Record::Object(Object {
            path: "/usr/bin/app".into(),
            load_address: 0x1000,
            size: 0x3000,
        }),
        Record::Thread(Thread {
            tid: TID,
            name: "main".into(),
        }),
        Record::Stack(Stack {
            id: 0,
            frames: vec![
                Frame {
                    address: 0x1010,
                    symbol: Some(sym("leaf", "a.c", 10)),
                },
                Frame {
                    address: 0x2020,
                    symbol: None,
                },
                main.clone(),
            ],
        }),
        Record::Stack(Stack {
            id: 1,
            frames: vec![
                Frame {
                    address: 0x1050,
                    symbol: None,
                },
                main,
            ],
        }),
        alloc(0, 0x100, 100, 0),
        alloc(10, 0x200, 200, 0),
        alloc(20, 0x300, 50, 1),
        free(30, 0x100),
        alloc(40, 0x400, 300, 0),
        free(50, 0x200),
        alloc(60, 0x500, 70, 1),
        free(70, 0x500),
        free(80, 0x999),
        free(90, 0x400),
        alloc(90, 0x600, 400, 0),
        // Symbols resolved late, as the preload library sends them.
        Record::AddressSymbol {
            address: 0x2020,
            symbol: sym("mid", "a.c", 20),
        },
        Record::AddressSymbol {
            address: 0x3030,
            symbol: sym("main", "a.c", 30),
        },
        Record::AddressSymbol {
            address: 0x1050,
            symbol: sym("other", "b.c", 5),
        },
    ]
}

/// Runs `records` through a writer into a byte vector.
pub fn write_with<W: TraceWriter + 'static>(
    make: impl FnOnce(SharedBuf) -> W,
    records: &[Record],
) -> Vec<u8> {
    let buf = SharedBuf::default();
    let mut w: Box<W> = Box::new(make(buf.clone()));
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    let v = buf.0.lock().unwrap().clone();
    v
}

/// A `Write` whose bytes the test can read after the writer is consumed.
#[derive(Clone, Default)]
pub struct SharedBuf(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
