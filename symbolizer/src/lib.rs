//! Offline symbolization: a code address recorded in a trace becomes the
//! function, source file, line and module it belongs to, with inlined calls
//! expanded, read from the ELF symbol tables and DWARF of the binaries the
//! trace names.
//!
//! The trace gives, for every loaded object, its path and `load_address` —
//! the runtime address of its lowest `PT_LOAD` segment rounded down to a page
//! — so the load bias is `load_address - (p_vaddr & !0xfff)` of that segment,
//! read from the file itself, and an address maps to the file address
//! `address - bias` that the DWARF speaks of. Nothing is needed from the
//! traced machine but the binaries: a trace copied elsewhere resolves when
//! they sit at the same paths, or under a sysroot, or at remapped prefixes
//! ([`Options`]).
//!
//! Each object is opened once, on the first address that falls in it, and
//! each address is resolved once (results are cached). When an address
//! cannot be resolved the [`Resolution`] says why ([`Unresolved`]): no object
//! holds it, the file is missing or is not a usable ELF file, or the file has
//! neither debug info nor a symbol covering it. Malformed files give those
//! states, never a panic.
//!
//! Why these crates: `addr2line` (over `gimli`) is the DWARF line-table and
//! inline-tree reader the Rust standard library's own backtraces use,
//! `object` parses ELF with bounds checks and inflates compressed debug
//! sections, `rustc-demangle` is the Rust project's own demangler (legacy and
//! v0 schemes) and `cpp_demangle` a pure-Rust Itanium C++ demangler: all are
//! maintained, widely used, and need no C toolchain or system library.

mod demangle;
mod image;
pub mod program;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use format_writers::{Object, Symbol};

pub use demangle::{demangle, Language};
use image::{DebugSearch, Image, OpenError};

/// One source-level frame at an address.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceFrame {
    /// Demangled function name (`ns::Foo<int>::bar(int)`, `mycrate::leak`).
    pub function: Option<String>,
    /// Source file as the debug info names it (usually absolute).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// True when this frame's code was inlined into the next frame's function.
    pub inlined: bool,
}

/// Why an address could not be turned into any frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The address lies in no object the trace lists.
    NoObject,
    /// The object has no file (`[vdso]`, `linux-vdso.so.1`).
    NoFile { module: String },
    /// The file could not be opened at the path tried.
    FileMissing { path: PathBuf, error: String },
    /// The file is not an ELF file.
    NotElf { path: PathBuf },
    /// The file claims to be ELF but cannot be parsed.
    Malformed { path: PathBuf, error: String },
    /// The address maps outside every `PT_LOAD` segment of the file: the file
    /// is not the one that was traced, or the trace's load address is wrong.
    OutsideFile { path: PathBuf, file_address: u64 },
    /// The file has no debug info and no symbol covering the address
    /// (stripped); `detail` tells of broken debug info met on the way.
    NoSymbol {
        path: PathBuf,
        detail: Option<String>,
    },
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unresolved::NoObject => write!(f, "the address is in no object loaded by the process"),
            Unresolved::NoFile { module } => {
                write!(
                    f,
                    "{module} exists only in memory: there is no file to read"
                )
            }
            Unresolved::FileMissing { path, error } => {
                write!(f, "cannot open {}: {error}", path.display())
            }
            Unresolved::NotElf { path } => write!(f, "{} is not an ELF file", path.display()),
            Unresolved::Malformed { path, error } => {
                write!(f, "{} is not a valid ELF file: {error}", path.display())
            }
            Unresolved::OutsideFile { path, file_address } => write!(
                f,
                "{:#x} is outside every loadable segment of {} (not the traced binary?)",
                file_address,
                path.display()
            ),
            Unresolved::NoSymbol { path, detail } => {
                write!(
                    f,
                    "{} has no debug info or symbol for this address (stripped?)",
                    path.display()
                )?;
                if let Some(d) = detail {
                    write!(f, "; {d}")?;
                }
                Ok(())
            }
        }
    }
}

