//! Reachability at exit: which blocks still allocated when the process ends
//! are leaked, with valgrind memcheck's four classes.
//!
//! The writer keeps the blocks live in the stream it has written ([`Live`]:
//! address → size, updated by every allocation and free it emits). When the
//! process exits (`exit`'s atexit handler, `_exit`/`_Exit`, see `lifecycle`),
//! the exiting thread records where it stands ([`ExitPoint`]: its stack
//! pointer and callee-saved registers) and asks the writer to stop; the writer
//! drains the queue, so the table holds every event up to that moment, and
//! runs [`run`] before finishing the files:
//!
//! 1. **Roots** ([`plan_roots`]): every readable and writable mapping of
//!    `/proc/self/maps`, as memcheck scans every client segment, except memory
//!    that belongs to malloc (glibc's heap is shared by the program's blocks,
//!    the free chunks and the tracer's own structures, which would otherwise
//!    reach every block): `[heap]`, arena heaps (a `heap_info` at a 64 MiB
//!    boundary), mappings holding a live block, `mmap`ed chunks (a chunk header
//!    whose size covers the pages); and the tracer's own memory: libtracer's
//!    writable segments, the writer thread's stack, the scan's own arrays.
//!    Stacks: the exiting thread's from its stack pointer up; another live
//!    thread's from the stack pointer `/proc/self/task/TID/syscall` shows
//!    while it waits in a system call, else whole; a glibc thread stack no
//!    live thread stands in (a finished thread's stack kept in glibc's cache)
//!    only its thread control block and static TLS at the top, which is what
//!    memcheck still sees of it. The exiting thread's registers are root words.
//! 2. **Marking from the roots**, as memcheck does: a word equal to a block's
//!    start makes it *reachable* if the word was in a root or a reachable
//!    block; any other pointer into a block (its interior, or from a
//!    possibly-reached block) makes an unreached block *possible*. A possible
//!    block that later gets a start-pointer from reachable memory becomes
//!    reachable and is scanned again.
//! 3. **Cliques**: every block still unreached, in address order, is a leader
//!    (*definite*); the unreached blocks its contents lead to, through start or
//!    interior pointers and transitively, are *indirect* (a former leader so
//!    reached becomes indirect too).
//!
//! The scan is conservative: every 8-byte-aligned word is a candidate
//! pointer. Memory is read with `process_vm_readv` on our own pid, which
//! returns an error instead of faulting on an unmapped or truncated page;
//! where that call is refused, only ranges `/proc/self/maps` lists as readable
//! anonymous or private memory are read directly. When the exiting thread is
//! the program's only one, it waits for the scan with its signals held
//! ([`hold_exit`]), nothing else can unmap memory, and the blocks, which lie
//! in anonymous memory, are copied directly (process_vm_readv pins the pages
//! of every range: git's 41,325 blocks took 75 ms that way, 24 ms copied).
//! Pages of a private mapping that were never written (the kernel's page
//! tables map nothing there and swapped nothing out: `/proc/self/pagemap`)
//! are not read at all, in roots, in large blocks and in the plan's look
//! for chunk headers: they hold zeros or the mapped file's bytes, never an
//! address the program made (a Java virtual machine's heap of 944 MB, 193
//! MB of it touched, was read whole, mapping the zero page into the rest).
//! Blocks are looked up in a
//! sorted array by binary search; marking uses an explicit work list sized
//! before the roots are planned (its buffer never moves, so it can be
//! excluded). Other threads keep running meanwhile: what they change during
//! the scan is a race the scan accepts (it is reported as it was read).

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::collections::HashMap;
use std::sync::Mutex;

use format_writers::LeakKind;

use crate::sys;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether blocks are tracked and classified (`TRACER_LEAK_SCAN`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Where the exiting thread stood: the start of its live stack and the
/// registers that may hold pointers no memory holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExitPoint {
    pub tid: u32,
    pub sp: u64,
    pub regs: [u64; 6],
}

impl ExitPoint {
    /// The calling function's stack pointer and callee-saved registers (the
    /// caller-saved ones are dead across the call that brought us here).
    #[inline(always)]
    pub fn here() -> ExitPoint {
        let (sp, rbx, rbp, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64);
        // SAFETY: only copies registers into outputs; no memory is touched.
        unsafe {
            core::arch::asm!(
                "mov {0}, rsp",
                "mov {1}, rbx",
                "mov {2}, rbp",
                "mov {3}, r12",
                "mov {4}, r13",
                "mov {5}, r14",
                "mov {6}, r15",
                out(reg) sp, out(reg) rbx, out(reg) rbp, out(reg) r12,
                out(reg) r13, out(reg) r14, out(reg) r15,
                options(nomem, nostack, preserves_flags),
            );
        }
        ExitPoint {
            tid: sys::raw_gettid(),
            sp,
            regs: [rbx, rbp, r12, r13, r14, r15],
        }
    }
}

impl ExitPoint {
    /// No program thread is left (the writer ends an orphaned process,
    /// `lifecycle::program_gone`): no stack and no register is a root. The
    /// calling thread's own stack is the tracer's, and still holds the
    /// addresses of the last events it handled.
    pub fn no_thread() -> ExitPoint {
        ExitPoint {
            tid: sys::raw_gettid(),
            sp: 0,
            regs: [0; 6],
        }
    }

    /// When called (indirectly) from libc's `exit` (`quick_exit`: `name`):
    /// moves the start of the live stack up to the frame that called it
    /// (past libtracer's own `exit` wrapper too, when there is one). The
    /// frames of `exit` and its handlers hold nothing of the program's, but
    /// their unused slots still hold stale words from earlier, deeper calls
    /// (the allocation calls among them), which memcheck does not see (they
    /// are undefined for it) and which would make leaked blocks look
    /// reachable. The caller must be inside the tracer's guard (`dlsym` may
    /// allocate).
    pub fn above_call_of(mut self, name: &core::ffi::CStr) -> ExitPoint {
        let exit_fn = glibc_exit_function(name);
        if exit_fn == 0 {
            return self.with_program_registers();
        }
        // `exit` (a few instructions) calls the handlers; the slot holding
        // the return address into it is found in the 64 KiB above the
        // current frames.
        const LOOK: u64 = 64 * 1024;
        let (lo, hi) = crate::tls::stack_bounds();
        let on_own_stack = hi != 0 && self.sp >= lo && self.sp < hi;
        // Our thread's stack as the unwinder knows it: read in place, with
        // no system call (a program that filtered its own system calls with
        // seccomp, killing on any it did not list, died here of the
        // `process_vm_readv` below: `examples/sandboxed.c`). Elsewhere (an
        // alternate signal stack, a coroutine's, bounds never taken) the
        // words are copied as before. Not from the heap: see `sys::Mapped`.
        let mut copy = None;
        let n = if on_own_stack {
            (hi - self.sp).min(LOOK)
        } else {
            let Some(mut buf) = sys::Mapped::zeroed(LOOK as usize) else {
                return self;
            };
            // Where the kernel refuses to read for us, our own stack is
            // copied directly, up to the end of its mapping (`readable` is
            // read then): left unread, the exit's frames were scanned, and a
            // stale pointer into the middle of a leaked list made 1,589 of
            // its blocks "possibly lost" in examples/leaks/crowd.c.
            let n = SelfMemory::this_thread().read(self.sp, &mut buf) as u64;
            copy = Some(buf);
            n
        };
        let word = |at: u64| -> Option<u64> {
            let off = at.checked_sub(self.sp)?;
            if off + 8 > n {
                return None;
            }
            Some(match &copy {
                Some(buf) => {
                    let o = off as usize;
                    u64::from_le_bytes(buf[o..o + 8].try_into().unwrap_or([0; 8]))
                }
                // SAFETY: 8 bytes of [sp, sp + n), inside this thread's own
                // stack between the frame that called us and the stack's
                // top: mapped, and written by no one while this thread runs
                // here (our own frames are below `sp`).
                None => unsafe { core::ptr::read_unaligned(at as usize as *const u64) },
            })
        };
        // The CFA of the frame a return address `ret` (found at `slot`)
        // returns into, when its rule is stack-pointer based.
        let cfa_of = |ret: u64, slot: u64| match crate::cfi::compute(ret) {
            crate::cfi::Rule::Frame {
                cfa_rbp: false,
                cfa_off,
                ..
            } => Some(slot + 8 + cfa_off as u64),
            _ => None,
        };
        let Some(slot) = (self.sp..self.sp + n)
            .step_by(8)
            .find(|&a| word(a).is_some_and(|w| w > exit_fn && w < exit_fn + 64))
        else {
            return self;
        };
        let Some(ret) = word(slot) else { return self };
        let mut cfa = cfa_of(ret, slot).unwrap_or(slot + 8);
        // Callers inside libtracer (an `exit` wrapper) are skipped as well.
        let (lo, hi) = sys::own_text_range();
        for _ in 0..4 {
            match word(cfa - 8) {
                Some(r) if r >= lo && r < hi => match cfa_of(r, cfa - 8) {
                    Some(c) => cfa = c,
                    None => break,
                },
                _ => break,
            }
        }
        self.sp = self.sp.max(cfa);
        self.with_program_registers()
    }

    /// The program's own registers where it called `exit` (or `daemon`),
    /// and its stack from that call up, when it came through ours on this
    /// thread and the scan starts at or below that frame (an exit handler
    /// that called `exit` again has other ones): ours, taken later, hold
    /// what glibc's frames or ours put there, and our entry's frame (no
    /// unwind rule: naked) holds the registers it saved and padding.
    pub fn with_program_registers(mut self) -> ExitPoint {
        if let Some((tid, regs, caller_sp)) = exit_registers() {
            if tid == self.tid && caller_sp >= self.sp {
                self.regs = regs;
                self.sp = caller_sp;
            }
        }
        self
    }
}

// glibc's `exit` (the exported `exit`'s) and `quick_exit`, looked up with
// every other function of glibc's the library calls (`syscalls::real!`)
// before the program runs: a
// `dlsym` at exit runs glibc's error bookkeeping on the exiting thread,
// which dropped the program's pending `dlerror` state (its blocks then came
// out lost: `examples/leaks/dlerror.c`).
crate::syscalls::real!(pub(crate) GLIBC_QUICK_EXIT, "quick_exit\0");

/// The address of glibc's `exit` or `quick_exit` (`name`), 0 if unknown.
fn glibc_exit_function(name: &core::ffi::CStr) -> u64 {
    if name == c"quick_exit" {
        GLIBC_QUICK_EXIT.address()
    } else {
        crate::syscalls::hooks::EXIT_REAL.address()
    }
}

/// The program's callee-saved registers where it called `exit` (the
/// exported `exit`'s naked entry), with the thread and the caller's stack
/// pointer: [`ExitPoint::above_call_of`] takes them for its registers,
/// since glibc's `exit` saved them in frames the scan leaves out and
/// reused them before our handler runs. Written once, by the exiting
/// thread (past `lifecycle::exit_gate`).
/// Words: the thread id (0: none yet), the caller's stack pointer, then
/// the six registers.
static EXIT_REGISTERS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

/// Called by the exported `exit` on the thread that goes on to exit.
pub fn remember_exit_registers(regs: [u64; 6], caller_sp: u64) {
    EXIT_REGISTERS[1].store(caller_sp, Ordering::Relaxed);
    for (slot, r) in EXIT_REGISTERS[2..].iter().zip(regs) {
        slot.store(r, Ordering::Relaxed);
    }
    EXIT_REGISTERS[0].store(u64::from(sys::raw_gettid()), Ordering::Release);
}

/// What [`remember_exit_registers`] kept: `(tid, registers, caller_sp)`.
fn exit_registers() -> Option<(u32, [u64; 6], u64)> {
    let tid = EXIT_REGISTERS[0].load(Ordering::Acquire);
    if tid == 0 {
        return None;
    }
    let mut regs = [0u64; 6];
    for (r, slot) in regs.iter_mut().zip(&EXIT_REGISTERS[2..]) {
        *r = slot.load(Ordering::Relaxed);
    }
    Some((tid as u32, regs, EXIT_REGISTERS[1].load(Ordering::Relaxed)))
}

static REQUEST: Mutex<Option<ExitPoint>> = Mutex::new(None);

/// The process is ending at `at`: the writer scans before finishing.
pub fn request(at: ExitPoint) {
    if enabled() {
        if let Ok(mut r) = REQUEST.lock() {
            *r = Some(at);
        }
    }
}

/// The pending request, taken (the scan runs at most once per request).
pub fn take_request() -> Option<ExitPoint> {
    REQUEST.lock().ok().and_then(|mut r| r.take())
}

/// The blocks live in the stream written so far (writer thread only).
///
/// A page table over the address space: each 64 KiB of addresses that
/// ever held a block has a leaf of 2,048 bytes, one per 32-byte pair of
/// 16-byte granules. glibc's chunks are at least 32 bytes, so a pair holds
/// at most one block start; its byte says which granule and keeps the low 6
/// bits of the requested size. The rest of the size is recovered at exit
/// from the chunk header glibc keeps before every block ([`resolve_sizes`]):
/// for a chunk that is not `mmap`ed, the usable size exceeds the request by
/// 0 to 40 bytes (alignment, the 32-byte minimum, and the split remainders
/// of `realloc` and `memalign` that are too small to give back), a window
/// narrower than 64. So the table is 1 byte per 32 bytes of heap, whatever
/// the number of blocks (python3 building a 300k dict: ~1 MiB; the
/// previous byte per granule took 2, an 8-byte entry per block 8), and an
/// event is an index into the leaf it shares with its neighbours (one
/// cached look-up per 64 KiB).
///
/// Sizes are kept exactly in `big` for every block that may be an `mmap`ed
/// chunk, whose header does not pin the request: blocks of [`EXACT_FROM`]
/// bytes or more (below glibc's smallest default `mmap` threshold),
/// page-aligned blocks, `realloc`s of such a block, and every block once the
/// program may have lowered that threshold ([`set_exact_sizes`]). (One case
/// is left: glibc `mmap`s a small chunk when it cannot create an arena;
/// the size read back is then the low bits alone.) `spill` holds,
/// with their exact size, addresses that are not 16-aligned and a second
/// start in an occupied pair: neither happens with glibc's blocks, but the
/// table stays exact for any stream.
///
/// **Replayed sizes** ([`Live::use_replayed_sizes`]), when an output can read
/// its allocations back (mlyze, see `TraceWriter::replay_allocations`): the
/// table keeps one bit per 16-byte granule, a block start, and nothing of
/// the size (1 bit per 16 bytes of heap: python3's 300k dict, 0.27 MiB
/// instead of 1.1). At exit the sizes of the blocks still live come from
/// the trace itself, replayed once ([`Live::resolve_replayed`]). `big` and
/// `spill` work as above. While `big` holds fewer than [`EXACT_ROOM`]
/// blocks, a new block keeps its exact size there too: most programs free
/// nearly everything before they exit, and the few survivors then mostly
/// come from the start (python3's from its first 10,500 allocations, when
/// 6,600 blocks are live), so the replay of the whole trace (~10-15 ns an
/// event) is left out when every survivor has its size.
#[derive(Default)]
pub struct Live {
    /// Boxed: growing the list moves pointers, not leaves (no second copy
    /// of the table at the peak), and each leaf is freed once read.
    #[allow(clippy::vec_box)]
    leaves: Vec<Box<[u8; LEAF]>>,
    /// The leaves of the replayed-sizes mode: a start bit per granule.
    #[allow(clippy::vec_box)]
    bits: Vec<Box<[u64; BIT_WORDS]>>,
    replayed: bool,
    /// Leaf index by `address >> 16`.
    index: HashMap<u64, u32, BuildMix>,
    /// The last leaf used: (`address >> 16`, index).
    last: Option<(u64, u32)>,
    big: HashMap<u64, u64, BuildMix>,
    spill: HashMap<u64, u64, BuildMix>,
    /// The blocks with their sizes, once [`Live::resolve_replayed`] ran.
    resolved: Option<Vec<(u64, u64)>>,
    /// Replayed-sizes mode: a bit per hash of every address ever put into
    /// `big` (2^18 bits, never cleared), so most frees skip a lookup there
    /// (python3: once `big` is full of its first blocks, nearly none of its
    /// frees is of a block in `big`).
    maybe_big: Vec<u64>,
    /// Blocks whose sizes the replay at exit looked for (statistics).
    replayed_blocks: usize,
    /// The replay at exit could not read the trace back: the sizes came
    /// from the chunk headers (statistics).
    replay_failed: bool,
    /// The leak scan is off: the table keeps block starts alone, for the
    /// writer's ordering of several threads' messages ([`Live::is_live`]).
    starts_only: bool,
}

/// Words of `Live::maybe_big` (2^18 bits, 32 KiB).
const MAYBE_BIG_WORDS: usize = 4096;

/// The bit of `addr` in `Live::maybe_big`.
#[inline]
fn maybe_big_bit(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 46) as usize
}

/// Replayed-sizes mode: a block allocated while `big` holds fewer than
/// this many keeps its exact size (~280 KiB for the map at most, besides
/// the large blocks it keeps in any case).
pub const EXACT_ROOM: usize = 8192;

/// Words of a replayed-sizes leaf: 4,096 granules of 16 bytes.
const BIT_WORDS: usize = 64;
/// A block whose size the replay did not give (read from its chunk header).
const UNKNOWN: u64 = u64::MAX;

/// Calls `f` with the address of every block start set in `leaf`, the
/// replayed-sizes leaf of the 64 KiB at `page << 16`, in address order.
fn each_start(page: u64, leaf: &[u64; BIT_WORDS], mut f: impl FnMut(u64)) {
    for (w, &word) in leaf.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let b = word.trailing_zeros() as u64;
            word &= word - 1;
            f((page << 16) | (((w as u64) << 6 | b) << 4));
        }
    }
}

