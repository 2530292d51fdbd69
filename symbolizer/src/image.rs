//! One ELF file opened for lookups: its `PT_LOAD` layout, its DWARF (possibly
//! from a separate debug file) and its symbol tables.
//!
//! The file is memory-mapped and DWARF sections are handed to gimli as
//! windows into the mapping, so a 1 GiB debug file costs address space, not
//! a copy; only compressed sections (`SHF_COMPRESSED`, as Debian's `-dbgsym`
//! packages ship them) are inflated into memory, and only when their claimed
//! size is plausible for their compressed size.
//!
//! Separate debug info is looked for, when the file itself has no
//! `.debug_info`, the way gdb does: by build id under
//! `DEBUGDIR/.build-id/xx/rest.debug`, then by the `.gnu_debuglink` name next
//! to the file, in its `.debug/` subdirectory and under `DEBUGDIR/<dir>/`. A
//! `.gnu_debugaltlink` supplementary file (dwz) is loaded when it can be found.
//!
//! Everything read from the files is untrusted: a malformed file gives an
//! error, never a panic.

use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use crate::demangle::{demangle, Language};
use crate::SourceFrame;

/// Bytes of one section: a window into a mapped file, or inflated data.
#[derive(Clone)]
pub(crate) struct SectionBytes {
    backing: Backing,
    start: usize,
    end: usize,
}

#[derive(Clone)]
enum Backing {
    Mapped(Arc<Mmap>),
    Owned(Arc<[u8]>),
}

impl SectionBytes {
    fn empty() -> SectionBytes {
        SectionBytes {
            backing: Backing::Owned(Arc::from(Vec::new())),
            start: 0,
            end: 0,
        }
    }
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.backing {
            Backing::Mapped(m) => m,
            Backing::Owned(o) => o,
        };
        // Ranges are checked against the backing when built.
        all.get(self.start..self.end).unwrap_or(&[])
    }
}

impl std::fmt::Debug for SectionBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SectionBytes({} bytes)", self.end - self.start)
    }
}

// SAFETY: the bytes `deref` returns live in the heap allocation of an `Arc<[u8]>`
// or in a memory mapping owned by an `Arc<Mmap>`; moving or cloning a
// `SectionBytes` moves or clones the `Arc` only, so the address of the bytes
// stays the same for as long as any clone is alive, which is what gimli's
// `EndianReader` requires.
unsafe impl gimli::StableDeref for SectionBytes {}
// SAFETY: as above; a clone shares the same allocation or mapping.
unsafe impl gimli::CloneStableDeref for SectionBytes {}

pub(crate) type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionBytes>;

/// Why a file could not be used at all.
#[derive(Debug)]
pub(crate) enum OpenError {
    Missing(String),
    NotElf,
    Malformed(String),
}

/// A function symbol from `.symtab` or `.dynsym`.
struct FnSymbol {
    start: u64,
    /// 0 when the symbol table gives no size.
    size: u64,
    global: bool,
    /// The name: `len` bytes at `at` of [`Symbols::names`].
    at: u32,
    len: u32,
}

/// An object's function symbols, their names in one buffer (a `String`
/// each cost ~40 bytes more: 1.2 MB for cc1plus's 31,000, held by the
/// traced process at exit).
#[derive(Default)]
struct Symbols {
    /// Sorted by start address, one per address, once finished.
    list: Vec<FnSymbol>,
    names: String,
}

impl Symbols {
    fn name(&self, s: &FnSymbol) -> &str {
        self.names
            .get(s.at as usize..s.at as usize + s.len as usize)
            .unwrap_or("")
    }

    fn push(&mut self, start: u64, size: u64, global: bool, name: &str) {
        let (Ok(at), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len())) else {
            return;
        };
        self.names.push_str(name);
        self.list.push(FnSymbol {
            start,
            size,
            global,
            at,
            len,
        });
    }
}

