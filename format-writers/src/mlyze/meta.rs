//! Reading the mlyze metadata without holding it whole.
//!
//! The JSON metadata of a trace with many distinct stacks is large (a million
//! stacks of 25 frames is about a gigabyte: the document gives every frame of
//! every stack its own `{"file_id","line","func_id"}` object), so the reader
//! never loads it into one buffer nor into a tree of JSON values:
//!
//! - [`MetaRead`] hands the metadata's bytes from the file's buffered
//!   source to the `BufReader` that `serde_json` reads through, counting
//!   them and their newlines, so a JSON error is still located at its exact
//!   byte offset in the file (from the parser's line and column).
//! - [`Runs`] is what the two per-stack tables (`stack_traces` and
//!   `libtracer.stack_addresses_delta`, or the older
//!   `libtracer.stack_addresses`) deserialize into: each distinct element
//!   (frame or address) once, and each stack a run of 4-byte indices into
//!   them. Stacks share most of their frames, so this is ~4 bytes a frame.
//! - [`StackGen`] turns those runs into model `Stack` records one at a time,
//!   in id order, when the reader yields them.

use std::fmt;
use std::hash::Hash;
use std::io::{self, Read};
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::HEADER_LEN;
use crate::bytes::ByteSource;
use crate::error::{FormatError, Result};
use crate::fasthash::FastMap;
use crate::model::{Frame, Stack, Symbol};

/// One frame as the document writes it.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct DocFrame {
    pub file_id: u64,
    pub line: u32,
    pub func_id: u64,
}

/// The metadata's bytes, read from the file's source and counted.
pub(super) struct MetaRead<'a, R> {
    src: &'a mut ByteSource<R>,
    /// Metadata bytes not read yet.
    left: u64,
    /// The metadata's length (`L` of the header).
    pub len: u64,
    /// How many bytes were handed out.
    pub consumed: u64,
    /// Newlines among them, and the offset just past the last one.
    lines: u64,
    line_start: u64,
    /// Bytes of the last hand-out (which ends at `buf[pos]` and at metadata
    /// offset `consumed`), and `lines`, `line_start` as they were before it.
    handed: usize,
    handed_lines: u64,
    handed_line_start: u64,
    /// Set when the file ends (or fails) before the metadata does.
    pub error: Option<FormatError>,
    /// Bytes taken from the source, not handed out yet: `buf[pos..end]`.
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
}

impl<'a, R: Read> MetaRead<'a, R> {
    pub fn new(src: &'a mut ByteSource<R>, len: u64) -> Self {
        MetaRead {
            src,
            left: len,
            len,
            consumed: 0,
            lines: 0,
            line_start: 0,
            handed: 0,
            handed_lines: 0,
            handed_line_start: 0,
            error: None,
            buf: vec![0; 1 << 16].into_boxed_slice(),
            pos: 0,
            end: 0,
        }
    }
}

impl<R: Read> MetaRead<'_, R> {
    /// After a JSON error: whether the file holds the rest of the metadata.
    /// A length field beyond the end of the file is reported as that (the
    /// truncation), not as whatever JSON error the bytes after it made.
    pub fn check_rest(&mut self) -> Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let start = self.src.offset() - (self.consumed + (self.end - self.pos) as u64);
        let left = self.left;
        self.left = 0;
        self.src
            .skip(left, "the JSON metadata")
            .map_err(|e| match e {
                FormatError::Truncated { offset, .. } => FormatError::truncated(
                    offset,
                    format!("the JSON metadata ({} bytes from byte {start})", self.len),
                ),
                other => other,
            })
    }
}

impl<R: Read> MetaRead<'_, R> {
    /// Moves the next run of metadata bytes into the local buffer.
    #[cold]
    fn refill(&mut self) -> io::Result<()> {
        let avail = match self.src.peek_buf() {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(e);
                return Err(io::Error::other("metadata read failed"));
            }
        };
        if avail.is_empty() {
            let start = self.src.offset() - (self.consumed + (self.end - self.pos) as u64);
            self.error = Some(FormatError::truncated(
                self.src.offset(),
                format!("the JSON metadata ({} bytes from byte {start})", self.len),
            ));
            return Err(io::Error::other("metadata cut short"));
        }
        let n = avail.len().min(self.buf.len()).min(self.left as usize);
        self.buf[..n].copy_from_slice(&avail[..n]);
        self.src.consume(n);
        self.left -= n as u64;
        self.pos = 0;
        self.end = n;
        Ok(())
    }
}

