//! Output names: mirror the input tree (extension replaced), or a pattern of header values,
//! sanitized so that no value can escape the output directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// The widest zero padding a placeholder may ask for (`{InstanceNumber:08}`): wider makes no
/// sense in a file name (at most 255 bytes).
pub const MAX_WIDTH: usize = 64;

/// Keywords a naming pattern may use.
pub const PATTERN_KEYS: [&str; 10] = [
    "PatientID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "SeriesNumber",
    "InstanceNumber",
    "SOPInstanceUID",
    "Modality",
    "AccessionNumber",
    "stem",
    "dir",
];

/// Whether `key` may be used in a pattern: one of [`PATTERN_KEYS`] or any keyword of the
/// standard DICOM dictionary (`SeriesDescription`, `BodyPartExamined` …).
pub fn is_pattern_key(key: &str) -> bool {
    use dicom_core::dictionary::DataDictionary;
    PATTERN_KEYS.contains(&key)
        || (!key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric())
            && dicom_dictionary_std::StandardDataDictionary
                .by_name(key)
                .is_some())
}

/// Checks a pattern: known keywords, balanced braces, widths up to [`MAX_WIDTH`], relative,
/// no `..`, no control characters, and no part that is empty or hidden (`.`, `.x`): every
/// output must be a visible file inside the output directory.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.trim().is_empty() {
        return Err("the pattern is empty".into());
    }
    if let Some(c) = pattern.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the pattern contains the control character {:?}",
            c
        ));
    }
    if pattern.starts_with('/') {
        return Err("the pattern must be relative to the output directory".into());
    }
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or("unbalanced `{` in the pattern")?
            + open;
        let inner = &rest[open + 1..close];
        let key = inner.split(':').next().unwrap_or("");
        if !is_pattern_key(key) {
            return Err(format!(
                "unknown placeholder `{{{inner}}}`: not a keyword of the DICOM dictionary \
                 (such as SeriesDescription, Modality, AccessionNumber) nor stem or dir"
            ));
        }
        if let Some(fmt) = inner.split_once(':').map(|x| x.1) {
            match fmt.parse::<usize>() {
                Ok(w) if w <= MAX_WIDTH => {}
                Ok(_) => {
                    return Err(format!(
                        "`{{{inner}}}`: the width after `:` may be at most {MAX_WIDTH}"
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "`{{{inner}}}`: the width after `:` must be a number like 04"
                    ))
                }
            }
        }
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err("unbalanced `}` in the pattern".into());
    }
    for part in pattern.split('/') {
        if part == ".." {
            return Err("the pattern must not contain `..`".into());
        }
        if part.is_empty() {
            return Err("the pattern has an empty part (`//`, or a `/` at the end)".into());
        }
        if part.starts_with('.') {
            return Err(format!(
                "`{part}`: a part of the pattern must not start with `.` (a hidden name)"
            ));
        }
    }
    Ok(())
}

/// Makes a header value safe as one path component.
pub fn sanitize(value: &str) -> String {
    let s: String = value
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_matches('.').to_string();
    if s.is_empty() {
        "unknown".into()
    } else {
        s
    }
}

/// Expands a (checked) pattern with header values; each value becomes safe path text.
pub fn expand_pattern(pattern: &str, values: &BTreeMap<String, String>) -> PathBuf {
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .map(|c| c + open)
            .unwrap_or(rest.len() - 1);
        let inner = &rest[open + 1..close];
        let (key, width) = match inner.split_once(':') {
            Some((k, w)) => (k, w.parse::<usize>().unwrap_or(0)),
            None => (inner, 0),
        };
        let raw = values.get(key).map(String::as_str).unwrap_or("");
        let mut v = if key == "dir" {
            // The relative directory keeps its separators; each part is sanitized.
            raw.split('/')
                .filter(|p| !p.is_empty())
                .map(sanitize)
                .collect::<Vec<_>>()
                .join("/")
        } else {
            sanitize(raw)
        };
        if width > 0 && v.len() < width && v.chars().all(|c| c.is_ascii_digit()) {
            v = format!("{v:0>width$}");
        }
        out.push_str(&v);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    // Never let an expansion produce an absolute path or a parent reference.
    Path::new(&out)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(PathBuf::from(p)),
            _ => None,
        })
        .collect()
}

/// True when the text after the last dot is a file extension worth replacing: short and with
/// a letter in it (`.dcm`, `.DICOM`, `.ima`). UID-named files such as `1.2.840.5.320` keep
/// their whole name, so distinct instances never collide.
fn replaceable_extension(name: &[u8]) -> Option<usize> {
    let dot = name.iter().rposition(|&b| b == b'.')?;
    let ext = &name[dot + 1..];
    (dot > 0
        && !ext.is_empty()
        && ext.len() <= 6
        && ext.iter().any(|b| b.is_ascii_alphabetic())
        && ext.iter().all(|b| b.is_ascii_alphanumeric()))
    .then_some(dot)
}

