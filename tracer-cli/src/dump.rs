//! `tracer dump`: every record in file order, one line each.
//!
//! Records print as they are stored, without the cross-record resolution the
//! reports do (a frame shows its own symbol, not one resolved later; an
//! `AddressSymbol` record prints where it occurs). Times of heap events print
//! as UTC time of day with nanoseconds; system calls print as strace-like
//! lines ([`crate::strace`]).
//!
//! ```text
//! process 4242 "/usr/bin/app" argv ["app", "-v"] started 2021-01-01 00:00:00 UTC
//! object 0x555555554000 size 0x2000 "/usr/bin/app"
//! stack 0: #0 0x555555555189 in main app.c:7 | #1 0x7ffff7c29d90
//! 00:00:00.000001000 [4242] alloc 0x5555555592a0 100 B stack 0
//! 00:00:00.000002000 [4242] free 0x5555555592a0
//! 00:00:01.000002 [4242] openat(AT_FDCWD, "/etc/hosts", 0x80000) = 3 <0.000012>
//! ```

use std::io::Write;
use std::path::Path;

use format_writers::{Event, Frame, Record};

use crate::clock;
use crate::failure::Failure;
use crate::input::Trace;
use crate::strace;

fn frame_text(f: &Frame) -> String {
    let mut s = String::new();
    if f.address != 0 || f.symbol.is_none() {
        s.push_str(&format!("{:#x}", f.address));
    }
    if let Some(sym) = &f.symbol {
        if !sym.function.is_empty() {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str("in ");
            s.push_str(&sym.function);
        }
        if !sym.file.is_empty() {
            s.push(' ');
            s.push_str(&sym.file);
            if sym.line != 0 {
                s.push_str(&format!(":{}", sym.line));
            }
        }
    }
    s
}

/// One record as one line (no newline).
pub fn line(r: &Record) -> String {
    match r {
        Record::Process(p) => {
            let mut s = format!("process {} {:?}", p.pid, p.executable);
            if !p.command_line.is_empty() {
                s.push_str(&format!(" argv {:?}", p.command_line));
            }
            if p.start_time_ns != 0 {
                s.push_str(&format!(" started {}", clock::date_time(p.start_time_ns)));
            }
            s
        }
        Record::Object(o) => format!(
            "object {:#x} size {:#x} {:?}",
            o.load_address, o.size, o.path
        ),
        Record::Stack(st) => {
            let frames: Vec<String> = st
                .frames
                .iter()
                .enumerate()
                .map(|(i, f)| format!("#{i} {}", frame_text(f)))
                .collect();
            if frames.is_empty() {
                format!("stack {}: (no frames)", st.id)
            } else {
                format!("stack {}: {}", st.id, frames.join(" | "))
            }
        }
        Record::Thread(t) => {
            if t.name.is_empty() {
                format!("thread {}", t.tid)
            } else {
                format!("thread {} {:?}", t.tid, t.name)
            }
        }
        Record::Info(kv) => {
            let parts: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("info {}", parts.join(" "))
        }
        Record::AddressSymbol { address, symbol } => {
            let f = Frame {
                address: *address,
                symbol: Some(symbol.clone()),
            };
            format!("symbol {}", frame_text(&f))
        }
        Record::LeakScan { time_ns } => {
            format!("{} leak scan", clock::time_of_day_ns(*time_ns))
        }
        Record::BlockClass { address, kind } => format!("class {address:#x} {}", kind.name()),
        Record::Event(e) => match e {
            Event::Alloc(a) => format!(
                "{} [{}] alloc {:#x} {} B stack {}",
                clock::time_of_day_ns(a.time_ns),
                a.thread,
                a.address,
                a.size,
                a.stack
            ),
            Event::Free(f) => format!(
                "{} [{}] free {:#x}",
                clock::time_of_day_ns(f.time_ns),
                f.thread,
                f.address
            ),
            Event::Marker(m) => format!(
                "{} [{}] marker {:?}",
                clock::time_of_day_ns(m.time_ns),
                m.thread,
                m.name
            ),
            Event::Gc(g) => format!(
                "{} gc {} objects {} B",
                clock::time_of_day_ns(g.time_ns),
                g.objects,
                g.bytes
            ),
            Event::Syscall(s) => strace::line(s),
        },
    }
}

/// Runs the verb.
pub fn execute(path: &Path, out: &mut dyn Write) -> Result<i32, Failure> {
    let mut trace = Trace::open(path)?;
    loop {
        match trace.next_record() {
            Ok(Some(r)) => writeln!(out, "{}", line(&r))?,
            Ok(None) => break,
            Err(e) => {
                // What was read before the error is printed, so the user sees
                // where the file went wrong.
                out.flush()?;
                return Err(e);
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Alloc, Free, Marker, Process, Stack, Symbol};

    #[test]
    fn lines() {
        let p = Record::Process(Process {
            pid: 42,
            executable: "/bin/app".into(),
            command_line: vec!["app".into(), "-v".into()],
            start_time_ns: 1_609_459_200_000_000_000,
        });
        assert_eq!(
            line(&p),
            r#"process 42 "/bin/app" argv ["app", "-v"] started 2021-01-01 00:00:00 UTC"#
        );
        let st = Record::Stack(Stack {
            id: 3,
            frames: vec![
                Frame {
                    address: 0x401000,
                    symbol: Some(Symbol {
                        function: "main".into(),
                        file: "a.c".into(),
                        line: 7,
                    }),
                },
                Frame {
                    address: 0x402000,
                    symbol: None,
                },
            ],
        });
        assert_eq!(
            line(&st),
            "stack 3: #0 0x401000 in main a.c:7 | #1 0x402000"
        );
        let a = Record::Event(Event::Alloc(Alloc {
            time_ns: 1_000,
            thread: 9,
            address: 0x10,
            size: 100,
            stack: 3,
        }));
        assert_eq!(line(&a), "00:00:00.000001000 [9] alloc 0x10 100 B stack 3");
        let f = Record::Event(Event::Free(Free {
            time_ns: 2_000,
            thread: 9,
            address: 0x10,
        }));
        assert_eq!(line(&f), "00:00:00.000002000 [9] free 0x10");
        let m = Record::Event(Event::Marker(Marker {
            time_ns: 3_000_000_000,
            thread: 9,
            name: "phase 2".into(),
        }));
        assert_eq!(line(&m), "00:00:03.000000000 [9] marker \"phase 2\"");
    }
}
