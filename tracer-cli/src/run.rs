//! `tracer run`: runs a program under `libtracer.so` and says where its
//! traces went.
//!
//! - The library is `$TRACER_LIB` when set, else `libtracer.so` in the
//!   directory of the `tracer` executable (where `cargo build` puts both).
//! - It is prepended to `LD_PRELOAD` (keeping what the user had there), and
//!   the flags become the library's variables: `--format` → `TRACER_FORMAT`,
//!   `--output` → `TRACER_OUTPUT`, `--syscalls` → `TRACER_SYSCALLS`,
//!   `--stack-depth` → `TRACER_STACK_DEPTH`, `--quiet` → `TRACER_QUIET=1`.
//!   The output template (`--output`, else `TRACER_OUTPUT`, else the
//!   library's default) is made absolute in `tracer`'s working directory.
//! - `TRACER_MANIFEST` names a file in a fresh private directory (mode 0700)
//!   that the library appends one line per trace file to; after the child
//!   exits it is read, each file is announced as `tracer: wrote FILE` on
//!   stderr, and the directory is removed.
//! - While the child runs, SIGINT and SIGQUIT are ignored by `tracer` (the
//!   child still gets them from the terminal), as a shell does for a
//!   foreground job: the child decides, and `tracer` reports afterwards.
//! - Exit status: the child's own; 128+N when signal N killed it (as the
//!   shell reports it); 127 when the program was not found, 126 when it could
//!   not be executed. With `--leak-check`, every allocation trace listed in
//!   the manifest (every process the command started: forks and execs add
//!   their own traces) is read, once per process when it wrote several
//!   formats; the leak report of each process that leaked goes to stderr,
//!   then one verdict line (`tracer: 2 leaks (48 bytes in 3 blocks) in 1 of
//!   4 processes` / `tracer: no leaks in 4 processes`). With
//!   `--fail-on-leak`, the status is 23 when leaks remain (overriding the
//!   child's, as LeakSanitizer's `exitcode` does), and 1 when a trace cannot
//!   be read, or no allocation trace was read at all, and the program itself
//!   succeeded.
//! - When no process loaded the library (the manifest is empty), one line
//!   says so, with the reason the program's file shows (statically linked,
//!   32-bit, set-user-ID).
//! - A trace a process left unfinished (an empty file with its spool) is
//!   recovered once the process is gone, and not leak-checked: no exit
//!   scan ran. An image ended by `exec` (`ended: exec` in its info) is not
//!   leak-checked either: its blocks vanished with it.

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use format_writers::Format;

use crate::failure::{Failure, EXIT_LEAKS};
use crate::suppressions::Suppressions;

/// Options of the verb.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub format: Option<String>,
    pub output: Option<String>,
    pub syscalls: Option<String>,
    pub stack_depth: Option<u32>,
    pub quiet: bool,
    pub leak_check: bool,
    pub fail_on_leak: bool,
    pub suppressions: Option<PathBuf>,
    pub no_default_suppressions: bool,
    /// Kinds reported (`None`: definite and indirect).
    pub show: Option<Vec<format_writers::LeakKind>>,
    pub command: Vec<OsString>,
}

/// The library's file name.
pub const LIBRARY: &str = "libtracer.so";

/// Finds the preload library: `TRACER_LIB`, else next to the running binary.
pub fn find_library(tracer_lib: Option<OsString>) -> Result<PathBuf, Failure> {
    if let Some(lib) = tracer_lib.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(lib);
        let named = format!("TRACER_LIB={}", path.display());
        let expected = format!("the path of {LIBRARY}");
        return check_kind(
            &path,
            std::fs::Metadata::is_file,
            "a file",
            &named,
            &expected,
        )
        .map(|()| absolute(&path));
    }
    let exe = std::env::current_exe().map_err(|e| {
        Failure::Message(format!(
            "cannot locate the tracer binary ({}); set TRACER_LIB to the path of {LIBRARY}",
            crate::failure::io_text(&e)
        ))
    })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidate = dir.join(LIBRARY);
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(Failure::Message(format!(
            "{LIBRARY} not found next to {}; build it (cargo build --release) or set TRACER_LIB \
             to its path",
            exe.display()
        )))
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// The dynamic loader splits `LD_PRELOAD` at spaces and colons, with no way
/// to escape them: a library path holding one cannot be preloaded.
pub fn check_preloadable(lib: &Path) -> Result<(), Failure> {
    use std::os::unix::ffi::OsStrExt;
    if lib
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|&b| b == b' ' || b == b':')
    {
        return Err(Failure::Message(format!(
            "{}: LD_PRELOAD cannot carry a path with a space or a colon; copy {LIBRARY} \
             elsewhere and set TRACER_LIB to it",
            lib.display()
        )));
    }
    Ok(())
}