/// A mapped, parsed ELF file ready for lookups.
pub(crate) struct Image {
    /// Lowest `PT_LOAD` `p_vaddr`, rounded down to a 4 KiB page: the address
    /// the trace's `load_address` corresponds to.
    pub first_vaddr: u64,
    /// End of the highest `PT_LOAD` segment (`p_vaddr + p_memsz`).
    pub end_vaddr: u64,
    /// `PT_LOAD` segments as `[vaddr, vaddr + memsz)`.
    segments: Vec<(u64, u64)>,
    context: Option<addr2line::Context<Reader>>,
    /// Why DWARF could not be used, when the file has some that is broken.
    pub dwarf_error: Option<String>,
    /// Where the DWARF came from when not from the file itself.
    pub debug_file: Option<PathBuf>,
    symbols: Symbols,
}

/// Settings for finding separate debug files.
pub(crate) struct DebugSearch<'a> {
    /// Global debug directories (`/usr/lib/debug`, already under the sysroot).
    pub debug_dirs: &'a [PathBuf],
    /// Whether paths recorded in files may be opened as they are (false
    /// under a sysroot: the host's files are not the traced machine's).
    pub host_paths: bool,
    /// Whether to look for a separate debug file at all.
    pub separate: bool,
    /// Whether to read DWARF at all (else the symbol tables alone).
    pub dwarf: bool,
}

fn map(path: &Path) -> Result<Arc<Mmap>, OpenError> {
    let file = File::open(path).map_err(|e| OpenError::Missing(e.to_string()))?;
    let meta = file
        .metadata()
        .map_err(|e| OpenError::Missing(e.to_string()))?;
    if !meta.is_file() {
        return Err(OpenError::Missing("not a regular file".into()));
    }
    if meta.len() == 0 {
        return Err(OpenError::Malformed("empty file".into()));
    }
    // SAFETY: the mapping is read-only and private. Another process truncating
    // or rewriting the binary while we read it would change what we see (or
    // fault); debuggers and symbolizers share that risk, and binaries are not
    // normally rewritten in place (installers replace them by rename).
    let mmap = unsafe { Mmap::map(&file) }.map_err(|e| OpenError::Missing(e.to_string()))?;
    Ok(Arc::new(mmap))
}

fn parse(data: &[u8]) -> Result<object::File<'_>, OpenError> {
    let file = object::File::parse(data).map_err(|e| match object::FileKind::parse(data) {
        Ok(object::FileKind::Elf32) | Ok(object::FileKind::Elf64) => {
            OpenError::Malformed(e.to_string())
        }
        _ => OpenError::NotElf,
    })?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(OpenError::NotElf);
    }
    Ok(file)
}

/// Largest inflation ratio believed for a compressed section: zlib cannot
/// expand beyond ~1032:1, and debug info compresses 3–10×.
const MAX_INFLATION: u64 = 1100;

/// The bytes of section `name` of `file` (mapped at `mmap`), or empty.
fn section_bytes(
    file: &object::File<'_>,
    mmap: &Arc<Mmap>,
    name: &str,
) -> Result<SectionBytes, String> {
    let Some(section) = file.section_by_name(name) else {
        return Ok(SectionBytes::empty());
    };
    let range = section
        .compressed_file_range()
        .map_err(|e| format!("section {name}: {e}"))?;
    if range.format == object::CompressionFormat::None {
        // SHT_NOBITS sections have no bytes in the file.
        let Some((offset, size)) = section.file_range() else {
            return Ok(SectionBytes::empty());
        };
        let start = usize::try_from(offset).map_err(|_| format!("section {name}: offset"))?;
        let end = usize::try_from(offset.saturating_add(size))
            .ok()
            .filter(|&end| end <= mmap.len())
            .ok_or_else(|| format!("section {name} extends beyond the end of the file"))?;
        return Ok(SectionBytes {
            backing: Backing::Mapped(mmap.clone()),
            start,
            end,
        });
    }
    if range.uncompressed_size > range.compressed_size.saturating_mul(MAX_INFLATION) + 4096 {
        return Err(format!(
            "section {name} claims {} bytes once inflated from {}",
            range.uncompressed_size, range.compressed_size
        ));
    }
    let data = section
        .uncompressed_data()
        .map_err(|e| format!("section {name}: {e}"))?;
    let len = data.len();
    Ok(SectionBytes {
        backing: Backing::Owned(Arc::from(data.into_owned())),
        start: 0,
        end: len,
    })
}

