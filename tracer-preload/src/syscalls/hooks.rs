//! The interposed C library wrappers, one per exported name, and what each
//! records: the x86-64 number of the system call glibc 2.36 makes for it (as
//! `strace` names it) and the argument elements in that call's order.
//! `docs/formats/syscall-tlv.md` has the same table for readers.
//!
//! Variadic wrappers (`open`, `openat`, `fcntl`, `ioctl`, `mremap`) are
//! declared with their optional argument as a fixed one: on x86-64 a variadic
//! integer or pointer argument travels in the same register as a fixed one,
//! and the optional value is only used when the flags say it was passed.
//!
//! `close`, `dup2`, `dup3`, the exec family and `_exit` keep their bodies in
//! `crate::hooks` (they protect the trace files and finish them) and record
//! through this module's functions. `vfork` is an assembly entry point: a
//! `vfork` child returns into its caller's stack frame, which no Rust frame
//! may hold.

use libc::{
    c_char, c_int, c_uint, c_ulong, c_void, mode_t, off_t, pid_t, size_t, socklen_t, ssize_t,
};

use super::{done, start, Args, Ret};
use crate::sys;

/// x86-64 numbers of the calls recorded here.
pub mod nr {
    pub const READ: u16 = 0;
    pub const WRITE: u16 = 1;
    pub const CLOSE: u16 = 3;
    pub const POLL: u16 = 7;
    pub const LSEEK: u16 = 8;
    pub const MMAP: u16 = 9;
    pub const MPROTECT: u16 = 10;
    pub const MUNMAP: u16 = 11;
    pub const BRK: u16 = 12;
    pub const IOCTL: u16 = 16;
    pub const PREAD64: u16 = 17;
    pub const PWRITE64: u16 = 18;
    pub const READV: u16 = 19;
    pub const WRITEV: u16 = 20;
    pub const ACCESS: u16 = 21;
    pub const MREMAP: u16 = 25;
    pub const MADVISE: u16 = 28;
    pub const DUP: u16 = 32;
    pub const DUP2: u16 = 33;
    pub const SENDFILE: u16 = 40;
    pub const SOCKET: u16 = 41;
    pub const CONNECT: u16 = 42;
    pub const ACCEPT: u16 = 43;
    pub const SENDTO: u16 = 44;
    pub const RECVFROM: u16 = 45;
    pub const SENDMSG: u16 = 46;
    pub const RECVMSG: u16 = 47;
    pub const SHUTDOWN: u16 = 48;
    pub const BIND: u16 = 49;
    pub const LISTEN: u16 = 50;
    pub const SOCKETPAIR: u16 = 53;
    pub const SETSOCKOPT: u16 = 54;
    pub const GETSOCKOPT: u16 = 55;
    pub const CLONE: u16 = 56;
    pub const VFORK: u16 = 58;
    pub const WAIT4: u16 = 61;
    pub const KILL: u16 = 62;
    pub const FCNTL: u16 = 72;
    pub const FSYNC: u16 = 74;
    pub const FDATASYNC: u16 = 75;
    pub const FTRUNCATE: u16 = 77;
    pub const RENAME: u16 = 82;
    pub const MKDIR: u16 = 83;
    pub const RMDIR: u16 = 84;
    pub const CREAT: u16 = 85;
    pub const UNLINK: u16 = 87;
    pub const GETDENTS64: u16 = 217;
    pub const EPOLL_WAIT: u16 = 232;
    pub const EPOLL_CTL: u16 = 233;
    pub const OPENAT: u16 = 257;
    pub const NEWFSTATAT: u16 = 262;
    pub const UNLINKAT: u16 = 263;
    pub const RENAMEAT: u16 = 264;
    pub const PSELECT6: u16 = 270;
    pub const PPOLL: u16 = 271;
    pub const ACCEPT4: u16 = 288;
    pub const EPOLL_CREATE1: u16 = 291;
    pub const DUP3: u16 = 292;
    pub const COPY_FILE_RANGE: u16 = 326;
    pub const STATX: u16 = 332;
    pub const CLONE3: u16 = 435;
    pub const FACCESSAT2: u16 = 439;
}

const AT_FDCWD: c_int = libc::AT_FDCWD;

