//! `dicomflow inspect FOLDER`: one line per series found under the folder (UIDs, description,
//! modality, size, frames, transfer syntax, windows, files), then a total. Headers only: no
//! pixel data is read.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use dicom_encoding::transfer_syntax::TransferSyntaxIndex;

use dicomflow::decode::{probe, DecodeLimits, ImageFile, Probe};
use dicomflow::paths::Escaped;
use dicomflow::source::Sources;

/// What one series' files have in common, and what differs.
#[derive(Default)]
struct Series {
    study: String,
    description: String,
    modality: String,
    sizes: Vec<String>,
    syntaxes: Vec<String>,
    windows: Vec<String>,
    files: usize,
    frames: u64,
    first: String,
}

/// Adds `v` to `list` unless it is there (keeps the order of first sight).
fn add(list: &mut Vec<String>, v: String) {
    if !list.contains(&v) {
        list.push(v);
    }
}

/// Describes the series under `dir`.
pub fn describe(dir: &Path) -> String {
    let cancel = AtomicBool::new(false);
    let listing = Sources::walk(&[dir.to_path_buf()]).list(None, &cancel);
    let limits = DecodeLimits {
        max_frame_bytes: dicomflow::pipeline::options::PipelineOptions::default().max_frame_bytes,
        damaged: Default::default(),
    };
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    let (mut not_dicom, mut unreadable) = (0usize, Vec::new());
    for (path, _) in listing.files() {
        let kind = match probe(path) {
            Ok(Probe::NotDicom(_)) => {
                not_dicom += 1;
                continue;
            }
            Ok(k) => k,
            Err(e) => {
                unreadable.push(format!("{}: {e}", Escaped(path)));
                continue;
            }
        };
        let file = match ImageFile::open(path, kind, limits) {
            Ok(f) => f,
            Err(e) => {
                unreadable.push(format!("{}: {e}", Escaped(path)));
                continue;
            }
        };
        let i = &file.info;
        let value = |k: &str| i.naming.get(k).cloned().unwrap_or_default();
        let uid = i
            .series_uid
            .clone()
            .unwrap_or_else(|| "(no SeriesInstanceUID)".into());
        let s = series.entry(uid).or_default();
        if s.files == 0 {
            s.study = value("StudyInstanceUID");
            s.description = value("SeriesDescription");
            s.modality = i.modality.clone().unwrap_or_default();
            s.first = Escaped(path).to_string();
        }
        s.files += 1;
        s.frames += u64::from(i.frames);
        add(&mut s.sizes, format!("{}x{}", i.cols, i.rows));
        let syntax = dicom_transfer_syntax_registry::TransferSyntaxRegistry
            .get(&i.transfer_syntax)
            .map(|t| t.name().to_string())
            .unwrap_or_else(|| i.transfer_syntax.clone());
        add(&mut s.syntaxes, syntax);
        for w in &i.attrs.windows {
            add(&mut s.windows, format!("{},{}", w.center, w.width));
        }
    }
    let mut out = String::new();
    let (mut files, mut frames) = (0usize, 0u64);
    for (uid, s) in &series {
        files += s.files;
        frames += s.frames;
        let _ = writeln!(
            out,
            "series {uid}  study {}  {}{}  {}  {} file(s), {} frame(s)  {}  windows {}  first {}",
            if s.study.is_empty() { "-" } else { &s.study },
            if s.modality.is_empty() {
                "-"
            } else {
                &s.modality
            },
            if s.description.is_empty() {
                String::new()
            } else {
                format!(" \"{}\"", s.description)
            },
            s.sizes.join(", "),
            s.files,
            s.frames,
            s.syntaxes.join(", "),
            if s.windows.is_empty() {
                "none".to_string()
            } else {
                s.windows.join(" ")
            },
            s.first,
        );
    }
    let _ = writeln!(
        out,
        "total: {} series, {files} DICOM file(s), {frames} frame(s); {not_dicom} other file(s); \
         {} unreadable",
        series.len(),
        unreadable.len()
    );
    for u in &unreadable {
        let _ = writeln!(out, "  unreadable: {u}");
    }
    out
}
