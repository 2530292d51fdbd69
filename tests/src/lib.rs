//! Shared harness for the end-to-end tests.
//!
//! The tests run real programs (the C/C++ examples in `examples/`, and system
//! programs such as python3, perl, git and gcc) three ways and compare:
//!
//! - natively, for the reference stdout and exit status;
//! - under `LD_PRELOAD=libtracer.so`, writing traces into a fresh directory; the
//!   harness reads every trace with `format_writers::open` and computes the
//!   figures (allocation calls, frees, bytes allocated, bytes and blocks live at
//!   exit) from the records themselves, independently of the `tracer` CLI, and
//!   also asks `tracer report --json` so the two can be compared;
//! - under an oracle: valgrind memcheck (its "total heap usage" and "in use at
//!   exit" lines, one log per process) or heaptrack ("calls to allocation
//!   functions").
//!
//! Where the library and the CLI come from: `TRACER_LIB` / `TRACER_BIN`, or the
//! build directory holding the test executable's `deps/` directory
//! (`target/release/deps/e2e-…` → `target/release/`). Examples are compiled
//! once per test process into a scratch directory in the build directory
//! (`e2e-scratch/run-<pid>/`; those of finished test processes are removed).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use format_writers::{Event, Process, Record, Stack, Symbol};

/// Page size the examples' figures assume.
pub const PAGE: u64 = 4096;

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The build directory the artifacts live in: the directory above the test
/// executable's `deps/` directory.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    deps.parent().unwrap_or(deps).to_path_buf()
}

/// Path of `libtracer.so` (`TRACER_LIB` overrides).
pub fn tracer_lib() -> PathBuf {
    match std::env::var_os("TRACER_LIB") {
        Some(p) => PathBuf::from(p),
        None => build_dir().join("libtracer.so"),
    }
}

/// Path of the `tracer` command (`TRACER_BIN` overrides).
pub fn tracer_bin() -> PathBuf {
    match std::env::var_os("TRACER_BIN") {
        Some(p) => PathBuf::from(p),
        None => build_dir().join("tracer"),
    }
}

/// The scratch directory of this test process; stale ones of dead processes
/// are removed when it is first made.
fn process_scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = build_dir().join("e2e-scratch");
        fs::create_dir_all(&base).expect("create scratch base");
        if let Ok(entries) = fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(pid) = name
                    .strip_prefix("run-")
                    .and_then(|p| p.parse::<u32>().ok())
                {
                    if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("run-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create scratch dir");
        dir
    })
}

/// A fresh, empty directory for one test step.
pub fn fresh_dir(label: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = process_scratch().join(format!("{label}-{n}"));
    fs::create_dir_all(&dir).expect("create fresh dir");
    dir
}

/// Compiles `examples/<name>.c` (or `.cpp`) once per test process with
/// `-O0 -g -fno-omit-frame-pointer -pthread` and returns the binary.
pub fn example(name: &str) -> PathBuf {
    example_with(name, &["-O0", "-g", "-fno-omit-frame-pointer", "-pthread"])
}

/// Compiles `examples/<name>.c` (or `.cpp`) once per test process with these
/// flags (and `-Wall`) and returns the binary.
pub fn example_with(name: &str, flags: &[&str]) -> PathBuf {
    static CACHE: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    let key = format!("{name} {}", flags.join(" "));
    if let Some(p) = cache.get(&key) {
        return p.clone();
    }
    let examples = repo_root().join("examples");
    let (src, compiler) = if examples.join(format!("{name}.c")).exists() {
        (examples.join(format!("{name}.c")), "gcc")
    } else {
        (examples.join(format!("{name}.cpp")), "g++")
    };
    // One directory per set of flags; examples in subdirectories
    // (`leaks/direct`) get the same subdirectory.
    let bin_dir = process_scratch().join(format!("bin-{}", cache.len()));
    let out = bin_dir.join(name);
    fs::create_dir_all(out.parent().unwrap_or(&bin_dir)).expect("bin dir");
    let result = Command::new(compiler)
        .args(flags)
        .arg("-Wall")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        result.status.success(),
        "{compiler} {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    cache.insert(key, out.clone());
    out
}

/// A command line: program and arguments.
#[derive(Debug, Clone)]
pub struct Cmd {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
}

