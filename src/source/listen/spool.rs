//! The spool: where a received instance becomes durable before the sender is told it was
//! stored. An instance is streamed into `SPOOL/.incoming/<seq>.part` as its PDVs arrive
//! (preamble and file meta first, then the data set bytes exactly as received, in the
//! negotiated transfer syntax), renamed to `SPOOL/<seq>-<SOPInstanceUID>.dcm` once complete
//! ([`Spool::place`]), and made durable ([`Spool::make_durable`]): only then is the C-STORE
//! answered with success. The entry is removed (or moved to the keep folder) once its outputs
//! exist.
//!
//! Durability: the entry's data is synced (`fdatasync`, concurrent ones from several
//! associations share the file system's journal commit), then the spool folder is synced once
//! for every entry placed meanwhile, by whichever caller comes first (a group commit), so that
//! the renames are durable too. Only the spool's own files are synced: `syncfs` would also
//! flush whatever else is being written on the machine (on the shared 2-core box: 12 ms
//! median, 186 ms at worst while a build ran, against under 1 ms to 20 ms for the two
//! `fsync`s). Each sync costs at least one disk cache flush (often ~4 ms on the box's virtual
//! disk), which bounds what one association can do; see BENCHMARKS.md.
//! With `durable = false` an instance is acknowledged once placed: it survives a crash of
//! dicomflow (the kernel holds it), not of the machine, like DCMTK's `storescp`.
//!
//! `<seq>` is a zero-padded counter that grows across restarts, so a restart finds the
//! entries in arrival order; `.incoming` holds only instances that were never acknowledged
//! and is emptied when the spool opens.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use dicom_object::meta::FileMetaTableBuilder;

/// dicomflow's implementation class UID, written into the file meta of spooled instances.
pub const IMPLEMENTATION_CLASS_UID: &str = "2.25.11727914442730484337223374930721977588";
/// The implementation version name written beside it.
pub const IMPLEMENTATION_VERSION_NAME: &str = concat!("DICOMFLOW_", env!("CARGO_PKG_VERSION"));

const INCOMING: &str = ".incoming";
/// Files of finished entries kept for reuse (about the instances several associations
/// receive at once, plus what waits to render).
const MAX_FREE: usize = 64;
/// Digits of the sequence number in entry names.
const SEQ_DIGITS: usize = 16;

/// Why the spool could not take or give back an instance.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpoolError {
    /// The spool folder could not be created, listed or synced.
    #[error("spool folder {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An entry could not be written, synced or renamed.
    #[error("spool file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file meta information could not be built (a UID the builder refused).
    #[error("cannot build the file meta information: {0}")]
    Meta(String),
}

impl SpoolError {
    /// True when the disk is full (the sender gets "out of resources").
    pub fn is_out_of_space(&self) -> bool {
        let e = match self {
            SpoolError::Folder { source, .. } | SpoolError::File { source, .. } => source,
            SpoolError::Meta(_) => return false,
        };
        matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
    }
}

/// An entry placed and not yet durable: its file, still open for the sync.
#[derive(Debug)]
pub struct Placed {
    file: File,
    path: PathBuf,
}

/// A durable instance in the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolEntry {
    /// The spool file.
    pub path: PathBuf,
    /// Its name for output naming: `<SOPInstanceUID>.dcm` (so the output is
    /// `OUT/<SOPInstanceUID>.png` with the default naming).
    pub rel: PathBuf,
    /// Bytes of the file.
    pub bytes: u64,
}

/// What the file meta of a received instance says.
#[derive(Debug, Clone)]
pub struct InstanceMeta<'a> {
    pub sop_class: &'a str,
    pub sop_instance: &'a str,
    pub transfer_syntax: &'a str,
    /// Calling AE title of the sender (SourceApplicationEntityTitle).
    pub sender: &'a str,
    /// Our AE title (ReceivingApplicationEntityTitle).
    pub receiver: &'a str,
}

/// An instance being received: bytes go straight to its file in `.incoming`.
#[derive(Debug)]
pub struct Incoming {
    file: File,
    path: PathBuf,
    seq: u64,
    sop_instance: String,
    /// Data set bytes written so far (the file meta not counted).
    data_bytes: u64,
    meta_bytes: u64,
}