fn load_dwarf(file: &object::File<'_>, mmap: &Arc<Mmap>) -> Result<gimli::Dwarf<Reader>, String> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    gimli::Dwarf::load(|id| -> Result<Reader, String> {
        Ok(gimli::EndianReader::new(
            section_bytes(file, mmap, id.name())?,
            endian,
        ))
    })
}

fn has_debug_info(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.file_range().is_some())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn os_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Candidate paths of the separate debug file of `path`, gdb's order.
fn debug_candidates(
    path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&[u8]>,
    search: &DebugSearch<'_>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let (first, rest) = id.split_at(1);
        for dir in search.debug_dirs {
            out.push(
                dir.join(".build-id")
                    .join(hex(first))
                    .join(format!("{}.debug", hex(rest))),
            );
        }
    }
    if let Some(link) = debuglink.filter(|l| !l.is_empty() && !l.contains(&b'/')) {
        let link = os_path(link);
        let dir = path.parent().unwrap_or(Path::new(""));
        let beside = dir.join(&link);
        // A debuglink naming the file itself would just load it again.
        if beside != path {
            out.push(beside);
        }
        out.push(dir.join(".debug").join(&link));
        for debug_dir in search.debug_dirs {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            out.push(debug_dir.join(rel).join(&link));
        }
    }
    out
}

impl Image {
    /// Opens `path`, and its separate debug info when the file has none.
    /// With `wanted` (offsets from the load address of the addresses that
    /// will be looked up), only the symbols covering one of them are named
    /// (see [`crate::Symbolizer::only`]).
    pub fn open(
        path: &Path,
        search: &DebugSearch<'_>,
        wanted: Option<&[u64]>,
    ) -> Result<Image, OpenError> {
        let mmap = map(path)?;
        let file = parse(&mmap)?;

        let mut segments: Vec<(u64, u64)> = file
            .segments()
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        segments.sort_unstable();
        let Some(first_vaddr) = segments.iter().map(|s| s.0 & !0xfff).min() else {
            return Err(OpenError::Malformed("no PT_LOAD segment".into()));
        };
        let end_vaddr = segments.iter().map(|s| s.1).max().unwrap_or(first_vaddr);

        // File addresses, sorted as the offsets are.
        let wanted: Option<Vec<u64>> =
            wanted.map(|w| w.iter().map(|&o| first_vaddr.wrapping_add(o)).collect());
        let wanted = wanted.as_deref();
        let mut symbols = Symbols::default();
        collect_symbols(&file, &mut symbols, wanted);

        let build_id = file.build_id().ok().flatten();
        let mut debug_file = None;
        let mut dwarf_source: Option<(Arc<Mmap>, PathBuf)> = None;
        if search.dwarf && search.separate && !has_debug_info(&file) {
            let debuglink = file.gnu_debuglink().ok().flatten().map(|(name, _crc)| name);
            for candidate in debug_candidates(path, build_id, debuglink, search) {
                let Ok(dmap) = map(&candidate) else { continue };
                let Ok(dfile) = parse(&dmap) else { continue };
                // A debug file for another build would give wrong lines.
                let did = dfile.build_id().ok().flatten();
                if let (Some(a), Some(b)) = (build_id, did) {
                    if a != b {
                        continue;
                    }
                }
                if !has_debug_info(&dfile) {
                    continue;
                }
                collect_symbols(&dfile, &mut symbols, wanted);
                drop(dfile);
                dwarf_source = Some((dmap, candidate));
                break;
            }
        }
        finish_symbols(&mut symbols);

        let (context, dwarf_error) = match &dwarf_source {
            Some((dmap, dpath)) => {
                debug_file = Some(dpath.clone());
                match parse(dmap) {
                    Ok(dfile) => make_context(&dfile, dmap, dpath, search),
                    Err(_) => (None, Some("debug file became unreadable".into())),
                }
            }
            None if search.dwarf && has_debug_info(&file) => {
                make_context(&file, &mmap, path, search)
            }
            None => (None, None),
        };

        Ok(Image {
            first_vaddr,
            end_vaddr,
            segments,
            context,
            dwarf_error,
            debug_file,
            symbols,
        })
    }

