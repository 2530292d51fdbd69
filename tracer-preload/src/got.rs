//! An allocator defined by the executable itself (rustc links jemalloc
//! this way): the loader finds the program's `malloc` before any preloaded
//! library's, so the calls the program's libraries make never reach our
//! exported functions. [`redirect`] rewrites those libraries' import slots
//! (the global offset table entries of `malloc`, `free`, ... that the
//! loader filled with the program's functions) to point to the wrappers
//! below, which record the call and forward it to the program's own
//! function: the blocks stay the program's allocator's.
//!
//! Libraries loaded later (`dlopen`) are patched by the writer thread soon
//! after they appear ([`look_for_new_objects`]).
//!
//! What stays unrecorded: the executable's own calls (they do not go
//! through an import slot), the loader's (it calls the allocator through
//! pointers of its own), and those a library loaded with `dlopen` makes
//! before the writer patched it (its constructors' always).

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, c_void, size_t};

use crate::{lifecycle, sys, tls, unwind};

/// The functions redirected, in the order of [`REAL`].
const NAMES: [&core::ffi::CStr; 8] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"memalign",
    c"posix_memalign",
    c"aligned_alloc",
    c"valloc",
];
const MALLOC: usize = 0;
const FREE: usize = 1;
const CALLOC: usize = 2;
const REALLOC: usize = 3;
const MEMALIGN: usize = 4;
const POSIX_MEMALIGN: usize = 5;
const ALIGNED_ALLOC: usize = 6;
const VALLOC: usize = 7;

/// The program's own definitions (0: not defined by the program).
static REAL: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// The wrapper that takes the place of `NAMES[k]`.
fn wrapper(k: usize) -> usize {
    match k {
        MALLOC => w_sized::<MALLOC> as *const () as usize,
        FREE => w_free as *const () as usize,
        CALLOC => w_calloc as *const () as usize,
        REALLOC => w_realloc as *const () as usize,
        MEMALIGN => w_aligned::<MEMALIGN> as *const () as usize,
        POSIX_MEMALIGN => w_posix_memalign as *const () as usize,
        ALIGNED_ALLOC => w_aligned::<ALIGNED_ALLOC> as *const () as usize,
        _ => w_sized::<VALLOC> as *const () as usize,
    }
}

/// `REAL[k]` as a function of type `F`.
///
/// # Safety
/// `REAL[k]` is nonzero and `F` is the C type of `NAMES[k]`.
#[inline(always)]
unsafe fn real<F: Copy>(k: usize) -> F {
    let f = REAL[k].load(Ordering::Relaxed);
    // SAFETY: (caller) `f` is the address of a function of type `F`, and
    // `F` is a function pointer, as large as `usize`.
    unsafe { core::mem::transmute_copy::<usize, F>(&f) }
}

// The wrappers. Each is installed only where the program defines the
// function it replaces (`REAL[k]` nonzero), and records what the call
// did as the exported hooks do (an allocation after the call returned it, a
// free before it runs). They pass their own frame to the capture.

/// Records the block `p` of `size` bytes a wrapper's call returned (none
/// for a null `p`), and gives it back.
#[inline(always)]
fn recorded(p: *mut c_void, size: u64, entry: u64) -> *mut c_void {
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, size, false, entry);
    }
    p
}

/// `malloc` (K = MALLOC) and `valloc` (K = VALLOC).
unsafe extern "C" fn w_sized<const K: usize>(size: size_t) -> *mut c_void {
    let entry = unwind::entry_frame();
    // SAFETY: installed only with REAL[K] set, K one of the two above.
    let f = unsafe { real::<unsafe extern "C" fn(size_t) -> *mut c_void>(K) };
    // SAFETY: the program's function, called as its caller did.
    recorded(tls::in_allocator(|| unsafe { f(size) }), size as u64, entry)
}

/// `memalign` (K = MEMALIGN) and `aligned_alloc` (K = ALIGNED_ALLOC).
unsafe extern "C" fn w_aligned<const K: usize>(align: size_t, size: size_t) -> *mut c_void {
    let entry = unwind::entry_frame();
    // SAFETY: installed only with REAL[K] set, K one of the two above.
    let f = unsafe { real::<unsafe extern "C" fn(size_t, size_t) -> *mut c_void>(K) };
    // SAFETY: the program's function, called as its caller did.
    recorded(
        tls::in_allocator(|| unsafe { f(align, size) }),
        size as u64,
        entry,
    )
}