/// Defines an exported wrapper: glibc's function of the same name is called,
/// and, when the call is captured, recorded as system call `$nr` with the
/// arguments `$body` appends (`$r` is the result).
macro_rules! wrap {
    ($name:ident ( $($p:ident : $t:ty),* ) -> $ret:ty, $nr:expr, |$a:ident, $r:ident| $body:block) => {
        wrap!($name($($p: $t),*) -> $ret, $nr, before {}, |$a, $r| $body);
    };
    // `$before` runs first, whether the call is captured or not.
    ($name:ident ( $($p:ident : $t:ty),* ) -> $ret:ty, $nr:expr, before $before:block, |$a:ident, $r:ident| $body:block) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($p: $t),*) -> $ret {
            crate::syscalls::real!(REAL, concat!(stringify!($name), "\0"));
            type F = unsafe extern "C" fn($($t),*) -> $ret;
            let Some(f) = REAL.get::<F>() else {
                return <$ret as Ret>::unavailable();
            };
            $before
            let number: u16 = $nr;
            let Some(t0) = start(number) else {
                return f($($p),*);
            };
            let $r: $ret = f($($p),*);
            done(number, t0, Ret::as_i64($r), #[inline(always)] |$a: &mut Args| $body);
            $r
        }
    };
}

/// Bytes a call that returned `r` put into its buffer.
fn got(r: ssize_t) -> u64 {
    r.max(0) as u64
}

/// Whether `open` flags carry a mode argument.
fn has_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

unsafe fn openat_args(a: &mut Args, dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) {
    a.fd(dirfd);
    a.path(path);
    a.flags(flags as u32 as u64);
    if has_mode(flags) {
        a.int(i64::from(mode));
    }
}

// ------------------------------------------------------------------ %file

wrap!(open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, AT_FDCWD, path, flags, mode)
});
wrap!(open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, AT_FDCWD, path, flags, mode)
});
wrap!(openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, dirfd, path, flags, mode)
});
wrap!(openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, dirfd, path, flags, mode)
});
wrap!(creat(path: *const c_char, mode: mode_t) -> c_int, nr::CREAT, |a, _r| {
    a.path(path);
    a.int(i64::from(mode));
});
wrap!(creat64(path: *const c_char, mode: mode_t) -> c_int, nr::CREAT, |a, _r| {
    a.path(path);
    a.int(i64::from(mode));
});
wrap!(read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t, nr::READ, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
});
wrap!(write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t, nr::WRITE, |a, _r| {
    a.fd(fd);
    a.data(buf, n as u64);
    a.int(n as i64);
});
wrap!(pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t, nr::PREAD64, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
    a.int(off);
});
wrap!(pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t, nr::PREAD64, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
    a.int(off);
});
wrap!(pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t, nr::PWRITE64, |a, _r| {
    a.fd(fd);
    a.data(buf, n as u64);
    a.int(n as i64);
    a.int(off);
});
wrap!(pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t, nr::PWRITE64, |a, _r| {
    a.fd(fd);
    a.data(buf, n as u64);
    a.int(n as i64);
    a.int(off);
});
wrap!(readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t, nr::READV, |a, _r| {
    a.fd(fd);
    a.ptr(iov);
    a.int(i64::from(cnt));
});
wrap!(writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t, nr::WRITEV, |a, _r| {
    a.fd(fd);
    a.ptr(iov);
    a.int(i64::from(cnt));
});
wrap!(lseek(fd: c_int, off: off_t, whence: c_int) -> off_t, nr::LSEEK, |a, _r| {
    a.fd(fd);
    a.int(off);
    a.int(i64::from(whence));
});
wrap!(lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t, nr::LSEEK, |a, _r| {
    a.fd(fd);
    a.int(off);
    a.int(i64::from(whence));
});
wrap!(fsync(fd: c_int) -> c_int, nr::FSYNC, |a, _r| { a.fd(fd) });
wrap!(fdatasync(fd: c_int) -> c_int, nr::FDATASYNC, |a, _r| { a.fd(fd) });
wrap!(ftruncate(fd: c_int, len: off_t) -> c_int, nr::FTRUNCATE, |a, _r| {
    a.fd(fd);
    a.int(len);
});
wrap!(ftruncate64(fd: c_int, len: off_t) -> c_int, nr::FTRUNCATE, |a, _r| {
    a.fd(fd);
    a.int(len);
});

