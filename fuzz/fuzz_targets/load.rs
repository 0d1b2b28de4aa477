//! The loader end to end on arbitrary bytes: probe, open (header, limits, structural and
//! codestream checks), read up to 4 frames, plan and render them on the CPU, exactly as a
//! loader thread and a render worker would. Every error is fine; a panic, an abort, a hang
//! or an out-of-memory is a finding.
//!
//! Panics: the library itself catches panics of dicom-rs codecs in `ImageFile::read_frame`
//! (and the pipeline catches any panic per file), but libFuzzer's panic hook aborts on every
//! panic, caught or not, so those are still reported here. Nothing is wrapped in
//! `catch_unwind` in this target.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::decode::{probe, DecodeLimits, ImageFile, Probe};
use dicomflow::render::spec::{WindowSpec, Windows};
use dicomflow::render::{plan_frame, RenderOptions};

const SCRATCH_PREFIX: &str = "dicomflow-fuzz-";

/// Where the bytes are written: the loader works on files (positioned reads). One file per
/// process; libFuzzer ends a process without running destructors (on a finding, a timeout,
/// or each child of `-fork`), so each new process removes the files of processes that are
/// gone instead.
fn scratch_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        remove_orphans(&dir);
        dir.join(format!("{SCRATCH_PREFIX}{}.dcm", std::process::id()))
    })
}

/// Removes scratch files whose process no longer exists (Linux: no `/proc/PID`).
fn remove_orphans(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|n| n.strip_suffix(".dcm"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let path = scratch_path();
    if std::fs::write(path, data).is_err() {
        return;
    }
    let Ok(kind) = probe(path) else {
        return;
    };
    if matches!(kind, Probe::NotDicom(_)) {
        return;
    }
    let limits = DecodeLimits {
        max_frame_bytes: 64 << 20,
        // Partial decoding takes the most paths through the decoders.
        damaged: dicomflow::decode::Damaged::Render,
    };
    let Ok(mut file) = ImageFile::open(path, kind, limits) else {
        return;
    };
    let info = file.info.clone();
    // Vary the window by input so that every chain (file window, statistics, none) runs.
    let window = match data.len() % 4 {
        0 => WindowSpec::Default,
        1 => WindowSpec::MinMax,
        2 => WindowSpec::Histogram { percent: 5.0 },
        _ => WindowSpec::None,
    };
    // Every other length renders window channels (three windows into one colour image).
    let windows = if data.len() % 8 < 4 {
        Windows::one(window)
    } else {
        let three = vec![window, WindowSpec::MinMax, WindowSpec::Histogram { percent: 1.0 }];
        Windows::new(three).unwrap_or_else(|_| Windows::one(WindowSpec::MinMax))
    };
    let opts = RenderOptions {
        window: windows,
        ..RenderOptions::default()
    };
    let mut input = vec![0u8; info.frame_bytes() as usize];
    let mut scratch = Vec::new();
    let mut renderer = CpuRenderer::default();
    for frame in 0..info.frames.min(4) {
        if file.read_frame(frame, &mut input, &mut scratch).is_err() {
            continue;
        }
        let Ok(plan) = plan_frame(&info, frame, &opts) else {
            continue;
        };
        let mut out = vec![0u8; plan.output_bytes()];
        let _ = renderer.render_bytes(&plan, &input, &mut out);
        if let (Some(overlay), dicomflow::render::plan::Chain::Gray(g)) =
            (&plan.overlay, &plan.chain)
        {
            dicomflow::render::overlay::apply(
                overlay,
                &input,
                g.stored.bytes(),
                &mut out,
                plan.cols,
                plan.rows,
            );
        }
    }
});