/// What is known of one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The address as recorded.
    pub address: u64,
    /// Path of the object holding it, as the trace names it (the executable's
    /// path for the main program).
    pub module: Option<String>,
    /// `address - load_address`: the offset LeakSanitizer prints as
    /// `(module+0xoffset)`.
    pub module_offset: u64,
    /// The address in the file's own virtual address space — what
    /// `addr2line -e module` takes. Equal to `module_offset` for PIE objects.
    pub file_address: Option<u64>,
    /// Innermost first: inlined frames (`inlined == true`), then the function
    /// the code was compiled into. Empty when unresolved.
    pub frames: Vec<SourceFrame>,
    /// Why `frames` is empty.
    pub unresolved: Option<Unresolved>,
}

impl Resolution {
    fn failed(address: u64, reason: Unresolved) -> Resolution {
        Resolution {
            address,
            module: None,
            module_offset: 0,
            file_address: None,
            frames: Vec::new(),
            unresolved: Some(reason),
        }
    }

    /// The frames as trace-model symbols, innermost first (empty strings and
    /// line 0 where unknown).
    pub fn symbols(&self) -> Vec<Symbol> {
        self.frames
            .iter()
            .map(|f| Symbol {
                function: f.function.clone().unwrap_or_default(),
                file: f.file.clone().unwrap_or_default(),
                line: f.line.unwrap_or(0),
            })
            .collect()
    }
}

/// Where to find the binaries and their debug info.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Prefix put before every object path (`--sysroot DIR`): the trace's
    /// `/usr/lib/libc.so.6` is read from `DIR/usr/lib/libc.so.6`, and debug
    /// files from `DIR/usr/lib/debug`. Paths matched by `path_map` are not
    /// prefixed.
    pub sysroot: Option<PathBuf>,
    /// `(from, to)` prefix replacements tried in order before the sysroot:
    /// `/build/app` → `/home/me/app` reads `/build/app/bin/x` from
    /// `/home/me/app/bin/x`. Whole path components only.
    pub path_map: Vec<(PathBuf, PathBuf)>,
    /// Debug directories searched before the default (`/usr/lib/debug`, under
    /// the sysroot when one is set).
    pub debug_dirs: Vec<PathBuf>,
}

impl Options {
    /// Parses a `FROM=TO` path mapping, as a command line gives it.
    pub fn parse_path_map(spec: &str) -> Result<(PathBuf, PathBuf), String> {
        match spec.split_once('=') {
            Some((from, to)) if !from.is_empty() && !to.is_empty() => {
                Ok((PathBuf::from(from), PathBuf::from(to)))
            }
            _ => Err(format!("expected FROM=TO, found {spec:?}")),
        }
    }

    /// Where the file the trace calls `path` is read from on this machine.
    pub fn local_path(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        for (from, to) in &self.path_map {
            if let Ok(rest) = p.strip_prefix(from) {
                return to.join(rest);
            }
        }
        match &self.sysroot {
            Some(root) => root.join(p.strip_prefix("/").unwrap_or(p)),
            None => p.to_path_buf(),
        }
    }

    fn all_debug_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.debug_dirs.clone();
        dirs.push(self.local_default_debug_dir());
        dirs
    }

    fn local_default_debug_dir(&self) -> PathBuf {
        match &self.sysroot {
            Some(root) => root.join("usr/lib/debug"),
            None => PathBuf::from("/usr/lib/debug"),
        }
    }
}

/// What became of one object of the trace ([`Symbolizer::files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Path as the trace names it.
    pub module: String,
    /// Path read on this machine (after the sysroot and path map).
    pub path: PathBuf,
    /// Separate debug file the DWARF came from, when not the file itself.
    pub debug_file: Option<PathBuf>,
    /// Whether usable DWARF was found (else only symbol tables serve).
    pub has_debug_info: bool,
    /// Why the file could not be used at all.
    pub problem: Option<Unresolved>,
}

enum State {
    NotLoaded,
    Loaded(Box<Image>),
    Failed(Unresolved),
}

struct Entry {
    /// Path as the trace names it (the executable's for an empty path).
    module: String,
    load_address: u64,
    size: u64,
    state: State,
    /// With [`Symbolizer::only`]: the offsets from `load_address` of the
    /// addresses that will be asked, sorted.
    wanted: Option<Vec<u64>>,
    /// Whether its DWARF is read ([`Symbolizer::symbol_table_only`]).
    dwarf: bool,
}