const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const AT_EMPTY_PATH: u64 = 0x1000;

unsafe fn stat_args(a: &mut Args, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: u64) {
    a.fd(dirfd);
    a.path(path);
    a.ptr(buf);
    a.flags(flags);
}

wrap!(stat(path: *const c_char, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, AT_FDCWD, path, buf, 0)
});
wrap!(stat64(path: *const c_char, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, AT_FDCWD, path, buf, 0)
});
wrap!(lstat(path: *const c_char, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW)
});
wrap!(lstat64(path: *const c_char, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW)
});
wrap!(fstat(fd: c_int, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, fd, c"".as_ptr(), buf, AT_EMPTY_PATH)
});
wrap!(fstat64(fd: c_int, buf: *mut c_void) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, fd, c"".as_ptr(), buf, AT_EMPTY_PATH)
});
wrap!(fstatat(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, dirfd, path, buf, flags as u32 as u64)
});
wrap!(fstatat64(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int, nr::NEWFSTATAT, |a, _r| {
    stat_args(a, dirfd, path, buf, flags as u32 as u64)
});
wrap!(statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut c_void) -> c_int, nr::STATX, |a, _r| {
    a.fd(dirfd);
    a.path(path);
    a.flags(flags as u32 as u64);
    a.flags(u64::from(mask));
    a.ptr(buf);
});
wrap!(access(path: *const c_char, mode: c_int) -> c_int, nr::ACCESS, |a, _r| {
    a.path(path);
    a.int(i64::from(mode));
});
wrap!(faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int, nr::FACCESSAT2, |a, _r| {
    a.fd(dirfd);
    a.path(path);
    a.int(i64::from(mode));
    a.flags(flags as u32 as u64);
});
wrap!(unlink(path: *const c_char) -> c_int, nr::UNLINK, |a, _r| { a.path(path) });
wrap!(unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, nr::UNLINKAT, |a, _r| {
    a.fd(dirfd);
    a.path(path);
    a.flags(flags as u32 as u64);
});
wrap!(rename(old: *const c_char, new: *const c_char) -> c_int, nr::RENAME, |a, _r| {
    a.path(old);
    a.path(new);
});
wrap!(renameat(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char) -> c_int, nr::RENAMEAT, |a, _r| {
    a.fd(olddir);
    a.path(old);
    a.fd(newdir);
    a.path(new);
});
wrap!(mkdir(path: *const c_char, mode: mode_t) -> c_int, nr::MKDIR, |a, _r| {
    a.path(path);
    a.int(i64::from(mode));
});
wrap!(rmdir(path: *const c_char) -> c_int, nr::RMDIR, |a, _r| { a.path(path) });
wrap!(dup(fd: c_int) -> c_int, nr::DUP, |a, _r| { a.fd(fd) });

// <fcntl.h> values the libc crate does not name.
const F_GETSIG: c_int = 11;
const F_SETOWN_EX: c_int = 15;
const F_GETOWN_EX: c_int = 16;

/// `fcntl` commands without an argument, and those whose argument is a
/// pointer (record locks); the others take an integer.
fn fcntl_arg(a: &mut Args, cmd: c_int, arg: c_ulong) {
    match cmd {
        libc::F_GETFD
        | libc::F_GETFL
        | libc::F_GETOWN
        | F_GETSIG
        | libc::F_GETLEASE
        | libc::F_GETPIPE_SZ
        | libc::F_GET_SEALS => {}
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW
        | F_GETOWN_EX
        | F_SETOWN_EX => a.ptr(arg as *const c_void),
        _ => a.int(arg as i64),
    }
}

