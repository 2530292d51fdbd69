//! Turning linker names back into what the programmer wrote.
//!
//! Two manglings matter on Linux: the Itanium C++ ABI (`_Z…`, used by g++ and
//! clang++) and Rust's (the legacy `_ZN…17h<hash>E`, which borrows the C++
//! prefix, and the v0 scheme `_R…`). When DWARF says which language a function
//! comes from, that language decides; for names from the ELF symbol table the
//! name itself must: `_R` is Rust, `_ZN…E` ending in a Rust hash element is
//! Rust, any other `_Z` is C++. A name that fails to demangle is returned
//! unchanged — a raw symbol is still better than nothing.

use gimli::DwLang;

/// The language a name comes from, when the debug info says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    C,
    Cpp,
    Rust,
    Other,
}

impl Language {
    /// Maps a DWARF `DW_AT_language` to the mangling family it uses.
    pub fn from_dwarf(lang: DwLang) -> Language {
        match lang {
            gimli::DW_LANG_Rust => Language::Rust,
            gimli::DW_LANG_C_plus_plus
            | gimli::DW_LANG_C_plus_plus_03
            | gimli::DW_LANG_C_plus_plus_11
            | gimli::DW_LANG_C_plus_plus_14
            | gimli::DW_LANG_C_plus_plus_17
            | gimli::DW_LANG_C_plus_plus_20
            | gimli::DW_LANG_ObjC_plus_plus => Language::Cpp,
            gimli::DW_LANG_C89
            | gimli::DW_LANG_C
            | gimli::DW_LANG_C99
            | gimli::DW_LANG_C11
            | gimli::DW_LANG_C17 => Language::C,
            _ => Language::Other,
        }
    }
}

/// Demangles `name`; `language` comes from the debug info when known.
///
/// Rust names lose their hash (`core::ptr::drop_in_place<T>`, not
/// `…::h0123…`); C++ names keep their parameter list (`ns::Foo<int>::bar(int)`),
/// as `addr2line -C` and `c++filt` print them.
pub fn demangle(name: &str, language: Option<Language>) -> String {
    let result = match language {
        Some(Language::Rust) => rust(name).or_else(|| cpp(name)),
        Some(Language::Cpp) => cpp(name),
        // A C function is never mangled, but a C unit may still name a C++
        // or Rust symbol (assembly, aliases): guess from the name only then.
        Some(Language::C) | Some(Language::Other) | None => guess(name),
    };
    result.unwrap_or_else(|| name.to_string())
}

/// Demangles a name whose language is unknown, judging by its shape.
fn guess(name: &str) -> Option<String> {
    if name.starts_with("_R") {
        return rust(name);
    }
    if name.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // The legacy Rust scheme always ends with a hash element, which the
            // alternate form leaves out: a difference proves it was Rust.
            let (full, short) = (format!("{d}"), format!("{d:#}"));
            if full != short {
                return Some(short);
            }
        }
    }
    if name.starts_with("_Z") {
        return cpp(name);
    }
    None
}

fn rust(name: &str) -> Option<String> {
    rustc_demangle::try_demangle(name)
        .ok()
        .map(|d| format!("{d:#}"))
}

fn cpp(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    symbol
        .demangle(&cpp_demangle::DemangleOptions::default())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_legacy_drops_the_hash() {
        // Legacy scheme: _ZN, length-prefixed (66 = the length of the
        // `_$LT$…$GT$` element, counted by hand) path elements, the 17-character
        // hash element `h` + 16 hex digits, then E.
        let sym = "_ZN4core3ptr13drop_in_place17h0123456789abcdefE";
        assert_eq!(demangle(sym, None), "core::ptr::drop_in_place");
        assert_eq!(
            demangle(sym, Some(Language::Rust)),
            "core::ptr::drop_in_place"
        );
        // `$LT$`/`$GT$` escapes are decoded.
        let generic = "_ZN66_$LT$alloc..vec..Vec$LT$T$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE";
        assert_eq!(
            demangle(generic, None),
            "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"
        );
    }

    #[test]
    fn rust_v0() {
        // v0 scheme: N v (value namespace) of C (crate root) `mycrate` with
        // disambiguator s1234_, then the identifier `leak`.
        assert_eq!(demangle("_RNvCs1234_7mycrate4leak", None), "mycrate::leak");
        assert_eq!(
            demangle("_RNvNtCs1234_7mycrate5inner4leak", Some(Language::Rust)),
            "mycrate::inner::leak"
        );
    }

    #[test]
    fn cpp_keeps_parameters() {
        assert_eq!(
            demangle("_ZN2ns3FooIiE3barEi", None),
            "ns::Foo<int>::bar(int)"
        );
        assert_eq!(
            demangle("_ZN2ns3FooIiE3barEi", Some(Language::Cpp)),
            "ns::Foo<int>::bar(int)"
        );
        // Without a Rust hash, `_ZN…E` is C++ (a namespace-scope variable).
        assert_eq!(demangle("_ZN2ns5countE", None), "ns::count");
        assert_eq!(demangle("_Znwm", None), "operator new(unsigned long)");
    }

    #[test]
    fn plain_and_broken_names_pass_through() {
        assert_eq!(demangle("main", Some(Language::C)), "main");
        assert_eq!(demangle("malloc", None), "malloc");
        assert_eq!(demangle("_ZN3foo", None), "_ZN3foo");
        assert_eq!(demangle("_R!!", None), "_R!!");
        assert_eq!(demangle("", None), "");
    }
}
