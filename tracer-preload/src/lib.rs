//! libtracer.so: `LD_PRELOAD` it into any dynamically linked glibc program to
//! record every allocation and free, with its stack, into a trace file.
//!
//! The crate root is the table of contents: the modules, then the complete
//! list of C symbols the library exports (its ABI). Each exported function is
//! a one-line forward to its body in [`hooks`]; `no_mangle` is applied outside
//! unit tests only, so the test binary keeps the system's allocator.
//!
//! | module | role |
//! | --- | --- |
//! | [`sys`] | raw libc/kernel facilities, glibc's `__libc_*` allocator |
//! | [`alloc`] | the tracer's own heap (`#[global_allocator]` over `__libc_*`) |
//! | [`tls`] | per-thread guard, tid, stack bounds, sent-stack cache |
//! | [`hooks`] | bodies of the exported functions |
//! | [`lifecycle`] | state machine, start-up, hand-off, fork, exec, exit |
//! | [`lane`] | each thread's ring of allocation messages, and their order across threads |
//! | [`plist`] | the grow-only list of per-thread buffers (lanes, syscall rings) |
//! | [`unwind`] | stack capture: `dwarf` (default) and `fp` |
//! | [`cfi`] | the cached `.eh_frame` unwinder behind `dwarf` |
//! | [`intern`] | stack keys and the writer's stack table |
//! | [`writer`] | the background writer thread |
//! | [`objects`] | loaded objects from `dl_iterate_phdr` |
//! | [`scan`] | reachability of the blocks live at exit (leak classes) |
//! | [`fds`] | keeping the trace descriptors out of the program's reach |
//! | [`config`] | `TRACER_*` environment variables |
//! | [`preload`] | `LD_PRELOAD` editing for `TRACER_FOLLOW_EXEC=0` |
//! | [`syscalls`] | system call capture (`TRACER_FORMAT=tlv`); its wrappers (`read`, `openat`, `connect`, `mmap`, `fork`, `vfork`, `pthread_create`, `exit`, …) are exported from `syscalls::hooks` |

// The exported functions' safety contracts are those of the C functions of the
// same names (glibc's manual pages); restating them on each would add nothing.
#![allow(clippy::missing_safety_doc)]

/// The assembly of a naked entry that keeps its caller's callee-saved
/// registers (`rbx`, `rbp`, `r12`-`r15`, in that order from the lowest
/// address up) on the stack before any other code runs: the exit scan
/// takes them for the program's registers (`scan::remember_exit_registers`).
/// With their unwind rules: the entry must be inside `.cfi_startproc`.
macro_rules! push_callee_saved {
    () => {
        concat!(
            "push r15\n.cfi_adjust_cfa_offset 8\n.cfi_offset r15, -16\n",
            "push r14\n.cfi_adjust_cfa_offset 8\n.cfi_offset r14, -24\n",
            "push r13\n.cfi_adjust_cfa_offset 8\n.cfi_offset r13, -32\n",
            "push r12\n.cfi_adjust_cfa_offset 8\n.cfi_offset r12, -40\n",
            "push rbp\n.cfi_adjust_cfa_offset 8\n.cfi_offset rbp, -48\n",
            "push rbx\n.cfi_adjust_cfa_offset 8\n.cfi_offset rbx, -56"
        )
    };
}

mod alloc;
mod cfi;
mod clock;
mod config;
#[cfg_attr(test, allow(dead_code))]
mod fds;
#[cfg_attr(test, allow(dead_code))]
mod got;
mod hooks;
mod intern;
#[cfg_attr(test, allow(dead_code))]
mod lane;
// The constructor and the handlers it registers are not built into unit tests.
#[cfg_attr(test, allow(dead_code))]
mod lifecycle;
mod objects;
mod plist;
mod preload;
#[cfg_attr(test, allow(dead_code))]
mod scan;
mod side;
#[cfg_attr(test, allow(dead_code))]
mod signals;
// The exported wrappers are not built into unit tests.
mod sys;
#[cfg_attr(test, allow(dead_code))]
mod syscalls;
#[cfg(test)]
mod testing;
mod tls;
mod unwind;
mod writer;

