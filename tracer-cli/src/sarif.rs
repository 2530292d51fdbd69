//! `tracer leaks --sarif`: the leak report as SARIF 2.1.0, the format code
//! hosts (GitHub code scanning, GitLab, Azure DevOps) read to annotate lines.
//!
//! One run, tool `tracer`, four rules (one per kind: `definite-leak`,
//! `indirect-leak`, `possible-leak`, `reachable-block`) and one result per
//! reported leak group: its message is the LeakSanitizer heading plus the
//! function that allocated, its location the first frame that has a source
//! file (the leaking line as the host shows it), its `stacks` the whole
//! allocation stack (inlined frames included). File names become URIs:
//! relative to `--source-root` (with `uriBaseId` `SRCROOT`) when they lie
//! under it, left relative when the debug info gave a relative name, else
//! absolute `file://` URIs. A `partialFingerprints` entry hashes the kind and
//! the function names of the stack (not addresses, which move from run to
//! run), so a host recognises the same leak across runs.

use std::path::Path;

use serde_json::{json, Value};

use crate::analysis::Analysis;
use crate::leaks::{heading, title, LeaksJson};
use crate::symbolize::Line;
use format_writers::LeakKind;

/// The schema URI of SARIF 2.1.0 (OASIS, errata 01).
pub const SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The rule id of a kind.
pub fn rule_id(kind: LeakKind) -> &'static str {
    match kind {
        LeakKind::Definite => "definite-leak",
        LeakKind::Indirect => "indirect-leak",
        LeakKind::Possible => "possible-leak",
        LeakKind::Reachable => "reachable-block",
    }
}

fn level(kind: LeakKind) -> &'static str {
    match kind {
        LeakKind::Definite => "error",
        LeakKind::Indirect | LeakKind::Possible => "warning",
        LeakKind::Reachable => "note",
    }
}

fn description(kind: LeakKind) -> &'static str {
    match kind {
        LeakKind::Definite => {
            "Memory leak: a block still allocated at exit that no pointer anywhere refers to."
        }
        LeakKind::Indirect => {
            "Indirect memory leak: a block reachable only from blocks that leaked."
        }
        LeakKind::Possible => {
            "Possible memory leak: a block reachable only through a pointer into its middle."
        }
        LeakKind::Reachable => {
            "A block still allocated at exit that a global, a stack or thread-local storage still points to."
        }
    }
}

/// Percent-encodes what a URI path may not hold as is.
fn encode_path(p: &str) -> String {
    let mut s = String::with_capacity(p.len());
    for b in p.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'/'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'+'
            | b'='
            | b','
            | b'@'
            | b':' => s.push(b as char),
            _ => s.push_str(&format!("%{b:02X}")),
        }
    }
    s
}

/// The artifact location of a source file name.
pub fn artifact(file: &str, root: Option<&Path>) -> Value {
    if let Some(root) = root {
        if let Ok(rel) = Path::new(file).strip_prefix(root) {
            return json!({
                "uri": encode_path(&rel.to_string_lossy()),
                "uriBaseId": "SRCROOT",
            });
        }
    }
    if file.starts_with('/') {
        json!({ "uri": format!("file://{}", encode_path(file)) })
    } else {
        json!({ "uri": encode_path(file) })
    }
}

fn physical(line: &Line, root: Option<&Path>) -> Option<Value> {
    let file = line.file.as_deref()?;
    let mut p = json!({ "artifactLocation": artifact(file, root) });
    if line.line > 0 {
        p["region"] = json!({ "startLine": line.line });
    }
    Some(p)
}

