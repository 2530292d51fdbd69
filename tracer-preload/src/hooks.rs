//! The bodies of the exported C functions (their list is in `lib.rs`).
//!
//! Allocation hooks forward to glibc's own allocator (`__libc_*`), so blocks
//! stay glibc's (`malloc_usable_size` and friends keep working), and record
//! exactly what happened: an allocation after the real call returned it, a
//! free before the real free runs (so an address handed to another thread
//! can never appear live twice), nothing for a failure or `free(NULL)`.
//! `posix_memalign`, `aligned_alloc` and `reallocarray` are built on
//! `__libc_memalign`/`__libc_realloc` with glibc 2.36's checks and error
//! codes, which needs no `dlsym` and so no bootstrap pool. `entry` is the
//! exported function's frame (`unwind::entry_frame`), where the stack
//! capture starts.
//!
//! Descriptor, exec and exit hooks protect the trace files and finish them at
//! the right moments; see `fds` and `lifecycle`.

use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_long, c_uint, c_void, size_t};

use std::os::unix::ffi::OsStrExt;

use crate::{fds, lifecycle, sys, syscalls, tls};

// ---------------------------------------------------------------- allocation

pub unsafe fn malloc(size: size_t, entry: u64) -> *mut c_void {
    let p = tls::in_allocator(|| sys::__libc_malloc(size));
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, size as u64, false, entry);
    }
    p
}

pub unsafe fn free(ptr: *mut c_void) {
    if !ptr.is_null() {
        lifecycle::on_free(ptr as u64, false);
    }
    tls::in_allocator(|| sys::__libc_free(ptr))
}

pub unsafe fn calloc(n: size_t, size: size_t, entry: u64) -> *mut c_void {
    let p = tls::in_allocator(|| sys::__libc_calloc(n, size));
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, (n as u64).wrapping_mul(size as u64), false, entry);
    }
    p
}

pub unsafe fn realloc(ptr: *mut c_void, size: size_t, entry: u64) -> *mut c_void {
    if ptr.is_null() {
        return malloc(size, entry);
    }
    if size == 0 {
        // glibc frees the block and returns NULL.
        lifecycle::on_free(ptr as u64, false);
        return tls::in_allocator(|| sys::__libc_realloc(ptr, 0));
    }
    lifecycle::on_free(ptr as u64, true);
    let q = tls::in_allocator(|| sys::__libc_realloc(ptr, size));
    if q.is_null() {
        lifecycle::on_realloc_failed();
    } else {
        lifecycle::on_alloc(q as u64, size as u64, true, entry);
    }
    q
}

pub unsafe fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t, entry: u64) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => realloc(ptr, total, entry),
        None => {
            sys::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

pub unsafe fn memalign(align: size_t, size: size_t, entry: u64) -> *mut c_void {
    let p = tls::in_allocator(|| sys::__libc_memalign(align, size));
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, size as u64, false, entry);
    }
    p
}

pub unsafe fn aligned_alloc(align: size_t, size: size_t, entry: u64) -> *mut c_void {
    // glibc 2.36: the alignment must be a power of two.
    if !align.is_power_of_two() {
        sys::set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    memalign(align, size, entry)
}

pub unsafe fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
    entry: u64,
) -> c_int {
    let word = core::mem::size_of::<*mut c_void>();
    if !align.is_multiple_of(word) || !(align / word).is_power_of_two() {
        return libc::EINVAL;
    }
    let saved = sys::errno();
    let p = tls::in_allocator(|| sys::__libc_memalign(align, size));
    sys::set_errno(saved);
    if p.is_null() {
        return libc::ENOMEM;
    }
    *out = p;
    lifecycle::on_alloc(p as u64, size as u64, false, entry);
    0
}

pub unsafe fn valloc(size: size_t, entry: u64) -> *mut c_void {
    let p = tls::in_allocator(|| sys::__libc_valloc(size));
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, size as u64, false, entry);
    }
    p
}

pub unsafe fn pvalloc(size: size_t, entry: u64) -> *mut c_void {
    let p = tls::in_allocator(|| sys::__libc_pvalloc(size));
    if !p.is_null() {
        lifecycle::on_alloc(p as u64, size as u64, false, entry);
    }
    p
}