impl Cmd {
    pub fn new<S: Into<OsString>>(program: S) -> Cmd {
        Cmd {
            argv: vec![program.into()],
            env: Vec::new(),
            cwd: None,
        }
    }
    pub fn arg<S: Into<OsString>>(mut self, a: S) -> Cmd {
        self.argv.push(a.into());
        self
    }
    pub fn env<K: Into<OsString>, V: Into<OsString>>(mut self, k: K, v: V) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn cwd<P: Into<PathBuf>>(mut self, dir: P) -> Cmd {
        self.cwd = Some(dir.into());
        self
    }
    fn command(&self, prefix: &[OsString]) -> Command {
        let mut all: Vec<OsString> = prefix.to_vec();
        all.extend(self.argv.iter().cloned());
        let mut c = Command::new(&all[0]);
        c.args(&all[1..]);
        // The tests' own environment must not leak tracer settings into runs.
        for (k, _) in std::env::vars_os() {
            let ks = k.to_string_lossy();
            if ks.starts_with("TRACER_") || ks == "LD_PRELOAD" {
                c.env_remove(&k);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(d) = &self.cwd {
            c.current_dir(d);
        }
        c.stdin(Stdio::null());
        c
    }
    /// Runs natively.
    pub fn run_plain(&self) -> Output {
        self.command(&[])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", self.argv))
    }
}

/// How a process ended, comparable between runs.
pub fn status_text(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => format!("{s:?}"),
    }
}

/// A run under libtracer.
#[derive(Debug)]
pub struct Traced {
    pub output: Output,
    /// Pid of the process started (the first of the run).
    pub pid: u32,
    /// The directory traces were written into (`TRACER_OUTPUT=<dir>/t-%p`).
    pub dir: PathBuf,
    /// The trace files found in `dir`, sorted by name.
    pub files: Vec<PathBuf>,
    /// The lines of the `TRACER_MANIFEST` file (empty when it was not written).
    pub manifest: Vec<PathBuf>,
}

impl Traced {
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).to_string()
    }
}

/// How long a traced example may run before it counts as hung.
const HUNG_AFTER: std::time::Duration = std::time::Duration::from_secs(180);

/// The child's output; a child still running after [`HUNG_AFTER`] is killed
/// and the test fails saying so (a tracer that deadlocks must fail the
/// suite, not stall it).
fn wait_or_kill(child: std::process::Child, argv: &[OsString]) -> Output {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, killed) = (done.clone(), killed.clone());
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !done.load(Ordering::SeqCst) {
                if start.elapsed() > HUNG_AFTER {
                    killed.store(true, Ordering::SeqCst);
                    // SAFETY: kill(2) on the child's pid, which cannot have
                    // been reused: the child is not reaped until
                    // wait_with_output returns, after `done` is set.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let output = child.wait_with_output().expect("wait for traced program");
    done.store(true, Ordering::SeqCst);
    let _ = watchdog.join();
    assert!(
        !killed.load(Ordering::SeqCst),
        "{argv:?} hung under libtracer: killed after {HUNG_AFTER:?}; stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `cmd` under `LD_PRELOAD=libtracer.so` with traces going to a fresh
/// directory, `TRACER_QUIET=1` and a manifest; `extra` settings come last and
/// override.
pub fn run_traced(cmd: &Cmd, extra: &[(&str, &str)]) -> Traced {
    let lib = tracer_lib();
    assert!(
        lib.exists(),
        "{} does not exist: build it (cargo build --release) or set TRACER_LIB",
        lib.display()
    );
    let dir = fresh_dir("traced");
    let manifest = dir.join("manifest");
    let mut c = traced_command(cmd, &dir);
    c.env("TRACER_MANIFEST", &manifest);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.argv));
    let pid = child.id();
    let output = wait_or_kill(child, &cmd.argv);
    let files = trace_files(&dir);
    let manifest = fs::read_to_string(&manifest)
        .map(|s| s.lines().map(PathBuf::from).collect())
        .unwrap_or_default();
    Traced {
        output,
        pid,
        dir,
        files,
        manifest,
    }
}

/// Starts `cmd` under libtracer with its traces in `dir` (`t-%p`), quiet,
/// without waiting for it: for tests that signal the program or bound its
/// run themselves ([`wait_within`]).
pub fn spawn_traced(cmd: &Cmd, dir: &Path) -> std::process::Child {
    let mut c = traced_command(cmd, dir);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c.spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.argv))
}

