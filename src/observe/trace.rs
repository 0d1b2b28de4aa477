//! `--trace FILE.json`: a Chrome trace-event timeline (opens in Perfetto or chrome://tracing)
//! with one track per thread (or GPU stream) and one span per slice per stage (and per file for
//! its header, in read+decode), so the overlap of I/O and compute can be seen. Queue depths and
//! slot occupancy sampled by the display thread appear as counter tracks (`ph: "C"`).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use crate::observe::stats::StageId;

#[derive(Debug, Clone)]
struct Span {
    name: String,
    stage: &'static str,
    track: String,
    ts_us: f64,
    dur_us: f64,
}

#[derive(Debug, Clone)]
struct Counter {
    name: String,
    ts_us: f64,
    values: Vec<(String, f64)>,
}

/// Collects spans during a run.
pub struct Tracer {
    start: Instant,
    spans: Mutex<Vec<Span>>,
    counters: Mutex<Vec<Counter>>,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer {
            start: Instant::now(),
            spans: Mutex::new(Vec::new()),
            counters: Mutex::new(Vec::new()),
        }
    }
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
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `stage` of slice `label` on the calling thread's track.
    pub fn span(&self, stage: StageId, label: &str, start: Instant, end: Instant) {
        let track = std::thread::current().name().unwrap_or("main").to_string();
        self.span_on(&track, stage, label, start, end);
    }

    /// Records a span on a named track (e.g. a GPU stream).
    pub fn span_on(&self, track: &str, stage: StageId, label: &str, start: Instant, end: Instant) {
        let ts = start.saturating_duration_since(self.start).as_secs_f64() * 1e6;
        let dur = end.saturating_duration_since(start).as_secs_f64() * 1e6;
        if let Ok(mut v) = self.spans.lock() {
            v.push(Span {
                name: label.to_string(),
                stage: stage.name(),
                track: track.to_string(),
                ts_us: ts,
                dur_us: dur,
            });
        }
    }

    /// Records a sample of a counter track (e.g. queue depths) at the current time: one
    /// series per `(name, value)`.
    pub fn counter(&self, name: &str, values: Vec<(String, f64)>) {
        let ts_us = self.start.elapsed().as_secs_f64() * 1e6;
        if let Ok(mut v) = self.counters.lock() {
            v.push(Counter {
                name: name.to_string(),
                ts_us,
                values,
            });
        }
    }

    /// Number of spans recorded.
    pub fn len(&self) -> usize {
        self.spans.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the trace-event JSON (`{"traceEvents": [...]}`) atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let spans = self.spans.lock().map(|v| v.clone()).unwrap_or_default();
        let mut tids: HashMap<String, usize> = HashMap::new();
        let mut events = Vec::with_capacity(spans.len() + 16);
        for s in &spans {
            let next = tids.len() + 1;
            let tid = *tids.entry(s.track.clone()).or_insert(next);
            events.push(serde_json::json!({
                "name": format!("{} {}", s.stage, s.name),
                "cat": s.stage,
                "ph": "X",
                "ts": s.ts_us,
                "dur": s.dur_us,
                "pid": 1,
                "tid": tid,
                "args": { "slice": s.name, "stage": s.stage },
            }));
        }
        let counters = self.counters.lock().map(|v| v.clone()).unwrap_or_default();
        for c in &counters {
            let args: serde_json::Map<String, serde_json::Value> = c
                .values
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::json!(v)))
                .collect();
            events.push(serde_json::json!({
                "name": c.name, "ph": "C", "ts": c.ts_us, "pid": 1, "tid": 0, "args": args,
            }));
        }
        let mut tracks: Vec<_> = tids.into_iter().collect();
        tracks.sort_by_key(|t| t.1);
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
        let doc = serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" });
        let mut bytes = Vec::new();
        serde_json::to_writer(&mut bytes, &doc)?;
        bytes.flush()?;
        crate::output::atomic::write_atomic(path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_counters_and_thread_names_are_written() {
        let t = Tracer::new();
        let now = Instant::now();
        t.span_on("write-0", StageId::Write, "a#1", now, now);
        t.span_on("load-0", StageId::ReadDecode, "a#1", now, now);
        t.counter("queues", vec![("load → render".into(), 3.0)]);
        let dir = std::env::temp_dir().join(format!("dicomflow-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        t.write(&path).unwrap();
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
