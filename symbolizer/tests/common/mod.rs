//! Helpers of the symbolizer's tests: build C, C++ and Rust programs with the
//! system toolchain into a temporary directory, run them, and read what they
//! print about themselves (where their objects are loaded, the addresses of
//! their functions and the return addresses of their calls).
//!
//! Expected lines always come from marker comments in the source text, and
//! expected names from the source too — never from the symbolizer's output.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use format_writers::Object;

/// C code printing every loaded object the way the preload library records
/// it: `obj LOAD SIZE NAME`, LOAD the lowest PT_LOAD page, SIZE up to the end
/// of the highest PT_LOAD segment, NAME empty for the main program.
pub const PRINT_OBJECTS: &str = r#"
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
static int print_one(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
    unsigned long lo = ~0UL, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            unsigned long a = ph->p_vaddr & ~0xfffUL;
            if (a < lo) lo = a;
            if (ph->p_vaddr + ph->p_memsz > hi) hi = ph->p_vaddr + ph->p_memsz;
        }
    }
    if (lo < hi) printf("obj %lx %lx %s\n", info->dlpi_addr + lo, hi - lo, info->dlpi_name);
    return 0;
}
static void print_objects(void) { dl_iterate_phdr(print_one, NULL); }
"#;

pub struct Built {
    pub dir: tempfile::TempDir,
}

impl Built {
    pub fn new() -> Built {
        Built {
            dir: tempfile::Builder::new()
                .prefix("symbolizer-test")
                .tempdir()
                .expect("temporary directory"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write source");
        p
    }

    /// Runs `tool args…` in the directory; panics with its stderr on failure.
    pub fn run_tool(&self, tool: &str, args: &[&str]) {
        let out = Command::new(tool)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Writes `source` as `name` and compiles it into `out`.
    pub fn compile(
        &self,
        compiler: &str,
        name: &str,
        source: &str,
        out: &str,
        flags: &[&str],
    ) -> PathBuf {
        self.write(name, source);
        // Libraries (`-lx`) must follow the source that uses them.
        let mut args: Vec<&str> = vec!["-o", out, name, "-Wl,--build-id"];
        args.extend(flags);
        self.run_tool(compiler, &args);
        self.path(out)
    }
}

/// What a test program printed.
pub struct Output {
    pub objects: Vec<Object>,
    /// `(kind, name, address)` for `fn NAME ADDR` and `ra NAME ADDR` lines.
    pub addresses: Vec<(String, String, u64)>,
}

impl Output {
    pub fn addr(&self, kind: &str, name: &str) -> u64 {
        self.addresses
            .iter()
            .find(|(k, n, _)| k == kind && n == name)
            .unwrap_or_else(|| panic!("the program printed no `{kind} {name}`"))
            .2
    }

    pub fn main_object(&self) -> &Object {
        self.objects
            .iter()
            .find(|o| o.path.is_empty())
            .expect("the program printed its own object")
    }
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

pub fn run(bin: &Path, env: &[(&str, &str)]) -> Output {
    let out = Command::new(bin)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    let mut objects = Vec::new();
    let mut addresses = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        match parts.next() {
            Some("obj") => {
                let load = hex(parts.next().unwrap());
                let size = hex(parts.next().unwrap());
                let path = parts.next().unwrap_or("").to_string();
                objects.push(Object {
                    path,
                    load_address: load,
                    size,
                });
            }
            Some(kind @ ("fn" | "ra")) => {
                let name = parts.next().unwrap().to_string();
                let addr = hex(parts.next().unwrap());
                addresses.push((kind.to_string(), name, addr));
            }
            _ => {}
        }
    }
    Output { objects, addresses }
}

/// The 1-based line of `source` holding `marker` (exactly one must).
pub fn line_of(source: &str, marker: &str) -> u32 {
    let hits: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(hits.len(), 1, "marker {marker:?} must occur once");
    hits[0] as u32
}

pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `(function, file basename, line)` per frame from binutils'
/// `addr2line -f -C -i -e BIN ADDR`, innermost first.
pub fn binutils_addr2line(bin: &Path, file_address: u64) -> Vec<(String, String, u32)> {
    let out = Command::new("addr2line")
        .args(["-f", "-C", "-i", "-e"])
        .arg(bin)
        .arg(format!("{file_address:#x}"))
        .output()
        .expect("binutils addr2line is installed");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            let func = pair[0].to_string();
            // `file:line` possibly followed by ` (discriminator N)`.
            let loc = pair.get(1).copied().unwrap_or("??:0");
            let loc = loc.split(" (").next().unwrap();
            let (file, line) = loc.rsplit_once(':').unwrap();
            (func, basename(file).to_string(), line.parse().unwrap_or(0))
        })
        .collect()
}