/// The output path without extension for an input: `rel` is the input's path relative to the
/// directory it was found under (or just its file name when given directly). Names are kept
/// byte for byte (a Latin-1 `ok\xff.dcm` gives `ok\xff`): paths are bytes on Linux.
pub fn mirror_base(rel: &Path) -> PathBuf {
    let name = rel.file_name().unwrap_or(OsStr::new("unnamed")).as_bytes();
    let stem = match replaceable_extension(name) {
        Some(dot) => &name[..dot],
        None => name,
    };
    let mut base: PathBuf = rel
        .parent()
        .map(|p| {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(p) => Some(PathBuf::from(p)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    base.push(OsStr::from_bytes(stem));
    base
}

/// The output file for frame `frame` (0-based) of a file with `frames` frames.
pub fn frame_path(out_dir: &Path, base: &Path, frames: u32, frame: u32, ext: &str) -> PathBuf {
    let mut name = base.file_name().unwrap_or_default().as_bytes().to_vec();
    if frames > 1 {
        name.extend_from_slice(format!("_f{:04}", frame + 1).as_bytes());
    }
    name.push(b'.');
    name.extend_from_slice(ext.as_bytes());
    out_dir.join(base.with_file_name(OsString::from_vec(name)))
}

/// True when `stem` (an output path without its extension) ends like a frame's name
/// (`_f` and at least four digits, as [`frame_path`] writes them).
pub fn is_frame_like(stem: &Path) -> bool {
    let name = stem.file_name().unwrap_or_default().as_bytes();
    let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    digits >= 4 && name[..name.len() - digits].ends_with(b"_f")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_replaces_real_extensions_only() {
        assert_eq!(mirror_base(Path::new("a/b/x.dcm")), PathBuf::from("a/b/x"));
        assert_eq!(mirror_base(Path::new("x")), PathBuf::from("x"));
        assert_eq!(
            mirror_base(Path::new("IM0001.DCM")),
            PathBuf::from("IM0001")
        );
        assert_eq!(
            mirror_base(Path::new("s/1.2.840.113619.2.320")),
            PathBuf::from("s/1.2.840.113619.2.320")
        );
    }

    #[test]
    fn frame_paths_follow_the_contract() {
        let out = Path::new("OUT");
        assert_eq!(
            frame_path(out, Path::new("a/b/x"), 1, 0, "png"),
            PathBuf::from("OUT/a/b/x.png")
        );
        assert_eq!(
            frame_path(out, Path::new("x"), 3, 1, "png"),
            PathBuf::from("OUT/x_f0002.png")
        );
        assert_eq!(
            frame_path(out, Path::new("x"), 12000, 11999, "png"),
            PathBuf::from("OUT/x_f12000.png")
        );
    }

    #[test]
    fn patterns_are_checked() {
        assert!(check_pattern("{SeriesInstanceUID}/{InstanceNumber:04}").is_ok());
        // Any keyword of the dictionary (issue 21), a name that is none is refused.
        assert!(check_pattern("{PatientName}").is_ok());
        assert!(check_pattern("{PatientNam}").is_err());
        assert!(check_pattern("../{stem}").is_err());
        assert!(check_pattern("/abs/{stem}").is_err());
        assert!(check_pattern("{stem").is_err());
        assert!(check_pattern("{InstanceNumber:x}").is_err());
        // Found by the adversarial pass (issue 22): a width that made `format!` panic, a NUL,
        // and `.` (which wrote a hidden `OUT/.png`).
        assert!(check_pattern("{InstanceNumber:65536}").is_err());
        assert!(check_pattern("{InstanceNumber:64}").is_ok());
        assert!(check_pattern("{stem}\0x").is_err());
        assert!(check_pattern(".").is_err());
        assert!(check_pattern("a/.{stem}").is_err());
        assert!(check_pattern("{stem}//x").is_err());
        // Any keyword of the standard dictionary, nothing else.
        assert!(check_pattern("{SeriesDescription}/{Modality}_{AccessionNumber}").is_ok());
        assert!(check_pattern("{BodyPartExamined}/{stem}").is_ok());
        assert!(check_pattern("{SeriesDescriptoin}").is_err());
        assert!(check_pattern("{stem}/").is_err());
    }

    #[test]
    fn names_are_kept_byte_for_byte() {
        let rel = PathBuf::from(OsString::from_vec(b"d\xe9/ok\xff.dcm".to_vec()));
        let base = mirror_base(&rel);
        assert_eq!(base.as_os_str().as_bytes(), b"d\xe9/ok\xff");
        let out = frame_path(Path::new("OUT"), &base, 1, 0, "png");
        assert_eq!(out.as_os_str().as_bytes(), b"OUT/d\xe9/ok\xff.png");
        // Two names that differ in one non-UTF-8 byte stay two names.
        let other = mirror_base(Path::new(OsStr::from_bytes(b"a\xfe.dcm")));
        assert_ne!(
            other,
            mirror_base(Path::new(OsStr::from_bytes(b"a\xff.dcm")))
        );
    }

    #[test]
    fn frame_like_names_are_recognised() {
        assert!(is_frame_like(Path::new("OUT/x_f0001")));
        assert!(is_frame_like(Path::new("x_f12000")));
        assert!(!is_frame_like(Path::new("x_f001")));
        assert!(!is_frame_like(Path::new("x0001")));
        assert!(!is_frame_like(Path::new("_f")));
    }

    #[test]
    fn expansion_cannot_escape_the_output_dir() {
        let mut v = BTreeMap::new();
        v.insert("PatientID".to_string(), "../../etc/passwd".to_string());
        v.insert("InstanceNumber".to_string(), "7".to_string());
        let p = expand_pattern("{PatientID}/{InstanceNumber:04}", &v);
        assert_eq!(p, PathBuf::from("_.._etc_passwd/0007"));
        assert!(p.components().all(|c| matches!(c, Component::Normal(_))));
        let empty = expand_pattern("{SeriesInstanceUID}", &BTreeMap::new());
        assert_eq!(empty, PathBuf::from("unknown"));
    }
}
