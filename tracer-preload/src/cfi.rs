//! A cached `.eh_frame` unwinder for x86-64: complete stacks on code without
//! frame pointers at close to frame-pointer cost.
//!
//! Unwinding one frame needs the call-frame rule of its return address: where
//! the canonical frame address (CFA) is (`rsp` or `rbp` plus an offset), that
//! the return address sits at CFA-8, and whether the caller's `rbp` was saved
//! (at CFA plus an offset). Almost every rule of compiled code has this shape.
//! The first time an address is seen its rule is computed from the object's
//! `.eh_frame_hdr` table and `.eh_frame` (found with glibc's lock-free
//! `_dl_find_object`, evaluated with gimli) and stored in a global table
//! of two-way sets, which grows with the program's code ([`Table`]). On top
//! of it each thread keeps the rules of its
//! previous capture frame by frame (a frame whose return address is the one
//! at the same depth last time reuses its rule) and its recent rules by
//! return address, so a frame costs a comparison and two checked reads. The
//! three common shapes (frame pointer, `rsp + k`, `rsp + k` with rbp saved)
//! and the outermost frame are walked by a loop of their own over a compact
//! form of those rules ([`Quick`]), with only the tests their shape leaves
//! open; every other rule takes the general step. All of these caches are
//! dropped when code is unloaded (`dlclose`).
//!
//! Anything else (signal trampolines, CFA expressions, rules on other
//! registers) makes [`capture`] return `None`, and the caller falls back to
//! libgcc's unwinder for that stack. Every stack read is checked against the
//! thread's stack bounds first, so a wrong rule yields a wrong frame, never a
//! fault.
//!
//! Cache entry: `key` = the return address; `val` bits:
//! ```text
//!  63..62 kind (0 empty, 1 frame, 2 outermost frame, 3 not representable)
//!  61     CFA is rbp-based (else rsp)
//!  60     rbp saved
//!  59..36 CFA offset (24 bits, unsigned)
//!  35..20 rbp save offset from CFA (16 bits, two's complement)
//!  19..0  check bits of the key (guards against a torn key/value pair)
//! ```

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Entries of the first table: 8 Ki (128 KiB, all resident: the hash
/// spreads them). python3 building a 300k dict has ~2,200 distinct return
/// addresses: 4,400 rule computations with 8 Ki direct-mapped entries
/// against 2,600 with 32 Ki, a few milliseconds; 2 Ki entries would take
/// 16,000.
const SLOTS: usize = 1 << 13;

/// The most entries a table grows to (2 MiB).
const MAX_SLOTS: usize = 1 << 17;

struct Entry {
    key: AtomicU64,
    val: AtomicU64,
}

/// The global table of rules by return address: `entries.len()` a power of
/// two, in sets of two entries. A program whose code has more return
/// addresses than the table holds well (cc1plus: 10,400 in its stacks) had
/// its rules computed again and again (each a search of the object's
/// unwind tables); once the rules computed reach twice the table's size it
/// is replaced by one four times larger, up to [`MAX_SLOTS`]. Tables are
/// never freed (a thread may still read one it loaded): at most 2.6 MiB in
/// all.
struct Table {
    entries: &'static [Entry],
    /// Rules computed into this table.
    computed: AtomicU64,
    /// The return addresses whose rules may have to go at an unload.
    unloadable: Unloadable,
}

impl Table {
    fn new(slots: usize) -> Table {
        Table {
            entries: empty_entries(slots),
            computed: AtomicU64::new(0),
            unloadable: Unloadable::new(slots),
        }
    }
}

/// Return addresses outside the objects loaded before the program started
/// (which glibc never unloads) whose rules were computed into a table: at
/// an unload only those are compared with the ranges that went, not the
/// whole table (8 Ki entries or more: ~12 us a `dlclose` of a plugin,
/// scanned in full). A superset of those in the table (entries replaced
/// since stay listed), as long as the table (mapped, its pages touched as
/// it fills). When it cannot be trusted (full, or a thread found it busy
/// and could not add to it) the unload scans the table as before and lists
/// afresh what the table holds. Never waited on: a hook in a signal handler
/// may find it held by the thread it interrupted.
struct Unloadable {
    busy: AtomicBool,
    /// Set when an address may be missing from the list.
    incomplete: AtomicBool,
    len: AtomicUsize,
    ips: &'static [AtomicU64],
}

impl Unloadable {
    fn new(slots: usize) -> Unloadable {
        let ips: &'static [AtomicU64] = match crate::sys::Mapped::zeroed(slots * 8) {
            // SAFETY: a fresh zeroed mapping of `slots` words (zero is a
            // valid AtomicU64, a page is aligned for it), never unmapped,
            // shared only as this slice.
            Some(map) => unsafe {
                core::slice::from_raw_parts(map.leak().cast::<AtomicU64>(), slots)
            },
            None => &[],
        };
        Unloadable {
            busy: AtomicBool::new(false),
            incomplete: AtomicBool::new(ips.is_empty()),
            len: AtomicUsize::new(0),
            ips,
        }
    }

    fn try_hold(&self) -> bool {
        !self.busy.swap(true, Ordering::Acquire)
    }

    fn release(&self) {
        self.busy.store(false, Ordering::Release);
    }

    /// Lists `ip` (a rule about to be stored for it).
    fn note(&self, ip: u64) {
        if !self.try_hold() {
            self.incomplete.store(true, Ordering::Release);
            return;
        }
        let n = self.len.load(Ordering::Relaxed);
        match self.ips.get(n) {
            Some(slot) => {
                slot.store(ip, Ordering::Relaxed);
                self.len.store(n + 1, Ordering::Relaxed);
            }
            None => self.incomplete.store(true, Ordering::Release),
        }
        self.release();
    }
}

/// The address ranges of the objects loaded before the program started,
/// read by [`init`]: glibc never unloads them, so their rules never go.
static PERMANENT: std::sync::OnceLock<Box<[(u64, u64)]>> = std::sync::OnceLock::new();

/// The main program's loaded segments, `[start, end)`, from the auxiliary
/// vector (read by [`init`]). Where the program's segments are not
/// contiguous, `_dl_find_object` gives the range of the one segment that
/// holds the code (node's binary: its text, then a page of stubs, then its
/// read-only data with the unwind tables); the tables' own segment is
/// found here instead.
static PROGRAM_SEGMENTS: std::sync::OnceLock<Box<[(u64, u64)]>> = std::sync::OnceLock::new();

/// The main program's `PT_LOAD` segments (empty without its program
/// headers: see [`crate::sys::program_headers`]).
fn program_segments() -> Box<[(u64, u64)]> {
    crate::sys::program_headers().map_or_else(
        || Box::new([]) as Box<[(u64, u64)]>,
        |(bias, headers)| crate::sys::load_segments(bias, headers, |_| true).collect(),
    )
}

/// The end of the mapped range from which an object's unwind tables at
/// `addr` may be read: `end` when `addr` lies in `[start, end)` (what
/// `_dl_find_object` gave), else the end of the main program's segment
/// holding `addr` when `start` is the program's too (see
/// [`PROGRAM_SEGMENTS`]).
fn tables_end(addr: u64, start: u64, end: u64) -> Option<u64> {
    if (start..end).contains(&addr) {
        return Some(end);
    }
    let segments = PROGRAM_SEGMENTS.get()?;
    let ours = |a: u64| segments.iter().find(|&&(lo, hi)| (lo..hi).contains(&a));
    ours(start)?;
    ours(addr).map(|&(_, hi)| hi)
}

/// Whether `ip` lies in an object that is never unloaded.
fn permanent(ip: u64) -> bool {
    PERMANENT
        .get()
        .is_some_and(|r| r.iter().any(|&(lo, hi)| ip >= lo && ip < hi))
}

static TABLE: AtomicPtr<Table> = AtomicPtr::new(core::ptr::null_mut());
/// Rules computed in all, for `TRACER_STACK_STATS`.
static COMPUTED: AtomicU64 = AtomicU64::new(0);
static FIND_OBJECT: AtomicPtr<libc::c_void> = AtomicPtr::new(core::ptr::null_mut());

const KIND_FRAME: u64 = 1;
const KIND_END: u64 = 2;
const KIND_COMPLEX: u64 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Frame {
        cfa_rbp: bool,
        cfa_off: u32,
        rbp_off: Option<i16>,
    },
    End,
    Complex,
}

fn check_bits(ip: u64) -> u64 {
    (ip ^ (ip >> 20) ^ (ip >> 40)) & 0xf_ffff
}

pub fn encode(ip: u64, rule: Rule) -> u64 {
    let body = match rule {
        Rule::Frame {
            cfa_rbp,
            cfa_off,
            rbp_off,
        } => {
            (KIND_FRAME << 62)
                | ((cfa_rbp as u64) << 61)
                | ((rbp_off.is_some() as u64) << 60)
                | (((cfa_off as u64) & 0xff_ffff) << 36)
                | (((rbp_off.unwrap_or(0) as u16) as u64) << 20)
        }
        Rule::End => KIND_END << 62,
        Rule::Complex => KIND_COMPLEX << 62,
    };
    body | check_bits(ip)
}

pub fn decode(ip: u64, v: u64) -> Option<Rule> {
    if v & 0xf_ffff != check_bits(ip) {
        return None;
    }
    match v >> 62 {
        KIND_FRAME => Some(Rule::Frame {
            cfa_rbp: v & (1 << 61) != 0,
            cfa_off: ((v >> 36) & 0xff_ffff) as u32,
            rbp_off: (v & (1 << 60) != 0).then_some(((v >> 20) & 0xffff) as u16 as i16),
        }),
        KIND_END => Some(Rule::End),
        KIND_COMPLEX => Some(Rule::Complex),
        _ => None,
    }
}

/// `slots` empty entries, never freed, in a mapping of their own rather
/// than the program's heap: tables are made on the program's threads (in
/// our constructor, and by the capture that fills one), so they went into
/// the program's arena (cc1plus's two: 0.64 MB of it at exit) and moved
/// where its own blocks go. The heap serves only when the mapping fails.
fn empty_entries(slots: usize) -> &'static [Entry] {
    if let Some(map) = crate::sys::Mapped::zeroed(slots * core::mem::size_of::<Entry>()) {
        let p = map.leak().cast::<Entry>();
        // SAFETY: a fresh zeroed mapping of `slots` entries (zero is a valid
        // `AtomicU64`, and a page is aligned for it), never unmapped, shared
        // only as this shared slice.
        return unsafe { core::slice::from_raw_parts(p, slots) };
    }
    Box::leak(
        (0..slots)
            .map(|_| Entry {
                key: AtomicU64::new(0),
                val: AtomicU64::new(0),
            })
            .collect(),
    )
}

/// Prepares the cache; called from our constructor (allocates, looks up
/// `_dl_find_object`). Until then, and where this fails, `capture` is `None`.
pub fn init() {
    if !TABLE.load(Ordering::Acquire).is_null() {
        return;
    }
    // SAFETY: dlsym with a valid NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    if f.is_null() {
        return;
    }
    FIND_OBJECT.store(f, Ordering::Release);
    // SAFETY: getenv with a valid NUL-terminated name; the value is only
    // compared, while no other thread of ours changes the environment.
    let verify = unsafe {
        let v = libc::getenv(c"TRACER_UNWIND_VERIFY".as_ptr());
        !v.is_null() && core::ffi::CStr::from_ptr(v).to_bytes() == b"1"
    };
    VERIFY.store(verify, Ordering::Relaxed);
    let _ = PERMANENT.set(crate::objects::Loaded::read().ranges().into());
    let _ = PROGRAM_SEGMENTS.set(program_segments());
    TABLE.store(Box::leak(Box::new(Table::new(SLOTS))), Ordering::Release);
}

