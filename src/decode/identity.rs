//! The identifying UIDs of a file (study, series, instance), read from the start of its
//! header only: what `--shard-by series` and `dicomflow scan --with-series` need, at the cost
//! of a few kilobytes per file rather than a full header parse.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use dicom_core::Tag;
use dicom_dictionary_std::tags;
use dicom_object::{DicomCollectorOptions, InMemDicomObject, OpenFileOptions};

use super::info::opt_str;
use super::{guard, probe::Probe, DecodeError};

/// The first tag after SeriesInstanceUID (0020,000E): parsing stops there.
const AFTER_SERIES_UID: Tag = Tag(0x0020, 0x000F);

/// A file's UIDs; `None` where the file has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileUids {
    pub study: Option<String>,
    pub series: Option<String>,
    pub sop_instance: Option<String>,
}

/// Reads the UIDs of a file that [`probe`](super::probe) found to be DICOM. Hostile files are
/// checked first, as for a full open ([`guard::check_structure`]); a panic in the parser is
/// an error, not a crash.
pub fn read_uids(path: &Path, kind: &Probe) -> Result<FileUids, DecodeError> {
    // The UIDs come before the pixel data: the guard need not bound it more than a full open
    // would, and it stops the walk before Pixel Data's value anyway.
    let max_pixel_bytes = super::DecodeLimits::default().max_frame_bytes;
    let fail = |what: &str, e: String| DecodeError::Fail(format!("{what}: {e}"));
    guard::check_structure(path, kind, max_pixel_bytes).map_err(DecodeError::Fail)?;
    let read = || -> Result<FileUids, DecodeError> {
        let of = |obj: &InMemDicomObject| FileUids {
            study: opt_str(obj, tags::STUDY_INSTANCE_UID),
            series: opt_str(obj, tags::SERIES_INSTANCE_UID),
            sop_instance: opt_str(obj, tags::SOP_INSTANCE_UID),
        };
        match kind {
            Probe::FileMeta => {
                let obj = OpenFileOptions::new()
                    .read_until(AFTER_SERIES_UID)
                    .open_file(path)
                    .map_err(|e| fail("cannot parse DICOM header", super::error_chain(&e)))?;
                Ok(of(&obj))
            }
            Probe::BareDataset { transfer_syntax } => {
                let mut collector = DicomCollectorOptions::new()
                    .read_preamble(dicom_object::file::ReadPreamble::Never)
                    .expected_ts(*transfer_syntax)
                    .open_file(path)
                    .map_err(|e| fail("cannot open", super::error_chain(&e)))?;
                let mut obj = InMemDicomObject::new_empty();
                collector
                    .read_dataset_up_to_pixeldata(&mut obj)
                    .map_err(|e| fail("cannot parse DICOM data set", super::error_chain(&e)))?;
                Ok(of(&obj))
            }
            Probe::NotDicom(reason) => Err(DecodeError::Skip(reason.clone())),
        }
    };
    catch_unwind(AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(DecodeError::Fail(
            "internal error while reading the header's UIDs (caught panic; please report this file)"
                .into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_uids_of_a_synth_slice_and_refuses_others() {
        let dir = crate::scratch_dir("identity");
        let opts = crate::synth::SynthOptions {
            size: 16,
            slices: 2,
            ..Default::default()
        };
        let files = crate::synth::write_series(&dir, &opts).unwrap();
        let a = read_uids(&files[0], &Probe::FileMeta).unwrap();
        let b = read_uids(&files[1], &Probe::FileMeta).unwrap();
        assert!(
            a.series.as_deref().is_some_and(|s| s.starts_with("2.25.")),
            "{a:?}"
        );
        assert_eq!(a.series, b.series);
        assert_eq!(a.study, b.study);
        assert_ne!(a.sop_instance, b.sop_instance);
        assert!(a.sop_instance.is_some());

        let text = dir.join("notes.txt");
        std::fs::write(&text, b"not DICOM").unwrap();
        let kind = crate::decode::probe(&text).unwrap();
        assert!(matches!(read_uids(&text, &kind), Err(DecodeError::Skip(_))));
        let bytes = std::fs::read(&files[0]).unwrap();
        let cut = dir.join("cut.dcm");
        std::fs::write(&cut, &bytes[..200]).unwrap();
        assert!(matches!(
            read_uids(&cut, &Probe::FileMeta),
            Err(DecodeError::Fail(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