impl<R: Read> Read for MetaRead<'_, R> {
    /// Hands out the rest of the local buffer (to the `BufReader` serde_json
    /// reads through), noting where its lines begin.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.pos == self.end {
            if self.left == 0 {
                return Ok(0);
            }
            self.refill()?;
        }
        let n = buf.len().min(self.end - self.pos);
        let out = &self.buf[self.pos..self.pos + n];
        buf[..n].copy_from_slice(out);
        self.handed = n;
        (self.handed_lines, self.handed_line_start) = (self.lines, self.line_start);
        if let Some(last) = memchr::memrchr(b'\n', out) {
            self.lines += memchr::memchr_iter(b'\n', out).count() as u64;
            self.line_start = self.consumed + last as u64 + 1;
        }
        self.pos += n;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<R> MetaRead<'_, R> {
    /// The metadata offset of the byte serde_json was at (its 1-based line,
    /// and its column: bytes taken since that line began, 0 just after a
    /// newline), and that byte. serde_json reads through a `BufReader` that
    /// asks for more only once it has handed out everything it holds, so
    /// that byte lies in the last hand-out, which `buf` still holds.
    fn locate(&self, line: u64, column: u64) -> Option<(u64, u8)> {
        let before = line.checked_sub(1)?;
        let n = self.handed;
        let handed = &self.buf[self.pos - n..self.pos];
        let handed_at = self.consumed - n as u64;
        let start = match before.checked_sub(self.handed_lines)? {
            0 => self.handed_line_start,
            k => {
                let i = memchr::memchr_iter(b'\n', handed).nth(usize::try_from(k - 1).ok()?)?;
                handed_at + i as u64 + 1
            }
        };
        let pos = (start + column).checked_sub(1)?;
        let byte = match pos.checked_sub(handed_at) {
            Some(i) if i < n as u64 => handed[i as usize],
            // Column 0: the newline that ended the previous hand-out.
            _ if column == 0 => b'\n',
            _ => return None,
        };
        Some((pos, byte))
    }
}

/// A JSON error located in the file: the metadata's offset plus the position
/// of the last byte the parser took (serde_json reports an error at the byte
/// it has just read).
pub(super) fn json_error<R>(m: &MetaRead<'_, R>, e: &serde_json::Error) -> FormatError {
    // serde_json's message without its " at line L column C" suffix.
    let full = e.to_string();
    let msg = full.split(" at line ").next().unwrap_or(&full);
    if e.is_eof() {
        return FormatError::invalid(
            HEADER_LEN as u64 + m.len,
            format!("complete JSON metadata within its {} bytes ({msg})", m.len),
            "the end of the metadata",
        );
    }
    let at = m.locate(e.line() as u64, e.column() as u64);
    let (pos, found) = match at {
        Some((pos, b)) if b.is_ascii_graphic() || b == b' ' => (pos, format!("'{}'", b as char)),
        Some((pos, b)) => (pos, format!("byte 0x{b:02x}")),
        // Not placed (no line): the last byte taken.
        None => (
            m.consumed.saturating_sub(1),
            "what the parser stopped at".into(),
        ),
    };
    FormatError::invalid(
        HEADER_LEN as u64 + pos,
        format!("valid JSON metadata ({msg})"),
        found,
    )
}

/// A table of the metadata mapping decimal stack ids to arrays, kept compact:
/// each distinct element once in `items`, each array a run of indices.
pub(super) struct Runs<T> {
    /// `(id, start in refs, length)`, in file order until [`Runs::sort`].
    runs: Vec<(u64, usize, u32)>,
    refs: Vec<u32>,
    items: Vec<T>,
    index: FastMap<T, u32>,
    /// The first key that is not a decimal id.
    pub bad_key: Option<String>,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Runs {
            runs: Vec::new(),
            refs: Vec::new(),
            items: Vec::new(),
            index: FastMap::default(),
            bad_key: None,
        }
    }
}