impl Incoming {
    /// Appends data set bytes.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        self.file
            .write_all(bytes)
            .map_err(|source| SpoolError::File {
                path: self.path.clone(),
                source,
            })?;
        self.data_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Ends the file at what was written (a reused file may be longer): call once the last
    /// bytes are in, before reading the file back.
    pub fn seal(&mut self) -> Result<(), SpoolError> {
        self.file
            .set_len(self.meta_bytes + self.data_bytes)
            .map_err(|source| SpoolError::File {
                path: self.path.clone(),
                source,
            })
    }

    /// Data set bytes received so far.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// The file being written (for checks before the commit).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops an instance that will not be acknowledged.
    pub fn abandon(self) {
        drop(self.file);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The spool folder.
#[derive(Debug)]
pub struct Spool {
    root: PathBuf,
    incoming: PathBuf,
    root_dir: File,
    next_seq: AtomicU64,
    /// Entries placed and not yet finished.
    depth: AtomicUsize,
    /// Acknowledge only once durable (group commit); false: once placed.
    durable: bool,
    commits: Mutex<Commits>,
    synced: Condvar,
    /// Files of finished entries, to write new instances over.
    free: Mutex<Vec<PathBuf>>,
}

/// The group commit's state: requests are numbered; a sync started after request N was
/// made covers every request up to N.
#[derive(Debug, Default)]
struct Commits {
    requested: u64,
    durable: u64,
    syncing: bool,
    /// The last failed sync: requests up to this number get its error.
    failed: Option<(u64, String)>,
}

fn folder_err(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Folder {
        path: path.to_path_buf(),
        source,
    }
}

fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// Renames `from` to `to`; across file systems, copies (to a temporary name, then renamed
/// into place) and removes the original.
fn move_file(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let tmp = to.with_extension("dcm.part");
            std::fs::copy(from, &tmp)?;
            std::fs::rename(&tmp, to)?;
            std::fs::remove_file(from)
        }
        other => other,
    }
}

/// `<seq>-<uid>.dcm` → (seq, uid).
fn parse_entry_name(name: &str) -> Option<(u64, &str)> {
    let stem = name.strip_suffix(".dcm")?;
    let (seq, uid) = stem.split_once('-')?;
    if seq.len() != SEQ_DIGITS || uid.is_empty() {
        return None;
    }
    Some((seq.parse().ok()?, uid))
}

impl Spool {
    /// Opens (creating) the spool at `root`: drops what `.incoming` holds (never
    /// acknowledged), and returns the entries a previous run left, oldest first. With
    /// `durable`, [`make_durable`](Self::make_durable) waits for a sync.
    pub fn open(root: &Path, durable: bool) -> Result<(Spool, Vec<SpoolEntry>), SpoolError> {
        let incoming = root.join(INCOMING);
        std::fs::create_dir_all(&incoming).map_err(folder_err(&incoming))?;
        for e in std::fs::read_dir(&incoming).map_err(folder_err(&incoming))? {
            let e = e.map_err(folder_err(&incoming))?;
            let _ = std::fs::remove_file(e.path());
        }
        let mut found = Vec::new();
        let mut max_seq = 0;
        for e in std::fs::read_dir(root).map_err(folder_err(root))? {
            let e = e.map_err(folder_err(root))?;
            let name = e.file_name();
            let Some((seq, uid)) = name.to_str().and_then(parse_entry_name) else {
                continue;
            };
            max_seq = max_seq.max(seq);
            let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
            found.push((
                seq,
                SpoolEntry {
                    path: e.path(),
                    rel: PathBuf::from(format!("{uid}.dcm")),
                    bytes,
                },
            ));
        }
        found.sort_by_key(|(seq, _)| *seq);
        let root_dir = File::open(root).map_err(folder_err(root))?;
        let spool = Spool {
            root: root.to_path_buf(),
            incoming,
            root_dir,
            next_seq: AtomicU64::new(max_seq + 1),
            depth: AtomicUsize::new(found.len()),
            durable,
            commits: Mutex::new(Commits::default()),
            synced: Condvar::new(),
            free: Mutex::new(Vec::new()),
        };
        Ok((spool, found.into_iter().map(|(_, e)| e).collect()))
    }