pub unsafe fn mallopt(param: c_int, value: c_int) -> c_int {
    if param == libc::M_MMAP_THRESHOLD && (value as i64) < crate::scan::EXACT_FROM as i64 {
        crate::scan::set_exact_sizes();
    }
    tls::in_allocator(|| sys::__libc_mallopt(param, value))
}

/// The `malloc_usable_size` of the object that defines the `__libc_malloc`
/// our hooks call: glibc's, or that of an allocator that defines the
/// `__libc_*` functions itself (tcmalloc does, so our hooks already forward
/// to it). A program linked with an allocator that does not (jemalloc) gets
/// glibc's blocks from our hooks, and that allocator's own
/// `malloc_usable_size`, asked about one of them, crashed it
/// (`examples/usable_size.c`). Resolved by our constructor, or at the
/// first call before it.
pub unsafe fn malloc_usable_size(ptr: *mut c_void) -> size_t {
    let f = match USABLE_SIZE.load(Ordering::Acquire) {
        0 => resolve_usable_size(),
        f => f,
    };
    if f == 0 {
        return 0;
    }
    // SAFETY: `f` is a `malloc_usable_size` found by dlsym, which has this
    // C signature.
    let f = core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> size_t>(f);
    f(ptr)
}

static USABLE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Finds the `malloc_usable_size` [`malloc_usable_size`] calls (0 when
/// none can be found).
pub fn resolve_usable_size() -> usize {
    let _g = tls::enter();
    let ours = sys::__libc_malloc as *const () as usize;
    // SAFETY: dladdr reads the loader's tables into the zeroed local; the
    // handle from dlopen(RTLD_NOLOAD) names an object already loaded, is
    // only used for dlsym, and is given back.
    let f = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(ours as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return 0;
        }
        let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return 0;
        }
        let f = libc::dlsym(h, c"malloc_usable_size".as_ptr()) as usize;
        libc::dlclose(h);
        f
    };
    USABLE_SIZE.store(f, Ordering::Release);
    f
}

/// Whether `found` is a `malloc` defined where the loader found it (filling
/// `info` with that object), under whatever name sits at that address
/// (tcmalloc's is `__libc_malloc`), not an undefined symbol with a value: a program
/// (not position-independent) that takes `malloc`'s address gets a stub of
/// its own for it (python3, node), which dlsym returns but whose calls
/// reach us.
///
/// # Safety
/// `found` is an address the loader returned.
pub(crate) unsafe fn defines_malloc(found: *mut c_void, info: &mut libc::Dl_info) -> bool {
    // <elf.h>'s section index of an undefined symbol; <dlfcn.h>'s request
    // for the symbol's table entry.
    const SHN_UNDEF: u16 = 0;
    const RTLD_DL_SYMENT: c_int = 1;
    let mut sym: *mut c_void = core::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables and fills `info` and
    // `sym`; the name and the symbol entry it returns are the loader's.
    unsafe {
        libc::dladdr1(found, info, &mut sym, RTLD_DL_SYMENT) != 0
            && !info.dli_fname.is_null()
            && info.dli_saddr == found
            && !sym.is_null()
            && (*sym.cast::<libc::Elf64_Sym>()).st_shndx != SHN_UNDEF
    }
}

/// The libraries the loader lists ahead of libtracer.so, by name: the
/// ones preloaded before it (the executable, whose name is empty, and the
/// vDSO aside).
fn preloaded_ahead() -> Vec<std::ffi::CString> {
    struct Walk {
        ours: u64,
        names: Vec<std::ffi::CString>,
        done: bool,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; `data` is the Walk below, alive meanwhile.
        unsafe {
            let walk = &mut *data.cast::<Walk>();
            let info = &*info;
            if walk.done || info.dlpi_addr == walk.ours {
                walk.done = true;
                return 0;
            }
            if !info.dlpi_name.is_null() {
                let name = core::ffi::CStr::from_ptr(info.dlpi_name);
                if name.to_bytes().contains(&b'/') {
                    walk.names.push(name.to_owned());
                }
            }
        }
        0
    }
    let mut walk = Walk {
        ours: sys::own_load_bias(),
        names: Vec::new(),
        done: false,
    };
    // SAFETY: the callback gets `walk` back as its data pointer and runs
    // synchronously inside dl_iterate_phdr, while `walk` lives.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&mut walk as *mut Walk).cast());
    }
    walk.names
}

