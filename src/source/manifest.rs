//! Manifests: the list of a job's input files, made once by `dicomflow scan` and read by every
//! task of a sharded run (`run --manifest FILE --shard I/N`) instead of walking the tree per
//! task. With a manifest the shards are balanced by bytes ([`ManifestPlan`]).
//!
//! The format (version 1): UTF-8 text, one line per record, fields separated by tabs (shown
//! here as `|`).
//!
//! ```text
//! #dicomflow-manifest|1
//! #root|0|/data/archive/study-a
//! #columns|root|path|bytes|study_uid|series_uid|sop_instance_uid
//! 0|CT/IM00001.dcm|526012|1.2.3|1.2.3.4|1.2.3.4.5
//! #error|/data/archive/study-a/locked|cannot list folder: Permission denied (os error 13)
//! ```
//!
//! * `#root I PATH`: the inputs given to `scan`, made absolute (not resolved through symlinks,
//!   so a mount point keeps its name); a file given directly contributes its folder, and with
//!   several inputs a folder contributes its parent (its files' paths then begin with its
//!   name, as `run a b` mirrors them). A file reached through two inputs is listed once.
//! * Records: the root's number, the path relative to that root (the path that names the
//!   output, as when the root is walked), the size in bytes, and with `scan --with-series`
//!   the file's Study, Series and SOP Instance UIDs (empty where it has none or is no DICOM).
//! * `#error PATH REASON`: a path the scan could not read; the run reports it (in one shard).
//! * Other lines starting with `#` are comments. In every field `\\`, `\t`, `\n` and `\r`
//!   stand for a backslash, a tab, a newline and a carriage return, and `\xHH` for a byte
//!   that is not UTF-8 (file names are bytes on Unix).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::shard::{self, ShardBy};
use super::walk::{walk, Found};
use crate::decode::identity::{read_uids, FileUids};
use crate::output::atomic::PendingFile;

/// Version of the manifest format this build reads and writes.
pub const MANIFEST_VERSION: u32 = 1;

const MAGIC: &str = "#dicomflow-manifest";
const COLUMNS: &str = "root\tpath\tbytes";
const UID_COLUMNS: &str = "study_uid\tseries_uid\tsop_instance_uid";

/// Why a manifest cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line does not follow the format.
    #[error("{path}, line {line}: {reason}")]
    Format {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    /// `--shard-by series` on a manifest without UIDs.
    #[error(
        "{path} has no series column: make it with `dicomflow scan --with-series` to shard by \
         series"
    )]
    NoSeries { path: PathBuf },
    /// The file changed between the two passes of a run.
    #[error("{path} changed while the run read it (line {line}); run the task again")]
    Changed { path: PathBuf, line: u64 },
    /// `scan` was stopped before it listed every file.
    #[error("stopped before every file was listed; no manifest was written")]
    Cancelled,
}

/// One line of a manifest that is not a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A file.
    Record(Record),
    /// A path the scan could not read.
    Error { path: PathBuf, reason: String },
}

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Index into the manifest's roots.
    pub root: u32,
    /// Path relative to the root.
    pub rel: PathBuf,
    pub bytes: u64,
    /// With `--with-series` only.
    pub uids: Option<FileUids>,
}

// ---- escaping ----

fn escape_into(bytes: &[u8], out: &mut String) {
    // Writing into a String cannot fail.
    let _ = crate::paths::escape_bytes_into(bytes, true, out);
}

fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    escape_into(bytes, &mut s);
    s
}

fn unescape(field: &str) -> Result<Vec<u8>, String> {
    crate::paths::unescape_bytes(field, true).map_err(|e| e.to_string())
}

fn escape_path(p: &Path) -> String {
    escape(p.as_os_str().as_bytes())
}

fn unescape_path(field: &str) -> Result<PathBuf, String> {
    unescape(field).map(|b| PathBuf::from(std::ffi::OsString::from_vec(b)))
}

// ---- writing ----

/// A manifest being written: to a hidden temporary file beside the target, renamed into place
/// (after `fsync`) only when complete, so a killed `scan` leaves no partial manifest.
struct Writer {
    /// Unnamed until [`finish`](Self::finish) (`output::atomic`): a manifest that cannot be
    /// finished (a full disk, a cancel) leaves nothing behind.
    out: BufWriter<PendingFile>,
    with_series: bool,
    line: String,
}

