//! strace-like rendering of captured system calls; every piece of syscall
//! formatting the command does lives here.
//!
//! One call prints as
//! `HH:MM:SS.uuuuuu [tid] name(arg, ...) = result <seconds>`, a failed one as
//! `... = -1 ENOENT (No such file or directory)`. The wall-clock time is UTC
//! (see [`crate::clock`]); fields the capture did not record are left out.
//! Strings print C-escaped and cut after [`MAX_STRING`] bytes with `...`, as
//! strace's `-s` does; a captured buffer prefix shorter than the buffer gets
//! `...` too. Results above 32 bits print in hex (they are addresses: mmap,
//! brk).
//!
//! [`summary`] prints the `strace -c` table, with one more column: the
//! slowest single call.

use std::io::Write;

use format_writers::{Syscall, SyscallArg};

use crate::analysis::{syscall_failed, Analysis};
use crate::clock;

/// Longest string or buffer prefix printed before `...`.
pub const MAX_STRING: usize = 64;

/// `AT_FDCWD` on Linux.
const AT_FDCWD: i32 = -100;

/// The name of syscall `number` (x86-64 numbering).
pub fn syscall_name(number: u16) -> String {
    match names::syscall(number) {
        Some(n) => n.to_string(),
        None => format!("syscall_{number}"),
    }
}

/// `ENOENT (No such file or directory)`.
pub fn errno_text(errno: i32) -> String {
    let message = match format_writers::syscalls::errno_message(errno) {
        Some(m) => m.to_string(),
        None => crate::failure::io_text(&std::io::Error::from_raw_os_error(errno)),
    };
    match names::errno(errno) {
        Some(name) => format!("{name} ({message})"),
        None => format!("errno {errno} ({message})"),
    }
}

/// Appends `bytes` C-escaped and quoted, cut after [`MAX_STRING`] bytes;
/// `more` says the value went on beyond `bytes`.
fn push_quoted(out: &mut String, bytes: &[u8], more: bool) {
    out.push('"');
    for &b in bytes.iter().take(MAX_STRING) {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    if more || bytes.len() > MAX_STRING {
        out.push_str("...");
    }
}

/// What an integer argument means, for the calls whose integers strace
/// prints symbolically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    Plain,
    Address,
    DirFd,
    OpenFlags,
    Prot,
    MapFlags,
    AtFlags,
    Signal,
}

fn meaning(syscall: &str, index: usize) -> Meaning {
    use Meaning::*;
    match (syscall, index) {
        ("mmap", 0) | ("munmap", 0) | ("mprotect", 0) | ("brk", 0) | ("madvise", 0) => Address,
        ("mmap", 2) | ("mprotect", 2) => Prot,
        ("mmap", 3) => MapFlags,
        ("open", 1) | ("openat", 2) => OpenFlags,
        (
            "openat" | "newfstatat" | "unlinkat" | "mkdirat" | "readlinkat" | "faccessat"
            | "faccessat2" | "fchmodat" | "fchownat" | "renameat" | "renameat2" | "linkat"
            | "statx" | "utimensat" | "mknodat" | "symlinkat",
            0,
        ) => DirFd,
        ("newfstatat", 3) | ("unlinkat", 2) | ("statx", 2) | ("fchownat", 4) | ("linkat", 4) => {
            AtFlags
        }
        ("kill", 1)
        | ("tkill", 1)
        | ("tgkill", 2)
        | ("rt_sigaction", 0)
        | ("rt_sigqueueinfo", 1) => Signal,
        _ => Plain,
    }
}

fn symbolic(m: Meaning, v: i64) -> Option<String> {
    use format_writers::syscalls as t;
    Some(match m {
        Meaning::Plain => return None,
        Meaning::Address if v == 0 => "NULL".to_string(),
        Meaning::Address => format!("{v:#x}"),
        Meaning::DirFd => t::dirfd(v),
        Meaning::OpenFlags => t::open_flags(v as u64),
        Meaning::Prot => t::mmap_prot(v as u64),
        Meaning::MapFlags => t::mmap_flags(v as u64),
        Meaning::AtFlags => t::at_flags(v as u64),
        Meaning::Signal => return t::signal_name(v),
    })
}

