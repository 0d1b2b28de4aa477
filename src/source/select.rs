//! Which inputs a run reads: every file under the inputs, one shard of them (decided per file
//! while walking, by the hash of [`shard`](super::shard)), or one shard of a manifest (no
//! walk; balanced by bytes).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use std::collections::HashSet;

use super::manifest::{Entry, ManifestPlan};
use super::shard::{self, Shard, ShardBy};
use super::walk::{key_of, walk, Found};
use super::{Listing, ScanItem};
use crate::decode::identity::read_uids;

/// What a run reads.
#[derive(Debug, Clone)]
pub enum Sources {
    /// The files and folders given, walked (folders recursively, in name order); with a shard,
    /// only the files whose key hashes to it.
    Walk {
        inputs: Vec<PathBuf>,
        shard: Option<(Shard, ShardBy)>,
    },
    /// Shard `index` of a manifest's plan.
    Manifest { plan: Arc<ManifestPlan>, index: u32 },
}

/// How a sharded run chose its files, for its report (and for `report merge`, which checks
/// that every shard's report comes from the same plan).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShardPlanInfo {
    pub index: u32,
    pub count: u32,
    pub by: ShardBy,
    /// `hash` (walked, a fixed hash of each file's key) or `bytes` (a manifest's plan).
    pub balance: &'static str,
    /// The manifest, when there is one.
    pub manifest: Option<PathBuf>,
    /// FNV-1a 64 (hex) of what fixes the plan: the count, the key, and the inputs (absolute,
    /// sorted) or the manifest's bytes. Equal in every shard of one job.
    pub plan: String,
    /// Files and bytes the plan gives this shard (known with a manifest only).
    pub planned_files: Option<u64>,
    pub planned_bytes: Option<u64>,
}

impl Sources {
    /// Every file under `inputs`.
    pub fn walk(inputs: &[PathBuf]) -> Sources {
        Sources::Walk {
            inputs: inputs.to_vec(),
            shard: None,
        }
    }

    /// The shard, when the run has one.
    pub fn shard(&self) -> Option<Shard> {
        match self {
            Sources::Walk { shard, .. } => shard.map(|(s, _)| s),
            Sources::Manifest { plan, index } => Some(Shard {
                index: *index,
                count: plan.count,
            }),
        }
    }

    /// Folders and files a caller may look at for a first file (slot sizing): the inputs, or
    /// a manifest's roots.
    pub fn roots(&self) -> Vec<PathBuf> {
        match self {
            Sources::Walk { inputs, .. } => inputs.clone(),
            Sources::Manifest { plan, .. } => plan.roots.clone(),
        }
    }

