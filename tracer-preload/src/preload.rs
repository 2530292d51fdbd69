//! The environment an exec'd program gets: libtracer removed from its
//! `LD_PRELOAD` (`TRACER_FOLLOW_EXEC=0`), or put back with the `TRACER_*`
//! variables the process started with when the program built an environment
//! without them (`TRACER_FOLLOW_EXEC=1`: `env -i`, `posix_spawn` with an
//! environment of its own).
//!
//! `LD_PRELOAD` is a list separated by colons or spaces. An entry is ours when
//! it is this library's own path or has its file name.

use std::sync::OnceLock;

/// `entries` (an exec's environment) with libtracer removed from
/// `LD_PRELOAD`, and `LD_PRELOAD` left out when nothing else is in it
/// (`TRACER_FOLLOW_EXEC=0`).
pub fn without_tracer_environment<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let own = own_path();
    entries
        .filter_map(|e| match e.strip_prefix(b"LD_PRELOAD=") {
            Some(value) => {
                let kept = strip(value, |x| is_ours(x, &own));
                (!kept.is_empty()).then(|| [&b"LD_PRELOAD="[..], &kept].concat())
            }
            None => Some(e.to_vec()),
        })
        .collect()
}

/// Whether an `LD_PRELOAD` entry names libtracer (`own`: our path).
fn is_ours(entry: &[u8], own: &[u8]) -> bool {
    let base = entry.rsplit(|&c| c == b'/').next().unwrap_or(entry);
    let own_base = own.rsplit(|&c| c == b'/').next().unwrap_or(own);
    entry == own || base == b"libtracer.so" || (!own_base.is_empty() && base == own_base)
}

/// `LD_PRELOAD=` followed by our path, and the `TRACER_*` entries
/// (`NAME=value`) of the environment the process started with.
struct Carried {
    preload: Vec<u8>,
    tracer: Vec<Vec<u8>>,
}

static CARRIED: OnceLock<Carried> = OnceLock::new();

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Takes what an exec'd program must be given to be traced: called by the
/// constructor, before the program's code may change its environment.
/// Only the entries kept are copied: a copy of the whole environment
/// (`std::env::vars_os`), freed at once, left holes of every size in the
/// program's heap before `main`, and a chunk the program freed was then not
/// the one its next request of that size got (`examples/leaks/slack.c`).
pub fn remember_environment() {
    CARRIED.get_or_init(|| {
        let mut tracer = Vec::new();
        // SAFETY: `environ` is glibc's array of NUL-terminated strings,
        // ended by a null pointer; nothing changes it while the
        // constructor runs.
        unsafe {
            let mut e = environ;
            while !e.is_null() && !(*e).is_null() {
                let entry = core::ffi::CStr::from_ptr(*e).to_bytes();
                if entry.starts_with(b"TRACER_") {
                    tracer.push(entry.to_vec());
                }
                e = e.add(1);
            }
        }
        Carried {
            preload: own_path(),
            tracer,
        }
    });
}

/// The entries an environment made of `entries` needs added or changed for
/// the exec'd program to be traced as this one is, or `None` when it
/// already is: `LD_PRELOAD` with our path first when ours is missing from
/// it, and every `TRACER_*` variable of the start that `entries` lacks (one
/// the program set itself stays as it is).
pub fn traced_environment<'a>(
    entries: impl Iterator<Item = &'a [u8]> + Clone,
) -> Option<Vec<Vec<u8>>> {
    let c = CARRIED.get()?;
    with_tracer(entries, &c.preload, &c.tracer)
}

