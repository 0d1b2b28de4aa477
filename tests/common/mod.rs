//! Helpers shared by the integration tests: the binary under test and scratch folders.
#![allow(dead_code)] // each test crate uses a different subset

use std::path::PathBuf;

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
