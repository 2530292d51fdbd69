//! Configuration from the `TRACER_*` environment variables (interface.md).
//!
//! Pure logic, no I/O: [`Config::from_lookup`] takes a lookup function and
//! returns the configuration plus the complaints to print, one line each. A
//! bad value never stops the traced program: the default is used, or tracing
//! is disabled when nothing sensible remains.

use format_writers::Format;

/// Largest `TRACER_STACK_DEPTH` accepted.
pub const MAX_DEPTH: usize = 256;
pub const DEFAULT_DEPTH: usize = 64;
pub const DEFAULT_OUTPUT: &str = "tracer-%e-%p";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwind {
    /// Walk the frame-pointer chain (fast, needs frame pointers everywhere).
    Fp,
    /// Table-driven unwinding with `.eh_frame` (complete without frame pointers).
    Dwarf,
}

/// A profile written at exit from the aggregated allocation events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// MALT JSON (`.malt.json`).
    Malt,
    /// callgrind (`.callgrind`).
    Callgrind,
}

impl Profile {
    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Profile::Malt => "malt.json",
            Profile::Callgrind => "callgrind",
        }
    }
}

/// The default of `TRACER_SYSCALLS`.
pub const DEFAULT_SYSCALLS: &str = "%file,%net,%mem,%process";

/// What the writer names at exit (`TRACER_SYMBOLIZE`): the trace records
/// addresses, and `tracer` symbolizes them offline anyway; names written at
/// exit serve readers without the binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symbolize {
    /// Nothing: the trace holds addresses and objects only.
    None,
    /// The objects' own files (DWARF, else symbol tables), no separate debug
    /// files: cheap for every process.
    Exit,
    /// Also separate debug files (`/usr/lib/debug`, debuglink): complete, but
    /// a distribution's detached debug info can cost a short process more
    /// than its whole run.
    Full,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Allocation trace formats to write, one file each (never empty when
    /// `enabled`).
    pub formats: Vec<Format>,
    /// `TRACER_FORMAT` asked for `tlv`: system calls are captured.
    pub wants_syscalls: bool,
    /// Profiles written at exit from the allocation events (`malt`,
    /// `callgrind`).
    pub profiles: Vec<Profile>,
    /// System call numbers to capture (`TRACER_SYSCALLS`), sorted.
    pub syscalls: Vec<u16>,
    /// Bytes of buffer contents kept per buffer argument (`TRACER_SYSCALL_DATA`).
    pub syscall_data: usize,
    pub output: String,
    pub stack_depth: usize,
    pub unwind: Unwind,
    pub symbolize: Symbolize,
    pub follow_fork: bool,
    pub follow_exec: bool,
    pub quiet: bool,
    pub manifest: Option<String>,
    /// `TRACER_LEAK_SCAN`: classify the blocks live at exit by reachability.
    pub leak_scan: bool,
    /// False when nothing is left to write.
    pub enabled: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            formats: vec![Format::Mlyze],
            wants_syscalls: false,
            profiles: Vec::new(),
            syscalls: Vec::new(),
            syscall_data: 0,
            output: DEFAULT_OUTPUT.to_string(),
            stack_depth: DEFAULT_DEPTH,
            unwind: Unwind::Dwarf,
            symbolize: Symbolize::Exit,
            follow_fork: true,
            follow_exec: true,
            quiet: false,
            manifest: None,
            leak_scan: true,
            enabled: true,
        }
    }
}

impl Config {
    /// Reads the configuration; `get` returns a variable's value if set.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut complaints = Vec::new();

