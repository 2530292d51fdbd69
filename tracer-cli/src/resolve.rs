//! Function, file and line for the frames of the aggregate outputs (MALT
//! JSON, callgrind, folded stacks and flame graphs), from the `symbolizer`
//! crate first and from the trace's own symbols second.
//!
//! Why this order: the symbolizer reads the DWARF of the binaries the trace
//! names (inlined calls, demangled names, the call's own line), and gives the
//! same answer whichever format recorded the trace; the symbols a trace
//! carries (frame symbols, `AddressSymbol` records resolved by the recorder
//! at exit) are what is left when the binaries are not on this machine.
//!
//! The aggregate writers look a frame up in this order: the frame's symbol,
//! then the trace's `AddressSymbol` for its address, then their
//! [`Resolver`]. To put the symbolizer first, [`FrameNames::pass`] takes the
//! trace's symbols out of the records on their way to the writer (keeping
//! them aside) and the resolver answers for every address:
//!
//! 1. the symbolizer's innermost frame when it has a source file (DWARF);
//! 2. else the trace's own symbol when it names a function;
//! 3. else the symbolizer's function name alone (symbol table);
//! 4. else whatever the trace had, or nothing (the writers print `0xADDR`).
//!
//! Frames without an address (interpreter frames a format stores by name)
//! keep their symbol untouched. Binaries are opened lazily, at the writer's
//! `finish`, once every `Object` record of the trace has been seen: the
//! preload library reports objects it scans at exit after the stacks that
//! use them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use format_writers::aggregate::Resolver;
use format_writers::{Object, Record, Symbol};
use symbolizer::{Options, Symbolizer};

#[derive(Default)]
struct Names {
    objects: Vec<Object>,
    executable: String,
    /// The trace's own symbols by address.
    trace: HashMap<u64, Symbol>,
    symbolizer: Option<Symbolizer>,
}

impl Names {
    fn look_up_binaries(&mut self, address: u64) -> Option<Symbol> {
        if self.objects.is_empty() {
            return None;
        }
        let (objects, executable) = (&self.objects, &self.executable);
        let symbolizer = self
            .symbolizer
            .get_or_insert_with(|| Symbolizer::new(objects, executable, Options::default()));
        // Every frame of a recorded stack is a return address.
        symbolizer
            .symbolize(address, true)
            .symbols()
            .into_iter()
            .next()
    }

    fn name(&mut self, address: u64) -> Option<Symbol> {
        let found = self.look_up_binaries(address);
        let trace = self.trace.get(&address);
        match (found, trace) {
            (Some(s), _) if !s.file.is_empty() && !s.function.is_empty() => Some(s),
            (_, Some(t)) if !t.function.is_empty() => Some(t.clone()),
            (Some(s), _) if !s.function.is_empty() => Some(s),
            (_, t) => t.cloned(),
        }
    }
}

/// Collects what naming frames needs from a record stream and hands a
/// [`Resolver`] to a writer.
#[derive(Clone, Default)]
pub struct FrameNames {
    shared: Arc<Mutex<Names>>,
}

impl FrameNames {
    pub fn new() -> FrameNames {
        FrameNames::default()
    }

    /// Looks at a record on its way to the writer: keeps the objects and the
    /// executable, moves the trace's symbols aside. Returns false when the
    /// record is not to be written (an `AddressSymbol`, now held here).
    /// Events pass without taking the lock.
    pub fn pass(&self, record: &mut Record) -> bool {
        if let Record::Event(_) = record {
            return true;
        }
        let mut names = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match record {
            Record::Process(p) => names.executable = p.executable.clone(),
            Record::Object(o) => names.objects.push(o.clone()),
            Record::AddressSymbol { address, symbol } => {
                names.trace.insert(*address, symbol.clone());
                return false;
            }
            Record::Stack(s) => {
                for f in s.frames.iter_mut().filter(|f| f.address != 0) {
                    if let Some(sym) = f.symbol.take() {
                        names.trace.entry(f.address).or_insert(sym);
                    }
                }
            }
            _ => {}
        }
        true
    }

    /// The resolver to give the writer.
    pub fn resolver(&self) -> Resolver {
        let shared = Arc::clone(&self.shared);
        Box::new(move |address| {
            shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .name(address)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Frame, Stack};

    fn sym(function: &str, file: &str, line: u32) -> Symbol {
        Symbol {
            function: function.into(),
            file: file.into(),
            line,
        }
    }

    #[test]
    fn trace_symbols_are_moved_aside_and_served_when_binaries_are_missing() {
        let names = FrameNames::new();
        let mut obj = Record::Object(Object {
            path: "/nonexistent/app".into(),
            load_address: 0x40_0000,
            size: 0x1000,
        });
        assert!(names.pass(&mut obj));
        let mut stack = Record::Stack(Stack {
            id: 0,
            frames: vec![
                Frame {
                    address: 0x40_0100,
                    symbol: Some(sym("inner", "a.c", 3)),
                },
                Frame {
                    address: 0,
                    symbol: Some(sym("py_handler", "x.py", 9)),
                },
                Frame {
                    address: 0x40_0200,
                    symbol: None,
                },
            ],
        });
        assert!(names.pass(&mut stack));
        let Record::Stack(s) = &stack else {
            unreachable!()
        };
        // Moved aside, except the address-less frame's.
        assert_eq!(s.frames[0].symbol, None);
        assert_eq!(s.frames[1].symbol, Some(sym("py_handler", "x.py", 9)));
        let mut late = Record::AddressSymbol {
            address: 0x40_0200,
            symbol: sym("outer", "b.c", 7),
        };
        assert!(!names.pass(&mut late));
        let resolve = names.resolver();
        // The file does not exist: the trace's symbols answer.
        assert_eq!(resolve(0x40_0100), Some(sym("inner", "a.c", 3)));
        assert_eq!(resolve(0x40_0200), Some(sym("outer", "b.c", 7)));
        assert_eq!(resolve(0x40_0300), None);
    }
}
