//! The one event model every format encodes.
//!
//! A trace is a stream of [`Record`]s: who the process is, which objects it has
//! loaded, the distinct stacks its allocations came from, its threads, and a
//! time-ordered stream of [`Event`]s. A [`Record::Stack`] always precedes the first
//! event that names its id, and a [`Record::Thread`] precedes (or accompanies) the
//! first event of that thread when the format knows threads at all.
//!
//! Readers yield records in that order; writers accept them in that order. A
//! conversion is therefore `for r in reader { writer.write(&r?)? }` followed by
//! `writer.finish()`: no format talks to another directly.

/// Identifier of a deduplicated stack, unique within one trace.
pub type StackId = u64;

/// Operating-system thread id (Linux `gettid()`), or the format's own thread
/// number when the file does not say which OS thread it was.
pub type ThreadId = u32;

/// The traced process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Process {
    pub pid: u32,
    /// Full path of the executable, empty when unknown.
    pub executable: String,
    /// `argv`, empty when unknown.
    pub command_line: Vec<String>,
    /// Start of tracing, nanoseconds since the Unix epoch; 0 when unknown.
    pub start_time_ns: u64,
}

/// A loaded object (the executable, a shared library, the vDSO).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Object {
    pub path: String,
    /// Address the object's first segment was mapped at (its load bias for PIE
    /// objects); 0 when unknown.
    pub load_address: u64,
    /// Extent of the mapping in bytes; 0 when unknown.
    pub size: u64,
}

/// Where a frame's code comes from in the source, when it has been resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Symbol {
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Frame {
    /// Absolute instruction address (return address for all but the innermost
    /// frame); 0 when the format only kept a symbol.
    pub address: u64,
    pub symbol: Option<Symbol>,
}

/// A deduplicated stack. `frames[0]` is the innermost frame (the caller of the
/// allocation function), the last one the outermost.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stack {
    pub id: StackId,
    pub frames: Vec<Frame>,
}

/// A thread seen in the trace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Thread {
    pub tid: ThreadId,
    /// Thread name when known, empty otherwise.
    pub name: String,
}

/// A successful allocation: a new block exists at `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Alloc {
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    pub thread: ThreadId,
    pub address: u64,
    pub size: u64,
    pub stack: StackId,
}

/// A block released (by `free`, or by a `realloc` that replaced it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Free {
    pub time_ns: u64,
    pub thread: ThreadId,
    pub address: u64,
}

/// A garbage collection reported by a managed runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gc {
    pub time_ns: u64,
    pub objects: u64,
    pub bytes: u64,
}

/// A named point in time put into the trace by the program (`tracer_marker`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marker {
    pub time_ns: u64,
    pub thread: ThreadId,
    pub name: String,
}

/// The value of one system-call argument, typed by meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyscallArg {
    /// A plain integer (counts, offsets, modes).
    Int(i64),
    /// A bit set of flags, kept as its raw value; the syscall tables name the bits.
    Flags(u64),
    /// A file descriptor.
    Fd(i32),
    /// A NUL-terminated path, without the NUL.
    Path(Vec<u8>),
    /// A buffer: its full length, and the captured prefix of its contents
    /// (possibly empty, at most the length).
    Buffer { len: u64, data: Vec<u8> },
    /// A pointer whose target is not captured.
    Pointer(u64),
    /// An argument element this reader does not know: its tag and raw value.
    Unknown { tag: u16, raw: Vec<u8> },
}

/// One captured system call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Syscall {
    /// x86-64 system call number.
    pub number: u16,
    /// Raw return value (as the kernel returned it: `-errno` folded into `errno`
    /// by libc wrappers is stored as the wrapper's -1 result plus `errno`).
    pub result: i64,
    /// `errno` when the call failed, `None` when the file did not record it.
    pub errno: Option<i32>,
    pub thread: Option<ThreadId>,
    /// Entry time, nanoseconds since the Unix epoch, when recorded.
    pub time_ns: Option<u64>,
    /// Time spent in the call, nanoseconds, when recorded.
    pub duration_ns: Option<u64>,
    pub args: Vec<SyscallArg>,
}

