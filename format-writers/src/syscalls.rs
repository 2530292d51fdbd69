//! x86-64 system call and `errno` tables, plus renderers for common flag arguments.
//!
//! The syscall capture formats record a call by its x86-64 number and an error by
//! its `errno` value; this module turns both into the names people know
//! (`openat`, `ENOENT "No such file or directory"`), resolves the strace-style
//! groups that `TRACER_SYSCALLS` accepts (`%file`, `%net`, `%mem`, `%process`), and
//! renders the flag words an strace-like line shows (`O_RDONLY|O_CLOEXEC`,
//! `AT_FDCWD`, `PROT_READ|PROT_WRITE`, `MAP_PRIVATE|MAP_ANONYMOUS`).
//!
//! The numbering is the kernel's x86-64 table (the one user space sees as
//! `asm/unistd_64.h`), complete up to [`MAX_NUMBER`]; the `errno` names come from the
//! generic Linux error headers and the messages are the GNU C library's texts, so
//! that our output reads like `strace` and `perror`. Tables are plain arrays
//! indexed by number: a lookup is one bounds check, and nothing here allocates
//! except the renderers that build a `String`.

use std::fmt::Write as _;

/// Highest system call number this table names.
pub const MAX_NUMBER: u16 = (NAMES.len() - 1) as u16;

/// `AT_FDCWD`: the "directory file descriptor" meaning the working directory.
pub const AT_FDCWD: i64 = -100;

/// The name of x86-64 system call `number`, if it has one.
pub fn name(number: u16) -> Option<&'static str> {
    NAMES
        .get(usize::from(number))
        .copied()
        .filter(|n| !n.is_empty())
}

/// The x86-64 number of the system call called `name` (kernel names, such as
/// `newfstatat`; see [`canonical`] for C library wrapper names).
pub fn number(name: &str) -> Option<u16> {
    if name.is_empty() {
        return None;
    }
    NAMES.iter().position(|n| *n == name).map(|i| i as u16)
}

/// The kernel system call behind a C library wrapper whose name differs
/// (`open64` → `open`, `send` → `sendto`, `waitpid` → `wait4`, …); other names are
/// returned unchanged.
pub fn canonical(name: &str) -> &str {
    match name {
        "open64" => "open",
        "creat64" => "creat",
        "openat64" => "openat",
        "pread" => "pread64",
        "pwrite" => "pwrite64",
        "lseek64" => "lseek",
        "ftruncate64" => "ftruncate",
        "stat64" => "stat",
        "fstat64" => "fstat",
        "lstat64" => "lstat",
        "fstatat" | "fstatat64" => "newfstatat",
        "mmap64" => "mmap",
        "sbrk" => "brk",
        "send" => "sendto",
        "recv" => "recvfrom",
        "waitpid" | "wait" => "wait4",
        "_exit" | "_Exit" => "exit_group",
        "pthread_create" => "clone",
        "getdents" => "getdents64",
        other => other,
    }
}

/// The kernel system calls of one strace-style group, as `TRACER_SYSCALLS`
/// understands it (`"%file"`, `"%net"`, `"%mem"`, `"%process"`).
pub fn group(name: &str) -> Option<&'static [&'static str]> {
    match name {
        "%file" => Some(FILE_GROUP),
        "%net" | "%network" => Some(NET_GROUP),
        "%mem" | "%memory" => Some(MEM_GROUP),
        "%process" => Some(PROCESS_GROUP),
        _ => None,
    }
}

const FILE_GROUP: &[&str] = &[
    "open",
    "openat",
    "creat",
    "close",
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "lseek",
    "fsync",
    "fdatasync",
    "ftruncate",
    "stat",
    "fstat",
    "lstat",
    "newfstatat",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "ioctl",
    "getdents64",
    "sendfile",
    "copy_file_range",
];
const NET_GROUP: &[&str] = &[
    "socket",
    "socketpair",
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "sendto",
    "sendmsg",
    "recvfrom",
    "recvmsg",
    "shutdown",
    "getsockopt",
    "setsockopt",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
];
const MEM_GROUP: &[&str] = &["mmap", "munmap", "mremap", "mprotect", "madvise", "brk"];
const PROCESS_GROUP: &[&str] = &[
    "fork",
    "vfork",
    "clone",
    "clone3",
    "execve",
    "execveat",
    "wait4",
    "kill",
    "exit",
    "exit_group",
];

