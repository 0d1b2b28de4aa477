//! The user's vocabulary for windows and VOI functions (mirrors DCMTK's `+Wi`, `+Ww`, `+Wm`,
//! `+Wn`, `+Wh`, `+Wl`, `+Wfl`/`+Wfs`), parsed from config values and CLI flags.

use std::fmt;
use std::str::FromStr;

/// Which VOI transformation the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WindowSpec {
    /// The file's window, else min-max (the default: `file` is `file:1` with fallback).
    #[default]
    Default,
    /// The n-th window (1-based) stored in the file (`file:N`, DCMTK `+Wi n`).
    File { index: usize },
    /// An explicit window (`C,W`, DCMTK `+Ww c w`).
    Explicit { center: f64, width: f64 },
    /// Min-max of the frame's modality values (DCMTK `+Wm`).
    MinMax,
    /// Min-max ignoring the extreme values (DCMTK `+Wn`).
    MinMaxNoExtremes,
    /// Histogram window that drops `percent` % of pixels at both ends (DCMTK `+Wh pct`).
    Histogram { percent: f64 },
    /// The n-th VOI LUT (1-based) of the file's VOI LUT Sequence (DCMTK `+Wl n`).
    VoiLut { index: usize },
    /// No VOI: modality values scaled over their full range (DCMTK `-W`, its own default).
    None,
}

impl FromStr for WindowSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let index = |n: &str| -> Result<usize, String> {
            match n.trim().parse::<usize>() {
                Ok(i) if i >= 1 => Ok(i),
                _ => Err(format!("`{n}` is not a 1-based index (1, 2, ...)")),
            }
        };
        match s {
            "file" => return Ok(WindowSpec::Default),
            "minmax" => return Ok(WindowSpec::MinMax),
            "minmax-no-extremes" => return Ok(WindowSpec::MinMaxNoExtremes),
            "none" => return Ok(WindowSpec::None),
            _ => {}
        }
        if let Some(n) = s.strip_prefix("file:") {
            return Ok(WindowSpec::File { index: index(n)? });
        }
        if let Some(n) = s.strip_prefix("voi-lut:") {
            return Ok(WindowSpec::VoiLut { index: index(n)? });
        }
        if let Some(p) = s.strip_prefix("histogram:") {
            return match p.trim().parse::<f64>() {
                Ok(pct) if (0.0..50.0).contains(&pct) => Ok(WindowSpec::Histogram { percent: pct }),
                _ => Err(format!(
                    "histogram percentage `{p}` must be a number in [0, 50)"
                )),
            };
        }
        if let Some((c, w)) = s.split_once(',') {
            let center = c
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("window center `{}` is not a number", c.trim()))?;
            let width = w
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("window width `{}` is not a number", w.trim()))?;
            if !center.is_finite() || !width.is_finite() || width < 1.0 {
                return Err(format!(
                    "window `{s}` needs a finite center and a width of at least 1"
                ));
            }
            return Ok(WindowSpec::Explicit { center, width });
        }
        Err(format!(
            "`{s}` is not a window: use file, file:N, minmax, minmax-no-extremes, histogram:PCT, \
             voi-lut:N, none, or C,W (e.g. 40,400)"
        ))
    }
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowSpec::Default => write!(f, "file"),
            WindowSpec::File { index } => write!(f, "file:{index}"),
            WindowSpec::Explicit { center, width } => write!(f, "{center},{width}"),
            WindowSpec::MinMax => write!(f, "minmax"),
            WindowSpec::MinMaxNoExtremes => write!(f, "minmax-no-extremes"),
            WindowSpec::Histogram { percent } => write!(f, "histogram:{percent}"),
            WindowSpec::VoiLut { index } => write!(f, "voi-lut:{index}"),
            WindowSpec::None => write!(f, "none"),
        }
    }
}

/// The VOI LUT function (PS3.3 C.11.2.1.3) used with a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VoiFunction {
    Linear,
    LinearExact,
    Sigmoid,
}

impl FromStr for VoiFunction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "linear" => Ok(VoiFunction::Linear),
            "linear-exact" => Ok(VoiFunction::LinearExact),
            "sigmoid" => Ok(VoiFunction::Sigmoid),
            other => Err(format!(
                "`{other}` is not a VOI function: use file, linear, linear-exact or sigmoid"
            )),
        }
    }
}

impl fmt::Display for VoiFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VoiFunction::Linear => "linear",
            VoiFunction::LinearExact => "linear-exact",
            VoiFunction::Sigmoid => "sigmoid",
        })
    }
}

/// Parses the config/CLI value of `voi_function`: `file` means "what the file says".
pub fn parse_voi_override(s: &str) -> Result<Option<VoiFunction>, String> {
    if s.trim() == "file" {
        Ok(None)
    } else {
        s.parse().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_window_form() {
        assert_eq!("file".parse::<WindowSpec>(), Ok(WindowSpec::Default));
        assert_eq!(
            "file:2".parse::<WindowSpec>(),
            Ok(WindowSpec::File { index: 2 })
        );
        assert_eq!("minmax".parse::<WindowSpec>(), Ok(WindowSpec::MinMax));
        assert_eq!(
            "minmax-no-extremes".parse::<WindowSpec>(),
            Ok(WindowSpec::MinMaxNoExtremes)
        );
        assert_eq!(
            "histogram:5".parse::<WindowSpec>(),
            Ok(WindowSpec::Histogram { percent: 5.0 })
        );
        assert_eq!(
            "voi-lut:1".parse::<WindowSpec>(),
            Ok(WindowSpec::VoiLut { index: 1 })
        );
        assert_eq!(
            "-40,400".parse::<WindowSpec>(),
            Ok(WindowSpec::Explicit {
                center: -40.0,
                width: 400.0
            })
        );
        assert_eq!("none".parse::<WindowSpec>(), Ok(WindowSpec::None));
    }

    #[test]
    fn rejects_bad_windows_with_reason() {
        for bad in [
            "file:0",
            "file:x",
            "histogram:60",
            "40,0",
            "40",
            "a,b",
            "voi-lut:",
        ] {
            let err = bad.parse::<WindowSpec>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn window_spec_round_trips_through_display() {
        for s in [
            "file",
            "file:3",
            "minmax",
            "minmax-no-extremes",
            "histogram:2.5",
            "voi-lut:2",
            "40,400",
            "none",
        ] {
            let spec: WindowSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
        }
    }

    #[test]
    fn voi_override_file_means_none() {
        assert_eq!(parse_voi_override("file"), Ok(None));
        assert_eq!(
            parse_voi_override("sigmoid"),
            Ok(Some(VoiFunction::Sigmoid))
        );
        assert!(parse_voi_override("cubic").is_err());
    }
}