/// `lib` followed by the current `LD_PRELOAD`, if any (colon-separated, as
/// the dynamic loader reads it).
pub fn preload_value(lib: &Path, current: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(cur) = current.filter(|c| !c.is_empty()) {
        v.push(":");
        v.push(cur);
    }
    v
}

/// A private directory for the manifest, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create() -> Result<PrivateDir, Failure> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let dir = base.join(format!(
                "tracer-run-{}-{nanos}-{attempt}",
                std::process::id()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(PrivateDir(dir)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Failure::io(&dir, e)),
            }
        }
        Err(Failure::Message(format!(
            "{}: could not create a private directory for the manifest",
            base.display()
        )))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The exit status a shell would report for `status`.
pub fn shell_status(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

fn set_interrupt_handling(ignore: bool) {
    let disposition = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: installing SIG_IGN/SIG_DFL has no handler code to run and
        // is async-signal-safe; the child is already spawned, so it keeps its
        // default dispositions.
        unsafe {
            libc::signal(sig, disposition);
        }
    }
}

/// Runs the verb. `out` receives leak reports.
pub fn execute(opts: &Options, out: &mut dyn Write) -> Result<i32, Failure> {
    let Some((program, args)) = opts.command.split_first() else {
        return Err(Failure::Message("run: expected a command after --".into()));
    };
    // Read suppressions before running anything: a typo there should not
    // cost a whole run.
    let suppressions = if opts.leak_check || opts.fail_on_leak {
        Suppressions::gather(
            opts.suppressions.as_deref(),
            std::env::var_os("TRACER_SUPPRESSIONS"),
            opts.no_default_suppressions,
        )?
    } else {
        Suppressions::default()
    };
    let lib = find_library(std::env::var_os("TRACER_LIB"))?;
    check_preloadable(&lib)?;
    match &opts.output {
        Some(t) => check_output_directory("--output ", t)?,
        None => {
            if let Some(t) = std::env::var_os("TRACER_OUTPUT") {
                check_output_directory("TRACER_OUTPUT=", &t.to_string_lossy())?;
            }
        }
    }
    let output = anchored_output(opts.output.as_deref());
    let dir = PrivateDir::create()?;
    let manifest = dir.0.join("manifest");
    let mut cmd = Command::new(program);
    cmd.args(args).env("TRACER_MANIFEST", &manifest);
    // A program whose sanitizer runtime must come first would end at once
    // with libtracer ahead of it: it runs as it would untraced.
    let sanitized =
        find_program(Path::new(program)).and_then(|p| symbolizer::program::sanitizer_runtime(&p));
    match &sanitized {
        Some(runtime) => {
            if !opts.quiet {
                eprintln!(
                    "tracer: {} is built with a sanitizer whose runtime ({runtime}) must come \
                     first and takes malloc: it runs untraced",
                    Path::new(program).display()
                );
            }
        }
        None => {
            cmd.env(
                "LD_PRELOAD",
                preload_value(&lib, std::env::var_os("LD_PRELOAD").as_deref()),
            );
        }
    }
    for (var, value) in [
        ("TRACER_FORMAT", opts.format.clone()),
        ("TRACER_SYSCALLS", opts.syscalls.clone()),
        (
            "TRACER_STACK_DEPTH",
            opts.stack_depth.map(|d| d.to_string()),
        ),
    ] {
        if let Some(v) = value {
            cmd.env(var, v);
        }
    }
    cmd.env("TRACER_OUTPUT", output);
    if opts.quiet {
        cmd.env("TRACER_QUIET", "1");
    }
    let mut child = cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            ErrorKind::NotFound => 127,
            _ => 126,
        };
        (
            code,
            Failure::Message(format!(
                "{}: {}",
                Path::new(program).display(),
                crate::failure::io_text(&e)
            )),
        )
    });
    let status = match child.as_mut() {
        Ok(child) => {
            set_interrupt_handling(true);
            let waited = child.wait();
            set_interrupt_handling(false);
            waited.map_err(|e| Failure::io(Path::new(program), e))?
        }
        Err((code, failure)) => {
            eprintln!("{failure}");
            return Ok(*code);
        }
    };
    let mut code = shell_status(status);
    let files = read_manifest(&manifest);
    let checking = opts.leak_check || opts.fail_on_leak;
    let ended = recover_unfinished(&files);
    if !opts.quiet {
        for f in &files {
            eprintln!("tracer: wrote {}", f.display());
        }
    }
    for u in &ended {
        if checking || !opts.quiet {
            writeln!(out, "{}", u.line(checking))?;
        }
    }
    if files.is_empty() && (checking || !opts.quiet) {
        writeln!(out, "{}", no_trace_line(Path::new(program)))?;
    }
    if !files.is_empty() && (checking || !opts.quiet) {
        let own = find_program(Path::new(program))
            .and_then(|p| own_allocator(&p).map(|found| (p, found)));
        if let Some((p, (allocator, symbol))) = own {
            writeln!(
                out,
                "tracer: {} calls {allocator} by names of its own ({symbol}): the blocks it \
                 allocates that way are not traced, only those of the C library's malloc",
                p.display()
            )?;
        }
    }
    if checking {
        let leak_opts = crate::leaks::Options {
            show: opts
                .show
                .clone()
                .unwrap_or_else(|| crate::leaks::DEFAULT_SHOW.to_vec()),
            ..crate::leaks::Options::default()
        };
        // A process that did not exit has no scan: its live blocks are not
        // leaks (LeakSanitizer's check never runs in a crashed process
        // either), and a death test's child must not fail the run.
        let checked: Vec<PathBuf> = files
            .iter()
            .filter(|f| !ended.iter().any(|u| &u.file == *f))
            .cloned()
            .collect();
        let v = leak_check(&checked, &suppressions, &leak_opts, out)?;
        if v.processes == 0
            && v.unreadable == 0
            && (!ended.is_empty() || v.replaced > 0 || v.signalled > 0)
        {
            writeln!(
                out,
                "tracer: no process exited to be leak-checked; no leak report{}",
                v.not_checked()
            )?;
        } else if v.processes == 0 && v.unreadable == 0 {
            // Nothing was checked: a static program, or only the syscall
            // capture asked for. A leak check that saw no heap must not
            // pass as one that found no leak.
            writeln!(out, "tracer: no allocation trace was read; no leak report")?;
        } else {
            writeln!(out, "{}", v.line())?;
        }
        if opts.fail_on_leak {
            if v.groups > 0 {
                code = EXIT_LEAKS;
            } else if (v.unreadable > 0 || (v.processes == 0 && ended.is_empty())) && code == 0 {
                code = 1;
            }
        }
    }
    Ok(code)
}