/// Resolves a `TRACER_SYSCALLS` value — comma-separated system call names (kernel
/// or wrapper names), groups, or `all` — into sorted, distinct numbers. An unknown
/// name is an error naming it.
pub fn selection(spec: &str) -> Result<Vec<u16>, String> {
    let mut chosen = vec![false; NAMES.len()];
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "all" {
            for (i, n) in NAMES.iter().enumerate() {
                chosen[i] |= !n.is_empty();
            }
        } else if let Some(names) = group(item) {
            for n in names {
                if let Some(nr) = number(n) {
                    chosen[usize::from(nr)] = true;
                }
            }
        } else if let Some(nr) = number(canonical(item)) {
            chosen[usize::from(nr)] = true;
        } else {
            return Err(format!(
                "unknown system call or group {item:?} (expected a name such as openat, \
                 a group %file, %net, %mem, %process, or all)"
            ));
        }
    }
    Ok((0..NAMES.len())
        .filter(|&i| chosen[i])
        .map(|i| i as u16)
        .collect())
}

/// The symbolic name of `errno` value `errno` (`2` → `ENOENT`).
pub fn errno_name(errno: i32) -> Option<&'static str> {
    errno_entry(errno).map(|(n, _)| n)
}

/// The C library's message for `errno` (`2` → `No such file or directory`).
pub fn errno_message(errno: i32) -> Option<&'static str> {
    errno_entry(errno).map(|(_, m)| m)
}

fn errno_entry(errno: i32) -> Option<(&'static str, &'static str)> {
    let i = usize::try_from(errno).ok()?;
    ERRNOS.get(i).copied().filter(|(n, _)| !n.is_empty())
}

/// The `errno` a raw kernel return value encodes: the kernel reports failure as
/// a result in `-4095..=-1`.
pub fn errno_of_result(result: i64) -> Option<i32> {
    (-4095..=-1).contains(&result).then(|| (-result) as i32)
}

/// Renders a directory file descriptor argument: `AT_FDCWD` or the number.
pub fn dirfd(fd: i64) -> String {
    if fd == AT_FDCWD {
        "AT_FDCWD".to_string()
    } else {
        fd.to_string()
    }
}

/// Renders `open`/`openat` flags the way strace does: the access mode first
/// (`O_RDONLY`, `O_WRONLY`, `O_RDWR`), then the other bits, then any bit left
/// unnamed in hexadecimal (`O_RDONLY|O_CLOEXEC`, `O_WRONLY|O_CREAT|0x80000000`).
pub fn open_flags(flags: u64) -> String {
    let mut out = String::from(match flags & 3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        2 => "O_RDWR",
        _ => "O_ACCMODE",
    });
    let rest = bit_names(flags & !3, OPEN_BITS, &mut out);
    push_rest(&mut out, rest);
    out
}

/// Renders `mmap`/`mprotect` protection bits (`PROT_NONE` when none is set).
pub fn mmap_prot(prot: u64) -> String {
    named_bits(prot, PROT_BITS, "PROT_NONE")
}

/// Renders `mmap` flags: the mapping type first (`MAP_SHARED`, `MAP_PRIVATE`,
/// `MAP_SHARED_VALIDATE`), then the other bits.
pub fn mmap_flags(flags: u64) -> String {
    let mut out = String::new();
    match flags & 3 {
        1 => out.push_str("MAP_SHARED"),
        2 => out.push_str("MAP_PRIVATE"),
        3 => out.push_str("MAP_SHARED_VALIDATE"),
        _ => {}
    }
    let rest = bit_names(flags & !3, MAP_BITS, &mut out);
    push_rest(&mut out, rest);
    if out.is_empty() {
        out.push('0');
    }
    out
}

/// Renders the `flags` argument of the `*at` calls (`AT_SYMLINK_NOFOLLOW`, …);
/// `0` when none is set.
pub fn at_flags(flags: u64) -> String {
    named_bits(flags, AT_BITS, "0")
}

/// Renders a flag-bits argument of system call `number` found at argument
/// position `index` (0-based, in kernel argument order): open flags for
/// `open`/`openat`/`creat`, protection and mapping flags for `mmap`/`mprotect`,
/// `AT_*` flags for the `*at` calls; any other as hexadecimal.
pub fn flags_text(number: u16, index: usize, value: u64) -> String {
    match (name(number).unwrap_or(""), index) {
        ("open", 1) | ("openat", 2) => open_flags(value),
        ("mmap", 2) | ("mprotect", 2) | ("pkey_mprotect", 2) => mmap_prot(value),
        ("mmap", 3) => mmap_flags(value),
        ("newfstatat", 3)
        | ("unlinkat", 2)
        | ("faccessat2", 3)
        | ("fchmodat2", 3)
        | ("statx", 2)
        | ("fchownat", 4)
        | ("utimensat", 3)
        | ("linkat", 4)
        | ("execveat", 4)
        | ("name_to_handle_at", 4)
        | ("open_tree", 2) => at_flags(value),
        _ => format!("{value:#x}"),
    }
}

