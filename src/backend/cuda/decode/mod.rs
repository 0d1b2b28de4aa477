//! GPU decode of compressed frames with NVIDIA's codec libraries, loaded at run time:
//! nvJPEG2000 for JPEG 2000 and HTJ2K, nvJPEG for lossless JPEG (process 14) and for 8-bit
//! baseline/extended JPEG. The loaders leave a frame compressed in its slot when the run's
//! [`GpuRoute`] takes it; a render worker's [`FrameDecoder`] decodes it on the worker's stream
//! into device memory, and the render kernels continue from there.
//!
//! [`Codecs`] is loaded once per backend: which libraries were found (where, which version),
//! which codec families therefore go to the GPU under `gpu.decode`, and one line per missing
//! library. A missing library turns off only its codecs.

pub mod alloc;
mod ffi;
pub mod nvjpeg;
pub mod nvjpeg2k;
mod start;

use std::sync::{Arc, OnceLock};

use super::driver::{Device, Stream};
use crate::backend::options::{GpuDecode, GpuOptions};
use crate::decode::compressed::{EncodedFrame, GpuCodec, GpuRoute, GpuStart, Sample};
use start::StartGate;

/// How long the codec thread waits, after making the handles, for a loader's sample of the
/// gated codec (start.rs): the first file is opened within milliseconds of the pipeline's
/// start, long before a handle exists, unless its frames are not for the GPU after all.
const SAMPLE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Row pitch alignment of lossless JPEG output: 1 = rows packed, straight into the frame's
/// buffer.
const LOSSLESS_PITCH_ALIGN: usize = 1;

/// Why the GPU did not decode a frame (the CPU decoder takes it over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The frame's parameters are outside what the library supports.
    Unsupported(String),
    /// The library refused or failed on this codestream (damaged, or a feature it lacks).
    Rejected(String),
    /// The device or the library could not be set up.
    Device(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unsupported(s) => write!(f, "not supported by the GPU codec: {s}"),
            Failure::Rejected(s) => write!(f, "GPU codec: {s}"),
            Failure::Device(s) => write!(f, "GPU codec unavailable: {s}"),
        }
    }
}

/// The decoded frame as the render kernels will read it: `components` samples per pixel of
/// `bytes_per_sample` bytes each, interleaved, rows packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLayout {
    pub cols: u32,
    pub rows: u32,
    pub components: u32,
    pub bytes_per_sample: usize,
}

impl OutputLayout {
    pub fn row_bytes(&self) -> usize {
        self.cols as usize * self.components as usize * self.bytes_per_sample
    }

    pub fn bytes(&self) -> usize {
        self.row_bytes() * self.rows as usize
    }
}

/// A codec library (or handle): loaded, or why not.
type Loaded<T> = Result<Arc<T>, String>;

/// The library handles of one device, created on first use (or by [`Codecs::prewarm`]) and
/// shared by the device's workers.
#[derive(Default)]
struct DeviceHandles {
    j2k: OnceLock<Loaded<nvjpeg2k::Handle>>,
    lossless: OnceLock<Loaded<nvjpeg::Handle>>,
    hardware: OnceLock<Loaded<nvjpeg::Handle>>,
    dct_default: OnceLock<Loaded<nvjpeg::Handle>>,
}

/// The codec libraries of one backend, their handles per device, and the policy that routes
/// frames to them.
pub struct Codecs {
    policy: GpuDecode,
    nvjpeg2k: Loaded<nvjpeg2k::Library>,
    nvjpeg: Loaded<nvjpeg::Library>,
    devices: Vec<DeviceHandles>,
    /// Pitch alignment of lossless JPEG output rows (see nvjpeg::LosslessDecoder).
    lossless_pitch_align: usize,
    /// When nvJPEG's codecs start taking frames (`gpu.decode_start`).
    gate: StartGate,
}

