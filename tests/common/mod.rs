//! Helpers shared by the integration tests: the binary under test and scratch folders.
#![allow(dead_code)] // each test crate uses a different subset

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod schema;

/// The `dicomflow` binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dicomflow")
}

/// A fresh, empty scratch folder unique to this test process and `name`.
pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicomflow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A PNG that decodes to its end (not cut short).
pub fn decodes_completely(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let Ok(mut reader) = decoder.read_info() else {
        return false;
    };
    let Some(size) = reader.output_buffer_size() else {
        return false;
    };
    let mut buf = vec![0; size];
    reader.next_frame(&mut buf).is_ok() && reader.finish().is_ok()
}

/// Every file under `dir` (relative path → bytes), leaving out the run's own `.dicomflow`
/// folder (shard reports): what two runs' outputs are compared by.
pub fn output_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().is_some_and(|n| n == ".dicomflow") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A JSON file, parsed.
pub fn read_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}