/// The object that takes the program's `malloc` calls when it is not
/// libtracer: an executable that defines `malloc` itself (a statically
/// linked allocator) comes before every preloaded library in the loader's
/// search order, so its allocations never reach our hooks; so does a
/// library preloaded ahead of us. `None` when
/// ours is the one found (or nothing can be told).
pub fn malloc_taken_by() -> Option<String> {
    let _g = tls::enter();
    // Not the address of our `malloc`: taken in this object, it is the
    // loader's canonical one, i.e. the program's when the program defines it.
    let (lo, hi) = sys::own_text_range();
    // SAFETY: dlsym, dlvsym, dlopen(RTLD_NOLOAD) and dladdr only read the
    // loader's tables; `info` is a zeroed local they fill, its name a
    // string the loader owns.
    unsafe {
        // The default definition: the program's own, or a PIE program's
        // view of a library preloaded ahead of us. glibc's own `malloc`
        // (at `__libc_malloc`'s address) is what it finds when that library
        // defines `malloc` under glibc's version only (glibc's
        // `libc_malloc_debug.so`, for `MALLOC_CHECK_`): the libraries ahead
        // of us are asked below.
        let glibc = libc::dlsym(libc::RTLD_DEFAULT, c"__libc_malloc".as_ptr());
        let found = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
        let mut info: libc::Dl_info = core::mem::zeroed();
        let found = !found.is_null()
            && found != glibc
            && !(lo..hi).contains(&(found as u64))
            && defines_malloc(found, &mut info);
        if !found {
            // A non-PIE program that takes `malloc`'s address (python3)
            // makes its own stub the one `dlsym` finds: ask each library
            // preloaded ahead of us for a `malloc` of its own, of any
            // version.
            return preloaded_ahead()
                .into_iter()
                .find(|name| {
                    let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
                    if h.is_null() {
                        return false;
                    }
                    let own = [
                        libc::dlsym(h, c"malloc".as_ptr()),
                        libc::dlvsym(h, c"malloc".as_ptr(), c"GLIBC_2.2.5".as_ptr()),
                    ]
                    .into_iter()
                    .any(|f| {
                        !f.is_null()
                            && defines_malloc(f, &mut info)
                            && core::ffi::CStr::from_ptr(info.dli_fname) == name.as_c_str()
                    });
                    libc::dlclose(h);
                    own
                })
                .map(|name| name.to_string_lossy().into_owned());
        }
        let name = core::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy();
        // The main program's name is empty in the loader's list.
        Some(if name.is_empty() {
            sys::exe_path().to_string()
        } else {
            name.into_owned()
        })
    }
}

pub unsafe fn marker(name: *const c_char) {
    if name.is_null() {
        return;
    }
    lifecycle::on_marker(core::ffi::CStr::from_ptr(name).to_bytes());
}

// ---------------------------------------------------------------- descriptors

/// Whether the program (not the tracer) is calling, in the traced process.
fn program_call() -> bool {
    !tls::inside()
}

pub unsafe fn close(fd: c_int) -> c_int {
    if fds::is_ours(fd) {
        if program_call() {
            return 0; // pretend: the trace file stays open (no system call)
        }
        fds::forget(fd); // the tracer closing its own file
    }
    let t0 = syscalls::start(NR_CLOSE);
    let rc = sys::raw_close(fd);
    if let Some(t0) = t0 {
        syscalls::done(NR_CLOSE, t0, i64::from(rc), |a| a.fd(fd));
    }
    rc
}

use syscalls::hooks::nr::{CLOSE as NR_CLOSE, DUP2 as NR_DUP2, DUP3 as NR_DUP3};

/// Moves a trace descriptor of ours away from `new` before the program's
/// `dup2`/`dup3` reuses the number (not in a `vfork` child: its descriptor
/// table is its own, the registry is the parent's).
fn make_room(old: c_int, new: c_int) {
    if program_call() && old != new && !tls::vforked() {
        let _g = tls::enter();
        fds::evacuate(new);
    }
}