/// [`traced_environment`] with our path and the start's variables given.
fn with_tracer<'a>(
    entries: impl Iterator<Item = &'a [u8]> + Clone,
    own: &[u8],
    tracer: &[Vec<u8>],
) -> Option<Vec<Vec<u8>>> {
    if own.is_empty() || own.iter().any(|&c| c == b':' || c == b' ') {
        return None;
    }
    fn name(e: &[u8]) -> &[u8] {
        e.split(|&c| c == b'=').next().unwrap_or(e)
    }
    let preload_of = |e: &'a [u8]| e.strip_prefix(b"LD_PRELOAD=");
    let has_ours = entries.clone().any(|e| {
        preload_of(e).is_some_and(|v| {
            v.split(|&c| c == b':' || c == b' ')
                .any(|x| !x.is_empty() && is_ours(x, own))
        })
    });
    let missing: Vec<&Vec<u8>> = tracer
        .iter()
        .filter(|t| {
            let n = name(t);
            !entries.clone().any(|e| name(e) == n)
        })
        .collect();
    if has_ours && missing.is_empty() {
        return None;
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut had_preload = false;
    for e in entries {
        match preload_of(e) {
            // The loader reads the first LD_PRELOAD of the environment.
            Some(v) if !had_preload && !has_ours => {
                had_preload = true;
                let mut n = [b"LD_PRELOAD=", own].concat();
                if v.iter().any(|&c| c != b':' && c != b' ') {
                    n.push(b':');
                    n.extend_from_slice(v);
                }
                out.push(n);
            }
            Some(_) => {
                had_preload = true;
                out.push(e.to_vec());
            }
            None => out.push(e.to_vec()),
        }
    }
    if !had_preload {
        out.push([b"LD_PRELOAD=", own].concat());
    }
    out.extend(missing.into_iter().cloned());
    Some(out)
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
    use super::{strip, with_tracer};

    fn env(entries: &[&str], tracer: &[&str]) -> Option<Vec<String>> {
        let tracer: Vec<Vec<u8>> = tracer.iter().map(|t| t.as_bytes().to_vec()).collect();
        with_tracer(
            entries.iter().map(|e| e.as_bytes()),
            b"/lib/libtracer.so",
            &tracer,
        )
        .map(|v| {
            v.into_iter()
                .map(|e| String::from_utf8(e).unwrap())
                .collect()
        })
    }

    #[test]
    fn an_environment_loses_us_when_exec_is_not_followed() {
        let env = |entries: &[&str]| -> Vec<String> {
            super::without_tracer_environment(entries.iter().map(|e| e.as_bytes()))
                .into_iter()
                .map(|e| String::from_utf8(e).unwrap())
                .collect()
        };
        assert_eq!(
            env(&["A=1", "LD_PRELOAD=/x/libtracer.so:/y/libfoo.so", "B=2"]),
            ["A=1", "LD_PRELOAD=/y/libfoo.so", "B=2"]
        );
        assert_eq!(env(&["LD_PRELOAD=/x/libtracer.so", "B=2"]), ["B=2"]);
        assert_eq!(env(&["B=2"]), ["B=2"]);
    }

    #[test]
    fn an_environment_without_us_gets_us_back() {
        let start = ["TRACER_OUTPUT=/t/x-%p", "TRACER_MANIFEST=/m"];
        // Already traced as we are: left alone.
        let ok = [
            "PATH=/bin",
            "LD_PRELOAD=/lib/libtracer.so",
            "TRACER_OUTPUT=/t/x-%p",
            "TRACER_MANIFEST=/m",
        ];
        assert_eq!(env(&ok, &start), None);
        // Empty (env -i): both variables and the preload.
        assert_eq!(
            env(&[], &start).unwrap(),
            [
                "LD_PRELOAD=/lib/libtracer.so",
                "TRACER_OUTPUT=/t/x-%p",
                "TRACER_MANIFEST=/m"
            ]
        );
        // Another preload kept after ours; a variable the program set stays.
        assert_eq!(
            env(&["LD_PRELOAD=/x/libfoo.so", "TRACER_OUTPUT=/mine"], &start).unwrap(),
            [
                "LD_PRELOAD=/lib/libtracer.so:/x/libfoo.so",
                "TRACER_OUTPUT=/mine",
                "TRACER_MANIFEST=/m"
            ]
        );
        // Ours present under another directory counts as ours; only the
        // missing variable is added.
        assert_eq!(
            env(
                &["LD_PRELOAD=/other/libtracer.so", "TRACER_OUTPUT=/t/x-%p"],
                &start
            )
            .unwrap(),
            [
                "LD_PRELOAD=/other/libtracer.so",
                "TRACER_OUTPUT=/t/x-%p",
                "TRACER_MANIFEST=/m"
            ]
        );
        // An empty LD_PRELOAD becomes ours alone.
        assert_eq!(
            env(&["LD_PRELOAD=", "A=1"], &[]).unwrap(),
            ["LD_PRELOAD=/lib/libtracer.so", "A=1"]
        );
    }

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