/// Makes the unwinding context [`with_context`] keeps now, before the
/// program has freed anything: made later, at the first rule computed,
/// its request (over a kilobyte) has glibc merge the fast bins of the
/// program's arena first. Where no stack is walked during the run
/// (`TRACER_STACK_DEPTH=0`) that first computation is the exit's walk,
/// after a program like perl freed 300k small blocks (~30 ms); with
/// stacks it comes at the program's first allocations, and making it at
/// start instead moved the program's first blocks (the constructor's own
/// stale stack words then pointed at one of `examples/daemon.c` in 2 runs
/// of 25, which the exit scan took for a reference): only for the former.
pub fn keep_context() {
    keep(Box::new(Context::new_in()));
}

/// Keeps `ctx` as the context [`with_context`] hands out, unless another
/// thread's was kept meanwhile: then `ctx` goes.
fn keep(ctx: Box<Context>) {
    let raw = Box::into_raw(ctx);
    if CONTEXT
        .compare_exchange(
            core::ptr::null_mut(),
            raw,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: `raw` came from Box::into_raw just above and is not shared.
        drop(unsafe { Box::from_raw(raw) });
    }
}

/// The global table, once [`init`] made it.
#[inline]
fn table() -> Option<&'static Table> {
    // SAFETY: a non-null TABLE points to a leaked Table, never freed.
    unsafe { TABLE.load(Ordering::Acquire).as_ref() }
}

/// Rules computed so far (all tables).
pub fn rules_computed() -> u64 {
    COMPUTED.load(Ordering::Relaxed)
}

/// Entries of the current table.
pub fn table_slots() -> usize {
    table().map_or(0, |t| t.entries.len())
}

/// Where the current table's entries lie: address and length in bytes.
#[cfg(test)]
pub fn table_bytes() -> Option<(u64, u64)> {
    let t = table()?;
    Some((
        t.entries.as_ptr() as u64,
        core::mem::size_of_val(t.entries) as u64,
    ))
}

/// The first entry of `ip`'s set of two in a table of `len` entries.
#[inline]
fn set_of(ip: u64, len: usize) -> usize {
    (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (len - 2)
}

/// `e`'s value when it holds `ip`'s rule.
#[inline(always)]
fn hit(e: &Entry, ip: u64) -> Option<u64> {
    if e.key.load(Ordering::Acquire) != ip {
        return None;
    }
    let v = e.val.load(Ordering::Acquire);
    (v & 0xf_ffff == check_bits(ip) && v >> 62 != 0).then_some(v)
}

/// The cached value of `ip`'s rule, encoded, with check bits that match
/// `ip` (computed and stored on a miss: in the set's first entry, the one
/// there moving to the second, so that two addresses used in turn both
/// stay).
#[inline]
fn lookup(table: &Table, ip: u64) -> u64 {
    lookup_in(&TABLE, table, ip)
}

/// [`lookup`] in `table`, which `home` held when it was loaded (and which
/// [`grow`] replaces there).
#[inline]
fn lookup_in(home: &AtomicPtr<Table>, table: &Table, ip: u64) -> u64 {
    let i = set_of(ip, table.entries.len());
    let (first, second) = (&table.entries[i], &table.entries[i + 1]);
    if let Some(v) = hit(first, ip).or_else(|| hit(second, ip)) {
        return v;
    }
    let v = encode(ip, compute(ip));
    if !permanent(ip) {
        table.unloadable.note(ip);
    }
    // A thread reading the pair meanwhile may see a key with another
    // address's value: the check bits reject it and it computes the rule.
    // The first entry's rule moves to the second, unless the first is empty
    // (forgotten at an unload): the second's rule then stays.
    let moved = first.key.load(Ordering::Acquire);
    if moved != 0 {
        second
            .val
            .store(first.val.load(Ordering::Acquire), Ordering::Release);
        second.key.store(moved, Ordering::Release);
    }
    first.val.store(v, Ordering::Release);
    first.key.store(ip, Ordering::Release);
    COMPUTED.fetch_add(1, Ordering::Relaxed);
    let computed = table.computed.fetch_add(1, Ordering::Relaxed) + 1;
    if computed == 2 * table.entries.len() as u64 && table.entries.len() < MAX_SLOTS {
        grow(home, table);
    }
    v
}

/// Replaces `old` by an empty table four times larger (the thread that
/// counted the threshold's rule, once); `old` stays allocated for the
/// threads still reading it. The rules are computed again as they are
/// needed (~10,000 for cc1plus, once): copying them could race with
/// [`invalidate`] clearing `old` and bring a stale rule along.
#[cold]
#[inline(never)]
fn grow(home: &AtomicPtr<Table>, old: &Table) {
    let new = Box::into_raw(Box::new(Table::new(old.entries.len() * 4)));
    let old = old as *const Table as *mut Table;
    if home
        .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Replaced meanwhile (code unloaded does not replace it: only this
        // does, once per table): ours is not needed (its entries stay
        // mapped, never written: no memory).
        // SAFETY: `new` came from Box::into_raw above and was never shared.
        drop(unsafe { Box::from_raw(new) });
    }
}

/// glibc's `struct dl_find_object` (2.35+).
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut libc::c_void,
    map_end: *mut libc::c_void,
    link_map: *mut libc::c_void,
    eh_frame: *mut libc::c_void,
    reserved: [u64; 7],
}

type FindObjectFn = unsafe extern "C" fn(*mut libc::c_void, *mut DlFindObject) -> libc::c_int;

/// The rule for the frame whose return address is `ip` (looked up at `ip-1`,
/// inside the call instruction).
#[cold]
pub(crate) fn compute(ip: u64) -> Rule {
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, NativeEndian, UnwindSection};
    let find = FIND_OBJECT.load(Ordering::Acquire);
    if find.is_null() {
        return Rule::Complex;
    }
    let addr = ip.wrapping_sub(1);
    let mut obj = DlFindObject {
        flags: 0,
        map_start: core::ptr::null_mut(),
        map_end: core::ptr::null_mut(),
        link_map: core::ptr::null_mut(),
        eh_frame: core::ptr::null_mut(),
        reserved: [0; 7],
    };
    // SAFETY: `find` is glibc's _dl_find_object, called with a writable struct
    // of the layout it documents.
    let rc = unsafe {
        core::mem::transmute::<*mut libc::c_void, FindObjectFn>(find)(addr as *mut _, &mut obj)
    };
    if rc != 0 || obj.eh_frame.is_null() {
        return Rule::End; // no object or no unwind tables: nothing to unwind into
    }
    let hdr_addr = obj.eh_frame as u64;
    let (start, end) = (obj.map_start as u64, obj.map_end as u64);
    let Some(hdr_end) = tables_end(hdr_addr, start, end) else {
        return Rule::Complex;
    };
    // SAFETY: [hdr_addr, hdr_end) lies inside the object's mapping (or its
    // segment), which stays mapped while the object is loaded (its code is
    // on our stack right now).
    let hdr_bytes = unsafe {
        core::slice::from_raw_parts(hdr_addr as *const u8, (hdr_end - hdr_addr) as usize)
    };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr);
    let Ok(parsed) = EhFrameHdr::new(hdr_bytes, NativeEndian).parse(&bases, 8) else {
        return Rule::Complex;
    };
    let eh_addr = match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a,
        gimli::Pointer::Indirect(_) => return Rule::Complex,
    };
    let Some(eh_end) = tables_end(eh_addr, start, end) else {
        return Rule::Complex;
    };
    // SAFETY: as above, inside the object's mapping or its segment.
    let eh_bytes =
        unsafe { core::slice::from_raw_parts(eh_addr as *const u8, (eh_end - eh_addr) as usize) };
    let eh_frame = EhFrame::new(eh_bytes, NativeEndian);
    let bases = bases.set_eh_frame(eh_addr);
    let Some(table) = parsed.table() else {
        return Rule::Complex;
    };
    with_context(|ctx| {
        let row = match table.unwind_info_for_address(&eh_frame, &bases, ctx, addr, |s, b, o| {
            s.cie_from_offset(b, o)
        }) {
            Ok(row) => row,
            Err(gimli::Error::NoUnwindInfoForAddress) => return Rule::End,
            Err(_) => return Rule::Complex,
        };
        rule_of_row(row)
    })
}

/// gimli's context storage with room for 32 register rules in a row,
/// where its default has 192: a row is then ~1 KiB instead of ~6 KiB, and
/// a rule computation, which runs on the program's stack inside its
/// `malloc`, needs a few KiB of stack instead of ~10 (a thread on a 16 KiB
/// stack overflowed: `small_stack.c`). An x86-64 CFI row describes the
/// return address and at most the callee-saved registers; more rules make
/// the rule "complex" (libgcc's unwinder takes the stack then).
struct Rows;

impl gimli::UnwindContextStorage<usize> for Rows {
    type Rules = [(gimli::Register, gimli::RegisterRule<usize>); 32];
    type Stack = Box<[gimli::UnwindTableRow<usize, Self>; 4]>;
}

type Context = gimli::UnwindContext<usize, Rows>;

/// The unwinding context kept between rule computations (see
/// [`with_context`]); null while a thread uses it.
static CONTEXT: AtomicPtr<Context> = AtomicPtr::new(core::ptr::null_mut());

/// Runs `f` with an unwinding context: the one kept, or a new one while
/// another thread has it. A new context allocates its rule stack, over a
/// kilobyte: glibc serves a request that large only after merging every
/// free block of its fast bins (`malloc_consolidate`), and one such
/// allocation per rule computed, from the program's thread and arena,
/// cost perl 300k hash ~75 ms of consolidation and slower allocations
/// after it (unlink_chunk), 2.1x of its untraced time where the hooks' own
/// work is a tenth of that.
fn with_context<R>(f: impl FnOnce(&mut Context) -> R) -> R {
    let kept = CONTEXT.swap(core::ptr::null_mut(), Ordering::AcqRel);
    let mut ctx = if kept.is_null() {
        Box::new(Context::new_in())
    } else {
        // SAFETY: a non-null CONTEXT came from Box::into_raw below, and the
        // swap gave it to this thread alone.
        unsafe { Box::from_raw(kept) }
    };
    let r = f(&mut ctx);
    keep(ctx);
    r
}

/// The cached form of an unwind table row: CFA from `rsp` or `rbp` plus an
/// offset, the caller's `rbp` at an offset from the CFA, if saved.
fn rule_of_row(row: &gimli::UnwindTableRow<usize, Rows>) -> Rule {
    use gimli::{CfaRule, RegisterRule, X86_64};
    match row.register(X86_64::RA) {
        Some(RegisterRule::Undefined) => return Rule::End,
        Some(RegisterRule::Offset(-8)) => {}
        _ => return Rule::Complex,
    }
    let (cfa_rbp, cfa_off) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
            (false, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RBP => {
            (true, *offset)
        }
        _ => return Rule::Complex,
    };
    if !(0..1 << 24).contains(&cfa_off) {
        return Rule::Complex;
    }
    let rbp_off = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => None,
        Some(RegisterRule::Offset(o)) if (i16::MIN as i64..=i16::MAX as i64).contains(&o) => {
            Some(o as i16)
        }
        _ => return Rule::Complex,
    };
    Rule::Frame {
        cfa_rbp,
        cfa_off: cfa_off as u32,
        rbp_off,
    }
}

