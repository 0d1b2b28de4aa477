//! When the first input file's nvJPEG codec starts taking frames (`gpu.decode_start`).
//! Creating a nvJPEG handle and its first decode take about 0.55 s on the H200 host (`bench
//! decode`: lossless handle 275 ms, the first frame of a worker 300 ms, of a second worker
//! 50 ms), while the CPU decoders of 16 cores render 512² JPEG lossless at ~2900 slices/s: a
//! run of 1000 slices that waits for the GPU has lost before the GPU decodes its first frame.
//!
//! With `"cpu"` the gate of that codec stays closed (the loaders decode its frames on the CPU)
//! until the codec thread has made its handles and decoded a sample: a copy of the first such
//! frame, which a loader hands over ([`StartGate::offer`]) and then decodes itself as usual, so
//! no frame of the run waits for the library's start. Other codecs are not gated (their first
//! frame pays), nor JPEG 2000 (its CPU decoder is 10–35× slower per frame than nvJPEG2000's
//! start).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::backend::options::GpuDecodeStart;
use crate::decode::compressed::{EncodedFrame, GpuCodec};

/// What the loaders do with a file of a codec the route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuStart {
    /// Leave its frames compressed for the GPU.
    Now,
    /// Decode it on the CPU; `sample`: hand a copy of its first frame to
    /// [`StartGate::offer`] first.
    Meanwhile { sample: bool },
}

/// A frame's codestream for the codec thread's first decode.
pub struct Sample {
    pub frame: EncodedFrame,
    pub bytes: Vec<u8>,
}

/// The gate of the first input file's nvJPEG codec.
pub struct StartGate {
    /// The codec gated (`None`: every codec is open).
    gated: Option<GpuCodec>,
    open: AtomicBool,
    /// Whether a sample is still wanted (cheap to ask per file).
    wants_sample: AtomicBool,
    sample: Mutex<Option<Sample>>,
    arrived: Condvar,
    /// Files the loaders decoded on the CPU while the gate was closed.
    meanwhile: AtomicU64,
    /// Nanoseconds after `origin` when the gate opened (0: not yet).
    opened_at: AtomicU64,
    origin: Instant,
}

impl StartGate {
    /// The gate of `first` (the first input file's codec, when nvJPEG decodes it) as `start`
    /// says: `Wait`, or no such codec, leaves every codec open.
    pub fn new(start: GpuDecodeStart, first: Option<GpuCodec>) -> StartGate {
        let gated = first.filter(|c| {
            start == GpuDecodeStart::Cpu && matches!(c, GpuCodec::JpegLossless | GpuCodec::JpegDct)
        });
        StartGate {
            gated,
            open: AtomicBool::new(gated.is_none()),
            wants_sample: AtomicBool::new(gated.is_some()),
            sample: Mutex::new(None),
            arrived: Condvar::new(),
            meanwhile: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// The codec gated, if any.
    pub fn gated(&self) -> Option<GpuCodec> {
        self.gated
    }

    /// What the loaders do with a file of `codec` now; a `Meanwhile` is counted.
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
            *kept = Some(sample);
        }
        self.arrived.notify_all();
    }

    /// The sample, waiting for it up to `patience` (`None`: none came, e.g. the first file's
    /// frames were not for the GPU after all).
    pub fn take_sample(&self, patience: Duration) -> Option<Sample> {
        let deadline = Instant::now() + patience;
        let mut kept = self.sample.lock().ok()?;
        loop {
            if let Some(s) = kept.take() {
                return Some(s);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            kept = self.arrived.wait_timeout(kept, left).ok()?.0;
        }
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
            let when = if at > 0 {
                format!("the GPU took over {:.0} ms after start-up", at as f64 / 1e6)
            } else {
                "the run ended first".to_string()
            };
            format!(
                "GPU decode start: {files} {} file(s) decoded on the CPU while nvJPEG started \
                 (gpu.decode_start = \"cpu\"); {when}",
                codec.name()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::decode::compressed::FrameCoding;
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
    fn the_gated_codec_decodes_on_the_cpu_until_the_gate_opens() {
        let gate = StartGate::new(GpuDecodeStart::Cpu, Some(GpuCodec::JpegLossless));
        let jls = GpuCodec::JpegLossless;
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: true });
        // Other codecs are not gated.
        assert_eq!(gate.start(GpuCodec::JpegDct), GpuStart::Now);
        assert_eq!(gate.start(GpuCodec::Jpeg2000), GpuStart::Now);
        // A sample of another codec is not kept; the first of this one is, once.
        gate.offer(sample(GpuCodec::JpegDct, 3));
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: true });
        gate.offer(sample(jls, 5));
        assert_eq!(gate.start(jls), GpuStart::Meanwhile { sample: false });
        gate.offer(sample(jls, 7));
        let got = gate.take_sample(Duration::ZERO).map(|s| s.bytes.len());
        assert_eq!(got, Some(5));
        assert!(gate.take_sample(Duration::from_millis(1)).is_none());
        gate.open();
        assert_eq!(gate.start(jls), GpuStart::Now);
        let line = gate.said().unwrap_or_default();
        assert!(line.contains("3 JPEG lossless file(s)"), "{line}");
        assert!(line.contains("took over"), "{line}");
    }

    #[test]
    fn a_sample_offered_later_wakes_the_codec_thread() {
        let gate = Arc::new(StartGate::new(GpuDecodeStart::Cpu, Some(GpuCodec::JpegDct)));
        let g = gate.clone();
        let waiter = std::thread::spawn(move || g.take_sample(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        gate.offer(sample(GpuCodec::JpegDct, 4));
        let got = waiter.join().ok().flatten().map(|s| s.bytes.len());
        assert_eq!(got, Some(4));
    }

    #[test]
    fn waiting_or_jpeg_2000_first_gates_nothing() {
        for (start, first) in [
            (GpuDecodeStart::Wait, Some(GpuCodec::JpegLossless)),
            (GpuDecodeStart::Cpu, Some(GpuCodec::Jpeg2000)),
            (GpuDecodeStart::Cpu, None),
        ] {
            let gate = StartGate::new(start, first);
            for codec in [
                GpuCodec::JpegLossless,
                GpuCodec::JpegDct,
                GpuCodec::Jpeg2000,
            ] {
                assert_eq!(gate.start(codec), GpuStart::Now);
            }
            assert!(gate.said().is_none());
        }
        // A gate that opened before any file came says nothing either.
        let gate = StartGate::new(GpuDecodeStart::Cpu, Some(GpuCodec::JpegLossless));
        gate.open();
        assert_eq!(gate.start(GpuCodec::JpegLossless), GpuStart::Now);
        assert!(gate.said().is_none());
    }
}