wrap!(fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int, nr::FCNTL, |a, _r| {
    a.fd(fd);
    a.int(i64::from(cmd));
    fcntl_arg(a, cmd, arg);
});
wrap!(fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int, nr::FCNTL, |a, _r| {
    a.fd(fd);
    a.int(i64::from(cmd));
    fcntl_arg(a, cmd, arg);
});
wrap!(ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int, nr::IOCTL, |a, _r| {
    a.fd(fd);
    a.int(request as u32 as i64);
    a.ptr(arg);
});
wrap!(getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t, nr::GETDENTS64, |a, _r| {
    a.fd(fd);
    a.ptr(buf);
    a.int(n as i64);
});
wrap!(sendfile(out: c_int, input: c_int, off: *mut off_t, n: size_t) -> ssize_t, nr::SENDFILE, |a, _r| {
    a.fd(out);
    a.fd(input);
    a.ptr(off);
    a.int(n as i64);
});
wrap!(sendfile64(out: c_int, input: c_int, off: *mut off_t, n: size_t) -> ssize_t, nr::SENDFILE, |a, _r| {
    a.fd(out);
    a.fd(input);
    a.ptr(off);
    a.int(n as i64);
});
wrap!(copy_file_range(fd_in: c_int, off_in: *mut off_t, fd_out: c_int, off_out: *mut off_t, n: size_t, flags: c_uint) -> ssize_t, nr::COPY_FILE_RANGE, |a, _r| {
    a.fd(fd_in);
    a.ptr(off_in);
    a.fd(fd_out);
    a.ptr(off_out);
    a.int(n as i64);
    a.flags(u64::from(flags));
});

// ------------------------------------------------------------------ %net

wrap!(socket(domain: c_int, ty: c_int, proto: c_int) -> c_int, nr::SOCKET, |a, _r| {
    a.int(i64::from(domain));
    a.flags(ty as u32 as u64);
    a.int(i64::from(proto));
});
wrap!(socketpair(domain: c_int, ty: c_int, proto: c_int, sv: *mut c_int) -> c_int, nr::SOCKETPAIR, |a, _r| {
    a.int(i64::from(domain));
    a.flags(ty as u32 as u64);
    a.int(i64::from(proto));
    a.ptr(sv);
});
wrap!(bind(fd: c_int, addr: *const c_void, len: socklen_t) -> c_int, nr::BIND, |a, _r| {
    a.fd(fd);
    a.sockaddr(addr, len);
    a.int(i64::from(len));
});
wrap!(listen(fd: c_int, backlog: c_int) -> c_int, nr::LISTEN, |a, _r| {
    a.fd(fd);
    a.int(i64::from(backlog));
});
wrap!(accept(fd: c_int, addr: *mut c_void, len: *mut socklen_t) -> c_int, nr::ACCEPT, |a, _r| {
    a.fd(fd);
    a.ptr(addr);
    a.ptr(len);
});
wrap!(accept4(fd: c_int, addr: *mut c_void, len: *mut socklen_t, flags: c_int) -> c_int, nr::ACCEPT4, |a, _r| {
    a.fd(fd);
    a.ptr(addr);
    a.ptr(len);
    a.flags(flags as u32 as u64);
});
wrap!(connect(fd: c_int, addr: *const c_void, len: socklen_t) -> c_int, nr::CONNECT, |a, _r| {
    a.fd(fd);
    a.sockaddr(addr, len);
    a.int(i64::from(len));
});
wrap!(send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t, nr::SENDTO, |a, _r| {
    a.fd(fd);
    a.data(buf, n as u64);
    a.int(n as i64);
    a.flags(flags as u32 as u64);
    a.ptr(core::ptr::null::<c_void>());
    a.int(0);
});
wrap!(sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const c_void, alen: socklen_t) -> ssize_t, nr::SENDTO, |a, _r| {
    a.fd(fd);
    a.data(buf, n as u64);
    a.int(n as i64);
    a.flags(flags as u32 as u64);
    a.sockaddr(addr, alen);
    a.int(i64::from(alen));
});
wrap!(sendmsg(fd: c_int, msg: *const c_void, flags: c_int) -> ssize_t, nr::SENDMSG, |a, _r| {
    a.fd(fd);
    a.ptr(msg);
    a.flags(flags as u32 as u64);
});
/// `recvfrom(fd, buf, n, flags, addr, alen)` that returned `r`.
#[allow(clippy::too_many_arguments)]
unsafe fn recvfrom_args(
    a: &mut Args,
    fd: c_int,
    buf: *mut c_void,
    r: ssize_t,
    n: size_t,
    flags: c_int,
    addr: *mut c_void,
    alen: *mut socklen_t,
) {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
    a.flags(flags as u32 as u64);
    a.ptr(addr);
    a.ptr(alen);
}