/// Pairs of one leaf (64 KiB of addresses).
const LEAF: usize = 2048;
/// Pair codes per granule: the low 6 bits of the size, or [`CODE_BIG`].
const CODES: u8 = 65;
/// Pair code of a block whose size is in `Live::big`.
const CODE_BIG: u8 = 64;
/// Blocks this large keep their exact size (glibc's `mmap` threshold is
/// 128 KiB or more unless the program sets it).
pub const EXACT_FROM: u64 = 64 * 1024;

static EXACT: AtomicBool = AtomicBool::new(false);

/// Every block keeps its exact size from now on: the program may make
/// `mmap`ed chunks of any size (`mallopt(M_MMAP_THRESHOLD)` below
/// [`EXACT_FROM`], `MALLOC_MMAP_THRESHOLD_`, the `glibc.malloc.mmap_threshold`
/// tunable), whose headers do not pin the requested size.
pub fn set_exact_sizes() {
    EXACT.store(true, Ordering::SeqCst);
}

/// Whether the environment lets glibc `mmap` chunks below [`EXACT_FROM`].
pub fn env_lowers_mmap_threshold(
    mmap_threshold: Option<&std::ffi::OsStr>,
    tunables: Option<&std::ffi::OsStr>,
) -> bool {
    mmap_threshold.is_some()
        || tunables.is_some_and(|t| t.to_string_lossy().contains("mmap_threshold"))
}

/// The byte of a pair: 0 for no block, else which granule and the code.
#[inline]
fn pair_byte(odd: bool, code: u8) -> u8 {
    1 + u8::from(odd) * CODES + code
}

/// (odd granule, code) of a non-zero pair byte.
#[inline]
fn pair_decode(b: u8) -> (bool, u8) {
    let x = b - 1;
    (x >= CODES, x % CODES)
}

/// The requested size of a block whose size is `low` modulo 64, from the
/// chunk header word before it; `None` when the header cannot be a live
/// chunk that pins it (`mmap`ed, or not a chunk size).
pub fn size_from_header(low: u64, header: u64) -> Option<u64> {
    let chunk = header & !7;
    if header & 2 != 0 || chunk < 32 || !chunk.is_multiple_of(16) {
        return None;
    }
    let usable = chunk - 8;
    usable.checked_sub(usable.wrapping_sub(low) & 63)
}

/// A multiplicative hasher for the leaf index (keys are page numbers).
#[derive(Default, Clone, Copy)]
pub struct BuildMix;

pub struct Mix(u64);

impl std::hash::BuildHasher for BuildMix {
    type Hasher = Mix;
    fn build_hasher(&self) -> Mix {
        Mix(0)
    }
}

impl std::hash::Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ self.0)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

impl Live {
    /// The leaf and pair of a 16-aligned address (`create`: make the leaf
    /// when missing).
    #[inline]
    fn slot(&mut self, addr: u64, create: bool) -> Option<(usize, usize)> {
        let page = addr >> 16;
        let pair = ((addr >> 5) as usize) & (LEAF - 1);
        if let Some((p, i)) = self.last {
            if p == page {
                return Some((i as usize, pair));
            }
        }
        let i = match self.index.get(&page) {
            Some(&i) => i,
            None if create => {
                let i = if self.replayed {
                    self.bits.push(Box::new([0; BIT_WORDS]));
                    self.bits.len() - 1
                } else {
                    self.leaves.push(Box::new([0; LEAF]));
                    self.leaves.len() - 1
                } as u32;
                self.index.insert(page, i);
                i
            }
            None => return None,
        };
        self.last = Some((page, i));
        Some((i as usize, pair))
    }

    #[cfg(test)]
    pub fn alloc(&mut self, addr: u64, size: u64) {
        self.alloc_with(addr, size, false);
    }

    /// Whether the live block at `addr` keeps its exact size (then a
    /// `realloc` of it must too: glibc can shrink an `mmap`ed chunk in
    /// place, or `mremap` it, to any size).
    pub fn is_exact(&mut self, addr: u64) -> bool {
        if addr & 15 != 0 || self.spill.contains_key(&addr) {
            return true;
        }
        if self.replayed {
            return self.big.contains_key(&addr);
        }
        match self.slot(addr, false) {
            Some((leaf, p)) => {
                let b = self.leaves[leaf][p];
                b != 0 && pair_decode(b) == (addr & 16 != 0, CODE_BIG)
            }
            None => false,
        }
    }

    /// Whether a block starts at `addr` in the stream written so far.
    #[inline]
    pub fn is_live(&mut self, addr: u64) -> bool {
        let in_table = addr & 15 == 0
            && match self.slot(addr, false) {
                None => false,
                Some((leaf, _)) if self.replayed => {
                    let g = granule(addr);
                    self.bits[leaf][g >> 6] & (1 << (g & 63)) != 0
                }
                Some((leaf, p)) => {
                    let b = self.leaves[leaf][p];
                    b != 0 && pair_decode(b).0 == (addr & 16 != 0)
                }
            };
        in_table || (!self.spill.is_empty() && self.spill.contains_key(&addr))
    }

    /// Records a block; `exact`: keep its size whole whatever it is.
    pub fn alloc_with(&mut self, addr: u64, size: u64, exact: bool) {
        if !enabled() && !self.starts_only {
            return;
        }
        if addr & 15 != 0 {
            self.spill.insert(addr, size);
            return;
        }
        if !self.spill.is_empty() {
            self.spill.remove(&addr);
        }
        let Some((leaf, p)) = self.slot(addr, true) else {
            return;
        };
        if self.replayed {
            let g = granule(addr);
            self.bits[leaf][g >> 6] |= 1 << (g & 63);
            if self.starts_only {
                return;
            }
            if exact
                || size >= EXACT_FROM
                || addr & 0xfff == 0
                || self.big.len() < EXACT_ROOM
                || EXACT.load(Ordering::Relaxed)
            {
                self.big.insert(addr, size);
                if self.maybe_big.is_empty() {
                    self.maybe_big = vec![0; MAYBE_BIG_WORDS];
                }
                let h = maybe_big_bit(addr);
                self.maybe_big[h >> 6] |= 1 << (h & 63);
            } else {
                self.forget_big(addr);
            }
            return;
        }
        let odd = addr & 16 != 0;
        let old = self.leaves[leaf][p];
        if old != 0 {
            let (o, code) = pair_decode(old);
            if o != odd {
                // The other granule of the pair holds a start.
                self.spill.insert(addr, size);
                return;
            }
            if code == CODE_BIG {
                self.big.remove(&addr);
            }
        }
        // Page-aligned blocks (`valloc`, `pvalloc`, which records less than
        // the chunk holds, and `memalign` with an alignment that may `mmap`
        // a small block) keep their size whole; so do 1 in 256 others.
        let code =
            if exact || size >= EXACT_FROM || addr & 0xfff == 0 || EXACT.load(Ordering::Relaxed) {
                self.big.insert(addr, size);
                CODE_BIG
            } else {
                (size & 63) as u8
            };
        self.leaves[leaf][p] = pair_byte(odd, code);
    }

    /// Replayed-sizes mode: `addr` no longer keeps an exact size.
    #[inline]
    fn forget_big(&mut self, addr: u64) {
        let h = maybe_big_bit(addr);
        if self
            .maybe_big
            .get(h >> 6)
            .is_some_and(|w| w & (1 << (h & 63)) != 0)
        {
            self.big.remove(&addr);
        }
    }

    pub fn free(&mut self, addr: u64) {
        if self.replayed {
            if addr & 15 == 0 {
                if let Some((leaf, _)) = self.slot(addr, false) {
                    let g = granule(addr);
                    let word = &mut self.bits[leaf][g >> 6];
                    if *word & (1 << (g & 63)) != 0 {
                        *word &= !(1 << (g & 63));
                        self.forget_big(addr);
                        return;
                    }
                }
            }
            if !self.spill.is_empty() {
                self.spill.remove(&addr);
            }
            return;
        }
        if addr & 15 == 0 && !self.leaves.is_empty() {
            if let Some((leaf, p)) = self.slot(addr, false) {
                let b = self.leaves[leaf][p];
                if b != 0 {
                    let (o, code) = pair_decode(b);
                    if o == (addr & 16 != 0) {
                        self.leaves[leaf][p] = 0;
                        if code == CODE_BIG {
                            self.big.remove(&addr);
                        }
                        return;
                    }
                }
            }
        }
        if !self.spill.is_empty() {
            self.spill.remove(&addr);
        }
    }

    /// The blocks sorted by address, with their requested sizes (read from
    /// the chunk headers through `mem` where the table keeps only the low
    /// bits); the table is emptied and its memory given back (it must not
    /// be found by the scan). Each leaf is freed once read, so the peak is
    /// the table plus the result.
    fn take_sorted(&mut self, mem: &mut dyn Memory) -> Vec<(u64, u64)> {
        if self.replayed {
            let mut v = self.resolved.take().unwrap_or_else(|| self.take_starts());
            let unknown: Vec<u32> = (0..v.len() as u32)
                .filter(|&i| v[i as usize].1 == UNKNOWN)
                .collect();
            resolve_usable(&mut v, &unknown, mem);
            let big = std::mem::take(&mut self.big);
            let spill = std::mem::take(&mut self.spill);
            if !spill.is_empty() || !big.is_empty() {
                v.extend(spill);
                v.extend(big);
                v.sort_unstable();
            }
            return v;
        }
        let mut leaves: Vec<Option<Box<[u8; LEAF]>>> = std::mem::take(&mut self.leaves)
            .into_iter()
            .map(Some)
            .collect();
        let index = std::mem::take(&mut self.index);
        let mut big = std::mem::take(&mut self.big);
        let spill = std::mem::take(&mut self.spill);
        self.last = None;
        let mut pages: Vec<(u64, u32)> = index.into_iter().collect();
        pages.sort_unstable();
        let mut v = Vec::new();
        // Indices into `v` whose size is still the low 6 bits.
        let mut pending: Vec<u32> = Vec::new();
        for (page, i) in pages {
            let Some(leaf) = leaves.get_mut(i as usize).and_then(Option::take) else {
                continue;
            };
            for (p, &b) in leaf.iter().enumerate() {
                if b == 0 {
                    continue;
                }
                let (odd, code) = pair_decode(b);
                let addr = (page << 16) | ((p as u64) << 5) | (u64::from(odd) << 4);
                if code == CODE_BIG {
                    v.push((addr, big.remove(&addr).unwrap_or(0)));
                } else {
                    pending.push(v.len() as u32);
                    v.push((addr, u64::from(code)));
                }
            }
        }
        resolve_sizes(&mut v, &pending, mem);
        if !spill.is_empty() || !big.is_empty() {
            v.extend(spill);
            v.extend(big);
            v.sort_unstable();
        }
        v
    }
}

impl Live {
    /// Switches to the replayed-sizes mode (see [`Live`]); before the first
    /// block.
    pub fn use_replayed_sizes(&mut self) {
        debug_assert!(self.index.is_empty());
        self.replayed = true;
    }

    pub fn replayed_sizes(&self) -> bool {
        self.replayed && !self.starts_only
    }

    /// With the leak scan off: keeps the block starts alone (a bit per
    /// 16-byte granule of heap), which [`Live::is_live`] reads; before the
    /// first block.
    pub fn use_starts_only(&mut self) {
        debug_assert!(self.index.is_empty());
        self.replayed = true;
        self.starts_only = true;
    }

    /// The addresses of the live blocks, sorted: those [`Live::take_sorted`]
    /// will give, before any replay of their sizes. Replayed-sizes mode only.
    pub fn sorted_addresses(&self) -> Vec<u64> {
        let mut pages: Vec<(u64, u32)> = self.index.iter().map(|(&p, &i)| (p, i)).collect();
        pages.sort_unstable();
        // Sized once (see `resolve_replayed`).
        let mut v = Vec::with_capacity(self.start_bits() + self.spill.len());
        for (page, i) in pages {
            each_start(page, &self.bits[i as usize], |addr| {
                if !self.big.contains_key(&addr) {
                    v.push(addr);
                }
            });
        }
        if !self.spill.is_empty() || !self.big.is_empty() {
            v.extend(self.spill.keys().chain(self.big.keys()));
            v.sort_unstable();
        }
        v
    }

    /// Block starts set in the replayed-sizes leaves (those in `big` too).
    fn start_bits(&self) -> usize {
        (self.bits.iter().flat_map(|l| l.iter()))
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// The starts of the live blocks not kept in `big`, sorted, with
    /// [`UNKNOWN`] sizes; the bit leaves are freed as they are read.
    fn take_starts(&mut self) -> Vec<(u64, u64)> {
        let mut leaves: Vec<Option<Box<[u64; BIT_WORDS]>>> = std::mem::take(&mut self.bits)
            .into_iter()
            .map(Some)
            .collect();
        let index = std::mem::take(&mut self.index);
        self.last = None;
        let mut pages: Vec<(u64, u32)> = index.into_iter().collect();
        pages.sort_unstable();
        let mut v = Vec::new();
        for (page, i) in pages {
            let Some(leaf) = leaves.get_mut(i as usize).and_then(Option::take) else {
                continue;
            };
            each_start(page, &leaf, |addr| {
                if !self.big.contains_key(&addr) {
                    v.push((addr, UNKNOWN));
                }
            });
        }
        v
    }

    /// How many live blocks the replay at exit had to find (0: no replay).
    pub fn replayed_blocks(&self) -> usize {
        self.replayed_blocks
    }

    /// Whether the replay at exit failed to read the trace back.
    pub fn replay_failed(&self) -> bool {
        self.replay_failed
    }

    /// Gives the live blocks their sizes from `replay`, which calls its
    /// argument with `(address, size)` for every allocation written, in order,
    /// and returns whether it could (when not, or for a block it did not
    /// name, the size is read from the chunk header at the scan: the usable
    /// size, up to 40 bytes more than requested). Replayed-sizes mode only.
    pub fn resolve_replayed(&mut self, replay: impl FnOnce(&mut dyn FnMut(u64, u64)) -> bool) {
        if !self.replayed {
            return;
        }
        // Every allocation of the trace is looked up (git: ~600k of them
        // for 33,000 survivors, most at addresses the survivors reuse): in
        // the start bits themselves, a start's entry found by its rank (the
        // starts before its word, counted once here, and the set bits below
        // it in the word). A hash map of the survivors took twice as long:
        // nearly every lookup missed the cache, the bits are 1/128 of the
        // heap.
        const IN_BIG: u32 = u32::MAX;
        let mut pages: Vec<(u64, u32)> = self.index.iter().map(|(&p, &i)| (p, i)).collect();
        pages.sort_unstable();
        let mut ranks = vec![[0u32; BIT_WORDS]; self.bits.len()];
        // Sized once: growing them in the writer's arena at exit, after the
        // run's frees, cost a consolidation of its free chunks at every step
        // (perl: 8 -> 80 ms).
        let starts = self.start_bits();
        // By rank: the start's index in `v`, or IN_BIG.
        let mut at: Vec<u32> = Vec::with_capacity(starts);
        // Room for `spill` and `big` too, which `take_sorted` appends: a
        // growing list would leave a stale copy of the blocks' addresses.
        let mut v = Vec::with_capacity(starts + self.spill.len());
        for &(page, i) in &pages {
            for (w, &word) in self.bits[i as usize].iter().enumerate() {
                ranks[i as usize][w] = at.len() as u32;
                let mut word = word;
                while word != 0 {
                    let b = word.trailing_zeros() as u64;
                    word &= word - 1;
                    let addr = (page << 16) | (((w as u64) << 6 | b) << 4);
                    if self.big.contains_key(&addr) {
                        at.push(IN_BIG);
                    } else {
                        at.push(v.len() as u32);
                        v.push((addr, UNKNOWN));
                    }
                }
            }
        }
        self.replayed_blocks = v.len();
        // Without a block to find (every survivor keeps its size in `big`
        // or `spill`) the trace is not replayed.
        if !v.is_empty() {
            let ok = replay(&mut |a, s| {
                if a & 15 != 0 {
                    return;
                }
                let Some((leaf, _)) = self.slot(a, false) else {
                    return;
                };
                let g = granule(a);
                let word = self.bits[leaf][g >> 6];
                if word & (1 << (g & 63)) == 0 {
                    return;
                }
                let below = (word & ((1u64 << (g & 63)) - 1)).count_ones();
                let j = at[(ranks[leaf][g >> 6] + below) as usize];
                if j != IN_BIG {
                    v[j as usize].1 = s;
                }
            });
            self.replay_failed = !ok;
            if !ok {
                for e in &mut v {
                    e.1 = UNKNOWN;
                }
            }
        }
        self.bits = Vec::new();
        self.index = HashMap::default();
        self.last = None;
        self.resolved = Some(v);
    }
}

/// For the blocks `v[unknown]`: the usable size from the chunk header (the
/// fallback of the replayed-sizes mode); blocks whose header cannot be read
/// get 0 bytes.
fn resolve_usable(v: &mut [(u64, u64)], unknown: &[u32], mem: &mut dyn Memory) {
    for &i in unknown {
        let e = &mut v[i as usize];
        let mut word = [0u8; 8];
        let header =
            (mem.read(e.0.wrapping_sub(8), &mut word) == 8).then(|| u64::from_le_bytes(word));
        e.1 = header
            .and_then(|h| size_from_header((h & !7).wrapping_sub(8) & 63, h))
            .unwrap_or(0);
    }
}

/// The granule of a 16-aligned address within its 64 KiB leaf.
#[inline]
fn granule(addr: u64) -> usize {
    ((addr >> 4) & 4095) as usize
}

/// Replaces the low 6 bits held for the blocks `v[pending]` by their
/// requested sizes, from the chunk headers (8 bytes before each block),
/// read many at a time. A header that cannot be read or does not pin the
/// size (a block freed by another thread meanwhile) leaves the low bits.
fn resolve_sizes(v: &mut [(u64, u64)], pending: &[u32], mem: &mut dyn Memory) {
    const HEADERS: usize = 512;
    let mut buf = [0u8; HEADERS * 8];
    let mut ranges: Vec<(u64, usize)> = Vec::with_capacity(HEADERS);
    for ids in pending.chunks(HEADERS) {
        ranges.clear();
        ranges.extend(ids.iter().map(|&i| (v[i as usize].0.wrapping_sub(8), 8)));
        let got = mem.read_many(&ranges, &mut buf[..ids.len() * 8]);
        for (k, &i) in ids.iter().enumerate() {
            let mut word = [0u8; 8];
            let header = if (k + 1) * 8 <= got {
                word.copy_from_slice(&buf[k * 8..k * 8 + 8]);
                Some(u64::from_le_bytes(word))
            } else if mem.read(v[i as usize].0.wrapping_sub(8), &mut word) == 8 {
                Some(u64::from_le_bytes(word))
            } else {
                None
            };
            let e = &mut v[i as usize];
            if let Some(size) = header.and_then(|h| size_from_header(e.1, h)) {
                e.1 = size;
            }
        }
    }
}

// ---------------------------------------------------------------- memory

/// Reads the process's memory without faulting: the bytes copied (a prefix of
/// `buf`; fewer when the range runs into unreadable memory).
pub trait Memory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize;

