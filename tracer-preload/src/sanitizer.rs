//! Programs built with a sanitizer whose runtime must come first among the
//! process's libraries: AddressSanitizer (`libasan.so`), ThreadSanitizer
//! (`libtsan.so`) and HWASan (`libhwasan.so`), and clang's
//! `libclang_rt.{asan,tsan,hwasan}` builds of them. Each checks at start,
//! before any library's constructor, that it is the first object after the
//! executable, and ends the process otherwise ("ASan runtime does not come
//! first in initial library list"); each also takes `malloc`, so libtracer
//! would record nothing there. An exec of such a program is given an
//! environment without libtracer in `LD_PRELOAD`: it runs as it would
//! untraced.
//!
//! The runtime is found among the `DT_NEEDED` entries of the program's
//! dynamic section, read from its file (a few `pread`s, at exec time only).

use std::ffi::CStr;
use std::os::unix::fs::FileExt;

/// Libraries whose name starts with one of these need to come first.
const FIRST: [&[u8]; 6] = [
    b"libasan.so",
    b"libtsan.so",
    b"libhwasan.so",
    b"libclang_rt.asan",
    b"libclang_rt.tsan",
    b"libclang_rt.hwasan",
];

/// The sanitizer runtime the program at `path` needs first, by name
/// (`libasan.so.8`); `None` when it needs none, or its file cannot be read
/// as a 64-bit little-endian ELF object.
pub fn runtime_of(path: &CStr) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let f = std::fs::File::open(std::ffi::OsStr::from_bytes(path.to_bytes())).ok()?;
    needed(&f)?
        .into_iter()
        .find(|n| FIRST.iter().any(|p| n.starts_with(p)))
        .map(|n| String::from_utf8_lossy(&n).into_owned())
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
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        let names = needed(&exe).unwrap();
        assert!(names.iter().any(|n| n.starts_with(b"libc.so")), "{names:?}");
        assert_eq!(runtime_of(c"/proc/self/exe"), None);
        let text = std::fs::File::open("/proc/self/status").unwrap();
        assert!(needed(&text).is_none());
    }
}