unsafe extern "C" fn w_free(ptr: *mut c_void) {
    // SAFETY: installed only with REAL[FREE] set.
    let f = unsafe { real::<unsafe extern "C" fn(*mut c_void)>(FREE) };
    if !ptr.is_null() {
        lifecycle::on_free(ptr as u64, false);
    }
    // SAFETY: the program's free, called as its caller did.
    tls::in_allocator(|| unsafe { f(ptr) })
}

unsafe extern "C" fn w_calloc(n: size_t, size: size_t) -> *mut c_void {
    let entry = unwind::entry_frame();
    // SAFETY: installed only with REAL[CALLOC] set.
    let f = unsafe { real::<unsafe extern "C" fn(size_t, size_t) -> *mut c_void>(CALLOC) };
    // SAFETY: the program's calloc, called as its caller did.
    let p = tls::in_allocator(|| unsafe { f(n, size) });
    recorded(p, (n as u64).wrapping_mul(size as u64), entry)
}

unsafe extern "C" fn w_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    let entry = unwind::entry_frame();
    // SAFETY: installed only with REAL[REALLOC] set.
    let f = unsafe { real::<unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void>(REALLOC) };
    if ptr.is_null() {
        // SAFETY: as above.
        return recorded(
            tls::in_allocator(|| unsafe { f(ptr, size) }),
            size as u64,
            entry,
        );
    }
    if size == 0 {
        // Allocators differ here: the block is freed, and some return a
        // new minimal block.
        lifecycle::on_free(ptr as u64, false);
        // SAFETY: as above.
        return recorded(tls::in_allocator(|| unsafe { f(ptr, 0) }), 0, entry);
    }
    lifecycle::on_free(ptr as u64, true);
    // SAFETY: as above.
    let q = tls::in_allocator(|| unsafe { f(ptr, size) });
    if q.is_null() {
        lifecycle::on_realloc_failed();
    } else {
        lifecycle::on_alloc(q as u64, size as u64, true, entry);
    }
    q
}

unsafe extern "C" fn w_posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    let entry = unwind::entry_frame();
    type F = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int;
    // SAFETY: installed only with REAL[POSIX_MEMALIGN] set.
    let f = unsafe { real::<F>(POSIX_MEMALIGN) };
    // SAFETY: the program's posix_memalign, called as its caller did.
    let r = tls::in_allocator(|| unsafe { f(out, align, size) });
    if r == 0 {
        // SAFETY: on success the function stored the block in `*out`.
        let p = unsafe { *out };
        lifecycle::on_alloc(p as u64, size as u64, false, entry);
    }
    r
}

/// What [`redirect`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Redirected {
    /// Import slots rewritten.
    pub slots: usize,
    /// Libraries that had at least one.
    pub libraries: usize,
}

/// When the executable defines `malloc`, `free`, `calloc` and `realloc`
/// itself, points the loaded libraries' imports of the allocation functions
/// it defines to the wrappers above; `None` when it does not (nothing is
/// changed). Called once, by the constructor.
pub fn redirect() -> Option<Redirected> {
    let _g = tls::enter();
    let (exe, headers) = sys::program_headers()?;
    // The four required first (`NAMES` starts with them): most programs
    // stop at `malloc`, one lookup.
    let mut found = [0usize; 8];
    for (k, name) in NAMES.iter().enumerate() {
        found[k] = defined_by_program(name, exe, headers);
        if k <= REALLOC && found[k] == 0 {
            return None;
        }
    }
    for (r, f) in REAL.iter().zip(found) {
        r.store(f, Ordering::Relaxed);
    }
    // Blocks are not glibc's: the leak scan keeps every size it replays
    // instead of reading glibc's chunk headers.
    crate::scan::set_exact_sizes();
    EXE.store(exe, Ordering::Relaxed);
    ADDS_SEEN.store(crate::objects::loader_adds(), Ordering::Relaxed);
    let done = patch_all(Writes::AllRelocated);
    AT_START.store(done.slots, Ordering::Relaxed);
    Some(done)
}

/// Import slots the constructor rewrote.
static AT_START: AtomicUsize = AtomicUsize::new(0);

/// How many import slots [`redirect`] rewrote at start, when it found the
/// program's allocator.
pub fn redirected_at_start() -> Option<usize> {
    active().then(|| AT_START.load(Ordering::Relaxed))
}

/// The main program's load bias once [`redirect`] found its allocator.
static EXE: AtomicU64 = AtomicU64::new(0);

/// The loader's count of objects ever loaded when the objects were last
/// patched.
static ADDS_SEEN: AtomicU64 = AtomicU64::new(0);

