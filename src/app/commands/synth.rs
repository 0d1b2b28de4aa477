//! `dicomflow synth`: write a deterministic phantom series (the library's
//! [`dicomflow::synth`]).

use dicomflow::error::FatalError;

use crate::app::cli::SynthArgs;

/// Writes the series `args` describe.
pub fn execute(a: &SynthArgs, quiet: bool) -> Result<i32, FatalError> {
    let windows = parse_windows(&a.windows)?;
    let opts = dicomflow::synth::SynthOptions {
        size: a.size,
        slices: a.slices,
        signed: a.signed,
        monochrome1: a.monochrome1,
        bits_stored: a.bits_stored,
        eight_bit: a.eight_bit,
        rgb: a.rgb,
        multiframe: a.multiframe,
        windows,
        voi_function: a.voi_function.clone(),
        seed: a.seed,
        threads: 0,
    };
    let written = dicomflow::synth::write_series(&a.out_dir, &opts).map_err(FatalError::Other)?;
    if !quiet {
        crate::app::print::errln(&format!(
            "dicomflow: wrote {} file(s) to {}",
            written.len(),
            dicomflow::paths::Escaped(&a.out_dir)
        ));
    }
    Ok(0)
}

/// `"C,W;C,W"` → the windows.
fn parse_windows(s: &str) -> Result<Vec<(f64, f64)>, FatalError> {
    s.split(';')
        .filter(|w| !w.trim().is_empty())
        .map(|w| {
            let (c, width) = w
                .split_once(',')
                .ok_or_else(|| FatalError::Config(format!("--windows: `{w}` is not C,W")))?;
            let parse = |x: &str| {
                x.trim()
                    .parse::<f64>()
                    .map_err(|_| FatalError::Config(format!("--windows: `{x}` is not a number")))
            };
            Ok((parse(c)?, parse(width)?))
        })
        .collect()
}