    /// Reads the ranges `(address, length)` one after the other into `buf`
    /// (their lengths add up to its length); returns the bytes copied, which
    /// stop at the first range that could not be read whole.
    fn read_many(&mut self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
        let mut off = 0;
        for &(a, len) in ranges {
            let n = self.read(a, &mut buf[off..off + len]);
            off += n;
            if n < len {
                break;
            }
        }
        off
    }

    /// The parts of `[start, end)` that may hold anything, from `start` up
    /// to a point it returns (`end` at most): at most [`RUNS`] of them, in
    /// order, into `runs`, with their count. Pages a private mapping never
    /// wrote (nothing mapped there, nothing swapped out) read as zeros or
    /// as the bytes of the mapped file, never as an address this process
    /// made: the scan need not read them. By default everything may.
    fn populated(&mut self, start: u64, end: u64, runs: &mut Runs) -> (usize, u64) {
        runs[0] = (start, end);
        (1, end)
    }
}

/// Runs of pages [`Memory::populated`] gives at a time: a window of
/// [`PAGEMAP_WINDOW`] pages holds at most half as many runs.
const RUNS: usize = PAGEMAP_WINDOW / 2;
type Runs = [(u64, u64); RUNS];

/// Pages whose `/proc/self/pagemap` entries are read at once (2 MiB of
/// memory, 4 KiB of entries).
const PAGEMAP_WINDOW: usize = 512;

/// Ranges shorter than this are read without asking which pages hold
/// anything: a read of a few pages costs about what the question does.
const PAGEMAP_FROM: u64 = 4 * PAGE;

/// Which pages of this process's private mappings were ever written, from
/// the kernel's page tables (`/proc/self/pagemap`: bit 63 a page is mapped,
/// bit 62 it is swapped out; neither, and the page was never written or was
/// discarded). A Java virtual machine commits a heap far larger than it
/// touches (OpenJDK 17 on a small program: 944 MB, 193 MB resident): the
/// exit scan read all of it, mapping the zero page into every untouched one.
#[derive(Default)]
struct PageTable {
    /// The private mappings of the scan's snapshot of the mappings, sorted.
    /// Shared ones are left out: a page of those can hold what another
    /// mapping or process wrote while nothing is mapped here.
    private: Vec<(u64, u64)>,
    /// `None` until first needed; `Some(None)` when it cannot be read.
    file: Option<Option<sys::ProcFile>>,
    /// Bytes not read because no page there was ever written.
    skipped: u64,
}

impl PageTable {
    fn new(maps: &[Mapping]) -> PageTable {
        PageTable {
            private: (maps.iter())
                .filter(|m| !m.shared)
                .map(|m| (m.start, m.end))
                .collect(),
            ..PageTable::default()
        }
    }

    /// See [`Memory::populated`].
    fn populated(&mut self, start: u64, end: u64, runs: &mut Runs) -> (usize, u64) {
        let whole = |runs: &mut Runs| {
            runs[0] = (start, end);
            (1, end)
        };
        let i = self.private.partition_point(|m| m.0 <= start);
        if end.saturating_sub(start) < PAGEMAP_FROM || i == 0 || end > self.private[i - 1].1 {
            return whole(runs);
        }
        let file = self.file.get_or_insert_with(|| {
            sys::ProcFile::open(c"/proc/thread-self/pagemap")
                .or_else(|| sys::ProcFile::open(c"/proc/self/pagemap"))
        });
        let Some(file) = file else {
            return whole(runs);
        };
        let first = start / PAGE;
        let last = end.div_ceil(PAGE).min(first + PAGEMAP_WINDOW as u64);
        let mut buf = [0u8; 8 * PAGEMAP_WINDOW];
        let want = 8 * (last - first) as usize;
        let got = match file.read_at(&mut buf[..want], first * 8) {
            Some(n) if n >= 8 => n / 8,
            _ => {
                self.file = Some(None);
                return whole(runs);
            }
        };
        let upto = ((first + got as u64) * PAGE).min(end);
        let mut n = 0;
        let mut open: Option<u64> = None;
        for (k, e) in buf[..got * 8].chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into().unwrap_or([0xff; 8]));
            let page = (first + k as u64) * PAGE;
            match (e >> 62 != 0, open) {
                (true, None) => open = Some(page.max(start)),
                (false, Some(s)) => {
                    runs[n] = (s, page);
                    n += 1;
                    open = None;
                }
                _ => {}
            }
        }
        if let Some(s) = open {
            runs[n] = (s, upto);
            n += 1;
        }
        let kept: u64 = runs[..n].iter().map(|r| r.1 - r.0).sum();
        self.skipped += (upto - start) - kept;
        (n, upto)
    }
}

/// The process's own memory (see the module documentation).
struct SelfMemory {
    pid: i32,
    /// `process_vm_readv` was refused: read directly inside `readable`.
    direct: bool,
    /// The ranges `/proc/self/maps` lists as readable (anonymous, special
    /// or writable), read when the kernel first refuses (`None` until then).
    readable: Option<Vec<(u64, u64)>>,
    /// Anonymous mappings (sorted) whose batched block reads are plain
    /// copies: set only while nothing else can unmap memory ([`hold_exit`]).
    fast: Vec<(u64, u64)>,
    pages: PageTable,
}

impl SelfMemory {
    /// Reads of this process's memory through the kernel, as this thread:
    /// its id, not the process's (the kernel reads the memory of the task
    /// named, and an exited main thread has none).
    fn this_thread() -> SelfMemory {
        SelfMemory {
            pid: sys::raw_gettid() as i32,
            direct: false,
            readable: None,
            fast: Vec::new(),
            pages: PageTable::default(),
        }
    }

    fn vm_read(&self, addr: u64, buf: &mut [u8]) -> isize {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes the live, writable `buf`; the kernel reads
        // the remote range on our behalf and reports unmapped pages as an
        // error instead of a fault.
        unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                self.pid,
                &local as *const libc::iovec,
                1usize,
                &remote as *const libc::iovec,
                1usize,
                0usize,
            ) as isize
        }
    }
}

impl SelfMemory {
    /// Whether [addr, addr + len) lies inside one of the `fast` mappings.
    fn fast_contains(&self, addr: u64, len: usize) -> bool {
        let i = self.fast.partition_point(|m| m.0 <= addr);
        i > 0 && addr.saturating_add(len as u64) <= self.fast[i - 1].1
    }

    /// Copies `buf.len()` bytes from `addr` when they lie inside one of the
    /// `fast` mappings (false, and nothing copied, otherwise).
    fn copy_fast(&self, addr: u64, buf: &mut [u8]) -> bool {
        if self.fast.is_empty() || !self.fast_contains(addr, buf.len()) {
            return false;
        }
        // SAFETY: [addr, addr + len) lies inside an anonymous mapping of the
        // /proc/self/maps snapshot `run` took after every other thread of
        // the program was found gone, with the exiting thread waiting, its
        // signals blocked ([`hold_exit`]): only the writer could unmap it,
        // by freeing a buffer of its own, and those the plan leaves out (see
        // `run`); `buf` is ours and `len` long.
        unsafe {
            core::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), buf.len())
        };
        true
    }
}

impl Memory for SelfMemory {
    fn populated(&mut self, start: u64, end: u64, runs: &mut Runs) -> (usize, u64) {
        self.pages.populated(start, end, runs)
    }

    fn read_many(&mut self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
        if !self.fast.is_empty() && ranges.iter().all(|&(a, len)| self.fast_contains(a, len)) {
            let mut off = 0;
            for &(a, len) in ranges {
                // Inside `buf`: the lengths add up to at most its length.
                self.copy_fast(a, &mut buf[off..off + len]);
                off += len;
            }
            return off;
        }
        if self.direct || ranges.len() <= 1 {
            return default_read_many(self, ranges, buf);
        }
        let mut local = Vec::with_capacity(ranges.len());
        let mut remote = Vec::with_capacity(ranges.len());
        let mut off = 0;
        for &(a, len) in ranges {
            local.push(libc::iovec {
                iov_base: buf[off..].as_mut_ptr().cast(),
                iov_len: len,
            });
            remote.push(libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: len,
            });
            off += len;
        }
        // SAFETY: every local iovec lies inside `buf` (the lengths add up to
        // at most its length); remote ranges are read by the kernel, which
        // stops at the first unreadable one instead of faulting.
        let n = unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                self.pid,
                local.as_ptr(),
                local.len(),
                remote.as_ptr(),
                remote.len(),
                0usize,
            )
        };
        if n < 0 {
            return default_read_many(self, ranges, buf);
        }
        n as usize
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        if buf.is_empty() {
            return 0;
        }
        if self.copy_fast(addr, buf) {
            return buf.len();
        }
        if !self.direct {
            let n = self.vm_read(addr, buf);
            if n >= 0 {
                return n as usize;
            }
            let e = sys::errno();
            if e != libc::ENOSYS && e != libc::EPERM {
                return 0;
            }
            self.direct = true;
        }
        let end = addr.saturating_add(buf.len() as u64);
        let readable = self
            .readable
            .get_or_insert_with(|| readable_ranges(&parse_maps(&own_maps())));
        let Some(&(_, hi)) = readable.iter().find(|&&(lo, hi)| addr >= lo && addr < hi) else {
            return 0;
        };
        let n = (end.min(hi) - addr) as usize;
        // SAFETY: [addr, addr + n) lies inside a mapping /proc/self/maps
        // listed as readable anonymous or private memory.
        unsafe { core::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), n) };
        n
    }
}

/// The ranges of `maps` a direct read may copy from: readable anonymous
/// or special (`[heap]`, `[stack]`) mappings, and writable ones.
fn readable_ranges(maps: &[Mapping]) -> Vec<(u64, u64)> {
    maps.iter()
        .filter(|m| m.read && (m.anonymous() || m.path.starts_with('[') || m.write))
        .map(|m| (m.start, m.end))
        .collect()
}

/// [`Memory::read_many`] one range at a time.
fn default_read_many(mem: &mut dyn Memory, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
    let mut off = 0;
    for &(a, len) in ranges {
        let n = mem.read(a, &mut buf[off..off + len]);
        off += n;
        if n < len {
            break;
        }
    }
    off
}

// ---------------------------------------------------------------- marking

const UNREACHED: u8 = 0;
const POSSIBLE: u8 = 1;
const REACHABLE: u8 = 2;
const INDIRECT: u8 = 3;

/// Bytes read at a time.
const SCRATCH: usize = 64 * 1024;
/// Blocks read by one system call at most (below the kernel's IOV_MAX).
const BATCH: usize = 512;

/// The classification state over a sorted block array.
pub struct Classifier<'a> {
    blocks: &'a [(u64, u64)],
    /// The C library's writable data ([`Classifier::set_allocator_data`]).
    allocator_data: Vec<(u64, u64)>,
    /// The blocks by 64 KiB region (see [`Regions`]).
    regions: Regions,
    state: Vec<u8>,
    work: Vec<u32>,
    scratch: Vec<u8>,
    /// Candidate words of the range being scanned (reused).
    found: Vec<u64>,
    lo: u64,
    hi: u64,
}

/// Regions of 2^16 bytes.
const REGION_SHIFT: u32 = 16;

/// One region's blocks: the first block overlapping it, and how many do.
#[derive(Clone, Copy)]
struct Region {
    /// Region number + 1 (0: empty slot).
    key: u64,
    first: u32,
    count: u32,
    /// Its index in `Regions::ranks`, or with [`STEPS`] set in
    /// `Regions::steps`, or [`NO_AUX`].
    aux: u32,
}

const NO_AUX: u32 = u32::MAX;
const STEPS: u32 = 1 << 31;

/// Blocks overlapping a region from which on its lookups count starts
/// ([`Rank`]) instead of searching: a binary search over a region of
/// small blocks (~2,000 for 32-byte ones) takes 11 dependent loads a word.
/// A rank costs 648 bytes, under 11 a block.
const RANK_FROM: u32 = 64;
/// Blocks overlapping a region from which on (up to [`RANK_FROM`], or 255
/// when the region has no rank) its lookups start near the word
/// ([`Steps`]): perl's exit scan was mostly binary searches over regions of
/// 8 to 15 arenas of a few KiB. 64 bytes, under 9 a block.
const STEPS_FROM: u32 = 8;
/// The block starts of one 64 KiB region, a bit per 16-byte granule: the
/// block holding a word is the last one starting at or before it, found by
/// counting the starts up to its granule (two loads and a population count,
/// whatever the number of blocks).
struct Rank {
    bits: [u64; 64],
    /// Starts in the words of `bits` before each.
    before: [u16; 64],
    /// 1 when the region's first block starts in an earlier region.
    carried: u16,
}

/// The live blocks by 64 KiB region: a pointer's block is then searched
/// among the few blocks overlapping its region, not among all of them (the
/// scan looks up every word of every live block that falls between the
/// lowest and the highest block: 14 dependent cache misses a word for a
/// binary search over perl's 13,000 blocks). Open addressing, at most half
/// full. Empty (every lookup falls back to the whole list) when the blocks
/// span too many regions for the table to stay small.
struct Regions {
    slots: Vec<Region>,
    ranks: Vec<Rank>,
    steps: Vec<Steps>,
}

impl Regions {
    fn new(blocks: &[(u64, u64)]) -> Regions {
        let empty = Regions {
            slots: Vec::new(),
            ranks: Vec::new(),
            steps: Vec::new(),
        };
        // Regions overlapped, counted before anything is allocated.
        let mut touched = 0u64;
        let mut last = u64::MAX;
        for &(a, s) in blocks {
            let (r0, r1) = (
                a >> REGION_SHIFT,
                (a.saturating_add(s.max(1)) - 1) >> REGION_SHIFT,
            );
            touched += r1 - r0 + 1 - u64::from(r0 == last);
            last = r1;
        }
        if touched == 0 || touched > 4 * blocks.len() as u64 + 65_536 {
            return empty;
        }
        let cap = (touched as usize * 2).next_power_of_two();
        let mut t = Regions {
            slots: vec![
                Region {
                    key: 0,
                    first: 0,
                    count: 0,
                    aux: NO_AUX,
                };
                cap
            ],
            ranks: Vec::new(),
            steps: Vec::new(),
        };
        for (i, &(a, s)) in blocks.iter().enumerate() {
            for r in a >> REGION_SHIFT..=(a.saturating_add(s.max(1)) - 1) >> REGION_SHIFT {
                let slot = t.slot(r);
                if slot.key == 0 {
                    *slot = Region {
                        key: r + 1,
                        first: i as u32,
                        count: 0,
                        aux: NO_AUX,
                    };
                }
                slot.count += 1;
            }
        }
        let ranks = t.slots.iter().filter(|e| e.count >= RANK_FROM).count();
        let steps = t.slots.iter().filter(|e| e.count >= STEPS_FROM).count() - ranks;
        t.ranks.reserve_exact(ranks);
        t.steps.reserve_exact(steps);
        for k in 0..t.slots.len() {
            let e = t.slots[k];
            let near = &blocks[e.first as usize..][..e.count as usize];
            let r = e.key.wrapping_sub(1);
            if e.count >= RANK_FROM {
                if let Some(rank) = Rank::new(r, near) {
                    t.slots[k].aux = t.ranks.len() as u32;
                    t.ranks.push(rank);
                    continue;
                }
            }
            if e.count >= STEPS_FROM && e.count < 256 {
                t.slots[k].aux = STEPS | t.steps.len() as u32;
                t.steps.push(Steps::new(r, near));
            }
        }
        t
    }

    #[inline]
    fn index(&self, r: u64) -> usize {
        (r.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (self.slots.len() - 1)
    }

    fn slot(&mut self, r: u64) -> &mut Region {
        let mut i = self.index(r);
        while self.slots[i].key != 0 && self.slots[i].key != r + 1 {
            i = (i + 1) & (self.slots.len() - 1);
        }
        &mut self.slots[i]
    }

    /// Region `r`'s entry; one with no blocks when none overlaps it, `None`
    /// when the table was not built.
    #[inline]
    fn get(&self, r: u64) -> Option<Region> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.index(r);
        loop {
            let e = self.slots[i];
            if e.key == r + 1 || e.key == 0 {
                return Some(e);
            }
            i = (i + 1) & (self.slots.len() - 1);
        }
    }
}

impl Rank {
    /// The starts of `blocks`, the sorted blocks overlapping region `r`;
    /// `None` when two could share a granule (a start not 16-aligned: never
    /// a glibc block, but the table takes any stream).
    fn new(r: u64, blocks: &[(u64, u64)]) -> Option<Rank> {
        let mut rank = Rank {
            bits: [0; 64],
            before: [0; 64],
            carried: 0,
        };
        for &(a, _) in blocks {
            if a >> REGION_SHIFT != r {
                // Only the first block can start before the region.
                rank.carried = 1;
                continue;
            }
            if a & 15 != 0 {
                return None;
            }
            let g = (a >> 4) as usize & 4095;
            rank.bits[g >> 6] |= 1 << (g & 63);
        }
        let mut n = 0u16;
        for k in 0..64 {
            rank.before[k] = n;
            n += rank.bits[k].count_ones() as u16;
        }
        Some(rank)
    }

