//! Paths as text, losslessly. On Linux a path is bytes, not UTF-8: a file named `ok\xff.dcm`
//! is as valid as `ok.dcm`. Messages, the summary and the JSON report show paths with one
//! escape scheme (documented in `docs/report-schema.json`): a backslash is written `\\`, a
//! byte that is not part of valid UTF-8 is written `\xHH` (two lower-case hex digits), and
//! everything else is written as it is. [`unescape`] turns the text back into the exact bytes.

use std::ffi::OsString;
use std::fmt::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Displays a path with the escape scheme of this module.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a Path);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.as_os_str().as_bytes().utf8_chunks() {
            for c in chunk.valid().chars() {
                if c == '\\' {
                    f.write_str("\\\\")?;
                } else {
                    f.write_char(c)?;
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// The path as text (see the module documentation).
pub fn escape(path: &Path) -> String {
    Escaped(path).to_string()
}

/// The exact path behind text made by [`escape`]; `None` when the text is not such text (a
/// lone backslash, or `\x` not followed by two hex digits).
pub fn unescape(text: &str) -> Option<PathBuf> {
    let mut out = Vec::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hex = text.get(i + 2..i + 4)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 4;
            }
            _ => return None,
        }
    }
    Some(PathBuf::from(OsString::from_vec(out)))
}

/// `#[serde(serialize_with = "crate::paths::serialize")]` for a path field.
pub fn serialize<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&Escaped(path))
}

/// [`serialize`] for an optional path.
pub fn serialize_opt<S: serde::Serializer>(
    path: &Option<PathBuf>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.collect_str(&Escaped(p)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: &[u8]) -> PathBuf {
        PathBuf::from(OsString::from_vec(b.to_vec()))
    }

    #[test]
    fn utf8_paths_are_unchanged_and_others_round_trip() {
        assert_eq!(escape(Path::new("in/über/x.dcm")), "in/über/x.dcm");
        assert_eq!(escape(&bytes(b"ok\xff.dcm")), "ok\\xff.dcm");
        assert_eq!(escape(&bytes(b"a\\b")), "a\\\\b");
        // A name that looks like an escape is told apart from the escaped byte.
        assert_eq!(escape(&bytes(b"\\xff")), "\\\\xff");
        for case in [
            &b"ok\xff.dcm"[..],
            b"a\xfe",
            b"\\xff",
            b"\xc3\x28 mixed \xc3\xa9 \\",
            b"",
        ] {
            let p = bytes(case);
            assert_eq!(unescape(&escape(&p)), Some(p.clone()), "{case:?}");
        }
        assert_eq!(unescape("bad\\q"), None);
        assert_eq!(unescape("bad\\x4"), None);
    }

    #[test]
    fn serializes_into_json_strings() {
        #[derive(serde::Serialize)]
        struct R {
            #[serde(serialize_with = "serialize")]
            p: PathBuf,
            #[serde(serialize_with = "serialize_opt")]
            q: Option<PathBuf>,
        }
        let r = R {
            p: bytes(b"a\xff"),
            q: None,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"p":"a\\xff","q":null}"#
        );
    }
}
