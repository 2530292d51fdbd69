//! Removing libtracer from an `LD_PRELOAD` value (`TRACER_FOLLOW_EXEC=0`).
//!
//! `LD_PRELOAD` is a list separated by colons or spaces. An entry is ours when
//! it is this library's own path or has its file name.

/// The entries of `value` that are not libtracer, joined by `:`.
pub fn without_tracer(value: &[u8]) -> Vec<u8> {
    let own = own_path();
    strip(value, |entry| {
        let base = entry.rsplit(|&c| c == b'/').next().unwrap_or(entry);
        let own_base = own.rsplit(|&c| c == b'/').next().unwrap_or(&own);
        entry == own.as_slice()
            || base == b"libtracer.so"
            || (!own_base.is_empty() && base == own_base)
    })
}

/// Keeps the entries for which `is_ours` is false.
pub fn strip(value: &[u8], is_ours: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in value
        .split(|&c| c == b':' || c == b' ')
        .filter(|e| !e.is_empty())
    {
        if is_ours(entry) {
            continue;
        }
        if !out.is_empty() {
            out.push(b':');
        }
        out.extend_from_slice(entry);
    }
    out
}

/// This library's path as the loader knows it.
fn own_path() -> Vec<u8> {
    let mut info = empty_dl_info();
    let addr = own_path as *const () as *const libc::c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(addr, &mut info) } != 0;
    if !ok || info.dli_fname.is_null() {
        return Vec::new();
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }
        .to_bytes()
        .to_vec()
}

fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::strip;

    #[test]
    fn removes_only_our_entries() {
        let ours = |e: &[u8]| e.ends_with(b"/libtracer.so");
        assert_eq!(strip(b"/a/libtracer.so", ours), b"");
        assert_eq!(
            strip(b"/x/libfoo.so:/a/libtracer.so /y/libbar.so", ours),
            b"/x/libfoo.so:/y/libbar.so"
        );
        assert_eq!(strip(b"::/x/libfoo.so::", ours), b"/x/libfoo.so");
    }
}
