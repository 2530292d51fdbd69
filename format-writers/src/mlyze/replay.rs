//! Reading back the allocations among encoded mlyze events (the writer's own
//! bytes: in memory, or the event chunks of its spool), for
//! [`crate::TraceWriter::replay_allocations`].
//!
//! Only the event layout of the document is needed (see `mod.rs`): ALLOC
//! `00 delta addr:u64 size stack thread:u16`, FREE `01 delta addr:u64`, GC
//! `02 delta objects bytes`, MARKER `03 delta name`. Bytes that do not parse
//! are an error (the writer's own output was damaged), never a panic.

use std::io;

use super::{ALLOC, FREE, GC, MARKER, MAX_EVENT};

/// Feeds event bytes in pieces of any size; calls `f(address, size)` for
/// each ALLOC. An event cut by the end of a piece is completed by the next.
pub(super) struct AllocReplay {
    carry: Vec<u8>,
    /// Offset of the next byte fed, within the current run of events (for
    /// error messages).
    at: u64,
}

impl AllocReplay {
    pub fn new() -> Self {
        AllocReplay {
            carry: Vec::with_capacity(MAX_EVENT),
            at: 0,
        }
    }

    pub fn feed(&mut self, mut bytes: &[u8], f: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        // Finish an event cut by the previous piece, one byte at a time
        // (at most MAX_EVENT of them).
        while !self.carry.is_empty() && !bytes.is_empty() {
            self.carry.push(bytes[0]);
            bytes = &bytes[1..];
            let carry = std::mem::take(&mut self.carry);
            match event(&carry).map_err(|e| self.error(e))? {
                Some((n, alloc)) => {
                    debug_assert_eq!(n, carry.len());
                    if let Some((a, s)) = alloc {
                        f(a, s);
                    }
                    self.at += n as u64;
                }
                None => self.carry = carry,
            }
        }
        let mut pos = 0;
        // Whole events for sure: the window of the longest one.
        while bytes.len() - pos >= MAX_EVENT {
            let w: &[u8; MAX_EVENT] = bytes[pos..pos + MAX_EVENT]
                .try_into()
                .expect("a window of MAX_EVENT bytes");
            let (n, alloc) = event_in(w).map_err(|e| self.error(e))?;
            if let Some((a, s)) = alloc {
                f(a, s);
            }
            pos += n;
            self.at += n as u64;
        }
        while pos < bytes.len() {
            match event(&bytes[pos..]).map_err(|e| self.error(e))? {
                Some((n, alloc)) => {
                    if let Some((a, s)) = alloc {
                        f(a, s);
                    }
                    pos += n;
                    self.at += n as u64;
                }
                None => {
                    self.carry.extend_from_slice(&bytes[pos..]);
                    break;
                }
            }
        }
        Ok(())
    }

    /// Ends a run of events (an event chunk range, or the pending bytes): no
    /// event may be left cut.
    pub fn end(&mut self) -> io::Result<()> {
        if self.carry.is_empty() {
            Ok(())
        } else {
            Err(self.error("an event cut short"))
        }
    }

    fn error(&self, what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "mlyze events read back: byte {} of the run: {what}",
                self.at
            ),
        )
    }
}

/// One decoded event: its length, and `(address, size)` for an ALLOC.
type Decoded = (usize, Option<(u64, u64)>);

/// The event at the start of `b`, or `None` when `b` ends inside it.
#[inline]
fn event(b: &[u8]) -> Result<Option<Decoded>, &'static str> {
    let Some(&ty) = b.first() else {
        return Ok(None);
    };
    let mut pos = 1;
    macro_rules! varint {
        () => {
            match varint(&b[pos..])? {
                Some((v, n)) => {
                    pos += n;
                    v
                }
                None => return Ok(None),
            }
        };
    }
    macro_rules! fixed {
        ($n:expr) => {{
            if b.len() < pos + $n {
                return Ok(None);
            }
            let mut w = [0u8; 8];
            w[..$n].copy_from_slice(&b[pos..pos + $n]);
            pos += $n;
            u64::from_le_bytes(w)
        }};
    }
    let _delta = varint!();
    let alloc = match ty {
        ALLOC => {
            let addr = fixed!(8);
            let size = varint!();
            let _stack = varint!();
            let _slot = fixed!(2);
            Some((addr, size))
        }
        FREE => {
            let _addr = fixed!(8);
            None
        }
        GC => {
            let _objects = varint!();
            let _bytes = varint!();
            None
        }
        MARKER => {
            let _name = varint!();
            None
        }
        _ => return Err("an unknown event type"),
    };
    Ok(Some((pos, alloc)))
}

