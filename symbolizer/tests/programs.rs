//! Real programs, built at test time with gcc, g++ and rustc: they print the
//! addresses of their own functions and the return addresses of their calls
//! plus where their objects are loaded, and every address must come back as
//! the function and line the source text marks — cross-checked with binutils'
//! `addr2line` where it applies.

mod common;

use common::*;
use symbolizer::{Options, Resolution, Symbolizer};

/// main → f0 → f1 → … → f9: each f_k saves its own return address (which
/// points into its caller, just after the call) in `ra[k]`.
fn chain_source() -> String {
    let mut s = String::from(PRINT_OBJECTS);
    s.push_str("void *ra[10];\n#define NOINL __attribute__((noinline))\n");
    for k in (0..10).rev() {
        s.push_str(&format!("NOINL void f{k}(void) {{ /* DEF {k} */\n"));
        if k < 9 {
            s.push_str(&format!("    f{}(); /* CALL {k} */\n", k + 1));
        }
        s.push_str(&format!("    ra[{k}] = __builtin_return_address(0);\n}}\n"));
    }
    s.push_str("int main(void) {\n    f0(); /* CALL main */\n    print_objects();\n");
    for k in 0..10 {
        s.push_str(&format!(
            "    printf(\"fn f{k} %p\\n\", (void *)f{k});\n    printf(\"ra {k} %p\\n\", ra[{k}]);\n"
        ));
    }
    s.push_str("    return 0;\n}\n");
    s
}

fn only_frame(r: &Resolution) -> (&str, &str, u32) {
    assert!(r.unresolved.is_none(), "unresolved: {:?}", r.unresolved);
    assert_eq!(r.frames.len(), 1, "one frame expected: {:?}", r.frames);
    let f = &r.frames[0];
    assert!(!f.inlined);
    (
        f.function.as_deref().expect("a function name"),
        basename(f.file.as_deref().expect("a file")),
        f.line.expect("a line"),
    )
}

/// Ours against binutils' on the same file address (return addresses are
/// looked up one byte back by both).
fn assert_same_as_binutils(bin: &std::path::Path, r: &Resolution, is_return: bool) {
    let probe = r.file_address.unwrap() - u64::from(is_return);
    let theirs = binutils_addr2line(bin, probe);
    let ours: Vec<(String, String, u32)> = r
        .frames
        .iter()
        .map(|f| {
            (
                f.function.clone().unwrap(),
                basename(f.file.as_deref().unwrap()).to_string(),
                f.line.unwrap(),
            )
        })
        .collect();
    assert_eq!(ours, theirs, "at file address {probe:#x}");
}

fn check_chain(pie: bool) {
    let b = Built::new();
    let src = chain_source();
    let mut flags = vec!["-g", "-O0"];
    if !pie {
        flags.push("-no-pie");
    }
    let bin = b.compile("gcc", "chain.c", &src, "chain", &flags);
    let out = run(&bin, &[]);
    let exe = out.main_object().clone();
    if pie {
        assert!(exe.load_address > 0x10_0000, "a PIE is loaded high");
    } else {
        assert_eq!(
            exe.load_address, 0x40_0000,
            "non-PIE x86-64 executables sit at 4 MiB"
        );
    }
    let mut s = Symbolizer::new(&out.objects, bin.to_str().unwrap(), Options::default());

    for k in 0..10 {
        // The function's own address: its opening line, looked up as is.
        let r = s.symbolize(out.addr("fn", &format!("f{k}")), false).clone();
        assert_eq!(
            only_frame(&r),
            (
                &*format!("f{k}"),
                "chain.c",
                line_of(&src, &format!("/* DEF {k} */"))
            )
        );
        assert_eq!(r.module.as_deref(), Some(bin.to_str().unwrap()));
        // ra[k] returns into f_{k-1} (main for k = 0), just after the call.
        let ra = out.addr("ra", &k.to_string());
        let r = s.symbolize(ra, true).clone();
        let (caller, marker) = if k == 0 {
            ("main".to_string(), "/* CALL main */".to_string())
        } else {
            (format!("f{}", k - 1), format!("/* CALL {} */", k - 1))
        };
        assert_eq!(
            only_frame(&r),
            (&*caller, "chain.c", line_of(&src, &marker))
        );
        assert_eq!(r.module_offset, ra - exe.load_address);
        let expected_file_address = if pie { ra - exe.load_address } else { ra };
        assert_eq!(r.file_address, Some(expected_file_address));
        assert_same_as_binutils(&bin, &r, true);
    }
    // Looked up as a plain address, a return address may already belong to
    // the next line; the flag is what makes the call's line come out. Here the
    // instruction after `call f1` in f0 stores to ra[0], on the next line.
    let ra1 = out.addr("ra", "1");
    let plain = s.symbolize(ra1, false).clone();
    assert_eq!(
        plain.frames[0].line,
        Some(line_of(&src, "/* CALL 0 */") + 1)
    );
}

