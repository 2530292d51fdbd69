//! Symbolization of a known 10-deep call chain, and program markers.

use tracer_tests::*;

/// chain10.c: the allocation's stack comes back f10, f9, …, f1, main, each
/// frame in chain10.c at the line its function is defined on (each function
/// is one line).
#[test]
fn chain10_symbolized_in_order() {
    let cmd = Cmd::new(example("chain10"));
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "chain10");
    let trace = single_trace(&run);
    assert_trace_figures(&trace, Figures::new(1, 0, 4242, 4242, 1), "chain10");
    let source = std::fs::read_to_string(repo_root().join("examples/chain10.c")).unwrap();
    let line_of = |needle: &str| -> u32 {
        source
            .lines()
            .position(|l| l.contains(needle))
            .map(|i| i as u32 + 1)
            .unwrap_or_else(|| panic!("{needle} not in chain10.c"))
    };
    let mut expected: Vec<(String, u32)> = (1..=10)
        .rev()
        .map(|i| {
            (
                format!("f{i}"),
                line_of(&format!("NOINLINE void *f{i}(void)")),
            )
        })
        .collect();
    expected.push(("main".to_string(), line_of("keep = f1();")));

    let (_, stack) = trace.allocs[0];
    let frames = trace.symbolized(stack);
    assert!(frames.len() >= 11, "at least 11 frames, got {frames:?}");
    let got: Vec<(String, String, u32)> = frames[..11]
        .iter()
        .map(|(addr, s)| match s {
            Some(s) => (s.function.clone(), s.file.clone(), s.line),
            None => (format!("unresolved {addr:#x}"), String::new(), 0),
        })
        .collect();
    for (i, ((want_fn, want_line), (fun, file, line))) in expected.iter().zip(&got).enumerate() {
        assert_eq!(fun, want_fn, "frame {i}: function; stack {got:?}");
        assert!(
            file.ends_with("chain10.c"),
            "frame {i}: file {file:?}; stack {got:?}"
        );
        assert_eq!(line, want_line, "frame {i} ({fun}): line; stack {got:?}");
    }
}

/// marker.c finds tracer_marker with dlsym(RTLD_DEFAULT): its two markers
/// bracket its one allocation, in order.
#[test]
fn markers_recorded_in_order() {
    let cmd = Cmd::new(example("marker"));
    let plain = cmd.run_plain();
    let run = run_traced(&cmd, &[]);
    assert_same_behaviour(&plain, &run, "marker");
    let trace = single_trace(&run);
    assert_trace_figures(&trace, Figures::new(1, 0, 77, 77, 1), "marker");
    assert_eq!(
        trace.markers,
        vec!["phase-start".to_string(), "phase-end".to_string()]
    );
    assert_eq!(
        trace.timeline,
        vec![
            Err("phase-start".to_string()),
            Ok(77),
            Err("phase-end".to_string())
        ],
        "marker, allocation, marker"
    );
}