    /// Lists what the run reads (see [`Listing`]): the walk of the inputs, keeping the files
    /// of the shard (every input file's identity is still recorded, so that no output of this
    /// shard replaces another shard's input), or the shard's part of a manifest. Files outside
    /// the shard are not opened, except with `--shard-by series` over a walk, where
    /// [`Listing::scan`] reads the start of every DICOM file's header to learn its series.
    pub fn list(&self, exclude: Option<&Path>, cancel: &AtomicBool) -> Listing {
        let mut listing = Listing {
            found: Vec::new(),
            inputs: HashSet::new(),
            series_shard: None,
        };
        match self {
            Sources::Walk { inputs, shard } => {
                walk(inputs, exclude, cancel, |found| {
                    if let Found::File { key, .. } = &found {
                        listing.inputs.insert(*key);
                    }
                    let keep = match (&found, shard) {
                        (_, None) | (_, Some((_, ShardBy::Series))) => true,
                        (Found::File { rel, .. }, Some((s, ShardBy::Path))) => {
                            s.owns(shard::path_hash(rel))
                        }
                        // Reported by one shard only: the one its path hashes to.
                        (Found::Skipped { path, .. } | Found::Error { path, .. }, Some((s, _))) => {
                            s.owns(shard::path_hash(path))
                        }
                    };
                    if keep {
                        listing.found.push(found);
                    }
                    true
                });
                if let Some((s, ShardBy::Series)) = shard {
                    listing.series_shard = Some(*s);
                }
            }
            Sources::Manifest { plan, index } => {
                let result = plan.visit(*index, cancel, |entry| {
                    let found = match entry {
                        // The walk's checks, for the shard's own files: a regular file (never
                        // opened when it is not one), and its identity, so that no output
                        // replaces it.
                        Entry::File { path, rel } => match std::fs::metadata(&path) {
                            Ok(m) if m.is_file() => {
                                listing.inputs.insert(key_of(&m));
                                Found::File {
                                    key: key_of(&m),
                                    len: m.len(),
                                    path,
                                    rel,
                                }
                            }
                            Ok(_) => Found::Skipped {
                                path,
                                reason: "not a regular file".into(),
                            },
                            Err(e) => Found::Error {
                                path,
                                reason: format!("cannot read input: {e}"),
                            },
                        },
                        Entry::Error { path, reason } => Found::Error { path, reason },
                    };
                    listing.found.push(found);
                    true
                });
                if let Err(e) = result {
                    listing.found.push(Found::Error {
                        path: plan.path.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        listing
    }

    /// Bytes this run will read, counting stops at `limit` (for `auto`'s choice of the GPU):
    /// the files of the shard (by series, the inputs' bytes over N, as deciding would mean
    /// reading every header), or the manifest's plan for the shard.
    pub fn input_bytes(&self, exclude: Option<&Path>, limit: u64) -> u64 {
        match self {
            Sources::Walk { inputs, shard } => match shard {
                None => super::input_bytes(inputs, exclude, limit),
                Some((s, ShardBy::Series)) => {
                    let all = limit.saturating_mul(u64::from(s.count));
                    super::input_bytes(inputs, exclude, all) / u64::from(s.count)
                }
                Some((s, ShardBy::Path)) => {
                    let mut total = 0u64;
                    let never = AtomicBool::new(false);
                    walk(inputs, exclude, &never, |found| {
                        if let Found::File { rel, len, .. } = found {
                            if s.owns(shard::path_hash(&rel)) {
                                total += len;
                            }
                        }
                        total < limit
                    });
                    total
                }
            },
            Sources::Manifest { plan, index } => {
                plan.bytes.get(*index as usize).copied().unwrap_or(0)
            }
        }
    }

    /// The shard's plan, for the report; `None` without a shard.
    pub fn plan_info(&self) -> Option<ShardPlanInfo> {
        let by_name = |by: ShardBy| match by {
            ShardBy::Path => "path",
            ShardBy::Series => "series",
        };
        match self {
            Sources::Walk { shard: None, .. } => None,
            Sources::Walk {
                inputs,
                shard: Some((s, by)),
            } => {
                let mut roots: Vec<PathBuf> = inputs
                    .iter()
                    .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
                    .collect();
                roots.sort();
                let mut key = format!("walk\0{}\0{}", by_name(*by), s.count).into_bytes();
                for r in roots {
                    key.push(0);
                    key.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(r.as_os_str()));
                }
                Some(ShardPlanInfo {
                    index: s.index,
                    count: s.count,
                    by: *by,
                    balance: "hash",
                    manifest: None,
                    plan: format!("{:016x}", shard::fnv1a64_of(&key)),
                    planned_files: None,
                    planned_bytes: None,
                })
            }
            Sources::Manifest { plan, index } => {
                let key = format!(
                    "manifest\0{}\0{}\0{:016x}",
                    by_name(plan.by),
                    plan.count,
                    plan.digest
                );
                Some(ShardPlanInfo {
                    index: *index,
                    count: plan.count,
                    by: plan.by,
                    balance: "bytes",
                    manifest: Some(
                        std::path::absolute(&plan.path).unwrap_or_else(|_| plan.path.clone()),
                    ),
                    plan: format!("{:016x}", shard::fnv1a64_of(key.as_bytes())),
                    planned_files: plan.files.get(*index as usize).copied(),
                    planned_bytes: plan.bytes.get(*index as usize).copied(),
                })
            }
        }
    }
}

/// `item` when it belongs to shard `s` by series (`--shard-by series` over a walk): a DICOM
/// file by the hash of its Series Instance UID (read from the start of its header), anything
/// else — and a file whose series cannot be read — by the hash of its relative path.
pub(crate) fn in_series_shard(s: Shard, item: ScanItem) -> Option<ScanItem> {
    let key = match &item {
        ScanItem::Dicom(c) => {
            let fallback = shard::path_hash(&c.rel);
            read_uids(&c.path, &c.kind)
                .ok()
                .and_then(|u| u.series)
                .map_or(fallback, |uid| shard::key_hash(uid.as_bytes()))
        }
        ScanItem::Skipped { path, .. }
        | ScanItem::Error { path, .. }
        | ScanItem::NotStarted { path } => shard::path_hash(path),
    };
    s.owns(key).then_some(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::manifest::write_manifest;

    /// The relative paths a scan of `sources` hands on.
    fn scanned(sources: &Sources) -> Vec<PathBuf> {
        let never = AtomicBool::new(false);
        let mut v = Vec::new();
        sources.list(None, &never).scan(&never, |item| {
            match item {
                ScanItem::Dicom(c) => v.push(c.rel),
                ScanItem::Skipped { path, .. } => v.push(path.file_name().unwrap().into()),
                ScanItem::Error { path, .. } | ScanItem::NotStarted { path } => v.push(path),
            }
            true
        });
        v
    }

    #[test]
    fn shards_of_a_real_tree_partition_it_by_path_series_and_manifest() {
        let dir = crate::scratch_dir("select");
        let tree = dir.join("tree");
        // Three series of a few slices, a text file, and the same series again in another
        // folder (so by series, both folders' copies go together).
        for (i, seed) in [(0, 1u64), (1, 2), (2, 3)] {
            let opts = crate::synth::SynthOptions {
                size: 8,
                slices: 3 + i,
                seed,
                ..Default::default()
            };
            crate::synth::write_series(&tree.join(format!("s{i}")), &opts).unwrap();
            if i == 0 {
                crate::synth::write_series(&tree.join("copy/s0"), &opts).unwrap();
            }
        }
        std::fs::write(tree.join("notes.txt"), "not DICOM").unwrap();
        let inputs = vec![tree.clone()];
        let mut all = scanned(&Sources::walk(&inputs));
        all.sort();
        assert_eq!(all.len(), 3 + 4 + 5 + 3 + 1);

        let manifest = dir.join("m.tsv");
        let never = AtomicBool::new(false);
        write_manifest(&manifest, &inputs, true, &never).unwrap();
        for n in [1u32, 2, 3, 5] {
            for by in [ShardBy::Path, ShardBy::Series] {
                let plan = Arc::new(ManifestPlan::compute(&manifest, n, by).unwrap());
                for manifest_mode in [false, true] {
                    let mut union = Vec::new();
                    for i in 0..n {
                        let sources = if manifest_mode {
                            Sources::Manifest {
                                plan: plan.clone(),
                                index: i,
                            }
                        } else {
                            Sources::Walk {
                                inputs: inputs.clone(),
                                shard: Some((Shard::new(i.into(), n.into()).unwrap(), by)),
                            }
                        };
                        let part = scanned(&sources);
                        if by == ShardBy::Series {
                            // A series is whole in the shard that has any of its files.
                            for s in ["s0", "s1", "s2"] {
                                let has = |p: &PathBuf| p.to_string_lossy().contains(s);
                                let here = part.iter().filter(|p| has(p)).count();
                                let everywhere = all.iter().filter(|p| has(p)).count();
                                assert!(here == 0 || here == everywhere, "{s} split, N = {n}");
                            }
                        }
                        union.extend(part);
                    }
                    union.sort();
                    assert_eq!(union, all, "N = {n}, {by:?}, manifest {manifest_mode}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_input_is_reported_by_one_shard() {
        let inputs = vec![PathBuf::from("/nonexistent/dicomflow-input")];
        let errors: usize = (0..4)
            .map(|i| {
                let s = Sources::Walk {
                    inputs: inputs.clone(),
                    shard: Some((Shard::new(i, 4).unwrap(), ShardBy::Path)),
                };
                scanned(&s).len()
            })
            .sum();
        assert_eq!(errors, 1);
    }
}