    /// Whether instances are acknowledged only once durable (`listen.durable`).
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The spool folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Entries committed and not yet finished.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Starts receiving an instance: creates its file and writes the preamble and file meta.
    pub fn begin(&self, meta: &InstanceMeta) -> Result<Incoming, SpoolError> {
        let table = FileMetaTableBuilder::new()
            .media_storage_sop_class_uid(meta.sop_class)
            .media_storage_sop_instance_uid(meta.sop_instance)
            .transfer_syntax(meta.transfer_syntax)
            .implementation_class_uid(IMPLEMENTATION_CLASS_UID)
            .implementation_version_name(IMPLEMENTATION_VERSION_NAME)
            .source_application_entity_title(meta.sender)
            .receiving_application_entity_title(meta.receiver)
            .build()
            .map_err(|e| SpoolError::Meta(e.to_string()))?;
        let mut head = Vec::with_capacity(512);
        head.extend_from_slice(&[0u8; 128]);
        head.extend_from_slice(b"DICM");
        table
            .write(&mut head)
            .map_err(|e| SpoolError::Meta(e.to_string()))?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (mut file, path) = match self.reuse() {
            Some(reused) => reused,
            None => {
                let path = self
                    .incoming
                    .join(format!("{seq:0w$}.part", w = SEQ_DIGITS));
                (File::create(&path).map_err(file_err(&path))?, path)
            }
        };
        if let Err(e) = file.write_all(&head) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(file_err(&path)(e));
        }
        Ok(Incoming {
            file,
            path,
            seq,
            sop_instance: meta.sop_instance.to_string(),
            data_bytes: 0,
            meta_bytes: head.len() as u64,
        })
    }

    /// A file of a finished entry to write the next instance over, when one is free.
    fn reuse(&self) -> Option<(File, PathBuf)> {
        let path = self.free.lock().ok()?.pop()?;
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(file) => Some((file, path)),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Moves a received instance into the spool under its entry name. It is not durable yet
    /// (see [`make_durable`](Self::make_durable), which takes the returned [`Placed`]), but
    /// complete: the pipeline may read it.
    pub fn place(&self, incoming: Incoming) -> Result<(SpoolEntry, Placed), SpoolError> {
        let Incoming {
            file,
            path,
            seq,
            sop_instance,
            data_bytes,
            meta_bytes,
        } = incoming;
        // A reused file may be longer than this instance.
        if let Err(e) = file.set_len(meta_bytes + data_bytes) {
            let _ = std::fs::remove_file(&path);
            return Err(file_err(&path)(e));
        }
        let name = format!("{seq:0w$}-{sop_instance}.dcm", w = SEQ_DIGITS);
        let target = self.root.join(&name);
        if let Err(e) = std::fs::rename(&path, &target) {
            let _ = std::fs::remove_file(&path);
            return Err(file_err(&target)(e));
        }
        self.depth.fetch_add(1, Ordering::Relaxed);
        let placed = Placed {
            file,
            path: target.clone(),
        };
        let entry = SpoolEntry {
            path: target,
            rel: PathBuf::from(format!("{sop_instance}.dcm")),
            bytes: meta_bytes + data_bytes,
        };
        Ok((entry, placed))
    }

    /// Returns once the placed entry is on stable storage: its data synced, then the spool
    /// folder synced by a group commit shared with every caller that arrives while one is
    /// prepared. Immediate when the spool is not durable.
    pub fn make_durable(&self, placed: Placed) -> Result<(), SpoolError> {
        if !self.durable {
            return Ok(());
        }
        placed.file.sync_data().map_err(file_err(&placed.path))?;
        drop(placed);
        let poisoned = |_| SpoolError::Folder {
            path: self.root.clone(),
            source: std::io::Error::other("spool commit state poisoned"),
        };
        let mut st = self.commits.lock().map_err(poisoned)?;
        st.requested += 1;
        let mine = st.requested;
        loop {
            if let Some((upto, why)) = &st.failed {
                if mine <= *upto {
                    return Err(SpoolError::Folder {
                        path: self.root.clone(),
                        source: std::io::Error::other(why.clone()),
                    });
                }
            }
            if st.durable >= mine {
                return Ok(());
            }
            if st.syncing {
                st = self.synced.wait(st).map_err(poisoned)?;
                continue;
            }
            // Lead a sync for every request made so far.
            st.syncing = true;
            let target = st.requested;
            drop(st);
            let result = self.root_dir.sync_all();
            st = self.commits.lock().map_err(poisoned)?;
            st.syncing = false;
            match result {
                Ok(()) => st.durable = st.durable.max(target),
                Err(e) => st.failed = Some((target, format!("cannot sync the spool: {e}"))),
            }
            self.synced.notify_all();
        }
    }

    /// [`place`](Self::place) then [`make_durable`](Self::make_durable).
    pub fn commit(&self, incoming: Incoming) -> Result<SpoolEntry, SpoolError> {
        let (entry, placed) = self.place(incoming)?;
        self.make_durable(placed)?;
        Ok(entry)
    }

    /// Ends an entry whose outputs exist: removes it, or moves it to `keep` under its
    /// instance name (`<keep>/<SOPInstanceUID>.dcm`, replacing an earlier copy; copied and
    /// removed when `keep` is on another file system).
    pub fn finish(&self, entry: &SpoolEntry, keep: Option<&Path>) -> Result<(), SpoolError> {
        let result = match keep {
            None => self.recycle(&entry.path),
            Some(dir) => {
                let target = dir.join(&entry.rel);
                std::fs::create_dir_all(dir)
                    .map_err(folder_err(dir))
                    .and_then(|()| move_file(&entry.path, &target).map_err(file_err(&target)))
            }
        };
        // Gone either way only if the call worked; a failure leaves it for the next start.
        if result.is_ok() {
            self.depth.fetch_sub(1, Ordering::Relaxed);
        }
        result
    }

    /// Keeps the file of a finished entry for a later instance (in `.incoming`, which a start
    /// empties), or removes it when enough are kept. Writing over a file of the same size
    /// frees and allocates no blocks: on a file system mounted with `discard` each removal
    /// waits for the disk to discard the file's blocks (8 % of the listener's time in a
    /// 4-association profile on the 2-core box), and a sync of an overwritten file needs no
    /// journal commit.
    fn recycle(&self, path: &Path) -> Result<(), SpoolError> {
        let mut free = self.free.lock().map_err(|_| SpoolError::Folder {
            path: self.root.clone(),
            source: std::io::Error::other("spool free list poisoned"),
        })?;
        if free.len() < MAX_FREE {
            let n = self.next_seq.fetch_add(1, Ordering::Relaxed);
            let target = self.incoming.join(format!("free-{n}"));
            if std::fs::rename(path, &target).is_ok() {
                free.push(target);
                return Ok(());
            }
        }
        drop(free);
        std::fs::remove_file(path).map_err(file_err(path))
    }

    /// Syncs the spool folder (after a batch of [`finish`](Self::finish) calls).
    pub fn sync(&self) -> Result<(), SpoolError> {
        self.root_dir.sync_all().map_err(folder_err(&self.root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta<'a>(uid: &'a str) -> InstanceMeta<'a> {
        InstanceMeta {
            sop_class: "1.2.840.10008.5.1.4.1.1.2",
            sop_instance: uid,
            transfer_syntax: "1.2.840.10008.1.2.1",
            sender: "STORESCU",
            receiver: "DICOMFLOW",
        }
    }

    #[test]
    fn entries_survive_a_restart_in_arrival_order_and_incoming_is_dropped() {
        let dir = crate::scratch_dir("spool-restart");
        let (spool, found) = Spool::open(&dir, true).unwrap();
        assert!(found.is_empty());
        let mut a = spool.begin(&meta("1.2.3.9")).unwrap();
        a.write(b"\x08\x00\x05\x00CS\x0a\x00ISO_IR 100").unwrap();
        let a = spool.commit(a).unwrap();
        let b = spool.begin(&meta("1.2.3.1")).unwrap();
        let b = spool.commit(b).unwrap();
        let mut never = spool.begin(&meta("1.2.3.5")).unwrap();
        never.write(b"half").unwrap();
        assert_eq!(spool.depth(), 2);
        assert_eq!(a.rel, PathBuf::from("1.2.3.9.dcm"));
        // The committed file is a DICOM file with our file meta, then the data set as sent.
        let bytes = std::fs::read(&a.path).unwrap();
        assert_eq!(&bytes[128..132], b"DICM");
        assert!(bytes.ends_with(b"ISO_IR 100"));
        assert_eq!(a.bytes, bytes.len() as u64);
        let obj = dicom_object::OpenFileOptions::new()
            .open_file(&a.path)
            .unwrap();
        assert_eq!(obj.meta().media_storage_sop_instance_uid(), "1.2.3.9");
        assert_eq!(obj.meta().transfer_syntax(), "1.2.840.10008.1.2.1");
        drop(spool);
        std::mem::forget(never); // as if the process died mid-instance

        let (spool, found) = Spool::open(&dir, true).unwrap();
        assert_eq!(found, vec![a.clone(), b.clone()]);
        assert_eq!(spool.depth(), 2);
        assert_eq!(std::fs::read_dir(dir.join(INCOMING)).unwrap().count(), 0);
        // New entries sort after the old ones.
        let c = spool
            .commit(spool.begin(&meta("1.2.3.0")).unwrap())
            .unwrap();
        assert!(c.path.file_name() > b.path.file_name());
        spool.finish(&a, None).unwrap();
        let keep = dir.join("kept");
        spool.finish(&b, Some(&keep)).unwrap();
        assert!(keep.join("1.2.3.1.dcm").is_file());
        assert!(!a.path.exists() && !b.path.exists());
        assert_eq!(spool.depth(), 1);
        spool.sync().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_commits_share_syncs_and_all_become_durable() {
        let dir = crate::scratch_dir("spool-group");
        let (spool, _) = Spool::open(&dir, true).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let spool = &spool;
                s.spawn(move || {
                    for i in 0..10 {
                        let uid = format!("1.2.{t}.{i}");
                        let mut inc = spool.begin(&meta(&uid)).unwrap();
                        inc.write(&[0u8; 4096]).unwrap();
                        spool.commit(inc).unwrap();
                    }
                });
            }
        });
        let st = spool.commits.lock().unwrap();
        assert_eq!((st.requested, st.durable), (40, 40));
        assert!(st.failed.is_none());
        drop(st);
        assert_eq!(spool.depth(), 40);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finished_files_are_written_over_and_cut_to_the_new_instance() {
        let dir = crate::scratch_dir("spool-reuse");
        let (spool, _) = Spool::open(&dir, false).unwrap();
        let mut big = spool.begin(&meta("1.2.3.1")).unwrap();
        big.write(&[7u8; 10_000]).unwrap();
        let big = spool.commit(big).unwrap();
        spool.finish(&big, None).unwrap();
        assert!(!big.path.exists());
        assert_eq!(spool.free.lock().unwrap().len(), 1);
        let mut small = spool.begin(&meta("1.2.3.2")).unwrap();
        small
            .write(b"\x08\x00\x05\x00CS\x0a\x00ISO_IR 100")
            .unwrap();
        let small = spool.commit(small).unwrap();
        assert!(
            spool.free.lock().unwrap().is_empty(),
            "the free file was not reused"
        );
        let bytes = std::fs::read(&small.path).unwrap();
        assert_eq!(bytes.len() as u64, small.bytes);
        assert!(bytes.ends_with(b"ISO_IR 100"));
        let obj = dicom_object::OpenFileOptions::new()
            .open_file(&small.path)
            .unwrap();
        assert_eq!(obj.meta().media_storage_sop_instance_uid(), "1.2.3.2");
        // A restart drops the free files with the rest of `.incoming`.
        spool.finish(&small, None).unwrap();
        drop(spool);
        Spool::open(&dir, false).unwrap();
        assert_eq!(std::fs::read_dir(dir.join(INCOMING)).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn abandoned_instances_leave_nothing() {
        let dir = crate::scratch_dir("spool-abandon");
        let (spool, _) = Spool::open(&dir, true).unwrap();
        let mut a = spool.begin(&meta("1.2.3")).unwrap();
        a.write(&[0u8; 1000]).unwrap();
        assert_eq!(a.data_bytes(), 1000);
        a.abandon();
        assert_eq!(std::fs::read_dir(dir.join(INCOMING)).unwrap().count(), 0);
        assert_eq!(spool.depth(), 0);
        // Names that are not entries are left alone.
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        std::fs::write(dir.join("12-1.2.dcm"), b"x").unwrap();
        let (_, found) = Spool::open(&dir, true).unwrap();
        assert!(found.is_empty());
        assert_eq!(
            parse_entry_name("0000000000000012-1.2.3.dcm"),
            Some((12, "1.2.3"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