/// Whether [`redirect`] found the program's allocator.
pub fn active() -> bool {
    REAL[MALLOC].load(Ordering::Relaxed) != 0
}

/// Passes still to make over objects already seen (see
/// [`look_for_new_objects`]).
static PASSES_LEFT: AtomicU32 = AtomicU32::new(0);

/// When the loader has loaded objects since they were last patched
/// (`dlopen`), patches them too. Called by the writer thread, every
/// millisecond while events come, inside `objects::loader_section` (it
/// takes the loader's lock as the writer's own scans of the objects do; a
/// program thread that took it must not wait for us inside an
/// allocation). A library loaded meanwhile allocates unrecorded until
/// then, its constructors always.
///
/// An object may be met before the loader has relocated it (a `dlopen` in
/// progress on another thread): its slots that do not yet hold the
/// program's functions are left, and its pages written only as
/// [`Writes::Careful`] allows. Two more passes follow a change of the
/// count, for the slots so left.
pub fn look_for_new_objects() {
    let adds = crate::objects::loader_adds();
    if adds != ADDS_SEEN.load(Ordering::Relaxed) {
        ADDS_SEEN.store(adds, Ordering::Relaxed);
        PASSES_LEFT.store(2, Ordering::Relaxed);
    } else if PASSES_LEFT.load(Ordering::Relaxed) > 0 {
        PASSES_LEFT.fetch_sub(1, Ordering::Relaxed);
    } else {
        return;
    }
    patch_all(Writes::Careful);
}

/// How [`write_slot`] may store into a slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Every object is relocated (the constructor): where the kernel's store
    /// is refused (a seccomp filter), a slot is written directly, through
    /// `mprotect` in the read-only-after-relocation range.
    AllRelocated,
    /// An object may be in the middle of its relocation, its pages still
    /// writable, and the loader about to write more slots on them: a page
    /// is made writable (and read-only again) only when the kernel found it
    /// read-only.
    Careful,
}

/// Patches every loaded object but the program and libtracer.
fn patch_all(writes: Writes) -> Redirected {
    let exe = EXE.load(Ordering::Relaxed);
    let own = sys::own_load_bias();
    let mut done = Redirected::default();
    for_each_object(|o| {
        if o.bias == exe || o.bias == own {
            return;
        }
        // SAFETY: `o` is a loaded object as the loader describes it.
        let n = unsafe { patch_object(&o, writes) };
        if n > 0 {
            done.slots += n;
            done.libraries += 1;
        }
    });
    done
}

/// `name`'s address when the main program (load bias `exe`, program
/// headers `headers`) defines it and the loader finds that definition
/// first, else 0.
fn defined_by_program(name: &core::ffi::CStr, exe: u64, headers: &[libc::Elf64_Phdr]) -> usize {
    // SAFETY: dlsym and dladdr only read the loader's tables; `info` is a
    // zeroed local they fill.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        let mut info: libc::Dl_info = core::mem::zeroed();
        if f.is_null() || !crate::hooks::defines_malloc(f, &mut info) {
            return 0;
        }
        // The object's base (its first segment) among the program's.
        let base = info.dli_fbase as u64;
        if !sys::load_segments(exe, headers, |_| true).any(|(lo, hi)| (lo..hi).contains(&base)) {
            return 0;
        }
        f as usize
    }
}

/// A loaded object, as `dl_iterate_phdr` gives it.
struct Object {
    bias: u64,
    phdrs: &'static [libc::Elf64_Phdr],
}

fn for_each_object(mut f: impl FnMut(Object)) {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; its program headers
        // are the object's, mapped while it is loaded; `data` is the
        // closure below, alive during the walk.
        unsafe {
            let info = &*info;
            let f = &mut *data.cast::<&mut dyn FnMut(Object)>();
            let phdrs: &'static [libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
                &[]
            } else {
                core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize)
            };
            f(Object {
                bias: info.dlpi_addr,
                phdrs,
            });
        }
        0
    }
    let mut f: &mut dyn FnMut(Object) = &mut f;
    // SAFETY: the callback gets `f` back as its data pointer and runs
    // synchronously inside dl_iterate_phdr.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&mut f as *mut &mut dyn FnMut(Object)).cast());
    }
}

/// An entry of a dynamic section (<elf.h>'s `Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_un: u64,
}

// <elf.h>'s dynamic tags, relocation types and segment type.
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_STRSZ: i64 = 10;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const PT_GNU_RELRO: u32 = 0x6474_e552;

