//! `--trace FILE.json`: a Chrome trace-event timeline (opens in Perfetto or chrome://tracing)
//! with one track per thread (or GPU stream) and one span per slice per stage (and per file for
//! its header, in read+decode), so the overlap of I/O and compute can be seen. Queue depths and
//! slot occupancy sampled by the display thread appear as counter tracks (`ph: "C"`).
//!
//! Events are written to the file as they happen (through a buffer), not kept: memory stays
//! the same for a run of 100 000 files as for one of ten. The file is created when the run
//! starts (so an unwritable path fails before any work) and appears at its path, complete,
//! only when [`Tracer::finish`] is called (see [`PendingFile`]).

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use crate::observe::stats::StageId;
use crate::output::atomic::PendingFile;

/// Where the events go, and what is needed to close the document.
struct Sink {
    out: Option<BufWriter<PendingFile>>,
    /// Track name → thread id in the trace, in order of first use.
    tids: HashMap<String, usize>,
    /// No event written yet (no comma before the next).
    first: bool,
    /// The first write error: writing stops there, [`Tracer::finish`] returns it.
    error: Option<std::io::Error>,
}

/// Writes a run's trace events as they come.
pub struct Tracer {
    start: Instant,
    sink: Mutex<Sink>,
}

/// One complete span (`ph: "X"`).
#[derive(serde::Serialize)]
struct SpanEvent<'a> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: u32,
    tid: usize,
    args: SpanArgs<'a>,
}

#[derive(serde::Serialize)]
struct SpanArgs<'a> {
    slice: &'a str,
    stage: &'a str,
}

/// Order of the thread tracks in the viewer: pipeline order, then the rest.
fn sort_index(track: &str) -> usize {
    let prefix = track.split('-').next().unwrap_or(track);
    match prefix {
        "scan" => 0,
        "load" => 1,
        "render" | "stream" | "gpu" => 2,
        "write" => 3,
        _ => 9,
    }
}

impl Tracer {
    /// Starts a trace to be written at `path` (created now, in place when finished).
    pub fn create(path: &Path) -> std::io::Result<Tracer> {
        let mut out = BufWriter::with_capacity(64 << 10, PendingFile::create(path, true)?);
        out.write_all(b"{\"traceEvents\":[\n")?;
        Ok(Tracer {
            start: Instant::now(),
            sink: Mutex::new(Sink {
                out: Some(out),
                tids: HashMap::new(),
                first: true,
                error: None,
            }),
        })
    }

    /// Appends one event (`write` serializes it), unless an earlier write failed.
    fn emit(&self, write: impl FnOnce(&mut Vec<u8>, &mut HashMap<String, usize>)) {
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        let sink = &mut *sink;
        if sink.error.is_some() {
            return;
        }
        let Some(out) = sink.out.as_mut() else {
            return; // finished
        };
        let mut bytes = Vec::with_capacity(192);
        if !sink.first {
            bytes.extend_from_slice(b",\n");
        }
        write(&mut bytes, &mut sink.tids);
        sink.first = false;
        if let Err(e) = out.write_all(&bytes) {
            sink.error = Some(e);
        }
    }

    /// Records `stage` of slice `label` on track `track` (a thread's name, a GPU stream):
    /// what [`StageClock`](super::StageClock) calls for the stage threads. `label` is
    /// formatted once, here, into the span's name (its `slice` argument is a part of it).
    pub fn span_on(
        &self,
        track: &str,
        stage: StageId,
        label: impl std::fmt::Display,
        start: Instant,
        end: Instant,
    ) {
        let ts = start.saturating_duration_since(self.start).as_secs_f64() * 1e6;
        let dur = end.saturating_duration_since(start).as_secs_f64() * 1e6;
        self.emit(|bytes, tids| {
            // Looked up before inserting: the track's name is copied once, not per span.
            let tid = match tids.get(track) {
                Some(&tid) => tid,
                None => {
                    let tid = tids.len() + 1;
                    tids.insert(track.to_string(), tid);
                    tid
                }
            };
            let stage = stage.name();
            let name = format!("{stage} {label}");
            let event = SpanEvent {
                name: &name,
                cat: stage,
                ph: "X",
                ts,
                dur,
                pid: 1,
                tid,
                args: SpanArgs {
                    slice: &name[stage.len() + 1..],
                    stage,
                },
            };
            let _ = serde_json::to_writer(bytes, &event);
        });
    }

