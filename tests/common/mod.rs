//! Helpers shared by the integration tests: the binary under test and scratch folders.
#![allow(dead_code)] // each test crate uses a different subset

use std::path::PathBuf;

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