impl Codecs {
    /// Loads the libraries `settings.gpu_decode` may use (none for `"none"`), searching
    /// `gpu.library_path` first, for a backend with `devices` GPUs.
    /// `first`: the GPU codec of the first input file's syntax, if any (start.rs).
    /// `skipped`: why the job is too small for that codec's start to pay (start.rs).
    pub fn load(
        gpu: &GpuOptions,
        devices: usize,
        first: Option<GpuCodec>,
        skipped: Option<String>,
    ) -> Codecs {
        let configured = gpu.library_path.as_deref();
        let off = "gpu.decode = \"none\"".to_string();
        let (nvjpeg2k, nvjpeg) = match gpu.decode {
            GpuDecode::None => (Err(off.clone()), Err(off)),
            GpuDecode::Lossless | GpuDecode::All => (
                nvjpeg2k::Library::load(configured),
                nvjpeg::Library::load(configured),
            ),
        };
        for (name, r) in [
            ("nvJPEG2000", nvjpeg2k.as_ref().err()),
            ("nvJPEG", nvjpeg.as_ref().err()),
        ] {
            if let (Some(why), false) = (r, gpu.decode == GpuDecode::None) {
                tracing::info!("{name} not loaded, its transfer syntaxes decode on the CPU: {why}");
            }
        }
        let gate = StartGate::new(
            gpu.decode_start,
            // Only a codec that will be routed to the GPU: "all", and nvJPEG loaded.
            first.filter(|_| gpu.decode == GpuDecode::All && nvjpeg.is_ok()),
            skipped,
        );
        Codecs {
            policy: gpu.decode,
            nvjpeg2k,
            nvjpeg,
            devices: (0..devices).map(|_| DeviceHandles::default()).collect(),
            lossless_pitch_align: LOSSLESS_PITCH_ALIGN,
            gate,
        }
    }

    /// What the loaders do with a file of `codec` that the route takes (`gpu.decode_start`;
    /// start.rs). Asked once per file.
    pub fn start(&self, codec: GpuCodec) -> GpuStart {
        self.gate.start(codec)
    }

    /// A loader's copy of a frame of the codec that starts, for its first decode.
    pub fn offer(&self, sample: Sample) {
        self.gate.offer(sample);
    }

    /// A render worker that will decode the gated codec's frames (start.rs).
    pub fn register_worker(&self) {
        self.gate.register_worker();
    }

    /// The sample for the calling worker to decode now, when it is its turn (start.rs).
    pub fn warm_turn(&self) -> Option<Arc<Sample>> {
        self.gate.warm_turn()
    }

    /// The worker that had the turn has decoded the sample.
    pub fn worker_warmed(&self) {
        self.gate.worker_warmed();
    }

    /// A registered worker ends without having warmed up (`warming`: during its turn).
    pub fn unregister_worker(&self, warming: bool) {
        self.gate.unregister_worker(warming);
    }

    /// Whether render workers may still be asked to warm nvJPEG up (a cheap check).
    pub fn warm_up_wanted(&self) -> bool {
        self.gate.warm_up_wanted()
    }

    /// The line for the log when the run ends: files the CPU decoded while nvJPEG started.
    pub fn start_said(&self) -> Option<String> {
        self.gate.said()
    }

    /// Sets the row pitch alignment of lossless JPEG output (`bench decode` compares values).
    pub fn set_lossless_pitch_align(&mut self, bytes: usize) {
        self.lossless_pitch_align = bytes.max(1);
    }

    fn handles(&self, slot: usize) -> Result<&DeviceHandles, Failure> {
        self.devices
            .get(slot)
            .ok_or_else(|| Failure::Device(format!("no codec handles for device slot {slot}")))
    }

    /// The nvJPEG2000 handle of device slot `slot` (created on first use).
    pub fn j2k_handle(
        &self,
        slot: usize,
        device: &Arc<Device>,
    ) -> Result<Arc<nvjpeg2k::Handle>, Failure> {
        let lib = self
            .nvjpeg2k
            .as_ref()
            .map_err(|e| Failure::Device(e.clone()))?;
        self.handles(slot)?
            .j2k
            .get_or_init(|| nvjpeg2k::Handle::new(lib, device))
            .clone()
            .map_err(Failure::Device)
    }

    /// A new nvJPEG2000 handle of the worker's own, for `device`: with
    /// `DICOMFLOW_NVJPEG2K_HANDLES=worker` each worker has one instead of sharing its device's
    /// (an experiment knob: the shared handle is the default and what the tests run).
    fn own_j2k_handle(&self, device: &Arc<Device>) -> Result<Arc<nvjpeg2k::Handle>, Failure> {
        let lib = self
            .nvjpeg2k
            .as_ref()
            .map_err(|e| Failure::Device(e.clone()))?;
        nvjpeg2k::Handle::new(lib, device).map_err(Failure::Device)
    }

