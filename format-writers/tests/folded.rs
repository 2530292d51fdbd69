//! Folded stacks and the SVG flame graph of the shared hand-made trace.

mod malt_common;

use format_writers::folded::{self, Metric};
use malt_common::{records, write_with};

fn folded(metric: Metric) -> String {
    String::from_utf8(write_with(|b| folded::Writer::new(b, metric), &records())).unwrap()
}

/// Per stack (see malt_common): A = main;mid;leaf with 4 allocations, 1000
/// bytes, 400 live at exit, 500 live at the peak; B = main;other with 2,
/// 120, 50, 50. Lines sorted, outermost frame first.
#[test]
fn folded_lines_per_metric() {
    assert_eq!(
        folded(Metric::Bytes),
        "main;mid;leaf 1000\nmain;other 120\n"
    );
    assert_eq!(
        folded(Metric::Allocations),
        "main;mid;leaf 4\nmain;other 2\n"
    );
    assert_eq!(folded(Metric::Leaked), "main;mid;leaf 400\nmain;other 50\n");
    assert_eq!(folded(Metric::Peak), "main;mid;leaf 500\nmain;other 50\n");
    for m in ["bytes", "allocations", "leaked", "peak"] {
        assert_eq!(Metric::from_name(m).unwrap().name(), m);
    }
    assert_eq!(Metric::from_name("cycles"), None);
}

/// Unnamed frames are `0xADDR`; a `;` inside a name cannot split a frame;
/// stacks with the same names merge; zero-valued chains are left out.
#[test]
fn names_and_merging() {
    use format_writers::*;
    let frame = |address: u64, name: Option<&str>| Frame {
        address,
        symbol: name.map(|n| Symbol {
            function: n.into(),
            ..Symbol::default()
        }),
    };
    let alloc = |address, size, stack| {
        Record::Event(Event::Alloc(Alloc {
            time_ns: 1,
            thread: 1,
            address,
            size,
            stack,
        }))
    };
    let recs = vec![
        Record::Stack(Stack {
            id: 0,
            frames: vec![frame(0xabc, None), frame(0x1, Some("ns;main"))],
        }),
        // Another address inside the same function: same chain of names.
        Record::Stack(Stack {
            id: 1,
            frames: vec![frame(0xabc, None), frame(0x2, Some("ns;main"))],
        }),
        Record::Stack(Stack {
            id: 2,
            frames: vec![],
        }),
        alloc(0x10, 5, 0),
        alloc(0x20, 7, 1),
        alloc(0x30, 0, 2),
    ];
    let text =
        String::from_utf8(write_with(|b| folded::Writer::new(b, Metric::Bytes), &recs)).unwrap();
    assert_eq!(text, "ns:main;0xabc 12\n");
    let text = String::from_utf8(write_with(
        |b| folded::Writer::new(b, Metric::Allocations),
        &recs,
    ))
    .unwrap();
    assert_eq!(text, "[no stack] 1\nns:main;0xabc 2\n");
}

#[test]
fn svg_has_the_chain_and_its_byte_totals() {
    let svg = String::from_utf8(write_with(
        |b| folded::Writer::svg(b, Metric::Bytes, "heap of app"),
        &records(),
    ))
    .unwrap();
    assert!(svg.starts_with("<?xml"), "{}", &svg[..100.min(svg.len())]);
    assert!(svg.contains("heap of app"));
    // inferno's frame titles: "name (N bytes, P%)"; main holds A + B.
    for t in [
        "main (1,120 bytes, 100.00%)",
        "mid (1,000 bytes, 89.29%)",
        "leaf (1,000 bytes, 89.29%)",
        "other (120 bytes, 10.71%)",
    ] {
        assert!(svg.contains(t), "missing {t:?}");
    }
}