/// The name of signal `signal` (`9` → `SIGKILL`); real-time signals as `SIGRT_n`.
pub fn signal_name(signal: i64) -> Option<String> {
    let i = usize::try_from(signal).ok()?;
    if let Some(n) = SIGNALS.get(i).filter(|n| !n.is_empty()) {
        return Some((*n).to_string());
    }
    (32..=64).contains(&i).then(|| format!("SIGRT_{}", i - 32))
}

fn named_bits(value: u64, table: &[(u64, &str)], none: &str) -> String {
    let mut out = String::new();
    let rest = bit_names(value, table, &mut out);
    push_rest(&mut out, rest);
    if out.is_empty() {
        out.push_str(none);
    }
    out
}

/// Appends the names of the bits of `value` found in `table` (checked in table
/// order, so multi-bit names listed first win) and returns the bits left unnamed.
fn bit_names(mut value: u64, table: &[(u64, &str)], out: &mut String) -> u64 {
    for &(bits, name) in table {
        if bits != 0 && value & bits == bits {
            if !out.is_empty() {
                out.push('|');
            }
            out.push_str(name);
            value &= !bits;
        }
    }
    value
}

fn push_rest(out: &mut String, rest: u64) {
    if rest != 0 {
        if !out.is_empty() {
            out.push('|');
        }
        let _ = write!(out, "{rest:#x}");
    }
}