use libc::{c_char, c_int, c_long, c_uint, c_void, size_t};

#[global_allocator]
static TRACER_HEAP: alloc::LibcAlloc = alloc::LibcAlloc;

#[cfg(not(test))]
#[ctor::ctor]
fn tracer_constructor() {
    lifecycle::constructor();
}

// ------------------------------------------------------------------ the ABI
// SAFETY (all below): these are the C library's contracts; the caller passes
// what the C function of the same name accepts, and each body upholds it.
// The allocating ones pass their own frame (`unwind::entry_frame`): the
// stack capture starts at its return address, the program's, without
// walking the tracer's frames in between.

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    hooks::malloc(size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    hooks::free(ptr)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    hooks::calloc(n, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    hooks::realloc(ptr, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    hooks::reallocarray(ptr, n, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    hooks::posix_memalign(out, align, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    hooks::aligned_alloc(align, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    hooks::memalign(align, size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    hooks::valloc(size, unwind::entry_frame())
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    hooks::pvalloc(size, unwind::entry_frame())
}

/// Forwarded to glibc; a lowered `mmap` threshold makes the leak scan's
/// table keep every block's exact size (see `scan::Live`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mallopt(param: c_int, value: c_int) -> c_int {
    hooks::mallopt(param, value)
}

/// `malloc_usable_size`, of the allocator the hooks forward to (see
/// [`hooks::malloc_usable_size`]).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> size_t {
    hooks::malloc_usable_size(ptr)
}

/// Puts a named marker into the trace.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn tracer_marker(name: *const c_char) {
    hooks::marker(name)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    hooks::close(fd)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    hooks::dup2(old, new)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    hooks::dup3(old, new, flags)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    hooks::close_range(first, last, flags)
}

/// `syscall()`: the four descriptor calls (`close`, `dup2`, `dup3`,
/// `close_range`), `exit_group` and the three signal calls (`kill`,
/// `tkill`, `tgkill`; the numbers below and the match there)
/// go to their hooks ([`hooks::hooked_syscall`]), every
/// other number to the kernel exactly as glibc's own `syscall()` makes it:
/// the arguments moved one register down (the sixth from the stack), the
/// instruction, -1 and `errno` for a result in [-4095, -1]. Naked, so that
/// nothing of ours is on the stack around the instruction: a `clone` or
/// `vfork` made this way returns into the child as it would untraced.
///
/// The internal calls of the tracer that must not come back here use
/// `sys::direct_syscall` instead of `libc::syscall` (which binds to this
/// symbol once the library is loaded).
#[cfg(target_arch = "x86_64")]
#[cfg_attr(not(test), no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn syscall(n: c_long) -> c_long {
    // SAFETY: the caller's registers and stack are those of a C call of
    // `syscall(long, ...)`; the plain path leaves them as glibc's does, and
    // the two jumps are tail calls to C-ABI functions taking the same
    // registers (the stack as at entry).
    core::arch::naked_asm!(
        // Unwind rules (the entry's frame is its caller's, CFA = rsp + 8
        // throughout): a debugger, a profiler or a signal handler's
        // unwinder walks from a program blocked here into its caller.
        ".cfi_startproc",
        "cmp rdi, {close}",
        "je 2f",
        "cmp rdi, {dup2}",
        "je 2f",
        "cmp rdi, {dup3}",
        "je 2f",
        "cmp rdi, {close_range}",
        "je 2f",
        "cmp rdi, {exit_group}",
        "je 2f",
        "cmp rdi, {kill}",
        "je 2f",
        "cmp rdi, {tkill}",
        "je 2f",
        "cmp rdi, {tgkill}",
        "je 2f",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 3f",
        "ret",
        "3:",
        "mov rdi, rax",
        "jmp {failed}",
        "2:",
        "jmp {hooked}",
        ".cfi_endproc",
        close = const libc::SYS_close,
        dup2 = const libc::SYS_dup2,
        dup3 = const libc::SYS_dup3,
        close_range = const libc::SYS_close_range,
        exit_group = const libc::SYS_exit_group,
        kill = const libc::SYS_kill,
        tkill = const libc::SYS_tkill,
        tgkill = const libc::SYS_tgkill,
        failed = sym hooks::syscall_failed,
        hooked = sym hooks::hooked_syscall,
    )
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    hooks::closefrom(low)
}

/// `posix_spawn` (`path`) and `posix_spawnp` (`file`, searched in `PATH`):
/// glibc's, with the environment [`hooks::exec_env`] gives an exec. Their
/// child runs no code of ours before its exec (glibc's internal one, which
/// no hook sees), so the environment is all that decides whether the new
/// program is traced: with one the program built without `LD_PRELOAD` it
/// was not, whatever `TRACER_FOLLOW_EXEC` said, and with 0 it still was.
macro_rules! spawn_entry {
    ($name:ident) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            pid: *mut libc::pid_t,
            file: *const c_char,
            actions: *const c_void,
            attr: *const c_void,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int {
            syscalls::real!(REAL, concat!(stringify!($name), "\0"));
            let Some(f) = REAL.get::<hooks::SpawnFn>() else {
                return libc::ENOSYS;
            };
            let search = stringify!($name) == "posix_spawnp";
            let env = hooks::exec_env(file, search, envp);
            f(pid, file, actions, attr, argv, env.as_ptr())
        }
    };
}
spawn_entry!(posix_spawn);
spawn_entry!(posix_spawnp);

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    hooks::execve(path, argv, envp)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    hooks::execv(path, argv)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    hooks::execvp(file, argv)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    hooks::execvpe(file, argv, envp)
}