/// Unwinds from the first frame outside the tracer: `ip` its return address,
/// `rsp`/`rbp` the registers as that frame will see them. `None` when a frame
/// cannot be expressed in the cached form (use libgcc's unwinder instead).
///
/// Same frames as [`capture_reference`] (a test proves it over real stacks,
/// and `TRACER_UNWIND_VERIFY=1` checks every capture of a traced program);
/// the difference is where a frame's rule comes from: the thread's memo of
/// the previous capture when the return address at that depth is the same,
/// the global table otherwise.
///
/// `memo` is the calling thread's (`tls::Capture::memo`); without one (the
/// thread's TLS is torn down) every rule comes from the global table.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn capture(
    memo: Option<&mut Memo>,
    buf: &mut [u64],
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
) -> Option<usize> {
    let table = table()?;
    let got = match memo {
        Some(memo) => walk(memo, buf, ip, rsp, rbp, lo, hi, |ip| lookup(table, ip)),
        None => walk_table(table, buf, ip, rsp, rbp, lo, hi),
    };
    if VERIFY.load(Ordering::Relaxed) {
        verify(table, buf, got, ip, rsp, rbp, lo, hi);
    }
    got
}

/// Frames of the previous capture a thread remembers (deeper ones always go
/// to the global table).
const MEMO_FRAMES: usize = 64;

/// One thread's memo: frame `k` of its previous capture, as its return
/// address and that address's rule. A rule depends on the address alone while
/// the code at it stays loaded, so `entries[k]` is what the global table
/// would answer for `entries[k].ra`; `generation` discards the whole memo
/// when code was unloaded since (see [`invalidate`]).
pub struct Memo {
    generation: u64,
    /// Captures left that skip the depth memo (see [`walk_memo`]).
    by_address_runs: u32,
    /// Frames of the current capture whose address was not the memo's at
    /// their depth.
    misses: u32,
    entries: [Slot; MEMO_FRAMES],
    /// `entries` again, reduced to what [`walk_quick`] reads: always
    /// `quick_of(&entries[k])`.
    /// One more than the memo's depth: `quick[MEMO_FRAMES]` stays
    /// [`NO_QUICK`], the end marker of [`walk_quick`]'s loop.
    quick: [Quick; MEMO_FRAMES + 1],
    /// The thread's recent rules by return address (direct-mapped): where
    /// a capture's frames sit at other depths than the previous capture's
    /// (an interpreter: python3's allocations come from call chains of
    /// varying length, and the depth memo hits ~5% of its frames there),
    /// the rule still comes from here instead of the global table.
    by_ra: ByRa,
}

/// The thread's rules by return address: `slots[i]`, and the same rule in
/// [`walk_quick`]'s form, `quick[i] == quick_of(&slots[i])`.
///
/// `paths[i]`: the quick rules of the [`PATH`] frames that followed the last
/// frame at index `i` (its caller, the caller's caller, ...), as guesses:
/// [`walk_quick_by_address`] takes each where its address is the one found
/// on the stack. They are looked up once, with the first frame's own
/// address, so the frames after it need no lookup that waits for their
/// return address to be loaded: their loads overlap. A return address has
/// one caller almost always (python3: 98.7% of frames).
struct ByRa {
    slots: [Slot; BY_RA],
    quick: [Quick; BY_RA],
    paths: [[Quick; PATH]; BY_RA],
}

/// Frames a path guesses (see [`ByRa`]); the last of them starts the next
/// path.
const PATH: usize = 4;

const EMPTY_BY_RA: ByRa = ByRa {
    slots: [EMPTY_SLOT; BY_RA],
    quick: [NO_QUICK; BY_RA],
    paths: [[NO_QUICK; PATH]; BY_RA],
};

/// Entries of [`Memo::by_ra`] (24 bytes each).
const BY_RA: usize = 256;

/// Where `ip`'s rule lies in [`Memo::by_ra`].
#[inline(always)]
fn by_ra_index(ip: u64) -> usize {
    (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize & (BY_RA - 1)
}

/// `ip`'s rule from the thread's rules by address, else from `lookup`
/// (and kept there).
#[inline(always)]
fn by_address(by_ra: &mut ByRa, ip: u64, lookup: &mut impl FnMut(u64) -> u64) -> Slot {
    let i = by_ra_index(ip);
    let h = &mut by_ra.slots[i];
    if h.ra != ip {
        *h = slot_of(ip, lookup(ip));
        by_ra.quick[i] = quick_of(h);
    }
    *h
}

#[cfg(test)]
impl Memo {
    /// A memo before its first capture (the hooks' start all-zero, in a
    /// lane's fresh mapping, which the generation check resets the same).
    pub const NEW: Memo = Memo {
        generation: 0,
        by_address_runs: 0,
        misses: 0,
        entries: [EMPTY_SLOT; MEMO_FRAMES],
        quick: [NO_QUICK; MEMO_FRAMES + 1],
        by_ra: EMPTY_BY_RA,
    };
}

/// Bumped whenever cached rules may have become stale (code unloaded).
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Set from `TRACER_UNWIND_VERIFY=1` at init: every capture is repeated
/// without the memo and any difference is reported on stderr.
static VERIFY: AtomicBool = AtomicBool::new(false);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);
static VERIFIED: AtomicU64 = AtomicU64::new(0);

/// Code was unloaded (`dlclose` returned): an address may later belong to
/// other code with other rules, so every cached rule goes, the global table's
/// and the threads' memos (each notices the new generation at its next
/// capture). Threads capturing meanwhile only look up addresses of code on
/// their own stacks, which is still loaded.
pub fn invalidate() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let Some(table) = table() else {
        return;
    };
    for e in table.entries.iter() {
        e.key.store(0, Ordering::Release);
        e.val.store(0, Ordering::Release);
    }
}

