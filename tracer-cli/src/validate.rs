//! `tracer validate`: reads every record (each reader checks its format's
//! rules and reports the first violation with its byte offset), then checks
//! the rules of the model that span records:
//!
//! - an event must not name a stack no `Stack` record defined before it
//!   (an error: exit 1, `tracer: FILE: record N: ...`);
//! - a free of an address never allocated in the trace is *not* an error:
//!   blocks allocated before tracing started are freed all the time. It is
//!   counted and reported as a note on stderr, as are allocations at an
//!   address still live (a lost free) and frees of address 0.
//!
//! On success one summary line goes to stdout.

use std::io::Write;
use std::path::Path;

use crate::analysis::Analysis;
use crate::clock;
use crate::failure::Failure;
use crate::input::Trace;

/// Runs the verb.
pub fn execute(path: &Path, out: &mut dyn Write) -> Result<i32, Failure> {
    let mut trace = Trace::open(path)?;
    let mut a = Analysis::new();
    while let Some(r) = trace.next_record()? {
        a.add(r);
    }
    model_checks(path, &a)?;
    writeln!(out, "{}", summary(path, trace.format.name(), &a))?;
    out.flush()?;
    for note in notes(&a) {
        eprintln!("tracer: {}: note: {note}", path.display());
    }
    Ok(0)
}

/// The rules of the model that span records.
pub fn model_checks(path: &Path, a: &Analysis) -> Result<(), Failure> {
    if let Some((record, stack)) = a.first_undefined_stack {
        return Err(Failure::Model {
            path: path.to_path_buf(),
            record,
            message: format!(
                "expected a stack record defining id {stack} before the first event naming it, \
                 found an allocation naming it ({} allocations name undefined stacks)",
                a.heap.undefined_stack_allocs
            ),
        });
    }
    Ok(())
}

/// The one-line summary.
pub fn summary(path: &Path, format: &str, a: &Analysis) -> String {
    format!(
        "{}: valid {format} trace: {} records, {} allocations, {} frees, {} stacks, {} objects, \
         {} system calls, {} markers, {}",
        path.display(),
        a.records,
        a.heap.allocations,
        a.heap.frees,
        a.stacks.len(),
        a.objects.len(),
        a.syscall_count,
        a.markers,
        clock::seconds(a.duration_ns()),
    )
}

/// Things worth knowing that do not make the trace invalid.
pub fn notes(a: &Analysis) -> Vec<String> {
    let h = &a.heap;
    let mut v = Vec::new();
    if h.frees_unknown > 0 {
        v.push(format!(
            "{} frees of addresses not allocated in the trace (blocks allocated before tracing \
             started, or freed twice)",
            h.frees_unknown
        ));
    }
    if h.reused_live_addresses > 0 {
        v.push(format!(
            "{} allocations returned an address that was still live (a free is missing)",
            h.reused_live_addresses
        ));
    }
    if h.allocs_without_address + h.frees_without_address > 0 {
        v.push(format!(
            "{} allocations and {} frees record no address (0): their blocks cannot be matched",
            h.allocs_without_address, h.frees_without_address
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use format_writers::{Alloc, Event, Free, Record, Stack};

    fn alloc(stack: u64, address: u64) -> Record {
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1,
            thread: 1,
            address,
            size: 8,
            stack,
        }))
    }

    #[test]
    fn an_allocation_naming_an_undefined_stack_is_an_error() {
        let mut a = Analysis::new();
        a.add(Record::Stack(Stack {
            id: 0,
            frames: vec![],
        }));
        a.add(alloc(0, 0x10));
        a.add(alloc(9, 0x20));
        a.add(alloc(9, 0x30));
        let e = model_checks(Path::new("t.mlyze"), &a).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tracer: t.mlyze: record 3: expected a stack record defining id 9 before the first \
             event naming it, found an allocation naming it (2 allocations name undefined stacks)"
        );
    }

    #[test]
    fn a_free_of_an_unknown_address_is_a_note() {
        let mut a = Analysis::new();
        a.add(Record::Event(Event::Free(Free {
            time_ns: 1,
            thread: 1,
            address: 0x99,
        })));
        assert!(model_checks(Path::new("t"), &a).is_ok());
        let notes = notes(&a);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("1 frees of addresses not allocated in the trace"));
        assert!(summary(Path::new("t"), "mlyze", &a)
            .starts_with("t: valid mlyze trace: 1 records, 0 allocations, 1 frees,"));
    }
}
