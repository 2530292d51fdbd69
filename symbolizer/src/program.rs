//! What a program's file says before it runs: where `PATH` finds it, the
//! libraries it needs (`DT_NEEDED`), and whether one of them is a sanitizer
//! runtime that must come first among the process's libraries.
//! AddressSanitizer (`libasan.so`), ThreadSanitizer (`libtsan.so`) and
//! HWASan (`libhwasan.so`), and clang's `libclang_rt.{asan,tsan,hwasan}`
//! builds of them, check at start, before any library's constructor, that
//! they are the first object after the executable, and end the process
//! otherwise ("ASan runtime does not come first in initial library list");
//! each also takes `malloc`. Used by `tracer run` for the program it starts
//! and by libtracer's exec hooks for the programs a traced process runs:
//! both leave libtracer out of such a program's `LD_PRELOAD`.
//!
//! The dynamic section is found through the program headers and read with
//! a few `pread`s (no mapping, no section headers needed); every figure
//! from the file is checked before use.

use std::ffi::OsStr;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Libraries whose name starts with one of these need to come first.
const FIRST: [&[u8]; 6] = [
    b"libasan.so",
    b"libtsan.so",
    b"libhwasan.so",
    b"libclang_rt.asan",
    b"libclang_rt.tsan",
    b"libclang_rt.hwasan",
];

/// `program` as `execvp` finds it: a name with a slash as it is, another
/// in the first directory of `path` (a `PATH` value; glibc's default when
/// `None`) that holds an executable file of that name.
pub fn find_program(program: &Path, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(program.to_path_buf());
    }
    let dirs = path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    std::env::split_paths(dirs)
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The sanitizer runtime the program at `path` needs first, by name
/// (`libasan.so.8`); `None` when it needs none, or its file cannot be read
/// as a 64-bit little-endian ELF object.
pub fn sanitizer_runtime(path: &Path) -> Option<String> {
    needed_libraries(path)?
        .into_iter()
        .find(|n| FIRST.iter().any(|p| n.starts_with(p)))
        .map(|n| String::from_utf8_lossy(&n).into_owned())
}

/// The names in the `DT_NEEDED` entries of the dynamic section of the ELF
/// file at `path`.
pub fn needed_libraries(path: &Path) -> Option<Vec<Vec<u8>>> {
    needed(&std::fs::File::open(path).ok()?)
}

/// Reads `len` bytes at `off` (at most 1 MiB: a length from the file is
/// not trusted further).
fn read_at(f: &std::fs::File, off: u64, len: u64) -> Option<Vec<u8>> {
    if len > 1 << 20 {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off).ok()?;
    Some(buf)
}

fn u16_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?) as u64)
}

fn u32_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?) as u64)
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

/// The names in the `DT_NEEDED` entries of `f`'s dynamic section.
fn needed(f: &std::fs::File) -> Option<Vec<Vec<u8>>> {
    const PT_LOAD: u64 = 1;
    const PT_DYNAMIC: u64 = 2;
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    const DT_STRSZ: u64 = 10;
    let eh = read_at(f, 0, 64)?;
    // ELF magic, 64-bit, little-endian.
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let phoff = u64_at(&eh, 32)?;
    let phentsize = u16_at(&eh, 54)?;
    let phnum = u16_at(&eh, 56)?;
    if phentsize < 56 {
        return None;
    }
    let ph = read_at(f, phoff, phentsize * phnum)?;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum as usize {
        let p = i * phentsize as usize;
        let kind = u32_at(&ph, p)?;
        let (offset, vaddr, filesz) = (
            u64_at(&ph, p + 8)?,
            u64_at(&ph, p + 16)?,
            u64_at(&ph, p + 32)?,
        );
        match kind {
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (off, size) = dynamic?;
    let dynamic = read_at(f, off, size)?;
    let (mut strtab, mut strsz, mut names) = (None, None, Vec::new());
    for entry in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(entry, 0)?, u64_at(entry, 8)?);
        match tag {
            DT_NULL => break,
            DT_NEEDED => names.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            _ => {}
        }
    }
    if names.is_empty() {
        return Some(Vec::new());
    }
    let (strtab, strsz) = (strtab?, strsz?);
    // The string table's address, as the file offset of the segment that
    // holds it.
    let (vaddr, offset, _) = loads
        .into_iter()
        .find(|&(v, _, sz)| strtab >= v && strtab - v < sz)?;
    let strings = read_at(f, offset + (strtab - vaddr), strsz)?;
    Some(
        names
            .into_iter()
            .filter_map(|at| {
                let rest = strings.get(at as usize..)?;
                let end = rest.iter().position(|&b| b == 0)?;
                Some(rest[..end].to_vec())
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary needs libc (and no sanitizer); a file that is not
    /// ELF has no answer.
    #[test]
    fn needed_libraries_are_read_from_the_dynamic_section() {
        let names = needed_libraries(Path::new("/proc/self/exe")).unwrap();
        assert!(names.iter().any(|n| n.starts_with(b"libc.so")), "{names:?}");
        assert_eq!(sanitizer_runtime(Path::new("/proc/self/exe")), None);
        assert!(needed_libraries(Path::new("/proc/self/status")).is_none());
    }

    /// A name with a slash is taken as it is; another is looked up in the
    /// directories given, in order, executable files only.
    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        assert_eq!(
            find_program(Path::new("./x"), None),
            Some(PathBuf::from("./x"))
        );
        let sh = find_program(
            Path::new("sh"),
            Some(OsStr::new("/nonexistent:/bin:/usr/bin")),
        );
        assert_eq!(sh, Some(PathBuf::from("/bin/sh")));
        // /etc/passwd is a file, not an executable one.
        assert_eq!(
            find_program(Path::new("passwd"), Some(OsStr::new("/etc"))),
            None
        );
    }
}