/// Code in `ranges` was unloaded and nothing else changed (see
/// `objects::Loaded::unloaded_since`): the global table's rules for return
/// addresses inside them go, the others stay (a plugin loaded and unloaded
/// in a loop no longer costs every frame's rule to be computed again), and
/// the threads' memos are dropped as in [`invalidate`]. Nothing happens
/// when `ranges` is empty.
pub fn invalidate_ranges(ranges: &[(u64, u64)]) {
    if ranges.is_empty() {
        return;
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(table) = table() {
        forget_ranges(table, ranges);
    }
}

/// Empties `table`'s entries whose return address lies in one of `ranges`:
/// those of the addresses [`Unloadable`] lists, or, when the list cannot
/// be trusted, every entry's, listing afresh what stays.
fn forget_ranges(table: &Table, ranges: &[(u64, u64)]) {
    // Code the list does not cover: an object a library's constructor
    // loaded, and now unloads, before ours read the permanent ones.
    let unlisted = PERMANENT.get().is_some_and(|p| {
        ranges
            .iter()
            .any(|&(lo, hi)| p.iter().any(|&(plo, phi)| lo < phi && plo < hi))
    });
    if unlisted {
        scan_out(table, ranges);
        return;
    }
    let list = &table.unloadable;
    if !list.try_hold() {
        scan_out(table, ranges);
        list.incomplete.store(true, Ordering::Release);
        return;
    }
    if list.incomplete.swap(false, Ordering::AcqRel) {
        // One pass: out with what went, and what stays listed again (a
        // thread that finds the list busy meanwhile marks it incomplete
        // once more).
        let mut n = 0;
        for e in table.entries.iter() {
            let ra = e.key.load(Ordering::Acquire);
            if inside(ra, ranges) {
                e.key.store(0, Ordering::Release);
                e.val.store(0, Ordering::Release);
                continue;
            }
            if ra == 0 || permanent(ra) {
                continue;
            }
            match list.ips.get(n) {
                Some(slot) => slot.store(ra, Ordering::Relaxed),
                None => {
                    list.incomplete.store(true, Ordering::Release);
                    break;
                }
            }
            n += 1;
        }
        list.len.store(n.min(list.ips.len()), Ordering::Relaxed);
        list.release();
        return;
    }
    let mut n = list.len.load(Ordering::Relaxed);
    let mut i = 0;
    while i < n {
        let ip = list.ips[i].load(Ordering::Relaxed);
        if !inside(ip, ranges) {
            i += 1;
            continue;
        }
        let set = set_of(ip, table.entries.len());
        for e in &table.entries[set..set + 2] {
            if e.key.load(Ordering::Acquire) == ip {
                e.key.store(0, Ordering::Release);
                e.val.store(0, Ordering::Release);
            }
        }
        n -= 1;
        list.ips[i].store(list.ips[n].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    list.len.store(n, Ordering::Relaxed);
    list.release();
}

/// Whether `ra` lies in one of `ranges`. One unsigned comparison per range
/// and no branch until the end: whether an entry's address lies below a
/// range is a coin toss (the table is ordered by hash), and `ra >= lo &&
/// ra < hi` cost a mispredicted branch every other entry (~18 us a scan at
/// 8 Ki entries, most of a plugin's unload).
#[inline(always)]
fn inside(ra: u64, ranges: &[(u64, u64)]) -> bool {
    ranges.iter().fold(false, |hit, &(lo, hi)| {
        hit | (ra.wrapping_sub(lo) < hi.wrapping_sub(lo))
    })
}

/// Empties every entry of `table` whose return address lies in `ranges`.
fn scan_out(table: &Table, ranges: &[(u64, u64)]) {
    for e in table.entries.iter() {
        let ra = e.key.load(Ordering::Acquire);
        if inside(ra, ranges) {
            e.key.store(0, Ordering::Release);
            e.val.store(0, Ordering::Release);
        }
    }
}

/// Whether the 8-byte word at `a` lies inside `[lo, hi)` and is aligned.
#[inline(always)]
fn readable(a: u64, lo: u64, hi: u64) -> bool {
    a >= lo && a.checked_add(8).is_some_and(|e| e <= hi) && a.is_multiple_of(8)
}

/// A rule unpacked for [`apply`]: no decoding and no branch on its kind on
/// the hot path. `ra` is the return address the rule belongs to (the memo's
/// key). 24 bytes.
///
/// The outermost frame ([`Rule::End`]) and a rule that is not representable
/// ([`Rule::Complex`]) are both "CFA = rsp + 0", which fails the check
/// `cfa > rsp` in [`apply`], so the walk stops after storing the frame as it
/// must; only then is [`F_COMPLEX`] looked at (the capture goes to libgcc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    ra: u64,
    /// Added to the CFA register: the CFA.
    cfa_off: u32,
    /// Added to the CFA register: where the caller's `rbp` was saved, or
    /// `cfa_off - 8` (the return address's own slot, read and discarded)
    /// when it was not.
    rbp_at_off: i32,
    /// [`SHAPE_FP`], [`SHAPE_RSP`], [`SHAPE_RSP_SAVED`] or
    /// [`SHAPE_GENERAL`]: which branch of [`apply`] evaluates the rule.
    shape: u8,
    /// [`F_CFA_RBP`], [`F_RBP_SAVED`], [`F_COMPLEX`].
    flags: u8,
}

/// Any rule: the offsets and flags of the slot.
const SHAPE_GENERAL: u8 = 0;
/// The frame-pointer convention: CFA = rbp + 16, caller's rbp at CFA-16.
const SHAPE_FP: u8 = 1;
/// CFA = rsp + offset, rbp not saved (leaf code, code without frame
/// pointers).
const SHAPE_RSP: u8 = 2;
/// CFA = rsp + offset, the caller's rbp saved (code without frame pointers
/// that uses rbp as an ordinary callee-saved register: most of python3).
const SHAPE_RSP_SAVED: u8 = 3;

/// The CFA register is `rbp` (else `rsp`).
const F_CFA_RBP: u8 = 1;
/// The caller's `rbp` was saved (else it is unchanged).
const F_RBP_SAVED: u8 = 2;
/// Not representable: the capture goes to libgcc.
const F_COMPLEX: u8 = 4;

/// What an empty memo slot holds: address 0 and its rule (`compute(0)` finds
/// no object: the outermost frame), so a slot that was never filled can be
/// used like any other.
const EMPTY_SLOT: Slot = Slot {
    ra: 0,
    cfa_off: 0,
    rbp_at_off: -8,
    shape: SHAPE_GENERAL,
    flags: 0,
};

/// Which branch of [`apply`] evaluates a rule. The rsp-based shapes are
/// narrowed to the rules whose words lie between `rsp` and the CFA by
/// construction (an aligned CFA at least 8 above `rsp`; a saved `rbp`
/// aligned, at or above `rsp` and below the return address): given `apply`'s
/// precondition, their only test left is `cfa <= hi`. Any other rule is
/// [`SHAPE_GENERAL`], which performs every test.
fn shape_of(cfa_rbp: bool, saved: bool, cfa_off: u32, rbp_off: i32) -> u8 {
    let framed = cfa_off >= 8 && cfa_off.is_multiple_of(8);
    // Where the saved rbp lies relative to rsp (cfa_off < 2^24: no overflow).
    let rbp_at = cfa_off as i32 + rbp_off;
    if cfa_rbp && cfa_off == 16 && saved && rbp_off == -16 {
        SHAPE_FP
    } else if !cfa_rbp && !saved && framed {
        SHAPE_RSP
    } else if !cfa_rbp
        && saved
        && framed
        && rbp_at >= 0
        && rbp_at <= cfa_off as i32 - 8
        && rbp_at % 8 == 0
    {
        SHAPE_RSP_SAVED
    } else {
        SHAPE_GENERAL
    }
}

/// Unpacks the encoded rule `v` of return address `ra` (check bits already
/// verified by [`lookup`]).
#[inline(always)]
fn slot_of(ra: u64, v: u64) -> Slot {
    match v >> 62 {
        KIND_FRAME => {
            let saved = v & (1 << 60) != 0;
            let cfa_rbp = v & (1 << 61) != 0;
            // 24 bits: the sums below fit an i32.
            let cfa_off = ((v >> 36) & 0xff_ffff) as u32;
            let rbp_off = (v >> 20) as u16 as i16 as i32;
            Slot {
                ra,
                cfa_off,
                rbp_at_off: cfa_off as i32 + if saved { rbp_off } else { -8 },
                shape: shape_of(cfa_rbp, saved, cfa_off, rbp_off),
                flags: if cfa_rbp { F_CFA_RBP } else { 0 } | if saved { F_RBP_SAVED } else { 0 },
            }
        }
        KIND_END => Slot { ra, ..EMPTY_SLOT },
        _ => Slot {
            ra,
            flags: F_COMPLEX,
            ..EMPTY_SLOT
        },
    }
}

/// Applies a frame's rule to the registers: the caller's return address,
/// `rsp` and `rbp`, or `None` where the walk ends, exactly where the
/// reference walk ends (a word outside the stack or unaligned, a CFA not
/// above `rsp`).
///
/// Requires (checked by [`walk`] before the first frame, kept since: the
/// next `rsp` is an accepted CFA, aligned and above the last one) `rsp`
/// 8-aligned, `lo <= rsp <= hi`, `hi - lo >= 16` and `hi < 2^62` (`rsp`
/// plus a 24-bit offset cannot wrap). `span16` is `hi - lo - 16`:
/// `a - lo <= span16` (wrapping: an `a` below `lo` is huge) is `lo <= a &&
/// a + 16 <= hi`.
///
/// The three common shapes get branches of their own, the frame-pointer
/// one first, each with only the tests its rule leaves open (see
/// [`shape_of`]): the processor predicts the branch and starts the next
/// frame's loads from `rbp` (frame pointers) or `rsp` alone, instead of
/// waiting for the slot's flags (and, through the CFA register's selection,
/// for the rbp just loaded). Other rules read both words whatever the rule,
/// so their loads wait on no branch.
#[inline(always)]
fn apply(s: &Slot, rsp: u64, rbp: u64, lo: u64, hi: u64, span16: u64) -> Option<(u64, u64, u64)> {
    if s.shape == SHAPE_FP {
        // The saved rbp at rbp, the return address at rbp + 8, the CFA at
        // rbp + 16: both words inside the stack is `lo <= rbp` and `rbp +
        // 16 <= hi` (one comparison), aligned with rbp, and the CFA above
        // rsp (the reference's three tests).
        if rbp & 7 != 0 || rbp.wrapping_sub(lo) > span16 {
            return None;
        }
        // No overflow: rbp <= hi - 16.
        let cfa = rbp + 16;
        if cfa <= rsp {
            return None;
        }
        // SAFETY: [rbp, rbp + 16) lies inside this thread's stack (above).
        let (saved, ra) = unsafe { (*(rbp as *const u64), *((rbp + 8) as *const u64)) };
        return Some((ra, cfa, saved));
    }
    if s.shape == SHAPE_RSP {
        // cfa_off is a multiple of 8 and at least 8 (shape_of): the CFA is
        // aligned and in [rsp + 8, rsp + 2^24) (no wrap: rsp <= hi < 2^62),
        // so the return address at CFA-8 is at or above rsp >= lo and the
        // CFA above rsp. Only the upper bound is left to test.
        let cfa = rsp + s.cfa_off as u64;
        if cfa > hi {
            return None;
        }
        // SAFETY: [cfa - 8, cfa) lies in [rsp, hi): this thread's stack.
        let ra = unsafe { *((cfa - 8) as *const u64) };
        return Some((ra, cfa, rbp));
    }
    if s.shape == SHAPE_RSP_SAVED {
        // As SHAPE_RSP, and the saved rbp lies in [rsp, cfa - 8], aligned
        // (shape_of): inside the stack once the CFA is.
        let cfa = rsp + s.cfa_off as u64;
        if cfa > hi {
            return None;
        }
        let rbp_at = rsp + s.rbp_at_off as u64;
        // SAFETY: both words lie in [rsp, cfa) within this thread's stack.
        let (ra, saved) = unsafe { (*((cfa - 8) as *const u64), *(rbp_at as *const u64)) };
        return Some((ra, cfa, saved));
    }
    // Any rule: every test. With rsp aligned and >= lo, an aligned CFA in
    // (rsp, hi] is at least rsp + 8, so the return address at CFA-8 lies in
    // [lo, hi - 8]; span8 = hi - lo - 8 tests the saved rbp's word.
    let span8 = span16 + 8;
    let base_mask = 0u64.wrapping_sub((s.flags & F_CFA_RBP) as u64);
    let take_mask = 0u64.wrapping_sub(((s.flags & F_RBP_SAVED) >> 1) as u64);
    let base = rsp ^ ((rsp ^ rbp) & base_mask);
    let cfa = base.wrapping_add(s.cfa_off as u64);
    let rbp_at = base.wrapping_add(s.rbp_at_off as i64 as u64);
    if cfa <= rsp || cfa > hi || rbp_at.wrapping_sub(lo) > span8 || (cfa | rbp_at) & 7 != 0 {
        return None;
    }
    // SAFETY: [cfa - 8, cfa) and [rbp_at, rbp_at + 8) lie inside this
    // thread's stack (see above).
    let (ra, word) = unsafe { (*((cfa - 8) as *const u64), *(rbp_at as *const u64)) };
    Some((ra, cfa, rbp ^ ((word ^ rbp) & take_mask)))
}

/// The memo walk where its precondition holds (always, for the registers
/// `unwind` passes), else the plain walk over the same rules.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk(
    memo: &mut Memo,
    buf: &mut [u64],
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
    mut lookup: impl FnMut(u64) -> u64,
) -> Option<usize> {
    if hi >= lo
        && hi - lo >= 16
        && hi < 1 << 62
        && lo & 7 == 0
        && rsp >= lo
        && rsp <= hi
        && rsp & 7 == 0
    {
        walk_memo(memo, buf, ip, rsp, rbp, lo, hi, lookup)
    } else {
        walk_rules(buf, ip, rsp, rbp, lo, hi, |ip| decode(ip, lookup(ip)))
    }
}

/// The walk: frame `k < MEMO_FRAMES` takes its rule from the memo when the
/// return address is the one remembered there; otherwise (and for deeper
/// frames) from the thread's rules by address, or from `lookup` (and into
/// both). Requires [`apply`]'s precondition.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk_memo(
    memo: &mut Memo,
    buf: &mut [u64],
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
    mut lookup: impl FnMut(u64) -> u64,
) -> Option<usize> {
    let generation = GENERATION.load(Ordering::Acquire);
    if memo.generation != generation {
        memo.entries = [EMPTY_SLOT; MEMO_FRAMES];
        memo.quick = [NO_QUICK; MEMO_FRAMES + 1];
        memo.by_ra = EMPTY_BY_RA;
        memo.generation = generation;
    }
    let span16 = hi - lo - 16;
    if memo.by_address_runs > 0 {
        // The depth memo missed most frames lately: rules by address only.
        memo.by_address_runs -= 1;
        let r = Regs { n: 0, ip, rsp, rbp };
        return walk_by_address(&mut memo.by_ra, buf, r, lo, hi, span16, lookup);
    }
    let head = buf.len().min(MEMO_FRAMES);
    let mut r = Regs { n: 0, ip, rsp, rbp };
    memo.misses = 0;
    let got = 'walk: loop {
        // Runs of frames whose rule is the memo's and a frame-pointer or
        // plain rsp+k rule: the quick loop. It needs a nonzero `ip`, which
        // every frame after the first has (a zero return address ends the
        // walk).
        let ended = r.ip != 0
            && if head == MEMO_FRAMES {
                walk_quick::<true>(memo, buf, head, &mut r, lo, hi, span16)
            } else {
                walk_quick::<false>(memo, buf, head, &mut r, lo, hi, span16)
            };
        if ended {
            break 'walk Some(r.n);
        }
        let n = r.n;
        if n >= head {
            if n == buf.len() {
                break 'walk Some(n);
            }
            // Deeper than the memo: rules by address.
            break 'walk walk_by_address(&mut memo.by_ra, buf, r, lo, hi, span16, &mut lookup);
        }
        // Frame n in general: any rule, the memo refreshed on a miss.
        buf[n] = r.ip;
        let e = &mut memo.entries[n];
        if e.ra != r.ip {
            memo.misses += 1;
            *e = by_address(&mut memo.by_ra, r.ip, &mut lookup);
        }
        // Also where `entries[n]` was right and the quick slot not (see
        // quick_miss).
        memo.quick[n] = quick_of(e);
        r.n = n + 1;
        let Some((ra, cfa, next_rbp)) = apply(e, r.rsp, r.rbp, lo, hi, span16) else {
            if e.flags & F_COMPLEX != 0 {
                return None;
            }
            break 'walk Some(r.n);
        };
        r.rbp = next_rbp;
        r.rsp = cfa;
        if ra == 0 {
            break 'walk Some(r.n);
        }
        r.ip = ra;
    };
    // A complex rule deeper than the memo: no update, as for one inside.
    let n = got?;
    if memo.misses as usize * 2 > n {
        // More than half of the frames were not where the previous
        // capture had them (an interpreter's call chains of varying
        // length): the comparison per frame is then a branch the processor
        // mispredicts often, for little, so the next captures skip it; the
        // depth memo is tried again after them.
        memo.by_address_runs = 63;
    }
    got
}