/// Rewrites `o`'s import slots of the functions the program defines;
/// returns how many.
///
/// # Safety
/// `o` describes a loaded object whose dynamic section the loader has
/// processed.
unsafe fn patch_object(o: &Object, writes: Writes) -> usize {
    let Some(dynamic) = o.phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC) else {
        return 0;
    };
    let at = |p: u64| {
        if p < o.bias {
            p.wrapping_add(o.bias)
        } else {
            p
        }
    };
    let (mut symtab, mut strtab, mut strsz) = (0u64, 0u64, 0u64);
    let (mut rela, mut relasz, mut jmprel, mut pltrelsz, mut pltrel) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut d = (o.bias + dynamic.p_vaddr) as *const Dyn;
    // SAFETY: (caller) the dynamic section is mapped and ends with DT_NULL.
    unsafe {
        while (*d).d_tag != DT_NULL {
            let v = (*d).d_un;
            match (*d).d_tag {
                DT_SYMTAB => symtab = at(v),
                DT_STRTAB => strtab = at(v),
                DT_STRSZ => strsz = v,
                DT_RELA => rela = at(v),
                DT_RELASZ => relasz = v,
                DT_JMPREL => jmprel = at(v),
                DT_PLTRELSZ => pltrelsz = v,
                DT_PLTREL => pltrel = v,
                _ => {}
            }
            d = d.add(1);
        }
    }
    if symtab == 0 || strtab == 0 {
        return 0;
    }
    // The pages the loader made read-only: its range rounded down at both
    // ends (a last partial page stays writable).
    let relro = o.phdrs.iter().find(|p| p.p_type == PT_GNU_RELRO).map(|p| {
        (
            (o.bias + p.p_vaddr) & !4095,
            (o.bias + p.p_vaddr + p.p_memsz) & !4095,
        )
    });
    let own = |v: u64| {
        sys::load_segments(o.bias, o.phdrs, |_| true).any(|(lo, hi)| (lo..hi).contains(&v))
    };
    let mut lists = vec![(rela, relasz)];
    if pltrel == DT_RELA as u64 {
        lists.push((jmprel, pltrelsz));
    }
    let mut n = 0;
    for (start, size) in lists {
        if start == 0 {
            continue;
        }
        let count = size as usize / core::mem::size_of::<libc::Elf64_Rela>();
        // SAFETY: (caller) the relocation table the dynamic section names
        // is mapped, `size` bytes long.
        let relocs =
            unsafe { core::slice::from_raw_parts(start as *const libc::Elf64_Rela, count) };
        for r in relocs {
            let kind = (r.r_info & 0xffff_ffff) as u32;
            if kind != R_X86_64_GLOB_DAT && kind != R_X86_64_JUMP_SLOT {
                continue;
            }
            let index = (r.r_info >> 32) as usize;
            // SAFETY: relocation symbols index the object's symbol table.
            let sym = unsafe { &*(symtab as *const libc::Elf64_Sym).add(index) };
            if u64::from(sym.st_name) >= strsz {
                continue;
            }
            // SAFETY: st_name is inside the string table (checked), whose
            // strings end with NUL.
            let name = unsafe {
                core::ffi::CStr::from_ptr((strtab + u64::from(sym.st_name)) as *const libc::c_char)
            };
            let Some(k) = NAMES.iter().position(|x| *x == name) else {
                continue;
            };
            let real = REAL[k].load(Ordering::Relaxed) as u64;
            if real == 0 {
                continue;
            }
            let slot = o.bias + r.r_offset;
            // SAFETY: the relocation's target is an 8-byte slot of this
            // object, mapped (maybe read-only after relocation).
            let v = unsafe { core::ptr::read_volatile(slot as *const u64) };
            // The program's function, or a lazy binding's stub in the
            // object itself that would resolve to it; not the object's own
            // definition (a library that defines the function and binds
            // its calls to it: libc imports its own `malloc`, which
            // resolves to the program's).
            let own_definition = sym.st_shndx != 0 && v == o.bias.wrapping_add(sym.st_value);
            if v != real && !(kind == R_X86_64_JUMP_SLOT && own(v) && !own_definition) {
                continue;
            }
            // SAFETY: as above; the page is made writable first when it is
            // in the read-only-after-relocation range, and given back.
            if unsafe { write_slot(slot, wrapper(k) as u64, relro, writes) } {
                n += 1;
            }
        }
    }
    n
}

