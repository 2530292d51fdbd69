//! Writing a file in whole, aligned blocks.
//!
//! The page cache of a file system with large folios (ext4 and XFS on Linux
//! 6.x) writes a 64 KiB block that starts on a 64 KiB boundary into one
//! folio; the same bytes written at an unaligned offset, or in pieces whose
//! lengths are not multiples of the block, land in small folios, each
//! reserved, copied into and marked dirty on its own. Measured on ext4
//! (Linux 6.18, this project's benchmark host): 23 MiB written in 64 KiB
//! `write` calls took 4.5 ms at aligned offsets and 7.0 ms at offsets 5
//! bytes off; a trace's spool (a 5-byte chunk head before each 64 KiB of
//! events) and its final file (metadata, then the events copied from the
//! spool range by range) were written in 5.6 and 9.2 ms through
//! [`BlockFile`] against 9.7 and 17.4 ms through a `BufWriter` and
//! `copy_file_range`.
//!
//! [`BlockFile`] keeps the block being filled in memory and writes it with
//! one positioned write when it is full; a large write that starts on a
//! block boundary goes to the file directly, without a copy. `flush`
//! writes the partial block and keeps it: the next write that fills it
//! writes it whole again, at its aligned offset. Reads and seeks (the spool
//! is read back at the end of a run) flush first and read with positioned
//! reads, so the file's own offset is never used.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

/// The block: the largest folio ext4 gives a 64 KiB write.
pub const BLOCK: usize = 64 << 10;

/// A file written in aligned blocks of `block` bytes (see the module
/// documentation).
///
/// Bytes written into the file behind its back (a header patched in place)
/// must not lie in a block it writes again: patch after the last write and
/// its `flush`, as the mlyze writer does.
pub struct BlockFile<F: FileExt> {
    file: F,
    /// The bytes of the block being filled, from `base`.
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    base: u64,
    block: u64,
    /// Bytes in `buf` not yet in the file.
    dirty: bool,
    /// Where `Read` reads next.
    read_pos: u64,
}

impl<F: FileExt> BlockFile<F> {
    /// Writes `file` from offset `start` (its length, for a file appended
    /// to) in blocks of [`BLOCK`] bytes.
    pub fn new(file: F, start: u64) -> Self {
        Self::with_block(file, start, BLOCK)
    }

    /// Same, in blocks of `block` bytes (a power of two).
    pub fn with_block(file: F, start: u64, block: usize) -> Self {
        assert!(block.is_power_of_two(), "the block size is a power of two");
        BlockFile {
            file,
            buf: Vec::with_capacity(block),
            base: start,
            block: block as u64,
            dirty: false,
            read_pos: 0,
        }
    }

    /// The file's length as written through this writer, flushed or not.
    fn len(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// The end of the block `buf` fills.
    fn block_end(&self) -> u64 {
        (self.base / self.block + 1) * self.block
    }

    /// Writes the staged bytes, whole when the block is full.
    fn write_staged(&mut self) -> io::Result<()> {
        self.file.write_all_at(&self.buf, self.base)?;
        self.dirty = false;
        if self.len() == self.block_end() {
            self.base += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

impl<F: FileExt> Write for BlockFile<F> {
    fn write(&mut self, mut data: &[u8]) -> io::Result<usize> {
        let n = data.len();
        while !data.is_empty() {
            if self.buf.is_empty()
                && self.base.is_multiple_of(self.block)
                && data.len() as u64 >= self.block
            {
                // Whole blocks from the caller's memory, no copy.
                let whole = (data.len() as u64 / self.block * self.block) as usize;
                self.file.write_all_at(&data[..whole], self.base)?;
                self.base += whole as u64;
                data = &data[whole..];
                continue;
            }
            let room = (self.block_end() - self.len()) as usize;
            let take = room.min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            self.dirty = true;
            data = &data[take..];
            if take == room {
                self.write_staged()?;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.dirty {
            self.write_staged()?;
        }
        Ok(())
    }
}

impl<F: FileExt> Read for BlockFile<F> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.flush()?;
        let n = self.file.read_at(out, self.read_pos)?;
        self.read_pos += n as u64;
        Ok(n)
    }
}

impl<F: FileExt> Seek for BlockFile<F> {
    /// Moves where reads read; writes always append.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len().checked_add_signed(d),
            SeekFrom::Current(d) => self.read_pos.checked_add_signed(d),
        };
        self.read_pos = pos.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the file",
            )
        })?;
        Ok(self.read_pos)
    }
}

impl<F: FileExt> Drop for BlockFile<F> {
    /// Writes what is staged, as `BufWriter` does; an error is lost.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;

    /// A file in memory that records every positioned write.
    #[derive(Default)]
    struct Recorded {
        bytes: RefCell<Vec<u8>>,
        writes: RefCell<Vec<(u64, usize)>>,
    }

    impl FileExt for &Recorded {
        fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
            let b = self.bytes.borrow();
            let from = (off as usize).min(b.len());
            let n = buf.len().min(b.len() - from);
            buf[..n].copy_from_slice(&b[from..from + n]);
            Ok(n)
        }

        fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
            let mut b = self.bytes.borrow_mut();
            let end = off as usize + buf.len();
            if b.len() < end {
                b.resize(end, 0);
            }
            b[off as usize..end].copy_from_slice(buf);
            self.writes.borrow_mut().push((off, buf.len()));
            Ok(buf.len())
        }
    }

    #[test]
    fn full_blocks_are_written_once_each_at_aligned_offsets() {
        let f = Recorded::default();
        let mut w = BlockFile::with_block(&f, 0, 16);
        // A 5-byte head and 20 bytes, three times: 75 bytes.
        for i in 0..3u8 {
            w.write_all(&[0xee; 5]).unwrap();
            w.write_all(&[i; 20]).unwrap();
        }
        assert_eq!(*f.writes.borrow(), [(0, 16), (16, 16), (32, 16), (48, 16)]);
        w.flush().unwrap();
        assert_eq!(f.writes.borrow().last(), Some(&(64, 11)));
        assert_eq!(f.bytes.borrow().len(), 75);
        assert_eq!(w.len(), 75);
    }

    #[test]
    fn a_flushed_block_is_written_again_whole_when_it_fills() {
        let f = Recorded::default();
        let mut w = BlockFile::with_block(&f, 0, 16);
        w.write_all(&[1; 6]).unwrap();
        w.flush().unwrap();
        // A second flush with nothing new writes nothing.
        w.flush().unwrap();
        w.write_all(&[2; 10]).unwrap();
        assert_eq!(*f.writes.borrow(), [(0, 6), (0, 16)]);
        let mut want = vec![1; 6];
        want.extend([2; 10]);
        assert_eq!(*f.bytes.borrow(), want);
    }

    #[test]
    fn large_aligned_writes_go_straight_to_the_file() {
        let f = Recorded::default();
        let mut w = BlockFile::with_block(&f, 0, 16);
        w.write_all(&[7; 40]).unwrap();
        // 32 bytes straight from the caller, 8 staged.
        assert_eq!(*f.writes.borrow(), [(0, 32)]);
        w.write_all(&[8; 30]).unwrap();
        // The staged block filled (8 more), then 16 straight, 6 staged.
        assert_eq!(*f.writes.borrow(), [(0, 32), (32, 16), (48, 16)]);
        assert_eq!(w.len(), 70);
    }

    #[test]
    fn an_unaligned_start_fills_up_to_the_next_boundary_first() {
        let f = Recorded::default();
        f.bytes.borrow_mut().extend([9; 5]);
        let mut w = BlockFile::with_block(&f, 5, 16);
        w.write_all(&[1; 30]).unwrap();
        assert_eq!(*f.writes.borrow(), [(5, 11), (16, 16)]);
        w.flush().unwrap();
        assert_eq!(f.bytes.borrow().len(), 35);
        assert_eq!(&f.bytes.borrow()[..5], &[9; 5]);
    }

    #[test]
    fn reads_see_staged_bytes_and_leave_the_writes_appending() {
        let f = Recorded::default();
        let mut w = BlockFile::with_block(&f, 0, 16);
        w.write_all(b"hello, blocks").unwrap();
        w.seek(SeekFrom::Start(7)).unwrap();
        let mut got = String::new();
        w.read_to_string(&mut got).unwrap();
        assert_eq!(got, "blocks");
        w.write_all(b"!").unwrap();
        assert_eq!(w.seek(SeekFrom::End(-1)).unwrap(), 13);
        let mut last = [0; 1];
        w.read_exact(&mut last).unwrap();
        assert_eq!(&last, b"!");
        assert!(w.seek(SeekFrom::Current(-20)).is_err());
    }

    #[test]
    fn dropping_writes_what_is_staged() {
        let f = Recorded::default();
        {
            let mut w = BlockFile::with_block(&f, 0, 16);
            w.write_all(&[3; 20]).unwrap();
        }
        assert_eq!(*f.bytes.borrow(), vec![3; 20]);
    }

    proptest! {
        /// Any sequence of writes and flushes leaves the file equal to the
        /// bytes written, and every write but the flushes' starts and ends
        /// on a block boundary.
        #[test]
        fn the_file_holds_what_was_written(
            start in 0u64..40,
            ops in proptest::collection::vec((0usize..70, any::<bool>()), 0..40),
        ) {
            let f = Recorded::default();
            f.bytes.borrow_mut().resize(start as usize, 0xaa);
            let mut want = vec![0xaa; start as usize];
            let mut w = BlockFile::with_block(&f, start, 16);
            // The ends of the flushes' writes: where the bytes ended then.
            let mut flushed_at = Vec::new();
            for (i, &(n, flush)) in ops.iter().enumerate() {
                let data: Vec<u8> = (0..n).map(|k| (i * 31 + k) as u8).collect();
                w.write_all(&data).unwrap();
                want.extend(&data);
                if flush {
                    w.flush().unwrap();
                    flushed_at.push(want.len() as u64);
                    prop_assert_eq!(&*f.bytes.borrow(), &want);
                }
            }
            w.flush().unwrap();
            flushed_at.push(want.len() as u64);
            prop_assert_eq!(&*f.bytes.borrow(), &want);
            prop_assert_eq!(w.len(), want.len() as u64);
            for &(off, len) in f.writes.borrow().iter() {
                let end = off + len as u64;
                // Every write starts at `start` or on a boundary, and ends on
                // one unless a flush wrote it.
                prop_assert!(off == start || off.is_multiple_of(16));
                prop_assert!(end.is_multiple_of(16) || flushed_at.contains(&end));
            }
        }
    }
}
