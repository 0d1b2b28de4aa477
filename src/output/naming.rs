//! Output names: mirror the input tree (extension replaced), or a pattern of header values,
//! sanitized so that no value can escape the output directory.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

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

/// Checks a pattern: known keywords, balanced braces, relative, no `..`.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.trim().is_empty() {
        return Err("the pattern is empty".into());
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
        if !PATTERN_KEYS.contains(&key) {
            return Err(format!(
                "unknown placeholder `{{{inner}}}`; known: {}",
                PATTERN_KEYS.join(", ")
            ));
        }
        if let Some(fmt) = inner.split_once(':').map(|x| x.1) {
            if fmt.parse::<usize>().is_err() {
                return Err(format!(
                    "`{{{inner}}}`: the width after `:` must be a number like 04"
                ));
            }
        }
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err("unbalanced `}` in the pattern".into());
    }
    if Path::new(pattern)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err("the pattern must not contain `..`".into());
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
fn has_replaceable_extension(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && !ext.is_empty()
                && ext.len() <= 6
                && ext.chars().any(|c| c.is_ascii_alphabetic())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// The output path without extension for an input: `rel` is the input's path relative to the
/// directory it was found under (or just its file name when given directly).
pub fn mirror_base(rel: &Path) -> PathBuf {
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unnamed".into());
    let stem = if has_replaceable_extension(&name) {
        name.rsplit_once('.')
            .map(|x| x.0.to_string())
            .unwrap_or(name)
    } else {
        name
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
    base.push(stem);
    base
}

/// The output file for frame `frame` (0-based) of a file with `frames` frames.
pub fn frame_path(out_dir: &Path, base: &Path, frames: u32, frame: u32, ext: &str) -> PathBuf {
    let mut name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if frames > 1 {
        name.push_str(&format!("_f{:04}", frame + 1));
    }
    name.push('.');
    name.push_str(ext);
    out_dir.join(base.with_file_name(name))
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
        assert!(check_pattern("{PatientName}").is_err());
        assert!(check_pattern("../{stem}").is_err());
        assert!(check_pattern("/abs/{stem}").is_err());
        assert!(check_pattern("{stem").is_err());
        assert!(check_pattern("{InstanceNumber:x}").is_err());
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