/// An object asked to be named from its symbol tables alone gives each
/// function's name without its file and line, though its DWARF has them;
/// the other objects are untouched.
#[test]
fn an_object_named_from_its_symbol_table_alone() {
    let b = Built::new();
    let src = chain_source();
    let bin = b.compile("gcc", "chain.c", &src, "chain", &["-g", "-O0"]);
    let out = run(&bin, &[]);
    let path = bin.to_str().unwrap();
    let f3 = out.addr("fn", "f3");
    let mut full = Symbolizer::new(&out.objects, path, Options::default());
    let line = line_of(&src, "/* DEF 3 */");
    assert_eq!(
        only_frame(full.symbolize(f3, false)),
        ("f3", "chain.c", line)
    );
    let module = out.main_object().path.clone();
    let mut table = Symbolizer::new(&out.objects, path, Options::default())
        .symbol_table_only(if module.is_empty() { path } else { &module });
    let r = table.symbolize(f3, false).clone();
    assert_eq!(r.frames.len(), 1, "{r:?}");
    assert_eq!(r.frames[0].function.as_deref(), Some("f3"));
    assert_eq!(
        (r.frames[0].file.as_deref(), r.frames[0].line),
        (None, None)
    );
    // Another module's name leaves this one's DWARF read.
    let mut other = Symbolizer::new(&out.objects, path, Options::default())
        .symbol_table_only("/no/such/object.so");
    assert_eq!(
        only_frame(other.symbolize(f3, false)),
        ("f3", "chain.c", line)
    );
}

#[test]
fn c_chain_pie() {
    check_chain(true);
}

#[test]
fn c_chain_non_pie() {
    check_chain(false);
}

const CPP: &str = r#"
static void *ra_bar;
extern "C" __attribute__((noinline)) void record(void **slot) { *slot = __builtin_return_address(0); }
namespace ns {
template <typename T> struct Foo {
    T v;
    __attribute__((noinline)) T bar(T x) {
        record(&ra_bar); /* CALL bar */
        return x + v;
    }
};
__attribute__((noinline)) long plain(long x) { /* DEF plain */
    return x * 2;
}
}
int main() {
    ns::Foo<int> f{3};
    int r = f.bar(4);
    long p = ns::plain(r);
    print_objects();
    printf("fn plain %p\n", (void *)&ns::plain);
    printf("ra bar %p\n", ra_bar);
    return (int)(p & 1);
}
"#;

#[test]
fn cpp_namespace_and_template_names_are_demangled() {
    let b = Built::new();
    let src = format!("{PRINT_OBJECTS}{CPP}");
    let bin = b.compile("g++", "tmpl.cpp", &src, "tmpl", &["-g", "-O0"]);
    let out = run(&bin, &[]);
    let mut s = Symbolizer::new(&out.objects, bin.to_str().unwrap(), Options::default());
    let r = s.symbolize(out.addr("ra", "bar"), true).clone();
    assert_eq!(
        only_frame(&r),
        (
            "ns::Foo<int>::bar(int)",
            "tmpl.cpp",
            line_of(&src, "/* CALL bar */")
        )
    );
    assert_same_as_binutils(&bin, &r, true);
    let r = s.symbolize(out.addr("fn", "plain"), false).clone();
    assert_eq!(
        only_frame(&r),
        (
            "ns::plain(long)",
            "tmpl.cpp",
            line_of(&src, "/* DEF plain */")
        )
    );
    assert_same_as_binutils(&bin, &r, false);
}