/// `execl`, `execlp`, `execle`: variadic, so the entry is a few instructions
/// that hand the register and stack arguments to [`hooks::execl_helper`].
macro_rules! execl_entry {
    ($name:ident, $kind:expr) => {
        #[cfg(target_arch = "x86_64")]
        #[cfg_attr(not(test), no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(path: *const c_char, arg: *const c_char) -> c_int {
            // System V x86-64: path in rdi, the argument list in rsi, rdx, rcx,
            // r8, r9, then on the stack above the return address.
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                ".cfi_offset rbp, -16",
                "mov rbp, rsp",
                ".cfi_def_cfa_register rbp",
                "sub rsp, 48",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rbp + 16]",
                "mov ecx, {kind}",
                "call {helper}",
                "leave",
                ".cfi_def_cfa rsp, 8",
                ".cfi_restore rbp",
                "ret",
                ".cfi_endproc",
                kind = const $kind,
                helper = sym hooks::execl_helper,
            )
        }
    };
}

execl_entry!(execl, hooks::EXECL);
execl_entry!(execlp, hooks::EXECLP);
execl_entry!(execle, hooks::EXECLE);

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    hooks::unshare(flags)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    hooks::setns(fd, nstype)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_getattr_np(
    thread: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    hooks::pthread_getattr_np(thread, attr)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    hooks::dlclose(handle)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    signals::sigaction(sig, act, old)
}