impl<T: Copy + Eq + Hash> Runs<T> {
    /// Sorts the runs by id; of runs with the same id the last one written
    /// stays (as a JSON object read into a map keeps the last duplicate).
    /// The interning index is dropped: it is not needed any more.
    pub fn sort(&mut self) {
        self.index = FastMap::default();
        self.runs.reverse();
        self.runs.sort_by_key(|r| r.0);
        self.runs.dedup_by_key(|r| r.0);
        // Held while the stacks are yielded: no growth slack.
        self.runs.shrink_to_fit();
        self.refs.shrink_to_fit();
        self.items.shrink_to_fit();
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().map(|r| r.0)
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Id and elements of run `k` (in sorted order).
    pub fn run(&self, k: usize) -> (u64, impl ExactSizeIterator<Item = &T> + DoubleEndedIterator) {
        let (id, start, len) = self.runs[k];
        let items = &self.items;
        (
            id,
            self.refs[start..start + len as usize]
                .iter()
                .map(move |&i| &items[i as usize]),
        )
    }

    /// Position of the run with this id, searching forward from `from`.
    fn find_from(&self, from: usize, id: u64) -> Option<usize> {
        let rest = self.runs.get(from..)?;
        let k = rest.partition_point(|r| r.0 < id);
        (rest.get(k)?.0 == id).then_some(from + k)
    }

    fn push_item(&mut self, item: T) {
        let next = self.items.len() as u32;
        let i = *self.index.entry(item).or_insert(next);
        if i == next {
            self.items.push(item);
        }
        self.refs.push(i);
    }
}

impl<'de, T: Copy + Eq + Hash + Deserialize<'de>> Deserialize<'de> for Runs<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct MapV<T>(PhantomData<T>);
        impl<'de, T: Copy + Eq + Hash + Deserialize<'de>> Visitor<'de> for MapV<T> {
            type Value = Runs<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of arrays keyed by stack id")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Runs<T>, A::Error> {
                let mut runs = Runs::default();
                while let Some(key) = map.next_key::<String>()? {
                    let id = match key.parse::<u64>() {
                        Ok(id) if !key.starts_with('+') => id,
                        _ => {
                            runs.bad_key.get_or_insert(key);
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    let start = runs.refs.len();
                    map.next_value_seed(RunSeed(&mut runs))?;
                    let len = (runs.refs.len() - start) as u32;
                    runs.runs.push((id, start, len));
                }
                Ok(runs)
            }
        }
        d.deserialize_map(MapV(PhantomData))
    }
}

/// `libtracer.stack_addresses_delta` read into the runs the older
/// `libtracer.stack_addresses` gives: an array of `[id, shared,
/// addresses...]`, each stack's first `shared` addresses (outermost first)
/// being those of the element before it.
pub(super) struct DeltaRuns(pub Runs<u64>);

impl<'de> Deserialize<'de> for DeltaRuns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct SeqV;
        impl<'de> Visitor<'de> for SeqV {
            type Value = DeltaRuns;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of [stack id, shared, addresses...] arrays")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<DeltaRuns, A::Error> {
                let mut runs = Runs::default();
                while seq.next_element_seed(DeltaSeed(&mut runs))?.is_some() {}
                Ok(DeltaRuns(runs))
            }
        }
        d.deserialize_seq(SeqV)
    }
}

/// One element of `stack_addresses_delta`, appended to runs that hold the
/// elements before it (the last run is the previous element's).
struct DeltaSeed<'a>(&'a mut Runs<u64>);

impl<'de> DeserializeSeed<'de> for DeltaSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DeltaSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of a stack id, a count of shared addresses, then addresses")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        use serde::de::Error;
        let id: u64 = seq
            .next_element()?
            .ok_or_else(|| A::Error::invalid_length(0, &self))?;
        let shared: u64 = seq
            .next_element()?
            .ok_or_else(|| A::Error::invalid_length(1, &self))?;
        let runs = self.0;
        let (from, len) = runs.runs.last().map_or((0, 0), |&(_, s, n)| (s, n));
        if shared > u64::from(len) {
            return Err(A::Error::custom(format!(
                "stack {id} sharing {shared} addresses with an element of {len}"
            )));
        }
        let start = runs.refs.len();
        let too_many = || A::Error::custom("more than 2^32 stack elements");
        if start + shared as usize >= u32::MAX as usize {
            return Err(too_many());
        }
        runs.refs.extend_from_within(from..from + shared as usize);
        while let Some(address) = seq.next_element::<u64>()? {
            if runs.refs.len() >= u32::MAX as usize {
                return Err(too_many());
            }
            runs.push_item(address);
        }
        let n = (runs.refs.len() - start) as u32;
        runs.runs.push((id, start, n));
        Ok(())
    }
}

/// Appends one array's elements to a [`Runs`].
struct RunSeed<'a, T>(&'a mut Runs<T>);