impl Writer {
    fn create(target: &Path, roots: &[PathBuf], with_series: bool) -> std::io::Result<Writer> {
        let mut out = BufWriter::with_capacity(1 << 20, PendingFile::create(target, true)?);
        let mut head = format!("{MAGIC}\t{MANIFEST_VERSION}\n");
        for (i, r) in roots.iter().enumerate() {
            head.push_str(&format!("#root\t{i}\t{}\n", escape_path(r)));
        }
        head.push_str(&format!("#columns\t{COLUMNS}"));
        if with_series {
            head.push_str(&format!("\t{UID_COLUMNS}"));
        }
        head.push('\n');
        out.write_all(head.as_bytes())?;
        Ok(Writer {
            out,
            with_series,
            line: String::new(),
        })
    }

    fn record(&mut self, r: &Record) -> std::io::Result<()> {
        let line = &mut self.line;
        line.clear();
        line.push_str(&r.root.to_string());
        line.push('\t');
        escape_into(r.rel.as_os_str().as_bytes(), line);
        line.push('\t');
        line.push_str(&r.bytes.to_string());
        if self.with_series {
            let uids = r.uids.clone().unwrap_or_default();
            for uid in [&uids.study, &uids.series, &uids.sop_instance] {
                line.push('\t');
                escape_into(uid.as_deref().unwrap_or("").as_bytes(), line);
            }
        }
        line.push('\n');
        self.out.write_all(line.as_bytes())
    }

    fn error(&mut self, path: &Path, reason: &str) -> std::io::Result<()> {
        let line = format!(
            "#error\t{}\t{}\n",
            escape_path(path),
            escape(reason.as_bytes())
        );
        self.out.write_all(line.as_bytes())
    }

    /// Gives the manifest its name, durably.
    fn finish(self) -> std::io::Result<()> {
        self.out.into_inner().map_err(|e| e.into_error())?.persist()
    }
}

/// What `scan` listed.
#[derive(Debug, Clone, Default)]
pub struct ScanSummary {
    pub roots: Vec<PathBuf>,
    pub files: u64,
    pub bytes: u64,
    /// Files whose header was read for its UIDs (`--with-series`) and that have a series.
    pub with_series: u64,
    /// Paths that could not be read (also listed in the manifest).
    pub errors: Vec<(PathBuf, String)>,
}

/// The root of each input, the input's position among the roots, and what its files' relative
/// paths begin with. A single folder is its own root; a file contributes its folder (its
/// relative path is then its name, as in a walk). With several inputs, a folder's root is its
/// parent and its files' paths begin with its name, so that outputs are laid out as `run a b`
/// lays them out (`a/x.dcm` and `b/x.dcm` do not both name `OUT/x.png`).
fn roots_of(inputs: &[PathBuf]) -> std::io::Result<(Vec<PathBuf>, Vec<u32>, Vec<PathBuf>)> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let mut index = Vec::with_capacity(inputs.len());
    let mut prefixes = Vec::with_capacity(inputs.len());
    for input in inputs {
        let abs = std::path::absolute(input)?;
        let is_file = std::fs::metadata(&abs).is_ok_and(|m| !m.is_dir());
        let named = inputs.len() > 1 && !is_file;
        let (root, prefix) = match (abs.parent(), abs.file_name()) {
            (Some(parent), _) if is_file => (parent.to_path_buf(), PathBuf::new()),
            (Some(parent), Some(name)) if named => (parent.to_path_buf(), PathBuf::from(name)),
            _ => (abs, PathBuf::new()),
        };
        let i = match roots.iter().position(|r| *r == root) {
            Some(i) => i,
            None => {
                roots.push(root);
                roots.len() - 1
            }
        };
        index.push(i as u32);
        prefixes.push(prefix);
    }
    Ok((roots, index, prefixes))
}

/// Files whose UIDs are read at once by a pool of threads (`--with-series`); the manifest
/// keeps the walk's order.
const UID_BATCH: usize = 512;