/// 64-bit FNV-1a, as hex: stable across runs and platforms.
fn fingerprint(kind: LeakKind, lines: &[Line]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |s: &str| {
        for b in s.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(kind.name());
    for l in lines {
        match (&l.function, &l.module) {
            (Some(f), _) => eat(f),
            (None, Some(m)) => eat(&format!("{m}+{:#x}", l.offset)),
            (None, None) => eat("?"),
        }
    }
    format!("{h:016x}")
}

/// One result per reported group.
fn results(a: &Analysis, r: &LeaksJson, root: Option<&Path>, out: &mut Vec<Value>) {
    let who = match &a.process {
        Some(p) if p.pid != 0 => format!(" (pid {} {})", p.pid, p.executable),
        _ => String::new(),
    };
    for (leak, lines) in r.leaks.iter().zip(&r.lines) {
        let kind = LeakKind::from_name(leak.kind).unwrap_or(LeakKind::Definite);
        let at = lines
            .iter()
            .find(|l| l.file.is_some() && l.line > 0)
            .or_else(|| lines.iter().find(|l| l.file.is_some()));
        let from = lines
            .iter()
            .find_map(|l| l.function.clone())
            .map(|f| format!(" allocated from {f}"))
            .unwrap_or_default();
        let mut result = json!({
            "ruleId": rule_id(kind),
            "ruleIndex": kind.code(),
            "level": level(kind),
            "message": { "text": format!(
                "{}{from}{who}",
                title(kind, leak.bytes, leak.blocks)
            )},
            "partialFingerprints": { "leakStack/v1": fingerprint(kind, lines) },
            "properties": { "bytes": leak.bytes, "blocks": leak.blocks },
        });
        if let Some(line) = at {
            let mut loc = json!({ "physicalLocation": physical(line, root) });
            if let Some(f) = &line.function {
                loc["logicalLocations"] = json!([{ "fullyQualifiedName": f, "kind": "function" }]);
            }
            result["locations"] = json!([loc]);
        }
        let frames: Vec<Value> = lines
            .iter()
            .map(|l| {
                let mut loc = json!({ "message": { "text": l.text() } });
                if let Some(p) = physical(l, root) {
                    loc["physicalLocation"] = p;
                }
                let mut f = json!({ "location": loc });
                if let Some(m) = &l.module {
                    f["module"] = json!(m);
                }
                f
            })
            .collect();
        if !frames.is_empty() {
            result["stacks"] = json!([{
                "message": { "text": "allocation stack" },
                "frames": frames,
            }]);
        }
        out.push(result);
    }
}

/// The SARIF document for the reports of one or more processes.
pub fn document(reports: &[(&Analysis, &LeaksJson)], root: Option<&Path>) -> Value {
    let rules: Vec<Value> = LeakKind::ALL
        .iter()
        .map(|&k| {
            json!({
                "id": rule_id(k),
                "name": heading(k).replace(' ', ""),
                "shortDescription": { "text": heading(k) },
                "fullDescription": { "text": description(k) },
                "defaultConfiguration": { "level": level(k) },
            })
        })
        .collect();
    let mut res = Vec::new();
    for (a, r) in reports {
        results(a, r, root, &mut res);
    }
    let mut run = json!({
        "tool": { "driver": {
            "name": "tracer",
            "version": env!("CARGO_PKG_VERSION"),
            "rules": rules,
        }},
        "results": res,
    });
    if let Some(root) = root {
        let mut uri = format!("file://{}", encode_path(&root.to_string_lossy()));
        if !uri.ends_with('/') {
            uri.push('/');
        }
        run["originalUriBaseIds"] = json!({ "SRCROOT": { "uri": uri } });
    }
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [run],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        let root = Path::new("/src/proj");
        assert_eq!(
            artifact("/src/proj/lib/a b.c", Some(root)),
            json!({"uri": "lib/a%20b.c", "uriBaseId": "SRCROOT"})
        );
        assert_eq!(
            artifact("/usr/include/x.h", Some(root)),
            json!({"uri": "file:///usr/include/x.h"})
        );
        assert_eq!(artifact("leak.c", None), json!({"uri": "leak.c"}));
        // Component-wise: /src/project is not under /src/proj.
        assert_eq!(
            artifact("/src/project/a.c", Some(root)),
            json!({"uri": "file:///src/project/a.c"})
        );
    }

    #[test]
    fn fingerprints_ignore_addresses() {
        let l = |address, function: &str| Line {
            address,
            function: Some(function.into()),
            ..Line::default()
        };
        let a = fingerprint(LeakKind::Definite, &[l(0x1000, "f"), l(0x2000, "main")]);
        let b = fingerprint(LeakKind::Definite, &[l(0x5000, "f"), l(0x6000, "main")]);
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint(LeakKind::Indirect, &[l(0x1000, "f"), l(0x2000, "main")])
        );
        assert_ne!(a, fingerprint(LeakKind::Definite, &[l(0x1000, "fmain")]));
    }
}
