//! Function, file and line for the frames of the aggregate outputs (MALT
//! JSON, callgrind, folded stacks and flame graphs), named exactly as
//! `report` and `leaks` name them: through [`crate::symbolize::Resolver`]
//! (the debug info of the traced binaries first, then the trace's own
//! symbols), with the same `--sysroot`, `--path-map`, `--debug-dir` and
//! `--no-debug-info` options.
//!
//! The aggregate writers take a [`format_writers::aggregate::Resolver`]: a
//! `'static` closure they call at `finish` for each address, after looking at
//! the frame's own symbol and at the trace's `AddressSymbol` records. To put
//! the debug info first, [`FrameNames::pass`] takes the trace's symbols out
//! of the records on their way to the writer and keeps them, with every
//! object and every frame address. On the writer's first question, every
//! collected address is resolved in one go (in address order, each binary
//! opened once) into a table the closure answers from. That happens at
//! `finish`, after the whole trace: the preload library reports objects it
//! scans at exit after the stacks that use them.
//!
//! One name per address: an address inside inlined code is named after its
//! innermost inlined function (what `addr2line` prints first, and what the
//! recorder itself stores). Frames without an address (interpreter frames a
//! format stores by name) keep their symbol untouched.

use std::sync::{Arc, Mutex};

use format_writers::aggregate::Resolver;
use format_writers::{Frame, Object, Record, Symbol};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::symbolize::{self, SymbolOptions};

#[derive(Default)]
struct Names {
    options: SymbolOptions,
    objects: Vec<Object>,
    executable: String,
    /// The trace's own symbols by address.
    trace: FxHashMap<u64, Symbol>,
    /// Every frame address met in a stack.
    addresses: FxHashSet<u64>,
    /// Filled on the first question.
    resolved: Option<FxHashMap<u64, Symbol>>,
}

impl Names {
    fn resolve_all(&self) -> FxHashMap<u64, Symbol> {
        let mut r = symbolize::Resolver::from_parts(
            &self.objects,
            &self.trace,
            &self.executable,
            &self.options,
        );
        let mut addresses: Vec<u64> = self.addresses.iter().copied().collect();
        addresses.sort_unstable();
        let mut table = FxHashMap::default();
        for address in addresses {
            let frame = Frame {
                address,
                symbol: None,
            };
            let Some(line) = r.frame(&frame).into_iter().next() else {
                continue;
            };
            if line.function.is_none() && line.file.is_none() {
                continue;
            }
            table.insert(
                address,
                Symbol {
                    function: line.function.unwrap_or_default(),
                    file: line.file.unwrap_or_default(),
                    line: line.line,
                },
            );
        }
        table
    }

    fn name(&mut self, address: u64) -> Option<Symbol> {
        if self.resolved.is_none() {
            self.resolved = Some(self.resolve_all());
        }
        let table = self.resolved.as_ref()?;
        table
            .get(&address)
            .or_else(|| self.trace.get(&address))
            .cloned()
    }
}

/// Collects what naming frames needs from a record stream and hands a
/// [`Resolver`] to a writer.
#[derive(Clone, Default)]
pub struct FrameNames {
    shared: Arc<Mutex<Names>>,
}

impl FrameNames {
    pub fn new(options: SymbolOptions) -> FrameNames {
        FrameNames {
            shared: Arc::new(Mutex::new(Names {
                options,
                ..Names::default()
            })),
        }
    }

    /// Looks at a record on its way to the writer: keeps the objects, the
    /// executable and the frame addresses, moves the trace's symbols aside.
    /// Returns false when the record is not to be written (an
    /// `AddressSymbol`, now held here). Events pass without taking the lock.
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
                    names.addresses.insert(f.address);
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
    use format_writers::Stack;

    fn sym(function: &str, file: &str, line: u32) -> Symbol {
        Symbol {
            function: function.into(),
            file: file.into(),
            line,
        }
    }

    #[test]
    fn trace_symbols_are_moved_aside_and_served_when_binaries_are_missing() {
        let names = FrameNames::new(SymbolOptions::default());
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
                Frame {
                    address: 0x40_0300,
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
