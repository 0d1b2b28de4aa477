//! The record of the settings that made the images in an output folder
//! (`OUT/.dicomflow/run.json`), so that `--skip-existing` never keeps images rendered another
//! way: a new window, format or operator with old images present is refused (exit 2), or with
//! `--rerender-changed` every image is rendered again.

use std::path::{Path, PathBuf};

use dicomflow::error::FatalError;
use dicomflow::paths::Escaped;
use dicomflow::pipeline::options::Job;

/// Where the record lives, under the output folder.
pub const RECORD: &str = ".dicomflow/run.json";

/// The settings that change an image's pixels or its format (not its name, its compression
/// level or how fast it is made): the report's names for them.
const RENDERING_KEYS: &[&str] = &[
    "damaged",
    "window",
    "window_by_modality",
    "window_by_series",
    "voi_function",
    "overlays",
    "frames",
    "resize",
    "fit",
    "interpolation",
    "rotate",
    "flip",
    "invert",
    "format",
    "jpeg_quality",
];

/// The rendering settings of `job`, as the report writes them.
pub fn rendering_settings(job: &Job) -> serde_json::Map<String, serde_json::Value> {
    let all = match serde_json::to_value(job) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    RENDERING_KEYS
        .iter()
        .filter_map(|k| all.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

/// The record's path for output folder `out`.
pub fn path(out: &Path) -> PathBuf {
    out.join(RECORD)
}

/// What the record in `out` says, if there is one: the settings, or `None` when the folder
/// holds images of runs with different settings (a run was stopped half way).
fn read(out: &Path) -> Result<Option<Option<serde_json::Value>>, FatalError> {
    let p = path(out);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FatalError::Other(format!("{}: {e}", Escaped(&p)))),
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| FatalError::Other(format!("{}: not a settings record: {e}", Escaped(&p))))?;
    if v["mixed"] == serde_json::Value::Bool(true) {
        return Ok(Some(None));
    }
    Ok(Some(Some(v["settings"].clone())))
}

/// The settings that differ between the record and `now`, as `key: was → now` lines.
fn changes(
    was: &serde_json::Value,
    now: &serde_json::Map<String, serde_json::Value>,
) -> Vec<String> {
    RENDERING_KEYS
        .iter()
        .filter_map(|k| {
            let old = was.get(*k).cloned().unwrap_or(serde_json::Value::Null);
            let new = now.get(*k).cloned().unwrap_or(serde_json::Value::Null);
            (old != new).then(|| format!("{k}: {old} → {new}"))
        })
        .collect()
}

/// What a `--skip-existing` run may do with the images in `out`.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// No record, or the same settings: skip what exists.
    Keep,
    /// Other settings made them: these (or "unknown" for a stopped run with other settings).
    Changed(Vec<String>),
}

/// Compares the record in `out` with `job`'s settings.
pub fn check(out: &Path, job: &Job) -> Result<Verdict, FatalError> {
    let now = rendering_settings(job);
    Ok(match read(out)? {
        None => Verdict::Keep,
        Some(None) => Verdict::Changed(vec![
            "unknown: a run with other settings was stopped before it rendered every image".into(),
        ]),
        Some(Some(was)) => {
            let c = changes(&was, &now);
            if c.is_empty() {
                Verdict::Keep
            } else {
                Verdict::Changed(c)
            }
        }
    })
}

/// The usage error of a `--skip-existing` run whose settings changed.
pub fn refusal(out: &Path, changed: &[String]) -> FatalError {
    refusal_with(out, changed, "add --rerender-changed to render them again")
}

/// The same for `listen` and `watch`, which have no `--rerender-changed`.
pub fn live_refusal(out: &Path, changed: &[String]) -> FatalError {
    refusal_with(
        out,
        changed,
        "render them again first (`dicomflow run … --skip-existing --rerender-changed`), \
         leave out --skip-existing to keep both kinds",
    )
}

fn refusal_with(out: &Path, changed: &[String], remedy: &str) -> FatalError {
    FatalError::Config(format!(
        "--skip-existing: the images in {} were rendered with other settings ({}; see {}): \
         {remedy}, or choose another output folder",
        Escaped(out),
        changed.join("; "),
        Escaped(&path(out)),
    ))
}

/// For `listen` and `watch`, before any work: refuses `--skip-existing` over images of other
/// settings, then records this run's settings at once (a receiver may run for months and be
/// killed; the record must already say what it writes). New settings over old images leave
/// both kinds, and the record says so.
pub fn live_start(job: &Job) -> Result<(), FatalError> {
    let out = &job.output.dir;
    let changed = match check(out, job)? {
        Verdict::Keep => false,
        Verdict::Changed(changed) => {
            if job.output.skip_existing {
                return Err(live_refusal(out, &changed));
            }
            true
        }
    };
    write(job, changed).map_err(|e| FatalError::Other(format!("the record of the settings: {e}")))
}

/// Writes the record for `job` into its output folder, atomically and durably
/// (`output::atomic::write_atomic`). `mixed`: the folder may hold images of other settings too
/// (a run that changed them was stopped), which a later `--skip-existing` run must not keep.
pub fn write(job: &Job, mixed: bool) -> Result<(), String> {
    let out = &job.output.dir;
    let p = path(out);
    let doc = serde_json::json!({
        "dicomflow_version": env!("CARGO_PKG_VERSION"),
        "mixed": mixed,
        "settings": rendering_settings(job),
    });
    let text = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    // Unnamed until whole, so that a failed write (a full disk) leaves nothing behind.
    dicomflow::output::atomic::write_atomic(&p, &text).map_err(|e| format!("{}: {e}", Escaped(&p)))
}

/// Whether the output folder has a record (then every run keeps it up to date).
pub fn exists(job: &Job) -> bool {
    path(&job.output.dir).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_window_or_format_is_found_and_a_changed_naming_is_not() {
        let dir = std::env::temp_dir().join(format!("dicomflow-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut job = Job::default();
        job.output.dir = dir.clone();
        assert_eq!(check(&dir, &job).unwrap(), Verdict::Keep);
        write(&job, false).unwrap();
        assert_eq!(check(&dir, &job).unwrap(), Verdict::Keep);
        let mut other = job.clone();
        other.output.format = dicomflow::output::options::OutputFormat::Jpeg;
        match check(&dir, &other).unwrap() {
            Verdict::Changed(c) => assert!(c[0].starts_with("format:"), "{c:?}"),
            v => panic!("{v:?}"),
        }
        let mut renamed = job.clone();
        renamed.output.png_compression = dicomflow::output::options::PngCompression::Balanced;
        renamed.pipeline.slots = 9;
        assert_eq!(check(&dir, &renamed).unwrap(), Verdict::Keep);
        write(&job, true).unwrap();
        assert!(matches!(check(&dir, &job).unwrap(), Verdict::Changed(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
