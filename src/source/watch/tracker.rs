//! When a file in a watched folder is ready to render, and that each version of it is
//! rendered once. A file seen (by an event or a rescan) waits until it has not changed for the
//! settle time, then is checked for completeness; an incomplete file is checked again with a
//! growing delay, and handed on as it is once it has stayed incomplete too long (the pipeline
//! then reports why it cannot be read). A version is the file's size, modification time and
//! inode: the same version is never handed on twice, a new one (rewritten, replaced by a
//! rename) is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub len: u64,
    pub mtime_ns: i128,
    pub ino: u64,
}

impl Version {
    /// The version of a file from its metadata, and how long ago it was last modified.
    pub fn of(meta: &std::fs::Metadata) -> (Version, Duration) {
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
        let age = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .unwrap_or_default();
        (
            Version {
                len: meta.len(),
                mtime_ns,
                ino: meta.ino(),
            },
            age,
        )
    }
}

/// A file waiting to be ready.
#[derive(Debug)]
struct Pending {
    version: Version,
    /// When it last changed (as far as we know).
    changed: Instant,
    next_check: Instant,
    checks: u32,
    /// Found by the first pass over the folder (its existing outputs are kept).
    first_pass: bool,
}

/// What to do with a file after its check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// Complete: render it.
    Complete { first_pass: bool },
    /// Still incomplete after the give-up time: render it as it is (and let the pipeline say
    /// what is wrong), with the last reason it was found incomplete.
    GaveUp { first_pass: bool, reason: String },
}

/// The state of every file seen.
#[derive(Debug)]
pub struct Tracker {
    pending: HashMap<PathBuf, Pending>,
    /// The version last handed on, per file.
    handed: HashMap<PathBuf, Version>,
    settle: Duration,
    give_up: Duration,
}

/// Longest delay between two checks of an incomplete file.
const MAX_RECHECK: Duration = Duration::from_secs(5);

impl Tracker {
    /// A tracker that waits `settle` after the last change before checking a file, and hands
    /// an incomplete file on `give_up` after its last change.
    pub fn new(settle: Duration, give_up: Duration) -> Tracker {
        Tracker {
            pending: HashMap::new(),
            handed: HashMap::new(),
            settle,
            give_up: give_up.max(settle),
        }
    }

    /// A file was seen as `version`, last modified `age` ago. Nothing happens when this
    /// version was handed on already or is already waiting.
    pub fn saw(&mut self, path: &Path, version: Version, age: Duration, now: Instant, first: bool) {
        if self.handed.get(path) == Some(&version) {
            return;
        }
        if let Some(p) = self.pending.get_mut(path) {
            if p.version == version {
                return;
            }
            // Changed while waiting: wait again from now.
            p.version = version;
            p.changed = now;
            p.next_check = now + self.settle;
            p.checks = 0;
            return;
        }
        // A file older than the settle time is settled already.
        let changed = now.checked_sub(age.min(self.settle)).unwrap_or(now);
        self.pending.insert(
            path.to_path_buf(),
            Pending {
                version,
                changed,
                next_check: changed + self.settle,
                checks: 0,
                first_pass: first,
            },
        );
    }

    /// A file went away (deleted or moved out).
    pub fn forget(&mut self, path: &Path) {
        self.pending.remove(path);
        self.handed.remove(path);
    }

