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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Symbol {
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
}

impl From<Event> for Record {
    fn from(e: Event) -> Self {
        Record::Event(e)
    }
}