/// A system call argument borrowed from wherever it was captured (a ring
/// of the preload library): the same meaning as [`SyscallArg`], without
/// owning its bytes, so a writer can encode it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallArgView<'a> {
    Int(i64),
    Flags(u64),
    Fd(i32),
    Path(&'a [u8]),
    Buffer { len: u64, data: &'a [u8] },
    Pointer(u64),
    Unknown { tag: u16, raw: &'a [u8] },
}

impl<'a> SyscallArgView<'a> {
    /// A view of an owned argument.
    pub fn of(a: &'a SyscallArg) -> Self {
        match a {
            SyscallArg::Int(v) => Self::Int(*v),
            SyscallArg::Flags(v) => Self::Flags(*v),
            SyscallArg::Fd(v) => Self::Fd(*v),
            SyscallArg::Path(p) => Self::Path(p),
            SyscallArg::Buffer { len, data } => Self::Buffer { len: *len, data },
            SyscallArg::Pointer(v) => Self::Pointer(*v),
            SyscallArg::Unknown { tag, raw } => Self::Unknown { tag: *tag, raw },
        }
    }

    /// The owned argument.
    pub fn to_arg(&self) -> SyscallArg {
        match *self {
            Self::Int(v) => SyscallArg::Int(v),
            Self::Flags(v) => SyscallArg::Flags(v),
            Self::Fd(v) => SyscallArg::Fd(v),
            Self::Path(p) => SyscallArg::Path(p.to_vec()),
            Self::Buffer { len, data } => SyscallArg::Buffer {
                len,
                data: data.to_vec(),
            },
            Self::Pointer(v) => SyscallArg::Pointer(v),
            Self::Unknown { tag, raw } => SyscallArg::Unknown {
                tag,
                raw: raw.to_vec(),
            },
        }
    }
}

/// A [`Syscall`] whose arguments are borrowed ([`SyscallArgView`]): what the
/// preload library's writer thread hands to [`crate::TraceWriter::write_syscall`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallView<'a> {
    pub number: u16,
    pub result: i64,
    pub errno: Option<i32>,
    pub thread: Option<ThreadId>,
    pub time_ns: Option<u64>,
    pub duration_ns: Option<u64>,
    pub args: &'a [SyscallArgView<'a>],
}

impl SyscallView<'_> {
    /// The owned record.
    pub fn to_syscall(&self) -> Syscall {
        Syscall {
            number: self.number,
            result: self.result,
            errno: self.errno,
            thread: self.thread,
            time_ns: self.time_ns,
            duration_ns: self.duration_ns,
            args: self.args.iter().map(SyscallArgView::to_arg).collect(),
        }
    }
}

/// One time-ordered event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Alloc(Alloc),
    Free(Free),
    Gc(Gc),
    Marker(Marker),
    Syscall(Syscall),
}

impl Event {
    /// The event's time, nanoseconds since the Unix epoch, when it has one.
    pub fn time_ns(&self) -> Option<u64> {
        match self {
            Event::Alloc(a) => Some(a.time_ns),
            Event::Free(f) => Some(f.time_ns),
            Event::Gc(g) => Some(g.time_ns),
            Event::Marker(m) => Some(m.time_ns),
            Event::Syscall(s) => s.time_ns,
        }
    }
}

/// The reachability class of a block still allocated when the tracer scanned
/// the process at exit, with valgrind memcheck's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeakKind {
    /// No pointer to the block (nor into it) anywhere: "definitely lost".
    Definite,
    /// Pointed to only from definitely lost blocks (directly or through other
    /// indirect ones): "indirectly lost".
    Indirect,
    /// Reachable from the roots only through a pointer into its interior:
    /// "possibly lost".
    Possible,
    /// Pointed to (at its start) from a root: a global, a thread's stack or
    /// registers, thread-local storage, or another reachable block: "still
    /// reachable".
    Reachable,
}

impl LeakKind {
    /// All kinds, in the order above (which is also their wire code 0..=3).
    pub const ALL: [LeakKind; 4] = [
        LeakKind::Definite,
        LeakKind::Indirect,
        LeakKind::Possible,
        LeakKind::Reachable,
    ];

    /// The code formats store: 0 definite, 1 indirect, 2 possible, 3 reachable.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind of a stored code, `None` for codes above 3.
    pub fn from_code(code: u64) -> Option<LeakKind> {
        LeakKind::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// `definite`, `indirect`, `possible`, `reachable` (the interface's JSON words).
    pub fn name(self) -> &'static str {
        match self {
            LeakKind::Definite => "definite",
            LeakKind::Indirect => "indirect",
            LeakKind::Possible => "possible",
            LeakKind::Reachable => "reachable",
        }
    }

    pub fn from_name(name: &str) -> Option<LeakKind> {
        LeakKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One item of a trace stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Process(Process),
    Object(Object),
    Stack(Stack),
    Thread(Thread),
    Event(Event),
    /// Host description (`uname` fields, tracer version, …) as key/value pairs.
    Info(Vec<(String, String)>),
    /// Resolution of one code address, valid for every frame with that address.
    /// It may arrive after the stacks that use the address: a tracer resolves
    /// symbols on its writer thread or at exit, never on the hot path.
    AddressSymbol {
        address: u64,
        symbol: Symbol,
    },
    /// The tracer scanned the process for reachability at `time_ns`
    /// (nanoseconds since the Unix epoch), at this point of the stream. The
    /// `BlockClass` records that follow classify the blocks live at this
    /// point; events after it (allocations by other libraries' exit-time
    /// destructors) happened after the scan. Written once, near the end of
    /// the trace, before `finish`; a trace may hold none (older traces, or a
    /// process that died before it could scan).
    LeakScan {
        time_ns: u64,
    },
    /// The reachability class of the block live at `address` when the
    /// preceding `LeakScan` was taken. Blocks the scan did not classify are
    /// simply not named.
    BlockClass {
        address: u64,
        kind: LeakKind,
    },
}

impl From<Event> for Record {
    fn from(e: Event) -> Self {
        Record::Event(e)
    }
}