        if let Some(v) = get("TRACER_FORMAT") {
            let mut formats = Vec::new();
            let mut bad = Vec::new();
            for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match name {
                    "mlyze" => push_once(&mut formats, Format::Mlyze),
                    "dumpalloc" => push_once(&mut formats, Format::Dumpalloc),
                    "tlv" => c.wants_syscalls = true,
                    "malt" => push_once(&mut c.profiles, Profile::Malt),
                    "callgrind" => push_once(&mut c.profiles, Profile::Callgrind),
                    other => bad.push(other.to_string()),
                }
            }
            let fallback = formats.is_empty() && !c.wants_syscalls && c.profiles.is_empty();
            if !bad.is_empty() {
                complaints.push(format!(
                    "TRACER_FORMAT: unknown format {} (accepted: {ACCEPTED_FORMATS}); {}",
                    quoted_list(&bad),
                    if fallback { "using mlyze" } else { "ignored" }
                ));
            } else if fallback {
                complaints.push(format!(
                    "TRACER_FORMAT: empty (accepted: {ACCEPTED_FORMATS}); using mlyze"
                ));
            }
            if fallback {
                formats.push(Format::Mlyze);
            }
            c.formats = formats;
            c.enabled = c.allocations() || c.wants_syscalls;
        }

        if c.wants_syscalls {
            let spec = get("TRACER_SYSCALLS");
            let chosen = spec
                .as_deref()
                .map(|s| (s, format_writers::syscalls::selection(s)));
            c.syscalls = match chosen {
                Some((_, Ok(list))) if !list.is_empty() => list,
                Some((s, result)) => {
                    let why = match result {
                        Err(e) => e,
                        Ok(_) => "empty".to_string(),
                    };
                    complaints.push(format!(
                        "TRACER_SYSCALLS: {s:?}: {why}; using {DEFAULT_SYSCALLS}"
                    ));
                    default_syscalls()
                }
                None => default_syscalls(),
            };
        }

        if let Some(v) = get("TRACER_SYSCALL_DATA") {
            match v.trim().parse::<u64>() {
                Ok(n) if n as usize <= MAX_SYSCALL_DATA => c.syscall_data = n as usize,
                Ok(_) => {
                    complaints.push(format!(
                        "TRACER_SYSCALL_DATA: {v:?} is too large (accepted: 0 to {MAX_SYSCALL_DATA} bytes); using {MAX_SYSCALL_DATA}"
                    ));
                    c.syscall_data = MAX_SYSCALL_DATA;
                }
                Err(_) => complaints.push(format!(
                    "TRACER_SYSCALL_DATA: {v:?} is not a number (accepted: 0 to {MAX_SYSCALL_DATA} bytes of each buffer); using 0"
                )),
            }
        }

        if let Some(v) = get("TRACER_OUTPUT") {
            if v.is_empty() {
                complaints.push(format!(
                    "TRACER_OUTPUT: empty (expected a path template with %p %e %t %%); using {DEFAULT_OUTPUT}"
                ));
            } else {
                let unknown = unknown_escapes(&v);
                if !unknown.is_empty() {
                    complaints.push(format!(
                        "TRACER_OUTPUT: unknown escape {} kept as is (accepted: %p %e %t %%)",
                        quoted_list(&unknown)
                    ));
                }
                c.output = v;
            }
        }

        if let Some(v) = get("TRACER_STACK_DEPTH") {
            match v.trim().parse::<u64>() {
                Ok(n) if n as usize <= MAX_DEPTH => c.stack_depth = n as usize,
                Ok(_) => {
                    complaints.push(format!(
                        "TRACER_STACK_DEPTH: {v:?} is too large (accepted: 0 to {MAX_DEPTH}); using {MAX_DEPTH}"
                    ));
                    c.stack_depth = MAX_DEPTH;
                }
                Err(_) => complaints.push(format!(
                    "TRACER_STACK_DEPTH: {v:?} is not a number (accepted: 0 to {MAX_DEPTH}, 0 for no stacks); using {DEFAULT_DEPTH}"
                )),
            }
        }

        if let Some(v) = get("TRACER_UNWIND") {
            match v.trim() {
                "fp" => c.unwind = Unwind::Fp,
                "dwarf" => c.unwind = Unwind::Dwarf,
                _ => complaints.push(format!(
                    "TRACER_UNWIND: {v:?} is not a method (accepted: fp, dwarf); using dwarf"
                )),
            }
        }

        if let Some(v) = get("TRACER_SYMBOLIZE") {
            match v.trim() {
                "exit" => c.symbolize = Symbolize::Exit,
                "none" => c.symbolize = Symbolize::None,
                "full" => c.symbolize = Symbolize::Full,
                _ => complaints.push(format!(
                    "TRACER_SYMBOLIZE: {v:?} is not a mode (accepted: exit, none, full); using exit"
                )),
            }
        }

        for (name, field) in [
            ("TRACER_FOLLOW_FORK", &mut c.follow_fork),
            ("TRACER_FOLLOW_EXEC", &mut c.follow_exec),
            ("TRACER_QUIET", &mut c.quiet),
            ("TRACER_LEAK_SCAN", &mut c.leak_scan),
        ] {
            if let Some(v) = get(name) {
                match parse_bool(&v) {
                    Some(b) => *field = b,
                    None => complaints.push(format!(
                        "{name}: {v:?} is not 0 or 1; using {}",
                        if *field { 1 } else { 0 }
                    )),
                }
            }
        }

        if let Some(v) = get("TRACER_MANIFEST") {
            if !v.is_empty() {
                c.manifest = Some(v);
            }
        }
        (c, complaints)
    }
}

