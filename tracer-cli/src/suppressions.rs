//! LeakSanitizer-style suppression files.
//!
//! One `leak:PATTERN` per line; blank lines and lines starting with `#` are
//! ignored; surrounding white space is trimmed. A pattern matches a string
//! when it occurs anywhere in it, `*` standing for any run of characters; as in
//! the sanitizers, a leading `^` anchors it at the start and a trailing `$` at
//! the end. A leak is suppressed when a pattern matches the function name,
//! the source file or the module path of any frame of its allocation stack.
//! Any other suppression type (`race:`, `thread:`, …) is an error, as it is
//! for LeakSanitizer, so a typo does not silently suppress nothing.
//!
//! Rules come from three places, tried in this order: the `--suppressions`
//! file, the file named by `TRACER_SUPPRESSIONS`, and the built-in default
//! list ([`DEFAULTS`], unless `--no-default-suppressions`). The first rule
//! that matches a leak group takes it, and counts what it hid.

use std::ffi::OsString;
use std::path::Path;

use crate::failure::Failure;
use crate::symbolize::Line;

/// The built-in list: one-off allocations of the C and C++ runtimes that are
/// not the program's leaks. docs/ci.md says why each is here.
pub const DEFAULTS: &str = include_str!("default_suppressions.txt");

/// Where the default rules say they come from.
pub const DEFAULT_SOURCE: &str = "default";

/// One `leak:` line and how much it suppressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    pub pattern: String,
    /// The file it was read from, or `default` for the built-in list.
    pub source: String,
    /// Leak groups (distinct stacks) it suppressed.
    pub hits: u64,
    pub bytes: u64,
    pub blocks: u64,
}

/// A parsed suppression file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suppressions {
    pub rules: Vec<Suppression>,
}

impl Suppressions {
    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Suppressions, Failure> {
        let text = std::fs::read(path).map_err(|e| Failure::io(path, e))?;
        let text = String::from_utf8_lossy(&text);
        let mut s = Suppressions::parse(&text).map_err(|(line, found)| {
            Failure::Message(format!(
                "{}: line {line}: expected leak:PATTERN, found {found:?}",
                path.display()
            ))
        })?;
        for r in &mut s.rules {
            r.source = path.display().to_string();
        }
        Ok(s)
    }

    /// The built-in default list.
    pub fn defaults() -> Suppressions {
        let mut s = Suppressions::parse(DEFAULTS).expect("the built-in list parses");
        for r in &mut s.rules {
            r.source = DEFAULT_SOURCE.to_string();
        }
        s
    }

    /// The rules in force, in the order they are tried: `file`
    /// (`--suppressions`), then the file `env` names (`TRACER_SUPPRESSIONS`,
    /// ignored when empty), then the defaults (unless `no_defaults`). The
    /// user's own rules come first, so they get the credit for what they hide.
    pub fn gather(
        file: Option<&Path>,
        env: Option<OsString>,
        no_defaults: bool,
    ) -> Result<Suppressions, Failure> {
        let mut all = match file {
            Some(p) => Suppressions::load(p)?,
            None => Suppressions::default(),
        };
        if let Some(p) = env.filter(|v| !v.is_empty()) {
            let p = std::path::PathBuf::from(p);
            let s = Suppressions::load(&p).map_err(|f| match f {
                Failure::Message(m) => Failure::Message(format!("TRACER_SUPPRESSIONS: {m}")),
                Failure::Io { error, .. } => Failure::Message(format!(
                    "TRACER_SUPPRESSIONS={}: {}",
                    p.display(),
                    crate::failure::io_text(&error)
                )),
                other => other,
            })?;
            all.rules.extend(s.rules);
        }
        if !no_defaults {
            all.rules.extend(Suppressions::defaults().rules);
        }
        Ok(all)
    }