wrap!(recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t, nr::RECVFROM, |a, r| {
    recvfrom_args(a, fd, buf, r, n, flags, core::ptr::null_mut(), core::ptr::null_mut())
});
wrap!(recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut c_void, alen: *mut socklen_t) -> ssize_t, nr::RECVFROM, |a, r| {
    recvfrom_args(a, fd, buf, r, n, flags, addr, alen)
});
wrap!(recvmsg(fd: c_int, msg: *mut c_void, flags: c_int) -> ssize_t, nr::RECVMSG, |a, _r| {
    a.fd(fd);
    a.ptr(msg);
    a.flags(flags as u32 as u64);
});
wrap!(shutdown(fd: c_int, how: c_int) -> c_int, nr::SHUTDOWN, |a, _r| {
    a.fd(fd);
    a.int(i64::from(how));
});
wrap!(getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int, nr::GETSOCKOPT, |a, _r| {
    a.fd(fd);
    a.int(i64::from(level));
    a.int(i64::from(name));
    a.ptr(val);
    a.ptr(len);
});
wrap!(setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int, nr::SETSOCKOPT, |a, _r| {
    a.fd(fd);
    a.int(i64::from(level));
    a.int(i64::from(name));
    a.data(val, u64::from(len));
    a.int(i64::from(len));
});
wrap!(poll(fds: *mut c_void, n: libc::nfds_t, timeout: c_int) -> c_int, nr::POLL, |a, _r| {
    a.ptr(fds);
    a.int(n as i64);
    a.int(i64::from(timeout));
});
wrap!(ppoll(fds: *mut c_void, n: libc::nfds_t, ts: *const c_void, mask: *const c_void) -> c_int, nr::PPOLL, |a, _r| {
    a.ptr(fds);
    a.int(n as i64);
    a.ptr(ts);
    a.ptr(mask);
    a.int(8); // the signal set size glibc passes (_NSIG / 8)
});
wrap!(select(n: c_int, r: *mut c_void, w: *mut c_void, e: *mut c_void, tv: *mut c_void) -> c_int, nr::PSELECT6, |a, _r| {
    a.int(i64::from(n));
    a.ptr(r);
    a.ptr(w);
    a.ptr(e);
    a.ptr(tv); // glibc passes a timespec converted from this timeval
    a.ptr(core::ptr::null::<c_void>());
});
wrap!(epoll_create1(flags: c_int) -> c_int, nr::EPOLL_CREATE1, |a, _r| {
    a.flags(flags as u32 as u64)
});
wrap!(epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut c_void) -> c_int, nr::EPOLL_CTL, |a, _r| {
    a.fd(ep);
    a.int(i64::from(op));
    a.fd(fd);
    a.ptr(ev);
});
wrap!(epoll_wait(ep: c_int, evs: *mut c_void, max: c_int, timeout: c_int) -> c_int, nr::EPOLL_WAIT, |a, _r| {
    a.fd(ep);
    a.ptr(evs);
    a.int(i64::from(max));
    a.int(i64::from(timeout));
});

// ------------------------------------------------------------------ fortified
//
// Programs built with `_FORTIFY_SOURCE` (Debian builds its packages so) call
// these checking entry points where the compiler knows a buffer's size; glibc
// implements them on its internal, non-interposable calls, so each is wrapped
// here and recorded as the system call it makes, with the arguments of the
// plain wrapper (the extra buffer size is glibc's check, not the kernel's).