impl Config {
    /// Whether allocations are traced (some output uses them).
    pub fn allocations(&self) -> bool {
        !self.formats.is_empty() || !self.profiles.is_empty()
    }
}

const ACCEPTED_FORMATS: &str = "mlyze, dumpalloc, tlv, malt, callgrind";

/// Largest `TRACER_SYSCALL_DATA` (what one argument element can hold).
pub const MAX_SYSCALL_DATA: usize = 65_531;

fn default_syscalls() -> Vec<u16> {
    format_writers::syscalls::selection(DEFAULT_SYSCALLS).unwrap_or_default()
}

fn push_once<T: PartialEq>(v: &mut Vec<T>, f: T) {
    if !v.contains(&f) {
        v.push(f);
    }
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

fn unknown_escapes(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = template.chars();
    while let Some(ch) = chars.next() {
        if ch == '%' {
            match chars.next() {
                Some('p' | 'e' | 't' | '%') => {}
                Some(other) => out.push(format!("%{other}")),
                None => out.push("%".to_string()),
            }
        }
    }
    out
}

/// What the template's escapes stand for.
pub struct Names<'a> {
    pub pid: u32,
    pub exe: &'a str,
    pub start_secs: u64,
}

/// Expands `%p %e %t %%` (unknown escapes stay literally) and applies the
/// extension rule: a path already ending in `.ext` is kept, otherwise `.ext`
/// is appended.
pub fn expand_output(template: &str, names: &Names, ext: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&names.pid.to_string()),
            Some('e') => out.push_str(names.exe),
            Some('t') => out.push_str(&names.start_secs.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    let dotted = format!(".{ext}");
    if !out.ends_with(&dotted) {
        out.push_str(&dotted);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_follow_the_interface() {
        let (c, complaints) = cfg(&[]);
        assert!(complaints.is_empty());
        assert_eq!(c.formats, vec![Format::Mlyze]);
        assert_eq!(c.output, "tracer-%e-%p");
        assert_eq!(c.stack_depth, 64);
        assert_eq!(c.unwind, Unwind::Dwarf);
        assert!(c.follow_fork && c.follow_exec && !c.quiet && c.enabled);
        assert_eq!(c.manifest, None);
        assert!(c.leak_scan);
    }

    #[test]
    fn leak_scan_switch() {
        assert!(!cfg(&[("TRACER_LEAK_SCAN", "0")]).0.leak_scan);
        let (c, complaints) = cfg(&[("TRACER_LEAK_SCAN", "sometimes")]);
        assert!(c.leak_scan);
        assert_eq!(
            complaints,
            vec!["TRACER_LEAK_SCAN: \"sometimes\" is not 0 or 1; using 1"]
        );
    }

    #[test]
    fn formats_are_a_comma_list_without_duplicates() {
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "dumpalloc, mlyze,dumpalloc")]);
        assert!(complaints.is_empty());
        assert_eq!(c.formats, vec![Format::Dumpalloc, Format::Mlyze]);
    }

    #[test]
    fn unknown_format_is_one_line_and_falls_back_to_mlyze() {
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "xml")]);
        assert_eq!(c.formats, vec![Format::Mlyze]);
        assert_eq!(
            complaints,
            vec!["TRACER_FORMAT: unknown format \"xml\" (accepted: mlyze, dumpalloc, tlv, malt, callgrind); using mlyze"]
        );
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "dumpalloc,xml")]);
        assert_eq!(c.formats, vec![Format::Dumpalloc]);
        assert_eq!(complaints.len(), 1);
        assert!(complaints[0].ends_with("; ignored"));
    }

    #[test]
    fn tlv_alone_captures_syscalls_without_allocations() {
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "tlv")]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert!(c.enabled && c.wants_syscalls && !c.allocations());
        assert!(c.formats.is_empty());
        // The four groups: openat (257), connect (42), mmap (9), wait4 (61).
        for nr in [257, 42, 9, 61, 231, 59] {
            assert!(c.syscalls.contains(&nr), "{nr} in the default selection");
        }
        assert!(!c.syscalls.contains(&39), "getpid is in no default group");
        assert_eq!(c.syscall_data, 0);
        let (c, _) = cfg(&[("TRACER_FORMAT", "tlv,mlyze")]);
        assert!(c.enabled && c.wants_syscalls && c.allocations());
        assert_eq!(c.formats, vec![Format::Mlyze]);
    }

    #[test]
    fn syscall_selection_and_data() {
        let (c, complaints) = cfg(&[
            ("TRACER_FORMAT", "tlv"),
            ("TRACER_SYSCALLS", "read, %mem"),
            ("TRACER_SYSCALL_DATA", "64"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert_eq!(c.syscalls, vec![0, 9, 10, 11, 12, 25, 28]);
        assert_eq!(c.syscall_data, 64);
        let (c, _) = cfg(&[("TRACER_FORMAT", "tlv"), ("TRACER_SYSCALLS", "all")]);
        assert!(c.syscalls.len() > 300);
        let (c, complaints) = cfg(&[
            ("TRACER_FORMAT", "tlv"),
            ("TRACER_SYSCALLS", "read,bogus"),
            ("TRACER_SYSCALL_DATA", "lots"),
        ]);
        assert_eq!(complaints.len(), 2, "{complaints:?}");
        assert!(complaints[0].starts_with(
            "TRACER_SYSCALLS: \"read,bogus\": unknown system call or group \"bogus\""
        ));
        assert!(complaints[0].ends_with("using %file,%net,%mem,%process"));
        assert!(complaints[1].starts_with("TRACER_SYSCALL_DATA: \"lots\" is not a number"));
        assert_eq!(c.syscalls, default_syscalls());
        assert_eq!(c.syscall_data, 0);
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "tlv"), ("TRACER_SYSCALL_DATA", "100000")]);
        assert_eq!(c.syscall_data, MAX_SYSCALL_DATA);
        assert_eq!(complaints.len(), 1);
        // Without tlv, TRACER_SYSCALLS selects nothing.
        let (c, complaints) = cfg(&[("TRACER_SYSCALLS", "read")]);
        assert!(complaints.is_empty() && c.syscalls.is_empty() && !c.wants_syscalls);
    }

    #[test]
    fn profiles_are_outputs_of_their_own() {
        let (c, complaints) = cfg(&[("TRACER_FORMAT", "malt,callgrind,malt")]);
        assert!(complaints.is_empty());
        assert!(c.formats.is_empty());
        assert_eq!(c.profiles, vec![Profile::Malt, Profile::Callgrind]);
        assert!(c.enabled && c.allocations() && !c.wants_syscalls);
        assert_eq!(Profile::Malt.extension(), "malt.json");
    }

    #[test]
    fn depth_bounds_and_garbage() {
        assert_eq!(cfg(&[("TRACER_STACK_DEPTH", "0")]).0.stack_depth, 0);
        assert_eq!(cfg(&[("TRACER_STACK_DEPTH", "256")]).0.stack_depth, 256);
        let (c, complaints) = cfg(&[("TRACER_STACK_DEPTH", "257")]);
        assert_eq!(c.stack_depth, 256);
        assert!(complaints[0].starts_with("TRACER_STACK_DEPTH:"));
        let (c, complaints) = cfg(&[("TRACER_STACK_DEPTH", "-3")]);
        assert_eq!(c.stack_depth, 64);
        assert_eq!(complaints.len(), 1);
        assert!(complaints[0].contains("accepted: 0 to 256"));
    }

    #[test]
    fn unwind_and_switches() {
        let (c, complaints) = cfg(&[
            ("TRACER_UNWIND", "fp"),
            ("TRACER_FOLLOW_FORK", "0"),
            ("TRACER_FOLLOW_EXEC", "0"),
            ("TRACER_QUIET", "1"),
            ("TRACER_MANIFEST", "/tmp/m"),
        ]);
        assert!(complaints.is_empty());
        assert_eq!(c.unwind, Unwind::Fp);
        assert!(!c.follow_fork && !c.follow_exec && c.quiet);
        assert_eq!(c.manifest.as_deref(), Some("/tmp/m"));
        let (c, complaints) = cfg(&[("TRACER_UNWIND", "libunwind"), ("TRACER_QUIET", "maybe")]);
        assert_eq!(c.unwind, Unwind::Dwarf);
        assert!(!c.quiet);
        assert_eq!(complaints.len(), 2);
        assert!(complaints[1].starts_with("TRACER_QUIET: \"maybe\" is not 0 or 1; using 0"));
    }

    #[test]
    fn symbolize_modes_and_a_bad_value() {
        assert_eq!(cfg(&[]).0.symbolize, Symbolize::Exit);
        for (v, want) in [
            ("none", Symbolize::None),
            ("exit", Symbolize::Exit),
            (" full ", Symbolize::Full),
        ] {
            let (c, complaints) = cfg(&[("TRACER_SYMBOLIZE", v)]);
            assert!(complaints.is_empty(), "{v}: {complaints:?}");
            assert_eq!(c.symbolize, want, "{v}");
        }
        let (c, complaints) = cfg(&[("TRACER_SYMBOLIZE", "dwarf")]);
        assert_eq!(c.symbolize, Symbolize::Exit);
        assert_eq!(
            complaints,
            vec![
                "TRACER_SYMBOLIZE: \"dwarf\" is not a mode (accepted: exit, none, full); using exit"
                    .to_string()
            ]
        );
    }

    #[test]
    fn output_template_expansion_and_extension_rule() {
        let n = Names {
            pid: 4242,
            exe: "python3.11",
            start_secs: 1700000000,
        };
        assert_eq!(
            expand_output("tracer-%e-%p", &n, "mlyze"),
            "tracer-python3.11-4242.mlyze"
        );
        assert_eq!(
            expand_output("/tmp/x-%t.mlyze", &n, "mlyze"),
            "/tmp/x-1700000000.mlyze"
        );
        assert_eq!(
            expand_output("/tmp/x.mlyze", &n, "dumpalloc"),
            "/tmp/x.mlyze.dumpalloc"
        );
        assert_eq!(expand_output("a%%p%q%", &n, "tlv"), "a%p%q%.tlv");
    }

    #[test]
    fn bad_output_escapes_are_reported_but_kept() {
        let (c, complaints) = cfg(&[("TRACER_OUTPUT", "x-%q")]);
        assert_eq!(c.output, "x-%q");
        assert!(complaints[0].contains("\"%q\""));
        let (c, complaints) = cfg(&[("TRACER_OUTPUT", "")]);
        assert_eq!(c.output, DEFAULT_OUTPUT);
        assert_eq!(complaints.len(), 1);
    }
}