/// Argument `index` of syscall `name`: integers that strace names
/// symbolically (flags, `AT_FDCWD`, signals, `NULL`) are named, the rest
/// prints as [`arg_text`] does.
pub fn arg_text_of(name: &str, index: usize, arg: &SyscallArg) -> String {
    let value = match arg {
        SyscallArg::Int(v) => Some(*v),
        SyscallArg::Flags(v) => Some(*v as i64),
        SyscallArg::Fd(v) => Some(i64::from(*v)),
        SyscallArg::Pointer(v) => Some(*v as i64),
        _ => None,
    };
    value
        .and_then(|v| symbolic(meaning(name, index), v))
        .unwrap_or_else(|| arg_text(arg))
}

/// One argument as strace would print it, knowing nothing of the call.
pub fn arg_text(arg: &SyscallArg) -> String {
    let mut s = String::new();
    match arg {
        SyscallArg::Int(v) => s.push_str(&v.to_string()),
        SyscallArg::Flags(v) => s.push_str(&format!("{v:#x}")),
        SyscallArg::Fd(AT_FDCWD) => s.push_str("AT_FDCWD"),
        SyscallArg::Fd(fd) => s.push_str(&fd.to_string()),
        SyscallArg::Path(p) => push_quoted(&mut s, p, false),
        SyscallArg::Buffer { len, data } => push_quoted(&mut s, data, (data.len() as u64) < *len),
        SyscallArg::Pointer(0) => s.push_str("NULL"),
        SyscallArg::Pointer(p) => s.push_str(&format!("{p:#x}")),
        SyscallArg::Unknown { tag, raw } => {
            s.push_str(&format!("<tag {tag}:"));
            for b in raw.iter().take(16) {
                s.push_str(&format!(" {b:02x}"));
            }
            if raw.len() > 16 {
                s.push_str(" ...");
            }
            s.push('>');
        }
    }
    s
}

/// `= 3`, `= 0x7f0000000000`, `= -1 ENOENT (No such file or directory)`.
pub fn result_text(call: &Syscall) -> String {
    match syscall_failed(call) {
        Some(errno) => {
            // A raw kernel result (-errno) is shown as the libc wrapper would
            // return it, as strace does.
            format!("= -1 {}", errno_text(errno))
        }
        None if call.result > u32::MAX as i64 => format!("= {:#x}", call.result),
        None => format!("= {}", call.result),
    }
}

/// The whole strace-like line, without a newline.
pub fn line(call: &Syscall) -> String {
    let mut s = String::new();
    if let Some(t) = call.time_ns {
        s.push_str(&clock::time_of_day_us(t));
        s.push(' ');
    }
    if let Some(tid) = call.thread {
        s.push_str(&format!("[{tid}] "));
    }
    let name = syscall_name(call.number);
    s.push_str(&name);
    s.push('(');
    for (i, a) in call.args.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&arg_text_of(&name, i, a));
    }
    s.push_str(") ");
    s.push_str(&result_text(call));
    if let Some(d) = call.duration_ns {
        s.push_str(&format!(
            " <{}.{:06}>",
            d / 1_000_000_000,
            (d % 1_000_000_000) / 1000
        ));
    }
    s
}

/// One row of the summary, for text and JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SummaryRow {
    pub name: String,
    pub number: u16,
    pub calls: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub slowest_ns: u64,
}

/// Rows by total time, then calls, then name (strace's order).
pub fn summary_rows(a: &Analysis) -> Vec<SummaryRow> {
    let mut rows: Vec<SummaryRow> = a
        .syscalls
        .iter()
        .enumerate()
        .filter(|(_, s)| s.calls > 0)
        .map(|(n, s)| SummaryRow {
            name: syscall_name(n as u16),
            number: n as u16,
            calls: s.calls,
            errors: s.errors,
            total_ns: s.total_ns,
            slowest_ns: s.slowest_ns,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then(b.calls.cmp(&a.calls))
            .then(a.name.cmp(&b.name))
    });
    rows
}