wrap!(__read_chk(fd: c_int, buf: *mut c_void, n: size_t, _buflen: size_t) -> ssize_t, nr::READ, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
});
wrap!(__pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _buflen: size_t) -> ssize_t, nr::PREAD64, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
    a.int(off);
});
wrap!(__pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _buflen: size_t) -> ssize_t, nr::PREAD64, |a, r| {
    a.fd(fd);
    a.data(buf, got(r));
    a.int(n as i64);
    a.int(off);
});
wrap!(__open_2(path: *const c_char, flags: c_int) -> c_int, nr::OPENAT, |a, _r| {
    // glibc aborts an `__open_2` whose flags need a mode: there is none.
    openat_args(a, AT_FDCWD, path, flags, 0)
});
wrap!(__open64_2(path: *const c_char, flags: c_int) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, AT_FDCWD, path, flags, 0)
});
wrap!(__openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, dirfd, path, flags, 0)
});
wrap!(__openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, nr::OPENAT, |a, _r| {
    openat_args(a, dirfd, path, flags, 0)
});
wrap!(__recv_chk(fd: c_int, buf: *mut c_void, n: size_t, _buflen: size_t, flags: c_int) -> ssize_t, nr::RECVFROM, |a, r| {
    recvfrom_args(a, fd, buf, r, n, flags, core::ptr::null_mut(), core::ptr::null_mut())
});
wrap!(__recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, _buflen: size_t, flags: c_int, addr: *mut c_void, alen: *mut socklen_t) -> ssize_t, nr::RECVFROM, |a, r| {
    recvfrom_args(a, fd, buf, r, n, flags, addr, alen)
});
wrap!(__poll_chk(fds: *mut c_void, n: libc::nfds_t, timeout: c_int, _fdslen: size_t) -> c_int, nr::POLL, |a, _r| {
    a.ptr(fds);
    a.int(n as i64);
    a.int(i64::from(timeout));
});
wrap!(__ppoll_chk(fds: *mut c_void, n: libc::nfds_t, ts: *const c_void, mask: *const c_void, _fdslen: size_t) -> c_int, nr::PPOLL, |a, _r| {
    a.ptr(fds);
    a.int(n as i64);
    a.ptr(ts);
    a.ptr(mask);
    a.int(8); // the signal set size glibc passes (_NSIG / 8)
});

// ------------------------------------------------------------------ %mem

wrap!(mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void, nr::MMAP, |a, _r| {
    a.ptr(addr);
    a.int(len as i64);
    a.flags(prot as u32 as u64);
    a.flags(flags as u32 as u64);
    a.fd(fd);
    a.int(off);
});
wrap!(mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void, nr::MMAP, |a, _r| {
    a.ptr(addr);
    a.int(len as i64);
    a.flags(prot as u32 as u64);
    a.flags(flags as u32 as u64);
    a.fd(fd);
    a.int(off);
});
wrap!(munmap(addr: *mut c_void, len: size_t) -> c_int, nr::MUNMAP, |a, _r| {
    a.ptr(addr);
    a.int(len as i64);
});
wrap!(mremap(old: *mut c_void, old_len: size_t, new_len: size_t, flags: c_int, new: *mut c_void) -> *mut c_void, nr::MREMAP, |a, _r| {
    a.ptr(old);
    a.int(old_len as i64);
    a.int(new_len as i64);
    a.flags(flags as u32 as u64);
    if flags & libc::MREMAP_FIXED != 0 {
        a.ptr(new);
    }
});
wrap!(mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int, nr::MPROTECT, |a, _r| {
    a.ptr(addr);
    a.int(len as i64);
    a.flags(prot as u32 as u64);
});
wrap!(madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int, nr::MADVISE, |a, _r| {
    a.ptr(addr);
    a.int(len as i64);
    a.int(i64::from(advice));
});

/// `brk(addr)`: glibc returns 0; the record carries what the kernel returned
/// (the new break, as strace shows it) on success.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn brk(addr: *mut c_void) -> c_int {
    crate::syscalls::real!(REAL, "brk\0");
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    let Some(f) = REAL.get::<F>() else {
        return c_int::unavailable();
    };
    let Some(t0) = start(nr::BRK) else {
        return f(addr);
    };
    let r = f(addr);
    let kernel = if r == 0 { addr as i64 } else { -1 };
    done(nr::BRK, t0, kernel, |a| a.ptr(addr));
    r
}

/// `sbrk(incr)`: one `brk(old + incr)` system call when `incr` is not 0
/// (recorded as such, with the kernel's result); `sbrk(0)` makes none once
/// glibc knows the break, and records nothing.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sbrk(incr: libc::intptr_t) -> *mut c_void {
    crate::syscalls::real!(REAL, "sbrk\0");
    type F = unsafe extern "C" fn(libc::intptr_t) -> *mut c_void;
    let Some(f) = REAL.get::<F>() else {
        return <*mut c_void>::unavailable();
    };
    let t0 = if incr == 0 { None } else { start(nr::BRK) };
    let Some(t0) = t0 else {
        return f(incr);
    };
    let r = f(incr);
    let (kernel, new) = if r as isize == -1 {
        (-1, 0)
    } else {
        let new = (r as i64).wrapping_add(incr as i64);
        (new, new)
    };
    done(nr::BRK, t0, kernel, |a| {
        if kernel == -1 {
            a.int(incr as i64)
        } else {
            a.ptr(new as *const c_void)
        }
    });
    r
}

