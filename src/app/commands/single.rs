//! One image in, one image out: `run x.dcm -o name.png` writes exactly `name.png`, `-o -` writes
//! the image to stdout, and `-` as input reads one DICOM file from stdin. The pipeline only
//! knows output folders, so the run renders into a scratch folder and the one image is then
//! moved (renamed within the same folder: never seen half written) or copied to stdout.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use dicomflow::error::FatalError;
use dicomflow::paths::Escaped;

use crate::app::cli::RunArgs;

/// The largest DICOM file read from stdin, which is held as a file in a scratch folder.
const MAX_STDIN_BYTES: u64 = 4 << 30;

/// Where the one image goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// This file, named by `-o`.
    File(PathBuf),
    /// Standard output (`-o -`).
    Stdout,
}

/// The output format an image file name asks for (`x.jpg` → `jpeg`), if it is one.
fn format_of(name: &Path) -> Option<&'static str> {
    let ext = name.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "png",
        "jpg" | "jpeg" => "jpeg",
        "tif" | "tiff" => "tiff",
        "bmp" => "bmp",
        "dcm" => "dcm",
        _ => return None,
    })
}

/// Whether `p` is `-` (stdin as input, stdout as output).
pub fn is_dash(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// What `-o` names, for a run of one input file: a file (its name ends in an image extension
/// and no folder of that name exists), stdout, or `None` for an output folder. `-o -` with
/// anything but one input file is a usage error, as is a `--format` the name contradicts.
/// Returns the target and the format it implies.
pub fn target(args: &RunArgs) -> Result<Option<(Target, Option<&'static str>)>, FatalError> {
    let Some(out) = &args.job.output else {
        return Ok(None);
    };
    let one_file = args.manifest.is_none()
        && args.shard.is_none()
        && matches!(args.inputs.as_slice(), [one] if is_dash(one) || one.is_file());
    if is_dash(out) {
        if !one_file {
            return Err(FatalError::Config(
                "-o - writes one image to stdout: give one input file (or - for stdin)".into(),
            ));
        }
        return Ok(Some((Target::Stdout, None)));
    }
    let Some(format) = format_of(out) else {
        return Ok(None);
    };
    if !one_file || out.is_dir() {
        return Ok(None);
    }
    if let Some(asked) = &args.job.format {
        let asked = if asked == "jpg" {
            "jpeg"
        } else {
            asked.as_str()
        };
        if asked != format {
            return Err(FatalError::Config(format!(
                "-o {} asks for {format}, --format for {asked}: give one of them",
                Escaped(out)
            )));
        }
    }
    Ok(Some((Target::File(out.clone()), Some(format))))
}

/// A folder removed when dropped (the run's scratch output, or stdin's copy).
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh scratch folder `name` under `parent`, unique to this process.
fn scratch_in(parent: &Path, name: &str) -> Result<Scratch, FatalError> {
    let dir = parent.join(format!(".dicomflow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| FatalError::OutputDir {
        path: dir.clone(),
        source,
    })?;
    Ok(Scratch(dir))
}

/// The scratch output folder for `target`: beside the file (so that the image is renamed into
/// place on the same file system), or in the temporary folder for stdout.
pub fn scratch_for(target: &Target) -> Result<Scratch, FatalError> {
    match target {
        Target::File(f) => {
            let parent = match f.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            std::fs::create_dir_all(&parent).map_err(|source| FatalError::OutputDir {
                path: parent.clone(),
                source,
            })?;
            scratch_in(&parent, "out")
        }
        Target::Stdout => scratch_in(&std::env::temp_dir(), "stdout"),
    }
}

/// Copies stdin to `stdin.dcm` in a scratch folder and returns both (the folder removed when
/// the scratch is dropped).
pub fn stdin_to_file() -> Result<(Scratch, PathBuf), FatalError> {
    let scratch = scratch_in(&std::env::temp_dir(), "stdin")?;
    let path = scratch.0.join("stdin.dcm");
    let io = |e: std::io::Error| FatalError::Other(format!("reading stdin: {e}"));
    let mut file = std::fs::File::create(&path).map_err(io)?;
    let copied = std::io::copy(
        &mut std::io::stdin().lock().take(MAX_STDIN_BYTES + 1),
        &mut file,
    )
    .map_err(io)?;
    if copied > MAX_STDIN_BYTES {
        return Err(FatalError::Other(format!(
            "reading stdin: more than {} GiB",
            MAX_STDIN_BYTES >> 30
        )));
    }
    if copied == 0 {
        return Err(FatalError::Config(
            "input -: stdin is empty (pipe one DICOM file into it)".into(),
        ));
    }
    Ok((scratch, path))
}

/// Every file the run wrote under `dir`, outside hidden folders (`.dicomflow` state).
fn images_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            match e.file_type() {
                Ok(t) if t.is_dir() && !hidden => stack.push(e.path()),
                Ok(t) if t.is_file() && !hidden => found.push(e.path()),
                _ => {}
            }
        }
    }
    found.sort();
    found
}

/// Moves the one image rendered into `scratch` to `target`. `Ok(false)` when the run rendered
/// none (its failure is already said); an error when it rendered several (a multi-frame
/// file: `--frames N` picks one) or the image cannot be moved or written.
pub fn deliver(scratch: &Scratch, target: &Target) -> Result<bool, String> {
    let images = images_under(&scratch.0);
    let image = match images.as_slice() {
        [] => return Ok(false),
        [one] => one,
        several => {
            return Err(format!(
                "{} images rendered (a multi-frame file?) but -o names one: pick a frame with \
                 --frames N, or give an output folder",
                several.len()
            ))
        }
    };
    match target {
        Target::File(f) => std::fs::rename(image, f)
            .map(|()| true)
            .map_err(|e| format!("{}: {e}", Escaped(f))),
        Target::Stdout => {
            let bytes = std::fs::read(image).map_err(|e| format!("{}: {e}", Escaped(image)))?;
            let mut o = std::io::stdout().lock();
            match o.write_all(&bytes).and_then(|()| o.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(format!("writing to stdout: {e}"))
                }
                _ => Ok(true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_imply_their_format() {
        assert_eq!(format_of(Path::new("a/x.PNG")), Some("png"));
        assert_eq!(format_of(Path::new("x.jpg")), Some("jpeg"));
        assert_eq!(format_of(Path::new("x.tif")), Some("tiff"));
        assert_eq!(format_of(Path::new("out")), None);
        assert_eq!(format_of(Path::new("out.d")), None);
    }
}
