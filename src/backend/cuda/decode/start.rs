//! When the first input file's nvJPEG codec starts taking frames (`gpu.decode_start`).
//! Creating a nvJPEG handle takes about 280 ms on the H200 host, and the first decode of each
//! worker thread another 300 ms (the traces of session 20: both workers' first calls 303 and
//! 360 ms at once, the next ones 2 ms), while the CPU decoders of 16 cores render 512² JPEG
//! lossless at ~2600 slices/s: a run of 1000 slices that waits for the GPU has lost before
//! the GPU decodes its first frame.
//!
//! With `"cpu"` the gate of that codec stays closed (the loaders decode its frames on the CPU)
//! while the codec thread makes its handles and a loader hands over a copy of the first such
//! frame ([`StartGate::offer`]); then the render workers, one at a time so that the others
//! keep rendering what the CPU decodes, each decode that sample once on their own thread and
//! stream ([`StartGate::warm_turn`]); when the last has, the gate opens. No frame of the run
//! waits for the library's start. Other codecs are not gated (their first frame pays), nor
//! JPEG 2000 (its CPU decoder is 10–35× slower per frame than nvJPEG2000's start).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::backend::options::GpuDecodeStart;
use crate::decode::compressed::{GpuCodec, GpuStart, Sample};

/// The gate of the first input file's nvJPEG codec.
pub struct StartGate {
    /// The codec gated (`None`: every codec is open).
    gated: Option<GpuCodec>,
    open: AtomicBool,
    /// The codec's handles exist (the workers may take their turns).
    handles: AtomicBool,
    /// Render workers registered, and those that have decoded the sample.
    workers: AtomicUsize,
    warmed: AtomicUsize,
    /// A worker is decoding the sample now.
    warming: AtomicBool,
    /// Whether a sample is still wanted (cheap to ask per file).
    wants_sample: AtomicBool,
    sample: Mutex<Option<Arc<Sample>>>,
    arrived: Condvar,
    /// Frames the loaders decoded on the CPU while the gate was closed.
    meanwhile: AtomicU64,
    /// Nanoseconds after `origin` when the gate opened (0: not yet).
    opened_at: AtomicU64,
    origin: Instant,
    /// Why the gate never opens for this job (too little input for the start to pay).
    skipped: Option<String>,
}

impl StartGate {
    /// The gate of `first` (the first input file's codec, when nvJPEG decodes it) as `start`
    /// says: `Wait`, or no such codec, leaves every codec open; `skipped` (why the job is too
    /// small for the start to pay) keeps it closed for good.
    pub fn new(
        start: GpuDecodeStart,
        first: Option<GpuCodec>,
        skipped: Option<String>,
    ) -> StartGate {
        let gated = first.filter(|c| {
            start == GpuDecodeStart::Cpu && matches!(c, GpuCodec::JpegLossless | GpuCodec::JpegDct)
        });
        StartGate {
            gated,
            open: AtomicBool::new(gated.is_none()),
            handles: AtomicBool::new(false),
            workers: AtomicUsize::new(0),
            warmed: AtomicUsize::new(0),
            warming: AtomicBool::new(false),
            wants_sample: AtomicBool::new(gated.is_some() && skipped.is_none()),
            sample: Mutex::new(None),
            arrived: Condvar::new(),
            meanwhile: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            origin: Instant::now(),
            skipped: skipped.filter(|_| gated.is_some()),
        }
    }

    /// The codec gated, if any, and whether it is to be started.
    pub fn starts(&self) -> Option<GpuCodec> {
        self.gated.filter(|_| self.skipped.is_none())
    }

    /// The codec gated, if any.
    pub fn gated(&self) -> Option<GpuCodec> {
        self.gated
    }

    /// What the loaders do with a frame of `codec` now; a `Meanwhile` is counted.
    pub fn start(&self, codec: GpuCodec) -> GpuStart {
        if self.gated != Some(codec) || self.open.load(Ordering::Acquire) {
            return GpuStart::Now;
        }
        self.meanwhile.fetch_add(1, Ordering::Relaxed);
        GpuStart::Meanwhile {
            sample: self.wants_sample.load(Ordering::Relaxed),
        }
    }

    /// A loader's copy of a frame of the gated codec; the first is kept.
    pub fn offer(&self, sample: Sample) {
        if self.gated != Some(sample.frame.coding.codec)
            || !self.wants_sample.swap(false, Ordering::AcqRel)
        {
            return;
        }
        if let Ok(mut kept) = self.sample.lock() {
            *kept = Some(Arc::new(sample));
        }
        self.arrived.notify_all();
    }