    /// Records a sample of a counter track (e.g. queue depths) at the current time: one
    /// series per `(name, value)`.
    pub fn counter(&self, name: &str, values: Vec<(String, f64)>) {
        let ts = self.start.elapsed().as_secs_f64() * 1e6;
        self.emit(|bytes, _| {
            let args: serde_json::Map<String, serde_json::Value> = values
                .into_iter()
                .map(|(k, v)| (k, serde_json::json!(v)))
                .collect();
            let event = serde_json::json!({
                "name": name, "ph": "C", "ts": ts, "pid": 1, "tid": 0, "args": args,
            });
            let _ = serde_json::to_writer(bytes, &event);
        });
    }

    /// Closes the document (thread names and order, the process name) and makes the file
    /// appear at its path; the first error of the whole trace, if any (then no file appears).
    /// Events after this are dropped.
    pub fn finish(&self) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut out) = sink.out.take() else {
            return Ok(());
        };
        if let Some(e) = sink.error.take() {
            return Err(e);
        }
        let mut tracks: Vec<_> = sink.tids.drain().collect();
        tracks.sort_by_key(|t| t.1);
        let mut events = Vec::with_capacity(2 * tracks.len() + 1);
        for (name, tid) in tracks {
            let order = sort_index(&name) * 1000 + tid;
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                "args": { "name": name },
            }));
            events.push(serde_json::json!({
                "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid,
                "args": { "sort_index": order },
            }));
        }
        events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
            "args": { "name": "dicomflow" },
        }));
        for (i, e) in events.iter().enumerate() {
            if !(sink.first && i == 0) {
                out.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut out, e)?;
        }
        out.write_all(b"\n],\"displayTimeUnit\":\"ms\"}\n")?;
        out.into_inner().map_err(|e| e.into_error())?.persist()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_counters_and_thread_names_are_written() {
        let dir = crate::scratch_dir("trace");
        let path = dir.join("t.json");
        let t = Tracer::create(&path).unwrap();
        let now = Instant::now();
        t.span_on("write-0", StageId::Write, "a#1", now, now);
        t.span_on("load-0", StageId::ReadDecode, "a#1", now, now);
        t.counter("queues", vec![("load → render".into(), 3.0)]);
        assert!(!path.exists(), "the trace appears when finished");
        t.finish().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(ev.iter().filter(|e| e["ph"] == "X").count(), 2);
        assert_eq!(ev.iter().filter(|e| e["ph"] == "C").count(), 1);
        let names: Vec<_> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["write-0", "load-0"]);
        // An empty trace is a valid document too.
        let empty = dir.join("e.json");
        Tracer::create(&empty).unwrap().finish().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&empty).unwrap()).unwrap();
        assert_eq!(v["traceEvents"].as_array().unwrap().len(), 1);
        // A path that cannot be written fails when the trace is created.
        assert!(Tracer::create(Path::new("/proc/t.json")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn memory_does_not_grow_with_the_events() {
        // Issue 22: 100k files took 2.5 GB with --trace when spans were kept until the end.
        let dir = crate::scratch_dir("trace-stream");
        let path = dir.join("t.json");
        let t = Tracer::create(&path).unwrap();
        let now = Instant::now();
        for i in 0..50_000 {
            t.span_on("write-0", StageId::Write, format!("slice{i}#1"), now, now);
        }
        // Everything but the buffer's last part is in the (unnamed) file already.
        let sink = t.sink.lock().unwrap();
        let buffered = sink.out.as_ref().unwrap().buffer().len();
        assert!(buffered <= 64 << 10, "{buffered} bytes held");
        drop(sink);
        t.finish().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["traceEvents"].as_array().unwrap().len(), 50_000 + 3);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
