//! Which frames of a multi-frame file a run renders: `all`, or a list such as `1,5-10,last`
//! (1-based, as `dcm2pnm +F`/`+Fr` and `dicom-toimage -F` count them). A frame the list names
//! but the file lacks is simply not there: a single-frame file under `--frames 2` yields nothing,
//! and is reported as skipped.

use std::fmt;
use std::str::FromStr;

/// One end of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// 1-based frame number.
    Number(u32),
    /// The file's last frame.
    Last,
}

impl End {
    /// 1-based frame number in a file of `frames` frames.
    fn resolve(self, frames: u32) -> u32 {
        match self {
            End::Number(n) => n,
            End::Last => frames,
        }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Number(n) => write!(f, "{n}"),
            End::Last => f.write_str("last"),
        }
    }
}

/// The frames to render.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameSelection {
    /// Inclusive ranges; empty = every frame.
    ranges: Vec<(End, End)>,
}

impl FrameSelection {
    /// Every frame.
    pub fn all() -> Self {
        FrameSelection::default()
    }

    /// True when every frame is selected.
    pub fn is_all(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether frame `frame` (0-based) of a file of `frames` frames is selected.
    pub fn contains(&self, frame: u32, frames: u32) -> bool {
        if frame >= frames {
            return false;
        }
        let n = frame + 1;
        self.is_all()
            || self
                .ranges
                .iter()
                .any(|&(a, b)| a.resolve(frames) <= n && n <= b.resolve(frames))
    }

    /// Frames selected in a file of `frames` frames.
    pub fn count(&self, frames: u32) -> u32 {
        (0..frames).filter(|&f| self.contains(f, frames)).count() as u32
    }
}

impl FromStr for FrameSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "all" {
            return Ok(FrameSelection::all());
        }
        let end = |t: &str| -> Result<End, String> {
            let t = t.trim();
            if t == "last" {
                return Ok(End::Last);
            }
            match t.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(End::Number(n)),
                _ => Err(format!(
                    "`{t}` is not a frame number (1, 2, ... or last; frames count from 1)"
                )),
            }
        };
        let mut ranges = Vec::new();
        for item in s.split(',') {
            let range = match item.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (end(a)?, end(b)?);
                    match (a, b) {
                        (End::Number(x), End::Number(y)) if x > y => {
                            return Err(format!("`{}`: the range runs backwards", item.trim()))
                        }
                        (End::Last, End::Number(_)) => {
                            return Err(format!("`{}`: the range runs backwards", item.trim()))
                        }
                        _ => (a, b),
                    }
                }
                None => {
                    let e = end(item)?;
                    (e, e)
                }
            };
            ranges.push(range);
        }
        if ranges.is_empty() {
            return Err("no frames listed: use all, or e.g. 1,5-10,last".into());
        }
        Ok(FrameSelection { ranges })
    }
}

impl fmt::Display for FrameSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return f.write_str("all");
        }
        for (i, (a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

impl serde::Serialize for FrameSelection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picked(spec: &str, frames: u32) -> Vec<u32> {
        let sel: FrameSelection = spec.parse().unwrap();
        (0..frames).filter(|&f| sel.contains(f, frames)).collect()
    }

    #[test]
    fn lists_ranges_and_last() {
        assert_eq!(picked("1,5-10,last", 15), vec![0, 4, 5, 6, 7, 8, 9, 14]);
        assert_eq!(picked("all", 3), vec![0, 1, 2]);
        assert_eq!(picked("last", 1), vec![0]);
        assert_eq!(picked("3-last", 5), vec![2, 3, 4]);
        // Frames the file lacks are not there.
        assert_eq!(picked("2-8", 4), vec![1, 2, 3]);
        assert_eq!(picked("2", 1), Vec::<u32>::new());
        assert_eq!(
            "1,5-10,last".parse::<FrameSelection>().unwrap().count(15),
            8
        );
    }

    #[test]
    fn rejects_bad_lists_with_reason() {
        for bad in ["0", "", "a", "5-2", "last-3", "1,,2", "-3", "1.5"] {
            let e = bad.parse::<FrameSelection>().unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["all", "1,5-10,last", "3-last", "7"] {
            assert_eq!(s.parse::<FrameSelection>().unwrap().to_string(), s);
        }
    }
}
