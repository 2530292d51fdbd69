//! What happens away from the happy path: missing, stripped, garbage and
//! corrupted files (an error state, never a panic), separate debug files
//! found by `.gnu_debuglink` and by build id, traces read on "another
//! machine" through a sysroot or a path mapping, and a trace with 100k
//! distinct addresses.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use format_writers::Object;
use object::{Object as _, ObjectSection as _};
use symbolizer::{Options, Symbolizer, Unresolved};

/// A small program: two functions, `fn` lines for both, and a return address.
const SMALL: &str = r#"
void *ra_work;
__attribute__((noinline)) void work(void) { /* DEF work */
    ra_work = __builtin_return_address(0);
}
__attribute__((noinline)) void caller(void) { /* DEF caller */
    work(); /* CALL work */
}
int main(void) {
    caller();
    print_objects();
    printf("fn work %p\n", (void *)work);
    printf("fn caller %p\n", (void *)caller);
    printf("ra work %p\n", ra_work);
    return 0;
}
"#;

fn small_source() -> String {
    format!("{PRINT_OBJECTS}{SMALL}")
}

/// Builds and runs SMALL; the main object's path is filled in.
fn small(b: &Built) -> (PathBuf, Output) {
    let bin = b.compile("gcc", "small.c", &small_source(), "small", &["-g", "-O0"]);
    let mut out = run(&bin, &[]);
    for o in &mut out.objects {
        if o.path.is_empty() {
            o.path = bin.to_str().unwrap().to_string();
        }
    }
    (bin, out)
}

fn exe_object(out: &Output, bin: &Path) -> Object {
    out.objects
        .iter()
        .find(|o| Path::new(&o.path) == bin)
        .unwrap()
        .clone()
}

/// Deterministic pseudo-random bytes (xorshift64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn missing_file_is_reported_with_its_path() {
    let b = Built::new();
    let (bin, out) = small(&b);
    std::fs::remove_file(&bin).unwrap();
    let mut s = Symbolizer::new(&out.objects, "", Options::default());
    let r = s.symbolize(out.addr("fn", "work"), false).clone();
    assert!(r.frames.is_empty());
    assert_eq!(r.module.as_deref(), bin.to_str());
    match &r.unresolved {
        Some(Unresolved::FileMissing { path, error }) => {
            assert_eq!(path, &bin);
            assert!(error.contains("No such file"), "{error}");
        }
        other => panic!("expected a missing file, got {other:?}"),
    }
    let text = r.unresolved.unwrap().to_string();
    assert!(
        text.starts_with(&format!("cannot open {}", bin.display())),
        "{text}"
    );
}

#[test]
fn garbage_and_truncated_files_are_errors_not_panics() {
    let b = Built::new();
    let (bin, out) = small(&b);
    let exe = exe_object(&out, &bin);
    let real = std::fs::read(&bin).unwrap();
    let work = out.addr("fn", "work");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Random bytes named like a library.
    let junk = b.write("libjunk.so", "");
    std::fs::write(&junk, rng.bytes(8192)).unwrap();
    let objects = vec![Object {
        path: junk.to_str().unwrap().into(),
        load_address: 0x7f00_0000_0000,
        size: 0x2000,
    }];
    let mut s = Symbolizer::new(&objects, "", Options::default());
    let r = s.symbolize(0x7f00_0000_0100, true);
    assert_eq!(
        r.unresolved,
        Some(Unresolved::NotElf { path: junk.clone() })
    );

    // An ELF header followed by garbage, an empty file, and every truncation
    // of the real program at a spread of lengths.
    let mut variants: Vec<Vec<u8>> = vec![Vec::new()];
    let mut elfish = real[..64].to_vec();
    elfish.extend(rng.bytes(4096));
    variants.push(elfish);
    for cut in (0..real.len()).step_by(real.len() / 97 + 1) {
        variants.push(real[..cut].to_vec());
    }
    let victim = b.path("victim");
    for (i, bytes) in variants.iter().enumerate() {
        std::fs::write(&victim, bytes).unwrap();
        let objects = vec![Object {
            path: victim.to_str().unwrap().into(),
            ..exe.clone()
        }];
        let mut s = Symbolizer::new(&objects, "", Options::default());
        let r = s.symbolize(work, false);
        if bytes.len() < 64 {
            assert!(
                matches!(
                    r.unresolved,
                    Some(Unresolved::Malformed { .. } | Unresolved::NotElf { .. })
                ),
                "variant {i} ({} bytes): {r:?}",
                bytes.len()
            );
        }
        // Whatever was salvaged must not claim a wrong function.
        if let Some(name) = r.frames.last().and_then(|f| f.function.as_deref()) {
            assert_eq!(name, "work", "variant {i}");
        }
    }
}