/// A trace a process left unfinished (its mlyze file still the empty name
/// it reserved, its events in the spool beside it): the process crashed or
/// was killed, or still runs (a daemon the command left behind).
struct Unfinished {
    file: PathBuf,
    spool: PathBuf,
    pid: u32,
    /// Recovered into `file` (the process is gone), or why not.
    outcome: Result<(), String>,
}

impl Unfinished {
    /// What is said of it; `checking`: a leak check leaves it out.
    fn line(&self, checking: bool) -> String {
        let unchecked = if checking { "; not leak-checked" } else { "" };
        match &self.outcome {
            Ok(()) => format!(
                "tracer: recovered {} from its spool: process {} ended without finishing \
                 its trace (a crash or a kill){unchecked}",
                self.file.display(),
                self.pid
            ),
            Err(why) => format!(
                "tracer: {} is not finished ({why}){unchecked}; `tracer recover {}` makes it \
                 readable once the process has ended",
                self.file.display(),
                self.spool.display()
            ),
        }
    }
}

/// Whether a process `pid` exists (a zombie included).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be
    // signalled; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes the spools of 0 bytes beside the finished trace `f`: the library
/// empties a spool it can no longer delete (its process gave up root, and the
/// directory is root's or sticky; or it chrooted). A spool of 0 bytes holds
/// nothing to recover (a spool starts with its 16-byte header).
fn remove_emptied_spools(f: &Path) {
    for spool in format_writers::mlyze::spool_names(f) {
        let Ok(m) = std::fs::symlink_metadata(&spool) else {
            break;
        };
        if m.is_file() && m.len() == 0 {
            let _ = std::fs::remove_file(&spool);
        }
    }
}