    /// The nvJPEG lossless handle of device slot `slot`.
    pub fn lossless_handle(
        &self,
        slot: usize,
        device: &Arc<Device>,
    ) -> Result<Arc<nvjpeg::Handle>, Failure> {
        let lib = self
            .nvjpeg
            .as_ref()
            .map_err(|e| Failure::Device(e.clone()))?;
        self.handles(slot)?
            .lossless
            .get_or_init(|| nvjpeg::Handle::lossless(lib, device))
            .clone()
            .map_err(Failure::Device)
    }

    /// The nvJPEG handles for DCT frames of device slot `slot`: the hardware engines' (if this
    /// GPU has them) and the default backend's.
    fn dct_handles(
        &self,
        slot: usize,
        device: &Arc<Device>,
    ) -> Result<(Option<Arc<nvjpeg::Handle>>, Loaded<nvjpeg::Handle>), Failure> {
        let lib = self
            .nvjpeg
            .as_ref()
            .map_err(|e| Failure::Device(e.clone()))?;
        let h = self.handles(slot)?;
        let hw = h
            .hardware
            .get_or_init(|| nvjpeg::Handle::hardware(lib, device))
            .clone()
            .ok();
        let sw = h
            .dct_default
            .get_or_init(|| nvjpeg::Handle::default_backend(lib, device))
            .clone();
        Ok((hw, sw))
    }

