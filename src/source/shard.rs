//! Splitting a run's inputs into N shards, so that N processes (a Slurm job array, a
//! Kubernetes Indexed Job, or a few processes on one host) each render a disjoint part and
//! together render everything once.
//!
//! Without a manifest a file's shard is a pure function of a key and N, so every task decides
//! alone, while it walks, without talking to the others:
//!
//! ```text
//! key   = the path relative to the input it was found under (components joined by '/', the
//!         path's own bytes), or with `--shard-by series` the file's SeriesInstanceUID
//! h     = FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) of the key's bytes
//! h     = fmix64(h)   (MurmurHash3's 64-bit finalizer: FNV's low bits are poorly mixed)
//! shard = (h × N) >> 64   (the high word of the 128-bit product)
//! ```
//!
//! The definition is fixed: a resubmitted task run by a newer build picks the same files
//! (`partition_is_pinned` holds it). With a manifest the tasks balance bytes instead
//! ([`balance`]): every task reads the same manifest and computes the same plan.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Why a shard request cannot be satisfied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// `I/N` did not parse.
    #[error("--shard {0}: expected I/N (0 <= I < N, e.g. 2/8), slurm or k8s")]
    Syntax(String),
    /// More shards than a plan may have.
    #[error("{0} shards: at most {MAX_SHARDS}")]
    TooMany(u64),
    /// The index is not below the count.
    #[error("shard {index} of {count} does not exist: shards are numbered 0 to {last}", last = .count.saturating_sub(1))]
    OutOfRange { index: u64, count: u64 },
    /// An environment variable the scheduler should have set is missing.
    #[error("--shard {scheduler}: {var} is not set ({hint})")]
    MissingEnv {
        scheduler: &'static str,
        var: &'static str,
        hint: &'static str,
    },
    /// An environment variable does not hold a number.
    #[error("--shard {scheduler}: {var}={value} is not a number")]
    BadEnv {
        scheduler: &'static str,
        var: &'static str,
        value: String,
    },
    /// A Slurm array that does not number its tasks 0..N-1.
    #[error(
        "--shard slurm: the job array is {min}-{max} with {count} task(s), not 0-{last}: \
         shards are numbered from 0 without gaps (sbatch --array=0-{last}); when resubmitting \
         some indices of an N-shard job, give --shard-count N",
        last = .count.saturating_sub(1)
    )]
    SlurmArray { min: u64, max: u64, count: u64 },
    /// `--shard-count` disagrees with the count in `I/N`.
    #[error("--shard-count {given} disagrees with --shard {index}/{count}")]
    CountMismatch { given: u64, index: u64, count: u64 },
    /// `--shard-by` did not parse.
    #[error("--shard-by {0}: expected path or series")]
    By(String),
}

/// The most shards a job may have. Slurm's arrays default to 1001 tasks (`MaxArraySize`, at
/// most 4,000,001); a million shards is more than a job needs, and the bound keeps what a plan
/// holds per shard (a few words) small.
pub const MAX_SHARDS: u64 = 1 << 20;