/// File ranges of the DWARF sections of `bin`.
fn debug_ranges(bin: &[u8]) -> Vec<(usize, usize)> {
    let file = object::File::parse(bin).unwrap();
    file.sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
        .filter_map(|s| s.file_range())
        .map(|(o, l)| (o as usize, l as usize))
        .filter(|&(_, l)| l > 0)
        .collect()
}

#[test]
fn corrupted_debug_info_never_panics() {
    let b = Built::new();
    let (bin, out) = small(&b);
    let exe = exe_object(&out, &bin);
    let real = std::fs::read(&bin).unwrap();
    let ranges = debug_ranges(&real);
    assert!(
        ranges.len() >= 3,
        "gcc -g writes .debug_info, _abbrev, _line…"
    );
    let addrs = [
        (out.addr("fn", "work"), false),
        (out.addr("fn", "caller"), false),
        (out.addr("ra", "work"), true),
    ];
    let pristine: Vec<_> = {
        let mut s = Symbolizer::new(std::slice::from_ref(&exe), "", Options::default());
        addrs
            .iter()
            .map(|&(a, ret)| s.symbolize(a, ret).clone())
            .collect()
    };
    let victim = b.path("victim");
    let mut rng = Rng(42);
    let mut degraded = 0;
    let mut changed = 0;
    for round in 0..300 {
        let mut bytes = real.clone();
        // Overwrite 1 to 8 bytes inside the debug sections.
        for _ in 0..=(rng.next() % 8) {
            let (off, len) = ranges[(rng.next() as usize) % ranges.len()];
            bytes[off + (rng.next() as usize) % len] = rng.next() as u8;
        }
        std::fs::write(&victim, &bytes).unwrap();
        let objects = vec![Object {
            path: victim.to_str().unwrap().into(),
            ..exe.clone()
        }];
        let mut s = Symbolizer::new(&objects, "", Options::default());
        for (k, &(a, ret)) in addrs.iter().enumerate() {
            let r = s.symbolize(a, ret);
            if r.frames != pristine[k].frames {
                changed += 1;
            }
            // The symbol table is intact: the outermost function is still known.
            let name = r.frames.last().and_then(|f| f.function.clone());
            if name.as_deref() != Some("work") && name.as_deref() != Some("caller") {
                degraded += 1;
                assert!(
                    r.unresolved.is_some() || name.is_some(),
                    "round {round}: {r:?}"
                );
            }
        }
    }
    eprintln!("{changed} of 900 lookups changed, {degraded} lost their function");
    // The corruption did reach the DWARF readers…
    assert!(changed > 0);
    // …and the symbol table, untouched, still names most functions.
    assert!(degraded < 100, "{degraded} lookups lost their function");
}

#[test]
fn stripped_binaries_fall_back_to_symbols_then_say_so() {
    let b = Built::new();
    let (bin, out) = small(&b);
    let exe = exe_object(&out, &bin);
    let work = out.addr("fn", "work");
    let ra = out.addr("ra", "work");

    // No DWARF but a symbol table: names without lines.
    b.run_tool("strip", &["--strip-debug", "-o", "nodebug", "small"]);
    let objects = vec![Object {
        path: b.path("nodebug").to_str().unwrap().into(),
        ..exe.clone()
    }];
    let mut s = Symbolizer::new(&objects, "", Options::default());
    let r = s.symbolize(ra, true).clone();
    assert_eq!(r.frames.len(), 1);
    assert_eq!(r.frames[0].function.as_deref(), Some("caller"));
    assert_eq!((r.frames[0].file.clone(), r.frames[0].line), (None, None));
    assert!(!s.files()[0].has_debug_info);

    // Nothing at all: unresolved, and the reason says stripped.
    b.run_tool("strip", &["-s", "-o", "bare", "small"]);
    let bare = b.path("bare");
    let objects = vec![Object {
        path: bare.to_str().unwrap().into(),
        ..exe
    }];
    let mut s = Symbolizer::new(&objects, "", Options::default());
    let r = s.symbolize(work, false).clone();
    assert!(r.frames.is_empty());
    assert_eq!(
        r.unresolved,
        Some(Unresolved::NoSymbol {
            path: bare,
            detail: None
        })
    );
    assert!(r.unresolved.unwrap().to_string().contains("stripped"));
}