pub unsafe fn dup2(old: c_int, new: c_int) -> c_int {
    make_room(old, new);
    let t0 = syscalls::start(NR_DUP2);
    let rc = sys::direct_syscall(libc::SYS_dup2, &[old as c_long, new as c_long]) as c_int;
    if let Some(t0) = t0 {
        syscalls::done(NR_DUP2, t0, i64::from(rc), |a| {
            a.fd(old);
            a.fd(new);
        });
    }
    rc
}

pub unsafe fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    make_room(old, new);
    let t0 = syscalls::start(NR_DUP3);
    let rc = sys::direct_syscall(
        libc::SYS_dup3,
        &[old as c_long, new as c_long, flags as c_long],
    ) as c_int;
    if let Some(t0) = t0 {
        syscalls::done(NR_DUP3, t0, i64::from(rc), |a| {
            a.fd(old);
            a.fd(new);
            a.flags(flags as u32 as u64);
        });
    }
    rc
}

pub unsafe fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let raw = |a: c_uint, b: c_uint| {
        sys::direct_syscall(
            libc::SYS_close_range,
            &[a as c_long, b as c_long, flags as c_long],
        ) as c_int
    };
    // CLOSE_RANGE_CLOEXEC only marks descriptors, and ours are close-on-exec.
    if !program_call() || flags as c_uint & libc::CLOSE_RANGE_CLOEXEC != 0 || first > last {
        return raw(first, last);
    }
    let holes = {
        let _g = tls::enter();
        fds::ours_in(first, last)
    };
    if holes.is_empty() {
        return raw(first, last);
    }
    let ranges = {
        let _g = tls::enter();
        fds::split_range(first, last, &holes)
    };
    for (a, b) in ranges {
        let rc = raw(a, b);
        if rc != 0 {
            return rc;
        }
    }
    0
}

/// The descriptor calls, `exit_group` and the signal calls the program
/// makes through `syscall()` (the exported `syscall` hands these eight
/// numbers here; see `lib.rs`, whose list of numbers must stay this
/// match's): the same hooks as their libc functions, so that a program
/// closing every descriptor with `syscall(SYS_close_range, 3, ~0U, 0)` does
/// not close the trace files, one ending with `syscall(SYS_exit_group, n)`
/// has them finished (as by `_exit`), and one sending itself a signal that
/// ends it with `syscall(SYS_tgkill, ...)` (a handler re-raising its
/// signal) has them finished as by `raise`. Returns what `syscall()` would
/// (-1 and `errno` on failure).
pub unsafe extern "C" fn hooked_syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) -> c_long {
    let rc = match n {
        libc::SYS_close => close(a1 as c_int),
        libc::SYS_dup2 => dup2(a1 as c_int, a2 as c_int),
        libc::SYS_dup3 => dup3(a1 as c_int, a2 as c_int, a3 as c_int),
        libc::SYS_close_range => close_range(a1 as c_uint, a2 as c_uint, a3 as c_int),
        libc::SYS_exit_group => exit_now(a1 as c_int),
        // A signal to this process: the files finished or flushed first, as
        // by the `kill` and `pthread_kill` hooks.
        libc::SYS_kill => crate::syscalls::hooks::kill(a1 as libc::pid_t, a2 as c_int),
        libc::SYS_tgkill => {
            crate::signals::before_tgkill(a1 as libc::pid_t, a2 as libc::pid_t, a3 as c_int);
            return sys::direct_syscall(n, &[a1, a2, a3]);
        }
        libc::SYS_tkill => {
            crate::signals::before_tkill(a1 as libc::pid_t, a2 as c_int);
            return sys::direct_syscall(n, &[a1, a2]);
        }
        _ => return sys::direct_syscall(n, &[a1, a2, a3, a4, a5]),
    };
    c_long::from(rc)
}

/// `syscall()`'s failure path (see `lib.rs`): `rax` is the kernel's
/// negative error; sets `errno`, returns -1.
pub extern "C" fn syscall_failed(rax: c_long) -> c_long {
    sys::set_errno(rax.wrapping_neg() as c_int);
    -1
}