/// `raise`: glibc's, after [`signals::before_raise`].
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn raise(sig: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    syscalls::real!(REAL, "raise\0");
    signals::before_raise(sig);
    match REAL.get::<F>() {
        Some(f) => f(sig),
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `killpg`: glibc's, after [`signals::before_kill`] (a process group of
/// 0 is the caller's, as for `kill`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn killpg(pgrp: libc::pid_t, sig: c_int) -> c_int {
    type F = unsafe extern "C" fn(libc::pid_t, c_int) -> c_int;
    syscalls::real!(REAL, "killpg\0");
    if pgrp >= 0 {
        signals::before_kill(pgrp.wrapping_neg(), sig);
    }
    match REAL.get::<F>() {
        Some(f) => f(pgrp, sig),
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `pthread_kill`: glibc's, after [`signals::before_pthread_kill`].
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_kill(thread: libc::pthread_t, sig: c_int) -> c_int {
    type F = unsafe extern "C" fn(libc::pthread_t, c_int) -> c_int;
    syscalls::real!(REAL, "pthread_kill\0");
    signals::before_pthread_kill(thread, sig);
    match REAL.get::<F>() {
        Some(f) => f(thread, sig),
        None => libc::ENOSYS,
    }
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    syscalls::real!(REAL, "signal\0");
    signals::replace_with(&REAL, sig, handler)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    syscalls::real!(REAL, "bsd_signal\0");
    signals::replace_with(&REAL, sig, handler)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    syscalls::real!(REAL, "sysv_signal\0");
    signals::replace_with(&REAL, sig, handler)
}

/// `longjmp` and its relatives: glibc's, after [`side::before_jump`] (a
/// signal handler jumping out of a hook it interrupted leaves the tracer's
/// guard with it).
macro_rules! longjmp_entry {
    ($name:ident, $real:expr) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(env: *mut c_void, val: c_int) -> ! {
            type F = unsafe extern "C" fn(*mut c_void, c_int) -> !;
            syscalls::real!(REAL, $real);
            side::before_jump(env.cast());
            match REAL.get::<F>() {
                Some(f) => f(env, val),
                None => libc::abort(),
            }
        }
    };
}

longjmp_entry!(longjmp, "longjmp\0");
longjmp_entry!(_longjmp, "_longjmp\0");
longjmp_entry!(siglongjmp, "siglongjmp\0");
longjmp_entry!(__longjmp_chk, "__longjmp_chk\0");

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn abort() -> ! {
    hooks::abort()
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __assert_fail(
    expr: *const c_char,
    file: *const c_char,
    line: c_uint,
    func: *const c_char,
) -> ! {
    hooks::assert_fail(expr, file, line, func)
}

/// glibc's `daemon` ends its parent with an `_exit` no hook sees. A naked
/// entry: the caller's stack pointer (above the return address) and its
/// callee-saved registers, pushed before any code of ours runs, go to
/// [`hooks::daemon`], so that the parent's exit scan starts at the
/// program's frame, not in ours, with the program's registers.
#[cfg(target_arch = "x86_64")]
#[cfg_attr(not(test), no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn daemon(nochdir: c_int, noclose: c_int) -> c_int {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea rdx, [rsp + 8]",
        push_callee_saved!(),
        "mov rcx, rsp",
        "push 0",
        ".cfi_adjust_cfa_offset 8",
        "call {inner}",
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        "pop rbx",
        ".cfi_adjust_cfa_offset -8",
        "pop rbp",
        ".cfi_adjust_cfa_offset -8",
        "pop r12",
        ".cfi_adjust_cfa_offset -8",
        "pop r13",
        ".cfi_adjust_cfa_offset -8",
        "pop r14",
        ".cfi_adjust_cfa_offset -8",
        "pop r15",
        ".cfi_adjust_cfa_offset -8",
        "ret",
        ".cfi_endproc",
        inner = sym hooks::daemon,
    )
}

#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    hooks::exit_now(status)
}

#[allow(non_snake_case)]
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    hooks::exit_now(status)
}

/// `quick_exit`: its status waits for our `at_quick_exit` handler, which
/// records `exit_group` after the program's handlers, as `exit`'s does
/// (glibc's `quick_exit` ends with its internal `_exit`, which no hook
/// sees: the capture had no `exit_group` for it).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn quick_exit(status: c_int) -> ! {
    type F = unsafe extern "C" fn(c_int) -> !;
    syscalls::on_exit_called(status);
    match scan::GLIBC_QUICK_EXIT.get::<F>() {
        Some(f) => f(status),
        None => hooks::exit_now(status),
    }
}