    /// How many of the region's blocks start at or before `w` (in it),
    /// counting the one carried from an earlier region.
    #[inline]
    fn upto(&self, w: u64) -> usize {
        let g = (w >> 4) as usize & 4095;
        let (k, b) = (g >> 6, g & 63);
        let mask = u64::MAX >> (63 - b);
        usize::from(self.before[k] + self.carried) + (self.bits[k] & mask).count_ones() as usize
    }
}

/// For each KiB of a region, its last block starting before that KiB (as
/// an index among the region's blocks; 0 when none does): the block holding
/// a word is that one or one starting after it in the same KiB.
struct Steps([u8; 64]);

impl Steps {
    /// Over `blocks`, the sorted blocks (fewer than 256) overlapping region `r`.
    fn new(r: u64, blocks: &[(u64, u64)]) -> Steps {
        let mut steps = [0u8; 64];
        let mut i = 0usize;
        for (j, step) in steps.iter_mut().enumerate() {
            let from = (r << REGION_SHIFT) + ((j as u64) << 10);
            while i + 1 < blocks.len() && blocks[i + 1].0 < from {
                i += 1;
            }
            *step = i as u8;
        }
        Steps(steps)
    }

    /// The last of `near` (the region's blocks) starting at or before `w`.
    #[inline]
    fn last_start(&self, near: &[(u64, u64)], w: u64) -> Option<usize> {
        let mut i = usize::from(self.0[(w >> 10) as usize & 63]);
        while i + 1 < near.len() && near[i + 1].0 <= w {
            i += 1;
        }
        (near.get(i)?.0 <= w).then_some(i)
    }
}

impl<'a> Classifier<'a> {
    /// `blocks` sorted by address, not overlapping. Every buffer is allocated
    /// here, at its final size.
    pub fn new(blocks: &'a [(u64, u64)]) -> Classifier<'a> {
        let lo = blocks.first().map_or(0, |b| b.0);
        let hi = blocks
            .iter()
            .map(|&(a, s)| a.saturating_add(s.max(1)))
            .max()
            .unwrap_or(0);
        Classifier {
            blocks,
            allocator_data: Vec::new(),
            regions: Regions::new(blocks),
            state: vec![UNREACHED; blocks.len()],
            // Each block is pushed at most twice while marking from the roots
            // (unreached → possible → reachable) and once in the clique pass.
            work: Vec::with_capacity(2 * blocks.len() + 1),
            scratch: vec![0; SCRATCH],
            found: Vec::new(),
            lo,
            hi,
        }
    }

    /// Address ranges of the classifier's own buffers (never roots).
    pub fn own_ranges(&self) -> Vec<(u64, u64)> {
        let r = |p: *const u8, bytes: usize| (p as u64, p as u64 + bytes as u64);
        vec![
            r(
                self.blocks.as_ptr().cast(),
                std::mem::size_of_val(self.blocks),
            ),
            r(self.state.as_ptr(), self.state.capacity()),
            r(
                self.regions.slots.as_ptr().cast(),
                self.regions.slots.capacity() * std::mem::size_of::<Region>(),
            ),
            r(
                self.regions.ranks.as_ptr().cast(),
                self.regions.ranks.capacity() * std::mem::size_of::<Rank>(),
            ),
            r(
                self.regions.steps.as_ptr().cast(),
                self.regions.steps.capacity() * std::mem::size_of::<Steps>(),
            ),
            r(self.work.as_ptr().cast(), self.work.capacity() * 4),
            r(self.scratch.as_ptr(), self.scratch.capacity()),
        ]
    }

    /// The block `w` points into, if any.
    #[inline]
    fn find(&self, w: u64) -> Option<usize> {
        if w < self.lo || w >= self.hi {
            return None;
        }
        // The blocks overlapping w's region (all of them when the table
        // was not built), counted or searched alone.
        let i = match self.regions.get(w >> REGION_SHIFT) {
            Some(e) if e.aux == NO_AUX => {
                let first = e.first as usize;
                let near = &self.blocks[first..first + e.count as usize];
                first + near.partition_point(|b| b.0 <= w).checked_sub(1)?
            }
            Some(e) if e.aux & STEPS != 0 => {
                let first = e.first as usize;
                let near = &self.blocks[first..first + e.count as usize];
                first + self.regions.steps[(e.aux & !STEPS) as usize].last_start(near, w)?
            }
            Some(e) => {
                let n = self.regions.ranks[e.aux as usize].upto(w);
                e.first as usize + n.checked_sub(1)?
            }
            None => self.blocks.partition_point(|b| b.0 <= w).checked_sub(1)?,
        };
        let (a, s) = self.blocks[i];
        (w - a < s || w == a).then_some(i)
    }

    fn push(&mut self, i: usize) {
        if self.work.len() < self.work.capacity() {
            self.work.push(i as u32);
        }
    }

    /// A word found in a root (`definite`) or in a block being scanned from
    /// the roots (`definite` when that block is reachable).
    fn reach(&mut self, w: u64, definite: bool) {
        let Some(i) = self.find(w) else { return };
        if self.state[i] == REACHABLE {
            return;
        }
        if w == self.blocks[i].0 && definite {
            self.state[i] = REACHABLE;
            self.push(i);
        } else if self.state[i] == UNREACHED {
            self.state[i] = POSSIBLE;
            self.push(i);
        }
    }

    /// A word found in a lost block of the clique led by `leader`.
    fn gather(&mut self, w: u64, leader: usize) {
        let Some(i) = self.find(w) else { return };
        if i != leader && self.state[i] == UNREACHED {
            self.state[i] = INDIRECT;
            self.push(i);
        }
    }

    /// Calls `f` on every aligned word of [start, end) that can be read.
    fn words(
        scratch: &mut [u8],
        mem: &mut dyn Memory,
        start: u64,
        end: u64,
        mut f: impl FnMut(u64),
    ) {
        let mut at = (start + 7) & !7;
        let end = end & !7;
        let mut runs: Runs = [(0, 0); RUNS];
        while at < end {
            let (n, upto) = mem.populated(at, end, &mut runs);
            for &(a, b) in &runs[..n] {
                Self::read_words(scratch, mem, a, b, &mut f);
            }
            at = upto.max(at + 8);
        }
    }

    /// [`Classifier::words`] of a range read whole.
    fn read_words(
        scratch: &mut [u8],
        mem: &mut dyn Memory,
        mut at: u64,
        end: u64,
        f: &mut impl FnMut(u64),
    ) {
        while at < end {
            let want = ((end - at) as usize).min(scratch.len());
            let got = mem.read(at, &mut scratch[..want]) & !7;
            for c in scratch[..got].chunks_exact(8) {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f(u64::from_le_bytes(b));
            }
            if got == want {
                at += want as u64;
            } else {
                // Unreadable from here: go on at the next page.
                at = ((at + got as u64) | 0xfff) + 1;
            }
        }
    }

    /// The candidate words of [start, end), into `self.found`.
    fn collect(&mut self, mem: &mut dyn Memory, start: u64, end: u64) {
        let (lo, hi) = (self.lo, self.hi);
        let found = &mut self.found;
        found.clear();
        Self::words(&mut self.scratch, mem, start, end, |w| {
            if w >= lo && w < hi {
                found.push(w);
            }
        });
    }

    /// Marks from the words of [start, end), a window at a time: the
    /// candidate words of a whole root range (cc1plus's garbage-collected
    /// arenas, 260 MB) were held at once, ~8 MB at the exit peak.
    fn scan_range(&mut self, mem: &mut dyn Memory, start: u64, end: u64, definite: bool) {
        self.scan_windows(mem, start, end, |c, w| c.reach(w, definite));
    }

    fn scan_windows(
        &mut self,
        mem: &mut dyn Memory,
        start: u64,
        end: u64,
        mut each: impl FnMut(&mut Self, u64),
    ) {
        // 256 KiB: the candidates of a window (up to 256 KiB of them) are
        // alive at the exit's peak with the file's thread's buffers
        // (cc1plus: 1 MiB windows added ~0.8 MB to its peak RSS).
        const WINDOW: u64 = 1 << 18;
        let mut at = start;
        while at < end {
            let to = (at & !7).saturating_add(WINDOW).min(end);
            self.collect(mem, at, to);
            let found = std::mem::take(&mut self.found);
            for &w in &found {
                each(self, w);
            }
            self.found = found;
            at = to;
        }
    }

    /// Scans the blocks on the work list until it is empty: from the roots
    /// (`leader` None) or gathering the clique of `leader`. Small blocks are
    /// read many at a time (one system call per batch).
    fn drain(&mut self, mem: &mut dyn Memory, leader: Option<usize>) {
        let mut batch: Vec<(u64, usize)> = Vec::with_capacity(BATCH);
        let mut ids: Vec<usize> = Vec::with_capacity(BATCH);
        // Blocks of the batch read on their own, after its small ones.
        let mut apart: Vec<usize> = Vec::with_capacity(BATCH);
        while !self.work.is_empty() {
            batch.clear();
            ids.clear();
            apart.clear();
            let mut total = 0usize;
            while let Some(&i) = self.work.last() {
                let (a, s) = self.blocks[i as usize];
                // A block larger than the scratch buffer is read on its own
                // below (only its written pages): nothing of it here.
                let len = if s as usize > SCRATCH { 0 } else { s as usize };
                if !ids.is_empty() && (total + len > SCRATCH || ids.len() == BATCH) {
                    break;
                }
                self.work.pop();
                ids.push(i as usize);
                batch.push((a, len));
                total += len;
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            let got = mem.read_many(&batch, &mut scratch[..total]);
            let mut off = 0usize;
            for (k, &i) in ids.iter().enumerate() {
                let s = self.blocks[i].1;
                let len = batch[k].1;
                let definite = self.state[i] == REACHABLE;
                if off + len <= got && len as u64 == s {
                    let (lo, hi) = (self.lo, self.hi);
                    // Blocks start 16-aligned: whole words from the start.
                    for c in scratch[off..off + len].chunks_exact(8) {
                        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                        if w >= lo && w < hi {
                            match leader {
                                None => self.reach(w, definite),
                                Some(l) => self.gather(w, l),
                            }
                        }
                    }
                } else {
                    // Partly unreadable, or larger than the scratch buffer:
                    // read on its own once the batch's words are all taken,
                    // as that read goes through the scratch buffer.
                    apart.push(i);
                }
                off += len;
            }
            self.scratch = scratch;
            for &i in &apart {
                let (a, s) = self.blocks[i];
                let definite = self.state[i] == REACHABLE;
                self.collect(mem, a, a + s);
                let found = std::mem::take(&mut self.found);
                for &w in &found {
                    match leader {
                        None => self.reach(w, definite),
                        Some(l) => self.gather(w, l),
                    }
                }
                self.found = found;
            }
        }
    }

    /// Marks from the roots: memory ranges, then single words (registers).
    pub fn mark_roots(&mut self, mem: &mut dyn Memory, regions: &[(u64, u64)], words: &[u64]) {
        for &w in words {
            self.reach(w, true);
        }
        self.drain(mem, None);
        for &(start, end) in regions {
            let allocator = self
                .allocator_data
                .iter()
                .any(|&(a, b)| start >= a && end <= b);
            if allocator {
                self.scan_windows(mem, start, end, |c, w| {
                    if !c.is_next_chunk(w) {
                        c.reach(w, true);
                    }
                });
            } else {
                self.scan_range(mem, start, end, true);
            }
            self.drain(mem, None);
        }
    }

    /// The C library's writable data (its `malloc` arena lives there): see
    /// [`Classifier::is_next_chunk`].
    pub fn set_allocator_data(&mut self, ranges: Vec<(u64, u64)>) {
        self.allocator_data = ranges;
    }

    /// Whether `w` is the address of the chunk that follows a block in
    /// glibc's heap, inside the block's requested bytes: the arena keeps
    /// such addresses (its top chunk, its bins' free chunks), and a block's
    /// last requested bytes overlap the next chunk's header when its size is
    /// 1 to 8 more than a multiple of 16 (the chunk is the request plus 8,
    /// rounded up to 16, at least 32; the block starts 16 bytes into it).
    /// Read from the arena, such a word is not a pointer into the block:
    /// valgrind, which replaces the allocator, never sees it.
    fn is_next_chunk(&self, w: u64) -> bool {
        let Some(i) = self.find(w) else { return false };
        let (a, s) = self.blocks[i];
        if w == a || s >= EXACT_FROM {
            return false;
        }
        let chunk = ((s + 8 + 15) & !15).max(32);
        w == a + chunk - 16
    }

    /// Groups the unreached blocks into cliques; returns every block's class.
    pub fn finish(mut self, mem: &mut dyn Memory) -> Vec<LeakKind> {
        for leader in 0..self.blocks.len() {
            if self.state[leader] != UNREACHED {
                continue;
            }
            self.push(leader);
            self.drain(mem, Some(leader));
        }
        self.state
            .iter()
            .map(|&s| match s {
                REACHABLE => LeakKind::Reachable,
                POSSIBLE => LeakKind::Possible,
                INDIRECT => LeakKind::Indirect,
                _ => LeakKind::Definite,
            })
            .collect()
    }
}

// ---------------------------------------------------------------- roots

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    /// `s` in the permissions: shared with other mappings (and processes).
    pub shared: bool,
    pub path: String,
}

impl Mapping {
    fn anonymous(&self) -> bool {
        self.path.is_empty()
    }
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?.as_bytes();
            let (_off, _dev, _inode) = (f.next()?, f.next()?, f.next()?);
            let path = f.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                read: perms.first() == Some(&b'r'),
                write: perms.get(1) == Some(&b'w'),
                shared: perms.get(3) == Some(&b's'),
                path,
            })
        })
        .collect()
}

/// What the root planner knows besides the mappings.
pub struct RootPlan<'a> {
    /// Never scanned: libtracer's writable segments, the writer's stack, the
    /// classifier's buffers; sorted by start and disjoint.
    pub excluded: &'a [(u64, u64)],
    /// Stack pointers of live threads (the exiting one's included).
    pub stack_pointers: &'a [u64],
    /// Live threads whose stack pointer is not known (running).
    pub unknown_threads: usize,
    /// Bytes at the top of a glibc thread stack holding the thread control
    /// block and static TLS.
    pub tcb_extent: u64,
}

/// Whether `reserve` (inaccessible) is the reserved tail of an arena
/// heap whose last writable mapping is `heap` (`heap_piece` tells whether
/// it is one): right above it, up to the heap's 64 MiB bound.
fn heap_reserve(heap: &Mapping, heap_piece: bool, reserve: &Mapping) -> bool {
    heap_piece
        && heap.end == reserve.start
        && (heap.start & !(ARENA_ALIGN - 1)).checked_add(ARENA_ALIGN) == Some(reserve.end)
}

const ARENA_ALIGN: u64 = 64 << 20;
const PAGE: u64 = 4096;

/// Subtracts the `cut` ranges, sorted by start and disjoint
/// ([`sorted_disjoint`]), from [start, end). Only the cuts that overlap are
/// visited: with a thousand threads, each with its lane among the cuts and
/// its stack among the mappings, a pass over every cut for every mapping
/// (a vector made for each) took 30 ms of the exit.
fn subtract(start: u64, end: u64, cut: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    let mut at = start;
    let first = cut.partition_point(|&(_, c1)| c1 <= start);
    for &(c0, c1) in cut[first..].iter().take_while(|&&(c0, _)| c0 < end) {
        if at < c0 {
            out.push((at, c0));
        }
        at = at.max(c1);
    }
    if at < end {
        out.push((at, end));
    }
}

