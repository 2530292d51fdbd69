//! A cached `.eh_frame` unwinder for x86-64: complete stacks on code without
//! frame pointers at close to frame-pointer cost.
//!
//! Unwinding one frame needs the call-frame rule of its return address: where
//! the canonical frame address (CFA) is (`rsp` or `rbp` plus an offset), that
//! the return address sits at CFA-8, and whether the caller's `rbp` was saved
//! (at CFA plus an offset). Almost every rule of compiled code has this shape.
//! The first time an address is seen its rule is computed from the object's
//! `.eh_frame_hdr` table and `.eh_frame` (found with glibc's lock-free
//! `_dl_find_object`, evaluated with gimli) and stored in a global
//! direct-mapped table; afterwards a frame costs a hash probe and two reads.
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

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const SLOTS: usize = 1 << 15;

struct Entry {
    key: AtomicU64,
    val: AtomicU64,
}

static TABLE: AtomicPtr<Entry> = AtomicPtr::new(core::ptr::null_mut());
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
    let table: Box<[Entry]> = (0..SLOTS)
        .map(|_| Entry {
            key: AtomicU64::new(0),
            val: AtomicU64::new(0),
        })
        .collect();
    TABLE.store(Box::leak(table).as_mut_ptr(), Ordering::Release);
}

#[inline]
fn slot(ip: u64) -> usize {
    (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 49) as usize & (SLOTS - 1)
}

/// The cached value of `ip`'s rule, encoded, with check bits that match
/// `ip` (computed and stored on a miss).
#[inline]
fn lookup(table: *const Entry, ip: u64) -> u64 {
    // SAFETY: `table` points to SLOTS live entries (leaked, never freed).
    let e = unsafe { &*table.add(slot(ip)) };
    if e.key.load(Ordering::Acquire) == ip {
        let v = e.val.load(Ordering::Acquire);
        if v & 0xf_ffff == check_bits(ip) && v >> 62 != 0 {
            return v;
        }
    }
    let v = encode(ip, compute(ip));
    e.val.store(v, Ordering::Release);
    e.key.store(ip, Ordering::Release);
    v
}

/// The encoded body (without check bits) of the rule of a function that
/// keeps the frame-pointer convention: CFA = rbp + 16, caller's rbp saved at
/// CFA - 16. Such a frame is unwound exactly like a frame-pointer walk.
const FP_FRAME: u64 = (KIND_FRAME << 62) | (1 << 61) | (1 << 60) | (16 << 36) | (0xfff0 << 20);

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
    use gimli::{
        BaseAddresses, CfaRule, EhFrame, EhFrameHdr, NativeEndian, RegisterRule, UnwindSection,
        X86_64,
    };
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
    let end = obj.map_end as u64;
    if hdr_addr >= end {
        return Rule::Complex;
    }
    // SAFETY: [hdr_addr, map_end) lies inside the object's mapping, which stays
    // mapped while the object is loaded (its code is on our stack right now).
    let hdr_bytes =
        unsafe { core::slice::from_raw_parts(hdr_addr as *const u8, (end - hdr_addr) as usize) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr);
    let Ok(parsed) = EhFrameHdr::new(hdr_bytes, NativeEndian).parse(&bases, 8) else {
        return Rule::Complex;
    };
    let eh_addr = match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a,
        gimli::Pointer::Indirect(_) => return Rule::Complex,
    };
    if eh_addr < obj.map_start as u64 || eh_addr >= end {
        return Rule::Complex;
    }
    // SAFETY: as above, inside the object's mapping.
    let eh_bytes =
        unsafe { core::slice::from_raw_parts(eh_addr as *const u8, (end - eh_addr) as usize) };
    let eh_frame = EhFrame::new(eh_bytes, NativeEndian);
    let bases = bases.set_eh_frame(eh_addr);
    let Some(table) = parsed.table() else {
        return Rule::Complex;
    };
    let mut ctx = gimli::UnwindContext::new();
    let row = match table.unwind_info_for_address(&eh_frame, &bases, &mut ctx, addr, |s, b, o| {
        s.cie_from_offset(b, o)
    }) {
        Ok(row) => row,
        Err(gimli::Error::NoUnwindInfoForAddress) => return Rule::End,
        Err(_) => return Rule::Complex,
    };
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
#[inline]
pub fn capture(
    buf: &mut [u64],
    mut ip: u64,
    mut rsp: u64,
    mut rbp: u64,
    lo: u64,
    hi: u64,
) -> Option<usize> {
    let table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        return None;
    }
    let readable =
        |a: u64| a >= lo && a.checked_add(8).is_some_and(|e| e <= hi) && a.is_multiple_of(8);
    let mut n = 0;
    while n < buf.len() {
        buf[n] = ip;
        n += 1;
        let v = lookup(table, ip);
        if v == FP_FRAME | check_bits(ip) {
            // The common case, written so that the loads below depend on
            // `rbp` alone and not on the cached rule: the processor runs
            // ahead along the (predicted) branch, overlapping the next
            // frame's table lookup with this frame's reads.
            let cfa = rbp.wrapping_add(16);
            if !readable(rbp.wrapping_add(8)) || cfa <= rsp || !readable(rbp) {
                break;
            }
            // SAFETY: both words checked to lie inside this thread's stack.
            let (ra, saved) = unsafe { (*((rbp + 8) as *const u64), *(rbp as *const u64)) };
            rbp = saved;
            rsp = cfa;
            if ra == 0 {
                break;
            }
            ip = ra;
            continue;
        }
        let (cfa_rbp, cfa_off, rbp_off) = match decode(ip, v) {
            Some(Rule::Frame {
                cfa_rbp,
                cfa_off,
                rbp_off,
            }) => (cfa_rbp, cfa_off, rbp_off),
            Some(Rule::End) => break,
            Some(Rule::Complex) | None => return None,
        };
        let cfa = if cfa_rbp { rbp } else { rsp }.wrapping_add(cfa_off as u64);
        if !readable(cfa.wrapping_sub(8)) || cfa <= rsp {
            break;
        }
        // SAFETY: checked to lie inside this thread's stack.
        let ra = unsafe { *(cfa.wrapping_sub(8) as *const u64) };
        if let Some(off) = rbp_off {
            let at = cfa.wrapping_add(off as i64 as u64);
            if !readable(at) {
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

    #[test]
    fn the_frame_pointer_rule_has_the_fast_path_encoding() {
        let ip = 0x5555_1234_5678;
        let fp = Rule::Frame {
            cfa_rbp: true,
            cfa_off: 16,
            rbp_off: Some(-16),
        };
        assert_eq!(encode(ip, fp), FP_FRAME | check_bits(ip));
        for other in [
            Rule::Frame {
                cfa_rbp: false,
                cfa_off: 16,
                rbp_off: Some(-16),
            },
            Rule::Frame {
                cfa_rbp: true,
                cfa_off: 24,
                rbp_off: Some(-16),
            },
            Rule::Frame {
                cfa_rbp: true,
                cfa_off: 16,
                rbp_off: None,
            },
        ] {
            assert_ne!(encode(ip, other), FP_FRAME | check_bits(ip));
        }
    }

    #[test]
    fn a_value_stored_for_another_address_is_rejected() {
        let v = encode(0x401000, Rule::End);
        assert_eq!(decode(0x401000, v), Some(Rule::End));
        assert_eq!(decode(0x401001, v), None);
        assert_eq!(decode(0x401000, 0), None);
    }
}