#[test]
fn address_outside_the_segments_of_the_file() {
    let b = Built::new();
    let (bin, out) = small(&b);
    let exe = exe_object(&out, &bin);
    // The trace claims a mapping far larger than the file's segments.
    let objects = vec![Object {
        size: exe.size + 0x10_0000,
        ..exe.clone()
    }];
    let mut s = Symbolizer::new(&objects, "", Options::default());
    let a = exe.load_address + exe.size + 0x8000;
    let r = s.symbolize(a, false).clone();
    assert_eq!(
        r.unresolved,
        Some(Unresolved::OutsideFile {
            path: bin.clone(),
            file_address: exe.size + 0x8000
        })
    );
    assert_eq!(s.warnings().len(), 1, "the size mismatch is noted");
}

fn expect_work(s: &mut Symbolizer, out: &Output) {
    let src = small_source();
    let r = s.symbolize(out.addr("ra", "work"), true).clone();
    assert!(r.unresolved.is_none(), "{:?}", r.unresolved);
    let f = &r.frames[0];
    assert_eq!(f.function.as_deref(), Some("caller"));
    assert_eq!(basename(f.file.as_deref().unwrap()), "small.c");
    assert_eq!(f.line, Some(line_of(&src, "/* CALL work */")));
}

#[test]
fn debuglink_beside_the_binary() {
    let b = Built::new();
    let (_, out) = small(&b);
    b.run_tool("objcopy", &["--only-keep-debug", "small", "small.debug"]);
    b.run_tool(
        "objcopy",
        &[
            "--strip-debug",
            "--add-gnu-debuglink=small.debug",
            "small",
            "small.stripped",
        ],
    );
    std::fs::rename(b.path("small.stripped"), b.path("small")).unwrap();
    assert!(debug_ranges(&std::fs::read(b.path("small")).unwrap()).is_empty());
    let mut s = Symbolizer::new(&out.objects, "", Options::default());
    expect_work(&mut s, &out);
    assert_eq!(s.files()[0].debug_file, Some(b.path("small.debug")));

    // In the `.debug/` subdirectory, as gdb also looks.
    std::fs::create_dir(b.path(".debug")).unwrap();
    std::fs::rename(b.path("small.debug"), b.path(".debug/small.debug")).unwrap();
    let mut s = Symbolizer::new(&out.objects, "", Options::default());
    expect_work(&mut s, &out);
    assert_eq!(s.files()[0].debug_file, Some(b.path(".debug/small.debug")));
}

/// The trace was recorded with the program at its build path; here it is
/// read with the program (stripped) under a sysroot and its debug info in
/// the sysroot's `/usr/lib/debug/.build-id/xx/rest.debug`, Debian's layout.
#[test]
fn sysroot_and_build_id_debug_file() {
    let b = Built::new();
    let (bin, out) = small(&b);
    let root = b.path("root");
    let in_root = root.join(bin.strip_prefix("/").unwrap());
    std::fs::create_dir_all(in_root.parent().unwrap()).unwrap();
    // Compressed, as Debian's -dbgsym packages ship their debug files.
    b.run_tool(
        "objcopy",
        &[
            "--only-keep-debug",
            "--compress-debug-sections=zlib",
            "small",
            "small.debug",
        ],
    );
    b.run_tool(
        "strip",
        &["--strip-debug", "-o", in_root.to_str().unwrap(), "small"],
    );
    // The build id, read with the object crate from the file itself.
    let data = std::fs::read(&bin).unwrap();
    let id = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .unwrap()
        .to_vec();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let dbg = root
        .join("usr/lib/debug/.build-id")
        .join(hex(&id[..1]))
        .join(format!("{}.debug", hex(&id[1..])));
    std::fs::create_dir_all(dbg.parent().unwrap()).unwrap();
    std::fs::rename(b.path("small.debug"), &dbg).unwrap();
    std::fs::remove_file(&bin).unwrap();

    let options = Options {
        sysroot: Some(root.clone()),
        ..Options::default()
    };
    let mut s = Symbolizer::new(&out.objects, "", options);
    expect_work(&mut s, &out);
    let files = s.files();
    assert_eq!(files[0].path, in_root);
    assert_eq!(files[0].debug_file, Some(dbg));
    // Other objects (libc…) are not in the sysroot: said plainly.
    let libc = out
        .objects
        .iter()
        .find(|o| o.path.contains("libc.so"))
        .unwrap();
    let r = s.symbolize(libc.load_address + 0x100, true).clone();
    assert!(
        matches!(r.unresolved, Some(Unresolved::FileMissing { ref path, .. }) if path.starts_with(&root))
    );
}

