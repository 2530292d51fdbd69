//! Creating trace files safely.
//!
//! Trace files can hold secrets (paths, buffer contents), so they are created
//! exclusively (`O_CREAT|O_EXCL`, which also refuses to follow a symbolic link at
//! the final component), with mode 0600, and a name already taken is never
//! overwritten: `name.1.ext`, `name.2.ext`, … are tried instead.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How many alternative names are tried before giving up.
const MAX_SUFFIX: u32 = 10_000;

/// Opens `path` for writing, creating it exclusively with mode 0600. The
/// extension is `ext` (without the dot, possibly containing dots such as
/// `malt.json`); when `path` exists, `.1`, `.2`, … is inserted before it.
/// Returns the file and the name actually used.
pub fn create_exclusive(path: &Path, ext: &str) -> io::Result<(File, PathBuf)> {
    let text = path.to_string_lossy();
    let dotted = format!(".{ext}");
    let stem = text
        .strip_suffix(dotted.as_str())
        .unwrap_or(&text)
        .to_string();
    let mut candidate = PathBuf::from(format!("{stem}{dotted}"));
    for n in 0..=MAX_SUFFIX {
        if n > 0 {
            candidate = PathBuf::from(format!("{stem}.{n}{dotted}"));
        }
        match open_new(&candidate) {
            Ok(f) => return Ok((f, candidate)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{stem}{dotted} and {MAX_SUFFIX} numbered alternatives all exist"),
    ))
}

/// Creates exactly `path` (exclusive, mode 0600, no symlink followed).
pub fn open_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc_o_nofollow() | libc_o_cloexec())
        .open(path)
}

// Linux x86-64 / aarch64 values; format-writers keeps no dependency on libc.
const fn libc_o_nofollow() -> i32 {
    0o400000
}
const fn libc_o_cloexec() -> i32 {
    0o2000000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn never_overwrites_and_uses_mode_0600() {
        let dir = std::env::temp_dir().join(format!("fw-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = dir.join("t.mlyze");
        let (_, a) = create_exclusive(&base, "mlyze").unwrap();
        let (_, b) = create_exclusive(&dir.join("t"), "mlyze").unwrap();
        let (_, c) = create_exclusive(&base, "mlyze").unwrap();
        assert_eq!(a, dir.join("t.mlyze"));
        assert_eq!(b, dir.join("t.1.mlyze"));
        assert_eq!(c, dir.join("t.2.mlyze"));
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_a_symlink_in_place_of_the_file() {
        let dir = std::env::temp_dir().join(format!("fw-output-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("x.tlv")).unwrap();
        let (_, used) = create_exclusive(&dir.join("x.tlv"), "tlv").unwrap();
        assert_eq!(used, dir.join("x.1.tlv"));
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
