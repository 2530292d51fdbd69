//! Turning a frame into what a person reads.
//!
//! A frame's source location comes from its own symbol (formats that store
//! symbols with the stack) or, failing that, from a `Record::AddressSymbol`
//! resolved later for its address. Its module comes from the loaded objects:
//! the object whose mapping holds the address (or, when the trace gave no
//! mapping sizes, the object loaded closest below it), with the offset from
//! its load address, the way LeakSanitizer prints `(module+0xoffset)` so that
//! `addr2line -e module 0xoffset` finds the line later.

use format_writers::{Frame, Object, Symbol};
use rustc_hash::FxHashMap;

/// What is known of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo<'a> {
    pub address: u64,
    pub function: Option<&'a str>,
    pub file: Option<&'a str>,
    pub line: u32,
    pub module: Option<&'a str>,
    pub offset: u64,
}

/// Symbolizes frames of one trace.
pub struct Symbolizer<'a> {
    /// Objects with a known load address, sorted by it.
    objects: Vec<&'a Object>,
    symbols: &'a FxHashMap<u64, Symbol>,
}

fn non_empty(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

impl<'a> Symbolizer<'a> {
    pub fn new(objects: &'a [Object], symbols: &'a FxHashMap<u64, Symbol>) -> Symbolizer<'a> {
        let mut objects: Vec<&Object> = objects.iter().filter(|o| o.load_address != 0).collect();
        objects.sort_by_key(|o| o.load_address);
        Symbolizer { objects, symbols }
    }

    fn module_of(&self, address: u64) -> Option<&'a Object> {
        if address == 0 {
            return None;
        }
        let i = self.objects.partition_point(|o| o.load_address <= address);
        // Walk down from the closest object below: one with a known size must
        // contain the address; one without a size is taken as is.
        self.objects[..i]
            .iter()
            .rev()
            .copied()
            .find(|o| o.size == 0 || address - o.load_address < o.size)
    }

    pub fn info(&self, frame: &'a Frame) -> FrameInfo<'a> {
        let symbol: Option<&'a Symbol> = frame
            .symbol
            .as_ref()
            .filter(|s| !s.function.is_empty() || !s.file.is_empty())
            .or_else(|| self.symbols.get(&frame.address));
        let module = self.module_of(frame.address);
        FrameInfo {
            address: frame.address,
            function: symbol.and_then(|s| non_empty(&s.function)),
            file: symbol.and_then(|s| non_empty(&s.file)),
            line: symbol.map_or(0, |s| s.line),
            module: module.map(|o| o.path.as_str()),
            offset: module.map_or(0, |o| frame.address - o.load_address),
        }
    }
}

impl FrameInfo<'_> {
    /// `0x401a2b in main src/app.c:12 (/usr/bin/app+0x1a2b)`; parts that are
    /// unknown are left out (`0x401a2b (/usr/bin/app+0x1a2b)`, `0x401a2b`).
    pub fn text(&self) -> String {
        let mut s = String::new();
        if self.address != 0 || (self.function.is_none() && self.file.is_none()) {
            s.push_str(&format!("{:#x}", self.address));
        }
        if let Some(f) = self.function {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str("in ");
            s.push_str(f);
        }
        if let Some(file) = self.file {
            s.push(' ');
            s.push_str(file);
            if self.line != 0 {
                s.push_str(&format!(":{}", self.line));
            }
        }
        if let Some(m) = self.module {
            s.push_str(&format!(" ({m}+{:#x})", self.offset));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(path: &str, load: u64, size: u64) -> Object {
        Object {
            path: path.into(),
            load_address: load,
            size,
        }
    }

    #[test]
    fn frame_texts() {
        let objects = vec![
            obj("/usr/lib/libc.so.6", 0x7f00_0000_0000, 0x20_0000),
            obj("/usr/bin/app", 0x5555_0000_0000, 0x1000),
            obj("/nowhere", 0, 0),
        ];
        let mut symbols = FxHashMap::default();
        symbols.insert(
            0x5555_0000_0a2b,
            Symbol {
                function: "main".into(),
                file: "src/app.c".into(),
                line: 12,
            },
        );
        let s = Symbolizer::new(&objects, &symbols);
        let f = |address| Frame {
            address,
            symbol: None,
        };
        let main = f(0x5555_0000_0a2b);
        assert_eq!(
            s.info(&main).text(),
            "0x555500000a2b in main src/app.c:12 (/usr/bin/app+0xa2b)"
        );
        let libc = f(0x7f00_0000_1234);
        assert_eq!(
            s.info(&libc).text(),
            "0x7f0000001234 (/usr/lib/libc.so.6+0x1234)"
        );
        // Past the end of the app's mapping and below libc: no module.
        let stray = f(0x5555_0000_2000);
        assert_eq!(s.info(&stray).text(), "0x555500002000");
        // A symbol-only frame (dumpalloc PCAL).
        let pcal = Frame {
            address: 0,
            symbol: Some(Symbol {
                function: "handler".into(),
                file: "x.py".into(),
                line: 3,
            }),
        };
        assert_eq!(s.info(&pcal).text(), "in handler x.py:3");
    }
}

/// A frame in the JSON outputs (`tracer leaks --json`, `tracer report
/// --json`): the interface's `function`, `file`, `line`, `module`, plus the
/// address and the offset in the module. Unknown strings are empty, an
/// unknown line is 0.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FrameJson {
    pub address: String,
    pub function: String,
    pub file: String,
    pub line: u32,
    pub module: String,
    pub offset: String,
}

impl From<&FrameInfo<'_>> for FrameJson {
    fn from(f: &FrameInfo<'_>) -> FrameJson {
        FrameJson {
            address: format!("{:#x}", f.address),
            function: f.function.unwrap_or_default().to_string(),
            file: f.file.unwrap_or_default().to_string(),
            line: f.line,
            module: f.module.unwrap_or_default().to_string(),
            offset: format!("{:#x}", f.offset),
        }
    }
}

impl<'a> Symbolizer<'a> {
    /// Every frame of a stack, innermost first.
    pub fn stack(&self, frames: &'a [Frame]) -> Vec<FrameInfo<'a>> {
        frames.iter().map(|f| self.info(f)).collect()
    }
}