/// Resolves the addresses of one traced process.
pub struct Symbolizer {
    /// Sorted by load address.
    entries: Vec<Entry>,
    options: Options,
    debug_dirs: Vec<PathBuf>,
    /// Whether separate debug files are looked for (see
    /// [`Symbolizer::without_separate_debug`]).
    separate_debug: bool,
    cache: HashMap<(u64, bool), Resolution>,
    warnings: Vec<String>,
}

/// True for objects that have no file: the vDSO and friends.
fn is_pseudo(path: &str) -> bool {
    path.starts_with('[')
        || (!path.contains('/') && path.contains("vdso"))
        || path == "linux-gate.so.1"
}

impl Symbolizer {
    /// `objects` are the trace's loaded objects; an object with an empty path
    /// is the main program, read from `executable` (the trace's
    /// `Process::executable`). Objects with an unknown (0) load address are
    /// ignored. Nothing is read until the first lookup.
    pub fn new(objects: &[Object], executable: &str, options: Options) -> Symbolizer {
        let mut entries: Vec<Entry> = objects
            .iter()
            .filter(|o| o.load_address != 0)
            .map(|o| Entry {
                module: if o.path.is_empty() {
                    executable.to_string()
                } else {
                    o.path.clone()
                },
                load_address: o.load_address,
                size: o.size,
                state: State::NotLoaded,
                wanted: None,
                dwarf: true,
            })
            .collect();
        // Stable: of two objects at one address, the later in the trace wins.
        entries.sort_by_key(|e| e.load_address);
        let debug_dirs = options.all_debug_dirs();
        Symbolizer {
            entries,
            options,
            debug_dirs,
            separate_debug: true,
            cache: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Reads only the objects' own files: no separate debug file is looked
    /// for (neither by build id nor by debuglink). Objects whose DWARF lives
    /// in a separate file then resolve from their symbol tables alone. This
    /// is what a traced process does at exit: decompressing a distribution's
    /// detached debug info (tens of MiB for the C library) would cost more
    /// than the whole run of a short program, and the offline symbolizer of
    /// the CLI reads it anyway.
    pub fn without_separate_debug(mut self) -> Symbolizer {
        self.separate_debug = false;
        self
    }

    /// The object the trace names `module` is named from its symbol tables
    /// alone: its DWARF, if any, is not read. For the tracer's own library
    /// at a traced process's exit: its wrappers are frames of the stacks
    /// whose allocations glibc makes inside the wrapped call (a JVM's or a
    /// Rust program's `pthread_getattr_np`), and building a DWARF context
    /// over the library's debug information took 74-113 ms of the exit of
    /// a C program that runs for 3 ms untraced, 167-169 ms of a Rust
    /// program's that spawns 4 threads.
    pub fn symbol_table_only(mut self, module: &str) -> Symbolizer {
        for e in &mut self.entries {
            if e.module == module {
                e.dwarf = false;
            }
        }
        self
    }

    /// Only `addresses` will be asked: an object's function names are read
    /// for the symbols covering one of them alone (the others are kept
    /// nameless, where they bound a neighbour, or dropped). At a traced
    /// process's exit, cc1plus's 31,000 names and the pages of its symbol
    /// table held ~4 MB for the 2,000 functions its stacks named, added to
    /// the program's memory at its largest. An address left out of the list
    /// may then come back without a name.
    pub fn only(mut self, addresses: &[u64]) -> Symbolizer {
        for e in &mut self.entries {
            e.wanted = Some(Vec::new());
        }
        for &a in addresses {
            if let Some(i) = self.find_entry(a) {
                let e = &mut self.entries[i];
                if let Some(w) = &mut e.wanted {
                    w.push(a - e.load_address);
                }
            }
        }
        for e in &mut self.entries {
            if let Some(w) = &mut e.wanted {
                w.sort_unstable();
                w.dedup();
            }
        }
        self
    }

    /// Resolves `address`. `is_return_address` says the address is where a
    /// call returns to (every frame of a recorded stack): the line looked up
    /// is then that of `address - 1`, the call instruction itself, not of the
    /// instruction after it (which may belong to the next line or even to the
    /// next function when the call was the last instruction).
    pub fn symbolize(&mut self, address: u64, is_return_address: bool) -> &Resolution {
        let key = (address, is_return_address);
        if !self.cache.contains_key(&key) {
            let r = self.resolve(address, is_return_address);
            self.cache.insert(key, r);
        }
        &self.cache[&key]
    }

    /// [`Symbolizer::symbolize`] without keeping the result: for a caller
    /// that asks each address once (a traced process at exit: cc1plus's
    /// 10,432 resolutions, their module paths and demangled names, held
    /// ~2 MB until the end).
    pub fn symbolize_once(&mut self, address: u64, is_return_address: bool) -> Resolution {
        match self.cache.get(&(address, is_return_address)) {
            Some(r) => r.clone(),
            None => self.resolve(address, is_return_address),
        }
    }

    /// Resolves many addresses at once, in address order (one object, and
    /// neighbouring compilation units, at a time); read them with
    /// [`Symbolizer::get`] or [`Symbolizer::symbolize`] afterwards.
    pub fn symbolize_all(
        &mut self,
        addresses: impl IntoIterator<Item = u64>,
        is_return_address: bool,
    ) {
        let mut all: Vec<u64> = addresses.into_iter().collect();
        all.sort_unstable();
        all.dedup();
        for a in all {
            self.symbolize(a, is_return_address);
        }
    }

    /// A resolution computed before, if any.
    pub fn get(&self, address: u64, is_return_address: bool) -> Option<&Resolution> {
        self.cache.get(&(address, is_return_address))
    }

    /// Doubts about the files read, one line each: an object whose file spans
    /// a different extent than the mapping the trace recorded may not be the
    /// binary that ran.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The objects opened so far: which file was read for each, where its
    /// debug info came from, or why it could not be used.
    pub fn files(&self) -> Vec<FileInfo> {
        self.entries
            .iter()
            .filter_map(|e| {
                let (debug_file, has_debug_info, problem) = match &e.state {
                    State::NotLoaded => return None,
                    State::Loaded(image) => (image.debug_file.clone(), image.has_dwarf(), None),
                    State::Failed(reason) => (None, false, Some(reason.clone())),
                };
                Some(FileInfo {
                    module: e.module.clone(),
                    path: self.options.local_path(&e.module),
                    debug_file,
                    has_debug_info,
                    problem,
                })
            })
            .collect()
    }

    fn find_entry(&self, address: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.load_address <= address);
        // Closest object below first: one with a known size must contain the
        // address; one without is taken as is (its file decides later).
        (0..i).rev().find(|&j| {
            let e = &self.entries[j];
            e.size == 0 || address - e.load_address < e.size
        })
    }

    fn load(&mut self, idx: usize) {
        let entry = &self.entries[idx];
        if !matches!(entry.state, State::NotLoaded) {
            return;
        }
        let module = entry.module.clone();
        let state = if module.is_empty() || is_pseudo(&module) {
            State::Failed(Unresolved::NoFile {
                module: if module.is_empty() {
                    "the main program (no path in the trace)".into()
                } else {
                    module.clone()
                },
            })
        } else {
            let path = self.options.local_path(&module);
            let search = DebugSearch {
                debug_dirs: &self.debug_dirs,
                host_paths: self.options.sysroot.is_none(),
                separate: self.separate_debug,
                dwarf: entry.dwarf,
            };
            match Image::open(&path, &search, entry.wanted.as_deref()) {
                Ok(image) => {
                    let extent = image.end_vaddr - image.first_vaddr;
                    if entry.size != 0 && extent != entry.size {
                        self.warnings.push(format!(
                            "{}: its segments span {:#x} bytes but the traced mapping spanned {:#x}: it may not be the binary that ran",
                            path.display(),
                            extent,
                            entry.size
                        ));
                    }
                    State::Loaded(Box::new(image))
                }
                Err(OpenError::Missing(error)) => {
                    State::Failed(Unresolved::FileMissing { path, error })
                }
                Err(OpenError::NotElf) => State::Failed(Unresolved::NotElf { path }),
                Err(OpenError::Malformed(error)) => {
                    State::Failed(Unresolved::Malformed { path, error })
                }
            }
        };
        self.entries[idx].state = state;
    }

    fn resolve(&mut self, address: u64, is_return_address: bool) -> Resolution {
        let Some(idx) = self.find_entry(address) else {
            return Resolution::failed(address, Unresolved::NoObject);
        };
        self.load(idx);
        let entry = &self.entries[idx];
        let mut r = Resolution::failed(address, Unresolved::NoObject);
        r.module = Some(entry.module.clone());
        r.module_offset = address - entry.load_address;
        match &entry.state {
            State::NotLoaded => unreachable!("loaded just above"),
            State::Failed(reason) => r.unresolved = Some(reason.clone()),
            State::Loaded(image) => {
                let bias = entry.load_address.wrapping_sub(image.first_vaddr);
                let file_address = address.wrapping_sub(bias);
                r.file_address = Some(file_address);
                let probe = if is_return_address {
                    file_address.saturating_sub(1)
                } else {
                    file_address
                };
                let path = self.options.local_path(&entry.module);
                if !image.contains(probe) {
                    r.unresolved = Some(Unresolved::OutsideFile { path, file_address });
                    return r;
                }
                let (frames, detail) = image.lookup(probe);
                if frames.is_empty() {
                    r.unresolved = Some(Unresolved::NoSymbol { path, detail });
                } else {
                    r.frames = frames;
                    r.unresolved = None;
                }
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_mapping_and_sysroot() {
        let mut o = Options::default();
        assert_eq!(
            o.local_path("/usr/lib/libc.so.6"),
            PathBuf::from("/usr/lib/libc.so.6")
        );
        o.sysroot = Some("/tmp/root".into());
        assert_eq!(
            o.local_path("/usr/lib/libc.so.6"),
            PathBuf::from("/tmp/root/usr/lib/libc.so.6")
        );
        o.path_map
            .push(Options::parse_path_map("/build/app=/home/me/app").unwrap());
        assert_eq!(
            o.local_path("/build/app/bin/x"),
            PathBuf::from("/home/me/app/bin/x")
        );
        // Whole components only: /build/application is not under /build/app.
        assert_eq!(
            o.local_path("/build/application"),
            PathBuf::from("/tmp/root/build/application")
        );
        assert!(Options::parse_path_map("nothing").is_err());
        assert!(Options::parse_path_map("=x").is_err());
        assert_eq!(
            o.all_debug_dirs(),
            vec![PathBuf::from("/tmp/root/usr/lib/debug")]
        );
    }

    #[test]
    fn addresses_outside_objects_and_pseudo_objects() {
        let objects = vec![
            Object {
                path: "[vdso]".into(),
                load_address: 0x7fff_0000_0000,
                size: 0x2000,
            },
            Object {
                path: "/nonexistent/dir/libgone.so".into(),
                load_address: 0x7f00_0000_0000,
                size: 0x1_0000,
            },
        ];
        let mut s = Symbolizer::new(&objects, "", Options::default());
        assert_eq!(
            s.symbolize(0x1000, true).unresolved,
            Some(Unresolved::NoObject)
        );
        // Just past the end of the library's mapping.
        assert_eq!(
            s.symbolize(0x7f00_0001_0000, true).unresolved,
            Some(Unresolved::NoObject)
        );
        let v = s.symbolize(0x7fff_0000_0010, true).clone();
        assert_eq!(v.module.as_deref(), Some("[vdso]"));
        assert_eq!(v.module_offset, 0x10);
        assert!(matches!(v.unresolved, Some(Unresolved::NoFile { .. })));
        let gone = s.symbolize(0x7f00_0000_1234, true).clone();
        assert_eq!(gone.module_offset, 0x1234);
        assert!(gone.frames.is_empty());
        match gone.unresolved {
            Some(Unresolved::FileMissing { path, .. }) => {
                assert_eq!(path, PathBuf::from("/nonexistent/dir/libgone.so"))
            }
            other => panic!("expected a missing file, got {other:?}"),
        }
    }
}