    /// Creates the codec handles of every device now, on a background thread, so that the
    /// first compressed frames do not wait for them (creating a handle starts the library's
    /// CUDA runtime; workers that need one meanwhile wait for it). When the first input file
    /// is for nvJPEG and its start is gated (start.rs), only that codec's handles, after which
    /// the workers decode the sample a loader hands over, and the gate opens; otherwise the
    /// JPEG 2000 handles, and the lossless JPEG ones under
    /// `gpu.decode = "all"` (others are made on first use).
    pub fn prewarm(self: &Arc<Self>, devices: &[Arc<Device>]) {
        if self.policy == GpuDecode::None || (self.nvjpeg2k.is_err() && self.nvjpeg.is_err()) {
            self.gate.open();
            return;
        }
        let (codecs, devices) = (self.clone(), devices.to_vec());
        let spawned = std::thread::Builder::new()
            .name("codec-init".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                if codecs.gate.gated().is_some() && codecs.gate.starts().is_none() {
                    // Too small a job: its frames decode on the CPU, nothing to start.
                    return;
                }
                match codecs.gate.starts() {
                    Some(codec) => {
                        for (slot, d) in devices.iter().enumerate() {
                            let made = match codec {
                                GpuCodec::JpegLossless => {
                                    codecs.lossless_handle(slot, d).map(|_| ())
                                }
                                GpuCodec::JpegDct | GpuCodec::Jpeg2000 => {
                                    codecs.dct_handles(slot, d).map(|_| ())
                                }
                            };
                            if let Err(e) = made {
                                // Its frames then go to the CPU decoder one by one, saying why.
                                tracing::warn!("GPU {}: {}: {e}", d.ordinal, codec.name());
                            }
                        }
                        codecs.gate.handles_ready();
                        tracing::info!(
                            "{} handles ready in {:.0} ms",
                            codec.name(),
                            t.elapsed().as_secs_f64() * 1e3
                        );
                        if !codecs.gate.wait_for_sample(SAMPLE_PATIENCE) {
                            // The first frames then pay for the library's start.
                            tracing::debug!("no frame came to start nvJPEG with");
                            codecs.gate.open();
                        }
                    }
                    None => {
                        for (slot, d) in devices.iter().enumerate() {
                            let _ = codecs.j2k_handle(slot, d);
                            if codecs.policy == GpuDecode::All {
                                let _ = codecs.lossless_handle(slot, d);
                            }
                        }
                        tracing::info!(
                            "codec handles ready in {:.0} ms",
                            t.elapsed().as_secs_f64() * 1e3
                        );
                    }
                }
            });
        if let Err(e) = spawned {
            // The handles are then made on first use, by the frames that need them.
            tracing::debug!("codec handles will be created on first use: {e}");
            self.gate.open();
        }
    }

    /// Which frames the loaders leave compressed for the GPU.
    pub fn route(&self) -> GpuRoute {
        GpuRoute {
            jpeg2000: self.nvjpeg2k.is_ok(),
            jpeg_lossless: self.nvjpeg.is_ok(),
            jpeg_dct: self.nvjpeg.is_ok(),
            all: self.policy == GpuDecode::All,
        }
    }

    /// The libraries in a few words, for the dashboard.
    pub fn short(&self) -> String {
        if self.policy == GpuDecode::None {
            return "off (gpu.decode = none)".into();
        }
        let one = |name: &str, v: Result<&str, &String>| match v {
            Ok(v) => format!("{name} {v}"),
            Err(_) => format!("no {name}"),
        };
        format!(
            "{}, {}",
            one(
                "nvJPEG2000",
                self.nvjpeg2k.as_ref().map(|l| l.version.as_str())
            ),
            one("nvJPEG", self.nvjpeg.as_ref().map(|l| l.version.as_str()))
        )
    }

    /// The summary lines: per codec family, where it decodes and with which library.
    pub fn describe(&self) -> Vec<String> {
        let policy = self.policy.name();
        if self.policy == GpuDecode::None {
            return vec![format!(
                "GPU decode off (gpu.decode = \"{policy}\"): compressed frames decode on the CPU"
            )];
        }
        let route = self.route();
        let lib = |l: &str, v: &str, p: &std::path::Path| format!("{l} {v} ({})", p.display());
        let mut lines = Vec::new();
        for codec in [
            GpuCodec::Jpeg2000,
            GpuCodec::JpegLossless,
            GpuCodec::JpegDct,
        ] {
            let found = match codec {
                GpuCodec::Jpeg2000 => self
                    .nvjpeg2k
                    .as_ref()
                    .map(|l| lib("nvJPEG2000", &l.version, &l.path)),
                _ => self
                    .nvjpeg
                    .as_ref()
                    .map(|l| lib("nvJPEG", &l.version, &l.path)),
            };
            let what = format!("{} ({})", codec.name(), codec.syntaxes());
            lines.push(match found {
                Ok(lib) if route.codec(codec) => {
                    let scope = match (codec, route.all) {
                        (GpuCodec::JpegLossless, _) => format!(
                            " predictor 1, one component, {0}x{0} and larger,",
                            crate::decode::compressed::LOSSLESS_JPEG_MIN_SIDE
                        ),
                        (GpuCodec::Jpeg2000, false) => " reversible (lossless) codestreams,".into(),
                        (GpuCodec::JpegDct, _) => " 8-bit,".into(),
                        (GpuCodec::Jpeg2000, true) => String::new(),
                    };
                    format!("{what}: GPU,{scope} with {lib}")
                }
                Ok(lib) if codec == GpuCodec::JpegLossless => {
                    format!("{what}: CPU (faster here; gpu.decode = \"all\" sends it to {lib})")
                }
                Ok(lib) => format!(
                    "{what}: CPU (lossy; gpu.decode = \"{policy}\", \"all\" sends it to {lib})"
                ),
                Err(why) => format!("{what}: CPU ({why})"),
            });
        }
        lines
    }
}

/// The decoded layout of `frame` in device memory.
fn layout_of(frame: &EncodedFrame) -> OutputLayout {
    let c = &frame.coding;
    OutputLayout {
        cols: c.cols,
        rows: c.rows,
        components: c.samples_per_pixel as u32,
        bytes_per_sample: c.bits_allocated as usize / 8,
    }
}

/// What a DCT decode wrote, against the plan's layout.
fn decoded(output: nvjpeg::DctOutput) -> Decoded {
    match output {
        nvjpeg::DctOutput::Planar => Decoded::Planar,
        nvjpeg::DctOutput::Gray | nvjpeg::DctOutput::RgbInterleaved => Decoded::AsPlanned,
    }
}

/// How the decoded frame differs from the plan's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Exactly the layout the loader's CPU decode would have produced.
    AsPlanned,
    /// Three planes (RR..GG..BB..) instead of interleaved samples.
    Planar,
}

/// One render worker's decoders (states on the device's shared handles), created on the first
/// frame of each codec.
pub struct FrameDecoder {
    codecs: Arc<Codecs>,
    /// Index of the worker's device among the backend's devices.
    slot: usize,
    stream: Arc<Stream>,
    j2k: Option<Result<nvjpeg2k::Decoder, Failure>>,
    lossless: Option<Result<nvjpeg::LosslessDecoder, Failure>>,
    dct: Option<Result<nvjpeg::DctDecoder, Failure>>,
}

