//! `--trace FILE.json`: a Chrome trace-event timeline (opens in Perfetto or chrome://tracing)
//! with one track per thread (or GPU stream) and one span per slice per stage, so the overlap
//! of I/O and compute can be seen.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use crate::stats::StageId;

#[derive(Debug, Clone)]
struct Span {
    name: String,
    stage: &'static str,
    track: String,
    ts_us: f64,
    dur_us: f64,
}

/// Collects spans during a run.
pub struct Tracer {
    start: Instant,
    spans: Mutex<Vec<Span>>,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer {
            start: Instant::now(),
            spans: Mutex::new(Vec::new()),
        }
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
        let mut tracks: Vec<_> = tids.into_iter().collect();
        tracks.sort_by_key(|t| t.1);
        for (name, tid) in tracks {
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                "args": { "name": name },
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