// ------------------------------------------------------------------ %process

/// The clone flags of glibc 2.36's `fork`.
const FORK_FLAGS: u64 =
    (libc::CLONE_CHILD_CLEARTID | libc::CLONE_CHILD_SETTID | libc::SIGCHLD) as u64;
/// The clone flags of glibc 2.36's `pthread_create`.
const THREAD_FLAGS: u64 = (libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_SETTLS
    | libc::CLONE_PARENT_SETTID
    | libc::CLONE_CHILD_CLEARTID) as u64;

/// `fork`: `clone(flags, NULL)` recorded in the parent only (the child's
/// trace starts with the child).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fork() -> pid_t {
    crate::syscalls::real!(REAL, "fork\0");
    type F = unsafe extern "C" fn() -> pid_t;
    let Some(f) = REAL.get::<F>() else {
        return pid_t::unavailable();
    };
    let Some(t0) = start(nr::CLONE) else {
        return f();
    };
    let r = f();
    if r != 0 {
        done(nr::CLONE, t0, i64::from(r), |a| {
            a.flags(FORK_FLAGS);
            a.ptr(core::ptr::null::<c_void>());
        });
    }
    r
}

/// Called by the `vfork` entry point before the system call: marks the thread
/// (whose memory the child borrows) and returns the entry time, 0 when the
/// call is not captured.
pub extern "C" fn vfork_enter() -> u64 {
    crate::tls::set_vforked(true);
    // Not `start`: the flag just set would refuse.
    if super::ON.load(core::sync::atomic::Ordering::Relaxed)
        && super::selected(nr::VFORK)
        && !crate::tls::inside()
    {
        sys::now_ns()
    } else {
        0
    }
}

/// Called by the `vfork` entry point in the parent once the child exec'd or
/// exited (`ret` is the raw system call result); returns what `vfork` returns.
pub extern "C" fn vfork_leave(ret: i64, t0: u64) -> pid_t {
    crate::tls::set_vforked(false);
    let r = if (-4095..0).contains(&ret) {
        sys::set_errno(-ret as c_int);
        -1
    } else {
        ret as pid_t
    };
    if t0 != 0 {
        done(nr::VFORK, t0, i64::from(r), |_| {});
    }
    r
}

wrap!(waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t, nr::WAIT4, |a, _r| {
    a.int(i64::from(pid));
    a.ptr(status);
    a.flags(options as u32 as u64);
    a.ptr(core::ptr::null::<c_void>());
});
wrap!(wait(status: *mut c_int) -> pid_t, nr::WAIT4, |a, _r| {
    a.int(-1);
    a.ptr(status);
    a.flags(0);
    a.ptr(core::ptr::null::<c_void>());
});
wrap!(wait4(pid: pid_t, status: *mut c_int, options: c_int, rusage: *mut c_void) -> pid_t, nr::WAIT4, |a, _r| {
    a.int(i64::from(pid));
    a.ptr(status);
    a.flags(options as u32 as u64);
    a.ptr(rusage);
});
// The files are finished or flushed first when the signal will end this
// process (`signals::before_kill`).
wrap!(kill(pid: pid_t, sig: c_int) -> c_int, nr::KILL, before {
    crate::signals::before_kill(pid, sig);
}, |a, _r| {
    a.int(i64::from(pid));
    a.int(i64::from(sig));
});

type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;

extern "C" {
    fn pthread_attr_getdetachstate(attr: *const libc::pthread_attr_t, state: *mut c_int) -> c_int;
}