/// A memo slot reduced for [`walk_quick`]: `ra` the return address (0
/// when the rule is none of the three shapes below), `cfa_off` 0 for
/// [`SHAPE_FP`], else the CFA offset of a [`SHAPE_RSP`] or
/// [`SHAPE_RSP_SAVED`] rule (a multiple of 8, at least 8) or
/// [`QUICK_STOP`], and `rbp_at` the saved rbp's offset from rsp for
/// [`SHAPE_RSP_SAVED`] (else -1). 24 bytes: 64-bit offsets, so that
/// `QUICK_STOP` needs no bound on the stack's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Quick {
    ra: u64,
    cfa_off: u64,
    rbp_at: i64,
}

/// [`Quick::cfa_off`] of a rule that ends the walk after its frame (the
/// outermost frame, or any "CFA = rsp + 0"): the CFA it gives is above
/// `hi` ([`walk`] requires `hi < 2^62`; no overflow: `rsp <= hi`).
const QUICK_STOP: u64 = 1 << 62;

const NO_QUICK: Quick = Quick {
    ra: 0,
    cfa_off: 0,
    rbp_at: -1,
};

fn quick_of(s: &Slot) -> Quick {
    match s.shape {
        SHAPE_FP => Quick {
            ra: s.ra,
            cfa_off: 0,
            rbp_at: -1,
        },
        SHAPE_RSP => Quick {
            ra: s.ra,
            cfa_off: s.cfa_off as u64,
            rbp_at: -1,
        },
        SHAPE_RSP_SAVED => Quick {
            ra: s.ra,
            cfa_off: s.cfa_off as u64,
            rbp_at: s.rbp_at_off as i64,
        },
        // CFA = rsp + 0 (the outermost frame's slot among them): not
        // above rsp, so the walk ends after storing the frame.
        SHAPE_GENERAL if s.flags & (F_CFA_RBP | F_COMPLEX) == 0 && s.cfa_off == 0 => Quick {
            ra: s.ra,
            cfa_off: QUICK_STOP,
            rbp_at: -1,
        },
        _ => NO_QUICK,
    }
}

/// The walk's position: frames `buf[..n]` stored, `ip` the next frame's
/// return address, `rsp` and `rbp` as that frame sees them.
struct Regs {
    n: usize,
    ip: u64,
    rsp: u64,
    rbp: u64,
}

/// Walks on while frame `r.n` is below `head` and its rule is a quick one
/// (frame pointer, rsp+k, rsp+k with rbp saved: [`Quick`]) found by its
/// return address at that depth of the memo or, failing that, in the
/// thread's rules by address. Returns `true` when the walk ended (as [`apply`]
/// would end it, or at a zero return address), `false` at the first frame
/// left to the general step (not stored yet: an unknown address, another
/// shape, or `head`).
///
/// The same tests as [`apply`]'s branches for these shapes, the
/// frame-pointer one folded further: `(rbp - lo) >> 3`, rotated so that
/// the three low bits land on top, is at most `span16 >> 3` exactly when
/// `rbp` is aligned (`lo` is) and `lo <= rbp <= hi - 16`. What the quick
/// form saves is the slot's shape dispatch (one comparison of the address
/// finds the rule and whether it is quick) and registers: a function of its
/// own, so its state stays in registers (inlined into the walk, the
/// allocator spilled it for the general step's sake).
///
/// Requires `r.ip != 0` (an empty slot's `ra` is 0), `lo` 8-aligned,
/// `r.n <= head <= min(buf.len(), MEMO_FRAMES)` (`FULL`: `head ==
/// MEMO_FRAMES`), and [`apply`]'s precondition.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn walk_quick<const FULL: bool>(
    memo: &mut Memo,
    buf: &mut [u64],
    head: usize,
    r: &mut Regs,
    lo: u64,
    hi: u64,
    span16: u64,
) -> bool {
    let Regs {
        mut n,
        mut ip,
        mut rsp,
        mut rbp,
    } = *r;
    let head = head.min(buf.len()).min(MEMO_FRAMES);
    // What the unchecked indexing below rests on, kept local: FULL only
    // with the memo's whole depth, and a start at or below `head`.
    if FULL && head != MEMO_FRAMES {
        return walk_quick::<false>(memo, buf, head, r, lo, hi, span16);
    }
    if n >= head {
        return false;
    }
    let span16_8 = span16 >> 3;
    debug_assert!(memo.quick[MEMO_FRAMES] == NO_QUICK);
    let ended = loop {
        // FULL (the memo's whole depth, the default): no test of the depth
        // here, the end marker stops the loop. n <= MEMO_FRAMES holds: n
        // only grows past a quick slot whose address matched a nonzero
        // ip, and quick[MEMO_FRAMES].ra is 0.
        if !FULL && n >= head {
            break false;
        }
        // SAFETY: n < head <= MEMO_FRAMES, or (FULL) n <= MEMO_FRAMES as
        // above: inside the array of MEMO_FRAMES + 1.
        let mut q = unsafe { *memo.quick.get_unchecked(n) };
        if q.ra != ip {
            if FULL && n >= head {
                // The end marker: deeper frames go to the general step.
                break false;
            }
            // Not the memo's address at this depth: the thread's rule by
            // address, if it has it and it is quick (a miss of the depth
            // memo, counted as in the general step). `entries[n]` is left
            // as it was: it still holds the right rule for its own
            // address, and the general step only takes it for that one.
            q = memo.by_ra.quick[by_ra_index(ip)];
            if q.ra != ip {
                break false;
            }
            memo.quick[n] = q;
            memo.misses += 1;
        }
        // SAFETY: the slot at depth n matched, so n < head (the end marker
        // never matches), and head <= buf.len().
        unsafe { *buf.get_unchecked_mut(n) = ip };
        n += 1;
        let Some(ra) = quick_step(&q, &mut rsp, &mut rbp, lo, hi, span16_8) else {
            break true;
        };
        if ra == 0 {
            break true;
        }
        ip = ra;
    };
    *r = Regs { n, ip, rsp, rbp };
    ended
}

/// One frame by its quick rule `q` (see [`walk_quick`]): the return
/// address into the caller, with `rsp` and `rbp` moved to the caller's, or
/// `None` where the walk ends. The same tests as [`apply`]'s branches for
/// these shapes; `span16_8` is `span16 >> 3`, and `lo` must be aligned.
#[inline(always)]
fn quick_step(
    q: &Quick,
    rsp: &mut u64,
    rbp: &mut u64,
    lo: u64,
    hi: u64,
    span16_8: u64,
) -> Option<u64> {
    let (sp, bp) = (*rsp, *rbp);
    if q.cfa_off == 0 {
        // SHAPE_FP (see apply): the saved rbp at rbp, the return address
        // at rbp + 8, both inside the stack and aligned, and the CFA
        // rbp + 16 above rsp. `(rbp - lo)` rotated right by 3 is at most
        // `span16 >> 3` exactly when rbp is aligned (lo is: the three low
        // bits land on top otherwise) and `lo <= rbp <= hi - 16`.
        if bp.wrapping_sub(lo).rotate_right(3) > span16_8 || bp + 16 <= sp {
            return None;
        }
        // SAFETY: [rbp, rbp + 16) lies inside this thread's stack.
        let (saved, ra) = unsafe { (*(bp as *const u64), *((bp + 8) as *const u64)) };
        *rsp = bp + 16;
        *rbp = saved;
        Some(ra)
    } else {
        // SHAPE_RSP and SHAPE_RSP_SAVED (see apply): only the CFA's upper
        // bound is left to test. QUICK_STOP: rsp + 2^62 is above hi
        // (hi < 2^62).
        let cfa = sp + q.cfa_off;
        if cfa > hi {
            return None;
        }
        // SAFETY: [cfa - 8, cfa) lies in [rsp, hi): this thread's stack.
        let ra = unsafe { *((cfa - 8) as *const u64) };
        if q.rbp_at >= 0 {
            // SAFETY: the saved rbp lies in [rsp, cfa - 8] (shape_of).
            *rbp = unsafe { *((sp + q.rbp_at as u64) as *const u64) };
        }
        *rsp = cfa;
        Some(ra)
    }
}

/// [`walk_quick`] without the depth memo: each frame's quick rule from the
/// thread's rules by address, at any depth below `buf.len()`. Requires
/// `r.ip != 0`, `lo` aligned and [`apply`]'s precondition.
#[inline(never)]
fn walk_quick_by_address(
    by_ra: &mut ByRa,
    buf: &mut [u64],
    r: &mut Regs,
    lo: u64,
    hi: u64,
    span16: u64,
) -> bool {
    let Regs {
        mut n,
        mut ip,
        mut rsp,
        mut rbp,
    } = *r;
    let span16_8 = span16 >> 3;
    let mut q = by_ra.quick[by_ra_index(ip)];
    let ended = 'walk: loop {
        // `ip`, whose rule is `q` when their addresses match, starts a path
        // (see `ByRa::paths`).
        if n >= buf.len() || q.ra != ip {
            break false;
        }
        buf[n] = ip;
        n += 1;
        let start = by_ra_index(ip);
        let Some(ra) = quick_step(&q, &mut rsp, &mut rbp, lo, hi, span16_8) else {
            break true;
        };
        if ra == 0 {
            break true;
        }
        ip = ra;
        for j in 0..PATH {
            let mut g = by_ra.paths[start][j];
            if g.ra != ip {
                g = by_ra.quick[by_ra_index(ip)];
                if g.ra != ip {
                    break 'walk false;
                }
                by_ra.paths[start][j] = g;
            }
            if j == PATH - 1 {
                // The path's last frame starts the next one.
                q = g;
                continue 'walk;
            }
            if n >= buf.len() {
                break 'walk false;
            }
            buf[n] = ip;
            n += 1;
            let Some(ra) = quick_step(&g, &mut rsp, &mut rbp, lo, hi, span16_8) else {
                break 'walk true;
            };
            if ra == 0 {
                break 'walk true;
            }
            ip = ra;
        }
    };
    *r = Regs { n, ip, rsp, rbp };
    ended
}