/// One shard of a run: `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Shard `index` of `count`, checked.
    pub fn new(index: u64, count: u64) -> Result<Shard, ShardError> {
        if count > MAX_SHARDS {
            return Err(ShardError::TooMany(count));
        }
        if count == 0 || index >= count {
            return Err(ShardError::OutOfRange { index, count });
        }
        Ok(Shard {
            index: index as u32,
            count: count as u32,
        })
    }

    /// Whether a key of hash `key_hash` (see [`key_hash`]) belongs to this shard.
    pub fn owns(&self, key_hash: u64) -> bool {
        shard_of(key_hash, self.count) == self.index
    }

    /// The report's file name for this shard: `shard-I-of-N.json`.
    pub fn report_name(&self) -> String {
        format!("shard-{}-of-{}.json", self.index, self.count)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What `--shard` asked for, before the environment is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardRequest {
    /// `I/N` on the command line.
    Fixed(Shard),
    /// A Slurm job array: `SLURM_ARRAY_TASK_ID` of `SLURM_ARRAY_TASK_COUNT`.
    Slurm,
    /// A Kubernetes Indexed Job: `JOB_COMPLETION_INDEX`, N from `--shard-count` or
    /// `DICOMFLOW_SHARD_COUNT`.
    K8s,
}

impl std::str::FromStr for ShardRequest {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Self, ShardError> {
        match s.trim() {
            "slurm" => Ok(ShardRequest::Slurm),
            "k8s" | "kubernetes" => Ok(ShardRequest::K8s),
            t => {
                let syntax = || ShardError::Syntax(s.to_string());
                let (i, n) = t.split_once('/').ok_or_else(syntax)?;
                let i: u64 = i.trim().parse().map_err(|_| syntax())?;
                let n: u64 = n.trim().parse().map_err(|_| syntax())?;
                Shard::new(i, n).map(ShardRequest::Fixed)
            }
        }
    }
}

/// The environment variable that gives N when the scheduler does not (Kubernetes) or when
/// some indices of a Slurm array are resubmitted.
pub const COUNT_ENV: &str = "DICOMFLOW_SHARD_COUNT";

impl ShardRequest {
    /// The shard this process renders. `count` is `--shard-count` (else `DICOMFLOW_SHARD_COUNT`
    /// is read); `env` reads the environment (a parameter so tests need not touch the process's).
    pub fn resolve(
        &self,
        count: Option<u32>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Shard, ShardError> {
        let scheduler = match self {
            ShardRequest::Fixed(s) => {
                return match count {
                    Some(n) if n != s.count => Err(ShardError::CountMismatch {
                        given: n.into(),
                        index: s.index.into(),
                        count: s.count.into(),
                    }),
                    _ => Ok(*s),
                };
            }
            ShardRequest::Slurm => "slurm",
            ShardRequest::K8s => "k8s",
        };
        let number = |var: &'static str| -> Result<Option<u64>, ShardError> {
            match env(var) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| ShardError::BadEnv {
                    scheduler,
                    var,
                    value: v,
                }),
            }
        };
        let required = |var: &'static str, hint: &'static str| -> Result<u64, ShardError> {
            number(var)?.ok_or(ShardError::MissingEnv {
                scheduler,
                var,
                hint,
            })
        };
        let count = match count {
            Some(n) => Some(u64::from(n)),
            None => number(COUNT_ENV)?,
        };
        match self {
            ShardRequest::Slurm => {
                let id = required(
                    "SLURM_ARRAY_TASK_ID",
                    "not a Slurm job array task: submit with sbatch --array=0-N-1",
                )?;
                let max = number("SLURM_ARRAY_TASK_MAX")?;
                if let Some(n) = count {
                    // Resubmitted indices of an N-shard job (--array=2,5): any subset of 0..N.
                    if let Some(max) = max.filter(|&m| m >= n) {
                        return Err(ShardError::OutOfRange {
                            index: max,
                            count: n,
                        });
                    }
                    return Shard::new(id, n);
                }
                let hint = "Slurm sets it for job arrays; give --shard-count N";
                let tasks = required("SLURM_ARRAY_TASK_COUNT", hint)?;
                let min = required("SLURM_ARRAY_TASK_MIN", hint)?;
                let max = max.ok_or(ShardError::MissingEnv {
                    scheduler,
                    var: "SLURM_ARRAY_TASK_MAX",
                    hint,
                })?;
                if min != 0 || max.checked_sub(min).map(|d| d + 1) != Some(tasks) {
                    return Err(ShardError::SlurmArray {
                        min,
                        max,
                        count: tasks,
                    });
                }
                Shard::new(id, tasks)
            }
            _ => {
                let id = required(
                    "JOB_COMPLETION_INDEX",
                    "not a pod of an Indexed Job: set completionMode: Indexed",
                )?;
                let n = count.ok_or(ShardError::MissingEnv {
                    scheduler,
                    var: COUNT_ENV,
                    hint: "give --shard-count N, or set it to the Job's completions",
                })?;
                Shard::new(id, n)
            }
        }
    }
}