    /// Parses suppression text; on error, the 1-based line and its text.
    pub fn parse(text: &str) -> Result<Suppressions, (usize, String)> {
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once(':') {
                Some((kind, pattern)) if kind.trim() == "leak" && !pattern.trim().is_empty() => {
                    rules.push(Suppression {
                        pattern: pattern.trim().to_string(),
                        source: String::new(),
                        hits: 0,
                        bytes: 0,
                        blocks: 0,
                    })
                }
                _ => return Err((i + 1, line.to_string())),
            }
        }
        Ok(Suppressions { rules })
    }

    /// The index of the first rule matching any frame (inlined ones
    /// included), if any.
    pub fn matching(&self, frames: &[Line]) -> Option<usize> {
        self.rules.iter().position(|rule| {
            frames.iter().any(|f| {
                [&f.function, &f.file, &f.module]
                    .into_iter()
                    .flatten()
                    .any(|s| pattern_matches(&rule.pattern, s))
            })
        })
    }

    /// Records that rule `i` suppressed a group.
    pub fn count(&mut self, i: usize, bytes: u64, blocks: u64) {
        if let Some(r) = self.rules.get_mut(i) {
            r.hits += 1;
            r.bytes = r.bytes.saturating_add(bytes);
            r.blocks = r.blocks.saturating_add(blocks);
        }
    }
}

/// Sanitizer template matching: substring search with `*` wildcards, `^` and
/// `$` anchors.
pub fn pattern_matches(pattern: &str, text: &str) -> bool {
    if pattern.is_empty() || text.is_empty() {
        return false;
    }
    let (start_anchor, pattern) = match pattern.strip_prefix('^') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let (end_anchor, pattern) = match pattern.strip_suffix('$') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let pieces: Vec<&str> = pattern.split('*').collect();
    let last = pieces.len() - 1;
    let mut rest = text;
    for (i, piece) in pieces.iter().enumerate() {
        if i == last && end_anchor {
            // The last piece must end the text, after what is matched so far.
            if !rest.ends_with(piece) {
                return false;
            }
            if i == 0 && start_anchor && rest.len() != piece.len() {
                return false;
            }
            return true;
        }
        if piece.is_empty() {
            continue;
        }
        if i == 0 && start_anchor {
            match rest.strip_prefix(piece) {
                Some(r) => rest = r,
                None => return false,
            }
            continue;
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_lines_comments_and_errors() {
        let s = Suppressions::parse("# third party\n\n  leak:libfoo.so \nleak:*init_*\n").unwrap();
        let pats: Vec<&str> = s.rules.iter().map(|r| r.pattern.as_str()).collect();
        assert_eq!(pats, ["libfoo.so", "*init_*"]);
        assert_eq!(
            Suppressions::parse("leak:a\nrace:b\n"),
            Err((2, "race:b".to_string()))
        );
        assert_eq!(
            Suppressions::parse("leak:\n"),
            Err((1, "leak:".to_string()))
        );
    }

    #[test]
    fn the_default_list_parses_and_every_rule_is_documented() {
        let d = Suppressions::defaults();
        assert!(!d.rules.is_empty());
        let doc = include_str!("../../docs/ci.md");
        for r in &d.rules {
            assert_eq!(r.source, "default");
            assert!(
                doc.contains(&format!("leak:{}", r.pattern)),
                "docs/ci.md does not explain default rule {:?}",
                r.pattern
            );
        }
    }

    #[test]
    fn template_matching() {
        assert!(pattern_matches("foo", "xfoox"));
        assert!(pattern_matches("^foo", "foobar"));
        assert!(!pattern_matches("^foo", "xfoo"));
        assert!(pattern_matches("bar$", "foobar"));
        assert!(!pattern_matches("bar$", "barx"));
        assert!(pattern_matches("^foo$", "foo"));
        assert!(!pattern_matches("^foo$", "foofoo"));
        assert!(pattern_matches("a*c", "xxabbbcyy"));
        assert!(!pattern_matches("a*c", "cxxa"));
        assert!(pattern_matches("^a*c$", "abc"));
        assert!(!pattern_matches("^a*c$", "abcd"));
        assert!(pattern_matches("*", "anything"));
        assert!(pattern_matches("lib*.so", "/usr/lib/libssl.so.3"));
        assert!(!pattern_matches("x", ""));
    }
}