pub unsafe fn closefrom(low: c_int) {
    let low = low.max(0) as c_uint;
    if close_range(low, c_uint::MAX, 0) == 0 {
        return;
    }
    // No close_range in this kernel: close one by one up to the limit.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
        lim.rlim_cur.min(1 << 20) as c_uint
    } else {
        1024
    };
    for fd in low..top {
        close(fd as c_int);
    }
}

// ---------------------------------------------------------------- exit

pub fn exit_now(status: c_int) -> ! {
    syscalls::record_exit_group(status, false);
    lifecycle::before_exit();
    sys::raw_exit_group(status)
}

// ---------------------------------------------------------------- daemon

/// `daemon(3)`, step for step as glibc makes it, but with the parent
/// leaving through [`exit_now`]: glibc's own ends the parent with its
/// internal `_exit`, which no hook sees, and the parent's trace was left
/// unfinished (an empty file beside its spool).
///
/// The steps and their results: `fork` (-1 when it fails); the parent
/// exits with 0; the child calls `setsid` (-1 when it fails), `chdir("/")`
/// unless `nochdir` (its result ignored), and unless `noclose` opens
/// `/dev/null`, checks that it is the null character device (1, 3),
/// duplicates it onto 0, 1 and 2 and closes it when above 2. `/dev/null`
/// that cannot be opened or examined gives -1 with that call's errno;
/// another file there, -1 with `ENODEV`. The calls go through the exported
/// names, so our `fork`, `dup2` and `close` hooks see them as the
/// program's own.
///
/// # Safety
/// As `daemon`: the caller gives up its process to the child.
/// `caller_sp` is the program's stack pointer at its call: the parent's
/// exit scan starts there, as `exit`'s starts at the frame that called it
/// (our frames below hold stale words of earlier, deeper calls, the
/// allocation hooks' among them, which made a lost block reachable).
/// `regs` points to the caller's `rbx`, `rbp`, `r12`-`r15` at its call.
pub unsafe extern "C" fn daemon(
    nochdir: c_int,
    noclose: c_int,
    caller_sp: u64,
    regs: *const u64,
) -> c_int {
    match libc::fork() {
        -1 => return -1,
        0 => {}
        _ => {
            // SAFETY: the six words the naked entry pushed, on this
            // thread's stack, above our frame.
            let saved: [u64; 6] = core::ptr::read(regs.cast::<[u64; 6]>());
            crate::scan::remember_exit_registers(saved, caller_sp);
            syscalls::record_exit_group(0, false);
            lifecycle::before_exit_from(caller_sp);
            sys::raw_exit_group(0)
        }
    }
    if libc::setsid() == -1 {
        return -1;
    }
    if nochdir == 0 {
        libc::chdir(c"/".as_ptr());
    }
    if noclose != 0 {
        return 0;
    }
    let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    if fd == -1 {
        return -1;
    }
    let mut st: libc::stat64 = core::mem::zeroed();
    let failed = if libc::fstat64(fd, &mut st) != 0 {
        Some(sys::errno())
    } else if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != libc::makedev(1, 3) {
        Some(libc::ENODEV)
    } else {
        None
    };
    if let Some(e) = failed {
        libc::close(fd);
        sys::set_errno(e);
        return -1;
    }
    for to in 0..3 {
        libc::dup2(fd, to);
    }
    if fd > 2 {
        libc::close(fd);
    }
    0
}

// ---------------------------------------------------------------- abort

pub unsafe fn abort() -> ! {
    crate::syscalls::real!(REAL, "abort\0");
    lifecycle::before_abort();
    if let Some(f) = REAL.get::<unsafe extern "C" fn() -> !>() {
        f();
    }
    libc::raise(libc::SIGABRT);
    sys::raw_exit_group(127)
}

type AssertFailFn = unsafe extern "C" fn(*const c_char, *const c_char, c_uint, *const c_char) -> !;

pub unsafe fn assert_fail(
    expr: *const c_char,
    file: *const c_char,
    line: c_uint,
    func: *const c_char,
) -> ! {
    crate::syscalls::real!(REAL, "__assert_fail\0");
    lifecycle::before_abort();
    if let Some(f) = REAL.get::<AssertFailFn>() {
        f(expr, file, line, func);
    }
    abort()
}

// ------------------------------------------------------ unshare, setns