    /// Whether DWARF could be read for this file.
    pub fn has_dwarf(&self) -> bool {
        self.context.is_some()
    }

    /// Whether `vaddr` lies in one of the file's `PT_LOAD` segments.
    pub fn contains(&self, vaddr: u64) -> bool {
        self.segments
            .iter()
            .any(|&(lo, hi)| vaddr >= lo && vaddr < hi)
    }

    /// Source frames for file address `probe`, innermost (inlined) first.
    /// Returns the frames and a note on broken debug info met on the way.
    pub fn lookup(&self, probe: u64) -> (Vec<SourceFrame>, Option<String>) {
        let mut frames = Vec::new();
        let mut error = None;
        if let Some(ctx) = &self.context {
            match ctx.find_frames(probe).skip_all_loads() {
                Ok(mut iter) => loop {
                    match iter.next() {
                        Ok(Some(frame)) => {
                            let function = frame.function.as_ref().and_then(|f| {
                                let raw = f.raw_name().ok()?;
                                let lang = f.language.map(Language::from_dwarf);
                                Some(demangle(&raw, lang))
                            });
                            let (file, line) = match &frame.location {
                                Some(loc) => {
                                    (loc.file.map(str::to_string), loc.line.filter(|&l| l != 0))
                                }
                                None => (None, None),
                            };
                            frames.push(SourceFrame {
                                function,
                                file,
                                line,
                                inlined: true,
                            });
                        }
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(format!("DWARF: {e}"));
                            break;
                        }
                    }
                },
                Err(e) => error = Some(format!("DWARF: {e}")),
            }
        }
        // Every frame but the outermost one was inlined into the next.
        if let Some(last) = frames.last_mut() {
            last.inlined = false;
        }
        // The symbol table names the outermost function when DWARF could not.
        let needs_name = !matches!(frames.last(), Some(f) if f.function.is_some());
        if needs_name {
            if let Some(name) = self.symbol_at(probe) {
                match frames.last_mut() {
                    Some(f) => f.function = Some(name),
                    None => frames.push(SourceFrame {
                        function: Some(name),
                        file: None,
                        line: None,
                        inlined: false,
                    }),
                }
            }
        }
        // A frame with neither name nor place says nothing.
        if frames.len() == 1 && frames[0].function.is_none() && frames[0].file.is_none() {
            frames.clear();
        }
        (frames, error.or_else(|| self.dwarf_error.clone()))
    }

    /// The demangled name of the function symbol covering `probe`.
    fn symbol_at(&self, probe: u64) -> Option<String> {
        let list = &self.symbols.list;
        let i = list.partition_point(|s| s.start <= probe);
        let s = list.get(i.checked_sub(1)?)?;
        if (s.size != 0 && probe - s.start >= s.size) || s.len == 0 {
            return None;
        }
        Some(demangle(self.symbols.name(s), None))
    }
}

