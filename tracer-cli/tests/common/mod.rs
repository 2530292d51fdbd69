//! Helpers shared by the `tracer` command's test binaries: running the
//! binary, a scratch directory per test, and writing a trace from records.
// Each test binary uses its own subset.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use format_writers::{dumpalloc, mlyze, tlv, Format, Record, TraceWriter};

pub const TRACER: &str = env!("CARGO_BIN_EXE_tracer");

/// Runs `tracer` with `args` and these variables, without the library path
/// and suppression variables of the environment the tests run in.
pub fn tracer_env<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new(TRACER);
    c.args(args)
        .env_remove("TRACER_LIB")
        .env_remove("TRACER_SUPPRESSIONS");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn tracer")
}

pub fn tracer<S: AsRef<OsStr>>(args: &[S]) -> Output {
    tracer_env(args, &[])
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory for one test, removed when the test passes (kept for a
/// look when it fails, or with `TRACER_BENCH_KEEP` set).
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() && std::env::var_os("TRACER_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tracer-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Writes `records` to `path` in `format`.
pub fn write_trace(path: &Path, format: Format, records: &[Record]) {
    let out = BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w: Box<dyn TraceWriter> = match format {
        Format::Dumpalloc => Box::new(dumpalloc::Writer::new(out)),
        Format::Mlyze => Box::new(mlyze::Writer::new(out)),
        Format::Tlv => Box::new(tlv::Writer::new(out)),
    };
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
}
