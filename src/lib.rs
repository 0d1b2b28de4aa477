//! dicomflow turns folders of DICOM images into 8-bit images through an overlapped pipeline:
//! loader threads decode stored values straight into a ring of reusable slots, a backend (CPU
//! reference, or CUDA when a GPU is usable) executes the render chain, and writer threads
//! encode and atomically write the outputs. Rendering is bit-exact with DCMTK.
//!
//! This is the library a program embedding dicomflow uses; the `dicomflow` binary (`src/app/`)
//! adds the command line, the configuration file, the dashboard and the JSON report on top.
//! Following one slice from disk to PNG, the folders read in order:
//! [`source`] (finding inputs) → [`decode`] (header, stored values, LUTs) → [`render`] (the
//! chain as data) → [`backend`] (executing it: CPU reference or CUDA) → [`output`] (encoding,
//! naming, atomic writes), driven by [`pipeline`] (stages, channels, sizing) over the slots of
//! [`memory`]; [`observe`] (statistics and trace) records what happened. The imports between
//! these folders form no cycle: [`decode`] needs only [`memory`]; [`render`] and [`output`] build
//! on [`decode`]; [`source`] on [`decode`]; [`backend`] and [`pipeline`] on all of those; and
//! [`synth`], which writes phantom series, on [`render`] and [`output`].

pub mod backend;
pub mod decode;
pub mod error;
pub mod host;
pub mod memory;
pub mod observe;
pub mod output;
pub mod paths;
pub mod pipeline;
pub mod render;
pub mod source;
/// A deterministic phantom series (the `synth` command, tests and benchmarks): it uses the
/// render and output components, so it sits beside them, not inside `source`.
pub mod synth;

/// A fresh, empty scratch folder for a unit test, unique to this process and `name`.
#[cfg(test)]
pub(crate) fn scratch_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dicomflow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
