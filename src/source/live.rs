//! Inputs that arrive while the run goes on (a DICOM receiver, a watched folder), as opposed
//! to a list of paths scanned up front: the [`Feed`] hands each arrival to the pipeline over
//! a bounded channel and learns, through [`Feed::done`], when its outputs exist. Two arrivals
//! with the same name (a re-sent instance, a file written twice) never render at the same
//! time: the later one waits until the earlier one is done, so outputs follow arrival order.
//! [`LiveStats`] holds what the live view shows about arrivals.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

/// One input that arrived.
#[derive(Debug, Clone)]
pub struct LiveInput {
    /// The file to render.
    pub path: PathBuf,
    /// Its name for output naming (relative, like a scanned file's path under its folder).
    pub rel: PathBuf,
    /// When it arrived (received in full, or found complete): the start of its latency.
    pub arrived: Instant,
    /// Who sent it (calling AE title and address) or where it was found, for the counts.
    pub origin: Arc<str>,
    /// Keep outputs that already exist instead of rendering (a watched folder's first pass).
    pub skip_existing: bool,
}

/// What became of one live input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every frame written (or already present).
    Rendered,
    /// Not an image (listed, not a failure).
    Skipped,
    /// Some or all frames failed.
    Failed,
    /// The run stopped before it was finished.
    Cancelled,
}

/// What the pipeline reports about one live input once it is done.
#[derive(Debug, Clone)]
pub struct Done {
    pub input: LiveInput,
    pub outcome: Outcome,
    /// When its last output was written (or its failure known).
    pub at: Instant,
}

/// Arrivals that reached the pipeline (or wait behind an earlier one of the same name) and
/// are not done yet.
pub struct Feed {
    tx: Sender<LiveInput>,
    /// No more submissions: the sources have stopped.
    closed: AtomicBool,
    /// Names in flight, with the arrivals of the same name waiting behind them.
    in_flight: Mutex<HashMap<PathBuf, VecDeque<LiveInput>>>,
    stats: Arc<LiveStats>,
}

/// The feed is closed: the pipeline is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the pipeline no longer takes inputs")]
pub struct Closed;

impl Feed {
    /// A feed whose channel holds at most `capacity` inputs; the receiver goes to the
    /// pipeline. A full channel blocks [`submit`](Self::submit): senders wait rather than
    /// memory growing.
    pub fn new(capacity: usize, stats: Arc<LiveStats>) -> (Arc<Feed>, FeedReceiver) {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        let feed = Arc::new(Feed {
            tx,
            closed: AtomicBool::new(false),
            in_flight: Mutex::new(HashMap::new()),
            stats,
        });
        let receiver = FeedReceiver {
            rx,
            feed: feed.clone(),
        };
        (feed, receiver)
    }

    /// No more submissions (the sources have stopped): the receiver ends once every input
    /// in flight is done. What is submitted afterwards stays where it came from.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// The statistics this feed counts into.
    pub fn stats(&self) -> &Arc<LiveStats> {
        &self.stats
    }

    /// Hands `input` to the pipeline, or queues it behind an arrival of the same name still
    /// in flight. Blocks while the pipeline's channel is full.
    pub fn submit(&self, input: LiveInput) -> Result<(), Closed> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Closed);
        }
        self.stats.pending.fetch_add(1, Ordering::Relaxed);
        {
            let mut map = self.in_flight.lock().map_err(|_| Closed)?;
            if let Some(waiting) = map.get_mut(&input.rel) {
                waiting.push_back(input);
                return Ok(());
            }
            map.insert(input.rel.clone(), VecDeque::new());
        }
        self.send(input)
    }

    fn send(&self, input: LiveInput) -> Result<(), Closed> {
        let rel = input.rel.clone();
        self.tx.send(input).map_err(|_| {
            if let Ok(mut map) = self.in_flight.lock() {
                map.remove(&rel);
            }
            Closed
        })
    }

    /// Records that `input` is done and sends the next arrival of the same name, if one
    /// waits.
    pub fn done(&self, input: &LiveInput, outcome: Outcome, finished: Instant) {
        self.stats.finished(input, outcome, finished);
        let next = match self.in_flight.lock() {
            Ok(mut map) => match map.get_mut(&input.rel).and_then(VecDeque::pop_front) {
                Some(next) => Some(next),
                None => {
                    map.remove(&input.rel);
                    None
                }
            },
            Err(_) => None,
        };
        if let Some(next) = next {
            // The pipeline may already be gone (the run is ending): the input then stays
            // where it came from (the spool, the folder) for the next start.
            let _ = self.send(next);
        }
    }

    /// Names in flight or waiting.
    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// The pipeline's end of a [`Feed`].
