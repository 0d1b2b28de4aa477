//! Which input owns which output, decided so that the answer never depends on thread timing,
//! and so that no output ever replaces an input.
//!
//! * The scan stage lists every input before it hands any on ([`crate::source::list`], or the
//!   listing `run` started while the backend started: [`crate::source::ListingAhead`]), so
//!   the device and inode of every input file are known before the first output is written:
//!   an output whose path is an input (`run d/scan.png -o d`) is refused.
//! * The scan stage assigns each DICOM file its output name (mirror or pattern) in scan order
//!   (sorted), before any file is rendered: of two inputs with the same output name the first
//!   keeps it, the other fails naming the first ([`Outputs::reserve`]).
//! * A multi-frame file's frame outputs (`x_f0001.png`) may meet the name of another input
//!   (`x_f0001.dcm`): that input keeps it. With mirrored names every such input is known from
//!   the listing; with a pattern, names come from headers as the scan reads them, and a frame
//!   that already took a name keeps it (the [claims](Outputs::claim) are the last word).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::paths::Escaped;
use crate::source::FileKey;

/// The owners of output names during one run.
#[derive(Default)]
pub(crate) struct Outputs {
    /// Device and inode of every input file (set once the listing is done).
    inputs: OnceLock<HashSet<FileKey>>,
    /// Mirrored names that look like frame names (`x_f0001`), with their input: set from the
    /// listing, before any file is loaded.
    frame_like: OnceLock<HashMap<PathBuf, PathBuf>>,
    /// Output paths without extension, assigned by the scan: owner id and path.
    bases: Mutex<HashMap<PathBuf, (usize, PathBuf)>>,
    /// Output files taken by a frame: owner id and path.
    claimed: Mutex<HashMap<PathBuf, (usize, PathBuf)>>,
    /// The output folder, when it held nothing as the run started: no path under it can be an
    /// input, and the check per output (a `stat` of a name not there yet, which waits on the
    /// folder's lock while other threads link their outputs into it) is skipped.
    empty_at_start: OnceLock<PathBuf>,
}

impl Outputs {
    /// Records the identities of the input files (before any candidate is handed on).
    pub fn set_inputs(&self, inputs: HashSet<FileKey>) {
        let _ = self.inputs.set(inputs);
    }

    /// Records that the output folder `dir` held nothing as the run started.
    pub fn set_empty_at_start(&self, dir: PathBuf) {
        let _ = self.empty_at_start.set(dir);
    }

    /// Records the mirrored names of every listed input that look like frame names.
    pub fn set_frame_like(&self, names: HashMap<PathBuf, PathBuf>) {
        let _ = self.frame_like.set(names);
    }

    /// Gives `base` (an output path without extension) to input `id` at `path`, unless an
    /// input earlier in scan order has it: then the reason, naming that input.
    pub fn reserve(&self, base: &Path, id: usize, path: &Path) -> Result<(), String> {
        let mut bases = self.bases.lock().unwrap_or_else(|e| e.into_inner());
        match bases.get(base) {
            Some((other, first)) if *other != id => Err(format!(
                "its output name {} is already the output of {} (first in scan order); rename \
                 one of them, or use --naming",
                Escaped(base),
                Escaped(first)
            )),
            Some(_) => Ok(()),
            None => {
                bases.insert(base.to_path_buf(), (id, path.to_path_buf()));
                Ok(())
            }
        }
    }

    /// Takes `output` (frame `frame` of `frames`, of input `id` at `path`) for this run, or
    /// says why not: the name of another input's output, an output of another frame, or an
    /// input file itself.
    pub fn claim(&self, output: &Path, frames: u32, id: usize, path: &Path) -> Result<(), String> {
        if frames > 1 {
            // A frame's name may be the whole output name of another input.
            let stem = output.with_extension("");
            let other = {
                let bases = self.bases.lock().unwrap_or_else(|e| e.into_inner());
                bases
                    .get(&stem)
                    .filter(|(o, _)| *o != id)
                    .map(|(_, p)| p.clone())
            };
            let other = other.or_else(|| {
                let listed = self.frame_like.get()?.get(&stem)?;
                // Only a DICOM file will want that name (a `x_f0001.txt` will not).
                let dicom = !matches!(
                    crate::decode::probe(listed),
                    Ok(crate::decode::Probe::NotDicom(_)) | Err(_)
                );
                (listed != path && dicom).then(|| listed.clone())
            });
            if let Some(other) = other {
                return Err(format!(
                    "output {} is the output name of {}, which keeps it",
                    Escaped(output),
                    Escaped(&other)
                ));
            }
        }
        {
            let mut claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
            match claimed.get(output) {
                Some((other, first)) if *other != id => {
                    return Err(format!(
                        "output {} is already the output of {}",
                        Escaped(output),
                        Escaped(first)
                    ))
                }
                Some(_) => {}
                None => {
                    claimed.insert(output.to_path_buf(), (id, path.to_path_buf()));
                }
            }
        }
        self.not_an_input(output)
    }