/// `cmd` under libtracer, quiet, its traces in `dir` (`t-%p`).
fn traced_command(cmd: &Cmd, dir: &Path) -> Command {
    let mut c = cmd.command(&[]);
    c.env("LD_PRELOAD", tracer_lib())
        .env("TRACER_OUTPUT", dir.join("t-%p"))
        .env("TRACER_QUIET", "1");
    c
}

/// Waits for `child` at most `limit`: its status, or None when it was still
/// running (it is then killed with SIGKILL and reaped).
pub fn wait_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> Option<ExitStatus> {
    let start = std::time::Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The trace files (`t-…` with a trace extension) in `dir`, sorted.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .to_string();
                    name.starts_with("t-")
                        && [".mlyze", ".dumpalloc", ".tlv"]
                            .iter()
                            .any(|ext| name.ends_with(ext))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The heap figures of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
}

impl Figures {
    pub const fn new(
        allocations: u64,
        frees: u64,
        bytes_allocated: u64,
        live_bytes: u64,
        live_blocks: u64,
    ) -> Figures {
        Figures {
            allocations,
            frees,
            bytes_allocated,
            live_bytes,
            live_blocks,
        }
    }
    /// These figures plus `n` blocks of `size` bytes allocated and never freed.
    pub const fn plus_live(self, n: u64, size: u64) -> Figures {
        Figures {
            allocations: self.allocations + n,
            frees: self.frees,
            bytes_allocated: self.bytes_allocated + n * size,
            live_bytes: self.live_bytes + n * size,
            live_blocks: self.live_blocks + n,
        }
    }
    /// These figures plus `n` blocks of `size` bytes allocated then freed.
    pub const fn plus_temporary(self, n: u64, size: u64) -> Figures {
        Figures {
            allocations: self.allocations + n,
            frees: self.frees + n,
            bytes_allocated: self.bytes_allocated + n * size,
            live_bytes: self.live_bytes,
            live_blocks: self.live_blocks,
        }
    }
}

/// Everything the tests look at in one trace, computed from its records.
#[derive(Debug, Default)]
pub struct Trace {
    pub path: PathBuf,
    pub process: Option<Process>,
    pub figures: Figures,
    /// Frees of addresses not live in this trace (e.g. blocks inherited at a fork).
    pub unknown_frees: u64,
    /// Allocations at an address already live (a lost free).
    pub double_allocs: u64,
    pub peak_bytes: u64,
    /// Marker names in event order.
    pub markers: Vec<String>,
    /// Order of alloc/marker events: `Err(name)` for a marker, `Ok(size)` for an alloc.
    pub timeline: Vec<Result<u64, String>>,
    pub stacks: HashMap<u64, Stack>,
    /// Symbols delivered late, by address.
    pub symbols: HashMap<u64, Symbol>,
    /// Every allocation: (size, stack id), in order.
    pub allocs: Vec<(u64, u64)>,
    pub threads: std::collections::BTreeSet<u32>,
}