impl FrameDecoder {
    pub fn new(codecs: Arc<Codecs>, slot: usize, stream: Arc<Stream>) -> FrameDecoder {
        FrameDecoder {
            codecs,
            slot,
            stream,
            j2k: None,
            lossless: None,
            dct: None,
        }
    }

    /// Queues the decode of `frame` (its codestream is `bytes`) on the worker's stream into
    /// `dst`, device memory of `frame.coding.decoded_bytes()` bytes.
    pub fn decode(
        &mut self,
        frame: &EncodedFrame,
        bytes: &[u8],
        dst: u64,
    ) -> Result<Decoded, Failure> {
        let c = &frame.coding;
        let want = layout_of(frame);
        match c.codec {
            GpuCodec::Jpeg2000 => {
                let (codecs, slot, stream) = (&self.codecs, self.slot, &self.stream);
                let device = &stream.device;
                let d = self
                    .j2k
                    .get_or_insert_with(|| {
                        let own = std::env::var("DICOMFLOW_NVJPEG2K_HANDLES")
                            .is_ok_and(|v| v == "worker");
                        let h = if own {
                            codecs.own_j2k_handle(device)?
                        } else {
                            codecs.j2k_handle(slot, device)?
                        };
                        nvjpeg2k::Decoder::new(&h, stream).map_err(Failure::Device)
                    })
                    .as_mut()
                    .map_err(|e| e.clone())?;
                d.decode(bytes, &want, dst).map(|_| Decoded::AsPlanned)
            }
            GpuCodec::JpegLossless => self
                .lossless()?
                .decode(bytes, &want, dst)
                .map(|_| Decoded::AsPlanned),
            GpuCodec::JpegDct => {
                let convert = c.converts_ycbcr();
                Ok(decoded(self.dct()?.decode(bytes, &want, convert, dst)?))
            }
        }
    }

    /// Queues the decode of several frames laid out as `frame` says, in one library call:
    /// `data[i]` into `dsts[i]`. nvJPEG's batched decoders only (lossless, and DCT on the
    /// hardware engines): anything else is refused, for the caller to decode one by one.
    pub fn decode_batch(
        &mut self,
        frame: &EncodedFrame,
        data: &[&[u8]],
        dsts: &[u64],
    ) -> Result<Decoded, Failure> {
        let want = layout_of(frame);
        match frame.coding.codec {
            GpuCodec::JpegLossless => self
                .lossless()?
                .decode_batch(data, &want, dsts)
                .map(|_| Decoded::AsPlanned),
            GpuCodec::JpegDct => {
                let convert = frame.coding.converts_ycbcr();
                Ok(decoded(
                    self.dct()?.decode_batch(data, &want, convert, dsts)?,
                ))
            }
            GpuCodec::Jpeg2000 => Err(Failure::Unsupported(
                "JPEG 2000 frames are decoded one by one".into(),
            )),
        }
    }

    /// This worker's lossless JPEG decoder, made on first use.
    fn lossless(&mut self) -> Result<&mut nvjpeg::LosslessDecoder, Failure> {
        let (codecs, slot, stream) = (&self.codecs, self.slot, &self.stream);
        self.lossless
            .get_or_insert_with(|| {
                let h = codecs.lossless_handle(slot, &stream.device)?;
                nvjpeg::LosslessDecoder::new(&h, stream, codecs.lossless_pitch_align)
                    .map_err(Failure::Device)
            })
            .as_mut()
            .map_err(|e| e.clone())
    }

    /// This worker's DCT JPEG decoder, made on first use.
    fn dct(&mut self) -> Result<&mut nvjpeg::DctDecoder, Failure> {
        let (codecs, slot, stream) = (&self.codecs, self.slot, &self.stream);
        self.dct
            .get_or_insert_with(|| {
                let (hw, sw) = codecs.dct_handles(slot, &stream.device)?;
                Ok(nvjpeg::DctDecoder::new(hw, sw, stream))
            })
            .as_mut()
            .map_err(|e| e.clone())
    }

    /// Whether the hardware JPEG engines decoded the DCT frames so far.
    pub fn dct_hardware(&self) -> bool {
        matches!(&self.dct, Some(Ok(d)) if d.uses_hardware())
    }
}