    /// Files whose check is due at `now`.
    pub fn due(&self, now: Instant) -> Vec<PathBuf> {
        self.pending
            .iter()
            .filter(|(_, p)| p.next_check <= now)
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Files waiting.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// The outcome of checking `path`: its version now (`None`: gone) and whether it is
    /// complete. Returns what to do with it, if anything yet.
    pub fn checked(
        &mut self,
        path: &Path,
        now_version: Option<Version>,
        complete: Result<(), String>,
        now: Instant,
    ) -> Option<Ready> {
        let Some(version) = now_version else {
            self.pending.remove(path);
            return None;
        };
        let p = self.pending.get_mut(path)?;
        if p.version != version {
            p.version = version;
            p.changed = now;
            p.next_check = now + self.settle;
            p.checks = 0;
            return None;
        }
        let ready = match complete {
            Ok(()) => Ready::Complete {
                first_pass: p.first_pass,
            },
            Err(reason) if now.saturating_duration_since(p.changed) >= self.give_up => {
                Ready::GaveUp {
                    first_pass: p.first_pass,
                    reason,
                }
            }
            Err(_) => {
                // Check again later, less often each time (a writer paused mid-file).
                let delay = self
                    .settle
                    .max(Duration::from_millis(50))
                    .saturating_mul(1 << p.checks.min(6))
                    .min(MAX_RECHECK);
                p.checks += 1;
                p.next_check = now + delay;
                return None;
            }
        };
        self.pending.remove(path);
        self.handed.insert(path.to_path_buf(), version);
        Some(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(len: u64, t: i128) -> Version {
        Version {
            len,
            mtime_ns: t,
            ino: 1,
        }
    }

    #[test]
    fn a_version_is_handed_on_once_and_a_new_one_again() {
        let settle = Duration::from_millis(100);
        let mut t = Tracker::new(settle, Duration::from_secs(1));
        let p = Path::new("/w/a.dcm");
        let t0 = Instant::now();
        t.saw(p, v(10, 1), Duration::ZERO, t0, false);
        assert!(t.due(t0).is_empty(), "not settled yet");
        let t1 = t0 + settle;
        assert_eq!(t.due(t1), vec![p.to_path_buf()]);
        assert_eq!(
            t.checked(p, Some(v(10, 1)), Ok(()), t1),
            Some(Ready::Complete { first_pass: false })
        );
        // The same version seen again (a rescan, a metadata event): nothing.
        t.saw(p, v(10, 1), Duration::from_secs(9), t1, false);
        assert_eq!(t.waiting(), 0);
        // Rewritten: a new version, handed on again once settled.
        t.saw(p, v(12, 2), Duration::ZERO, t1, false);
        assert_eq!(t.waiting(), 1);
        let t2 = t1 + settle;
        assert!(t.checked(p, Some(v(12, 2)), Ok(()), t2).is_some());
    }

    #[test]
    fn old_files_are_settled_at_once_and_changes_restart_the_wait() {
        let settle = Duration::from_millis(500);
        let mut t = Tracker::new(settle, Duration::from_secs(10));
        let (a, b) = (Path::new("/w/old.dcm"), Path::new("/w/growing.dcm"));
        let t0 = Instant::now();
        t.saw(a, v(10, 1), Duration::from_secs(60), t0, true);
        t.saw(b, v(10, 1), Duration::ZERO, t0, false);
        assert_eq!(t.due(t0), vec![a.to_path_buf()]);
        assert_eq!(
            t.checked(a, Some(v(10, 1)), Ok(()), t0),
            Some(Ready::Complete { first_pass: true })
        );
        // b grew between the event and its check: not checked, the wait starts again.
        let t1 = t0 + settle;
        assert_eq!(t.checked(b, Some(v(20, 2)), Ok(()), t1), None);
        assert!(t.due(t1).is_empty());
        assert!(t.due(t1 + settle).contains(&b.to_path_buf()));
        // Gone before its check.
        assert_eq!(t.checked(b, None, Ok(()), t1 + settle), None);
        assert_eq!(t.waiting(), 0);
    }

    #[test]
    fn incomplete_files_are_rechecked_then_handed_on_with_the_reason() {
        let settle = Duration::from_millis(100);
        let mut t = Tracker::new(settle, Duration::from_secs(2));
        let p = Path::new("/w/cut.dcm");
        let t0 = Instant::now();
        t.saw(p, v(10, 1), Duration::ZERO, t0, false);
        let mut now = t0 + settle;
        let mut checks = 0;
        let ready = loop {
            let due = t.due(now);
            if !due.is_empty() {
                checks += 1;
                if let Some(r) = t.checked(p, Some(v(10, 1)), Err("cut".into()), now) {
                    break r;
                }
            }
            now += Duration::from_millis(50);
            assert!(now < t0 + Duration::from_secs(10), "never handed on");
        };
        assert_eq!(
            ready,
            Ready::GaveUp {
                first_pass: false,
                reason: "cut".into()
            }
        );
        assert!(now >= t0 + Duration::from_secs(2));
        // Back-off: a handful of checks, not one per tick.
        assert!((3..10).contains(&checks), "{checks} checks");
        // Completed later (a new version): handed on again.
        t.saw(p, v(20, 2), Duration::ZERO, now, false);
        assert!(t.checked(p, Some(v(20, 2)), Ok(()), now + settle).is_some());
        // Removed and recreated with the same version: seen anew.
        t.forget(p);
        t.saw(p, v(20, 2), Duration::from_secs(5), now, false);
        assert_eq!(t.waiting(), 1);
    }
}