/// [`event`] for a window as long as the longest event, so never cut short:
/// the loop of the bulk of the bytes.
#[inline]
fn event_in(w: &[u8; MAX_EVENT]) -> Result<Decoded, &'static str> {
    #[inline(always)]
    fn varint_at(w: &[u8; MAX_EVENT], pos: &mut usize) -> Result<u64, &'static str> {
        let first = w[*pos];
        *pos += 1;
        if first < 0x80 {
            return Ok(u64::from(first));
        }
        let mut v = u64::from(first & 0x7f);
        for i in 1..10 {
            let byte = *w.get(*pos).ok_or("an event cut short")?;
            *pos += 1;
            let part = u64::from(byte & 0x7f);
            if i == 9 && part > 1 {
                return Err("a varint beyond 64 bits");
            }
            v |= part << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes")
    }
    let ty = w[0];
    let mut pos = 1;
    varint_at(w, &mut pos)?;
    let alloc = match ty {
        ALLOC => {
            let addr = u64::from_le_bytes(
                w.get(pos..pos + 8)
                    .and_then(|b| b.try_into().ok())
                    .ok_or("an event cut short")?,
            );
            pos += 8;
            let size = varint_at(w, &mut pos)?;
            varint_at(w, &mut pos)?;
            pos += 2;
            if pos > MAX_EVENT {
                return Err("an event cut short");
            }
            Some((addr, size))
        }
        FREE => {
            pos += 8;
            if pos > MAX_EVENT {
                return Err("an event cut short");
            }
            None
        }
        GC => {
            varint_at(w, &mut pos)?;
            varint_at(w, &mut pos)?;
            None
        }
        MARKER => {
            varint_at(w, &mut pos)?;
            None
        }
        _ => return Err("an unknown event type"),
    };
    Ok((pos, alloc))
}

/// A protocol-buffers varint: `Some((value, length))`, `None` when `b` ends
/// inside it.
#[inline]
fn varint(b: &[u8]) -> Result<Option<(u64, usize)>, &'static str> {
    if let Some(&byte) = b.first() {
        if byte < 0x80 {
            return Ok(Some((u64::from(byte), 1)));
        }
    }
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        let part = u64::from(byte & 0x7f);
        if i == 9 && part > 1 {
            return Err("a varint beyond 64 bits");
        }
        v |= part << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if b.len() >= 10 {
        Err("a varint longer than 10 bytes")
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of the module documentation (an allocation of 128
    /// bytes at 0x1000), a FREE, a GC and a MARKER, hand-encoded.
    fn sample() -> Vec<u8> {
        let mut b = vec![
            0x00, 0x05, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x80, 0x01, 0x01, 0x02, 0x00,
        ];
        b.extend([0x01, 0x00, 0x00, 0x10, 0, 0, 0, 0, 0, 0]); // FREE 0x1000
        b.extend([0x02, 0x01, 0x03, 0x90, 0x03]); // GC 3 objects, 400 bytes
        b.extend([0x03, 0x00, 0x07]); // MARKER name 7
                                      // ALLOC of 300 bytes at 0x2000 after 200 µs, stack 1000, slot 1.
        b.extend([
            0x00, 0xc8, 0x01, 0x00, 0x20, 0, 0, 0, 0, 0, 0, 0xac, 0x02, 0xe8, 0x07, 0x01, 0x00,
        ]);
        b
    }

    #[test]
    fn allocations_come_back_in_order_whatever_the_pieces() {
        let b = sample();
        for piece in 1..=b.len() {
            let mut got = Vec::new();
            let mut r = AllocReplay::new();
            for chunk in b.chunks(piece) {
                r.feed(chunk, &mut |a, s| got.push((a, s))).unwrap();
            }
            r.end().unwrap();
            assert_eq!(got, vec![(0x1000, 128), (0x2000, 300)], "pieces of {piece}");
        }
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let mut r = AllocReplay::new();
        let e = r.feed(&[0x07, 0x00], &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("unknown event type"), "{e}");
        let mut r = AllocReplay::new();
        r.feed(&sample()[..20], &mut |_, _| {}).unwrap();
        assert!(r.end().is_err());
        let mut r = AllocReplay::new();
        let e = r.feed(
            &[
                0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
            &mut |_, _| {},
        );
        assert!(e.is_err());
    }
}