/// Finds the traces of `files` their process left unfinished and recovers
/// each whose process is gone (its spool is then removed, as the library
/// does once it finished the file).
fn recover_unfinished(files: &[PathBuf]) -> Vec<Unfinished> {
    let mut v = Vec::new();
    for f in files {
        let empty = std::fs::symlink_metadata(f).is_ok_and(|m| m.is_file() && m.len() == 0);
        if !empty {
            remove_emptied_spools(f);
        }
        let Some(spool) = empty
            .then(|| format_writers::mlyze::unfinished_spool(f))
            .flatten()
        else {
            continue;
        };
        let pid = match format_writers::mlyze::spool_process(&spool) {
            Ok(p) => p.map_or(0, |p| p.pid),
            Err(e) => {
                v.push(Unfinished {
                    file: f.clone(),
                    spool: spool.clone(),
                    pid: 0,
                    outcome: Err(format!("its spool does not read: {e}")),
                });
                continue;
            }
        };
        let outcome = if process_exists(pid) {
            Err(format!("process {pid} still runs"))
        } else {
            match format_writers::mlyze::recover(&spool) {
                Ok((path, _)) if &path == f => {
                    let _ = std::fs::remove_file(&spool);
                    Ok(())
                }
                Ok((path, _)) => Err(format!("recovered into {} instead", path.display())),
                Err(e) => Err(format!("its spool does not read: {e}")),
            }
        };
        v.push(Unfinished {
            file: f.clone(),
            spool,
            pid,
            outcome,
        });
    }
    v
}

/// The template every process of the run gets: `--output`, else
/// `TRACER_OUTPUT`, else the library's default, made absolute against
/// `tracer run`'s working directory. The library resolves a relative one in
/// each process's own working directory, which a process that changed
/// directory before it started (`make -C`, a launcher script's `cd`) does
/// not share: its traces would go elsewhere, or nowhere when the relative
/// directory is missing there. (A working directory that cannot be named,
/// removed under us, leaves the template as it is.)
fn anchored_output(output: Option<&str>) -> OsString {
    let template: OsString = match output {
        Some(t) => t.into(),
        None => std::env::var_os("TRACER_OUTPUT").unwrap_or_else(|| DEFAULT_OUTPUT.into()),
    };
    // An empty one is left for the library to name as a bad setting.
    let relative = !template.is_empty() && !Path::new(&template).is_absolute();
    match std::env::current_dir() {
        Ok(cwd) if relative => cwd.join(template).into_os_string(),
        _ => template,
    }
}

/// The library's template when `TRACER_OUTPUT` is unset.
const DEFAULT_OUTPUT: &str = "tracer-%e-%p";

/// Fails when the directory of the output template does not exist, before
/// the program runs: every traced process would otherwise say it cannot
/// create its files, and the run would be for nothing. A directory named by
/// the template's own fields (`%p`, `%e`, `%t`) cannot be checked here and is
/// left to the library.
fn check_output_directory(named: &str, template: &str) -> Result<(), Failure> {
    let Some(dir) = Path::new(template).parent() else {
        return Ok(());
    };
    if dir.as_os_str().is_empty() || dir.to_string_lossy().contains('%') {
        return Ok(());
    }
    let named = format!("{named}{template}: {}", dir.display());
    let is_dir = std::fs::Metadata::is_dir;
    check_kind(dir, is_dir, "a directory", &named, "an existing directory")
}

/// Whether `path` exists and is `kind` (`is_kind`); else one line naming it
/// (`named`), what is wrong, and what was `expected`.
fn check_kind(
    path: &Path,
    is_kind: fn(&std::fs::Metadata) -> bool,
    kind: &str,
    named: &str,
    expected: &str,
) -> Result<(), Failure> {
    let wrong = match std::fs::metadata(path) {
        Ok(m) if is_kind(&m) => return Ok(()),
        Ok(_) => format!("not {kind}"),
        Err(e) => crate::failure::io_text(&e),
    };
    Err(Failure::Message(format!(
        "{named}: {wrong}; expected {expected}"
    )))
}