const OPEN_BITS: &[(u64, &str)] = &[
    (0o4010000, "O_SYNC"),
    (0o20200000, "O_TMPFILE"),
    (0o100, "O_CREAT"),
    (0o200, "O_EXCL"),
    (0o400, "O_NOCTTY"),
    (0o1000, "O_TRUNC"),
    (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"),
    (0o10000, "O_DSYNC"),
    (0o20000, "O_ASYNC"),
    (0o40000, "O_DIRECT"),
    (0o100000, "O_LARGEFILE"),
    (0o200000, "O_DIRECTORY"),
    (0o400000, "O_NOFOLLOW"),
    (0o1000000, "O_NOATIME"),
    (0o2000000, "O_CLOEXEC"),
    (0o10000000, "O_PATH"),
];

const PROT_BITS: &[(u64, &str)] = &[
    (0x1, "PROT_READ"),
    (0x2, "PROT_WRITE"),
    (0x4, "PROT_EXEC"),
    (0x0100_0000, "PROT_GROWSDOWN"),
    (0x0200_0000, "PROT_GROWSUP"),
];

const MAP_BITS: &[(u64, &str)] = &[
    (0x10, "MAP_FIXED"),
    (0x20, "MAP_ANONYMOUS"),
    (0x40, "MAP_32BIT"),
    (0x100, "MAP_GROWSDOWN"),
    (0x800, "MAP_DENYWRITE"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x10000, "MAP_NONBLOCK"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
    (0x80000, "MAP_SYNC"),
    (0x100000, "MAP_FIXED_NOREPLACE"),
];

const AT_BITS: &[(u64, &str)] = &[
    (0x100, "AT_SYMLINK_NOFOLLOW"),
    (0x200, "AT_REMOVEDIR"),
    (0x400, "AT_SYMLINK_FOLLOW"),
    (0x800, "AT_NO_AUTOMOUNT"),
    (0x1000, "AT_EMPTY_PATH"),
];

#[rustfmt::skip]
const SIGNALS: [&str; 32] = [
    "", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS",
    "SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM",
    "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG",
    "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS",
];

/// System call names indexed by x86-64 number; `""` where no call has the number
/// (335–423 were left unused when the numbering was unified across architectures).
#[rustfmt::skip]
static NAMES: [&str; 467] = [
    /*   0 */ "read", "write", "open", "close",
    /*   4 */ "stat", "fstat", "lstat", "poll",
    /*   8 */ "lseek", "mmap", "mprotect", "munmap",
    /*  12 */ "brk", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
    /*  16 */ "ioctl", "pread64", "pwrite64", "readv",
    /*  20 */ "writev", "access", "pipe", "select",
    /*  24 */ "sched_yield", "mremap", "msync", "mincore",
    /*  28 */ "madvise", "shmget", "shmat", "shmctl",
    /*  32 */ "dup", "dup2", "pause", "nanosleep",
    /*  36 */ "getitimer", "alarm", "setitimer", "getpid",
    /*  40 */ "sendfile", "socket", "connect", "accept",
    /*  44 */ "sendto", "recvfrom", "sendmsg", "recvmsg",
    /*  48 */ "shutdown", "bind", "listen", "getsockname",
    /*  52 */ "getpeername", "socketpair", "setsockopt", "getsockopt",
    /*  56 */ "clone", "fork", "vfork", "execve",
    /*  60 */ "exit", "wait4", "kill", "uname",
    /*  64 */ "semget", "semop", "semctl", "shmdt",
    /*  68 */ "msgget", "msgsnd", "msgrcv", "msgctl",
    /*  72 */ "fcntl", "flock", "fsync", "fdatasync",
    /*  76 */ "truncate", "ftruncate", "getdents", "getcwd",
    /*  80 */ "chdir", "fchdir", "rename", "mkdir",
    /*  84 */ "rmdir", "creat", "link", "unlink",
    /*  88 */ "symlink", "readlink", "chmod", "fchmod",
    /*  92 */ "chown", "fchown", "lchown", "umask",
    /*  96 */ "gettimeofday", "getrlimit", "getrusage", "sysinfo",
    /* 100 */ "times", "ptrace", "getuid", "syslog",
    /* 104 */ "getgid", "setuid", "setgid", "geteuid",
    /* 108 */ "getegid", "setpgid", "getppid", "getpgrp",
    /* 112 */ "setsid", "setreuid", "setregid", "getgroups",
    /* 116 */ "setgroups", "setresuid", "getresuid", "setresgid",
    /* 120 */ "getresgid", "getpgid", "setfsuid", "setfsgid",
    /* 124 */ "getsid", "capget", "capset", "rt_sigpending",
    /* 128 */ "rt_sigtimedwait", "rt_sigqueueinfo", "rt_sigsuspend", "sigaltstack",
    /* 132 */ "utime", "mknod", "uselib", "personality",
    /* 136 */ "ustat", "statfs", "fstatfs", "sysfs",
    /* 140 */ "getpriority", "setpriority", "sched_setparam", "sched_getparam",
    /* 144 */ "sched_setscheduler", "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
    /* 148 */ "sched_rr_get_interval", "mlock", "munlock", "mlockall",
    /* 152 */ "munlockall", "vhangup", "modify_ldt", "pivot_root",
    /* 156 */ "_sysctl", "prctl", "arch_prctl", "adjtimex",
    /* 160 */ "setrlimit", "chroot", "sync", "acct",
    /* 164 */ "settimeofday", "mount", "umount2", "swapon",
    /* 168 */ "swapoff", "reboot", "sethostname", "setdomainname",
    /* 172 */ "iopl", "ioperm", "create_module", "init_module",
    /* 176 */ "delete_module", "get_kernel_syms", "query_module", "quotactl",
    /* 180 */ "nfsservctl", "getpmsg", "putpmsg", "afs_syscall",
    /* 184 */ "tuxcall", "security", "gettid", "readahead",
    /* 188 */ "setxattr", "lsetxattr", "fsetxattr", "getxattr",
    /* 192 */ "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
    /* 196 */ "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    /* 200 */ "tkill", "time", "futex", "sched_setaffinity",
    /* 204 */ "sched_getaffinity", "set_thread_area", "io_setup", "io_destroy",
    /* 208 */ "io_getevents", "io_submit", "io_cancel", "get_thread_area",
    /* 212 */ "lookup_dcookie", "epoll_create", "epoll_ctl_old", "epoll_wait_old",
    /* 216 */ "remap_file_pages", "getdents64", "set_tid_address", "restart_syscall",
    /* 220 */ "semtimedop", "fadvise64", "timer_create", "timer_settime",
    /* 224 */ "timer_gettime", "timer_getoverrun", "timer_delete", "clock_settime",
    /* 228 */ "clock_gettime", "clock_getres", "clock_nanosleep", "exit_group",
    /* 232 */ "epoll_wait", "epoll_ctl", "tgkill", "utimes",
    /* 236 */ "vserver", "mbind", "set_mempolicy", "get_mempolicy",
    /* 240 */ "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    /* 244 */ "mq_notify", "mq_getsetattr", "kexec_load", "waitid",
    /* 248 */ "add_key", "request_key", "keyctl", "ioprio_set",
    /* 252 */ "ioprio_get", "inotify_init", "inotify_add_watch", "inotify_rm_watch",
    /* 256 */ "migrate_pages", "openat", "mkdirat", "mknodat",
    /* 260 */ "fchownat", "futimesat", "newfstatat", "unlinkat",
    /* 264 */ "renameat", "linkat", "symlinkat", "readlinkat",
    /* 268 */ "fchmodat", "faccessat", "pselect6", "ppoll",
    /* 272 */ "unshare", "set_robust_list", "get_robust_list", "splice",
    /* 276 */ "tee", "sync_file_range", "vmsplice", "move_pages",
    /* 280 */ "utimensat", "epoll_pwait", "signalfd", "timerfd_create",
    /* 284 */ "eventfd", "fallocate", "timerfd_settime", "timerfd_gettime",
    /* 288 */ "accept4", "signalfd4", "eventfd2", "epoll_create1",
    /* 292 */ "dup3", "pipe2", "inotify_init1", "preadv",
    /* 296 */ "pwritev", "rt_tgsigqueueinfo", "perf_event_open", "recvmmsg",
    /* 300 */ "fanotify_init", "fanotify_mark", "prlimit64", "name_to_handle_at",
    /* 304 */ "open_by_handle_at", "clock_adjtime", "syncfs", "sendmmsg",
    /* 308 */ "setns", "getcpu", "process_vm_readv", "process_vm_writev",
    /* 312 */ "kcmp", "finit_module", "sched_setattr", "sched_getattr",
    /* 316 */ "renameat2", "seccomp", "getrandom", "memfd_create",
    /* 320 */ "kexec_file_load", "bpf", "execveat", "userfaultfd",
    /* 324 */ "membarrier", "mlock2", "copy_file_range", "preadv2",
    /* 328 */ "pwritev2", "pkey_mprotect", "pkey_alloc", "pkey_free",
    /* 332 */ "statx", "io_pgetevents", "rseq", "",
    /* 336 */ "", "", "", "",
    /* 340 */ "", "", "", "",
    /* 344 */ "", "", "", "",
    /* 348 */ "", "", "", "",
    /* 352 */ "", "", "", "",
    /* 356 */ "", "", "", "",
    /* 360 */ "", "", "", "",
    /* 364 */ "", "", "", "",
    /* 368 */ "", "", "", "",
    /* 372 */ "", "", "", "",
    /* 376 */ "", "", "", "",
    /* 380 */ "", "", "", "",
    /* 384 */ "", "", "", "",
    /* 388 */ "", "", "", "",
    /* 392 */ "", "", "", "",
    /* 396 */ "", "", "", "",
    /* 400 */ "", "", "", "",
    /* 404 */ "", "", "", "",
    /* 408 */ "", "", "", "",
    /* 412 */ "", "", "", "",
    /* 416 */ "", "", "", "",
    /* 420 */ "", "", "", "",
    /* 424 */ "pidfd_send_signal", "io_uring_setup", "io_uring_enter", "io_uring_register",
    /* 428 */ "open_tree", "move_mount", "fsopen", "fsconfig",
    /* 432 */ "fsmount", "fspick", "pidfd_open", "clone3",
    /* 436 */ "close_range", "openat2", "pidfd_getfd", "faccessat2",
    /* 440 */ "process_madvise", "epoll_pwait2", "mount_setattr", "quotactl_fd",
    /* 444 */ "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "memfd_secret",
    /* 448 */ "process_mrelease", "futex_waitv", "set_mempolicy_home_node", "cachestat",
    /* 452 */ "fchmodat2", "map_shadow_stack", "futex_wake", "futex_wait",
    /* 456 */ "futex_requeue", "statmount", "listmount", "lsm_get_self_attr",
    /* 460 */ "lsm_set_self_attr", "lsm_list_modules", "mseal", "setxattrat",
    /* 464 */ "getxattrat", "listxattrat", "removexattrat",
];

/// `(name, message)` indexed by `errno` value; `("", "")` where no error has the value.
#[rustfmt::skip]
static ERRNOS: [(&str, &str); 134] = [
    /*   0 */ ("", ""),
    /*   1 */ ("EPERM", "Operation not permitted"),
    /*   2 */ ("ENOENT", "No such file or directory"),
    /*   3 */ ("ESRCH", "No such process"),
    /*   4 */ ("EINTR", "Interrupted system call"),
    /*   5 */ ("EIO", "Input/output error"),
    /*   6 */ ("ENXIO", "No such device or address"),
    /*   7 */ ("E2BIG", "Argument list too long"),
    /*   8 */ ("ENOEXEC", "Exec format error"),
    /*   9 */ ("EBADF", "Bad file descriptor"),
    /*  10 */ ("ECHILD", "No child processes"),
    /*  11 */ ("EAGAIN", "Resource temporarily unavailable"),
    /*  12 */ ("ENOMEM", "Cannot allocate memory"),
    /*  13 */ ("EACCES", "Permission denied"),
    /*  14 */ ("EFAULT", "Bad address"),
    /*  15 */ ("ENOTBLK", "Block device required"),
    /*  16 */ ("EBUSY", "Device or resource busy"),
    /*  17 */ ("EEXIST", "File exists"),
    /*  18 */ ("EXDEV", "Invalid cross-device link"),
    /*  19 */ ("ENODEV", "No such device"),
    /*  20 */ ("ENOTDIR", "Not a directory"),
    /*  21 */ ("EISDIR", "Is a directory"),
    /*  22 */ ("EINVAL", "Invalid argument"),
    /*  23 */ ("ENFILE", "Too many open files in system"),
    /*  24 */ ("EMFILE", "Too many open files"),
    /*  25 */ ("ENOTTY", "Inappropriate ioctl for device"),
    /*  26 */ ("ETXTBSY", "Text file busy"),
    /*  27 */ ("EFBIG", "File too large"),
    /*  28 */ ("ENOSPC", "No space left on device"),
    /*  29 */ ("ESPIPE", "Illegal seek"),
    /*  30 */ ("EROFS", "Read-only file system"),
    /*  31 */ ("EMLINK", "Too many links"),
    /*  32 */ ("EPIPE", "Broken pipe"),
    /*  33 */ ("EDOM", "Numerical argument out of domain"),
    /*  34 */ ("ERANGE", "Numerical result out of range"),
    /*  35 */ ("EDEADLK", "Resource deadlock avoided"),
    /*  36 */ ("ENAMETOOLONG", "File name too long"),
    /*  37 */ ("ENOLCK", "No locks available"),
    /*  38 */ ("ENOSYS", "Function not implemented"),
    /*  39 */ ("ENOTEMPTY", "Directory not empty"),
    /*  40 */ ("ELOOP", "Too many levels of symbolic links"),
    /*  41 */ ("", ""),
    /*  42 */ ("ENOMSG", "No message of desired type"),
    /*  43 */ ("EIDRM", "Identifier removed"),
    /*  44 */ ("ECHRNG", "Channel number out of range"),
    /*  45 */ ("EL2NSYNC", "Level 2 not synchronized"),
    /*  46 */ ("EL3HLT", "Level 3 halted"),
    /*  47 */ ("EL3RST", "Level 3 reset"),
    /*  48 */ ("ELNRNG", "Link number out of range"),
    /*  49 */ ("EUNATCH", "Protocol driver not attached"),
    /*  50 */ ("ENOCSI", "No CSI structure available"),
    /*  51 */ ("EL2HLT", "Level 2 halted"),
    /*  52 */ ("EBADE", "Invalid exchange"),
    /*  53 */ ("EBADR", "Invalid request descriptor"),
    /*  54 */ ("EXFULL", "Exchange full"),
    /*  55 */ ("ENOANO", "No anode"),
    /*  56 */ ("EBADRQC", "Invalid request code"),
    /*  57 */ ("EBADSLT", "Invalid slot"),
    /*  58 */ ("", ""),
    /*  59 */ ("EBFONT", "Bad font file format"),
    /*  60 */ ("ENOSTR", "Device not a stream"),
    /*  61 */ ("ENODATA", "No data available"),
    /*  62 */ ("ETIME", "Timer expired"),
    /*  63 */ ("ENOSR", "Out of streams resources"),
    /*  64 */ ("ENONET", "Machine is not on the network"),
    /*  65 */ ("ENOPKG", "Package not installed"),
    /*  66 */ ("EREMOTE", "Object is remote"),
    /*  67 */ ("ENOLINK", "Link has been severed"),
    /*  68 */ ("EADV", "Advertise error"),
    /*  69 */ ("ESRMNT", "Srmount error"),
    /*  70 */ ("ECOMM", "Communication error on send"),
    /*  71 */ ("EPROTO", "Protocol error"),
    /*  72 */ ("EMULTIHOP", "Multihop attempted"),
    /*  73 */ ("EDOTDOT", "RFS specific error"),
    /*  74 */ ("EBADMSG", "Bad message"),
    /*  75 */ ("EOVERFLOW", "Value too large for defined data type"),
    /*  76 */ ("ENOTUNIQ", "Name not unique on network"),
    /*  77 */ ("EBADFD", "File descriptor in bad state"),
    /*  78 */ ("EREMCHG", "Remote address changed"),
    /*  79 */ ("ELIBACC", "Can not access a needed shared library"),
    /*  80 */ ("ELIBBAD", "Accessing a corrupted shared library"),
    /*  81 */ ("ELIBSCN", ".lib section in a.out corrupted"),
    /*  82 */ ("ELIBMAX", "Attempting to link in too many shared libraries"),
    /*  83 */ ("ELIBEXEC", "Cannot exec a shared library directly"),
    /*  84 */ ("EILSEQ", "Invalid or incomplete multibyte or wide character"),
    /*  85 */ ("ERESTART", "Interrupted system call should be restarted"),
    /*  86 */ ("ESTRPIPE", "Streams pipe error"),
    /*  87 */ ("EUSERS", "Too many users"),
    /*  88 */ ("ENOTSOCK", "Socket operation on non-socket"),
    /*  89 */ ("EDESTADDRREQ", "Destination address required"),
    /*  90 */ ("EMSGSIZE", "Message too long"),
    /*  91 */ ("EPROTOTYPE", "Protocol wrong type for socket"),
    /*  92 */ ("ENOPROTOOPT", "Protocol not available"),
    /*  93 */ ("EPROTONOSUPPORT", "Protocol not supported"),
    /*  94 */ ("ESOCKTNOSUPPORT", "Socket type not supported"),
    /*  95 */ ("EOPNOTSUPP", "Operation not supported"),
    /*  96 */ ("EPFNOSUPPORT", "Protocol family not supported"),
    /*  97 */ ("EAFNOSUPPORT", "Address family not supported by protocol"),
    /*  98 */ ("EADDRINUSE", "Address already in use"),
    /*  99 */ ("EADDRNOTAVAIL", "Cannot assign requested address"),
    /* 100 */ ("ENETDOWN", "Network is down"),
    /* 101 */ ("ENETUNREACH", "Network is unreachable"),
    /* 102 */ ("ENETRESET", "Network dropped connection on reset"),
    /* 103 */ ("ECONNABORTED", "Software caused connection abort"),
    /* 104 */ ("ECONNRESET", "Connection reset by peer"),
    /* 105 */ ("ENOBUFS", "No buffer space available"),
    /* 106 */ ("EISCONN", "Transport endpoint is already connected"),
    /* 107 */ ("ENOTCONN", "Transport endpoint is not connected"),
    /* 108 */ ("ESHUTDOWN", "Cannot send after transport endpoint shutdown"),
    /* 109 */ ("ETOOMANYREFS", "Too many references: cannot splice"),
    /* 110 */ ("ETIMEDOUT", "Connection timed out"),
    /* 111 */ ("ECONNREFUSED", "Connection refused"),
    /* 112 */ ("EHOSTDOWN", "Host is down"),
    /* 113 */ ("EHOSTUNREACH", "No route to host"),
    /* 114 */ ("EALREADY", "Operation already in progress"),
    /* 115 */ ("EINPROGRESS", "Operation now in progress"),
    /* 116 */ ("ESTALE", "Stale file handle"),
    /* 117 */ ("EUCLEAN", "Structure needs cleaning"),
    /* 118 */ ("ENOTNAM", "Not a XENIX named type file"),
    /* 119 */ ("ENAVAIL", "No XENIX semaphores available"),
    /* 120 */ ("EISNAM", "Is a named type file"),
    /* 121 */ ("EREMOTEIO", "Remote I/O error"),
    /* 122 */ ("EDQUOT", "Disk quota exceeded"),
    /* 123 */ ("ENOMEDIUM", "No medium found"),
    /* 124 */ ("EMEDIUMTYPE", "Wrong medium type"),
    /* 125 */ ("ECANCELED", "Operation canceled"),
    /* 126 */ ("ENOKEY", "Required key not available"),
    /* 127 */ ("EKEYEXPIRED", "Key has expired"),
    /* 128 */ ("EKEYREVOKED", "Key has been revoked"),
    /* 129 */ ("EKEYREJECTED", "Key was rejected by service"),
    /* 130 */ ("EOWNERDEAD", "Owner died"),
    /* 131 */ ("ENOTRECOVERABLE", "State not recoverable"),
    /* 132 */ ("ERFKILL", "Operation not possible due to RF-kill"),
    /* 133 */ ("EHWPOISON", "Memory page has hardware error"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_from_the_kernel_table() {
        // Spot checks against the x86-64 table: first, last, and calls in the sample.
        for (nr, n) in [
            (0, "read"),
            (1, "write"),
            (3, "close"),
            (9, "mmap"),
            (16, "ioctl"),
            (59, "execve"),
            (217, "getdents64"),
            (231, "exit_group"),
            (257, "openat"),
            (262, "newfstatat"),
            (332, "statx"),
            (334, "rseq"),
            (424, "pidfd_send_signal"),
            (435, "clone3"),
            (439, "faccessat2"),
            (450, "set_mempolicy_home_node"),
        ] {
            assert_eq!(name(nr), Some(n), "{nr}");
            assert_eq!(number(n), Some(nr), "{n}");
        }
        assert_eq!(name(335), None);
        assert_eq!(name(423), None);
        assert_eq!(name(u16::MAX), None);
        assert_eq!(number(""), None);
        assert_eq!(number("no_such_call"), None);
    }

    #[test]
    fn every_group_member_is_a_known_call() {
        for g in ["%file", "%net", "%mem", "%process"] {
            for n in group(g).unwrap() {
                assert!(number(n).is_some(), "{g}: {n}");
            }
        }
    }

    #[test]
    fn selection_resolves_names_wrappers_and_groups() {
        assert_eq!(selection("openat,close").unwrap(), vec![3, 257]);
        assert_eq!(selection("open64, mmap64 ,send").unwrap(), vec![2, 9, 44]);
        assert_eq!(selection("%mem").unwrap(), vec![9, 10, 11, 12, 25, 28]);
        let all = selection("all").unwrap();
        assert_eq!(all.len(), NAMES.iter().filter(|n| !n.is_empty()).count());
        assert!(selection("openat,bogus").unwrap_err().contains("bogus"));
    }

    #[test]
    fn errno_names_and_messages() {
        assert_eq!(errno_name(2), Some("ENOENT"));
        assert_eq!(errno_message(2), Some("No such file or directory"));
        assert_eq!(errno_name(11), Some("EAGAIN"));
        assert_eq!(errno_name(25), Some("ENOTTY"));
        assert_eq!(errno_message(25), Some("Inappropriate ioctl for device"));
        assert_eq!(errno_name(110), Some("ETIMEDOUT"));
        assert_eq!(errno_name(133), Some("EHWPOISON"));
        assert_eq!(errno_name(0), None);
        assert_eq!(errno_name(41), None);
        assert_eq!(errno_name(-1), None);
        assert_eq!(errno_name(134), None);
        assert_eq!(errno_of_result(-2), Some(2));
        assert_eq!(errno_of_result(-4096), None);
        assert_eq!(errno_of_result(3), None);
    }

    #[test]
    fn flag_renderers() {
        assert_eq!(dirfd(-100), "AT_FDCWD");
        assert_eq!(dirfd(3), "3");
        // O_RDONLY|O_CLOEXEC = 0o2000000 = 0x80000, as glibc's fopen("r") opens.
        assert_eq!(open_flags(0x80000), "O_RDONLY|O_CLOEXEC");
        assert_eq!(open_flags(0o101 | 0o1000), "O_WRONLY|O_CREAT|O_TRUNC");
        assert_eq!(open_flags(0o4010002), "O_RDWR|O_SYNC");
        assert_eq!(open_flags(0o10000), "O_RDONLY|O_DSYNC");
        assert_eq!(open_flags(0o20200000), "O_RDONLY|O_TMPFILE");
        assert_eq!(open_flags(0x8000_0001), "O_WRONLY|0x80000000");
        assert_eq!(mmap_prot(0), "PROT_NONE");
        assert_eq!(mmap_prot(3), "PROT_READ|PROT_WRITE");
        assert_eq!(mmap_flags(0x22), "MAP_PRIVATE|MAP_ANONYMOUS");
        assert_eq!(mmap_flags(0x812), "MAP_PRIVATE|MAP_FIXED|MAP_DENYWRITE");
        assert_eq!(at_flags(0), "0");
        assert_eq!(at_flags(0x1100), "AT_SYMLINK_NOFOLLOW|AT_EMPTY_PATH");
        assert_eq!(flags_text(257, 2, 0x80000), "O_RDONLY|O_CLOEXEC");
        assert_eq!(flags_text(2, 1, 0o1101), "O_WRONLY|O_CREAT|O_TRUNC");
        assert_eq!(flags_text(9, 2, 1), "PROT_READ");
        assert_eq!(flags_text(9, 3, 0x22), "MAP_PRIVATE|MAP_ANONYMOUS");
        assert_eq!(flags_text(263, 2, 0x200), "AT_REMOVEDIR");
        assert_eq!(flags_text(257, 3, 0o644), "0x1a4");
        assert_eq!(flags_text(u16::MAX, 0, 1), "0x1");
        assert_eq!(signal_name(9).as_deref(), Some("SIGKILL"));
        assert_eq!(signal_name(34).as_deref(), Some("SIGRT_2"));
        assert_eq!(signal_name(0), None);
        assert_eq!(signal_name(65), None);
    }
}