/// `ranges` sorted by start, overlapping and adjacent ones merged, empty
/// ones dropped (what [`subtract`] takes).
fn sorted_disjoint(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.retain(|&(a, b)| a < b);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn two_words(mem: &mut dyn Memory, at: u64) -> Option<[u64; 4]> {
    let mut b = [0u8; 32];
    if mem.read(at, &mut b) < 32 {
        return None;
    }
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    Some([w(0), w(1), w(2), w(3)])
}

/// The end of the writable memory of the non-main arena heap that starts
/// at `m`, if one does: glibc's `heap_info` at the mapping's start, aligned
/// to [`ARENA_ALIGN`] (the arena pointer, the previous heap, the size in
/// use and the size made writable).
fn arena_heap_at(m: &Mapping, mem: &mut dyn Memory) -> Option<u64> {
    if !m.start.is_multiple_of(ARENA_ALIGN) || !m.anonymous() {
        return None;
    }
    match two_words(mem, m.start)? {
        [ar, _prev, size, mprotect]
            if ar != 0
                && size != 0
                && size <= ARENA_ALIGN
                && mprotect >= size
                && mprotect <= ARENA_ALIGN =>
        {
            Some(m.start + mprotect)
        }
        _ => None,
    }
}

/// Which of `maps` (sorted) hold the writable memory of a non-main arena
/// heap: the mapping that starts with its `heap_info` ([`arena_heap_at`]),
/// and the writable anonymous mappings that follow it without a gap within
/// its writable size. A heap may be several mappings: in a forked child,
/// what glibc makes writable after the fork does not merge with the part
/// inherited from the parent.
fn arena_heap_pieces(maps: &[Mapping], mem: &mut dyn Memory) -> Vec<bool> {
    let mut pieces = Vec::with_capacity(maps.len());
    let mut heap_end = 0;
    for (k, m) in maps.iter().enumerate() {
        let piece = if let Some(end) = arena_heap_at(m, mem) {
            heap_end = end;
            true
        } else {
            k > 0
                && pieces[k - 1]
                && maps[k - 1].end == m.start
                && m.read
                && m.write
                && m.anonymous()
                && m.end <= heap_end
        };
        pieces.push(piece);
    }
    pieces
}

/// An `mmap`ed malloc chunk whose header is `[prev, head]` at `at`: prev_size
/// 0 and a size with the IS_MMAPPED bit that is a page multiple fitting
/// before `end`.
///
/// The words are whatever the page holds (code, another runtime's data), so
/// `size` can be anything: compared with the room left, never added to
/// `at`. (`at + size` wrapped around for a Java virtual machine's pages: the
/// walk went on from far below the range, page by page, for seconds.)
fn mmapped_chunk(at: u64, end: u64, [prev, head]: [u64; 2]) -> Option<u64> {
    let size = head & !7;
    let fits = end.checked_sub(at).is_some_and(|room| size <= room);
    (prev == 0 && head & 2 != 0 && size >= PAGE && size.is_multiple_of(PAGE) && fits)
        .then_some(size)
}

/// Pages whose first two words [`PageHeads::get`] reads in one call.
const HEAD_BATCH: usize = 512;

/// The first two words of pages, read [`HEAD_BATCH`] pages at a time: the
/// root planner looks at every page of the anonymous mappings for a chunk
/// header, and one system call per page was most of the plan (cc1plus:
/// 44,000 reads of 2 us for its 270 MB of garbage-collected arenas).
struct PageHeads {
    /// The first page of the batch read, how many were asked for, and how
    /// many came back whole (the read stops at the first unreadable page).
    first: u64,
    asked: usize,
    whole: usize,
    ranges: Vec<(u64, usize)>,
    buf: Vec<u8>,
}

impl PageHeads {
    fn new() -> Self {
        PageHeads {
            first: 0,
            asked: 0,
            whole: 0,
            ranges: Vec::with_capacity(HEAD_BATCH),
            buf: vec![0; HEAD_BATCH * 16],
        }
    }

    /// The first two words of the page at `at` (page-aligned), reading
    /// ahead up to `end`; `None` when the page cannot be read.
    fn get(&mut self, mem: &mut dyn Memory, at: u64, end: u64) -> Option<[u64; 2]> {
        let mut i = at.wrapping_sub(self.first) / PAGE;
        // Outside the batch, or past its unreadable page: read from here.
        if at < self.first || i >= self.asked as u64 || i > self.whole as u64 {
            self.ranges.clear();
            let mut p = at;
            while p < end && self.ranges.len() < HEAD_BATCH {
                self.ranges.push((p, 16));
                p += PAGE;
            }
            self.first = at;
            self.asked = self.ranges.len();
            let n = self.asked * 16;
            self.whole = mem.read_many(&self.ranges, &mut self.buf[..n]) / 16;
            i = 0;
        }
        let i = i as usize;
        if i >= self.whole {
            return None;
        }
        let w = |k: usize| {
            let b = &self.buf[i * 16 + k * 8..i * 16 + k * 8 + 8];
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
        };
        Some([w(0), w(1)])
    }
}

/// The memory ranges to scan as roots (see the module documentation), but
/// for the live blocks and the scan's own arrays, cut out later
/// ([`final_roots`]) once the blocks' sizes are known: this
/// part reads memory (chunk headers), so it runs before any other thread of
/// ours starts at exit.
pub fn plan_roots(maps: &[Mapping], plan: &RootPlan, mem: &mut dyn Memory) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let heap = arena_heap_pieces(maps, mem);
    for (k, m) in maps.iter().enumerate() {
        if !(m.read && m.write) || m.path == "[heap]" || m.path.starts_with("[v") {
            continue;
        }
        if m.path.starts_with("/dev/") && m.path != "/dev/zero" && !m.path.starts_with("/dev/zero ")
        {
            continue;
        }
        if heap[k] {
            continue;
        }
        let sp = plan
            .stack_pointers
            .iter()
            .copied()
            .find(|&sp| sp >= m.start && sp < m.end);
        // A thread stack lies above a guard page. So may any memory the
        // kernel placed right above an arena heap's reserved, inaccessible
        // tail: cc1plus's own `mmap`ed pages, merged by the kernel with a
        // chunk of ours, were taken for a cached stack, so only their top was
        // scanned, and that top, in our chunk, was unmapped under the scan
        // when the chunk was freed (SIGSEGV in ~1 exit of 5).
        let guarded = k > 0 && {
            let prev = &maps[k - 1];
            prev.end == m.start
                && !prev.read
                && !prev.write
                && prev.anonymous()
                && !(k > 1 && heap_reserve(&maps[k - 2], heap[k - 2], prev))
        };
        let (start, stacklike) = match sp {
            Some(sp) => (sp & !7, true),
            None if m.anonymous() && guarded && plan.unknown_threads == 0 => {
                (m.end.saturating_sub(plan.tcb_extent).max(m.start), true)
            }
            None => (m.start, guarded || m.path == "[stack]"),
        };
        let mut parts = Vec::new();
        subtract(start, m.end, plan.excluded, &mut parts);
        if !m.anonymous() || stacklike {
            out.extend(parts);
        } else {
            walk_chunks(&parts, mem, &mut out);
        }
    }
    out
}

/// The roots: `uncut` (from [`plan_roots`]) without the live blocks that
/// start inside a range (a live block elsewhere than in a recognised malloc
/// region is never a root itself: it would reach its children
/// unconditionally) and without the scan's own arrays `own` (disjoint).
/// Nothing here copies a block's address into memory of its own, and the
/// list returned is sized beforehand and cuts out its own bytes too: where
/// our heap is not one the plan recognises (under valgrind), a stale or live
/// copy of the blocks' addresses would be read as a root and make them
/// reachable.
fn final_roots(
    uncut: &[(u64, u64)],
    blocks: &[(u64, u64)],
    mut own: Vec<(u64, u64)>,
) -> Vec<(u64, u64)> {
    // Each cut splits at most one piece in two.
    let inside: usize = (uncut.iter())
        .map(|&(a, b)| {
            let i = blocks.partition_point(|x| x.0 < a);
            blocks[i..].partition_point(|x| x.0 < b)
        })
        .sum();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(uncut.len() + inside + own.len() + 1);
    let p = out.as_ptr() as u64;
    own.push((
        p,
        p + (out.capacity() * core::mem::size_of::<(u64, u64)>()) as u64,
    ));
    own.retain(|&(a, b)| a < b);
    own.sort_unstable();
    for &(a, b) in uncut {
        let mut at = a;
        let i = blocks.partition_point(|x| x.0 < a);
        for &(x, size) in blocks[i..].iter().take_while(|x| x.0 < b) {
            if x > at {
                cut_sorted(at, x.min(b), &own, &mut out);
            }
            at = at.max(x.saturating_add(size));
            if at >= b {
                break;
            }
        }
        if at < b {
            cut_sorted(at, b, &own, &mut out);
        }
    }
    debug_assert!(out.len() <= out.capacity() && out.as_ptr() as u64 == p);
    out
}

/// [a, b) minus the sorted, disjoint `cuts`.
fn cut_sorted(a: u64, b: u64, cuts: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    let mut at = a;
    for &(c0, c1) in cuts {
        if c0 > at {
            out.push((at, c0.min(b)));
        }
        at = at.max(c1);
        if at >= b {
            return;
        }
    }
    if at < b {
        out.push((at, b));
    }
}

/// Anonymous memory may hold malloc's mmapped chunks (the tracer's big tables
/// among them), also inside VMAs the kernel merged: skips every page-aligned
/// chunk header and what it covers.
///
/// Only pages that were ever written can hold a header
/// ([`Memory::populated`]): the others are neither read nor looked at.
fn walk_chunks(parts: &[(u64, u64)], mem: &mut dyn Memory, out: &mut Vec<(u64, u64)>) {
    let mut heads = PageHeads::new();
    let mut runs: Runs = [(0, 0); RUNS];
    for &(a, b) in parts {
        // The next byte to look at, and where the root range under way began.
        let mut at = a;
        let mut root = a;
        while at < b {
            let (n, upto) = mem.populated(at, b, &mut runs);
            for &(s, e) in &runs[..n] {
                at = at.max(s);
                while at < e {
                    if at.is_multiple_of(PAGE) {
                        // Read ahead no further than the written pages.
                        let chunk = heads.get(mem, at, e).and_then(|h| mmapped_chunk(at, b, h));
                        if let Some(size) = chunk {
                            if root < at {
                                out.push((root, at));
                            }
                            at += size;
                            root = at;
                            continue;
                        }
                    }
                    at = (at | (PAGE - 1)) + 1;
                }
            }
            at = at.max(upto);
        }
        if root < b {
            out.push((root, b));
        }
    }
}

// ---------------------------------------------------------------- the scan

/// Stack pointers of the other live threads that wait in a system call, and
/// how many others are running (their stack pointer is unknown).
fn other_threads(skip: &[u32]) -> (Vec<u64>, usize) {
    let mut sps = Vec::new();
    let mut unknown = 0;
    // Unreadable (a chroot without /proc, no descriptor left): there may be
    // threads, and the scan must not copy memory directly.
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (sps, 1);
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if skip.contains(&tid) {
            continue;
        }
        let path =
            std::ffi::CString::new(format!("/proc/self/task/{tid}/syscall")).unwrap_or_default();
        let text = sys::read_proc(&path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let f: Vec<&str> = text.split_whitespace().collect();
        // "NR ARG1..ARG6 SP PC", "-1 SP PC" (blocked outside a call), "running".
        let sp = (f.len() >= 3)
            .then(|| f[f.len() - 2])
            .and_then(|s| s.strip_prefix("0x"))
            .and_then(|s| u64::from_str_radix(s, 16).ok());
        match sp {
            Some(sp) if sp != 0 => sps.push(sp),
            // "-1 0x0 0x0": a thread that has ended (its kernel stack is
            // gone) but is still listed, as `main` is after `pthread_exit`
            // while other threads run: no stack of its own is a root.
            Some(_) if f[0] == "-1" => {}
            _ => unknown += 1,
        }
    }
    (sps, unknown)
}

/// Memory of ours the roots leave out: our writable segments, the lanes
/// and the mappings kept for the process's life (rule tables, sent-stack
/// caches).
fn own_memory() -> Vec<(u64, u64)> {
    let mut v = own_writable();
    v.extend(crate::lane::ranges());
    v.extend(sys::kept_ranges());
    v
}

/// libtracer's own writable segments, from its program headers.
fn own_writable() -> Vec<(u64, u64)> {
    extern "C" {
        static __ehdr_start: libc::Elf64_Ehdr;
    }
    let mut v = Vec::new();
    // SAFETY: __ehdr_start is this object's mapped ELF header, followed by
    // its program headers (in the first PT_LOAD segment).
    unsafe {
        let ehdr = core::ptr::addr_of!(__ehdr_start);
        let base = ehdr as u64;
        let phdrs = (base + (*ehdr).e_phoff) as *const libc::Elf64_Phdr;
        let mut first = None;
        for i in 0..(*ehdr).e_phnum as usize {
            let ph = &*phdrs.add(i);
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let f = *first.get_or_insert(ph.p_vaddr & !(PAGE - 1));
            if ph.p_flags & libc::PF_W != 0 {
                let bias = base.wrapping_sub(f);
                let lo = bias.wrapping_add(ph.p_vaddr) & !(PAGE - 1);
                let hi = (bias.wrapping_add(ph.p_vaddr + ph.p_memsz) + PAGE - 1) & !(PAGE - 1);
                v.push((lo, hi));
            }
        }
    }
    v
}

/// Bytes below the top of this thread's stack mapping taken by its thread
/// control block and static TLS (the same for every glibc-allocated stack).
fn tcb_extent(maps: &[Mapping]) -> (u64, Option<(u64, u64)>) {
    // SAFETY: pthread_self has no preconditions; on x86-64 glibc it is the
    // thread pointer, the address of the thread control block.
    let tp = unsafe { libc::pthread_self() } as u64;
    let here = &tp as *const u64 as u64;
    let own = maps
        .iter()
        .find(|m| here >= m.start && here < m.end)
        .map(|m| (m.start, m.end));
    let mut below = 0u64;
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is `(tp, below)`.
        unsafe {
            let (tp, below) = &mut *(data as *mut (u64, u64));
            let tls = (*info).dlpi_tls_data as u64;
            if tls != 0 && tls < *tp {
                *below = (*below).max(*tp - tls);
            }
        }
        0
    }
    let mut data = (tp, 0u64);
    crate::objects::loader_section(|| {
        // SAFETY: the callback gets `data` back and runs while it lives.
        unsafe { libc::dl_iterate_phdr(Some(cb), (&mut data as *mut (u64, u64)).cast()) };
    });
    below = below.max(data.1);
    let top_gap = own.map_or(0, |(_, end)| end.saturating_sub(tp));
    (top_gap + below + 64, own)
}

/// Figures of one scan, for the caller's curiosity and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub blocks: usize,
    pub root_bytes: u64,
    /// Bytes of roots and blocks not read: no page there was ever written
    /// ([`Memory::populated`]).
    pub unwritten_bytes: u64,
    pub nanos: u64,
    /// The sizes were resolved beside the thread `around` started.
    pub sizes_beside: bool,
    /// Blocks were copied directly ([`hold_exit`]), not read by the kernel.
    pub direct: bool,
}

/// The exiting thread's side of the direct reads. [`hold_exit`] blocks
/// the exiting thread's signals and sets `HELD`; the scan, when no other
/// thread of the program lives, turns `HELD` into `SCANNING` for as long as it
/// copies memory directly, then into `DONE` (also when it read through the
/// kernel); [`release_exit`] gives the signals back at `DONE`, or at `HELD`
/// once the wait is over. A waiter that gave up on a stuck writer in the
/// middle of a direct scan leaves them blocked: a handler could otherwise
/// unmap what the scan reads.
static HOLD: AtomicU8 = AtomicU8::new(FREE);

/// Threads of the tracer running beside the writer (`lifecycle::alongside`).
pub static BESIDE: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
const FREE: u8 = 0;
const HELD: u8 = 1;
const SCANNING: u8 = 2;
const DONE: u8 = 3;
/// The holding thread and the signal mask it had.
static HELD_MASK: Mutex<Option<(u32, libc::sigset_t)>> = Mutex::new(None);

/// Whether the exiting thread is the program's only one and holds its
/// signals for the scan ([`hold_exit`]): nothing of the program runs until
/// the scan is over. The writer's thread asks (it counts itself and the
/// exiting one).
pub fn held() -> bool {
    HOLD.load(Ordering::Acquire) == HELD && sys::thread_count().is_some_and(|n| n <= 2)
}

/// Called by the exiting thread (inside the tracer's guard) before it asks
/// for the scan: blocks its signals (delivered when [`release_exit`]
/// restores the mask) and so lets the scan copy blocks directly when this
/// thread is the program's only one. With other threads alive, the scan
/// reads through the kernel, and a signal for this thread waits for the
/// end of the scan (a signal for the process goes to another thread).
/// Under valgrind, nothing changes.
pub fn hold_exit() {
    let me = sys::raw_gettid();
    // Under valgrind, valgrind itself maps and unmaps memory of the process
    // as it runs. Whether the program has other threads is the scan's to
    // find out (`other_threads`, on the writer's thread): reading
    // /proc/self/stat here was a system call a program's own seccomp
    // filter could kill it for, in its `exit`.
    if sys::under_valgrind() {
        return;
    }
    // SAFETY: both sets are valid locals; changing this thread's own mask
    // has no other precondition (glibc keeps its internal signals open).
    let old = unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    if let Ok(mut m) = HELD_MASK.lock() {
        *m = Some((me, old));
        HOLD.store(HELD, Ordering::Release);
    }
}

/// The exiting thread, while it waits (`finished` false) and once its wait
/// is over (`finished` true): restores its signal mask when the scan no
/// longer reads memory directly.
pub fn release_exit(finished: bool) {
    let st = HOLD.load(Ordering::Acquire);
    if !(st == DONE || (st == HELD && finished)) {
        return;
    }
    let Ok(mut m) = HELD_MASK.lock() else { return };
    if m.as_ref().is_none_or(|(tid, _)| *tid != sys::raw_gettid()) {
        return;
    }
    if HOLD
        .compare_exchange(st, FREE, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    if let Some((_, old)) = m.take() {
        // SAFETY: `old` is the mask `hold_exit` saved for this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    }
}

/// The mappings whose blocks may be copied directly: readable anonymous
/// memory (`[heap]`, arena heaps, `mmap`ed chunks), sorted by address. File
/// mappings are left to `process_vm_readv` (a truncated file faults).
pub fn fast_mappings(maps: &[Mapping]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| {
            m.read
                && m.write
                && (m.anonymous() || m.path == "[heap]" || m.path.starts_with("[anon:"))
        })
        .map(|m| (m.start, m.end))
        .collect();
    v.sort_unstable();
    v
}

/// The process's mappings as this thread sees them: `/proc/thread-self`, as
/// `/proc/self/maps` is empty once the main thread has exited (a `main`
/// that called `pthread_exit`, the scan run by the writer after the last
/// thread: `lifecycle::program_gone`).
fn own_maps() -> String {
    sys::read_proc(c"/proc/thread-self/maps")
        .or_else(|| sys::read_proc(c"/proc/self/maps"))
        .or_else(kept_maps)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The registry slot (`fds`, so that the program cannot close it or have
/// its number) of `/proc/self/maps`, opened by [`keep_maps_open`] when
/// tracing started; -1 without one. Read when the path no longer opens (a
/// program that `chroot`ed where there is no /proc: its scan found no
/// roots and called every block definitely lost; `examples/leaks/chroot.c`).
static KEPT_MAPS: core::sync::atomic::AtomicIsize = core::sync::atomic::AtomicIsize::new(-1);

/// Opens [`KEPT_MAPS`] for this process: at start-up, and in a followed
/// fork's child after [`forget_kept_maps`] (the parent's descriptor names
/// the parent's maps). Best effort: none when the registry is full.
pub fn keep_maps_open() {
    let slot = sys::ProcFile::open(c"/proc/self/maps")
        .map(sys::ProcFile::into_raw)
        .and_then(crate::fds::register)
        .map_or(-1, |s| s as isize);
    KEPT_MAPS.store(slot, Ordering::Release);
}

/// A fork's child released every registered descriptor, the kept maps'
/// among them.
pub fn forget_kept_maps() {
    KEPT_MAPS.store(-1, Ordering::Release);
}

fn kept_maps() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let slot = usize::try_from(KEPT_MAPS.load(Ordering::Acquire)).ok()?;
    let file = crate::fds::FdSink::new(slot);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match file.read_at(&mut buf, out.len() as u64) {
            Ok(0) => return Some(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (!out.is_empty()).then_some(out),
        }
    }
}

/// The live blocks, sorted by address with their sizes, and the kind of
/// each, in the same order: the scan's own list, not a copy of it (16
/// bytes a block more at the exit's largest: 1.1 MB for cc1plus's 71,000).
#[derive(Default)]
pub struct Classes {
    blocks: Vec<(u64, u64)>,
    kinds: Vec<LeakKind>,
}

impl Classes {
    /// Each block's address and kind.
    pub fn iter(&self) -> impl Iterator<Item = (u64, LeakKind)> + '_ {
        self.blocks
            .iter()
            .map(|b| b.0)
            .zip(self.kinds.iter().copied())
    }

    /// The kinds, in the blocks' order.
    pub fn kinds(&self) -> &[LeakKind] {
        &self.kinds
    }
}

/// Classifies every live block; returns them sorted by address. Runs on the
/// writer thread, which must be marked as the tracer's own.
pub fn run(live: &mut Live, at: &ExitPoint) -> (Classes, Stats) {
    run_with(live, at, &mut |_, mark| mark(), None)
}

/// What [`run_with`] calls once the roots are planned: the blocks'
/// addresses (sorted), and the rest of the scan to run.
pub type Around<'a> = dyn FnMut(&[u64], &mut dyn FnMut()) + 'a;

/// The live blocks' sizes, given once the roots are planned ([`run_with`]).
pub struct LaterSizes<'a> {
    /// Gives the live blocks their sizes ([`Live::resolve_replayed`]).
    pub resolve: &'a mut dyn FnMut(&mut Live),
    /// Bytes the thread `around` starts is to write (the trace file).
    pub file_bytes: u64,
}

