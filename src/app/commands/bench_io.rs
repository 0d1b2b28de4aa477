//! `dicomflow bench io`: the file I/O that every run pays per slice, and nothing else. N
//! threads read each input whole into a buffer of their own (as the loaders read pixels into
//! slots) and, with a write size, write an output of that size the way `run` does
//! (`output::atomic`: unnamed file, then its name). No parsing, rendering, encoding or
//! hand-off between threads: its files/s is a ceiling for `run` on the same files, threads and
//! filesystems, which tells a pipeline's overheads from the machine's limits.

use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use dicomflow::decode::probe::open_input_len;
use dicomflow::error::FatalError;
use dicomflow::memory::streaming::read_streamed;
use dicomflow::output::atomic::{OutputFiles, SyncMode};

/// Every regular file under `dir`, sorted.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", d.display()))?;
            let ft = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
            if ft.is_dir() {
                todo.push(entry.path());
            } else if ft.is_file() {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// One round: `threads` threads share `files`; each reads a file whole into the next of its
/// `buffers` buffers (several: destinations that left the caches, as a ring's slots have),
/// with `streaming` through a small buffer and streaming stores (`memory::streaming`), and,
/// when `write_bytes` > 0, writes that many bytes to `out/N.png`. Buffers hold `largest` bytes
/// (the largest input). Returns the seconds and the bytes read.
fn round(
    files: &[PathBuf],
    largest: usize,
    threads: usize,
    buffers: usize,
    streaming: bool,
    write_bytes: usize,
    out: &Path,
) -> Result<(f64, u64), String> {
    let next = AtomicUsize::new(0);
    let outputs = OutputFiles::new(SyncMode::Run);
    // Written before the clock starts, so that no read pays for faulting its buffer in.
    let rings: Vec<Vec<Vec<u8>>> = (0..threads)
        .map(|_| (0..buffers.max(1)).map(|_| vec![1u8; largest]).collect())
        .collect();
    let t0 = Instant::now();
    let per_thread: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = rings
            .into_iter()
            .map(|mut ring| {
                let (next, outputs) = (&next, &outputs);
                s.spawn(move || {
                    let written = vec![0x5au8; write_bytes];
                    let mut bounce = Vec::new();
                    let mut read = 0u64;
                    for n in 0.. {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = files.get(i) else {
                            break;
                        };
                        let slots = ring.len();
                        let buf = &mut ring[n % slots];
                        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
                        let (file, len) = open_input_len(path).map_err(fail)?;
                        let len = (len as usize).min(buf.len());
                        if streaming {
                            read_streamed(&file, &mut buf[..len], 0, &mut bounce).map_err(fail)?;
                        } else {
                            file.read_exact_at(&mut buf[..len], 0).map_err(fail)?;
                        }
                        read += len as u64;
                        if write_bytes > 0 {
                            outputs
                                .write(&out.join(format!("{i}.png")), &written)
                                .map_err(fail)?;
                        }
                    }
                    Ok(read)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut read = 0;
    for r in per_thread {
        read += r?;
    }
    Ok((secs, read))
}

/// The table: for each write size and thread count, the best of `rounds` rounds.
pub fn io_table(
    inputs: &Path,
    out: &Path,
    threads: &[usize],
    buffers: usize,
    streaming: bool,
    write_bytes: &[usize],
    rounds: usize,
) -> Result<String, String> {
    let files = files_under(inputs)?;
    if files.is_empty() {
        return Err(format!("no files under {}", inputs.display()));
    }
    let largest = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0);
    let most = threads.iter().max().copied().unwrap_or(1).max(1) as u64;
    let buffer_bytes = most * buffers.max(1) as u64 * largest;
    if buffer_bytes > MAX_BUFFER_BYTES {
        return Err(format!(
            "{most} threads x {} buffers x {largest} bytes (the largest input) is {} MiB of \
             buffers, more than the {} MiB this benchmark allows: fewer threads or buffers, or \
             smaller inputs",
            buffers.max(1),
            buffer_bytes >> 20,
            MAX_BUFFER_BYTES >> 20
        ));
    }
    // A folder of its own under `out` (which must exist), made here: the only thing removed.
    let out = &out.join(format!("dicomflow-bench-io-{}", std::process::id()));
    std::fs::create_dir(out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{}: {e} (left by an earlier run? remove it)", out.display())
        }
        _ => format!("{}: {e} (-o names a folder that must exist)", out.display()),
    })?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} files under {}; outputs under {}; {} buffer(s) per thread; {}; best of {} rounds",
        files.len(),
        inputs.display(),
        out.display(),
        buffers.max(1),
        if streaming {
            "streamed reads"
        } else {
            "plain reads"
        },
        rounds.max(1)
    );
    let _ = writeln!(
        s,
        "{:>8} {:>12} {:>12} {:>10} {:>16}",
        "threads", "write bytes", "files/s", "read GB/s", "thread µs/file"
    );
    for &w in write_bytes {
        for &t in threads {
            let t = t.max(1);
            let mut best: Option<(f64, u64)> = None;
            for _ in 0..rounds.max(1) {
                // Each round writes new names, as a first run does.
                let emptied = std::fs::remove_dir_all(out).and_then(|()| std::fs::create_dir(out));
                let r = emptied
                    .map_err(|e| format!("{}: {e}", out.display()))
                    .and_then(|()| round(&files, largest as usize, t, buffers, streaming, w, out));
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(out);
                        return Err(e);
                    }
                };
                if best.is_none_or(|b| r.0 < b.0) {
                    best = Some(r);
                }
            }
            if let Some((secs, read)) = best {
                let rate = files.len() as f64 / secs;
                let _ = writeln!(
                    s,
                    "{:>8} {:>12} {:>12.0} {:>10.1} {:>16.1}",
                    t,
                    w,
                    rate,
                    read as f64 / secs / 1e9,
                    t as f64 / rate * 1e6
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(out);
    Ok(s)
}

/// The most buffer memory a table may take (threads × buffers × the largest input).
const MAX_BUFFER_BYTES: u64 = 16 << 30;

/// `dicomflow bench io`: prints the table.
pub fn execute(a: &crate::app::cli::IoArgs) -> Result<i32, FatalError> {
    let table = io_table(
        &a.input,
        &a.out,
        &a.threads,
        a.buffers,
        a.streaming,
        &a.write_bytes,
        a.rounds,
    )
    .map_err(FatalError::Other)?;
    crate::app::print::out(&table)
        .map_err(|e| FatalError::Other(format!("writing to stdout: {e}")))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_read_whole_and_outputs_are_written_then_removed() {
        let dir = std::env::temp_dir().join(format!("dicomflow-bench-io-{}", std::process::id()));
        let (inputs, out) = (dir.join("in"), dir.join("out"));
        std::fs::create_dir_all(inputs.join("sub")).unwrap();
        std::fs::write(inputs.join("a"), vec![1u8; 1000]).unwrap();
        std::fs::write(inputs.join("sub/b"), vec![2u8; 3000]).unwrap();
        let files = files_under(&inputs).unwrap();
        assert_eq!(files.len(), 2);
        std::fs::create_dir_all(&out).unwrap();
        let (_, read) = round(&files, 3000, 3, 2, false, 10, &out).unwrap();
        assert_eq!(round(&files, 3000, 2, 1, true, 0, &out).unwrap().1, 4000);
        assert_eq!(read, 4000);
        assert_eq!(std::fs::read(out.join("1.png")).unwrap(), vec![0x5a; 10]);
        let table = io_table(&inputs, &out, &[1, 2], 3, true, &[0, 10], 2).unwrap();
        assert_eq!(table.lines().count(), 2 + 4, "{table}");
        let mut left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["0.png", "1.png"], "only its own folder is removed");
        // A folder of its name already there (another run's, or anyone's) is refused, kept.
        let own = out.join(format!("dicomflow-bench-io-{}", std::process::id()));
        std::fs::create_dir(&own).unwrap();
        std::fs::write(own.join("keep"), b"x").unwrap();
        let e = io_table(&inputs, &out, &[1], 1, false, &[0], 1).unwrap_err();
        assert!(e.contains("earlier run"), "{e}");
        assert!(own.join("keep").exists());
        // Buffers beyond the cap are refused before anything is allocated.
        let e = io_table(&inputs, &out, &[1 << 20], 1 << 10, false, &[0], 1).unwrap_err();
        assert!(e.contains("MiB of buffers"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