    /// `Err` when `output` is one of the input files (the same device and inode): writing it
    /// would replace an input.
    pub fn not_an_input(&self, output: &Path) -> Result<(), String> {
        let Some(inputs) = self.inputs.get() else {
            return Ok(());
        };
        if self
            .empty_at_start
            .get()
            .is_some_and(|dir| output.starts_with(dir))
        {
            // Only this run has put files there.
            return Ok(());
        }
        // The entry itself, not what a link points to: the link is what would be replaced.
        match std::fs::symlink_metadata(output) {
            Ok(m) if inputs.contains(&crate::source::key_of(&m)) => Err(format!(
                "output {} is an input file of this run: it is never replaced (choose an \
                 output folder that holds no inputs)",
                Escaped(output)
            )),
            _ => Ok(()),
        }
    }
}

impl Outputs {
    /// For an input that arrived while the run goes on (no listing, no claims): `Err` when
    /// `output` is that input file itself (device and inode `input`).
    pub fn not_the_input(&self, output: &Path, input: FileKey) -> Result<(), String> {
        match std::fs::symlink_metadata(output) {
            Ok(m) if crate::source::key_of(&m) == input => Err(format!(
                "output {} is the input file itself: it is never replaced (choose an output \
                 folder outside the watched folders)",
                Escaped(output)
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_check_is_skipped_only_under_a_folder_empty_at_the_start() {
        let dir = std::env::temp_dir().join(format!("dicomflow-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("x.png");
        std::fs::write(&input, b"an input").unwrap();
        let key = crate::source::key_of(&std::fs::metadata(&input).unwrap());
        let o = Outputs::default();
        o.set_inputs([key].into_iter().collect());
        // Another folder was empty: the input's own folder still gets the check.
        o.set_empty_at_start(dir.join("elsewhere"));
        let e = o.not_an_input(&input).unwrap_err();
        assert!(e.contains("is an input file"), "{e}");
        assert!(o.not_an_input(&dir.join("y.png")).is_ok());
        // A folder empty at the start holds nothing of the inputs: no `stat` per output.
        let o = Outputs::default();
        o.set_inputs([key].into_iter().collect());
        o.set_empty_at_start(dir.clone());
        assert!(o.not_an_input(&input).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_first_in_scan_order_keeps_a_name() {
        let o = Outputs::default();
        let base = Path::new("OUT/x");
        assert!(o.reserve(base, 0, Path::new("in/x.dcm")).is_ok());
        let e = o.reserve(base, 1, Path::new("in/x.dicom")).unwrap_err();
        assert!(e.contains("in/x.dcm"), "{e}");
        assert!(o.reserve(base, 0, Path::new("in/x.dcm")).is_ok());
        // A frame of a multi-frame file meets another input's name.
        assert!(o
            .reserve(Path::new("OUT/y_f0001"), 2, Path::new("in/y_f0001.dcm"))
            .is_ok());
        let e = o
            .claim(Path::new("OUT/y_f0001.png"), 3, 3, Path::new("in/y.dcm"))
            .unwrap_err();
        assert!(e.contains("in/y_f0001.dcm"), "{e}");
        assert!(o
            .claim(Path::new("OUT/y_f0002.png"), 3, 3, Path::new("in/y.dcm"))
            .is_ok());
        // The same output twice.
        let e = o
            .claim(Path::new("OUT/y_f0002.png"), 3, 4, Path::new("in/z.dcm"))
            .unwrap_err();
        assert!(e.contains("in/y.dcm"), "{e}");
    }

    #[test]
    fn an_input_is_never_an_output() {
        let dir = crate::scratch_dir("outputs-inputs");
        let input = dir.join("scan.png");
        std::fs::write(&input, b"DICOM really").unwrap();
        let o = Outputs::default();
        let key = crate::source::key_of(&std::fs::metadata(&input).unwrap());
        o.set_inputs(HashSet::from([key]));
        let e = o.claim(&input, 1, 0, &input).unwrap_err();
        assert!(e.contains("is an input file"), "{e}");
        assert!(o.claim(&dir.join("other.png"), 1, 0, &input).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
