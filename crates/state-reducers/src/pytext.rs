//! Small text helpers that follow Python's definitions, because several rules
//! are specified in terms of Python built-ins (`repr`, `str.split`, `str`).

use serde_json::Value;

/// Python's `repr()` of a `str`: single quotes unless the text contains a
/// single quote and no double quote, with backslash escapes for the quote,
/// backslash and control characters.
pub(crate) fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_py_printable(c) => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable()` for one character, which `repr` escapes when false: not a
/// control (Cc), format (Cf) or private-use (Co) character, and no separator (Zs, Zl, Zp)
/// but the ASCII space. Unassigned code points (Cn), which Python escapes too, pass here:
/// telling them apart needs the Unicode tables, and ids do not carry them.
pub(crate) fn is_py_printable(c: char) -> bool {
    let n = c as u32;
    let control = n < 0x20 || (0x7f..=0x9f).contains(&n);
    let separator = matches!(
        n,
        0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000
    );
    let format = matches!(
        n,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    );
    let private = matches!(n, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    !(control || separator || format || private)
}

/// Python's `str.isspace()` for one character: Unicode whitespace plus the
/// ASCII information separators U+001C..U+001F, which Rust does not count.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `" ".join(s.split())`: collapses whitespace runs and trims.
pub(crate) fn collapse_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split(is_py_space).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The first `n` characters (code points) of `s`.
pub(crate) fn take_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((byte, _)) => &s[..byte],
        None => s,
    }
}

/// Python truthiness of a JSON value.
pub(crate) fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python's `str()` of a JSON scalar; containers render as compact JSON,
/// which is where antler deliberately stops imitating Python's `repr`.
pub(crate) fn py_str(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                u.to_string()
            } else {
                py_float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Python's `repr` (and `str`) of a finite float: the shortest digits that read back as
/// `f`, positional while the decimal exponent is at least -4 and below 16 (with `.0` on a
/// whole number), else scientific with a signed exponent of at least two digits (`1e-05`,
/// `1.5e+16`).
fn py_float(f: f64) -> String {
    // Rust's `{:e}` gives the same shortest digits: `d[.ddd]e[-]x`.
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return sci;
    };
    if (-4..16).contains(&exp) {
        let plain = format!("{f}");
        return if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        };
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floats render as Python's `str()` renders them, exponent form included (before
    /// 2026-12-02, `1e-05` rendered as `0.00001` and `1.5e16` as `15000000000000000`).
    #[test]
    fn floats_render_as_python_renders_them() {
        for (f, python) in [
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e16, "1.5e+16"),
            (1e16, "1e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (2.5, "2.5"),
            (3.0, "3.0"),
            (-0.5, "-0.5"),
            (-1.25e-7, "-1.25e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (0.1, "0.1"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(py_str(&serde_json::json!(f)), python, "{f:e}");
        }
    }

    #[test]
    fn repr_matches_python() {
        assert_eq!(repr_str("sb-1"), "'sb-1'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(repr_str("a\nb\\"), "'a\\nb\\\\'");
    }

    /// Python escapes every character `str.isprintable()` rejects, not only ASCII controls
    /// (the figures are Python's own `repr` of the same strings).
    #[test]
    fn repr_escapes_what_python_cannot_print() {
        assert_eq!(repr_str("sb\u{a0}"), "'sb\\xa0'");
        assert_eq!(repr_str("a\u{85}b\u{7f}"), "'a\\x85b\\x7f'");
        assert_eq!(
            repr_str("x\u{200b}\u{2028}\u{3000}"),
            "'x\\u200b\\u2028\\u3000'"
        );
        assert_eq!(repr_str("\u{e0001}\u{f0000}"), "'\\U000e0001\\U000f0000'");
        assert_eq!(repr_str("é ü 漢 😀"), "'é ü 漢 😀'");
    }

    #[test]
    fn whitespace_follows_python_split() {
        assert_eq!(collapse_whitespace("  a \t\n b\u{1f}c  "), "a b c");
        assert_eq!(collapse_whitespace(""), "");
    }

    #[test]
    fn take_chars_counts_code_points() {
        assert_eq!(take_chars("ünï", 2), "ün");
        assert_eq!(take_chars("ab", 5), "ab");
    }
}