fn make_context(
    file: &object::File<'_>,
    mmap: &Arc<Mmap>,
    path: &Path,
    search: &DebugSearch<'_>,
) -> (Option<addr2line::Context<Reader>>, Option<String>) {
    let mut dwarf = match load_dwarf(file, mmap) {
        Ok(d) => d,
        Err(e) => return (None, Some(e)),
    };
    if let Ok(Some((alt_name, alt_id))) = file.gnu_debugaltlink() {
        if let Some(sup) = load_sup(path, alt_name, alt_id, search) {
            dwarf.sup = Some(Arc::new(sup));
        }
    }
    match addr2line::Context::from_dwarf(dwarf) {
        Ok(ctx) => (Some(ctx), None),
        Err(e) => (None, Some(format!("DWARF: {e}"))),
    }
}

/// Loads the dwz supplementary file named by `.gnu_debugaltlink`.
fn load_sup(
    path: &Path,
    name: &[u8],
    build_id: &[u8],
    search: &DebugSearch<'_>,
) -> Option<gimli::Dwarf<Reader>> {
    let name = os_path(name);
    let mut candidates = Vec::new();
    if name.is_absolute() {
        // An absolute path under /usr/lib/debug is looked for under each
        // debug directory (which carry the sysroot), elsewhere as it is.
        for dir in search.debug_dirs {
            if let Ok(rel) = name.strip_prefix("/usr/lib/debug") {
                candidates.push(dir.join(rel));
            }
        }
        if search.host_paths {
            candidates.push(name.clone());
        }
    } else {
        candidates.push(path.parent().unwrap_or(Path::new("")).join(&name));
    }
    if build_id.len() >= 2 {
        for dir in search.debug_dirs {
            candidates.push(
                dir.join(".build-id")
                    .join(hex(&build_id[..1]))
                    .join(format!("{}.debug", hex(&build_id[1..]))),
            );
        }
    }
    for candidate in candidates {
        let Ok(m) = map(&candidate) else { continue };
        let Ok(f) = parse(&m) else { continue };
        if f.build_id().ok().flatten().is_some_and(|id| id != build_id) {
            continue;
        }
        if let Ok(d) = load_dwarf(&f, &m) {
            return Some(d);
        }
    }
    None
}

/// Adds `file`'s function symbols to `out`. With `wanted` (sorted file
/// addresses), only the symbols a lookup of one of them (or of the
/// instruction before it, as for a return address) can land on are added,
/// named, with the nameless start of the next symbol after each, which
/// bounds it; otherwise every symbol, named.
fn collect_symbols(file: &object::File<'_>, out: &mut Symbols, wanted: Option<&[u64]>) {
    let Some(wanted) = wanted else {
        return collect_all(file, out);
    };
    let (list, names) = (out.list.len(), out.names.len());
    if collect_chosen(file, out, wanted).is_none() {
        out.list.truncate(list);
        out.names.truncate(names);
        collect_all(file, out);
    }
}

/// Every function symbol that defines code, with the address it starts at.
fn text_symbols<'data, 'file>(
    file: &'file object::File<'data>,
) -> impl Iterator<Item = (u64, object::Symbol<'data, 'file>)> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
        .map(|s| (s.address(), s))
}

fn collect_all(file: &object::File<'_>, out: &mut Symbols) {
    for (start, sym) in text_symbols(file) {
        match sym.name() {
            Ok(name) if !name.is_empty() => out.push(start, sym.size(), sym.is_global(), name),
            _ => {}
        }
    }
}