/// Whether the sizes are worth resolving beside the thread that writes
/// the file: when writing it takes longer than the marking. `file_bytes` is
/// the spool's size; the file's thread writes that and more (the stacks'
/// text), ~1-2.5 ns a spool byte here; the marking takes ~0.4 ns a root byte
/// and ~0.5 us a block. cc1plus (a 140 MB spool, 281 MB of roots, 71,000
/// blocks): the sizes' ~110 ms come off the exit; git (17 MB, 0.9 MB,
/// 41,000 blocks) would only have both threads compete for the cores (its
/// exit +4 ms). `TRACER_REPLAY_BESIDE` (private, for tests) forces it
/// either way.
fn sizes_beside(file_bytes: u64, root_bytes: u64, blocks: usize) -> bool {
    match std::env::var_os("TRACER_REPLAY_BESIDE").as_deref() {
        Some(v) if v == "1" => return true,
        Some(v) if v == "0" => return false,
        _ => {}
    }
    file_bytes > root_bytes / 4 + blocks as u64 * 500
}

/// [`run`], calling `around` with the blocks' addresses (sorted) once the
/// roots are planned, and with the rest of the scan to run (if `around`
/// does not run it, it runs after): a thread started then is in neither the
/// mappings nor the threads the scan looked at, so its stack is no root (it
/// must not unmap memory it did not map itself, nor free blocks of the
/// program). Not called when no block is live.
///
/// With `later`, the roots are planned from the blocks' starts alone, and
/// the live table's sizes are resolved once they are: before `around`, or
/// in that rest, i.e. beside what `around` started, when that pays
/// ([`sizes_beside`]: the survivors' sizes replayed from the trace while
/// the file is written). The live blocks and the classifier's own buffers
/// are cut out of the roots once the sizes are known, the same cuts the
/// plan would have made with them.
pub fn run_with(
    live: &mut Live,
    at: &ExitPoint,
    around: &mut Around<'_>,
    mut later: Option<LaterSizes<'_>>,
) -> (Classes, Stats) {
    let begun = sys::now_ns();
    let mut mem = SelfMemory::this_thread();
    // The blocks with their sizes now, or their addresses alone until
    // `sizes` ran.
    let mut sized = None;
    let addresses: Vec<u64> = if later.is_some() && live.replayed_sizes() {
        live.sorted_addresses()
    } else {
        later = None;
        let blocks = live.take_sorted(&mut mem);
        let a = blocks.iter().map(|b| b.0).collect();
        sized = Some(blocks);
        a
    };
    if addresses.is_empty() {
        // Nothing to classify: no roots to read (a short process such as
        // /bin/true spent ~0.3 ms here, most of its exit).
        let _ = HOLD.compare_exchange(HELD, DONE, Ordering::AcqRel, Ordering::Acquire);
        let stats = Stats {
            nanos: sys::now_ns().saturating_sub(begun),
            ..Stats::default()
        };
        return (Classes::default(), stats);
    }
    let mut excluded = own_memory();
    let (mut sps, unknown) = other_threads(&[at.tid, sys::raw_gettid()]);
    let alone = sps.is_empty() && unknown == 0;
    if at.sp != 0 {
        sps.push(at.sp);
    }
    // Alone with a waiting exiting thread, memory is copied directly
    // (process_vm_readv pins the pages of every range, ~2 us a call): the
    // roots are then planned from the mappings as they are now, and that
    // snapshot's text lives until the scan ends. Only this thread can
    // unmap memory meanwhile, and only by freeing a buffer of its own: the
    // ones alive now are `mmap`ed chunks the plan leaves out, the later
    // ones (the classifier's among them) are mappings the snapshot does not
    // list (a range the snapshot lists could only be reused after a buffer
    // alive now was freed). A thread of ours started before this point
    // (none is: see `writer::State::finish_alongside_scan`) could free an
    // `mmap`ed chunk of the snapshot while the plan reads its first page.
    let fast = alone
        && BESIDE.load(Ordering::Acquire) == 0
        && HOLD
            .compare_exchange(HELD, SCANNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
    // The mappings are read once, here: the snapshot when `fast` (it used
    // to be a second read, after one at the start for the survivors' sizes,
    // which the kernel reads now, or the list of readable ranges, read only
    // where the kernel refuses).
    let text = own_maps();
    let maps = parse_maps(&text);
    let (extent, writer_stack) = tcb_extent(&maps);
    excluded.extend(writer_stack);
    let excluded = sorted_disjoint(excluded);
    mem.pages = PageTable::new(&maps);
    if fast {
        mem.fast = fast_mappings(&maps);
    }
    let maps = &maps;
    let plan = RootPlan {
        excluded: &excluded,
        stack_pointers: &sps,
        unknown_threads: unknown,
        tcb_extent: extent,
    };
    let uncut = plan_roots(maps, &plan, &mut mem);
    // What the marking found never written (the plan's look at the same
    // pages is not counted twice).
    let unwritten_before = mem.pages.skipped;
    let beside = later.as_ref().is_some_and(|l| {
        let planned = uncut.iter().map(|(a, b)| b - a).sum();
        sizes_beside(l.file_bytes, planned, addresses.len())
    });
    if !beside {
        if let Some(l) = later.take() {
            (l.resolve)(live);
        }
    }
    let mut done: Option<(Classes, u64)> = None;
    let mut rest = || {
        if done.is_some() {
            return;
        }
        if let Some(l) = later.take() {
            (l.resolve)(live);
        }
        let blocks = sized.take().unwrap_or_else(|| live.take_sorted(&mut mem));
        let mut classifier = Classifier::new(&blocks);
        // The scan's own arrays hold the blocks' addresses: never roots.
        let mut own = classifier.own_ranges();
        let a = addresses.as_ptr() as u64;
        own.push((a, a + 8 * addresses.capacity() as u64));
        let regions = final_roots(&uncut, &blocks, own);
        let root_bytes = regions.iter().map(|(a, b)| b - a).sum();
        if std::env::var_os("TRACER_SCAN_DEBUG").is_some() {
            sys::stderr_line(&format!(
                "leak scan: exiting thread {} from sp {:#x}",
                at.tid, at.sp
            ));
            explain_roots(&regions, maps, &classifier, &mut mem);
        }
        classifier.set_allocator_data(
            maps.iter()
                .filter(|m| m.write && is_libc(&m.path))
                .map(|m| (m.start, m.end))
                .collect(),
        );
        classifier.mark_roots(&mut mem, &regions, &at.regs);
        let kinds = classifier.finish(&mut mem);
        done = Some((Classes { blocks, kinds }, root_bytes));
    };
    around(&addresses, &mut rest);
    rest();
    let (Classes { blocks, kinds }, root_bytes) = done.unwrap_or_default();
    if fast {
        mem.fast.clear();
        drop(text);
        HOLD.store(DONE, Ordering::Release);
    } else {
        let _ = HOLD.compare_exchange(HELD, DONE, Ordering::AcqRel, Ordering::Acquire);
    }
    let stats = Stats {
        blocks: blocks.len(),
        root_bytes,
        unwritten_bytes: mem.pages.skipped - unwritten_before,
        nanos: sys::now_ns().saturating_sub(begun),
        direct: fast,
        sizes_beside: beside,
    };
    // The classes go with `addresses`, which `around` may have handed on;
    // the blocks sized later are the same ones (`Live::sorted_addresses`).
    if blocks.iter().map(|b| b.0).eq(addresses.iter().copied()) {
        return (Classes { blocks, kinds }, stats);
    }
    debug_assert!(false, "the blocks sized are not the blocks named");
    let find = |a: &u64| blocks.binary_search_by_key(a, |b| b.0).ok();
    let classes = Classes {
        kinds: (addresses.iter().map(find))
            .map(|i| i.map_or(LeakKind::Reachable, |i| kinds[i]))
            .collect(),
        blocks: (addresses.iter())
            .map(|a| (*a, find(a).map_or(0, |i| blocks[i].1)))
            .collect(),
    };
    (classes, stats)
}

/// Whether a mapping's file is the C library (`libc.so.6`, or a versioned
/// `libc-2.xx.so`).
fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// `TRACER_SCAN_DEBUG` (private): one stderr line per root word that points
/// into a block, with the mapping it was found in.
fn explain_roots(regions: &[(u64, u64)], maps: &[Mapping], c: &Classifier, mem: &mut dyn Memory) {
    let mut buf = [0u8; 8];
    for &(a, b) in regions {
        let mut q = a;
        while q < b {
            if mem.read(q, &mut buf) == 8 {
                let w = u64::from_le_bytes(buf);
                if let Some(i) = c.find(w) {
                    let (path, from, to) = maps
                        .iter()
                        .find(|m| q >= m.start && q < m.end)
                        .map_or(("?", 0, 0), |m| (m.path.as_str(), m.start, m.end));
                    let start = c.blocks[i].0;
                    sys::stderr_line(&format!(
                        "leak scan: root word at {q:#x} ({path} {from:#x}-{to:#x}) -> block \
                         {start:#x} + {}",
                        w - start
                    ));
                }
            }
            q += 8;
        }
    }
}

#[cfg(test)]
mod tests {
    /// Ranges cut out of a mapping: only the overlapping cuts count, in
    /// any overlap, and merged cuts act as their union.
    #[test]
    fn cuts_are_subtracted_from_a_range() {
        let cuts = super::sorted_disjoint(vec![
            (0x9000, 0xa000),
            (0x1000, 0x2000),
            (0x1800, 0x2800),
            (0x2800, 0x3000),
            (0x4000, 0x4000),
            (0x6000, 0x7000),
        ]);
        assert_eq!(cuts, [(0x1000, 0x3000), (0x6000, 0x7000), (0x9000, 0xa000)]);
        let cut = |a, b| {
            let mut out = Vec::new();
            super::subtract(a, b, &cuts, &mut out);
            out
        };
        assert_eq!(cut(0x0, 0x1000), [(0x0, 0x1000)]);
        assert_eq!(
            cut(0x0, 0x8000),
            [(0x0, 0x1000), (0x3000, 0x6000), (0x7000, 0x8000)]
        );
        assert_eq!(cut(0x1800, 0x6800), [(0x3000, 0x6000)]);
        assert_eq!(cut(0x1000, 0x3000), []);
        assert_eq!(cut(0x6800, 0xb000), [(0x7000, 0x9000), (0xa000, 0xb000)]);
        assert_eq!(cut(0xb000, 0xc000), [(0xb000, 0xc000)]);
        let mut out = Vec::new();
        super::subtract(0x0, 0x2000, &[], &mut out);
        assert_eq!(out, [(0x0, 0x2000)]);
    }

    use super::*;

    /// The block lookup through the region table gives, for every word,
    /// what a search of the whole sorted list gives: blocks of every size
    /// from 1 byte to 300 KiB (spanning regions), packed and scattered,
    /// small ones packed tightly (regions counted by their [`Rank`]), some
    /// of those starting off the 16-byte grid (no rank for their region),
    /// a zero-sized one, and words before,
    /// inside, at the end of, and between blocks.
    #[test]
    fn region_lookup_finds_what_the_whole_list_finds() {
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1du64);
        for round in 0..24 {
            let mut blocks = Vec::new();
            let mut at = 0x5555_0000_0000u64 + (next() % 4096) * 16;
            for _ in 0..2000 {
                let size = match (round % 4, next() % 10) {
                    (2 | 3, _) => 8 + next() % 17,
                    (_, 0) => 64 * 1024 + next() % (240 * 1024),
                    (_, 1) => 0,
                    _ => 1 + next() % 600,
                };
                blocks.push((at, size));
                let gap = match round % 4 {
                    0 => 16,
                    1 => next() % (200 * 1024),
                    _ => 0,
                };
                at = (at + size.max(1) + gap + 15) & !15;
                if round % 4 == 2 && next().is_multiple_of(50) {
                    at += 8;
                }
            }
            let c = Classifier::new(&blocks);
            assert!(!c.regions.slots.is_empty(), "table built");
            let count =
                |f: &dyn Fn(&Region) -> bool| c.regions.slots.iter().filter(|e| f(e)).count();
            let ranked = count(&|e| e.aux != NO_AUX && e.aux & STEPS == 0);
            let stepped = count(&|e| e.aux != NO_AUX && e.aux & STEPS != 0);
            let dense = count(&|e| e.count >= RANK_FROM);
            match round % 4 {
                0 => assert!(stepped > 0, "no region with steps"),
                3 => assert!(ranked > 0 && ranked == dense, "{ranked} of {dense} ranked"),
                2 => assert!(dense > 0 && ranked < dense, "{ranked} of {dense} ranked"),
                _ => {}
            }
            let (lo, hi) = (c.lo, c.hi);
            let whole = |w: u64| -> Option<usize> {
                if w < lo || w >= hi {
                    return None;
                }
                let i = blocks.partition_point(|b| b.0 <= w).checked_sub(1)?;
                let (a, s) = blocks[i];
                (w - a < s || w == a).then_some(i)
            };
            for &(a, s) in &blocks {
                for w in [
                    a.wrapping_sub(1),
                    a,
                    a + s / 2,
                    a + s.max(1) - 1,
                    a + s,
                    a + s + 8,
                ] {
                    assert_eq!(c.find(w), whole(w), "word {w:#x}");
                }
            }
            for _ in 0..20_000 {
                let w = lo + next() % (hi - lo + 4096);
                assert_eq!(c.find(w), whole(w), "word {w:#x}");
            }
        }
    }

    /// A fake address space: little-endian words at addresses.
    #[derive(Default)]
    struct Fake {
        words: HashMap<u64, u64>,
        /// Ranges that cannot be read.
        holes: Vec<(u64, u64)>,
    }

    impl Fake {
        fn put(&mut self, at: u64, w: u64) {
            self.words.insert(at, w);
        }
    }

    impl Memory for Fake {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
            for (i, chunk) in buf.chunks_mut(8).enumerate() {
                let a = addr + 8 * i as u64;
                if self.holes.iter().any(|&(lo, hi)| a >= lo && a < hi) {
                    return 8 * i;
                }
                let w = self.words.get(&a).copied().unwrap_or(0).to_le_bytes();
                chunk.copy_from_slice(&w[..chunk.len()]);
            }
            buf.len()
        }
    }

    /// The live table against a `HashMap` model: random allocations
    /// (clustered addresses sharing leaves, both granules of a pair, far
    /// ones), frees of live and unknown addresses, re-allocations of a live
    /// address, sizes on both sides of `EXACT_FROM` and unaligned addresses;
    /// every allocation writes a glibc-like chunk header before its block
    /// (including the 16 spare bytes `realloc` and `memalign` may leave);
    /// the sorted result must match.
    #[test]
    fn live_table_matches_a_map_through_growth_and_deletions() {
        set_enabled(true);
        let mut live = Live::default();
        let mut mem = Fake::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200_000u64 {
            let r = next();
            let addr = match r % 16 {
                0 => 0x7f00_0000_0000 + (r >> 8) % 4096 * 8, // 8-aligned: `spill`
                1 => (1 << 50) | (((r >> 8) % 64) << 4),     // a far leaf
                _ => 0x5555_0000_0000 + (r >> 8) % 40_000 * 16,
            };
            let size = match (r >> 40) % 50 {
                0 => EXACT_FROM - 1 + (r >> 20) % 3, // both sides of the limit
                1 => 0,
                2 => (1 << 20) + (r >> 20) % 5000,
                _ => (r >> 20) % 600,
            };
            if (r >> 4) % 3 == 0 || round % 7 == 0 {
                live.free(addr);
                model.remove(&addr);
            } else {
                let chunk = ((size + 8 + 15) & !15).max(32) + 16 * ((r >> 60) & 1);
                mem.put(addr.wrapping_sub(8), chunk | 1 | (((r >> 61) & 1) * 4));
                live.alloc(addr, size);
                model.insert(addr, size);
            }
        }
        let mut want: Vec<(u64, u64)> = model.into_iter().collect();
        want.sort_unstable();
        assert!(want.len() > 10_000);
        assert_eq!(live.take_sorted(&mut mem), want);
        // Emptied: nothing left, and usable again.
        assert_eq!(live.take_sorted(&mut mem), vec![]);
        live.alloc(0x1000, 8);
        live.free(0x1000);
        assert_eq!(live.take_sorted(&mut mem), vec![]);
        // Once the program may `mmap` small chunks, sizes are kept whole: an
        // `mmap`ed header (IS_MMAPPED, a page) pins nothing.
        // (0x2000 itself, page-aligned, is always kept whole.)
        mem.put(0x2010 - 8, 4096 | 2);
        live.alloc(0x2010, 100);
        assert_eq!(live.take_sorted(&mut mem), vec![(0x2010, 100 & 63)]);
        live.alloc(0x2000, 100);
        assert!(live.is_exact(0x2000));
        live.alloc_with(0x2010, 100, true);
        assert!(live.is_exact(0x2010));
        assert_eq!(
            live.take_sorted(&mut mem),
            vec![(0x2000, 100), (0x2010, 100)]
        );
        set_exact_sizes();
        live.alloc(0x2010, 100);
        assert_eq!(live.take_sorted(&mut mem), vec![(0x2010, 100)]);
    }

    /// The replayed-sizes mode against the same kind of model: the table
    /// keeps starts only, and the sizes come from a replay of every
    /// allocation made (a log, as the trace would hold it). A replay that
    /// fails, or that misses a block, leaves the usable size of the header.
    #[test]
    fn replayed_sizes_match_a_map_through_growth_and_deletions() {
        set_enabled(true);
        let mut live = Live::default();
        live.use_replayed_sizes();
        let mut mem = Fake::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut usable: HashMap<u64, u64> = HashMap::new();
        let mut log: Vec<(u64, u64)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200_000u64 {
            let r = next();
            let addr = match r % 16 {
                0 => 0x7f00_0000_0000 + (r >> 8) % 4096 * 8, // 8-aligned: `spill`
                1 => (1 << 50) | (((r >> 8) % 64) << 4),     // a far leaf
                _ => 0x5555_0000_0000 + (r >> 8) % 40_000 * 16,
            };
            let size = match (r >> 40) % 50 {
                0 => EXACT_FROM - 1 + (r >> 20) % 3,
                1 => 0,
                2 => (1 << 20) + (r >> 20) % 5000,
                _ => (r >> 20) % 600,
            };
            if (r >> 4) % 3 == 0 || round % 7 == 0 {
                live.free(addr);
                model.remove(&addr);
            } else {
                let chunk = ((size + 8 + 15) & !15).max(32) + 16 * ((r >> 60) & 1);
                mem.put(addr.wrapping_sub(8), chunk | 1 | (((r >> 61) & 1) * 4));
                live.alloc(addr, size);
                model.insert(addr, size);
                log.push((addr, size));
                usable.insert(addr, chunk - 8);
            }
        }
        let mut want: Vec<(u64, u64)> = model.iter().map(|(&a, &s)| (a, s)).collect();
        want.sort_unstable();
        assert!(want.len() > 10_000);
        // No leaf holds a size: one bit per granule.
        assert!(live.leaves.is_empty() && !live.bits.is_empty());
        // The addresses the scan hands on before the replay are the blocks
        // it sizes after it (starts in the bits, `big` and `spill` alike).
        let named: Vec<u64> = want.iter().map(|b| b.0).collect();
        assert!(!live.spill.is_empty() && !live.big.is_empty());
        assert_eq!(live.sorted_addresses(), named, "before the replay");
        live.resolve_replayed(|f| {
            for &(a, s) in &log {
                f(a, s);
            }
            true
        });
        assert_eq!(live.take_sorted(&mut mem), want);
        assert_eq!(live.take_sorted(&mut mem), vec![]);

        // Again, with a replay that fails: usable sizes from the headers
        // (exact ones still from `big` and `spill`).
        // (Which blocks keep exact sizes is asked of the table: another test
        // may switch every later block to exact sizes meanwhile.)
        let from_header = |live: &mut Live, a: u64, s: u64| {
            if live.is_exact(a) {
                s
            } else {
                usable[&a]
            }
        };
        for &(a, s) in &want {
            live.alloc(a, s);
        }
        let fallback: Vec<(u64, u64)> = want
            .iter()
            .map(|&(a, s)| (a, from_header(&mut live, a, s)))
            .collect();
        live.resolve_replayed(|f| {
            f(want[0].0, want[0].1);
            false
        });
        assert_eq!(live.take_sorted(&mut mem), fallback);

        // A replay that misses one block: that one alone from its header.
        for &(a, s) in &want {
            live.alloc(a, s);
        }
        let small = want
            .iter()
            .position(|&(a, s)| !live.is_exact(a) && usable[&a] != s)
            .unwrap_or(0);
        let small_size = from_header(&mut live, want[small].0, want[small].1);
        live.resolve_replayed(|f| {
            for (i, &(a, s)) in want.iter().enumerate() {
                if i != small {
                    f(a, s);
                }
            }
            true
        });
        let mut expect = want.clone();
        expect[small].1 = small_size;
        assert_eq!(live.take_sorted(&mut mem), expect);
    }

    /// Real glibc chunks: the low 6 bits and the header give back every
    /// requested size, from `malloc`, `calloc`, `realloc` (shrinking in
    /// place, which can leave up to 40 spare bytes, and growing), `memalign`,
    /// on the main arena and a thread's; `mmap`ed chunks pin nothing.
    #[test]
    fn requested_size_is_recovered_from_glibc_chunk_headers() {
        fn check(p: *mut libc::c_void, size: u64) {
            assert!(!p.is_null());
            // SAFETY: `p` is a live glibc block: the 8 bytes before it are its
            // chunk's size word, inside the same mapping.
            let header = unsafe { (p as *const u64).sub(1).read() };
            assert_eq!(
                size_from_header(size & 63, header),
                Some(size),
                "size {size}"
            );
        }
        fn round() {
            for size in 0..700u64 {
                // SAFETY: plain glibc allocation calls; every block is freed.
                unsafe {
                    let p = sys::__libc_malloc(size as usize);
                    check(p, size);
                    let c = sys::__libc_calloc(1, size as usize);
                    check(c, size);
                    let m = sys::__libc_memalign(64, size as usize);
                    check(m, size);
                    for shrunk in [size / 2, size.saturating_sub(1), size.saturating_sub(20)] {
                        if shrunk == 0 {
                            continue; // realloc(p, 0) frees
                        }
                        let q = sys::__libc_malloc(size as usize + 1);
                        let q = sys::__libc_realloc(q, shrunk as usize);
                        check(q, shrunk);
                        let q = sys::__libc_realloc(q, shrunk as usize + 300);
                        check(q, shrunk + 300);
                        sys::__libc_free(q);
                    }
                    sys::__libc_free(p);
                    sys::__libc_free(c);
                    sys::__libc_free(m);
                }
            }
        }
        round();
        std::thread::spawn(round).join().unwrap();
        // SAFETY: as above.
        unsafe {
            let p = sys::__libc_malloc(4 << 20);
            let header = (p as *const u64).sub(1).read();
            assert_eq!(size_from_header(0, header), None);
            sys::__libc_free(p);
        }
        assert!(env_lowers_mmap_threshold(Some("0".as_ref()), None));
        assert!(env_lowers_mmap_threshold(
            None,
            Some("glibc.malloc.mmap_threshold=4096".as_ref())
        ));
        assert!(!env_lowers_mmap_threshold(
            None,
            Some("glibc.malloc.tcache_count=0".as_ref())
        ));
    }

    const ROOT: (u64, u64) = (0x1000, 0x1100);

    fn classify(blocks: &[(u64, u64)], mem: &mut Fake, regs: &[u64]) -> Vec<LeakKind> {
        let mut c = Classifier::new(blocks);
        c.mark_roots(mem, &[ROOT], regs);
        c.finish(mem)
    }

    use LeakKind::*;

    /// A block larger than the scratch buffer taken in the same batch as
    /// small ones, before them: it is read on its own, into that buffer,
    /// and the small blocks' words must not be taken from what it left
    /// there. gcc's driver at exit: its 72,704-byte block (libstdc++'s
    /// pool) came first in a batch, a 72-byte block after it was read as
    /// zeros, and the 336-byte block it held (with two obstack chunks
    /// behind it) was reported lost where valgrind finds it reachable.
    #[test]
    fn a_large_block_in_a_batch_leaves_the_small_ones_their_words() {
        let small = (0x10000u64, 32u64);
        let target = (0x30000u64, 32u64);
        let big = (0x100000u64, 100 * 1024u64);
        let blocks = vec![small, target, big];
        let mut mem = Fake::default();
        // The root names the small block, then the big one: the big one is
        // taken off the work list first, the small one in the same batch.
        mem.put(ROOT.0, small.0);
        mem.put(ROOT.0 + 8, big.0);
        mem.put(small.0 + 8, target.0);
        for i in 0..16 {
            mem.put(big.0 + 8 * i, 0x5151_5151);
        }
        assert_eq!(
            classify(&blocks, &mut mem, &[]),
            vec![Reachable, Reachable, Reachable]
        );
    }

    /// A root range of 3 MiB and 12 bytes is read a window at a time:
    /// pointers in its first word, on both sides of each 1 MiB window edge
    /// and in its last whole word all count; a word cut by the range's end
    /// does not.
    #[test]
    fn a_long_root_range_is_read_window_by_window() {
        let base = 0x4000_0000u64;
        let len = 3 * (1u64 << 20) + 12;
        let blocks: Vec<(u64, u64)> = (0..9).map(|i| (0x9000_0000 + i * 0x100, 32)).collect();
        let mut mem = Fake::default();
        let mib = 1u64 << 20;
        let at = [
            base,
            base + mib - 8,
            base + mib,
            base + 2 * mib - 8,
            base + 2 * mib,
            base + 3 * mib - 8,
            base + 3 * mib,     // the last whole word: the range ends 12 bytes on
            base + 3 * mib + 8, // half inside the range: not a word of it
        ];
        for (i, &a) in at.iter().enumerate() {
            mem.put(a, blocks[i].0);
        }
        let mut c = Classifier::new(&blocks);
        c.mark_roots(&mut mem, &[(base, base + len)], &[]);
        let kinds = c.finish(&mut mem);
        assert_eq!(&kinds[..7], &[Reachable; 7]);
        assert_eq!(kinds[7], Definite, "a word cut by the end of the range");
        assert_eq!(kinds[8], Definite, "nothing points at the ninth block");
    }

    #[test]
    fn valgrind_classes_on_a_small_heap() {
        // a: from a root (start) → reachable; b: from a only → reachable;
        // c: root points inside → possible; d: from c (start) → possible;
        // e: nothing → definite; f, g: from e → indirect; g also from f.
        let blocks = [
            (0x10000, 32), // a
            (0x10100, 32), // b
            (0x10200, 64), // c
            (0x10300, 16), // d
            (0x10400, 24), // e
            (0x10500, 40), // f
            (0x10600, 8),  // g
        ];
        let mut m = Fake::default();
        m.put(0x1000, 0x10000);
        m.put(0x10008, 0x10100);
        m.put(0x1008, 0x10210);
        m.put(0x10200, 0x10300);
        m.put(0x10400, 0x10500);
        m.put(0x10410, 0x10600 + 4); // interior pointers also gather
        m.put(0x10500, 0x10600);
        assert_eq!(
            classify(&blocks, &mut m, &[]),
            vec![Reachable, Reachable, Possible, Possible, Definite, Indirect, Indirect]
        );
    }

    #[test]
    fn a_possible_block_upgraded_by_a_later_start_pointer_is_rescanned() {
        // Root word 0: interior of a (a → possible, its child b possible).
        // Root word 1: start of a → reachable, rescanned → b reachable.
        let blocks = [(0x20000, 32), (0x20100, 32)];
        let mut m = Fake::default();
        m.put(0x1000, 0x20008);
        m.put(0x1008, 0x20000);
        m.put(0x20010, 0x20100);
        assert_eq!(classify(&blocks, &mut m, &[]), vec![Reachable, Reachable]);
        // Without the start pointer both stay possible.
        m.put(0x1008, 0);
        assert_eq!(classify(&blocks, &mut m, &[]), vec![Possible, Possible]);
    }

    #[test]
    fn cycles_have_one_definite_leader_and_registers_are_roots() {
        // x ↔ y lost: the lower address leads. z only in a register.
        let blocks = [(0x30000, 16), (0x30100, 16), (0x30200, 16)];
        let mut m = Fake::default();
        m.put(0x30000, 0x30100);
        m.put(0x30100, 0x30000);
        assert_eq!(
            classify(&blocks, &mut m, &[0x30200]),
            vec![Definite, Indirect, Reachable]
        );
        // A later leader that reaches an earlier one makes it indirect.
        let blocks = [(0x40000, 16), (0x40100, 16)];
        let mut m = Fake::default();
        m.put(0x40100, 0x40000);
        assert_eq!(classify(&blocks, &mut m, &[]), vec![Indirect, Definite]);
    }

    #[test]
    fn pointers_past_the_end_zero_sized_blocks_and_unreadable_memory() {
        // One past the end is not a pointer into the block; a zero-sized
        // block is reached by its exact address; words in a hole are not read.
        let blocks = [(0x50000, 16), (0x50100, 0), (0x50200, 16)];
        let mut m = Fake::default();
        m.put(0x1000, 0x50010);
        m.put(0x1008, 0x50100);
        m.put(0x1080, 0x50200);
        m.holes.push((0x1080, 0x1088));
        assert_eq!(
            classify(&blocks, &mut m, &[]),
            vec![Definite, Reachable, Definite]
        );
    }

    #[test]
    fn unaligned_words_are_not_pointers() {
        let blocks = [(0x60000, 16)];
        let mut m = Fake::default();
        // The address straddles two aligned words: neither holds it.
        m.put(0x1000, 0x60000 << 32);
        m.put(0x1008, 0);
        assert_eq!(classify(&blocks, &mut m, &[]), vec![Definite]);
    }

    fn map(start: u64, end: u64, perms: &str, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            read: perms.starts_with('r'),
            write: perms.as_bytes()[1] == b'w',
            shared: perms.as_bytes().get(3) == Some(&b's'),
            path: path.to_string(),
        }
    }

    #[test]
    fn maps_lines_parse() {
        let text = "55d0c0a00000-55d0c0a01000 rw-p 00002000 08:01 1234  /usr/bin/x y\n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0   [stack]\n\
                    7f0000000000-7f0000001000 ---p 00000000 00:00 0 \n";
        let m = parse_maps(text);
        assert_eq!(
            m[0],
            map(0x55d0c0a00000, 0x55d0c0a01000, "rw", "/usr/bin/x y")
        );
        assert_eq!(m[1].path, "[stack]");
        assert_eq!(m[2], map(0x7f0000000000, 0x7f0000001000, "--", ""));
    }

    #[test]
    fn direct_copies_only_inside_writable_anonymous_mappings() {
        let maps = vec![
            map(0x9000, 0xa000, "rw", "/dev/shm/x"), // a file: may be truncated
            map(0x1000, 0x3000, "rw", "[heap]"),
            map(0x5000, 0x6000, "rw", ""),
            map(0x6000, 0x7000, "r-", ""), // read-only: not a heap
            map(0x8000, 0x8800, "rw", "[anon:glibc: malloc arena]"),
            map(0x7000, 0x7800, "rw", "[vvar]"),
            map(0xb000, 0xc000, "rw", "[stack]"),
        ];
        assert_eq!(
            fast_mappings(&maps),
            vec![(0x1000, 0x3000), (0x5000, 0x6000), (0x8000, 0x8800)]
        );
        // A live buffer of this process as the one fast mapping: a batch
        // or a single read inside it is copied, one with a range past its
        // end goes to process_vm_readv. The kernel path is given a process
        // that does not exist (ESRCH, not a refusal that would switch to
        // direct reads), so only a direct copy returns bytes.
        let data: Vec<u8> = (0..=255).collect();
        let (a, b) = (data.as_ptr() as u64, data.as_ptr() as u64 + 256);
        let mut mem = SelfMemory {
            pid: i32::MAX,
            direct: false,
            readable: Some(Vec::new()),
            fast: vec![(a, b - 16)],
            pages: PageTable::default(),
        };
        assert!(mem.fast_contains(a + 16, 32));
        assert!(mem.fast_contains(a, 240));
        assert!(!mem.fast_contains(a + 200, 48));
        assert!(!mem.fast_contains(a - 8, 16));
        let mut buf = [0u8; 48];
        assert_eq!(mem.read_many(&[(a + 16, 32), (a + 100, 16)], &mut buf), 48);
        assert_eq!(&buf[..32], &data[16..48]);
        assert_eq!(&buf[32..], &data[100..116]);
        let mut one = [0u8; 40];
        assert_eq!(mem.read(a + 200, &mut one), 40, "a root window inside");
        assert_eq!(&one[..], &data[200..240]);
        // The batch falls back to one range at a time: the first is copied
        // directly, the second, past the mapping, is not read.
        assert_eq!(mem.read_many(&[(a, 16), (a + 224, 32)], &mut buf), 16);
        assert_eq!(&buf[..16], &data[..16]);
        assert_eq!(mem.read(a + 224, &mut one[..32]), 0);
        assert!(!mem.direct);
    }

    /// The roots returned never include the list's own bytes, even when a
    /// range planned covers them (where our heap is not recognised), and a
    /// live block inside a range is cut out of it.
    #[test]
    fn the_final_roots_leave_out_their_own_list_and_the_blocks() {
        let block = Box::new([0u64; 4]);
        let b = block.as_ptr() as u64;
        let roots = final_roots(&[(4096, u64::MAX - 4096)], &[(b, 32)], Vec::new());
        let own = roots.as_ptr() as u64;
        let inside = |x: u64| roots.iter().any(|&(a, e)| a <= x && x < e);
        assert!(!inside(own) && !inside(own + 15), "{roots:x?}");
        assert!(!inside(b) && !inside(b + 31) && inside(b + 32) && inside(b - 1));
        assert!(inside(4096) && !inside(4095));
    }

    /// The rule's two calibration points: cc1plus's exit (a 140 MB spool,
    /// 292 MB of roots planned, 71,000 blocks) replays beside the file's
    /// thread, git's (17.5 MB, 0.9 MB, 41,000 blocks) before it starts.
    #[test]
    fn sizes_go_beside_the_file_only_when_the_file_is_the_longer() {
        if std::env::var_os("TRACER_REPLAY_BESIDE").is_some() {
            return;
        }
        assert!(sizes_beside(140_000_000, 292_000_000, 71_000));
        assert!(!sizes_beside(17_500_000, 900_000, 41_000));
        assert!(!sizes_beside(200_000, 300_000, 10_000), "late_crowd");
    }

    /// A page's first words taken for an `mmap`ed chunk's header only when
    /// the chunk fits before the range's end, whatever the size says.
    #[test]
    fn a_chunk_header_never_reaches_past_the_range() {
        let at = 0x7f8f_2f00_0000u64;
        let end = at + 0x1d_0000;
        assert_eq!(mmapped_chunk(at, end, [0, 0x2000 | 2]), Some(0x2000));
        assert_eq!(mmapped_chunk(at, end, [0, 0x1d_0000 | 2]), Some(0x1d_0000));
        assert_eq!(mmapped_chunk(at, end, [0, 0x1d_1000 | 2]), None);
        // A size that wraps `at + size` around to below `end`.
        let wraps = (u64::MAX - at + 1 + 0x1000) & !0xfff;
        assert!(at.wrapping_add(wraps) <= end);
        assert_eq!(mmapped_chunk(at, end, [0, wraps | 2]), None);
        assert_eq!(mmapped_chunk(at, end, [0, !0xffd]), None);
        // Not mmapped, or a previous size: no chunk.
        assert_eq!(mmapped_chunk(at, end, [0, 0x2000]), None);
        assert_eq!(mmapped_chunk(at, end, [8, 0x2000 | 2]), None);
    }

    /// The chunk walk over a range whose page holds a header whose size
    /// wraps around: the range stays whole and no page below it is read.
    #[test]
    fn a_wrapping_chunk_size_leaves_the_walk_in_its_range() {
        struct Pages {
            base: u64,
            words: Vec<u64>,
            lowest: u64,
        }
        impl Memory for Pages {
            fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
                self.lowest = self.lowest.min(addr);
                let mut n = 0;
                for (k, b) in buf.chunks_mut(8).enumerate() {
                    let a = addr + 8 * k as u64;
                    let Some(i) = a.checked_sub(self.base).map(|o| (o / 8) as usize) else {
                        break;
                    };
                    let Some(w) = self.words.get(i) else { break };
                    b.copy_from_slice(&w.to_le_bytes()[..b.len()]);
                    n += b.len();
                }
                n
            }
        }
        let base = 0x7f8f_2f00_0000u64;
        let len = 4 * PAGE;
        let mut words = vec![0u64; (len / 8) as usize];
        // Page 1: prev 0, a size with IS_MMAPPED that wraps at + size.
        let at = base + PAGE;
        words[(PAGE / 8) as usize + 1] = ((u64::MAX - at + 1 + PAGE) & !0xfff) | 2;
        let mut mem = Pages {
            base,
            words,
            lowest: u64::MAX,
        };
        let mut out = Vec::new();
        walk_chunks(&[(base, base + len)], &mut mem, &mut out);
        assert_eq!(out, vec![(base, base + len)]);
        assert!(mem.lowest >= base, "read at {:#x}", mem.lowest);
    }

    #[test]
    fn our_own_memory_includes_the_unwinders_rule_table() {
        crate::cfi::init();
        let (start, len) = crate::cfi::table_bytes().expect("a rule table");
        let own = own_memory();
        assert!(
            own.iter().any(|&(a, b)| a <= start && start + len <= b),
            "{start:#x}+{len:#x} not in {own:x?}"
        );
    }

    #[test]
    fn roots_skip_malloc_memory_and_our_own_and_cut_stacks() {
        let g = 0x7f00_0000_0000u64;
        let h = 0x7f10_0000_0000u64;
        let maps = vec![
            map(0x1000, 0x3000, "rw", "/usr/lib/libc.so.6"), // data: root
            map(0x3000, 0x5000, "rw", "/usr/lib/libtracer.so"), // ours: cut
            map(0x10000, 0x20000, "rw", "[heap]"),           // brk heap: skip
            map(0x20000, 0x21000, "r-", "/usr/lib/x.so"),    // read-only: skip
            map(0x30000, 0x40000, "rw", ""),                 // holds a block: cut
            map(g, g + 0x21000, "rw", ""),                   // arena heap: skip
            map(g + 0x100000, g + 0x103000, "rw", ""),       // mmapped chunk then data
            map(g + 0x200000, g + 0x201000, "--", ""),       // guard
            map(g + 0x201000, g + 0x209000, "rw", ""),       // stack with a known sp
            map(g + 0x300000, g + 0x301000, "--", ""),       // guard
            map(g + 0x301000, g + 0x309000, "rw", ""),       // cached thread stack
            map(h, h + 0x21000, "rw", ""),                   // arena heap: skip
            map(h + 0x21000, h + ARENA_ALIGN, "--", ""),     // its reserved tail
            map(h + ARENA_ALIGN, h + ARENA_ALIGN + 0x4000, "rw", ""), // chunk, data
            map(0x7ffd_0000_0000, 0x7ffd_0002_0000, "rw", "[stack]"),
            map(0x9000, 0xa000, "rw", "/dev/dri/card0"), // device: skip
        ];
        let blocks = [(0x30010, 32)];
        let mut m = Fake::default();
        // heap_info: arena, prev, size, mprotect_size.
        m.put(g, g + 32);
        m.put(g + 16, 0x21000);
        m.put(g + 24, 0x21000);
        // An mmapped chunk of two pages at the start of the next mapping.
        m.put(g + 0x100008, 0x2000 | 2);
        // Another heap, and memory right above its reserved tail as a thread
        // stack would be above its guard: no stack, and its chunk is skipped.
        m.put(h, h + 32);
        m.put(h + 16, 0x21000);
        m.put(h + 24, 0x21000);
        m.put(h + ARENA_ALIGN + 8, 0x2000 | 2);
        let plan = RootPlan {
            excluded: &[(0x3000, 0x5000)],
            stack_pointers: &[g + 0x208000, 0x7ffd_0001_0008],
            unknown_threads: 0,
            tcb_extent: 0x800,
        };
        let roots = final_roots(&plan_roots(&maps, &plan, &mut m), &blocks, Vec::new());
        assert_eq!(
            roots,
            vec![
                (0x1000, 0x3000),
                (0x30000, 0x30010),
                (0x30030, 0x40000),
                (g + 0x102000, g + 0x103000),
                (g + 0x208000, g + 0x209000),
                (g + 0x309000 - 0x800, g + 0x309000),
                (h + ARENA_ALIGN + 0x2000, h + ARENA_ALIGN + 0x4000),
                (0x7ffd_0001_0008, 0x7ffd_0002_0000),
            ]
        );
        // With a running thread of unknown stack, cached-looking stacks are
        // scanned whole.
        let plan = RootPlan {
            unknown_threads: 1,
            ..plan
        };
        let roots = plan_roots(&maps, &plan, &mut m);
        assert!(roots.contains(&(g + 0x301000, g + 0x309000)));
        let above = h + ARENA_ALIGN;
        assert!(roots.contains(&(above + 0x2000, above + 0x4000)));
        assert!(!roots.iter().any(|&(a, b)| a < above + 0x2000 && b > above));
    }

    /// An arena heap in several mappings: in a forked child, glibc's later
    /// growth of a heap the parent made writable does not merge with the
    /// inherited part (each has its own anonymous memory), so the heap is
    /// two mappings or more, only the first starting with its `heap_info`.
    /// Every one of them is malloc's, none a root (`examples/daemon.c`:
    /// the parent's writer's heap, seen as roots in the daemon, held a
    /// stale copy of the address of the daemon's lost block, a run in 30);
    /// and memory right above the reserved tail of such a heap is not taken
    /// for a thread stack.
    #[test]
    fn an_arena_heap_in_several_mappings_is_no_root() {
        let h = 0x7f20_0000_0000u64;
        let mut maps = vec![
            map(h, h + 0x21000, "rw", ""),
            map(h + 0x21000, h + 0x5a000, "rw", ""),
            map(h + 0x5a000, h + 0x62000, "rw", ""),
            map(h + 0x62000, h + ARENA_ALIGN, "--", ""),
            map(h + ARENA_ALIGN, h + ARENA_ALIGN + 0x4000, "rw", ""),
            // Past a heap's writable size: not the heap's.
            map(h + 2 * ARENA_ALIGN, h + 2 * ARENA_ALIGN + 0x1000, "rw", ""),
            map(
                h + 2 * ARENA_ALIGN + 0x1000,
                h + 2 * ARENA_ALIGN + 0x3000,
                "rw",
                "",
            ),
        ];
        let j = h + 3 * ARENA_ALIGN;
        maps.extend([
            // After a gap, within a heap's writable size: not the heap's.
            map(j, j + 0x1000, "rw", ""),
            map(j + 0x2000, j + 0x3000, "rw", ""),
        ]);
        let mut m = Fake::default();
        m.put(h, h + 32);
        m.put(h + 16, 0x50000);
        m.put(h + 24, 0x62000);
        m.put(j, j + 32);
        m.put(j + 16, 0x10000);
        m.put(j + 24, 0x10000);
        let k = h + 2 * ARENA_ALIGN;
        m.put(k, k + 32);
        m.put(k + 16, 0x1000);
        m.put(k + 24, 0x1000);
        let plan = RootPlan {
            excluded: &[],
            stack_pointers: &[],
            unknown_threads: 0,
            tcb_extent: 0x800,
        };
        assert_eq!(
            plan_roots(&maps, &plan, &mut m),
            vec![
                (h + ARENA_ALIGN, h + ARENA_ALIGN + 0x4000),
                (k + 0x1000, k + 0x3000),
                (j + 0x2000, j + 0x3000),
            ]
        );
    }

    /// The chunk headers of a long anonymous mapping are read a batch of
    /// pages at a time, and give the same roots as a page-by-page look:
    /// chunks at the start, across a batch boundary, right after an
    /// unreadable page and on the last page; a header whose size runs past
    /// the mapping is not a chunk.
    #[test]
    fn chunk_headers_are_read_in_batches_across_holes() {
        struct Counting<'a>(&'a mut Fake, usize);
        impl Memory for Counting<'_> {
            fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
                self.0.read(addr, buf)
            }
            fn read_many(&mut self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
                self.1 += 1;
                default_read_many(self.0, ranges, buf)
            }
        }
        let b = 0x7f10_0000_1000u64;
        let p = |n: u64| b + n * PAGE;
        let pages = 1300;
        let maps = vec![map(b, p(pages), "rw", "")];
        let mut m = Fake::default();
        for (at, len) in [(0, 2), (511, 3), (701, 1), (1299, 1)] {
            m.put(p(at) + 8, (len * PAGE) | 2);
        }
        m.put(p(900) + 8, (500 * PAGE) | 2); // would end past the mapping
        m.holes.push((p(700), p(701)));
        let plan = RootPlan {
            excluded: &[],
            stack_pointers: &[],
            unknown_threads: 0,
            tcb_extent: 0,
        };
        let mut counted = Counting(&mut m, 0);
        let roots = plan_roots(&maps, &plan, &mut counted);
        assert_eq!(
            roots,
            vec![(p(2), p(511)), (p(514), p(701)), (p(702), p(1299))]
        );
        // 1,300 pages in batches of 512, one more after the unreadable page.
        assert!(counted.1 <= 5, "{} reads", counted.1);
    }

    /// A fake address space where only the `written` page ranges were ever
    /// written: `populated` says so (8 pages at a time, to go through its
    /// windows), and every read that touches another page is recorded.
    struct Unwritten {
        inner: Fake,
        written: Vec<(u64, u64)>,
        stray_reads: Vec<u64>,
    }

    impl Memory for Unwritten {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
            let end = addr + buf.len() as u64;
            if !self.written.iter().any(|&(a, b)| addr >= a && end <= b) {
                self.stray_reads.push(addr);
            }
            self.inner.read(addr, buf)
        }

        fn populated(&mut self, start: u64, end: u64, runs: &mut Runs) -> (usize, u64) {
            let upto = ((start / PAGE + 8) * PAGE).min(end);
            let mut n = 0;
            for &(a, b) in &self.written {
                let (a, b) = (a.max(start), b.min(upto));
                if a < b {
                    runs[n] = (a, b);
                    n += 1;
                }
            }
            (n, upto)
        }
    }

    /// The chunk walk looks only at pages that were written: chunk headers
    /// there are found (one of them covering unwritten pages), and a header
    /// planted in a page the kernel calls unwritten (which a real one can
    /// never be) is not even read.
    #[test]
    fn the_chunk_walk_reads_only_written_pages() {
        let base = 0x7f20_0000_0000u64;
        let p = |n: u64| base + n * PAGE;
        let mut fake = Fake::default();
        fake.put(p(11) + 8, (5 * PAGE) | 2); // pages 11..16, 14 and 15 unwritten
        fake.put(p(20) + 8, (4 * PAGE) | 2); // in an unwritten page
        fake.put(p(35) + 8, (3 * PAGE) | 2);
        let written = vec![(p(2), p(3)), (p(10), p(14)), (p(30), p(40))];
        let mut mem = Unwritten {
            inner: fake,
            written,
            stray_reads: Vec::new(),
        };
        let mut out = Vec::new();
        walk_chunks(&[(base + 24, p(40))], &mut mem, &mut out);
        assert_eq!(
            out,
            vec![(base + 24, p(11)), (p(16), p(35)), (p(38), p(40))]
        );
        assert_eq!(mem.stray_reads, Vec::<u64>::new());
        // Every page taken as written, the planted header counts.
        let mut out = Vec::new();
        walk_chunks(&[(base + 24, p(40))], &mut mem.inner, &mut out);
        assert_eq!(
            out,
            vec![
                (base + 24, p(11)),
                (p(16), p(20)),
                (p(24), p(35)),
                (p(38), p(40))
            ]
        );
    }

    /// Marking reads the written pages of a root range and of a large block,
    /// and nothing else: a pointer on a written page far into the range
    /// counts, one planted on an unwritten page is never seen.
    #[test]
    fn marking_reads_only_written_pages() {
        let base = ROOT.0;
        let p = |n: u64| base + n * PAGE;
        let big = 0x9100_0000u64; // a block of 100 pages
        let blocks = vec![
            (0x9000_0000, 32),
            (0x9000_1000, 32),
            (0x9000_2000, 32),
            (0x9000_3000, 32),
            (big, 100 * PAGE),
        ];
        let mut fake = Fake::default();
        fake.put(p(35) + 16, 0x9000_0000);
        fake.put(p(20), 0x9000_1000); // unwritten
        fake.put(p(1), big);
        fake.put(big + 90 * PAGE + 8, 0x9000_2000);
        fake.put(big + 50 * PAGE, 0x9000_3000); // unwritten
        let written = vec![
            (0x9000_0000, 0x9000_4000),
            (p(0), p(2)),
            (p(30), p(40)),
            (big, big + PAGE),
            (big + 90 * PAGE, big + 91 * PAGE),
        ];
        let mut mem = Unwritten {
            inner: fake,
            written,
            stray_reads: Vec::new(),
        };
        let mut c = Classifier::new(&blocks);
        c.mark_roots(&mut mem, &[(base, p(40))], &[]);
        let kinds = c.finish(&mut mem);
        assert_eq!(
            kinds,
            vec![Reachable, Definite, Reachable, Definite, Reachable]
        );
        assert_eq!(mem.stray_reads, Vec::<u64>::new());
    }

    /// The kernel's answer for memory of our own: a private mapping of 64
    /// pages with pages 3, 10 to 12, 40 and 63 written gives those runs
    /// (clipped to a range that starts and ends inside pages); a range
    /// longer than a window is answered a window at a time; a shared
    /// mapping, and a range of a few pages, are taken whole.
    #[test]
    fn the_page_table_names_the_pages_written() {
        let mut m = sys::Mapped::zeroed(64 * PAGE as usize).expect("a mapping");
        let base = m.as_ptr() as u64;
        // SAFETY: advice on a mapping of ours, whole pages: no huge page may
        // make its untouched pages present.
        unsafe {
            libc::madvise(
                base as usize as *mut libc::c_void,
                64 * PAGE as usize,
                libc::MADV_NOHUGEPAGE,
            )
        };
        for page in [3usize, 10, 11, 12, 40, 63] {
            m[page * PAGE as usize + 100] = 1;
        }
        let p = |n: u64| base + n * PAGE;
        let mut t = PageTable::new(&parse_maps(&own_maps()));
        let mut runs: Runs = [(0, 0); RUNS];
        let (n, upto) = t.populated(p(0) + 8, p(63) + 16, &mut runs);
        assert_eq!(upto, p(63) + 16);
        assert_eq!(
            runs[..n].to_vec(),
            vec![
                (p(3), p(4)),
                (p(10), p(13)),
                (p(40), p(41)),
                (p(63), p(63) + 16)
            ]
        );
        assert_eq!(t.skipped, (p(63) + 8 - p(0)) - 5 * PAGE - 16);
        // A short range: whole.
        let (n, _) = t.populated(p(20), p(22), &mut runs);
        assert_eq!(runs[..n].to_vec(), vec![(p(20), p(22))]);
        // Shared: whole, whatever its pages.
        let shared = vec![Mapping {
            start: base,
            end: p(64),
            read: true,
            write: true,
            shared: true,
            path: String::new(),
        }];
        let (n, _) = PageTable::new(&shared).populated(p(0), p(64), &mut runs);
        assert_eq!(runs[..n].to_vec(), vec![(p(0), p(64))]);
        // Past a window: answered up to its end.
        let far = PAGEMAP_WINDOW as u64 * PAGE;
        let wide = vec![Mapping {
            start: base - far,
            end: p(64),
            read: true,
            write: true,
            shared: false,
            path: String::new(),
        }];
        let (_, upto) = PageTable::new(&wide).populated(base - far + 8, p(64), &mut runs);
        assert_eq!(upto, base);
    }
}