fn secs6(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

/// The `strace -c` table.
pub fn summary(out: &mut dyn Write, rows: &[SummaryRow]) -> std::io::Result<()> {
    let total: u64 = rows.iter().fold(0, |s, r| s.saturating_add(r.total_ns));
    let calls: u64 = rows.iter().map(|r| r.calls).sum();
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    let rule = "------ ----------- ----------- ----------- --------- --------- ----------------";
    writeln!(
        out,
        "% time     seconds  usecs/call   max usecs     calls    errors syscall"
    )?;
    writeln!(out, "{rule}")?;
    for r in rows {
        let pct = if total == 0 {
            0.0
        } else {
            r.total_ns as f64 * 100.0 / total as f64
        };
        let errors = if r.errors == 0 {
            String::new()
        } else {
            r.errors.to_string()
        };
        writeln!(
            out,
            "{pct:6.2} {:>11} {:>11} {:>11} {:>9} {errors:>9} {}",
            secs6(r.total_ns),
            r.total_ns / r.calls.max(1) / 1000,
            r.slowest_ns / 1000,
            r.calls,
            r.name
        )?;
    }
    writeln!(out, "{rule}")?;
    let errors = if errors == 0 {
        String::new()
    } else {
        errors.to_string()
    };
    writeln!(
        out,
        "100.00 {:>11} {:>11} {:>11} {calls:>9} {errors:>9} total",
        secs6(total),
        total / calls.max(1) / 1000,
        rows.iter().map(|r| r.slowest_ns).max().unwrap_or(0) / 1000,
    )
}

/// Syscall and errno names: the shared x86-64 tables of `format_writers`.
mod names {
    pub fn syscall(number: u16) -> Option<&'static str> {
        format_writers::syscalls::name(number)
    }
    pub fn errno(errno: i32) -> Option<&'static str> {
        format_writers::syscalls::errno_name(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_render_like_strace() {
        assert_eq!(arg_text(&SyscallArg::Fd(-100)), "AT_FDCWD");
        assert_eq!(arg_text(&SyscallArg::Fd(3)), "3");
        assert_eq!(arg_text(&SyscallArg::Int(-5)), "-5");
        assert_eq!(arg_text(&SyscallArg::Flags(0x80000)), "0x80000");
        assert_eq!(arg_text(&SyscallArg::Pointer(0)), "NULL");
        assert_eq!(arg_text(&SyscallArg::Pointer(0x7ffd1000)), "0x7ffd1000");
        assert_eq!(
            arg_text(&SyscallArg::Path(b"/etc/\"x\"\n\x01".to_vec())),
            r#""/etc/\"x\"\n\x01""#
        );
        assert_eq!(
            arg_text(&SyscallArg::Buffer {
                len: 10,
                data: b"abc".to_vec()
            }),
            r#""abc"..."#
        );
        assert_eq!(
            arg_text(&SyscallArg::Unknown {
                tag: 9,
                raw: vec![1, 2]
            }),
            "<tag 9: 01 02>"
        );
        let long = vec![b'a'; 70];
        let text = arg_text(&SyscallArg::Path(long));
        assert_eq!(text.len(), 64 + 2 + 3);
    }

    #[test]
    fn known_calls_get_symbolic_arguments() {
        let mmap: Vec<SyscallArg> = [0, 258, 1, 2, 4, 0].map(SyscallArg::Int).to_vec();
        let call = Syscall {
            number: 9,
            result: 0x7fd0_bf50_2000,
            args: mmap,
            ..Syscall::default()
        };
        assert_eq!(
            line(&call),
            "mmap(NULL, 258, PROT_READ, MAP_PRIVATE, 4, 0) = 0x7fd0bf502000"
        );
        let open = Syscall {
            number: 257,
            result: 3,
            args: vec![
                SyscallArg::Int(-100),
                SyscallArg::Path(b"/etc".to_vec()),
                SyscallArg::Int(0o2000000),
            ],
            ..Syscall::default()
        };
        assert_eq!(
            line(&open),
            "openat(AT_FDCWD, \"/etc\", O_RDONLY|O_CLOEXEC) = 3"
        );
        let kill = Syscall {
            number: 62,
            args: vec![SyscallArg::Int(5), SyscallArg::Int(9)],
            ..Syscall::default()
        };
        assert_eq!(line(&kill), "kill(5, SIGKILL) = 0");
    }

    #[test]
    fn failed_call_line() {
        let call = Syscall {
            number: 257,
            result: -2,
            errno: None,
            thread: Some(42),
            // 1970-01-01 00:00:01.000002 + 3 ns
            time_ns: Some(1_000_002_003),
            duration_ns: Some(12_345),
            args: vec![SyscallArg::Fd(-100), SyscallArg::Path(b"/x".to_vec())],
        };
        assert_eq!(
            line(&call),
            "00:00:01.000002 [42] openat(AT_FDCWD, \"/x\") = -1 ENOENT (No such file or directory) \
             <0.000012>"
        );
        let ok = Syscall {
            result: 0x7f00_0000_0000,
            ..call.clone()
        };
        assert!(line(&ok).contains(") = 0x7f0000000000 <"));
    }
}