/// Calls `f` with the writer thread stopped when `flags` ask for a new or
/// another user namespace, which the kernel grants a single-threaded
/// process only (`EINVAL` otherwise: `unshare -U` failed traced). The files
/// are finished first, as before an exec, and tracing goes on into new
/// ones afterwards.
unsafe fn alone_for(flags: c_int, f: impl FnOnce() -> c_int) -> c_int {
    let user = flags & libc::CLONE_NEWUSER != 0 && lifecycle::is_traced_process();
    let threads = if user { sys::thread_count() } else { None };
    let resume = user && lifecycle::before_exec();
    if resume {
        // The join returns when the kernel clears the writer's thread id,
        // before the thread has left the process: the kernel would still
        // count it (EINVAL about once in five CI runs). Wait until it has
        // left, 100 ms at most.
        if let Some(n) = threads {
            for _ in 0..2000 {
                if sys::thread_count().is_none_or(|now| now < n) {
                    break;
                }
                sys::sleep_us(50);
            }
        }
    }
    let rc = f();
    let err = sys::errno();
    if resume {
        lifecycle::after_failed_exec();
    }
    sys::set_errno(err);
    rc
}

pub unsafe fn unshare(flags: c_int) -> c_int {
    crate::syscalls::real!(REAL, "unshare\0");
    let Some(real) = REAL.get::<unsafe extern "C" fn(c_int) -> c_int>() else {
        sys::set_errno(libc::ENOSYS);
        return -1;
    };
    alone_for(flags, || real(flags))
}

pub unsafe fn setns(fd: c_int, nstype: c_int) -> c_int {
    crate::syscalls::real!(REAL, "setns\0");
    let Some(real) = REAL.get::<unsafe extern "C" fn(c_int, c_int) -> c_int>() else {
        sys::set_errno(libc::ENOSYS);
        return -1;
    };
    // nstype 0 lets the descriptor say which namespace: possibly a user one.
    let user = if nstype == 0 {
        libc::CLONE_NEWUSER
    } else {
        nstype
    };
    alone_for(user, || real(fd, nstype))
}

// ------------------------------------------------------ pthread_getattr_np

/// glibc's `pthread_getattr_np` allocates while it holds the thread's lock;
/// the mark tells a capture there not to ask for the stack's bounds with
/// the same call (`unwind::bounds`), which would wait on that lock.
pub unsafe fn pthread_getattr_np(
    thread: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    crate::syscalls::real!(REAL, "pthread_getattr_np\0");
    type F = unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> c_int;
    let Some(real) = REAL.get::<F>() else {
        return libc::ENOSYS;
    };
    let was = tls::set_in_getattr(true);
    let rc = real(thread, attr);
    tls::set_in_getattr(was);
    rc
}

// ---------------------------------------------------------------- dlclose

/// Before glibc's `dlclose` may unmap an object, the writer symbolizes the
/// addresses seen inside it; afterwards the cached unwind rules of the code
/// that went are dropped (all of them when that cannot be told).
pub unsafe fn dlclose(handle: *mut c_void) -> c_int {
    // The program's errno is left as glibc's dlclose leaves it (the waits
    // for the writer are futex calls, which fail with EAGAIN or ETIMEDOUT).
    let before = if !handle.is_null() && !tls::inside() {
        // SAFETY: the caller's handle, passed on as glibc's dlclose takes it.
        sys::keep_errno(|| Some(unsafe { before_unload(handle) }))
    } else {
        None
    };
    crate::syscalls::real!(REAL, "dlclose\0");
    let Some(f) = REAL.get::<unsafe extern "C" fn(*mut c_void) -> c_int>() else {
        return -1;
    };
    let stacks = tls::stacks_sent();
    let rc = f(handle);
    sys::keep_errno(|| after_unload(before.as_ref(), stacks));
    rc
}

/// What `before_unload` saw: the loader's objects, and whether the writer
/// was told of the unload.
struct BeforeUnload {
    loaded: crate::objects::Loaded,
    told: bool,
}