/// What a lookup of each probe (every wanted address and the one before
/// it) finds in the whole table is the symbol with the greatest start at
/// or below it. The probes cut the addresses into gaps, gap `j` ending at
/// probe `j`; a probe's symbol is the last start of its own gap or, if that
/// gap is empty, the one an earlier probe found. So two passes, holding
/// three words a probe instead of the whole table (cc1plus: ~0.5 MB against
/// 1.5 MB for its 31,000 symbols, at a traced process's exit): the first
/// finds each gap's last and first starts, the second adds the symbols at
/// a last start, named, and those at a first start, nameless (they end the
/// symbol found before them, for addresses that were not asked). Names are
/// read for these alone. `None` when one of them has no usable name: the
/// whole table would not hold it, and `collect_all` is the answer then.
fn collect_chosen(file: &object::File<'_>, out: &mut Symbols, wanted: &[u64]) -> Option<()> {
    const NONE: u64 = u64::MAX;
    let mut probes: Vec<u64> = wanted
        .iter()
        .flat_map(|&a| [a.saturating_sub(1), a])
        .collect();
    probes.sort_unstable();
    probes.dedup();
    let gap = |start: u64| probes.partition_point(|&p| p < start);
    let mut last = vec![NONE; probes.len()];
    // One more: the starts after the last probe.
    let mut first = vec![NONE; probes.len() + 1];
    for (start, _) in text_symbols(file) {
        let j = gap(start);
        first[j] = first[j].min(start);
        if let Some(l) = last.get_mut(j) {
            if *l == NONE || *l < start {
                *l = start;
            }
        }
    }
    for (start, sym) in text_symbols(file) {
        let j = gap(start);
        let named = last.get(j) == Some(&start);
        if !named && first[j] != start {
            continue;
        }
        let name = sym.name().ok().filter(|n| !n.is_empty())?;
        let name = if named { name } else { "" };
        out.push(start, sym.size(), sym.is_global(), name);
    }
    Some(())
}