/// What decides a file's shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShardBy {
    /// The file's path relative to its input (no file is opened to decide).
    #[default]
    Path,
    /// The file's SeriesInstanceUID: a series stays whole in one shard (every file's header
    /// is read to decide, unless a manifest made with `--with-series` has the UIDs).
    Series,
}

impl std::str::FromStr for ShardBy {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Self, ShardError> {
        match s.trim() {
            "path" => Ok(ShardBy::Path),
            "series" => Ok(ShardBy::Series),
            _ => Err(ShardError::By(s.to_string())),
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of the bytes `parts` yield, in order.
fn fnv1a64<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = FNV_OFFSET;
    for part in parts {
        for &b in part {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    h
}

/// FNV-1a 64 of `bytes` (also used for fingerprints of plans and manifests).
pub fn fnv1a64_of(bytes: &[u8]) -> u64 {
    fnv1a64([bytes])
}

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The hash of a key (a relative path's or a UID's bytes) that [`shard_of`] maps to a shard.
pub fn key_hash(key: &[u8]) -> u64 {
    fmix64(fnv1a64_of(key))
}

/// [`key_hash`] of a relative path: its components joined by `/`, whatever the separators
/// and `.` components it was written with.
pub fn path_hash(rel: &Path) -> u64 {
    let mut first = true;
    let parts = rel.components().filter_map(|c| match c {
        Component::CurDir => None,
        c => Some(c.as_os_str().as_bytes()),
    });
    let joined = parts.flat_map(|p| {
        let sep: &[u8] = if std::mem::take(&mut first) {
            b""
        } else {
            b"/"
        };
        [sep, p]
    });
    fmix64(fnv1a64(joined))
}

/// The shard of a key hash among `count` (`count` > 0).
pub fn shard_of(key_hash: u64, count: u32) -> u32 {
    ((u128::from(key_hash) * u128::from(count)) >> 64) as u32
}

/// Assigns items of the given weights (bytes) to `count` shards, largest first onto the
/// lightest shard (ties: the lower item index first, the lower shard first), so every caller
/// with the same weights gets the same plan. The heaviest shard exceeds the mean by less than
/// the largest item (Graham's bound for list scheduling), and in practice by far less.
pub fn balance(weights: &[u64], count: u32) -> Vec<u32> {
    let count = count.max(1);
    let mut order: Vec<u32> = (0..weights.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        weights[b as usize]
            .cmp(&weights[a as usize])
            .then(a.cmp(&b))
    });
    let mut shards: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>> =
        (0..count).map(|s| std::cmp::Reverse((0, s))).collect();
    let mut plan = vec![0u32; weights.len()];
    for i in order {
        if let Some(std::cmp::Reverse((load, s))) = shards.pop() {
            plan[i as usize] = s;
            shards.push(std::cmp::Reverse((
                load.saturating_add(weights[i as usize]),
                s,
            )));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// splitmix64: a small deterministic generator for the property tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            fmix64(self.0)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn fnv_matches_the_published_vectors() {
        // From the FNV reference (isthe.com/chongo/tech/comp/fnv): FNV-1a 64.
        assert_eq!(fnv1a64_of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64_of(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64_of(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn partition_is_pinned() {
        // Computed outside Rust from the definition in the module's documentation (Python,
        // docs/sharding.md): a change here moves files between the shards of a job that is
        // half done, so it must never happen silently.
        assert_eq!(key_hash(b"CT/IM0001.dcm"), 0xf7bb_268c_228a_28b5);
        assert_eq!(shard_of(key_hash(b"CT/IM0001.dcm"), 8), 7);
        assert_eq!(shard_of(key_hash(b"1.2.840.113619.2.55.3"), 4), 1);
    }

    #[test]
    fn path_keys_ignore_how_the_path_was_written() {
        let h = path_hash(Path::new("a/b/c.dcm"));
        assert_eq!(h, key_hash(b"a/b/c.dcm"));
        assert_eq!(path_hash(Path::new("./a//b/./c.dcm")), h);
        assert_ne!(path_hash(Path::new("a/bc.dcm")), h);
        assert_eq!(path_hash(Path::new("x")), key_hash(b"x"));
    }

    /// A random tree: relative paths of 1..4 components.
    fn random_tree(rng: &mut Rng, files: usize) -> Vec<std::path::PathBuf> {
        let mut set = std::collections::BTreeSet::new();
        while set.len() < files {
            let depth = 1 + rng.below(4);
            let mut p = std::path::PathBuf::new();
            for d in 0..depth {
                let name = if d + 1 == depth {
                    format!("IM{:05}.dcm", rng.below(100_000))
                } else {
                    format!("s{}", rng.below(6))
                };
                p.push(name);
            }
            set.insert(p);
        }
        set.into_iter().collect()
    }

    #[test]
    fn shards_are_disjoint_and_cover_random_trees_for_every_count() {
        let mut rng = Rng(20);
        for round in 0..30 {
            let files = 1 + rng.below(400) as usize;
            let tree = random_tree(&mut rng, files);
            for n in 1..=16u32 {
                let mut owners = vec![0u32; tree.len()];
                for i in 0..n {
                    let shard = Shard::new(i.into(), n.into()).unwrap();
                    for (f, rel) in tree.iter().enumerate() {
                        if shard.owns(path_hash(rel)) {
                            owners[f] += 1;
                        }
                    }
                }
                assert!(
                    owners.iter().all(|&o| o == 1),
                    "round {round}, N = {n}: a file in {} shards",
                    owners.iter().find(|&&o| o != 1).unwrap()
                );
            }
        }
    }

    #[test]
    fn assignment_ignores_listing_order_and_threads() {
        let mut rng = Rng(7);
        let tree = random_tree(&mut rng, 500);
        let plan = |paths: &[std::path::PathBuf]| {
            let mut v: Vec<_> = paths
                .iter()
                .map(|p| (p.clone(), shard_of(path_hash(p), 7)))
                .collect();
            v.sort();
            v
        };
        let reference = plan(&tree);
        // Another listing order.
        let mut shuffled = tree.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        assert_eq!(plan(&shuffled), reference);
        // Decided by 1, 2 and 8 threads at once, each taking every k-th file.
        for threads in [1usize, 2, 8] {
            let parts: Vec<Vec<_>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let tree = &shuffled;
                        s.spawn(move || {
                            tree.iter()
                                .skip(t)
                                .step_by(threads)
                                .map(|p| (p.clone(), shard_of(path_hash(p), 7)))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut all: Vec<_> = parts.into_iter().flatten().collect();
            all.sort();
            assert_eq!(all, reference, "{threads} threads");
        }
    }

    #[test]
    fn hash_shards_hold_similar_counts() {
        // 16,000 numbered slices over 16 shards: about 1000 each (binomial sd ~31).
        let counts = (0..16_000).fold(vec![0u32; 16], |mut c, i| {
            c[shard_of(key_hash(format!("series/IM{i:05}.dcm").as_bytes()), 16) as usize] += 1;
            c
        });
        assert!(
            counts.iter().all(|&c| (880..=1120).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn balance_is_within_ten_percent_on_mixed_sizes() {
        // Sizes of the synth phantom's files: 512² and 2000² 16-bit slices plus headers.
        let (small, large) = (512 * 512 * 2 + 1_300, 2000 * 2000 * 2 + 1_300);
        let mut rng = Rng(3);
        for (n_small, n_large) in [(400, 40), (1000, 10), (64, 8), (3000, 300)] {
            let mut w: Vec<u64> = (0..n_small)
                .map(|_| small)
                .chain((0..n_large).map(|_| large))
                .collect();
            for i in (1..w.len()).rev() {
                w.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let plan = balance(&w, 8);
            let mut load = [0u64; 8];
            for (i, &s) in plan.iter().enumerate() {
                load[s as usize] += w[i];
            }
            let mean = w.iter().sum::<u64>() as f64 / 8.0;
            let max = *load.iter().max().unwrap() as f64;
            assert!(
                max <= 1.10 * mean,
                "{n_small} + {n_large}: {load:?}, max/mean {:.3}",
                max / mean
            );
            // Deterministic: the same weights give the same plan.
            assert_eq!(balance(&w, 8), plan);
        }
        assert!(balance(&[], 4).is_empty());
        assert_eq!(balance(&[5, 9, 1], 1), vec![0, 0, 0]);
        assert_eq!(balance(&[5, 9, 1], 3), vec![1, 0, 2]);
    }

    #[test]
    fn requests_parse_and_resolve() {
        let none = env_of(&[]);
        let fixed: ShardRequest = "2/8".parse().unwrap();
        assert_eq!(
            fixed.resolve(None, &none).unwrap(),
            Shard { index: 2, count: 8 }
        );
        assert_eq!(fixed.resolve(Some(8), &none).unwrap().to_string(), "2/8");
        assert!(matches!(
            fixed.resolve(Some(4), &none),
            Err(ShardError::CountMismatch { .. })
        ));
        for bad in ["8/8", "1/0", "x/2", "3", "-1/4", "", "0/2000000"] {
            assert!(bad.parse::<ShardRequest>().is_err(), "{bad}");
        }
        assert_eq!(Shard::new(1, 4).unwrap().report_name(), "shard-1-of-4.json");
    }

    #[test]
    fn slurm_arrays_must_number_tasks_from_zero_without_gaps() {
        let slurm = ShardRequest::Slurm;
        let array = |id: &str, min: &str, max: &str, count: &str| {
            env_of(&[
                ("SLURM_ARRAY_TASK_ID", id),
                ("SLURM_ARRAY_TASK_MIN", min),
                ("SLURM_ARRAY_TASK_MAX", max),
                ("SLURM_ARRAY_TASK_COUNT", count),
            ])
        };
        assert_eq!(
            slurm.resolve(None, &array("3", "0", "3", "4")).unwrap(),
            Shard { index: 3, count: 4 }
        );
        let e = slurm.resolve(None, &array("3", "1", "4", "4")).unwrap_err();
        assert!(e.to_string().contains("1-4 with 4 task(s)"), "{e}");
        // 0-6:2 has 4 tasks: a gap.
        let e = slurm.resolve(None, &array("2", "0", "6", "4")).unwrap_err();
        assert!(e.to_string().contains("--shard-count"), "{e}");
        let e = slurm.resolve(None, &env_of(&[])).unwrap_err();
        assert!(e.to_string().contains("SLURM_ARRAY_TASK_ID"), "{e}");
        let e = slurm.resolve(None, &array("x", "0", "3", "4")).unwrap_err();
        assert!(matches!(e, ShardError::BadEnv { .. }), "{e}");
        // A resubmitted subset (--array=2,5) of an 8-shard job.
        let resubmit = array("5", "2", "5", "2");
        assert_eq!(
            slurm.resolve(Some(8), &resubmit).unwrap(),
            Shard { index: 5, count: 8 }
        );
        let with_env = env_of(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MAX", "5"),
            (COUNT_ENV, "8"),
        ]);
        assert_eq!(slurm.resolve(None, &with_env).unwrap().to_string(), "5/8");
        assert!(slurm.resolve(Some(4), &resubmit).is_err());
    }

    #[test]
    fn kubernetes_needs_a_count() {
        let k8s: ShardRequest = "k8s".parse().unwrap();
        let env = env_of(&[("JOB_COMPLETION_INDEX", "6")]);
        let e = k8s.resolve(None, &env).unwrap_err();
        assert!(e.to_string().contains(COUNT_ENV), "{e}");
        assert_eq!(k8s.resolve(Some(7), &env).unwrap().to_string(), "6/7");
        assert!(k8s.resolve(Some(6), &env).is_err());
        let env = env_of(&[("JOB_COMPLETION_INDEX", "0"), (COUNT_ENV, "3")]);
        assert_eq!(k8s.resolve(None, &env).unwrap().to_string(), "0/3");
        let e = k8s.resolve(Some(3), &env_of(&[])).unwrap_err();
        assert!(e.to_string().contains("JOB_COMPLETION_INDEX"), "{e}");
    }
}