/// `pthread_create`: one `clone3` system call; recorded with the clone flags
/// glibc passes and the size of its argument structure, the result being the
/// new thread's id (glibc's own result, 0 or an error number, is returned).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start_routine: StartFn,
    arg: *mut c_void,
) -> c_int {
    crate::syscalls::real!(REAL, "pthread_create\0");
    type F = unsafe extern "C" fn(
        *mut libc::pthread_t,
        *const libc::pthread_attr_t,
        StartFn,
        *mut c_void,
    ) -> c_int;
    let Some(f) = REAL.get::<F>() else {
        return libc::ENOSYS;
    };
    let Some(t0) = start(nr::CLONE3) else {
        return f(thread, attr, start_routine, arg);
    };
    let r = f(thread, attr, start_routine, arg);
    let result = if r != 0 {
        sys::set_errno(r);
        -1
    } else {
        let mut detached = libc::PTHREAD_CREATE_JOINABLE;
        if !attr.is_null() {
            pthread_attr_getdetachstate(attr, &mut detached);
        }
        // A detached thread may be gone already; its descriptor is not read.
        if detached == libc::PTHREAD_CREATE_JOINABLE && !thread.is_null() {
            super::tid_of(*thread)
        } else {
            0
        }
    };
    done(nr::CLONE3, t0, result, |a| {
        a.flags(THREAD_FLAGS);
        a.int(88); // sizeof(struct clone_args) as glibc 2.36 passes it
    });
    r
}

/// `exit(status)`: remembered for our `atexit` handler, which records
/// `exit_group` after the program's own handlers ran. A second thread's
/// `exit` waits while the first one's runs (`lifecycle::exit_gate`).
///
/// A naked entry: the caller's callee-saved registers (`rbx`, `rbp`,
/// `r12`-`r15`) are stored on the stack before any code of ours or glibc's
/// can change them, and handed to [`exit_with`] with the caller's stack
/// pointer. A pointer the program keeps only in such a register is a
/// root of the exit scan; by the time our `atexit` handler runs, glibc's
/// `exit` has saved those registers in its own frames, which the scan
/// leaves out (their other slots hold stale words), and reused them
/// (`as --version`: a 33-byte block valgrind finds reachable was lost).
#[cfg(target_arch = "x86_64")]
#[cfg_attr(not(test), no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea rdx, [rsp + 8]",
        push_callee_saved!(),
        "mov rsi, rsp",
        "push 0",
        ".cfi_adjust_cfa_offset 8",
        "call {with}",
        "ud2",
        ".cfi_endproc",
        with = sym exit_with,
    )
}

/// [`exit`]'s body: `regs` points to the caller's `rbx`, `rbp`, `r12`,
/// `r13`, `r14`, `r15` at its call, `caller_sp` is its stack pointer.
unsafe extern "C" fn exit_with(status: c_int, regs: *const u64, caller_sp: u64) -> ! {
    type F = unsafe extern "C" fn(c_int) -> !;
    crate::lifecycle::exit_gate();
    // SAFETY: `regs` points to the six words the naked entry pushed, on
    // this thread's stack, below the frame we run in.
    let saved: [u64; 6] = unsafe { core::ptr::read(regs.cast::<[u64; 6]>()) };
    crate::scan::remember_exit_registers(saved, caller_sp);
    super::on_exit_called(status);
    match EXIT_REAL.get::<F>() {
        Some(f) => f(status),
        None => sys::raw_exit_group(status),
    }
}

// glibc's `exit`, looked up before the program runs (`real!`): a lookup
// made in `exit` ran glibc's `dlsym` error bookkeeping on the exiting
// thread, which dropped the program's pending `dlerror` state.
crate::syscalls::real!(pub(crate) EXIT_REAL, "exit\0");

/// `vfork`: the system call made here, without a stack frame of ours, as
/// glibc does: the child returns into its caller's frame and then runs on the
/// parent's stack, so the return address is kept in a register across the
/// call. Before it, [`vfork_enter`] marks the thread (the child sees the mark
/// in the memory it borrows and records nothing, neither system calls nor
/// allocations); in the parent, [`vfork_leave`] clears it and records
/// `vfork() = pid`. The entry time travels in `rsi`, which the kernel keeps.
#[cfg(target_arch = "x86_64")]
#[cfg_attr(not(test), no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn vfork() -> pid_t {
    core::arch::naked_asm!(
        "sub rsp, 8",
        "call {enter}",
        "add rsp, 8",
        "mov rsi, rax",
        "pop rdi",
        "mov eax, 58",
        "syscall",
        "test rax, rax",
        "jz 2f",
        "push rdi",
        "mov rdi, rax",
        "jmp {leave}",
        "2:",
        "push rdi",
        "ret",
        enter = sym vfork_enter,
        leave = sym vfork_leave,
    )
}