/// The walk from `r` on by the thread's rules by address alone: the quick
/// loop where it has a quick rule, the general step (and `lookup` when
/// the address is new to the thread) elsewhere. Requires `lo` aligned and
/// [`apply`]'s precondition.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn walk_by_address(
    by_ra: &mut ByRa,
    buf: &mut [u64],
    mut r: Regs,
    lo: u64,
    hi: u64,
    span16: u64,
    mut lookup: impl FnMut(u64) -> u64,
) -> Option<usize> {
    loop {
        if r.ip != 0 && walk_quick_by_address(by_ra, buf, &mut r, lo, hi, span16) {
            return Some(r.n);
        }
        let n = r.n;
        if n >= buf.len() {
            return Some(n);
        }
        buf[n] = r.ip;
        let s = by_address(by_ra, r.ip, &mut lookup);
        r.n = n + 1;
        let Some((ra, cfa, next_rbp)) = apply(&s, r.rsp, r.rbp, lo, hi, span16) else {
            if s.flags & F_COMPLEX != 0 {
                return None;
            }
            return Some(r.n);
        };
        r.rbp = next_rbp;
        r.rsp = cfa;
        if ra == 0 {
            return Some(r.n);
        }
        r.ip = ra;
    }
}

/// The walk with every rule from the global table (no memo): used where the
/// thread's memo is unavailable, and as the reference of `TRACER_UNWIND_VERIFY`.
fn walk_table(
    table: &Table,
    buf: &mut [u64],
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
) -> Option<usize> {
    walk_rules(buf, ip, rsp, rbp, lo, hi, |ip| {
        let v = lookup(table, ip);
        decode(ip, v)
    })
}

/// The reference walk: every frame's rule computed afresh from the unwind
/// tables, no cache of any kind, one plain rule evaluation per frame. What
/// [`capture`] must equal (its tests compare them).
#[cfg(test)]
pub fn capture_reference(
    buf: &mut [u64],
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
) -> Option<usize> {
    walk_rules(buf, ip, rsp, rbp, lo, hi, |ip| Some(compute(ip)))
}

fn walk_rules(
    buf: &mut [u64],
    mut ip: u64,
    mut rsp: u64,
    mut rbp: u64,
    lo: u64,
    hi: u64,
    mut rule_of: impl FnMut(u64) -> Option<Rule>,
) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        buf[n] = ip;
        n += 1;
        let (cfa_rbp, cfa_off, rbp_off) = match rule_of(ip) {
            Some(Rule::Frame {
                cfa_rbp,
                cfa_off,
                rbp_off,
            }) => (cfa_rbp, cfa_off, rbp_off),
            Some(Rule::End) => break,
            Some(Rule::Complex) | None => return None,
        };
        let cfa = if cfa_rbp { rbp } else { rsp }.wrapping_add(cfa_off as u64);
        if !readable(cfa.wrapping_sub(8), lo, hi) || cfa <= rsp {
            break;
        }
        // SAFETY: checked to lie inside this thread's stack.
        let ra = unsafe { *(cfa.wrapping_sub(8) as *const u64) };
        if let Some(off) = rbp_off {
            let at = cfa.wrapping_add(off as i64 as u64);
            if !readable(at, lo, hi) {
                break;
            }
            // SAFETY: checked to lie inside this thread's stack.
            rbp = unsafe { *(at as *const u64) };
        }
        rsp = cfa;
        if ra == 0 {
            break;
        }
        ip = ra;
    }
    Some(n)
}