/// Walks `inputs` (as `run` would, in name order) and writes the manifest `out`, with the
/// UIDs of every file when `with_series` (its header is read: a few KiB per file, on all
/// cores). Unreadable paths are listed as `#error` lines and in the summary.
pub fn write_manifest(
    out: &Path,
    inputs: &[PathBuf],
    with_series: bool,
    cancel: &AtomicBool,
) -> Result<ScanSummary, ManifestError> {
    let io = |source| ManifestError::Io {
        path: out.to_path_buf(),
        source,
    };
    let (roots, root_of_input, prefixes) = roots_of(inputs).map_err(io)?;
    let mut writer = Writer::create(out, &roots, with_series).map_err(io)?;
    let mut summary = ScanSummary {
        roots,
        ..Default::default()
    };
    let mut batch: Vec<(PathBuf, Record)> = Vec::new();
    let mut failed: Option<std::io::Error> = None;
    let flush = |batch: &mut Vec<(PathBuf, Record)>,
                 writer: &mut Writer,
                 summary: &mut ScanSummary|
     -> std::io::Result<()> {
        if with_series {
            read_uids_of(batch);
        }
        for (_, r) in batch.drain(..) {
            summary.files += 1;
            summary.bytes += r.bytes;
            summary.with_series += u64::from(r.uids.as_ref().is_some_and(|u| u.series.is_some()));
            writer.record(&r)?;
        }
        Ok(())
    };
    // An error line keeps its place in the walk's order: the files before it go first.
    let error_line = |batch: &mut Vec<(PathBuf, Record)>,
                      writer: &mut Writer,
                      summary: &mut ScanSummary,
                      path: PathBuf,
                      reason: String|
     -> std::io::Result<()> {
        flush(batch, writer, summary)?;
        writer.error(&path, &reason)?;
        summary.errors.push((path, reason));
        Ok(())
    };
    // A file reached through two inputs (given twice, or inside a folder also given) is
    // listed once, under the first, as a run of the same inputs renders it once.
    let mut listed = std::collections::HashSet::new();
    for ((input, &root), prefix) in inputs.iter().zip(&root_of_input).zip(&prefixes) {
        walk(std::slice::from_ref(input), None, cancel, |found| {
            let result = match found {
                Found::File { key, .. } if !listed.insert(key) => Ok(()),
                Found::File { path, rel, len, .. } => {
                    let record = Record {
                        root,
                        rel: prefix.join(rel),
                        bytes: len,
                        uids: None,
                    };
                    batch.push((path, record));
                    if batch.len() == UID_BATCH {
                        flush(&mut batch, &mut writer, &mut summary)
                    } else {
                        Ok(())
                    }
                }
                // Special files, links to nothing, loops: a run of the tree lists them as
                // skipped; a manifest holds what a run would render.
                Found::Skipped { .. } => Ok(()),
                Found::Error { path, reason } => {
                    error_line(&mut batch, &mut writer, &mut summary, path, reason)
                }
            };
            match result {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        if failed.is_some() || cancel.load(Ordering::Relaxed) {
            break;
        }
    }
    if failed.is_none() {
        failed = flush(&mut batch, &mut writer, &mut summary).err();
    }
    // Dropped unfinished, the writer's file never gets a name.
    if let Some(e) = failed {
        return Err(io(e));
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(ManifestError::Cancelled);
    }
    writer.finish().map_err(io)?;
    Ok(summary)
}

/// Fills in the UIDs of a batch of files on all cores. A file that is no DICOM or whose header
/// cannot be read gets empty UIDs: the run reports it (and puts it in a shard by its path).
fn read_uids_of(batch: &mut [(PathBuf, Record)]) {
    let threads = crate::host::available_cores().clamp(1, 16);
    let chunk = batch.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in batch.chunks_mut(chunk) {
            s.spawn(move || {
                for (path, record) in part {
                    let uids = crate::decode::probe(path)
                        .ok()
                        .and_then(|kind| read_uids(path, &kind).ok());
                    record.uids = Some(uids.unwrap_or_default());
                }
            });
        }
    });
}

// ---- reading ----

/// Reads a manifest line by line (memory does not grow with its length).
pub struct Reader {
    path: PathBuf,
    input: BufReader<File>,
    buf: Vec<u8>,
    line: u64,
    roots: Vec<PathBuf>,
    with_series: Option<bool>,
    digest: u64,
}

impl Reader {
    /// Opens `path` and checks the first line.
    pub fn open(path: &Path) -> Result<Reader, ManifestError> {
        let file = File::open(path).map_err(|source| ManifestError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut r = Reader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 20, file),
            buf: Vec::new(),
            line: 0,
            roots: Vec::new(),
            with_series: None,
            digest: shard::fnv1a64_of(b""),
        };
        let first = r.next_line()?.unwrap_or_default();
        let version = first
            .strip_prefix(MAGIC)
            .and_then(|v| v.strip_prefix('\t'))
            .ok_or_else(|| r.format("not a dicomflow manifest (no #dicomflow-manifest line)"))?;
        if version.trim() != MANIFEST_VERSION.to_string() {
            return Err(r.format(&format!(
                "manifest version {version}; this build reads version {MANIFEST_VERSION}"
            )));
        }
        Ok(r)
    }

    fn format(&self, reason: &str) -> ManifestError {
        ManifestError::Format {
            path: self.path.clone(),
            line: self.line,
            reason: reason.to_string(),
        }
    }

    /// The next line without its newline; `None` at the end.
    fn next_line(&mut self) -> Result<Option<String>, ManifestError> {
        self.buf.clear();
        let n = self
            .input
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| ManifestError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        // FNV-1a over the bytes, continued line after line: the manifest's fingerprint.
        for &b in &self.buf {
            self.digest = (self.digest ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Ok(Some(s.to_string())),
            Err(_) => Err(self.format("not UTF-8 (bytes of file names are written as \\xHH)")),
        }
    }

    /// The roots declared so far.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Whether the records have UID columns (known once the `#columns` line is read).
    pub fn with_series(&self) -> bool {
        self.with_series == Some(true)
    }

    /// The line number of the last item read.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// FNV-1a 64 of the bytes read so far (of the whole file once [`next_item`](Self::next_item)
    /// returned `None`).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The next record or error line; `None` at the end.
    pub fn next_item(&mut self) -> Result<Option<Item>, ManifestError> {
        loop {
            let Some(line) = self.next_line()? else {
                return Ok(None);
            };
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split('\t');
            let first = fields.next().unwrap_or("");
            match first {
                "#root" => {
                    let (i, p) = (fields.next(), fields.next());
                    let i: usize = i
                        .and_then(|i| i.parse().ok())
                        .ok_or_else(|| self.format("#root needs a number and a path"))?;
                    if i != self.roots.len() {
                        return Err(self.format("#root lines must be numbered 0, 1, 2, ..."));
                    }
                    let p = p
                        .map(unescape_path)
                        .transpose()
                        .map_err(|e| self.format(&e))?
                        .ok_or_else(|| self.format("#root needs a path"))?;
                    let p = if p.is_absolute() {
                        p
                    } else {
                        // A hand-written relative root: relative to the manifest's folder.
                        self.path.parent().unwrap_or(Path::new(".")).join(p)
                    };
                    self.roots.push(p);
                }
                "#columns" => {
                    let rest: Vec<&str> = fields.collect();
                    let rest = rest.join("\t");
                    self.with_series = if rest == COLUMNS {
                        Some(false)
                    } else if rest == format!("{COLUMNS}\t{UID_COLUMNS}") {
                        Some(true)
                    } else {
                        return Err(self.format(&format!("unknown columns `{rest}`")));
                    };
                }
                "#error" => {
                    let path = fields.next().map(unescape_path).transpose();
                    let reason = fields.next().map(unescape).transpose();
                    return match (path, reason) {
                        (Ok(Some(path)), Ok(reason)) => Ok(Some(Item::Error {
                            path,
                            reason: String::from_utf8_lossy(&reason.unwrap_or_default())
                                .into_owned(),
                        })),
                        _ => Err(self.format("#error needs a path and a reason")),
                    };
                }
                c if c.starts_with('#') => {}
                _ => return self.record(&line).map(|r| Some(Item::Record(r))),
            }
        }
    }

    fn record(&self, line: &str) -> Result<Record, ManifestError> {
        let with_series = self
            .with_series
            .ok_or_else(|| self.format("a record before the #columns line"))?;
        let fields: Vec<&str> = line.split('\t').collect();
        let expected = if with_series { 6 } else { 3 };
        if fields.len() != expected {
            return Err(self.format(&format!("{} fields, expected {expected}", fields.len())));
        }
        let root: u32 = fields[0]
            .parse()
            .ok()
            .filter(|&r: &u32| (r as usize) < self.roots.len())
            .ok_or_else(|| self.format(&format!("root `{}` is not declared", fields[0])))?;
        let rel = unescape_path(fields[1]).map_err(|e| self.format(&e))?;
        // A relative path names the output under OUT: it may not climb out of it.
        let plain = rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if rel.as_os_str().is_empty() || !plain {
            return Err(self.format(&format!(
                "path `{}` must be relative, without `..`",
                rel.display()
            )));
        }
        let bytes = fields[2]
            .parse()
            .map_err(|_| self.format(&format!("size `{}` is not a number", fields[2])))?;
        let uids = if with_series {
            let uid = |f: &str| -> Result<Option<String>, ManifestError> {
                let b = unescape(f).map_err(|e| self.format(&e))?;
                let s = String::from_utf8_lossy(&b).trim().to_string();
                Ok((!s.is_empty()).then_some(s))
            };
            Some(FileUids {
                study: uid(fields[3])?,
                series: uid(fields[4])?,
                sop_instance: uid(fields[5])?,
            })
        } else {
            None
        };
        Ok(Record {
            root,
            rel,
            bytes,
            uids,
        })
    }
}

// ---- the plan of a sharded run ----

/// One line of a manifest as a run reads it: a file (its path, and its path relative to the
/// root it was found under), or a path the scan could not read.
#[derive(Debug)]
pub(crate) enum Entry {
    File { path: PathBuf, rel: PathBuf },
    Error { path: PathBuf, reason: String },
}

/// The assignment of a manifest's items to `count` shards, balanced by bytes: files (or, by
/// series, whole series) largest first onto the lightest shard ([`shard::balance`]). Every
/// task computes the same plan from the same manifest. `#error` lines weigh nothing and go
/// to the shard their path hashes to. Memory: 4 bytes per item kept for the run, about 32 per
/// item while planning (and a map of the series UIDs); the items themselves are streamed.
#[derive(Debug, Clone)]
pub struct ManifestPlan {
    pub path: PathBuf,
    pub count: u32,
    pub by: ShardBy,
    /// FNV-1a 64 of the manifest's bytes.
    pub digest: u64,
    pub roots: Vec<PathBuf>,
    /// Shard of each item, in file order.
    assignment: Vec<u32>,
    /// Files (records) and bytes per shard.
    pub files: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl ManifestPlan {
    /// Reads `path` and plans `count` shards.
    pub fn compute(path: &Path, count: u32, by: ShardBy) -> Result<ManifestPlan, ManifestError> {
        let count = count.max(1);
        let mut reader = Reader::open(path)?;
        // Weights of the balanced units (files, or series), the unit of each item (None: an
        // error line, placed by hash), and the series seen.
        let mut weights: Vec<u64> = Vec::new();
        let mut unit_of: Vec<u32> = Vec::new();
        let mut hashed: Vec<(usize, u32)> = Vec::new();
        let mut series: std::collections::HashMap<String, u32> = Default::default();
        let mut item_bytes: Vec<u64> = Vec::new();
        while let Some(item) = reader.next_item()? {
            match item {
                Item::Record(r) => {
                    let unit = match (by, r.uids.as_ref()) {
                        (ShardBy::Series, None) => {
                            return Err(ManifestError::NoSeries {
                                path: path.to_path_buf(),
                            })
                        }
                        (
                            ShardBy::Series,
                            Some(FileUids {
                                series: Some(uid), ..
                            }),
                        ) => *series.entry(uid.clone()).or_insert_with(|| {
                            weights.push(0);
                            weights.len() as u32 - 1
                        }),
                        // A file on its own (no series, or by path).
                        _ => {
                            weights.push(0);
                            weights.len() as u32 - 1
                        }
                    };
                    weights[unit as usize] = weights[unit as usize].saturating_add(r.bytes);
                    unit_of.push(unit);
                    item_bytes.push(r.bytes);
                }
                Item::Error { path: p, .. } => {
                    hashed.push((unit_of.len(), shard::shard_of(shard::path_hash(&p), count)));
                    unit_of.push(u32::MAX);
                    item_bytes.push(0);
                }
            }
        }
        drop(series);
        let unit_shard = shard::balance(&weights, count);
        drop(weights);
        let mut assignment: Vec<u32> = unit_of
            .iter()
            .map(|&u| unit_shard.get(u as usize).copied().unwrap_or(0))
            .collect();
        for (i, s) in hashed {
            assignment[i] = s;
        }
        let mut files = vec![0u64; count as usize];
        let mut bytes = vec![0u64; count as usize];
        for (i, &s) in assignment.iter().enumerate() {
            if unit_of[i] != u32::MAX {
                files[s as usize] += 1;
                bytes[s as usize] = bytes[s as usize].saturating_add(item_bytes[i]);
            }
        }
        Ok(ManifestPlan {
            path: path.to_path_buf(),
            count,
            by,
            digest: reader.digest(),
            roots: reader.roots().to_vec(),
            assignment,
            files,
            bytes,
        })
    }

    /// Items (records and error lines) in the manifest.
    pub fn items(&self) -> usize {
        self.assignment.len()
    }

    /// Reads the manifest again and hands the files of shard `index` to `visit` (which returns
    /// false to stop) as a walk would find them. Stops at `cancel`. A manifest that changed
    /// since [`compute`](Self::compute) is an error.
    pub(crate) fn visit(
        &self,
        index: u32,
        cancel: &AtomicBool,
        mut visit: impl FnMut(Entry) -> bool,
    ) -> Result<(), ManifestError> {
        let mut reader = Reader::open(&self.path)?;
        let mut i = 0usize;
        while let Some(item) = reader.next_item()? {
            if cancel.load(Ordering::Relaxed) {
                return Ok(());
            }
            let changed = || ManifestError::Changed {
                path: self.path.clone(),
                line: reader.line(),
            };
            let shard = *self.assignment.get(i).ok_or_else(changed)?;
            i += 1;
            if shard != index {
                continue;
            }
            let found = match item {
                Item::Record(r) => {
                    let root = reader.roots().get(r.root as usize).ok_or_else(changed)?;
                    Entry::File {
                        path: root.join(&r.rel),
                        rel: r.rel,
                    }
                }
                Item::Error { path, reason } => Entry::Error { path, reason },
            };
            if !visit(found) {
                return Ok(());
            }
        }
        if i != self.assignment.len() || reader.digest() != self.digest {
            return Err(ManifestError::Changed {
                path: self.path.clone(),
                line: reader.line(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip_any_file_name() {
        let names: [&[u8]; 5] = [
            b"plain/IM0001.dcm",
            b"tab\there",
            b"new\nline\\and\rback",
            b"latin1 \xe9t\xe9",
            "ünïcode ✓".as_bytes(),
        ];
        for n in names {
            let e = escape(n);
            assert!(
                !e.contains('\t') && !e.contains('\n') && !e.contains('\r'),
                "{e}"
            );
            assert_eq!(unescape(&e).unwrap(), n, "{e}");
        }
        assert!(unescape("bad\\q").is_err());
        assert!(unescape("bad\\x4").is_err());
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn scan_writes_what_run_would_walk_and_reads_it_back() {
        let dir = crate::scratch_dir("manifest-scan");
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("b/c")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        write(&tree, "a.dcm", "12345");
        write(&tree.join("b"), "x\ty.dcm", "1");
        write(&tree.join("b/c"), "z", "123");
        let single = write(&dir.join("other"), "single.dcm", "1234567");
        let out = dir.join("m/manifest.tsv");
        let never = AtomicBool::new(false);
        let inputs = [tree.clone(), single.clone(), dir.join("missing")];
        let summary = write_manifest(&out, &inputs, false, &never).unwrap();
        assert_eq!((summary.files, summary.bytes), (4, 16));
        // Several inputs: the folder is listed under its parent, its paths beginning with its
        // name (as `run` mirrors it); the file under its own folder, by its name.
        assert_eq!(summary.roots, [dir.clone(), dir.join("other")]);
        assert_eq!(summary.errors.len(), 1, "{:?}", summary.errors);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            text.starts_with("#dicomflow-manifest\t1\n#root\t0\t"),
            "{text}"
        );
        assert!(text.contains("0\ttree/b/x\\ty.dcm\t1\n"), "{text}");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.join("m")).unwrap().count(), 1);

        let mut reader = Reader::open(&out).unwrap();
        let mut items = Vec::new();
        while let Some(i) = reader.next_item().unwrap() {
            items.push(i);
        }
        assert!(!reader.with_series());
        let rels: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                Item::Record(r) => Some((r.root, r.rel.to_string_lossy().into_owned(), r.bytes)),
                Item::Error { .. } => None,
            })
            .collect();
        assert_eq!(
            rels,
            [
                (0, "tree/a.dcm".to_string(), 5),
                (0, "tree/b/x\ty.dcm".into(), 1),
                (0, "tree/b/c/z".into(), 3),
                (1, "single.dcm".into(), 7)
            ]
        );
        assert!(matches!(&items[4], Item::Error { path, .. } if path.ends_with("missing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_manifests_say_which_line_and_why() {
        let dir = crate::scratch_dir("manifest-bad");
        let head = "#dicomflow-manifest\t1\n#root\t0\t/data\n#columns\troot\tpath\tbytes\n";
        let cases = [
            ("hello\n", "line 1: not a dicomflow manifest"),
            ("#dicomflow-manifest\t9\n", "version 9"),
            (&format!("{head}0\ta.dcm\n") as &str, "line 4: 2 fields"),
            (&format!("{head}1\ta.dcm\t5\n"), "root `1` is not declared"),
            (&format!("{head}0\t../etc/passwd\t5\n"), "without `..`"),
            (&format!("{head}0\t/etc/passwd\t5\n"), "without `..`"),
            (&format!("{head}0\ta.dcm\tfive\n"), "size `five`"),
            (
                "#dicomflow-manifest\t1\n#root\t0\t/d\n0\ta\t1\n",
                "before the #columns line",
            ),
        ];
        for (text, want) in cases {
            let p = write(&dir, "m.tsv", text);
            let e = ManifestPlan::compute(&p, 2, ShardBy::Path).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
            assert!(e.to_string().contains("m.tsv"), "{e}");
        }
        let p = write(&dir, "m.tsv", &format!("{head}0\ta.dcm\t5\n"));
        let e = ManifestPlan::compute(&p, 2, ShardBy::Series).unwrap_err();
        assert!(e.to_string().contains("--with-series"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plans_balance_bytes_keep_series_whole_and_place_errors_once() {
        let dir = crate::scratch_dir("manifest-plan");
        let mut text = String::from(
            "#dicomflow-manifest\t1\n#root\t0\t/data\n\
             #columns\troot\tpath\tbytes\tstudy_uid\tseries_uid\tsop_instance_uid\n",
        );
        // Series A: 10 × 100, series B: 4 × 250, series C: 2 × 500; one file without a
        // series; one error line.
        for (s, n, size) in [("A", 10, 100), ("B", 4, 250), ("C", 2, 500)] {
            for i in 0..n {
                text.push_str(&format!("0\t{s}/{i}.dcm\t{size}\t1\t{s}\t{s}.{i}\n"));
            }
        }
        text.push_str("0\tloose.txt\t40\t\t\t\n#error\t/data/locked\tcannot list folder\n");
        let p = write(&dir, "m.tsv", &text);
        let plan = ManifestPlan::compute(&p, 3, ShardBy::Series).unwrap();
        assert_eq!(plan.items(), 18);
        assert_eq!(plan.files.iter().sum::<u64>(), 17);
        assert_eq!(plan.bytes.iter().sum::<u64>(), 3040);
        // Each series of 1000 bytes fills one shard; the loose file joins one of them.
        let mut b = plan.bytes.clone();
        b.sort();
        assert_eq!(b, [1000, 1000, 1040]);
        let never = AtomicBool::new(false);
        let mut seen: Vec<(u32, String)> = Vec::new();
        let mut errors = 0;
        for shard in 0..3 {
            plan.visit(shard, &never, |f| {
                match f {
                    Entry::File { path, rel } => {
                        assert_eq!(path, Path::new("/data").join(&rel));
                        seen.push((shard, rel.to_string_lossy().into_owned()));
                    }
                    Entry::Error { .. } => errors += 1,
                }
                true
            })
            .unwrap();
        }
        assert_eq!(seen.len(), 17);
        assert_eq!(errors, 1);
        for s in ["A", "B", "C"] {
            let shards: std::collections::BTreeSet<_> = seen
                .iter()
                .filter(|(_, r)| r.starts_with(&format!("{s}/")))
                .map(|(sh, _)| *sh)
                .collect();
            assert_eq!(shards.len(), 1, "series {s} split over {shards:?}");
        }
        // By path the same manifest balances files: 3040 / 3 ≈ 1013 each.
        let by_path = ManifestPlan::compute(&p, 3, ShardBy::Path).unwrap();
        let mut b = by_path.bytes.clone();
        b.sort();
        assert_eq!(b, [990, 1000, 1050]);

        // A manifest edited between the passes is refused.
        std::fs::write(&p, text.replace("loose.txt\t40", "loose.txt\t41")).unwrap();
        let e = plan.visit(0, &never, |_| true).unwrap_err();
        assert!(matches!(e, ManifestError::Changed { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