/// The line said when no process of the command loaded the library, with
/// the reason when the program's file shows one.
fn no_trace_line(program: &Path) -> String {
    let found = find_program(program);
    let why = found.as_deref().and_then(|p| {
        unreachable_reason(p)
            .or_else(|| {
                symbolizer::program::sanitizer_runtime(p).map(|r| {
                    format!(
                        "is built with a sanitizer whose runtime ({r}) must come first and \
                         takes malloc: its allocations are the sanitizer's, and it ran untraced"
                    )
                })
            })
            .map(|r| (p, r))
    });
    match why {
        Some((p, reason)) => format!("tracer: no trace was written: {} {reason}", p.display()),
        None => format!(
            "tracer: no trace was written: no process of {} loaded {LIBRARY} (a statically \
             linked or set-user-ID program, or one that clears LD_PRELOAD, is not traced)",
            program.display()
        ),
    }
}

/// `program` as `execvp` finds it (see `symbolizer::program`).
fn find_program(program: &Path) -> Option<PathBuf> {
    symbolizer::program::find_program(program, std::env::var_os("PATH").as_deref())
}

/// Why the dynamic loader would not preload anything into `path`, when its
/// file says so: a statically linked program (an ELF file without a
/// program interpreter), a 32-bit one, or a set-user-ID/set-group-ID one
/// (the loader ignores `LD_PRELOAD` paths with a slash for those).
fn unreachable_reason(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::open(path).ok()?;
    let mode = f.metadata().ok()?.permissions().mode();
    let mut ident = [0u8; 64];
    f.read_exact(&mut ident).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    match ident[4] {
        1 => return Some(format!("is a 32-bit program; {LIBRARY} is 64-bit")),
        2 => {}
        _ => return None,
    }
    if mode & 0o6000 != 0 {
        return Some("is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([ident[o], ident[o + 1]]);
    let phoff = u64::from_le_bytes(ident[0x20..0x28].try_into().ok()?);
    let (entsize, count) = (u16_at(0x36) as usize, u16_at(0x38) as usize);
    if entsize < 4 {
        return None;
    }
    // At most 65,535 entries of at most 65,535 bytes each: read them one
    // by one, never allocating from the header's figures.
    let mut p_type = [0u8; 4];
    for i in 0..count {
        f.seek(SeekFrom::Start(phoff.checked_add((i * entsize) as u64)?))
            .ok()?;
        f.read_exact(&mut p_type).ok()?;
        if u32::from_le_bytes(p_type) == 3 {
            // PT_INTERP: a dynamically linked program.
            return None;
        }
    }
    Some("is statically linked: LD_PRELOAD does not reach it".into())
}

/// Allocators a program links in and calls by names of their own, never
/// through the C library's `malloc` (which is all `LD_PRELOAD` can reach):
/// Rust's `#[global_allocator]` crates over jemalloc (tikv-jemallocator:
/// `_rjem_*`), mimalloc (`mi_*`), snmalloc and rpmalloc, and jemalloc
/// built with its `je_` prefix. The first name found is reported.
const OWN_ALLOCATORS: [(&str, &str); 8] = [
    ("_rjem_malloc", "jemalloc"),
    ("_rjem_mallocx", "jemalloc"),
    ("je_malloc", "jemalloc"),
    ("je_mallocx", "jemalloc"),
    ("mi_malloc", "mimalloc"),
    ("mi_malloc_aligned", "mimalloc"),
    ("sn_rust_alloc", "snmalloc"),
    ("rpmalloc", "rpmalloc"),
];

/// The allocator `path` calls by names of its own, and the name found: a
/// function of [`OWN_ALLOCATORS`] defined in the program's symbols (its
/// symbol table, or its dynamic one when stripped). `None` when there is
/// none, the file cannot be read as ELF, or the program defines `malloc`
/// itself (the library says so then, and every caller's `malloc` is its).
fn own_allocator(path: &Path) -> Option<(&'static str, &'static str)> {
    use object::{Object, ObjectSymbol};
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only private mapping of the program's file, read once
    // its run has ended. A file truncated or rewritten in place meanwhile
    // would change what is read (or fault), the risk every symbolizer
    // takes: binaries are replaced by rename, not rewritten.
    let data = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    let file = object::File::parse(&*data).ok()?;
    let mut found = None;
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name == "malloc" {
            return None;
        }
        if found.is_none() {
            found = OWN_ALLOCATORS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(n, a)| (*a, *n));
        }
    }
    found
}

