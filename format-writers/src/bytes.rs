//! A byte source that knows its offset, shared by every reader.
//!
//! Readers pull fixed-width little- or big-endian integers and bounded byte runs
//! from any [`Read`]; every failure comes back as a [`FormatError`] naming the
//! offset and the thing that was being read. Lengths read from a file are never
//! trusted for allocation: [`ByteSource::read_vec`] grows its buffer only as
//! bytes actually arrive.

use std::io::{self, BufRead, BufReader, Read};

use crate::error::{FormatError, Result};

/// Buffered input with a running byte offset.
pub struct ByteSource<R> {
    inner: BufReader<R>,
    offset: u64,
}

impl<R: Read> ByteSource<R> {
    pub fn new(inner: R) -> Self {
        ByteSource {
            inner: BufReader::with_capacity(1 << 16, inner),
            offset: 0,
        }
    }

    /// Starts counting at `offset` (for a source that begins mid-file).
    pub fn with_offset(inner: R, offset: u64) -> Self {
        ByteSource {
            inner: BufReader::with_capacity(1 << 16, inner),
            offset,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn io_err(&self, source: io::Error) -> FormatError {
        FormatError::Io {
            offset: self.offset,
            source,
        }
    }

    /// True when no byte is left.
    pub fn at_eof(&mut self) -> Result<bool> {
        loop {
            match self.inner.fill_buf() {
                Ok(buf) => return Ok(buf.is_empty()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            }
        }
    }

    /// The buffered bytes not consumed yet (at least one unless at end of input).
    pub fn peek_buf(&mut self) -> Result<&[u8]> {
        loop {
            match self.inner.fill_buf() {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            }
        }
        Ok(self.inner.buffer())
    }

    /// Marks `n` bytes of [`Self::peek_buf`] as consumed.
    pub fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.offset += n as u64;
    }

    /// Fills `buf` completely or fails naming `what`.
    pub fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => {
                    self.offset += filled as u64;
                    return Err(FormatError::truncated(self.offset, what));
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.offset += filled as u64;
                    return Err(self.io_err(e));
                }
            }
        }
        self.offset += filled as u64;
        Ok(())
    }

    pub fn read_array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.read_exact(&mut b, what)?;
        Ok(b)
    }

    pub fn read_u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.read_array::<1>(what)?[0])
    }
    pub fn read_u16_le(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.read_array(what)?))
    }
    pub fn read_u32_le(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.read_array(what)?))
    }
    pub fn read_u64_le(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.read_array(what)?))
    }
    pub fn read_u16_be(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.read_array(what)?))
    }
    pub fn read_u32_be(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.read_array(what)?))
    }
    pub fn read_u64_be(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_be_bytes(self.read_array(what)?))
    }

    /// Reads `len` bytes into a new vector. The vector grows as data arrives, so
    /// a corrupt length field costs at most the bytes the file really holds.
    pub fn read_vec(&mut self, len: u64, what: &str) -> Result<Vec<u8>> {
        let start = self.offset;
        let mut out = Vec::with_capacity(len.min(1 << 16) as usize);
        let mut left = len;
        while left > 0 {
            let buf = self.peek_buf()?;
            if buf.is_empty() {
                return Err(FormatError::truncated(
                    self.offset,
                    format!("{what} ({len} bytes from byte {start})"),
                ));
            }
            let n = (buf.len() as u64).min(left) as usize;
            out.extend_from_slice(&buf[..n]);
            self.consume(n);
            left -= n as u64;
        }
        Ok(out)
    }

    /// Skips `len` bytes.
    pub fn skip(&mut self, len: u64, what: &str) -> Result<()> {
        let start = self.offset;
        let mut left = len;
        while left > 0 {
            let buf = self.peek_buf()?;
            if buf.is_empty() {
                return Err(FormatError::truncated(
                    self.offset,
                    format!("{what} ({len} bytes from byte {start})"),
                ));
            }
            let n = (buf.len() as u64).min(left) as usize;
            self.consume(n);
            left -= n as u64;
        }
        Ok(())
    }

    /// Reads a protocol-buffers style unsigned varint (at most 10 bytes).
    pub fn read_varint(&mut self, what: &str) -> Result<u64> {
        let start = self.offset;
        let mut value: u64 = 0;
        for i in 0..10u32 {
            let b = self.read_u8(what)?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(FormatError::invalid(
                    start,
                    format!("{what} as a varint of at most 64 bits"),
                    "a varint longer than 64 bits",
                ));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        unreachable!("the tenth byte either ends the varint or is rejected")
    }
}

/// Appends `value` to `out` as a protocol-buffers style unsigned varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_examples_from_the_mlyze_document() {
        // 003_…, "Variable-Length Integer Encoding": 0, 127, 128, 16384.
        for (v, bytes) in [
            (0u64, &[0x00u8][..]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (16_384, &[0x80, 0x80, 0x01]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes);
            let mut src = ByteSource::new(bytes);
            assert_eq!(src.read_varint("v").unwrap(), v);
            assert_eq!(src.offset(), bytes.len() as u64);
        }
    }

    #[test]
    fn varint_max_and_overlong() {
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(
            ByteSource::new(&out[..]).read_varint("v").unwrap(),
            u64::MAX
        );
        let overlong = [0xffu8; 11];
        assert!(ByteSource::new(&overlong[..]).read_varint("v").is_err());
        let too_big = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(ByteSource::new(&too_big[..]).read_varint("v").is_err());
    }

    #[test]
    fn read_vec_does_not_trust_the_length() {
        let data = [1u8, 2, 3];
        let mut src = ByteSource::new(&data[..]);
        let err = src.read_vec(u64::MAX, "payload").unwrap_err();
        assert_eq!(err.offset(), 3);
    }
}