impl Trace {
    /// The frames of a stack, each with its symbol (from the stack itself, or
    /// delivered later by address), innermost first.
    pub fn symbolized(&self, stack: u64) -> Vec<(u64, Option<Symbol>)> {
        self.stacks
            .get(&stack)
            .map(|s| {
                s.frames
                    .iter()
                    .map(|f| {
                        let sym = f
                            .symbol
                            .clone()
                            .or_else(|| self.symbols.get(&f.address).cloned());
                        (f.address, sym)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Reads a trace completely and computes its figures from the records.
pub fn read_trace(path: &Path) -> Result<Trace, String> {
    let (_, reader) = format_writers::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut t = Trace {
        path: path.to_path_buf(),
        ..Trace::default()
    };
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut live_bytes = 0u64;
    for record in reader {
        let record = record.map_err(|e| format!("{}: {e}", path.display()))?;
        match record {
            Record::Process(p) => t.process = Some(p),
            Record::Stack(s) => {
                t.stacks.insert(s.id, s);
            }
            Record::AddressSymbol { address, symbol } => {
                t.symbols.insert(address, symbol);
            }
            Record::Thread(th) => {
                t.threads.insert(th.tid);
            }
            Record::Event(Event::Alloc(a)) => {
                t.figures.allocations += 1;
                t.figures.bytes_allocated += a.size;
                t.allocs.push((a.size, a.stack));
                t.timeline.push(Ok(a.size));
                t.threads.insert(a.thread);
                if let Some(old) = live.insert(a.address, a.size) {
                    t.double_allocs += 1;
                    live_bytes -= old;
                }
                live_bytes += a.size;
                t.peak_bytes = t.peak_bytes.max(live_bytes);
            }
            Record::Event(Event::Free(f)) => {
                t.figures.frees += 1;
                match live.remove(&f.address) {
                    Some(size) => live_bytes -= size,
                    None => t.unknown_frees += 1,
                }
            }
            Record::Event(Event::Marker(m)) => {
                t.markers.push(m.name.clone());
                t.timeline.push(Err(m.name));
            }
            _ => {}
        }
    }
    t.figures.live_bytes = live_bytes;
    t.figures.live_blocks = live.len() as u64;
    Ok(t)
}

/// Reads every trace of a run, keyed by the pid its process record names.
pub fn traces_by_pid(run: &Traced) -> BTreeMap<u32, Vec<Trace>> {
    let mut by_pid: BTreeMap<u32, Vec<Trace>> = BTreeMap::new();
    for f in &run.files {
        let t = read_trace(f).unwrap_or_else(|e| panic!("trace does not read: {e}"));
        let pid = t.process.as_ref().map(|p| p.pid).unwrap_or(0);
        by_pid.entry(pid).or_default().push(t);
    }
    by_pid
}

/// Spool files (`*.spool*`) a process that never finished its trace left in
/// `dir`.
pub fn spools(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .contains(".spool")
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Turns every spool left in the run's directory into a readable trace: the
/// spool itself when the readers accept it, otherwise `tracer recover SPOOL`.
/// Refreshes `run.files`. Returns how many spools there were.
pub fn recover_spools(run: &mut Traced) -> usize {
    let left = spools(&run.dir);
    for spool in &left {
        if read_trace(spool).is_ok() {
            continue;
        }
        let out = tracer(&["recover".as_ref(), spool.as_os_str()]);
        assert!(
            out.status.success(),
            "a spool was left ({}) and `tracer recover {}` failed ({}): {}",
            spool.display(),
            spool.display(),
            status_text(&out.status),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut files = trace_files(&run.dir);
    for spool in &left {
        if spool.exists() && read_trace(spool).is_ok() {
            files.push(spool.clone());
        }
    }
    // An empty file reserved for a trace that was never finished is not a trace.
    files.retain(|f| fs::metadata(f).map(|m| m.len() > 0).unwrap_or(false));
    files.sort();
    run.files = files;
    left.len()
}

/// The process record and the system calls of a syscall capture (`.tlv`)
/// file, in file order.
pub fn read_syscalls(path: &Path) -> (Process, Vec<format_writers::Syscall>) {
    let (_, reader) =
        format_writers::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut process = None;
    let mut calls = Vec::new();
    for record in reader {
        match record.unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            Record::Process(p) => process = Some(p),
            Record::Event(Event::Syscall(s)) => calls.push(s),
            _ => {}
        }
    }
    let process = process.unwrap_or_else(|| panic!("{}: no process record", path.display()));
    (process, calls)
}

/// The `.tlv` files of a run, by the pid their process record names.
pub fn syscall_traces(run: &Traced) -> BTreeMap<u32, Vec<PathBuf>> {
    let mut by_pid: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
    for f in run
        .files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "tlv"))
    {
        let (p, _) = read_syscalls(f);
        by_pid.entry(p.pid).or_default().push(f.clone());
    }
    by_pid
}

/// The only trace of a single-process run.
pub fn single_trace(run: &Traced) -> Trace {
    if run.files.len() != 1 {
        let listing: Vec<String> = fs::read_dir(&run.dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| {
                        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                        format!("{} ({len} bytes)", e.file_name().to_string_lossy())
                    })
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "expected exactly one readable trace file in {}, found {:?}; the directory holds {listing:?}; stderr: {}",
            run.dir.display(),
            run.files,
            run.stderr()
        );
    }
    read_trace(&run.files[0]).unwrap_or_else(|e| panic!("trace does not read: {e}"))
}

/// Runs the `tracer` command; returns its output.
pub fn tracer(args: &[&std::ffi::OsStr]) -> Output {
    let bin = tracer_bin();
    assert!(
        bin.exists(),
        "{} does not exist: build it or set TRACER_BIN",
        bin.display()
    );
    Command::new(&bin)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
}

/// `tracer report --json FILE`, parsed.
pub fn cli_report(path: &Path) -> serde_json::Value {
    let out = tracer(&["report".as_ref(), path.as_os_str(), "--json".as_ref()]);
    assert!(
        out.status.success(),
        "tracer report --json {} failed ({}): {}",
        path.display(),
        status_text(&out.status),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tracer report --json {}: not JSON ({e}): {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The figures `tracer report --json` gives for a trace.
pub fn cli_figures(path: &Path) -> Figures {
    let v = cli_report(path);
    let get = |k: &str| {
        v.get(k).and_then(|x| x.as_u64()).unwrap_or_else(|| {
            panic!(
                "tracer report --json {}: no integer {k:?} in {v}",
                path.display()
            )
        })
    };
    Figures {
        allocations: get("allocations"),
        frees: get("frees"),
        bytes_allocated: get("bytes_allocated"),
        live_bytes: get("live_at_exit_bytes"),
        live_blocks: get("live_at_exit_blocks"),
    }
}

/// `tracer validate FILE` succeeds.
pub fn assert_validates(path: &Path) {
    let out = tracer(&["validate".as_ref(), path.as_os_str()]);
    assert!(
        out.status.success(),
        "tracer validate {} failed ({}): {}{}",
        path.display(),
        status_text(&out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks a trace against the expected figures, both as computed from its
/// records and as `tracer report --json` gives them, and that it validates.
pub fn assert_trace_figures(trace: &Trace, expected: Figures, what: &str) {
    assert_eq!(
        trace.figures,
        expected,
        "{what}: figures computed from the records of {} (unknown frees {}, reused live addresses {})",
        trace.path.display(),
        trace.unknown_frees,
        trace.double_allocs
    );
    assert_eq!(
        trace.double_allocs, 0,
        "{what}: an address allocated twice without a free"
    );
    assert_validates(&trace.path);
    assert_eq!(
        cli_figures(&trace.path),
        expected,
        "{what}: figures of `tracer report --json {}`",
        trace.path.display()
    );
}

/// Asserts the same stdout and the same exit status with and without the library.
pub fn assert_same_behaviour(plain: &Output, traced: &Traced, what: &str) {
    assert_eq!(
        String::from_utf8_lossy(&traced.output.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "{what}: stdout differs under libtracer; stderr: {}",
        traced.stderr()
    );
    assert_eq!(
        status_text(&traced.output.status),
        status_text(&plain.status),
        "{what}: exit status differs under libtracer; stderr: {}",
        traced.stderr()
    );
}

/// valgrind's heap summary of one process.
#[derive(Debug, Clone, Default)]
pub struct Valgrind {
    pub figures: Figures,
    pub command: String,
}

/// Runs `cmd` under valgrind memcheck with `extra` options, no freeres and no
/// children followed across exec, one log per process; returns the
/// program's output and each process's log text with its pid.
fn memcheck(cmd: &Cmd, extra: &[&str]) -> (Output, Vec<(u32, String)>) {
    let dir = fresh_dir("valgrind");
    let mut prefix: Vec<OsString> = vec!["valgrind".into(), "--tool=memcheck".into()];
    prefix.extend(extra.iter().map(OsString::from));
    prefix.extend([
        "--run-libc-freeres=no".into(),
        "--run-cxx-freeres=no".into(),
        "--trace-children=no".into(),
        format!("--log-file={}/vg.%p", dir.display()).into(),
    ]);
    let output = cmd
        .command(&prefix)
        .output()
        .unwrap_or_else(|e| panic!("cannot run valgrind: {e}"));
    let mut logs = Vec::new();
    for entry in fs::read_dir(&dir).expect("valgrind log dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix("vg.").and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        logs.push((pid, fs::read_to_string(entry.path()).expect("valgrind log")));
    }
    logs.sort_by_key(|l| l.0);
    (output, logs)
}

/// Runs `cmd` under valgrind memcheck (see [`memcheck`]); returns the
/// program's output and the heap summaries keyed by pid.
pub fn valgrind(cmd: &Cmd) -> (Output, BTreeMap<u32, Valgrind>) {
    let (output, logs) = memcheck(cmd, &[]);
    let result = logs
        .into_iter()
        .filter_map(|(pid, text)| parse_valgrind(&text).map(|v| (pid, v)))
        .collect();
    (output, result)
}

fn number(s: &str) -> Option<u64> {
    s.replace(',', "").parse().ok()
}

/// Parses valgrind's `in use at exit: X bytes in Y blocks` and `total heap
/// usage: N allocs, M frees, B bytes allocated`; `None` without a summary.
pub fn parse_valgrind(log: &str) -> Option<Valgrind> {
    let mut v = Valgrind::default();
    let (mut usage, mut in_use) = (false, false);
    for line in log.lines() {
        // Lines look like "==123==   total heap usage: 3 allocs, 1 frees, 600 bytes allocated".
        let body = match line.strip_prefix("==") {
            Some(rest) => rest.split_once("==").map(|(_, b)| b.trim()).unwrap_or(""),
            None => line.trim(),
        };
        if let Some(rest) = body.strip_prefix("Command:") {
            v.command = rest.trim().to_string();
        } else if let Some(rest) = body.strip_prefix("in use at exit:") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            // X bytes in Y blocks
            if w.len() >= 5 {
                v.figures.live_bytes = number(w[0])?;
                v.figures.live_blocks = number(w[3])?;
                in_use = true;
            }
        } else if let Some(rest) = body.strip_prefix("total heap usage:") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            // N allocs, M frees, B bytes allocated
            if w.len() >= 6 {
                v.figures.allocations = number(w[0])?;
                v.figures.frees = number(w[2])?;
                v.figures.bytes_allocated = number(w[4])?;
                usage = true;
            }
        }
    }
    (usage && in_use).then_some(v)
}

/// heaptrack's "calls to allocation functions" for `cmd` (the first process
/// only: heaptrack does not follow forks or execs).
pub fn heaptrack_calls(cmd: &Cmd) -> (Output, u64) {
    let dir = fresh_dir("heaptrack");
    let base = dir.join("hp");
    let prefix: Vec<OsString> = vec!["heaptrack".into(), "-o".into(), base.clone().into()];
    let output = cmd
        .command(&prefix)
        .output()
        .unwrap_or_else(|e| panic!("cannot run heaptrack: {e}"));
    let data = fs::read_dir(&dir)
        .expect("heaptrack dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("hp"))
        .unwrap_or_else(|| {
            panic!(
                "heaptrack wrote no file: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let printed = Command::new("heaptrack_print")
        .arg(&data)
        .output()
        .expect("run heaptrack_print");
    let text = String::from_utf8_lossy(&printed.stdout);
    let calls = parse_heaptrack_calls(&text).unwrap_or_else(|| {
        panic!("no \"calls to allocation functions:\" line in heaptrack_print output:\n{text}")
    });
    (output, calls)
}

/// The N of heaptrack_print's summary line `calls to allocation functions: N (R/s)`.
pub fn parse_heaptrack_calls(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("calls to allocation functions:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(number)
}

/// Number of loaded modules with a TLS segment glibc counts for a new
/// thread's DTV: each object's `PT_TLS` program header.
pub fn has_tls_segment(path: &Path) -> bool {
    let Ok(data) = fs::read(path) else {
        return false;
    };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&data[o..o + 8]);
        u64::from_le_bytes(b) as usize
    };
    let phoff = u64_at(0x20);
    let phentsize = u16_at(0x36);
    let phnum = u16_at(0x38);
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        o + 4 <= data.len()
            && u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]) == 7
    })
}

/// The objects `binary` loads, as `ldd` lists them, plus `preload` and the
/// objects it needs. (`ldd` is a shell script: it is never run with
/// `LD_PRELOAD` set, or the tracer would trace the shell.)
pub fn loaded_objects(binary: &Path, preload: Option<&Path>) -> Vec<PathBuf> {
    let mut v = ldd(binary);
    if let Some(p) = preload {
        v.push(p.to_path_buf());
        v.extend(ldd(p));
    }
    v.sort();
    v.dedup();
    v
}

fn ldd(object: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd")
        .arg(object)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => l,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Bytes of the dynamic thread vector glibc 2.36 callocs for each new thread
/// (`allocate_dtv`): `(max module id + 14 spare + 2 header) * 16`, the module
/// ids being the loaded objects with a TLS segment (`PT_TLS`) at start-up.
pub fn dtv_bytes(objects: &[PathBuf]) -> u64 {
    let modules = objects.iter().filter(|p| has_tls_segment(p)).count() as u64;
    (modules + 14 + 2) * 16
}

/// The DTV size of `binary` run natively plus the extra preloaded objects
/// (valgrind's `vgpreload_*.so`, or libtracer.so and what it needs).
pub fn dtv_bytes_for(binary: &Path, preload: Option<&Path>) -> u64 {
    dtv_bytes(&loaded_objects(binary, preload))
}

/// The DTV size under valgrind: the program's objects plus valgrind's
/// preloaded ones.
pub fn dtv_bytes_under_valgrind(binary: &Path) -> u64 {
    let mut objects = loaded_objects(binary, None);
    for dir in [
        "/usr/libexec/valgrind",
        "/usr/lib/x86_64-linux-gnu/valgrind",
    ] {
        for name in [
            "vgpreload_core-amd64-linux.so",
            "vgpreload_memcheck-amd64-linux.so",
        ] {
            let p = Path::new(dir).join(name);
            if p.exists() {
                objects.push(p);
            }
        }
    }
    dtv_bytes(&objects)
}

/// Bytes and blocks of each reachability class, indexed by
/// `LeakKind::code()`: definite, indirect, possible, reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakClasses(pub [(u64, u64); 4]);

impl LeakClasses {
    /// `[(definite bytes, blocks), (indirect…), (possible…), (reachable…)]`.
    pub const fn new(classes: [(u64, u64); 4]) -> LeakClasses {
        LeakClasses(classes)
    }
    pub fn get(&self, kind: format_writers::LeakKind) -> (u64, u64) {
        self.0[kind.code() as usize]
    }
    pub fn set(&mut self, kind: format_writers::LeakKind, v: (u64, u64)) {
        self.0[kind.code() as usize] = v;
    }
}

/// valgrind's leak summary of one process.
#[derive(Debug, Clone, Default)]
pub struct ValgrindLeaks {
    pub pid: u32,
    pub parent_pid: u32,
    pub classes: LeakClasses,
}

/// Parses memcheck's `LEAK SUMMARY` (`definitely lost: X bytes in Y blocks`,
/// `indirectly lost`, `possibly lost`, `still reachable`), or `All heap
/// blocks were freed` (all zero); `None` when the log has neither.
pub fn parse_valgrind_leaks(log: &str) -> Option<ValgrindLeaks> {
    let mut v = ValgrindLeaks::default();
    let mut seen = false;
    for line in log.lines() {
        let body = match line.strip_prefix("==") {
            Some(rest) => rest.split_once("==").map(|(_, b)| b.trim()).unwrap_or(""),
            None => line.trim(),
        };
        if let Some(rest) = body.strip_prefix("Parent PID:") {
            v.parent_pid = rest.trim().parse().ok()?;
        }
        if body.starts_with("All heap blocks were freed") {
            seen = true;
        }
        for (label, code) in [
            ("definitely lost:", 0),
            ("indirectly lost:", 1),
            ("possibly lost:", 2),
            ("still reachable:", 3),
        ] {
            if let Some(rest) = body.strip_prefix(label) {
                // X bytes in Y blocks
                let w: Vec<&str> = rest.split_whitespace().collect();
                if w.len() >= 4 {
                    v.classes.0[code] = (number(w[0])?, number(w[3])?);
                    seen = true;
                }
            }
        }
    }
    seen.then_some(v)
}

/// Runs `cmd` under memcheck with `--leak-check=full --show-leak-kinds=all`
/// (see [`memcheck`]), one leak summary per process, in pid order.
pub fn valgrind_leaks(cmd: &Cmd) -> (Output, Vec<ValgrindLeaks>) {
    let (output, logs) = memcheck(cmd, &["--leak-check=full", "--show-leak-kinds=all"]);
    let result = logs
        .into_iter()
        .map(|(pid, text)| {
            let mut v = parse_valgrind_leaks(&text)
                .unwrap_or_else(|| panic!("no leak summary in valgrind's log:\n{text}"));
            v.pid = pid;
            v
        })
        .collect();
    (output, result)
}

/// The reachability classes a trace's scan gave, with each block's size from
/// its allocation.
#[derive(Debug, Clone, Default)]
pub struct ScanResult {
    pub pid: u32,
    /// Whether the trace holds a `LeakScan` record.
    pub scanned: bool,
    pub classes: LeakClasses,
    /// Blocks live at the scan that got no class.
    pub unclassified: u64,
    /// Classes naming an address not live at the scan, or named twice.
    pub stray: u64,
    /// Each classified block: (address, size, kind).
    pub blocks: Vec<(u64, u64, format_writers::LeakKind)>,
}

/// Reads the `LeakScan`/`BlockClass` records of a trace.
pub fn read_scan(path: &Path) -> Result<ScanResult, String> {
    let (_, reader) = format_writers::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = ScanResult::default();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut at_scan: HashMap<u64, u64> = HashMap::new();
    for record in reader {
        match record.map_err(|e| format!("{}: {e}", path.display()))? {
            Record::Process(p) => r.pid = p.pid,
            Record::Event(Event::Alloc(a)) => {
                live.insert(a.address, a.size);
            }
            Record::Event(Event::Free(f)) => {
                live.remove(&f.address);
            }
            Record::LeakScan { .. } => {
                r.scanned = true;
                at_scan = live.clone();
            }
            Record::BlockClass { address, kind } => match at_scan.remove(&address) {
                Some(size) => {
                    let (b, n) = r.classes.get(kind);
                    r.classes.set(kind, (b + size, n + 1));
                    r.blocks.push((address, size, kind));
                }
                None => r.stray += 1,
            },
            _ => {}
        }
    }
    r.unclassified = at_scan.len() as u64;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valgrind_leak_summary() {
        let log = "==7117== Parent PID: 7000\n==7117== LEAK SUMMARY:\n\
                   ==7117==    definitely lost: 1,128 bytes in 2 blocks\n\
                   ==7117==    indirectly lost: 124 bytes in 3 blocks\n\
                   ==7117==      possibly lost: 272 bytes in 1 blocks\n\
                   ==7117==    still reachable: 0 bytes in 0 blocks\n\
                   ==7117==         suppressed: 0 bytes in 0 blocks\n";
        let v = parse_valgrind_leaks(log).unwrap();
        assert_eq!(v.parent_pid, 7000);
        assert_eq!(
            v.classes,
            LeakClasses::new([(1128, 2), (124, 3), (272, 1), (0, 0)])
        );
        let freed =
            "==1== Parent PID: 2\n==1== All heap blocks were freed -- no leaks are possible\n";
        assert_eq!(
            parse_valgrind_leaks(freed).unwrap().classes,
            LeakClasses::default()
        );
        assert!(parse_valgrind_leaks("==1== Command: x\n").is_none());
    }

    #[test]
    fn parses_valgrind_summary_with_thousands_separators() {
        let log = "==7117== Command: ./leak\n==7117== HEAP SUMMARY:\n\
                   ==7117==     in use at exit: 72,736 bytes in 2 blocks\n\
                   ==7117==   total heap usage: 5 allocs, 3 frees, 72,888 bytes allocated\n";
        let v = parse_valgrind(log).unwrap();
        assert_eq!(v.figures, Figures::new(5, 3, 72_888, 72_736, 2));
        assert_eq!(v.command, "./leak");
        assert!(parse_valgrind("==1== Command: x\n").is_none());
    }

    #[test]
    fn parses_heaptrack_calls() {
        let t = "total runtime: 0.00s.\ncalls to allocation functions: 1,234 (1000/s)\n";
        assert_eq!(parse_heaptrack_calls(t), Some(1234));
        assert_eq!(parse_heaptrack_calls("nothing"), None);
    }
}