const INLINE: &str = r#"
void *ra_sink;
__attribute__((noipa)) int sink(int v) { ra_sink = __builtin_return_address(0); return v + 1; }
static inline __attribute__((always_inline)) int inner(int v) {
    int r = sink(v); /* CALL sink */
    return r * 5;
}
__attribute__((noipa)) int outer(int v) {
    int r = inner(v); /* CALL inner */
    return r - 2;
}
int main(int argc, char **argv) {
    (void)argv;
    int r = outer(argc);
    print_objects();
    printf("ra sink %p\n", ra_sink);
    return r == 42;
}
"#;

#[test]
fn inlined_frames_are_expanded_innermost_first() {
    let b = Built::new();
    let src = format!("{PRINT_OBJECTS}{INLINE}");
    let bin = b.compile("gcc", "inl.c", &src, "inl", &["-g", "-O2"]);
    let out = run(&bin, &[]);
    let mut s = Symbolizer::new(&out.objects, bin.to_str().unwrap(), Options::default());
    let r = s.symbolize(out.addr("ra", "sink"), true).clone();
    assert!(r.unresolved.is_none(), "{:?}", r.unresolved);
    type Row<'a> = (Option<&'a str>, Option<&'a str>, Option<u32>, bool);
    let got: Vec<Row> = r
        .frames
        .iter()
        .map(|f| {
            (
                f.function.as_deref(),
                f.file.as_deref().map(basename),
                f.line,
                f.inlined,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                Some("inner"),
                Some("inl.c"),
                Some(line_of(&src, "/* CALL sink */")),
                true
            ),
            (
                Some("outer"),
                Some("inl.c"),
                Some(line_of(&src, "/* CALL inner */")),
                false
            ),
        ]
    );
    assert_same_as_binutils(&bin, &r, true);
}

const LIB: &str = r#"
void *shl_ra;
__attribute__((noinline)) static void shl_record(void) { shl_ra = __builtin_return_address(0); }
int shl_entry(int v) { /* DEF shl_entry */
    shl_record(); /* CALL shl_record */
    return v + 1;
}
"#;

const LIB_MAIN: &str = r#"
#include <stdlib.h>
extern void *shl_ra;
int shl_entry(int v);
int main(void) {
    int r = shl_entry(1);
    print_objects();
    printf("fn shl_entry %p\n", (void *)&shl_entry);
    printf("ra shl_record %p\n", shl_ra);
    printf("fn malloc %p\n", (void *)&malloc);
    return r != 2;
}
"#;