/// Before glibc's `dlclose`: the loader's objects as they are, and the
/// writer told to name the frames inside `handle`'s object.
unsafe fn before_unload(handle: *mut c_void) -> BeforeUnload {
    let _g = tls::enter();
    let loaded = crate::objects::Loaded::read();
    let mut map: *mut libc::c_void = core::ptr::null_mut();
    let path = if libc::dlinfo(
        handle,
        libc::RTLD_DI_LINKMAP,
        (&mut map as *mut *mut c_void).cast(),
    ) == 0
        && !map.is_null()
    {
        // struct link_map { ElfW(Addr) l_addr; char *l_name; ... }
        let name = *(map as *const *const c_char).add(1);
        (!name.is_null()).then(|| {
            core::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        })
    } else {
        None
    };
    let told = path.is_some_and(lifecycle::before_dlclose);
    BeforeUnload { loaded, told }
}

/// After glibc's `dlclose`. The object's code may be gone, and other code
/// loaded at its addresses later: the rules cached for them go (all of
/// them when what went cannot be told, `before` missing included). A
/// handle still held elsewhere unloads nothing, and nothing is dropped.
fn after_unload(before: Option<&BeforeUnload>, stacks: u8) {
    let _g = tls::enter();
    let gone = before.and_then(|b| crate::objects::Loaded::read().unloaded_since(&b.loaded));
    let unloaded = gone.as_ref().is_none_or(|g| !g.is_empty());
    match gone {
        Some(ranges) => crate::cfi::invalidate_ranges(&ranges),
        None => crate::cfi::invalidate(),
    }
    if before.is_some_and(|b| b.told) {
        // Its destructors ran inside glibc's dlclose, after the writer named
        // its frames: the stacks they sent are named from the object's file
        // before anything else can be loaded where it was (a second wait,
        // only when this thread sent a stack meanwhile); then the writer
        // learns that this thread's later stacks are not that object's.
        if unloaded && tls::stacks_sent() != stacks {
            lifecycle::after_dlclose();
        }
        crate::writer::dlclose_returned(tls::tid());
    }
}

// ---------------------------------------------------------------- exec

extern "C" {
    static mut environ: *const *const c_char;
}

type ExecvpeFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

/// glibc's own `execvpe` (the next definition after ours).
unsafe fn real_execvpe() -> Option<ExecvpeFn> {
    crate::syscalls::real!(REAL, "execvpe\0");
    REAL.get::<ExecvpeFn>()
}

/// The environment an exec passes: the one the program gave, or the one
/// [`exec_env`] made in its place, kept alive here while the exec runs.
pub struct ExecEnv {
    given: *const *const c_char,
    _owned: Vec<Vec<u8>>,
    ptrs: Vec<*const c_char>,
}

impl ExecEnv {
    /// The `envp` to pass.
    pub fn as_ptr(&self) -> *const *const c_char {
        if self.ptrs.is_empty() {
            self.given
        } else {
            self.ptrs.as_ptr()
        }
    }
}

/// The environment for the new program (`program`, searched in `PATH`
/// when `search` and it has no slash): as given, or without libtracer in
/// `LD_PRELOAD` when exec'd programs are not to be traced
/// ([`crate::preload::without_tracer_environment`]) or the program is built
/// with a sanitizer whose runtime must come first (`symbolizer::program`),
/// or with it (and the `TRACER_*` variables this process started with)
/// when they are and the program built an environment without them
/// ([`crate::preload::traced_environment`]).
///
/// # Safety
/// `envp` is null or an exec's environment: NUL-terminated strings, then a
/// null pointer; `program` is null or a NUL-terminated string.
pub unsafe fn exec_env(
    program: *const c_char,
    search: bool,
    envp: *const *const c_char,
) -> ExecEnv {
    let _g = tls::enter();
    let mut env = ExecEnv {
        given: envp,
        _owned: Vec::new(),
        ptrs: Vec::new(),
    };
    if envp.is_null() {
        return env;
    }
    let mut n = 0;
    while !(*envp.add(n)).is_null() {
        n += 1;
    }
    // SAFETY: `envp` holds `n` valid NUL-terminated strings (the exec's
    // contract), alive for this call.
    let entries = (0..n).map(|i| unsafe { core::ffi::CStr::from_ptr(*envp.add(i)) }.to_bytes());
    let rewritten = if lifecycle::follow_exec() && !needs_sanitizer_first(program, search) {
        crate::preload::traced_environment(entries)
    } else {
        Some(crate::preload::without_tracer_environment(entries))
    };
    if let Some(list) = rewritten {
        let owned: Vec<Vec<u8>> = list
            .into_iter()
            .map(|mut e| {
                e.push(0);
                e
            })
            .collect();
        env.ptrs = (owned.iter().map(|e| e.as_ptr().cast()))
            .chain(core::iter::once(core::ptr::null()))
            .collect();
        env._owned = owned;
    }
    env
}