pub struct FeedReceiver {
    rx: Receiver<LiveInput>,
    feed: Arc<Feed>,
}

impl FeedReceiver {
    /// The next arrival; `None` once the feed is closed and every input is done, or when
    /// `cancel` is set.
    pub fn next(&self, cancel: &AtomicBool) -> Option<LiveInput> {
        loop {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(input) => return Some(input),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return None,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
            if cancel.load(Ordering::Relaxed) {
                return None;
            }
            // Inputs in flight may still send a follower of the same name when done: the
            // end comes only when nothing is in flight.
            if self.feed.closed.load(Ordering::SeqCst) && self.feed.in_flight() == 0 {
                return self.rx.try_recv().ok();
            }
        }
    }

    /// Inputs waiting in the channel, and its capacity (a dashboard gauge).
    pub fn queued(&self) -> (usize, usize) {
        (self.rx.len(), self.rx.capacity().unwrap_or(0))
    }
}

/// Most senders counted by name; the others are counted together.
const MAX_SENDERS: usize = 256;
/// The bucket for senders beyond [`MAX_SENDERS`].
const OTHER_SENDERS: &str = "(others)";

/// Counts per sender (or watched folder).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SenderCounts {
    /// Instances received (acknowledged) or files found.
    pub received: u64,
    /// Instances refused with a failure status.
    pub refused: u64,
    /// Bytes received.
    pub bytes: u64,
}

/// What the live view shows about arrivals. Every field is updated by the sources and the
/// feed and only read by the dashboard, the progress line and the report.
#[derive(Debug)]
pub struct LiveStats {
    /// Inputs that arrived (acknowledged instances, complete files found).
    pub arrivals: AtomicU64,
    /// Arrivals not yet done (in the spool or the folder, waiting or rendering).
    pub pending: AtomicUsize,
    /// Associations open now.
    pub associations_open: AtomicUsize,
    /// Associations accepted since the start.
    pub associations_total: AtomicU64,
    /// Associations refused (called AE, allow-list, limit) or dropped (protocol errors,
    /// timeouts).
    pub associations_refused: AtomicU64,
    /// Instances refused with a failure status.
    pub refused: AtomicU64,
    /// Inputs done, by outcome.
    pub rendered: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    senders: Mutex<BTreeMap<String, SenderCounts>>,
    /// Arrival → outputs written, microseconds (rendered inputs only).
    latency: Mutex<hdrhistogram::Histogram<u64>>,
    started: Instant,
}

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats {
            arrivals: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            associations_open: AtomicUsize::new(0),
            associations_total: AtomicU64::new(0),
            associations_refused: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            rendered: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            senders: Mutex::new(BTreeMap::new()),
            // 1 µs .. 1 hour, 3 significant digits. The bounds are valid constants, so the
            // constructor cannot fail; a fallback keeps this free of panics anyway.
            latency: Mutex::new(
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .or_else(|_| hdrhistogram::Histogram::new(3))
                    .unwrap_or_else(|_| unreachable!("3 significant digits are valid")),
            ),
            started: Instant::now(),
        }
    }
}

/// A copy of [`LiveStats`] at one moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LiveSnapshot {
    pub arrivals: u64,
    pub pending: usize,
    pub associations_open: usize,
    pub associations_total: u64,
    pub associations_refused: u64,
    pub refused: u64,
    pub rendered: u64,
    pub skipped: u64,
    pub failed: u64,
    /// Arrival → outputs written, milliseconds: p50, p95, p99, max (None before the first).
    pub latency_ms: Option<[f64; 4]>,
    pub senders: BTreeMap<String, SenderCounts>,
    /// Seconds since the statistics started.
    pub elapsed_s: f64,
}

impl LiveStats {
    /// Fresh statistics.
    pub fn new() -> Arc<LiveStats> {
        Arc::new(LiveStats::default())
    }

    fn with_sender(&self, origin: &str, f: impl FnOnce(&mut SenderCounts)) {
        if let Ok(mut map) = self.senders.lock() {
            let key = if map.contains_key(origin) || map.len() < MAX_SENDERS {
                origin
            } else {
                OTHER_SENDERS
            };
            f(map.entry(key.to_string()).or_default());
        }
    }

    /// Counts an input that arrived from `origin` (`bytes` long).
    pub fn arrived(&self, origin: &str, bytes: u64) {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        self.with_sender(origin, |c| {
            c.received += 1;
            c.bytes += bytes;
        });
    }

