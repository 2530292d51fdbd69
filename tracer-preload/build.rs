//! Links libtracer.so with `hot-text.ld`: the functions a traced run executes
//! are gathered into one output section ahead of `.text`, so the kernel's
//! 64 KiB fault-around windows over our code stay few (see
//! `scripts/hot-text.sh`, which generates the list).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = format!("{dir}/hot-text.ld");
    println!("cargo:rerun-if-changed=hot-text.ld");
    // A script with INSERT only adds to the linker's default layout.
    println!("cargo:rustc-link-arg-cdylib=-Wl,-T,{script}");
}