/// Sorts symbols and keeps one per address: a named one over a nameless one
/// (see `collect_chosen`), a sized one over an unsized one,
/// a global over a local, a public name over a `_`-prefixed alias
/// (`malloc` over `__libc_malloc`), then the shorter.
fn finish_symbols(symbols: &mut Symbols) {
    let mut list = std::mem::take(&mut symbols.list);
    list.sort_by(|a, b| {
        let (an, bn) = (symbols.name(a), symbols.name(b));
        a.start
            .cmp(&b.start)
            .then((a.len == 0).cmp(&(b.len == 0)))
            .then((b.size != 0).cmp(&(a.size != 0)))
            .then(b.global.cmp(&a.global))
            .then(an.starts_with('_').cmp(&bn.starts_with('_')))
            .then(an.len().cmp(&bn.len()))
            .then(an.cmp(bn))
    });
    list.dedup_by(|later, first| later.start == first.start);
    // A nameless symbol (see `collect_chosen`) only bounds the symbol
    // before it: not needed after a sized one that ends at or before it.
    let mut end_before: Option<u64> = None;
    list.retain(|s| {
        let keep = s.len != 0 || end_before.map_or(true, |end| end > s.start);
        if keep {
            end_before = (s.size != 0).then(|| s.start.saturating_add(s.size));
        }
        keep
    });
    list.shrink_to_fit();
    // Only the kept names stay when many were dropped (a file's `.symtab`
    // repeats its `.dynsym`).
    let kept_bytes: usize = list.iter().map(|s| s.len as usize).sum();
    if kept_bytes < symbols.names.len() / 8 * 7 {
        let mut kept = Symbols {
            list: Vec::with_capacity(list.len()),
            names: String::with_capacity(kept_bytes),
        };
        for s in &list {
            kept.push(s.start, s.size, s.global, symbols.name(s));
        }
        *symbols = kept;
    } else {
        symbols.list = list;
        symbols.names.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the addresses to be asked given, every one of them (and the
    /// instruction before it, as a return address is looked up) gets the
    /// name the full table gives; any other address gets that name or
    /// none, never another. Over the C library's and this test program's
    /// own function symbols: probes at starts, inside, at ends and between.
    #[test]
    fn naming_only_the_wanted_symbols_names_them_as_the_full_table_does() {
        let search = DebugSearch {
            debug_dirs: &[],
            host_paths: true,
            separate: false,
            dwarf: true,
        };
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists());
        let exe = std::env::current_exe().unwrap();
        for path in libc.into_iter().chain([exe.as_path()]) {
            let full = Image::open(path, &search, None).unwrap();
            let starts: Vec<(u64, u64)> = full
                .symbols
                .list
                .iter()
                .map(|s| (s.start, s.size))
                .collect();
            assert!(
                starts.len() > 100,
                "{}: {} symbols",
                path.display(),
                starts.len()
            );
            let mut probes = Vec::new();
            for &(a, size) in &starts {
                probes.extend([a.wrapping_sub(1), a, a + size / 2, a + size, a + size + 1]);
            }
            // Every 7th symbol's middle and end (a return address after a
            // last call) are the addresses asked.
            let asked: Vec<u64> = starts
                .iter()
                .step_by(7)
                .flat_map(|&(a, size)| [a + size / 2, a + size])
                .collect();
            let mut offsets: Vec<u64> = asked.iter().map(|&a| a - full.first_vaddr).collect();
            offsets.sort_unstable();
            offsets.dedup();
            let some = Image::open(path, &search, Some(&offsets)).unwrap();
            assert!(some.symbols.names.len() < full.symbols.names.len() / 3);
            // The asked symbols and what bounds them, not the whole table.
            assert!(
                some.symbols.list.len() < full.symbols.list.len() / 2,
                "{}: {} of {} symbols kept",
                path.display(),
                some.symbols.list.len(),
                full.symbols.list.len()
            );
            for &a in &asked {
                for p in [a, a - 1] {
                    assert_eq!(
                        some.symbol_at(p),
                        full.symbol_at(p),
                        "{} asked {p:#x}",
                        path.display()
                    );
                }
            }
            for p in probes {
                let got = some.symbol_at(p);
                assert!(
                    got.is_none() || got == full.symbol_at(p),
                    "{} at {p:#x}: {got:?} against {:?}",
                    path.display(),
                    full.symbol_at(p)
                );
            }
        }
    }

    /// Symbols without a size (hand-written assembly) name every address up
    /// to the next symbol. Asked for a return address in one, the table
    /// still ends it where the next symbol starts: an address of that next
    /// symbol, not asked, comes back without a name, never with the first's.
    #[test]
    fn a_symbol_without_a_size_ends_where_the_next_one_starts() {
        let dir = std::env::temp_dir().join(format!("symbolizer-unsized-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("bare.c"), dir.join("bare"));
        // bare_a: nop, nop, call bare_b (5 bytes), nop, ret; no `.size`.
        std::fs::write(
            &src,
            concat!(
                "__asm__(\".text\\n.globl bare_a\\n.type bare_a,@function\\n",
                "bare_a:\\n nop\\n nop\\n call bare_b\\n nop\\n ret\\n",
                ".globl bare_b\\n.type bare_b,@function\\nbare_b:\\n nop\\n nop\\n ret\\n\");\n",
                "void bare_a(void);\nint main(void) { bare_a(); return 0; }\n"
            ),
        )
        .unwrap();
        let built = std::process::Command::new("gcc")
            .args(["-g0", "-O0", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("gcc runs");
        assert!(built.success());
        let search = DebugSearch {
            debug_dirs: &[],
            host_paths: true,
            separate: false,
            dwarf: true,
        };
        let full = Image::open(&exe, &search, None).unwrap();
        let at = |name: &str| {
            let s = full
                .symbols
                .list
                .iter()
                .find(|s| full.symbols.name(s) == name);
            let s = s.unwrap_or_else(|| panic!("{name} in the table"));
            assert_eq!(s.size, 0, "{name} has no size");
            s.start
        };
        let (a, b) = (at("bare_a"), at("bare_b"));
        let ret = a + 7;
        assert!(ret < b);
        let some = Image::open(&exe, &search, Some(&[ret - full.first_vaddr])).unwrap();
        for p in [ret - 1, ret] {
            assert_eq!(some.symbol_at(p).as_deref(), Some("bare_a"), "asked {p:#x}");
            assert_eq!(full.symbol_at(p).as_deref(), Some("bare_a"));
        }
        for p in [b, b + 1, b + 2] {
            assert_eq!(full.symbol_at(p).as_deref(), Some("bare_b"));
            assert_eq!(some.symbol_at(p), None, "not asked: {p:#x}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