/// What the leak check of a run found, over every traced process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Leak groups reported (distinct allocation stack and kind).
    pub groups: u64,
    pub bytes: u64,
    pub blocks: u64,
    /// Processes with at least one reported group.
    pub leaking: u64,
    /// Processes whose allocation trace was read.
    pub processes: u64,
    /// Trace files that could not be read.
    pub unreadable: u64,
    /// Processes whose traced image ended by `exec` (its blocks vanish with
    /// it): not checked.
    pub replaced: u64,
    /// Processes a signal ended (no exit ran): not checked.
    pub signalled: u64,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Verdict {
    /// `tracer: 2 leaks (48 bytes in 3 blocks) in 1 of 2 processes`, or
    /// `tracer: no leaks in 2 processes`.
    pub fn line(&self) -> String {
        let mut s = if self.groups > 0 {
            format!(
                "tracer: {} ({} in {}) in {} of {}",
                plural(self.groups, "leak", "leaks"),
                plural(self.bytes, "byte", "bytes"),
                plural(self.blocks, "block", "blocks"),
                self.leaking,
                plural(self.processes, "process", "processes")
            )
        } else {
            format!(
                "tracer: no leaks in {}",
                plural(self.processes, "process", "processes")
            )
        };
        if self.unreadable > 0 {
            s.push_str(&format!(
                " ({} could not be read)",
                plural(self.unreadable, "trace", "traces")
            ));
        }
        s.push_str(&self.not_checked());
        s
    }

    /// ` (1 image replaced by exec, not checked)`, ` (2 processes ended by a
    /// signal, not checked)`, both in one parenthesis, or nothing.
    fn not_checked(&self) -> String {
        let mut parts = Vec::new();
        if self.replaced > 0 {
            parts.push(format!(
                "{} replaced by exec",
                plural(self.replaced, "image", "images")
            ));
        }
        if self.signalled > 0 {
            parts.push(format!(
                "{} ended by a signal",
                plural(self.signalled, "process", "processes")
            ));
        }
        if parts.is_empty() {
            return String::new();
        }
        format!(" ({}, not checked)", parts.join(" and "))
    }
}

/// Reads the allocation trace of every process in `files` (a process that
/// wrote several formats is read once), prints the report of each process
/// that leaked, and sums up.
pub fn leak_check(
    files: &[PathBuf],
    suppressions: &Suppressions,
    opts: &crate::leaks::Options,
    out: &mut dyn Write,
) -> Result<Verdict, Failure> {
    let mut v = Verdict::default();
    // A process that wrote the same events in two formats (mlyze and
    // dumpalloc) gets one report: traces are told apart by process.
    let mut seen: Vec<(u32, u64)> = Vec::new();
    for f in files {
        let analysis = match crate::input::Trace::open(f) {
            Ok(t) if t.format == Format::Tlv => continue,
            Ok(_) => crate::input::analyze(f),
            Err(e) => Err(e),
        };
        let a = match analysis {
            Ok((_, a)) => a,
            Err(e) => {
                writeln!(out, "{e}")?;
                v.unreadable += 1;
                continue;
            }
        };
        if let Some(p) = a.process.as_ref().filter(|p| p.pid != 0) {
            let key = (p.pid, p.start_time_ns);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
        }
        // An image the process replaced with exec: its blocks went with it,
        // and valgrind and LeakSanitizer check nothing there either (a
        // shell's background job allocates between its fork and the exec).
        if a.replaced_by_exec() {
            v.replaced += 1;
            continue;
        }
        // A process a signal ended ran no exit (a pool's worker terminated):
        // LeakSanitizer checks none either, and its live blocks are no leaks.
        if a.ended_by_signal().is_some() {
            v.signalled += 1;
            continue;
        }
        v.processes += 1;
        // Per-process counts of what each rule hid.
        let mut supp = suppressions.clone();
        let r = crate::leaks::compute(&a, &mut supp, opts);
        if r.leaks.is_empty() {
            continue;
        }
        v.leaking += 1;
        for l in &r.leaks {
            v.groups += 1;
            v.bytes = v.bytes.saturating_add(l.bytes);
            v.blocks = v.blocks.saturating_add(l.blocks);
        }
        let who = match &a.process {
            Some(p) if p.pid != 0 => format!("process {} ({}), ", p.pid, p.executable),
            _ => String::new(),
        };
        writeln!(out, "tracer: leak report for {who}{}", f.display())?;
        crate::leaks::text(out, &r)?;
    }
    Ok(v)
}