#[test]
fn shared_library_at_its_load_address() {
    let b = Built::new();
    let lib = b.compile(
        "gcc",
        "shl.c",
        LIB,
        "libshl.so",
        &["-g", "-O0", "-shared", "-fPIC"],
    );
    let rpath = format!("-Wl,-rpath,{}", b.dir.path().display());
    let main_src = format!("{PRINT_OBJECTS}{LIB_MAIN}");
    let bin = b.compile(
        "gcc",
        "main.c",
        &main_src,
        "withlib",
        &["-g", "-O0", "-L.", "-lshl", &rpath],
    );
    let out = run(&bin, &[]);
    let lib_obj = out
        .objects
        .iter()
        .find(|o| o.path.ends_with("libshl.so"))
        .expect("the library is loaded")
        .clone();
    assert_eq!(std::path::Path::new(&lib_obj.path), lib.as_path());
    let mut s = Symbolizer::new(&out.objects, bin.to_str().unwrap(), Options::default());
    let entry = out.addr("fn", "shl_entry");
    let r = s.symbolize(entry, false).clone();
    assert_eq!(r.module.as_deref(), Some(lib_obj.path.as_str()));
    assert_eq!(r.module_offset, entry - lib_obj.load_address);
    assert_eq!(
        only_frame(&r),
        ("shl_entry", "shl.c", line_of(LIB, "/* DEF shl_entry */"))
    );
    let r = s.symbolize(out.addr("ra", "shl_record"), true).clone();
    assert_eq!(
        only_frame(&r),
        ("shl_entry", "shl.c", line_of(LIB, "/* CALL shl_record */"))
    );
    assert_same_as_binutils(&lib, &r, true);
    // A system library: its dynamic symbol table names the function, or,
    // when its debug package is installed, DWARF does with glibc's internal
    // name (`__GI___libc_malloc`, as gdb and addr2line print it too).
    let r = s.symbolize(out.addr("fn", "malloc"), false).clone();
    assert!(r.module.as_deref().unwrap().contains("libc.so"), "{r:?}");
    let name = r.frames.last().and_then(|f| f.function.as_deref());
    assert!(
        name.is_some_and(|n| n == "malloc" || n.ends_with("libc_malloc")),
        "{r:?}"
    );
    // The vDSO is listed by the loader but has no file.
    if let Some(vdso) = out.objects.iter().find(|o| o.path.contains("vdso")) {
        let r = s.symbolize(vdso.load_address + 0x10, true);
        assert!(
            matches!(r.unresolved, Some(symbolizer::Unresolved::NoFile { .. })),
            "{r:?}"
        );
        assert!(r
            .unresolved
            .as_ref()
            .unwrap()
            .to_string()
            .contains("no file"));
    }
}

const RUST: &str = r#"
mod inner {
    #[inline(never)]
    pub fn leaky(v: &mut Vec<u8>) -> usize { // DEF leaky
        v.push(1);
        v.len()
    }
}
fn main() {
    let mut v = Vec::new();
    let n = inner::leaky(&mut v);
    let f: fn(&mut Vec<u8>) -> usize = inner::leaky;
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let exe = exe.to_str().unwrap();
    // The lowest mapping of the executable is its lowest PT_LOAD page.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let start = maps
        .lines()
        .filter(|l| l.ends_with(exe))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .min()
        .unwrap();
    println!("obj {start:x} 0 {exe}");
    println!("fn leaky {:p}", f as *const ());
    std::process::exit(if n == 1 { 0 } else { 1 });
}
"#;

fn check_rust(mangling: &str) {
    let b = Built::new();
    b.write("rustprog.rs", RUST);
    let mut args = vec!["-g", "-C", "opt-level=0", "-o", "rustprog", "rustprog.rs"];
    // Stable rustc mangles the legacy way unless told otherwise.
    if mangling == "v0" {
        args.extend(["-C", "symbol-mangling-version=v0"]);
    }
    b.run_tool("rustc", &args);
    // Make sure the symbol really is mangled the way this test is about.
    let mangled = if mangling == "v0" {
        "_RNv"
    } else {
        "_ZN8rustprog5inner5leaky17h"
    };
    let bytes = std::fs::read(b.path("rustprog")).unwrap();
    assert!(bytes
        .windows(mangled.len())
        .any(|w| w == mangled.as_bytes()));
    let bin = b.path("rustprog");
    let out = run(&bin, &[]);
    // Size 0: the extent is unknown, as some trace formats leave it.
    let mut s = Symbolizer::new(&out.objects, "", Options::default());
    let r = s.symbolize(out.addr("fn", "leaky"), false).clone();
    assert_eq!(
        only_frame(&r),
        (
            "rustprog::inner::leaky",
            "rustprog.rs",
            line_of(RUST, "// DEF leaky")
        )
    );
}

#[test]
fn rust_legacy_mangling() {
    check_rust("legacy");
}

#[test]
fn rust_v0_mangling() {
    check_rust("v0");
}
