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
        escape_bytes_into(self.0.as_os_str().as_bytes(), false, f)
    }
}

/// Writes `bytes` with this module's scheme; with `lines`, tab, line feed and carriage return
/// are escaped too (`\t`, `\n`, `\r`), so that the text fits one field of a tab-separated line
/// (the manifests of `source::manifest`).
pub fn escape_bytes_into(bytes: &[u8], lines: bool, out: &mut impl Write) -> fmt::Result {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.write_str("\\\\")?,
                '\t' if lines => out.write_str("\\t")?,
                '\n' if lines => out.write_str("\\n")?,
                '\r' if lines => out.write_str("\\r")?,
                c => out.write_char(c)?,
            }
        }
        for b in chunk.invalid() {
            write!(out, "\\x{b:02x}")?;
        }
    }
    Ok(())
}

/// Why text is not the output of [`escape_bytes_into`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnescapeError {
    #[error("a \\x escape needs two hex digits")]
    ShortHex,
    #[error("bad escape \\x{0}")]
    BadHex(String),
    #[error("bad escape in `{0}`")]
    Unknown(String),
}

/// The exact bytes behind text made by [`escape_bytes_into`] with the same `lines`.
pub fn unescape_bytes(text: &str, lines: bool) -> Result<Vec<u8>, UnescapeError> {
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
            Some(b'\\') => out.push(b'\\'),
            Some(b't') if lines => out.push(b'\t'),
            Some(b'n') if lines => out.push(b'\n'),
            Some(b'r') if lines => out.push(b'\r'),
            Some(b'x') => {
                let hex = text.get(i + 2..i + 4).ok_or(UnescapeError::ShortHex)?;
                let byte = u8::from_str_radix(hex, 16)
                    .ok()
                    // `from_str_radix` takes a sign: "+f" is not two hex digits.
                    .filter(|_| hex.bytes().all(|c| c.is_ascii_hexdigit()))
                    .ok_or_else(|| UnescapeError::BadHex(hex.to_string()))?;
                out.push(byte);
                i += 2;
            }
            _ => return Err(UnescapeError::Unknown(text.to_string())),
        }
        i += 2;
    }
    Ok(out)
}

/// The path as text (see the module documentation).
pub fn escape(path: &Path) -> String {
    Escaped(path).to_string()
}

/// The exact path behind text made by [`escape`]; `None` when the text is not such text (a
/// lone backslash, or `\x` not followed by two hex digits).
pub fn unescape(text: &str) -> Option<PathBuf> {
    let bytes = unescape_bytes(text, false).ok()?;
    Some(PathBuf::from(OsString::from_vec(bytes)))
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