/// Whether `program` (searched in `PATH` when `search` and it has no
/// slash, as `execvp` does) needs a sanitizer runtime first; then one line
/// on stderr says it runs untraced.
///
/// # Safety
/// `program` is null or a NUL-terminated string.
unsafe fn needs_sanitizer_first(program: *const c_char, search: bool) -> bool {
    if program.is_null() {
        return false;
    }
    // SAFETY: the caller's NUL-terminated string, alive for this call.
    let given = unsafe { core::ffi::CStr::from_ptr(program) };
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes(given.to_bytes()));
    let path = if search {
        symbolizer::program::find_program(name, std::env::var_os("PATH").as_deref())
    } else {
        Some(name.to_path_buf())
    };
    let Some(runtime) = path.and_then(|p| symbolizer::program::sanitizer_runtime(&p)) else {
        return false;
    };
    if !lifecycle::quiet() {
        sys::stderr_line(&format!(
            "{} is built with a sanitizer whose runtime ({runtime}) must come first and takes \
             malloc: it runs untraced",
            given.to_string_lossy()
        ));
    }
    true
}

/// Common path of every exec hook: finish the trace, exec, resume on failure.
unsafe fn exec_common(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    search_path: bool,
) -> c_int {
    let traced = lifecycle::is_traced_process();
    let captured = syscalls::before_exec(file, argv, envp);
    let resume = traced && lifecycle::before_exec();
    let env = exec_env(file, search_path, envp);
    let envp = env.as_ptr();
    let rc = if search_path {
        match real_execvpe() {
            Some(f) => f(file, argv, envp),
            None => {
                sys::set_errno(libc::ENOSYS);
                -1
            }
        }
    } else {
        libc::syscall(libc::SYS_execve, file, argv, envp) as c_int
    };
    let err = sys::errno();
    let returned = sys::now_ns();
    if resume {
        lifecycle::after_failed_exec();
    }
    if let Some(t0) = captured {
        sys::set_errno(err);
        syscalls::exec_failed(t0, returned, file, argv, envp);
    }
    sys::set_errno(err);
    rc
}

pub unsafe fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_common(path, argv, envp, false)
}

pub unsafe fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    exec_common(path, argv, environ, false)
}

pub unsafe fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    exec_common(file, argv, environ, true)
}

pub unsafe fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_common(file, argv, envp, true)
}

// ---------------------------------------------------------------- posix_spawn

/// glibc's `posix_spawn` and `posix_spawnp` (the exported entries are in
/// `lib.rs`).
pub type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const c_void,
    *const c_void,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

// ---------------------------------------------------------------- execl*

/// Which `execl*` variant called [`execl_helper`].
pub const EXECL: c_int = 0;
pub const EXECLP: c_int = 1;
pub const EXECLE: c_int = 2;

/// Body of the variadic `execl`, `execlp` and `execle` (glibc's versions call
/// its internal `execve` and would bypass our exec hooks). The assembly entry
/// points in `lib.rs` pass the five argument registers after `path` as an
/// array and a pointer to the stack-passed arguments; the list ends at the
/// first null pointer, and `execle`'s environment follows it.
pub unsafe extern "C" fn execl_helper(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    kind: c_int,
) -> c_int {
    let arg = |i: usize| {
        if i < 5 {
            *regs.add(i)
        } else {
            *stack.add(i - 5)
        }
    };
    let guard = tls::enter();
    let mut argv: Vec<*const c_char> = Vec::new();
    let mut i = 0;
    loop {
        let a = arg(i);
        argv.push(a);
        i += 1;
        if a.is_null() {
            break;
        }
    }
    let envp = if kind == EXECLE {
        arg(i) as *const *const c_char
    } else {
        environ
    };
    drop(guard);
    exec_common(path, argv.as_ptr(), envp, kind == EXECLP)
}