/// Stores `value` at `addr` through the kernel (`process_vm_writev` on
/// ourselves): `Err(EFAULT)` instead of a fault when the page is not
/// writable; the call's errno for any other failure (a short write is
/// `EIO`). Never faults, whatever `addr` is.
fn kernel_store(addr: u64, value: u64) -> Result<(), c_int> {
    let local = libc::iovec {
        iov_base: (&value as *const u64).cast_mut().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: 8,
    };
    // SAFETY: both vectors describe 8 bytes: our local, and `addr`, which
    // the kernel checks and writes only if it is mapped writable. (Every
    // argument a full register: `syscall` reads six longs.)
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_vm_writev,
            libc::getpid() as libc::c_long,
            &local as *const libc::iovec,
            1 as libc::c_long,
            &remote as *const libc::iovec,
            1 as libc::c_long,
            0 as libc::c_long,
        )
    };
    match r {
        8 => Ok(()),
        r if r < 0 => Err(sys::errno()),
        _ => Err(libc::EIO),
    }
}

/// Stores `value` at `slot`. First through the kernel (`process_vm_writev`
/// on ourselves), which fails with EFAULT on a read-only page instead of
/// faulting: a page the loader made read-only after relocating the object
/// (in `relro`) is then made writable for the store and read-only again.
/// Where that call is refused (a seccomp filter), only the constructor
/// ([`Writes::AllRelocated`]) stores: directly outside `relro`, through
/// `mprotect` inside.
///
/// # Safety
/// `slot` is an aligned 8-byte slot of a loaded object's data.
unsafe fn write_slot(slot: u64, value: u64, relro: Option<(u64, u64)>, writes: Writes) -> bool {
    let in_relro = relro.is_some_and(|(lo, hi)| (lo..hi).contains(&slot));
    let r = kernel_store(slot, value);
    if r == Ok(()) {
        return true;
    }
    let read_only = r == Err(libc::EFAULT);
    if !(read_only || writes == Writes::AllRelocated) {
        return false;
    }
    if !in_relro {
        if read_only {
            return false;
        }
        // SAFETY: (caller) outside the read-only-after-relocation range,
        // an object's data is writable once it is relocated.
        unsafe { core::ptr::write_volatile(slot as *mut u64, value) };
        return true;
    }
    let page = (slot & !4095) as *mut c_void;
    // SAFETY: (caller) `page` is a mapped page of the object, read-only
    // since its relocation; only its protection changes, and it is given
    // back below.
    unsafe {
        if libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return false;
        }
        core::ptr::write_volatile(slot as *mut u64, value);
        libc::mprotect(page, 4096, libc::PROT_READ);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private anonymous page, `prot` protection.
    fn page(prot: c_int) -> u64 {
        // SAFETY: a fresh anonymous mapping, no existing memory involved.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                4096,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    /// Whether the page at `p` can be written: the kernel's own store.
    fn writable(p: u64) -> bool {
        kernel_store(p + 64, 0).is_ok()
    }

    fn read(slot: u64) -> u64 {
        // SAFETY: the test's pages stay mapped and readable.
        unsafe { core::ptr::read_volatile(slot as *const u64) }
    }

    #[test]
    fn a_writable_slot_is_stored_and_its_page_left_writable() {
        for writes in [Writes::Careful, Writes::AllRelocated] {
            let p = page(libc::PROT_READ | libc::PROT_WRITE);
            // Even in the range: the page was not made read-only yet (an
            // object the loader is still relocating).
            // SAFETY: p + 8 is an aligned slot of a mapped page.
            assert!(unsafe { write_slot(p + 8, 0x1234, Some((p, p + 4096)), writes) });
            assert_eq!(read(p + 8), 0x1234);
            assert!(writable(p), "the page stays writable");
        }
    }

    #[test]
    fn a_read_only_slot_in_the_relro_range_is_stored_and_its_page_made_read_only_again() {
        for writes in [Writes::Careful, Writes::AllRelocated] {
            let p = page(libc::PROT_READ);
            // SAFETY: as above.
            assert!(unsafe { write_slot(p + 16, 0x5678, Some((p, p + 4096)), writes) });
            assert_eq!(read(p + 16), 0x5678);
            assert!(!writable(p), "the page is read-only again");
        }
    }

    #[test]
    fn a_read_only_slot_outside_the_relro_range_is_left() {
        for writes in [Writes::Careful, Writes::AllRelocated] {
            let p = page(libc::PROT_READ);
            // SAFETY: as above.
            assert!(!unsafe { write_slot(p + 16, 0x5678, Some((p + 4096, p + 8192)), writes) });
            assert!(!unsafe { write_slot(p + 16, 0x5678, None, writes) });
            assert_eq!(read(p + 16), 0);
            assert!(!writable(p));
        }
    }
}