/// The trace files listed in the manifest, in order, each once (no
/// manifest: none).
fn read_manifest(path: &Path) -> Vec<PathBuf> {
    match std::fs::read(path) {
        Ok(bytes) => {
            use std::os::unix::ffi::OsStrExt;
            let mut files: Vec<PathBuf> = Vec::new();
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let path = PathBuf::from(OsStr::from_bytes(line));
                if !files.contains(&path) {
                    files.push(path);
                }
            }
            files
        }
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_not_checked_is_one_parenthesis() {
        let v = |replaced, signalled| {
            Verdict {
                replaced,
                signalled,
                ..Verdict::default()
            }
            .not_checked()
        };
        assert_eq!(v(0, 0), "");
        assert_eq!(v(1, 0), " (1 image replaced by exec, not checked)");
        assert_eq!(v(0, 2), " (2 processes ended by a signal, not checked)");
        assert_eq!(
            v(2, 1),
            " (2 images replaced by exec and 1 process ended by a signal, not checked)"
        );
    }

    /// A 64-bit ELF header with `phnum` program headers of 56 bytes at 64,
    /// the first of type `first`.
    fn elf(class: u8, phnum: u16, first: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 * phnum as usize];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = class;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&phnum.to_le_bytes());
        if phnum > 0 {
            b[64..68].copy_from_slice(&first.to_le_bytes());
        }
        b
    }

    #[test]
    fn reasons_read_from_the_program_file() {
        let dir = std::env::temp_dir().join(format!("tracer-run-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let reason = |p: &Path| unreachable_reason(p).unwrap_or_default();
        // PT_LOAD (1) only: static; PT_INTERP (3): dynamic, no reason.
        assert!(reason(&write("static", &elf(2, 2, 1))).contains("statically linked"));
        assert_eq!(unreachable_reason(&write("dynamic", &elf(2, 2, 3))), None);
        assert!(reason(&write("i386", &elf(1, 0, 0))).contains("32-bit"));
        // A script, a truncated header, program headers past the end, a
        // count far beyond the file: no reason, no panic.
        assert_eq!(unreachable_reason(&write("script", b"#!/bin/sh\n")), None);
        assert_eq!(
            unreachable_reason(&write("short", &elf(2, 1, 1)[..40])),
            None
        );
        let mut far = elf(2, 0xffff, 1);
        far.truncate(200);
        assert_eq!(unreachable_reason(&write("far", &far)), None);
        assert_eq!(unreachable_reason(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn preload_keeps_existing_entries() {
        let lib = Path::new("/opt/libtracer.so");
        assert_eq!(preload_value(lib, None), "/opt/libtracer.so");
        assert_eq!(
            preload_value(lib, Some(OsStr::new(""))),
            "/opt/libtracer.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/x/libasan.so"))),
            "/opt/libtracer.so:/x/libasan.so"
        );
    }

    #[test]
    fn paths_the_loader_would_split_are_refused() {
        assert!(check_preloadable(Path::new("/opt/x/libtracer.so")).is_ok());
        assert!(check_preloadable(Path::new("/opt/my dir/libtracer.so")).is_err());
        assert!(check_preloadable(Path::new("/opt/a:b/libtracer.so")).is_err());
    }

    #[test]
    fn tracer_lib_that_does_not_exist_is_named() {
        let e = find_library(Some("/nonexistent/libtracer.so".into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tracer: TRACER_LIB=/nonexistent/libtracer.so: No such file or directory; expected \
             the path of libtracer.so"
        );
    }

    #[test]
    fn shell_status_of_signals() {
        use std::process::ExitStatus;
        assert_eq!(shell_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(shell_status(ExitStatus::from_raw(9)), 137);
    }
}
