//! The writer of the tracing subscriber: stderr normally, a file while the dashboard owns the
//! terminal (colour codes stripped there), and around the progress bar while one is shown (the
//! bar is hidden for the line, then redrawn).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use indicatif::ProgressBar;
use tracing_subscriber::fmt::MakeWriter;

enum Target {
    Stderr,
    File(File),
    Bar(ProgressBar),
}

static TARGET: Mutex<Target> = Mutex::new(Target::Stderr);

fn set(t: Target) {
    *TARGET.lock().unwrap_or_else(|e| e.into_inner()) = t;
}

/// Sends log lines to `path` (appending; parent folders are created).
pub fn to_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    set(Target::File(f));
    Ok(())
}

/// Prints log lines above the progress bar.
pub fn around_bar(bar: ProgressBar) {
    set(Target::Bar(bar));
}

/// Back to plain stderr.
pub fn to_stderr() {
    set(Target::Stderr);
}

/// Removes ANSI escape sequences (CSI `ESC [ ... final`, and two-byte `ESC x`).
fn strip_ansi(buf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len());
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == 0x1b {
            i += 1;
            if buf.get(i) == Some(&b'[') {
                i += 1;
                while i < buf.len() && !(0x40..=0x7e).contains(&buf[i]) {
                    i += 1;
                }
            }
            i += 1;
        } else {
            out.push(buf[i]);
            i += 1;
        }
    }
    out
}

/// `MakeWriter` for `tracing_subscriber::fmt().with_writer(LogSink)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogSink;

/// One log event's writer.
pub struct SinkWriter;

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut t = TARGET.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *t {
            Target::Stderr => {
                drop(t);
                // A closed stderr (`| head -1`) loses the line, not the run.
                let _ = io::stderr().write_all(buf);
            }
            Target::File(f) => f.write_all(&strip_ansi(buf))?,
            Target::Bar(bar) => {
                let bar = bar.clone();
                drop(t);
                let _ = bar.suspend(|| io::stderr().write_all(buf));
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter
    }
}

#[cfg(test)]
mod tests {
    use super::strip_ansi;

    #[test]
    fn colour_codes_are_stripped() {
        assert_eq!(
            strip_ansi(b"\x1b[2m2025\x1b[0m \x1b[33m WARN\x1b[0m x"),
            b"2025  WARN x"
        );
    }
}