#[test]
fn path_mapping_moves_a_build_tree() {
    let b = Built::new();
    let (bin, mut out) = small(&b);
    // Pretend the program ran from /build/tree/small.
    for o in &mut out.objects {
        if Path::new(&o.path) == bin {
            o.path = "/build/tree/small".into();
        }
    }
    let mut s = Symbolizer::new(&out.objects, "", Options::default());
    assert!(matches!(
        s.symbolize(out.addr("ra", "work"), true).unresolved,
        Some(Unresolved::FileMissing { .. })
    ));
    let spec = format!("/build/tree={}", b.dir.path().display());
    let options = Options {
        path_map: vec![Options::parse_path_map(&spec).unwrap()],
        ..Options::default()
    };
    let mut s = Symbolizer::new(&out.objects, "", options);
    expect_work(&mut s, &out);
}

/// 2000 functions; every byte of the code of each is looked up: 100k+
/// distinct addresses, each must name its own function and nothing else.
#[test]
fn hundred_thousand_addresses() {
    const N: usize = 2000;
    let b = Built::new();
    let mut src = String::from(PRINT_OBJECTS);
    src.push_str("volatile int sink;\n");
    for i in 0..N {
        src.push_str(&format!(
            "__attribute__((noinline)) int g{i}(int v) {{ sink = v; sink += {i}; sink *= 3; sink ^= v; return sink + v * {i}; }}\n"
        ));
    }
    src.push_str("int main(void) {\n    print_objects();\n");
    for i in 0..N {
        src.push_str(&format!("    printf(\"fn g{i} %p\\n\", (void *)g{i});\n"));
    }
    src.push_str("    return 0;\n}\n");
    let bin = b.compile("gcc", "many.c", &src, "many", &["-g", "-O0"]);
    let out = run(&bin, &[]);
    let mut starts: Vec<(u64, usize)> = (0..N)
        .map(|i| (out.addr("fn", &format!("g{i}")), i))
        .collect();
    starts.sort_unstable();
    let mut wanted = Vec::new();
    for w in starts.windows(2) {
        for a in w[0].0..w[1].0 {
            wanted.push((a, w[0].1));
        }
    }
    assert!(wanted.len() >= 100_000, "{} addresses", wanted.len());
    let mut s = Symbolizer::new(&out.objects, bin.to_str().unwrap(), Options::default());
    let t = std::time::Instant::now();
    s.symbolize_all(wanted.iter().map(|w| w.0), false);
    let elapsed = t.elapsed();
    eprintln!("{} addresses in {elapsed:?}", wanted.len());
    let mut named = 0;
    for &(a, i) in &wanted {
        let r = s.get(a, false).expect("resolved by symbolize_all");
        if let Some(f) = r.frames.last() {
            assert_eq!(f.function.as_deref(), Some(&*format!("g{i}")), "at {a:#x}");
            named += 1;
        }
    }
    // -O0 code is contiguous: every byte belongs to its function.
    assert_eq!(named, wanted.len());
    // Generous on a shared 2-core machine in a debug build; a per-address
    // cost that grew with the number of addresses would blow it.
    assert!(elapsed.as_secs() < 60, "{elapsed:?}");
}