    /// Counts an instance refused with a failure status.
    pub fn refused_from(&self, origin: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.with_sender(origin, |c| c.refused += 1);
    }

    fn finished(&self, input: &LiveInput, outcome: Outcome, at: Instant) {
        let _ = self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        match outcome {
            Outcome::Rendered => {
                self.rendered.fetch_add(1, Ordering::Relaxed);
                let us = at.saturating_duration_since(input.arrived).as_micros() as u64;
                if let Ok(mut h) = self.latency.lock() {
                    h.saturating_record(us.max(1));
                }
            }
            Outcome::Skipped => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Failed => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Cancelled => {}
        }
    }

    /// A consistent-enough copy for display and the report.
    pub fn snapshot(&self) -> LiveSnapshot {
        let latency_ms = self.latency.lock().ok().and_then(|h| {
            (!h.is_empty()).then(|| {
                let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
                [ms(0.50), ms(0.95), ms(0.99), h.max() as f64 / 1e3]
            })
        });
        LiveSnapshot {
            arrivals: self.arrivals.load(Ordering::Relaxed),
            pending: self.pending.load(Ordering::Relaxed),
            associations_open: self.associations_open.load(Ordering::Relaxed),
            associations_total: self.associations_total.load(Ordering::Relaxed),
            associations_refused: self.associations_refused.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            rendered: self.rendered.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            latency_ms,
            senders: self.senders.lock().map(|m| m.clone()).unwrap_or_default(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// Serializes a duration as seconds (a number), as the report writes durations.
pub(crate) fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Waits until `cond` holds or `timeout` passes, polling every few milliseconds (for
/// shutdown paths and tests, never for data).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(rel: &str, n: u32) -> LiveInput {
        LiveInput {
            path: PathBuf::from(format!("/spool/{n}-{rel}")),
            rel: PathBuf::from(rel),
            arrived: Instant::now(),
            origin: Arc::from("SCU@127.0.0.1"),
            skip_existing: false,
        }
    }

    #[test]
    fn same_names_wait_for_each_other_and_others_pass() {
        let stats = LiveStats::new();
        let (feed, rx) = Feed::new(8, stats.clone());
        let never = AtomicBool::new(false);
        feed.submit(input("a.dcm", 1)).unwrap();
        feed.submit(input("a.dcm", 2)).unwrap();
        feed.submit(input("b.dcm", 3)).unwrap();
        let rx = &rx.rx;
        let first = rx.try_recv().unwrap();
        assert_eq!(first.path, PathBuf::from("/spool/1-a.dcm"));
        assert_eq!(rx.try_recv().unwrap().rel, PathBuf::from("b.dcm"));
        assert!(rx.try_recv().is_err(), "the second a.dcm must wait");
        assert_eq!(stats.pending.load(Ordering::Relaxed), 3);
        feed.done(&first, Outcome::Rendered, Instant::now());
        let second = rx.try_recv().unwrap();
        assert_eq!(second.path, PathBuf::from("/spool/2-a.dcm"));
        feed.done(&second, Outcome::Failed, Instant::now());
        assert_eq!(feed.in_flight(), 1);
        let s = stats.snapshot();
        assert_eq!((s.pending, s.rendered, s.failed), (1, 1, 1));
        assert!(s.latency_ms.is_some());
        // Closed: nothing more is taken, and the receiver ends once b.dcm is done.
        feed.close();
        assert_eq!(feed.submit(input("c.dcm", 4)), Err(Closed));
        let receiver = FeedReceiver {
            rx: rx.clone(),
            feed: feed.clone(),
        };
        let b = input("b.dcm", 3);
        std::thread::scope(|s| {
            let ended = s.spawn(|| receiver.next(&never));
            std::thread::sleep(Duration::from_millis(120));
            assert!(!ended.is_finished(), "ended while b.dcm was in flight");
            feed.done(&b, Outcome::Rendered, Instant::now());
            assert!(ended.join().unwrap().is_none());
        });
    }

    #[test]
    fn sender_counts_are_bounded() {
        let stats = LiveStats::new();
        for i in 0..(MAX_SENDERS + 10) {
            stats.arrived(&format!("AE{i}@10.0.0.1"), 100);
        }
        stats.refused_from("AE0@10.0.0.1");
        let s = stats.snapshot();
        assert_eq!(s.senders.len(), MAX_SENDERS + 1);
        assert_eq!(s.senders[OTHER_SENDERS].received, 10);
        assert_eq!(s.senders["AE0@10.0.0.1"].refused, 1);
        assert_eq!(s.arrivals, (MAX_SENDERS + 10) as u64);
    }
}