/// `TRACER_UNWIND_VERIFY`: repeats the capture through the table alone and
/// reports the first differences on stderr (whatever `TRACER_QUIET` says: it
/// is a test mode), and one line when the first 1000 captures all agreed.
#[allow(clippy::too_many_arguments)]
#[cold]
fn verify(
    table: &Table,
    buf: &[u64],
    got: Option<usize>,
    ip: u64,
    rsp: u64,
    rbp: u64,
    lo: u64,
    hi: u64,
) {
    let mut again = [0u64; crate::config::MAX_DEPTH];
    let len = buf.len().min(again.len());
    let want = walk_table(table, &mut again[..len], ip, rsp, rbp, lo, hi);
    let same = match (got, want) {
        (Some(a), Some(b)) => a == b && buf[..a] == again[..b],
        (None, None) => true,
        _ => false,
    };
    if same {
        // One line once the check has seen enough captures, so that a test
        // knows the mode was on and found nothing.
        if VERIFIED.fetch_add(1, Ordering::Relaxed) + 1 == 1000
            && MISMATCHES.load(Ordering::Relaxed) == 0
        {
            crate::sys::stderr_line("unwind verify: 1000 captures identical");
        }
    } else if MISMATCHES.fetch_add(1, Ordering::Relaxed) < 10 {
        let show = |n: Option<usize>, f: &[u64]| match n {
            Some(n) => format!("{:x?}", &f[..n]),
            None => "none".to_string(),
        };
        crate::sys::stderr_line(&format!(
            "unwind mismatch: memo {} table {}",
            show(got, buf),
            show(want, &again)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip_through_the_cache_encoding() {
        let ip = 0x7f12_3456_789a;
        for rule in [
            Rule::Frame {
                cfa_rbp: false,
                cfa_off: 8,
                rbp_off: None,
            },
            Rule::Frame {
                cfa_rbp: true,
                cfa_off: 16,
                rbp_off: Some(-16),
            },
            Rule::Frame {
                cfa_rbp: false,
                cfa_off: 0xff_ffff,
                rbp_off: Some(i16::MIN),
            },
            Rule::Frame {
                cfa_rbp: false,
                cfa_off: 0,
                rbp_off: Some(i16::MAX),
            },
            Rule::End,
            Rule::Complex,
        ] {
            assert_eq!(decode(ip, encode(ip, rule)), Some(rule));
        }
    }

    /// Addresses that share the set of `of` in a table of `len` entries
    /// (no code there: their rules are quick to compute).
    fn same_set(of: u64, len: usize, n: usize) -> Vec<u64> {
        (1..)
            .map(|k| of + 16 * k)
            .filter(|&ip| set_of(ip, len) == set_of(of, len))
            .take(n)
            .collect()
    }

    /// Two addresses of one set, used in turn, are computed once each; a
    /// third evicts the one used least recently inserted, not the other.
    #[test]
    fn a_set_keeps_two_rules() {
        // How a rule is computed changes once `init` ran (another test may
        // run it at any time): run it first.
        init();
        let home = AtomicPtr::new(core::ptr::null_mut());
        let t = Table::new(SLOTS);
        let a = 0x10_0000;
        let [b, c] = same_set(a, SLOTS, 2)[..] else {
            unreachable!()
        };
        for _ in 0..10 {
            for ip in [a, b] {
                assert_eq!(decode(ip, lookup_in(&home, &t, ip)), Some(compute(ip)));
            }
        }
        assert_eq!(t.computed.load(Ordering::Relaxed), 2);
        lookup_in(&home, &t, c);
        lookup_in(&home, &t, b);
        assert_eq!(t.computed.load(Ordering::Relaxed), 3, "b stayed");
        lookup_in(&home, &t, a);
        assert_eq!(t.computed.load(Ordering::Relaxed), 4, "a went");
    }

    /// A rule forgotten at an unload leaves its entry empty, and the next
    /// rule computed in that set takes the empty entry: it does not push
    /// the set's other rule out. In a plugin loop, a return address in libc
    /// that shared its set with one in the plugin was computed again after
    /// every unload (~100 more rules in a run of 200 rounds, a run in 30:
    /// where the loader put the plugin decided).
    #[test]
    fn a_rule_computed_after_an_unload_takes_the_forgotten_rules_entry() {
        let (home, t) = table_with(&[]);
        let kept = 0x90_0000;
        let [plugin] = same_set(kept, SLOTS, 1)[..] else {
            unreachable!()
        };
        assert_eq!(recomputed(home, t, &[kept, plugin]), 2);
        for round in 0..5 {
            forget_ranges(t, &[(plugin, plugin + 1)]);
            assert_eq!(recomputed(home, t, &[plugin]), 1, "round {round}");
            assert_eq!(recomputed(home, t, &[kept]), 0, "round {round}: kept");
        }
    }

    /// A table of its own, leaked, with the rules of `ips` computed into it.
    fn table_with(ips: &[u64]) -> (&'static AtomicPtr<Table>, &'static Table) {
        init();
        let home: &'static AtomicPtr<Table> = Box::leak(Box::new(AtomicPtr::new(Box::into_raw(
            Box::new(Table::new(SLOTS)),
        ))));
        // SAFETY: the table is leaked, never freed.
        let t = unsafe { &*home.load(Ordering::Acquire) };
        for &ip in ips {
            lookup_in(home, t, ip);
        }
        (home, t)
    }

    /// The rules computed again when `ips` are looked up once more.
    fn recomputed(home: &AtomicPtr<Table>, t: &Table, ips: &[u64]) -> u64 {
        let before = t.computed.load(Ordering::Relaxed);
        for &ip in ips {
            lookup_in(home, t, ip);
        }
        t.computed.load(Ordering::Relaxed) - before
    }

    /// An unload compares the listed addresses with what went, and when
    /// the list cannot be trusted (incomplete: it was busy when a rule was
    /// added, or full) the whole table, listing afresh what stays; either
    /// way exactly the rules inside the ranges go.
    #[test]
    fn the_unloadable_list_or_the_whole_table_forgets_the_same_rules() {
        let inside = [0x60_1000u64, 0x60_1ff8];
        let outside = [0x60_0ff8u64, 0x60_2000, 0x70_0000];
        let all: Vec<u64> = inside.iter().chain(&outside).copied().collect();
        let gone = [(0x60_1000, 0x60_2000)];
        for how in ["listed", "incomplete", "busy", "full"] {
            let (home, t) = table_with(&all);
            let list = &t.unloadable;
            assert_eq!(list.len.load(Ordering::Relaxed), 5, "{how}");
            match how {
                "incomplete" => list.incomplete.store(true, Ordering::Relaxed),
                "busy" => assert!(list.try_hold()),
                "full" => {
                    for i in 0..SLOTS as u64 {
                        list.note(0x1_0000_0000 + i * 8);
                    }
                    assert!(list.incomplete.load(Ordering::Relaxed));
                }
                _ => {}
            }
            forget_ranges(t, &gone);
            if how == "busy" {
                list.release();
                assert!(list.incomplete.load(Ordering::Relaxed), "{how}");
            }
            assert_eq!(recomputed(home, t, &outside), 0, "{how}: kept");
            assert_eq!(recomputed(home, t, &inside), 2, "{how}: forgotten");
            // Listed again after a full scan: the next unload uses the list.
            forget_ranges(t, &gone);
            assert!(!list.incomplete.load(Ordering::Relaxed), "{how}");
            assert_eq!(recomputed(home, t, &outside), 0, "{how}: kept again");
            assert_eq!(recomputed(home, t, &inside), 2, "{how}: forgotten again");
            if how != "full" {
                assert_eq!(list.len.load(Ordering::Relaxed), 5, "{how}");
            }
        }
    }

    /// The rules of an object loaded before the program started are not
    /// listed (it is never unloaded); if code there goes all the same (a
    /// library's constructor loaded it before ours ran), the whole table is
    /// scanned for it.
    #[test]
    fn code_the_list_does_not_cover_is_scanned_for() {
        // The startup objects are listed by `init` (which another test may
        // have run already, or not).
        init();
        let here = code_the_list_does_not_cover_is_scanned_for as *const () as u64 + 16;
        assert!(permanent(here));
        let (home, t) = table_with(&[here, 0x60_0000]);
        assert_eq!(t.unloadable.len.load(Ordering::Relaxed), 1);
        forget_ranges(t, &[(here - 16, here + 16)]);
        assert_eq!(recomputed(home, t, &[0x60_0000]), 0);
        assert_eq!(recomputed(home, t, &[here]), 1);
    }

    /// Forgetting the rules of unloaded code keeps every other rule: only
    /// the addresses inside the ranges are computed again.
    #[test]
    fn only_the_rules_of_unloaded_ranges_are_forgotten() {
        init();
        let home = AtomicPtr::new(Box::into_raw(Box::new(Table::new(SLOTS))));
        // SAFETY: the table is leaked, never freed.
        let t = unsafe { &*home.load(Ordering::Acquire) };
        let inside = [0x40_1000u64, 0x40_1ff8, 0x50_0000];
        let outside = [0x40_0ff8u64, 0x40_2000, 0x4f_fff8, 0x50_1000, 0x90_0000];
        for &ip in inside.iter().chain(&outside) {
            lookup_in(&home, t, ip);
        }
        let n = t.computed.load(Ordering::Relaxed);
        assert_eq!(n, 8);
        forget_ranges(t, &[(0x40_1000, 0x40_2000), (0x50_0000, 0x50_1000)]);
        for &ip in &outside {
            lookup_in(&home, t, ip);
        }
        assert_eq!(t.computed.load(Ordering::Relaxed), n, "kept");
        for &ip in &inside {
            lookup_in(&home, t, ip);
        }
        assert_eq!(t.computed.load(Ordering::Relaxed), n + 3, "forgotten");
        forget_ranges(t, &[]);
        for &ip in inside.iter().chain(&outside) {
            lookup_in(&home, t, ip);
        }
        assert_eq!(
            t.computed.load(Ordering::Relaxed),
            n + 3,
            "nothing to forget"
        );
    }

    /// A table's entries are a mapping of their own, not a block of the
    /// program's heap (where glibc would put them: its `mmap`ed chunks
    /// start 16 bytes into a page), and start empty.
    #[test]
    fn a_table_is_a_mapping_of_its_own() {
        for slots in [8, SLOTS, SLOTS * 4] {
            let t = Table::new(slots);
            assert_eq!(t.entries.len(), slots);
            assert_eq!(t.entries.as_ptr() as usize % 4096, 0, "{slots} slots");
            assert!(t
                .entries
                .iter()
                .all(|e| e.key.load(Ordering::Relaxed) == 0 && e.val.load(Ordering::Relaxed) == 0));
        }
    }

    /// Once twice as many rules as it has entries were computed into it, a
    /// table is replaced by one four times larger (up to MAX_SLOTS), whose
    /// answers are the same rules.
    #[test]
    fn a_table_that_computes_too_often_grows() {
        init();
        let first = Box::into_raw(Box::new(Table::new(8)));
        let home = AtomicPtr::new(first);
        let mut ip = 0x20_0000u64;
        let mut sizes = vec![8];
        // Bounded: ~480,000 rules are computed before the last test below.
        for _ in 0..2_000_000 {
            // SAFETY: `home` holds tables that are never freed here.
            let t = unsafe { &*home.load(Ordering::Acquire) };
            ip += 16;
            assert_eq!(decode(ip, lookup_in(&home, t, ip)), Some(compute(ip)));
            let len = t.entries.len();
            if sizes.last() != Some(&len) {
                sizes.push(len);
            }
            if len == MAX_SLOTS && t.computed.load(Ordering::Relaxed) > 3 * MAX_SLOTS as u64 {
                break;
            }
        }
        let mut want = vec![8];
        while *want.last().unwrap() < MAX_SLOTS {
            want.push(want.last().unwrap() * 4);
        }
        assert_eq!(sizes, want);
        // The tables of this test (leaked, as in use).
        // SAFETY: nothing reads them any more.
        drop(unsafe { Box::from_raw(first) });
    }

    #[test]
    fn a_value_stored_for_another_address_is_rejected() {
        let v = encode(0x401000, Rule::End);
        assert_eq!(decode(0x401000, v), Some(Rule::End));
        assert_eq!(decode(0x401001, v), None);
        assert_eq!(decode(0x401000, 0), None);
    }

    /// Synthetic stacks: random words, random rules (both CFA registers,
    /// offsets that land inside, outside and unaligned), random start
    /// registers, and addresses repeating between walks so the memo hits:
    /// the memoized walk gives exactly the reference walk's frames.
    #[test]
    fn memo_walk_equals_reference_walk_on_random_stacks() {
        let mut rand = crate::testing::xorshift(0x2545_f491_4f6c_dd1du64);
        const WORDS: usize = 96;
        let rule_of = |ip: u64| -> Rule {
            // A fixed rule per address (as for real code): the outermost
            // frame, an unrepresentable rule, the frame-pointer convention,
            // rsp-based without a saved rbp, or anything else.
            let h = ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            let cfa_off = [8, 16, 24, 32, 40, 48, 16, 24, 8, 16, 12, 0, 800, 16, 8, 24]
                [(h >> 8) as usize % 16];
            match h % 16 {
                0 => Rule::End,
                1 => Rule::Complex,
                2..=5 => Rule::Frame {
                    cfa_rbp: true,
                    cfa_off: 16,
                    rbp_off: Some(-16),
                },
                6..=9 => Rule::Frame {
                    cfa_rbp: false,
                    cfa_off,
                    rbp_off: None,
                },
                k => Rule::Frame {
                    cfa_rbp: k < 13,
                    cfa_off,
                    rbp_off: match (h >> 12) % 6 {
                        0 => None,
                        1 => Some(-16),
                        2 => Some(-24),
                        3 => Some(8),
                        4 => Some(-12),
                        _ => Some(-4),
                    },
                },
            }
        };
        let mut memo = Memo {
            generation: 0,
            by_address_runs: 0,
            misses: 0,
            entries: [EMPTY_SLOT; MEMO_FRAMES],
            quick: [NO_QUICK; MEMO_FRAMES + 1],
            by_ra: EMPTY_BY_RA,
        };
        let mut compared = 0;
        let mut long = 0;
        for round in 0..4000 {
            // Written and read through one raw pointer only (the walks read
            // it as memory, not as a Rust array). Eight guard words on each
            // side of [lo, hi) hold return addresses too: a walk that read
            // past the bounds would go on instead of stopping.
            let mut stack = vec![0u64; WORDS + 16];
            let base = stack.as_mut_ptr();
            // Now and then a misaligned `lo` (the memo walk requires an
            // aligned one and must fall back to the plain walk).
            let lo = base as u64 + 64 + if round % 17 == 5 { 4 } else { 0 };
            let hi = lo + 8 * WORDS as u64;
            for k in 0..WORDS + 16 {
                // Return addresses from a small set (so they repeat), and
                // word values that point back into the stack now and then.
                let w = match rand() % 8 {
                    // From the guard below to the guard above, unaligned
                    // now and then.
                    0 | 1 => {
                        lo - 64
                            + 8 * (rand() % (WORDS as u64 + 16))
                            + 4 * rand().is_multiple_of(8) as u64
                    }
                    _ => 0x40_0000 + 16 * (rand() % 24),
                };
                // SAFETY: k < WORDS + 16, inside the vector.
                unsafe { base.add(k).write(w) };
            }
            if round % 10 == 0 {
                // SAFETY: inside the vector.
                unsafe { base.add(8 + (rand() % WORDS as u64) as usize).write(0) };
            }
            let ip = 0x40_0000 + 16 * (rand() % 24);
            let rsp = match round % 13 {
                0 => lo - 8,
                1 => hi - 8,
                _ => lo + 8 * (rand() % 8) + if round % 7 == 0 { 4 } else { 0 },
            };
            let rbp = lo - 64 + 8 * (rand() % (WORDS as u64 + 16));
            let depth = [64, 5, 100, 1][round % 4];
            let mut b = [0u64; 100];
            let want = walk_rules(&mut b[..depth], ip, rsp, rbp, lo, hi, |ip| {
                Some(rule_of(ip))
            });
            // The same stack three times: with the memo as the previous
            // rounds left it, then with the depth memo forced on (it now
            // holds this very stack: the quick loop's path), then with
            // rules by address only.
            for (pass, runs) in [None, Some(0), Some(63)].into_iter().enumerate() {
                if let Some(runs) = runs {
                    memo.by_address_runs = runs;
                }
                let mut a = [0u64; 100];
                let got = walk(&mut memo, &mut a[..depth], ip, rsp, rbp, lo, hi, |ip| {
                    encode(ip, rule_of(ip))
                });
                assert_eq!(got, want, "round {round} pass {pass}");
                if let Some(n) = got {
                    assert_eq!(a[..n], b[..n], "round {round} pass {pass}");
                    long += (n >= 4) as u32;
                }
                assert_eq!(memo.quick[MEMO_FRAMES], NO_QUICK);
                compared += 1;
            }
            drop(stack);
        }
        assert_eq!(compared, 12000);
        // Many stacks were walked for several frames (the memo hits), not
        // cut at the first one.
        assert!(long > 100, "{long} walks of 4 frames or more");
    }

    /// Frame-pointer chains deeper than the memo (up to 150 frames):
    /// captures of 64 (the memo's depth, the quick loop without a depth
    /// test), 63, 65, 100 and 256 frames, each twice (the second time from
    /// the memo), with the return addresses reshuffled between rounds so
    /// that frames miss the depth memo and come from the rules by address
    /// at every depth, the 64th included; the end marker past the memo is
    /// never overwritten.
    #[test]
    fn memo_walk_equals_reference_walk_on_deep_chains() {
        let mut rand = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let rule_of = |ip: u64| -> Rule {
            if ip == 0x50_0000 {
                Rule::End
            } else {
                Rule::Frame {
                    cfa_rbp: true,
                    cfa_off: 16,
                    rbp_off: Some(-16),
                }
            }
        };
        let mut memo = Memo {
            generation: 0,
            by_address_runs: 0,
            misses: 0,
            entries: [EMPTY_SLOT; MEMO_FRAMES],
            quick: [NO_QUICK; MEMO_FRAMES + 1],
            by_ra: EMPTY_BY_RA,
        };
        const WORDS: usize = 300;
        let mut deep = 0;
        for round in 0..300 {
            let mut stack = vec![0u64; WORDS];
            let base = stack.as_mut_ptr();
            let lo = base as u64;
            let hi = lo + 8 * WORDS as u64;
            for k in 0..WORDS / 2 {
                // Frame k: its saved rbp (frame k + 1) and the return
                // address into its caller, from 12 addresses (repeating
                // at other depths); now and then the outermost frame's.
                let next = lo + 16 * (k as u64 + 1);
                let ra = if round % 5 == 0 && rand().is_multiple_of(64) {
                    0x50_0000
                } else {
                    0x40_0000 + 16 * (rand() % 12)
                };
                // SAFETY: 2k + 1 < WORDS, inside the vector.
                unsafe {
                    base.add(2 * k).write(next);
                    base.add(2 * k + 1).write(ra);
                }
            }
            let ip = 0x40_0000 + 16 * (rand() % 12);
            let depth = [64, 63, 65, 100, 256][round % 5];
            let mut b = [0u64; 256];
            let want = walk_rules(&mut b[..depth], ip, lo, lo, lo, hi, |ip| Some(rule_of(ip)));
            for pass in 0..2 {
                memo.by_address_runs = 0;
                let mut a = [0u64; 256];
                let got = walk(&mut memo, &mut a[..depth], ip, lo, lo, lo, hi, |ip| {
                    encode(ip, rule_of(ip))
                });
                assert_eq!(got, want, "round {round} pass {pass}");
                let n = got.unwrap();
                assert_eq!(a[..n], b[..n], "round {round} pass {pass}");
                assert_eq!(memo.quick[MEMO_FRAMES], NO_QUICK);
                deep += (n > MEMO_FRAMES) as u32;
            }
            drop(stack);
        }
        assert!(deep > 100, "{deep} walks deeper than the memo");
    }

    /// The guesses of the callers' rules (`ByRa::paths`): a return address
    /// whose caller alternates between two call sites is walked right both
    /// ways, and the path kept at its index holds the rules of the callers
    /// seen last (taken when right, replaced when wrong).
    #[test]
    fn the_guessed_caller_is_taken_only_when_it_is_the_caller() {
        const END: u64 = 0x50_0000;
        let (a, b, c, d) = (0x40_0010u64, 0x40_0020u64, 0x40_0030u64, 0x40_0040u64);
        // Every frame `CFA = rsp + 16` (`c`'s: rsp + 24), its return
        // address at CFA - 8, no saved rbp: the quick loop's rsp shape. A
        // guess taken for the wrong caller would misplace the next frame.
        let rule_of = |ip: u64| -> Rule {
            if ip == END {
                Rule::End
            } else {
                Rule::Frame {
                    cfa_rbp: false,
                    cfa_off: if ip == c { 24 } else { 16 },
                    rbp_off: None,
                }
            }
        };
        let mut memo = Memo {
            generation: 0,
            by_address_runs: 0,
            misses: 0,
            entries: [EMPTY_SLOT; MEMO_FRAMES],
            quick: [NO_QUICK; MEMO_FRAMES + 1],
            by_ra: EMPTY_BY_RA,
        };
        let mut stack = vec![0u64; 8];
        let base = stack.as_mut_ptr();
        let (lo, hi) = (base as u64, base as u64 + 64);
        for (round, caller) in [b, c, c, b, b, c, c].into_iter().enumerate() {
            let words = if caller == c {
                [0, c, 0, 0, d, 0, END, 0]
            } else {
                [0, b, 0, d, 0, END, 0, 0]
            };
            for (k, w) in words.into_iter().enumerate() {
                // SAFETY: k < 8, inside the vector.
                unsafe { base.add(k).write(w) };
            }
            let mut want = [0u64; 8];
            let n = walk_rules(&mut want, a, lo, lo, lo, hi, |ip| Some(rule_of(ip)));
            assert_eq!(n, Some(4), "round {round}");
            assert_eq!(want[..4], [a, caller, d, END]);
            memo.by_address_runs = 63;
            let mut got = [0u64; 8];
            let n = walk(&mut memo, &mut got, a, lo, lo, lo, hi, |ip| {
                encode(ip, rule_of(ip))
            });
            assert_eq!(n, Some(4), "round {round}");
            assert_eq!(got[..4], want[..4], "round {round}");
            // The first two rounds meet each address for the first time:
            // the general step learns the rules, and a guess is only kept
            // for a caller whose rule the thread has.
            if round >= 2 {
                let path = memo.by_ra.paths[by_ra_index(a)];
                assert_eq!(path[0].ra, caller, "round {round}");
                assert_eq!(path[1].ra, d, "round {round}");
                assert_eq!(path[2].ra, END, "round {round}");
            }
        }
        drop(stack);
    }

    #[cfg(target_arch = "x86_64")]
    mod real {
        use super::super::*;
        use std::hint::black_box;

        // Stores, for its caller: the return address into it, its `rsp` once
        // this returns, and its `rbp`: the state `capture` starts from.
        core::arch::global_asm!(
            ".globl tracer_cfi_test_registers",
            ".type tracer_cfi_test_registers,@function",
            "tracer_cfi_test_registers:",
            ".cfi_startproc",
            "mov rax, [rsp]",
            "mov [rdi], rax",
            "lea rax, [rsp + 8]",
            "mov [rdi + 8], rax",
            "mov [rdi + 16], rbp",
            "ret",
            ".cfi_endproc",
            ".size tracer_cfi_test_registers, .-tracer_cfi_test_registers",
        );
        extern "C" {
            fn tracer_cfi_test_registers(out: *mut [u64; 3]);
        }

        struct Out {
            depth: usize,
            memo: Vec<u64>,
            memo_n: Option<usize>,
            reference: Vec<u64>,
            reference_n: Option<usize>,
        }

        thread_local! {
            /// The test thread's memo, kept from capture to capture as a
            /// lane keeps it for the hooks.
            static TEST_MEMO: core::cell::UnsafeCell<Memo> =
                const { core::cell::UnsafeCell::new(Memo::NEW) };
        }

        fn bounds() -> (u64, u64) {
            // SAFETY: as in unwind::bounds: attr initialised before use and
            // destroyed after; out-pointers are valid locals.
            unsafe {
                let mut attr: libc::pthread_attr_t = core::mem::zeroed();
                assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
                let mut addr: *mut libc::c_void = core::ptr::null_mut();
                let mut size: libc::size_t = 0;
                assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
                libc::pthread_attr_destroy(&mut attr);
                (addr as u64, addr as u64 + size as u64)
            }
        }

        #[inline(never)]
        fn bottom(out: &mut Out) -> u64 {
            let mut regs = [0u64; 3];
            // SAFETY: writes three words into `regs`.
            unsafe { tracer_cfi_test_registers(&mut regs) };
            let [ip, rsp, rbp] = regs;
            let (lo, hi) = bounds();
            out.memo = vec![0; out.depth];
            out.reference = vec![0; out.depth];
            // The thread's memo, kept from capture to capture as the hooks
            // keep it.
            out.memo_n = TEST_MEMO.with(|m| {
                // SAFETY: this thread's alone, not reentered.
                let memo = unsafe { &mut *m.get() };
                capture(Some(memo), &mut out.memo, ip, rsp, rbp, lo, hi)
            });
            out.reference_n = capture_reference(&mut out.reference, ip, rsp, rbp, lo, hi);
            black_box(ip)
        }

        // Two trampolines without frame pointers, of different frame sizes
        // (CFA = rsp + 16 and rsp + 48), the second saving `rbp` at CFA-16
        // and clobbering it: wrong rules for them derail the walk, unlike
        // Rust's frame-pointer functions, which all share one rule.
        core::arch::global_asm!(
            ".globl tracer_cfi_test_tramp_small",
            ".type tracer_cfi_test_tramp_small,@function",
            "tracer_cfi_test_tramp_small:",
            ".cfi_startproc",
            "sub rsp, 8",
            ".cfi_adjust_cfa_offset 8",
            "call rsi",
            "add rsp, 8",
            ".cfi_adjust_cfa_offset -8",
            "ret",
            ".cfi_endproc",
            ".size tracer_cfi_test_tramp_small, .-tracer_cfi_test_tramp_small",
            ".globl tracer_cfi_test_tramp_big",
            ".type tracer_cfi_test_tramp_big,@function",
            "tracer_cfi_test_tramp_big:",
            ".cfi_startproc",
            "push rbp",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rbp, -16",
            "sub rsp, 32",
            ".cfi_adjust_cfa_offset 32",
            "mov rbp, 0x1238",
            "call rsi",
            "add rsp, 32",
            ".cfi_adjust_cfa_offset -32",
            "pop rbp",
            ".cfi_adjust_cfa_offset -8",
            ".cfi_restore rbp",
            "ret",
            ".cfi_endproc",
            ".size tracer_cfi_test_tramp_big, .-tracer_cfi_test_tramp_big",
        );

        struct Ctx<'a> {
            level: u32,
            i: u32,
            out: &'a mut Out,
            ret: u64,
        }
        type Callee = extern "C" fn(*mut libc::c_void);
        extern "C" {
            fn tracer_cfi_test_tramp_small(ctx: *mut libc::c_void, f: Callee);
            fn tracer_cfi_test_tramp_big(ctx: *mut libc::c_void, f: Callee);
        }

        fn next(level: u32, i: u32, out: &mut Out) -> u64 {
            if level == 0 {
                return bottom(out);
            }
            let mut ctx = Ctx {
                level: level - 1,
                i,
                out,
                ret: 0,
            };
            // SAFETY: the trampolines call `f(ctx)` and return; `ctx` lives
            // across the call.
            unsafe {
                let p = (&mut ctx as *mut Ctx<'_>).cast();
                if (i >> (level - 1)) & 1 == 1 {
                    tracer_cfi_test_tramp_big(p, fork_b);
                } else {
                    tracer_cfi_test_tramp_small(p, fork_a);
                }
            }
            ctx.ret
        }

        #[inline(never)]
        extern "C" fn fork_a(ctx: *mut libc::c_void) {
            // SAFETY: `next` passes a live, exclusive Ctx.
            let ctx = unsafe { &mut *ctx.cast::<Ctx<'_>>() };
            let r = next(ctx.level, ctx.i, black_box(&mut *ctx.out));
            ctx.ret = black_box(r) + 1;
        }

        #[inline(never)]
        extern "C" fn fork_b(ctx: *mut libc::c_void) {
            // A frame of another size, so the CFA offsets differ.
            let mut pad = [0u8; 72];
            black_box(&mut pad);
            // SAFETY: `next` passes a live, exclusive Ctx.
            let ctx = unsafe { &mut *ctx.cast::<Ctx<'_>>() };
            let r = next(ctx.level, ctx.i, black_box(&mut *ctx.out));
            ctx.ret = black_box(r) + pad[5] as u64;
        }

        /// Real stacks (this binary's code and std's, with and without
        /// frame pointers): for 2^6 call paths visited in a scrambled order,
        /// the memoized capture equals the uncached reference, frame for
        /// frame; the same path always gives the same stack and different
        /// paths different ones; invalidating in the middle changes nothing.
        #[test]
        fn memo_capture_equals_reference_on_real_stacks() {
            init();
            assert!(!TABLE.load(Ordering::Acquire).is_null());
            const LEVELS: u32 = 6;
            let mut by_path: Vec<Option<Vec<u64>>> = vec![None; 1 << LEVELS];
            for k in 0..600u32 {
                if k == 300 {
                    invalidate();
                }
                let i = k.wrapping_mul(2_654_435_761) >> 7;
                let path = (i & ((1 << LEVELS) - 1)) as usize;
                let mut out = Out {
                    depth: if k % 5 == 0 { 7 } else { 64 },
                    memo: Vec::new(),
                    memo_n: None,
                    reference: Vec::new(),
                    reference_n: None,
                };
                black_box(next(LEVELS, i, &mut out));
                assert_eq!(out.memo_n, out.reference_n, "capture {k}");
                let n = out.memo_n.expect("these stacks have simple rules");
                assert_eq!(out.memo[..n], out.reference[..n], "capture {k}");
                if out.depth == 7 {
                    assert_eq!(n, 7);
                    continue;
                }
                // bottom, six forks and six trampolines (and `next` where
                // not inlined), this test, then the harness's frames.
                assert!(n > 1 + 2 * LEVELS as usize + 1, "{n} frames");
                let frames = out.memo[..n].to_vec();
                match &by_path[path] {
                    Some(f) => assert_eq!(*f, frames, "path {path:06b}"),
                    None => by_path[path] = Some(frames),
                }
            }
            let seen: Vec<&Vec<u64>> = by_path.iter().flatten().collect();
            assert_eq!(seen.len(), 1 << LEVELS);
            for (a, x) in seen.iter().enumerate() {
                for y in &seen[a + 1..] {
                    assert_ne!(x, y);
                }
            }
        }
    }
}