impl<'de, T: Copy + Eq + Hash + Deserialize<'de>> DeserializeSeed<'de> for RunSeed<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Copy + Eq + Hash + Deserialize<'de>> Visitor<'de> for RunSeed<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(item) = seq.next_element::<T>()? {
            if self.0.refs.len() >= u32::MAX as usize {
                return Err(serde::de::Error::custom("more than 2^32 stack elements"));
            }
            self.0.push_item(item);
        }
        Ok(())
    }
}

/// Builds the metadata's `Stack` records one at a time, in id order.
pub(super) struct StackGen {
    /// Each stack's frames joined with their addresses (0 when the file has
    /// none): the two tables merged, so only one is held while stacks are
    /// yielded.
    stacks: Runs<(DocFrame, u64)>,
    functions: FastMap<u64, String>,
    files: FastMap<u64, String>,
    unresolved: Option<u64>,
    next: usize,
}

impl StackGen {
    /// Checks every stack against the tables (so a bad reference fails before
    /// the first record, at the metadata's offset, naming the first bad
    /// frame in id order) and readies the generator.
    pub fn new(
        mut traces: Runs<DocFrame>,
        mut addresses: Runs<u64>,
        functions: FastMap<u64, String>,
        files: FastMap<u64, String>,
        unresolved: Option<u64>,
    ) -> Result<Self> {
        traces.sort();
        addresses.sort();
        let at = HEADER_LEN as u64;
        // Whether each distinct frame names known ids (checked once each).
        let mut checked: Vec<Option<bool>> = vec![None; traces.items.len()];
        let mut merged = Runs::default();
        merged.runs.reserve_exact(traces.runs.len());
        merged.refs.reserve_exact(traces.refs.len());
        let mut a = 0;
        for k in 0..traces.len() {
            let (id, start, len) = traces.runs[k];
            let mut addrs: &[u32] = &[];
            if let Some(ka) = addresses.find_from(a, id) {
                a = ka;
                let (_, astart, n) = addresses.runs[ka];
                if n != 0 && n != len {
                    return Err(FormatError::invalid(
                        at,
                        format!(
                            "stack {id}'s frame addresses (libtracer.stack_addresses_delta, or the older stack_addresses) with one address per frame ({len})"
                        ),
                        format!("{n} addresses"),
                    ));
                }
                addrs = &addresses.refs[astart..astart + n as usize];
            }
            let doc = &traces.refs[start..start + len as usize];
            // Checked innermost (last written) first, as frames are yielded.
            for (j, &fi) in doc.iter().enumerate().rev() {
                let f = traces.items[fi as usize];
                let ok = *checked[fi as usize].get_or_insert_with(|| {
                    Some(f.func_id) == unresolved
                        || (functions.contains_key(&f.func_id) && files.contains_key(&f.file_id))
                });
                if !ok {
                    let (what, found) = if !functions.contains_key(&f.func_id) {
                        ("functions", format!("func_id {}", f.func_id))
                    } else {
                        ("files", format!("file_id {}", f.file_id))
                    };
                    return Err(FormatError::invalid(
                        at,
                        format!("stack_traces[\"{id}\"][{j}] naming an id of \"{what}\""),
                        found,
                    ));
                }
            }
            let mstart = merged.refs.len();
            for (j, &fi) in doc.iter().enumerate() {
                let address = addrs.get(j).map_or(0, |&ai| addresses.items[ai as usize]);
                merged.push_item((traces.items[fi as usize], address));
            }
            merged.runs.push((id, mstart, len));
        }
        merged.index = FastMap::default();
        Ok(StackGen {
            stacks: merged,
            functions,
            files,
            unresolved,
            next: 0,
        })
    }

    /// The stack ids, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.stacks.ids().collect()
    }

    /// The next stack (innermost frame first, as the model has it).
    pub fn next_stack(&mut self) -> Option<Stack> {
        if self.next >= self.stacks.len() {
            return None;
        }
        let (id, doc) = self.stacks.run(self.next);
        self.next += 1;
        let mut frames = Vec::with_capacity(doc.len());
        for &(f, address) in doc.rev() {
            let symbol = if Some(f.func_id) == self.unresolved {
                None
            } else {
                // Checked in `new`.
                Some(Symbol {
                    function: self.functions.get(&f.func_id).cloned().unwrap_or_default(),
                    file: self.files.get(&f.file_id).cloned().unwrap_or_default(),
                    line: f.line,
                })
            };
            frames.push(Frame { address, symbol });
        }
        Some(Stack { id, frames })
    }
}