    /// Whether a sample came, waiting for one up to `patience` (`false`: none came, e.g. the
    /// first file's frames were not for the GPU after all).
    pub fn wait_for_sample(&self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let Ok(mut kept) = self.sample.lock() else {
            return false;
        };
        loop {
            if kept.is_some() {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            match self.arrived.wait_timeout(kept, left) {
                Ok((k, _)) => kept = k,
                Err(_) => return false,
            }
        }
    }

    /// The codec's handles exist: the workers may warm up.
    pub fn handles_ready(&self) {
        self.handles.store(true, Ordering::Release);
    }

    /// A render worker that will take the codec's frames once the gate opens.
    pub fn register_worker(&self) {
        self.workers.fetch_add(1, Ordering::AcqRel);
    }

    /// The sample, for the calling worker to decode now on its own thread and stream, when the
    /// gate is closed, the handles exist, a sample came and no other worker is warming up;
    /// the caller then reports [`worker_warmed`](Self::worker_warmed).
    pub fn warm_turn(&self) -> Option<Arc<Sample>> {
        if self.open.load(Ordering::Acquire)
            || !self.handles.load(Ordering::Acquire)
            || self.skipped.is_some()
        {
            return None;
        }
        let sample = self.sample.lock().ok()?.clone()?;
        if self.warming.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(sample)
    }

    /// The worker that had the turn has decoded the sample (or tried: its start is paid
    /// either way); the gate opens when every registered worker has.
    pub fn worker_warmed(&self) {
        self.warmed.fetch_add(1, Ordering::AcqRel);
        self.warming.store(false, Ordering::Release);
        self.open_when_all_warm();
    }

    /// A registered worker that has not warmed up ends (`warming`: it had the turn, e.g. it
    /// panicked in the library): it no longer counts, and gives its turn back.
    pub fn unregister_worker(&self, warming: bool) {
        let _ = self
            .workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if warming {
            self.warming.store(false, Ordering::Release);
        }
        self.open_when_all_warm();
    }

    fn open_when_all_warm(&self) {
        let warmed = self.warmed.load(Ordering::Acquire);
        if warmed > 0 && warmed >= self.workers.load(Ordering::Acquire) {
            self.open();
        }
    }

    /// Whether a worker may still be asked to warm up: a codec is to be started and its gate
    /// is closed (a cheap check for every render call).
    pub fn warm_up_wanted(&self) -> bool {
        self.starts().is_some() && !self.open.load(Ordering::Acquire)
    }

    /// The codec is started (or will never be better started): its frames go to the GPU.
    pub fn open(&self) {
        self.wants_sample.store(false, Ordering::Relaxed);
        if !self.open.swap(true, Ordering::AcqRel) {
            let ns = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.opened_at.store(ns.max(1), Ordering::Release);
        }
    }

    /// The line for the log when the run ends, when the CPU decoded files meanwhile.
    pub fn said(&self) -> Option<String> {
        let codec = self.gated?;
        let files = self.meanwhile.load(Ordering::Relaxed);
        (files > 0).then(|| {
            let at = self.opened_at.load(Ordering::Acquire);
            let codec = codec.name();
            if let Some(why) = &self.skipped {
                return format!(
                    "GPU decode start: {files} {codec} frame(s) decoded on the CPU, nvJPEG not \
                     started: {why} (gpu.decode_start = \"cpu\")"
                );
            }
            let when = if at > 0 {
                format!("the GPU took over {:.0} ms after start-up", at as f64 / 1e6)
            } else {
                "the run ended first".to_string()
            };
            format!(
                "GPU decode start: {files} {codec} frame(s) decoded on the CPU while nvJPEG \
                 started (gpu.decode_start = \"cpu\"); {when}"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::compressed::{EncodedFrame, FrameCoding};
    use crate::decode::info::Photometric;

    fn sample(codec: GpuCodec, len: usize) -> Sample {
        Sample {
            frame: EncodedFrame {
                coding: Arc::new(FrameCoding {
                    transfer_syntax: String::new(),
                    codec,
                    rows: 1,
                    cols: 1,
                    samples_per_pixel: 1,
                    bits_allocated: 8,
                    stored_photometric: Photometric::Monochrome2,
                }),
                len,
                lossless: true,
            },
            bytes: vec![0; len],
        }
    }

    #[test]
    fn the_gated_codec_decodes_on_the_cpu_until_every_worker_warmed_up() {
        let gate = StartGate::new(GpuDecodeStart::Cpu, Some(GpuCodec::JpegLossless), None);
        let jls = GpuCodec::JpegLossless;
        gate.register_worker();
        gate.register_worker();
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: true });
        // Other codecs are not gated.
        assert_eq!(gate.start(GpuCodec::JpegDct), GpuStart::Now);
        assert_eq!(gate.start(GpuCodec::Jpeg2000), GpuStart::Now);
        // No turn before the handles and a sample exist.
        assert!(gate.warm_turn().is_none());
        // A sample of another codec is not kept; the first of this one is, once.
        gate.offer(sample(GpuCodec::JpegDct, 3));
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: true });
        gate.offer(sample(jls, 5));
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: false });
        gate.offer(sample(jls, 7));
        assert!(gate.wait_for_sample(Duration::ZERO));
        assert!(gate.warm_turn().is_none());
        gate.handles_ready();
        // One worker at a time.
        let first = gate.warm_turn().map(|s| s.bytes.len());
        assert_eq!(first, Some(5));
        assert!(gate.warm_turn().is_none());
        gate.worker_warmed();
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: false });
        assert!(gate.warm_turn().is_some());
        gate.worker_warmed();
        // Both warmed: open, and no more turns.
        assert_eq!(gate.start(jls), GpuStart::Now);
        assert!(gate.warm_turn().is_none());
        let line = gate.said().unwrap_or_default();
        assert!(line.contains("4 JPEG lossless frame(s)"), "{line}");
        assert!(line.contains("took over"), "{line}");
    }

    #[test]
    fn racing_workers_get_one_turn_at_a_time_and_a_lost_worker_gives_its_turn_back() {
        let gate = Arc::new(StartGate::new(
            GpuDecodeStart::Cpu,
            Some(GpuCodec::JpegLossless),
            None,
        ));
        for _ in 0..3 {
            gate.register_worker();
        }
        gate.offer(sample(GpuCodec::JpegLossless, 5));
        gate.handles_ready();
        let turns: usize = (0..8)
            .map(|_| {
                let g = gate.clone();
                std::thread::spawn(move || g.warm_turn().is_some())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| usize::from(t.join().unwrap_or(false)))
            .sum();
        assert_eq!(turns, 1);
        // The worker with the turn dies: the turn goes back, and it no longer counts.
        gate.unregister_worker(true);
        assert!(gate.warm_turn().is_some());
        gate.worker_warmed();
        assert!(gate.warm_up_wanted());
        // The last one ends without warming up: the two that warmed up open the gate.
        gate.unregister_worker(false);
        assert!(!gate.warm_up_wanted());
        assert_eq!(gate.start(GpuCodec::JpegLossless), GpuStart::Now);
    }

    #[test]
    fn a_job_too_small_for_the_start_decodes_on_the_cpu_throughout() {
        let why = "100 MiB of input is below the 256 MiB".to_string();
        let gate = StartGate::new(
            GpuDecodeStart::Cpu,
            Some(GpuCodec::JpegLossless),
            Some(why.clone()),
        );
        assert_eq!(gate.starts(), None);
        gate.register_worker();
        let jls = GpuCodec::JpegLossless;
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: false });
        gate.offer(sample(jls, 5));
        gate.handles_ready();
        assert!(gate.warm_turn().is_none());
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: false });
        let line = gate.said().unwrap_or_default();
        assert!(
            line.contains(&why) && line.contains("2 JPEG lossless"),
            "{line}"
        );
    }

    #[test]
    fn a_sample_offered_later_wakes_the_codec_thread() {
        let gate = Arc::new(StartGate::new(
            GpuDecodeStart::Cpu,
            Some(GpuCodec::JpegDct),
            None,
        ));
        assert!(!gate.wait_for_sample(Duration::from_millis(1)));
        let g = gate.clone();
        let waiter = std::thread::spawn(move || g.wait_for_sample(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        gate.offer(sample(GpuCodec::JpegDct, 4));
        assert_eq!(waiter.join().ok(), Some(true));
    }

    #[test]
    fn waiting_or_jpeg_2000_first_gates_nothing() {
        for (start, first) in [
            (GpuDecodeStart::Wait, Some(GpuCodec::JpegLossless)),
            (GpuDecodeStart::Cpu, Some(GpuCodec::Jpeg2000)),
            (GpuDecodeStart::Cpu, None),
        ] {
            let gate = StartGate::new(start, first, None);
            for codec in [
                GpuCodec::JpegLossless,
                GpuCodec::JpegDct,
                GpuCodec::Jpeg2000,
            ] {
                assert_eq!(gate.start(codec), GpuStart::Now);
            }
            gate.handles_ready();
            assert!(gate.warm_turn().is_none());
            assert!(gate.said().is_none());
        }
        // A gate that opened before any file came says nothing either.
        let gate = StartGate::new(GpuDecodeStart::Cpu, Some(GpuCodec::JpegLossless), None);
        gate.open();
        assert_eq!(gate.start(GpuCodec::JpegLossless), GpuStart::Now);
        assert!(gate.said().is_none());
    }
}
