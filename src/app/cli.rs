//! Command-line interface: clap definitions and their translation into a configuration layer
//! (the library never sees clap types).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::app::config::{RawConfig, RawGpus, RawWindows};

/// DICOM folders to 8-bit images, in real time, on the GPU when one is present.
#[derive(Debug, Parser)]
#[command(name = "dicomflow", version, about, long_about = None)]
pub struct Cli {
    /// More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors; no progress or summary.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render DICOM files and folders (recursively) to 8-bit images.
    Run(Box<RunArgs>),
    /// Receive DICOM instances over the network (C-STORE and C-ECHO SCP) and render each one
    /// as it arrives, until SIGTERM, Ctrl-C or q.
    Listen(Box<ListenArgs>),
    /// Render the DICOM files in folders, then every file written or moved into them once it
    /// is complete, until SIGTERM, Ctrl-C or q.
    Watch(Box<WatchArgs>),
    /// Write a deterministic phantom series as DICOM files.
    Synth(SynthArgs),
    /// Show what will be rendered for one file and how, or the series under a folder.
    Inspect(InspectArgs),
    /// List the files under some inputs once (relative path, size; UIDs with --with-series) in
    /// a manifest, for sharded runs that then need no walk (`run --manifest`).
    Scan(ScanArgs),
    /// Work with reports.
    #[command(subcommand)]
    Report(ReportCommand),
    /// Benchmarks that print a table.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// GPU transfer strategies (pageable / pinned / zero-copy) per slice, against the PCIe
    /// ceiling measured in the same run.
    Transfer(TransferArgs),
    /// PNG compression × filter: time and size per rendered phantom slice (best of N).
    Encode(EncodeArgs),
    /// Send DICOM files to a Storage SCP (`dicomflow listen`, storescp, a PACS) over N
    /// associations, optionally paced: instances/s and store round trips.
    Listen(BenchListenArgs),
    /// Compressed frames decoded by the CPU decoders and by the GPU codecs (nvJPEG2000,
    /// nvJPEG): stored values and 8-bit renderings compared, time of each.
    Decode(DecodeArgs),
    /// GPU encoders (PNG: the fdeflate kernels and nvCOMP; JPEG: nvJPEG) against the CPU's:
    /// time, sustained rate, size, identical pixels / PSNR, and the Deflate streams' layout.
    GpuEncode(GpuEncodeArgs),
    /// The file I/O every run pays, alone: N threads read each input whole and write an
    /// output of a given size atomically, files/s (a ceiling for `run` on the same files).
    Io(IoArgs),
}

#[derive(Debug, Args)]
pub struct ListenArgs {
    /// TCP port [config: listen.port, default 11112].
    #[arg(long)]
    pub port: Option<i64>,
    /// Address to listen on [config: listen.host, default 0.0.0.0 (every interface)].
    #[arg(long)]
    pub host: Option<String>,
    /// Our AE title: associations calling another are refused [config: listen.ae_title].
    #[arg(long)]
    pub ae_title: Option<String>,
    /// Largest PDU received, bytes [config: listen.max_pdu].
    #[arg(long)]
    pub max_pdu: Option<i64>,
    /// Only these calling AE titles or addresses (10.0.0.7, 10.0.0.0/8) may associate;
    /// repeat or separate with commas [config: listen.allow].
    #[arg(long, value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Associations served at once [config: listen.max_associations].
    #[arg(long)]
    pub max_associations: Option<i64>,
    /// Spool folder for received instances [config: listen.spool, default OUT/.spool].
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// Keep each received instance in this folder (as <SOPInstanceUID>.dcm) once rendered
    /// [config: listen.keep_received].
    #[arg(long)]
    pub keep_received: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobArgs,
}

impl ListenArgs {
    /// The CLI's configuration layer (only what was given).
    pub fn to_raw(&self) -> RawConfig {
        let mut r = self.job.to_raw();
        r.listen.port = self.port;
        r.listen.host = self.host.clone();
        r.listen.ae_title = self.ae_title.clone();
        r.listen.max_pdu = self.max_pdu;
        r.listen.allow = (!self.allow.is_empty()).then(|| self.allow.clone());
        r.listen.max_associations = self.max_associations;
        r.listen.spool = self.spool.clone();
        r.listen.keep_received = self.keep_received.clone();
        r
    }
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Folders to watch (recursively).
    #[arg(required = true)]
    pub folders: Vec<PathBuf>,
    /// A file must stay unchanged this long before it is checked, ms [config: watch.settle_ms].
    #[arg(long)]
    pub settle_ms: Option<i64>,
    #[command(flatten)]
    pub job: JobArgs,
}

impl WatchArgs {
    /// The CLI's configuration layer (only what was given).
    pub fn to_raw(&self) -> RawConfig {
        let mut r = self.job.to_raw();
        r.watch.settle_ms = self.settle_ms;
        r
    }
}

#[derive(Debug, Args)]
pub struct BenchListenArgs {
    /// DICOM files or folders to send (every file with DICOM file meta, recursively).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The Storage SCP, host:port.
    #[arg(long, default_value = "127.0.0.1:11112")]
    pub to: String,
    /// Its AE title.
    #[arg(long, default_value = "DICOMFLOW")]
    pub called_ae: String,
    /// Ours.
    #[arg(long, default_value = "BENCHSCU")]
    pub calling_ae: String,
    /// Concurrent associations.
    #[arg(long, default_value_t = 1)]
    pub associations: usize,
    /// Instances per second (all associations together); 0 = as fast as acknowledged.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Compressed DICOM files or folders.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Timed repetitions per frame (the best is kept).
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Frames per file at most.
    #[arg(long, default_value_t = 4)]
    pub max_frames: u32,
    /// Folder searched first for the codec libraries (gpu.library_path).
    #[arg(long)]
    pub library_path: Option<PathBuf>,
    /// GPU index.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Row pitch alignment (bytes) of lossless JPEG output; 0 = the production default.
    #[arg(long, default_value_t = 0)]
    pub lossless_pitch_align: usize,
    /// Also time nvJPEG's batched decoders with this many copies of each frame per call
    /// (comma-separated, e.g. 1,4,16,32).
    #[arg(long, value_delimiter = ',')]
    pub batches: Vec<usize>,
}

#[derive(Debug, Args)]
pub struct GpuEncodeArgs {
    /// Square slice sizes.
    #[arg(long, value_delimiter = ',', default_value = "512,2000")]
    pub sizes: Vec<u32>,
    /// Distinct phantom slices per size.
    #[arg(long, default_value_t = 8)]
    pub slices: usize,
    /// Stream counts (threads) of the sustained runs.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16")]
    pub streams: Vec<usize>,
    /// Slices per stream in the sustained runs.
    #[arg(long, default_value_t = 200)]
    pub rounds: usize,
    /// PNG compressors to try: -1 dicomflow's fdeflate kernels (the `fast` level), 0..5
    /// nvCOMP's Gzip algorithms (0 fastest .. 5 smallest).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "-1,0,1,2,4",
        allow_hyphen_values = true
    )]
    pub algorithms: Vec<i32>,
    /// Slices per compression call to try (each a row of its own).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub batches: Vec<usize>,
    /// Folder for sample outputs (GPU PNG and JPEG, raw nvCOMP chunks).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Folder searched first for libnvcomp / libnvjpeg (as `gpu.library_path`).
    #[arg(long)]
    pub library_path: Option<std::path::PathBuf>,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Merge the reports of a sharded run: sums totals and stage statistics (from the stages'
    /// histograms), lists failed files, and names shards that are missing or did not finish.
    /// Exit 0 only when all N shards are present, finished, and nothing failed; 1 otherwise.
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard reports (`shard-I-of-N.json`), or folders holding them (such as
    /// OUT/.dicomflow/reports).
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Write the merged report here (JSON; docs/merged-report-schema.json).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The number of shards expected (default: what the reports say).
    #[arg(long)]
    pub shards: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Files and folders to list (folders recursively, in name order, as `run` walks them).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The manifest to write (tab-separated text, written atomically).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Also list each file's Study, Series and SOP Instance UIDs (reads the start of every
    /// header, on all cores), so `run --manifest --shard-by series` needs no header reads.
    #[arg(long)]
    pub with_series: bool,
    /// Print the byte-balanced plan of N shards (files and bytes per shard).
    #[arg(long, value_name = "N")]
    pub plan: Option<u32>,
    /// With --plan: what stays together, path (each file) or series.
    #[arg(
        long,
        value_name = "path|series",
        requires = "plan",
        default_value = "path"
    )]
    pub shard_by: String,
}

#[derive(Debug, Args)]
pub struct EncodeArgs {
    /// Square slice sizes.
    #[arg(long, value_delimiter = ',', default_value = "512,2000")]
    pub sizes: Vec<u32>,
    /// Iterations per setting (the best is kept).
    #[arg(long, default_value_t = 10)]
    pub iters: usize,
}

#[derive(Debug, Args)]
pub struct IoArgs {
    /// Folder of inputs (every file under it is read).
    pub input: PathBuf,
    /// Where to write (on the filesystem `run` would write to): a folder of the benchmark's
    /// own is made in it and removed afterwards.
    #[arg(short, long)]
    pub out: PathBuf,
    /// Thread counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,14,16")]
    pub threads: Vec<usize>,
    /// Buffers per thread, read into in turn (several: destinations out of the caches, as a
    /// ring's slots are).
    #[arg(long, default_value_t = 1)]
    pub buffers: usize,
    /// Read through a small buffer and streaming stores, as `run` reads frames of 3 MiB and
    /// more (whatever the size here).
    #[arg(long)]
    pub streaming: bool,
    /// Bytes written per input (0: reads only).
    #[arg(long, value_delimiter = ',', default_value = "0,65536")]
    pub write_bytes: Vec<usize>,
    /// Rounds per row (the fastest is kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Square slice sizes.
    #[arg(long, value_delimiter = ',', default_value = "512,2000,4096")]
    pub sizes: Vec<u32>,
    /// Iterations per measurement.
    #[arg(long, default_value_t = 50)]
    pub iters: usize,
    /// Stream counts for the sustained runs.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub streams: Vec<usize>,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Files and folders to process.
    #[arg(required_unless_present = "manifest")]
    pub inputs: Vec<PathBuf>,
    /// Read the files from a manifest written by `dicomflow scan` instead of walking inputs;
    /// with --shard the shards are balanced by bytes.
    #[arg(long, conflicts_with = "inputs")]
    pub manifest: Option<PathBuf>,
    /// Render only one shard of the inputs: I/N (0-based), slurm (SLURM_ARRAY_TASK_ID of
    /// SLURM_ARRAY_TASK_COUNT) or k8s (JOB_COMPLETION_INDEX of --shard-count). Its report goes
    /// to OUT/.dicomflow/reports/shard-I-of-N.json unless --report says otherwise.
    #[arg(long, value_name = "I/N|slurm|k8s")]
    pub shard: Option<String>,
    /// The number of shards where the scheduler does not give it: k8s, or some indices of a
    /// Slurm array resubmitted (--array=2,5) [env: DICOMFLOW_SHARD_COUNT].
    #[arg(long, value_name = "N", requires = "shard")]
    pub shard_count: Option<u32>,
    /// What decides a file's shard: path (its path relative to its input; default) or series
    /// (its SeriesInstanceUID: a series stays whole; every file's header is read unless the
    /// manifest has UIDs).
    #[arg(long, value_name = "path|series", requires = "shard")]
    pub shard_by: Option<String>,
    /// With --skip-existing, when the images present were rendered with other settings (window,
    /// format, operators; recorded in OUT/.dicomflow/run.json): render them all again instead
    /// of refusing.
    #[arg(long, requires = "skip_existing")]
    pub rerender_changed: bool,
    #[command(flatten)]
    pub job: JobArgs,
}

impl RunArgs {
    /// The CLI's configuration layer (only what was given).
    pub fn to_raw(&self) -> RawConfig {
        self.job.to_raw()
    }
}

/// The rendering, output, pipeline, GPU and display flags every rendering command shares
/// (`run`, `listen`, `watch`).
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Output directory [config: output.dir, default "out"].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Configuration file (TOML; see config/default.toml).
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Window: file, file:N, minmax, minmax-no-extremes, histogram:PCT, voi-lut:N, none, or C,W
    /// (use --window=-40,400 for a negative center). Given 2 or 3 times: one RGB image whose
    /// channels are those windows. Overrides the config's per-modality and per-series windows.
    /// [default: file]
    #[arg(long, allow_hyphen_values = true, action = clap::ArgAction::Append)]
    pub window: Vec<String>,
    /// VOI LUT function: file, linear, linear-exact, sigmoid. [default: file]
    #[arg(long)]
    pub voi_function: Option<String>,
    /// A frame whose compressed data ends early: fail (report it), or render what decodes
    /// with the rest black (DCMTK's +wi). [default: fail]
    #[arg(long)]
    pub damaged: Option<String>,
    /// Overlay planes (60xx) on grayscale frames: on (default, as dcm2pnm) or off (DCMTK -O).
    #[arg(long, value_parser = ["on", "off"])]
    pub overlays: Option<String>,
    /// Frames of multi-frame files: all, or a list such as 1,5-10,last (1-based). [default: all]
    #[arg(long)]
    pub frames: Option<String>,
    /// Resize: WxH (e.g. 512x512, see --fit), N (the longest side) or none. [default: none]
    #[arg(long)]
    pub resize: Option<String>,
    /// Scale both sides by a factor (e.g. 0.5) instead of --resize.
    #[arg(long, conflicts_with = "resize")]
    pub scale: Option<f64>,
    /// How --resize WxH meets another aspect ratio: stretch, pad (black borders) or crop
    /// [default: stretch]
    #[arg(long)]
    pub fit: Option<String>,
    /// Resampling: nearest, bilinear or area (Pillow's NEAREST, BILINEAR, BOX). [default: bilinear]
    #[arg(long)]
    pub interpolation: Option<String>,
    /// Rotate clockwise: 0, 90, 180 or 270 degrees. [default: 0]
    #[arg(long)]
    pub rotate: Option<i64>,
    /// Flip after rotating: h (left-right), v (top-bottom), hv or none. [default: none]
    #[arg(long)]
    pub flip: Option<String>,
    /// Invert the rendering (255 - v).
    #[arg(long)]
    pub invert: bool,
    /// Output format: png, jpeg, tiff, bmp, dcm (8-bit DICOM Secondary Capture). [default: png]
    #[arg(long)]
    pub format: Option<String>,
    /// PNG compression: none, fast, balanced, best. [default: fast]
    #[arg(long)]
    pub png_compression: Option<String>,
    /// PNG filter: none, sub, up, paeth, adaptive. [default: adaptive]
    #[arg(long)]
    pub png_filter: Option<String>,
    /// JPEG quality 1..=100. [default: 90]
    #[arg(long)]
    pub jpeg_quality: Option<i64>,
    /// Output naming: mirror, or a pattern such as "{SeriesInstanceUID}/{InstanceNumber:04}"
    /// [default: mirror]
    #[arg(long)]
    pub naming: Option<String>,
    /// Write a JSON report (per-file status, failures, totals, per-stage times); `-` for
    /// standard output.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write a Chrome trace-event timeline (Perfetto).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Skip inputs whose outputs exist (resume a killed run). `run` refuses when the settings
    /// that made them (OUT/.dicomflow/run.json) differ; see --rerender-changed.
    #[arg(long)]
    pub skip_existing: bool,
    /// When outputs reach the disk: run (at the end), file (each before its name), none
    /// [default: run]
    #[arg(long)]
    pub sync: Option<String>,
    /// Stop at the first failure.
    #[arg(long)]
    pub fail_fast: bool,
    /// Thread layout: auto, stages (loaders, render workers, writers) or shared (threads that
    /// load and finish frames). [default: auto]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub layout: Option<String>,
    /// Loader threads (0 = auto). [default: 0]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub loaders: Option<i64>,
    /// Render worker threads (0 = auto: one per GPU stream; none with the CPU backend, whose
    /// writers render). [default: 0]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub workers: Option<i64>,
    /// Writer threads, or the shared layout's threads (0 = auto). [default: 0]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub writers: Option<i64>,
    /// Slots in the ring (0 = auto, else at least 2). [default: 0]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub slots: Option<i64>,
    /// Largest frame accepted, MiB. [default: 1024]
    #[arg(long)]
    pub max_frame_mib: Option<i64>,
    /// Backend: auto, cuda, cpu. [default: auto]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub backend: Option<String>,
    /// GPU transfer strategy: auto, zero-copy, pinned, pageable. [default: auto]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub transfer: Option<String>,
    /// GPUs: all, or a list such as 0,1. [default: all]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub gpus: Option<String>,
    /// CUDA streams per device; --decode-streams (JPEG 2000) and --encode-streams (small frames,
    /// PNG compressed on the GPU) raise it where they apply. [default: 2]
    #[arg(long, help_heading = "Tuning (threads, backend, GPUs)")]
    pub streams: Option<i64>,
    /// Compressed frames decoded on the GPU: lossless, all, none. [default: lossless]
    #[arg(long)]
    pub gpu_decode: Option<String>,
    /// While nvJPEG starts (about 0.55 s), its frames decode on the CPU, or wait for the GPU:
    /// cpu, wait. [default: cpu]
    #[arg(long)]
    pub gpu_decode_start: Option<String>,
    /// Large native frames (3 MiB and more) go from the file straight to GPU memory through
    /// small page-locked chunks (auto), or through the slots (off). [default: auto]
    #[arg(long)]
    pub gpu_upload: Option<String>,
    /// CUDA streams per device when the first file is JPEG 2000 decoded on the GPU. [default: 32]
    #[arg(long)]
    pub decode_streams: Option<i64>,
    /// CUDA streams per device when the GPU compresses fast PNG and the first frame has at
    /// most 1024² pixels. [default: 4]
    #[arg(long)]
    pub encode_streams: Option<i64>,
    /// Who compresses PNG/JPEG output beside the CUDA backend: auto, gpu, cpu. [default: auto]
    #[arg(long)]
    pub gpu_encode: Option<String>,
    /// Slices per compression call when the GPU compresses PNG (frames that wait in a render
    /// worker's queue are compressed together). [default: 16]
    #[arg(long)]
    pub encode_batch: Option<i64>,
    /// Show the live dashboard even when stderr is not a terminal.
    #[arg(long, conflicts_with = "no_tui")]
    pub tui: bool,
    /// Never show the live dashboard.
    #[arg(long)]
    pub no_tui: bool,
}

impl JobArgs {
    /// The CLI's configuration layer (only what was given).
    pub fn to_raw(&self) -> RawConfig {
        let mut r = RawConfig::default();
        r.decode.damaged = self.damaged.clone();
        r.render.overlays = self.overlays.as_deref().map(|v| v == "on");
        r.render.window = match self.window.as_slice() {
            [] => None,
            [one] => Some(RawWindows::One(one.clone())),
            several => Some(RawWindows::Channels(several.to_vec())),
        };
        r.render.voi_function = self.voi_function.clone();
        r.render.frames = self.frames.clone();
        r.render.resize = self.resize.clone();
        r.render.scale = self.scale;
        r.render.fit = self.fit.clone();
        r.render.interpolation = self.interpolation.clone();
        r.render.rotate = self.rotate;
        r.render.flip = self.flip.clone();
        r.render.invert = self.invert.then_some(true);
        r.output.dir = self.output.clone();
        r.output.format = self.format.clone();
        r.output.png_compression = self.png_compression.clone();
        r.output.png_filter = self.png_filter.clone();
        r.output.jpeg_quality = self.jpeg_quality;
        r.output.naming = self.naming.clone();
        r.output.skip_existing = self.skip_existing.then_some(true);
        r.output.sync = self.sync.clone();
        r.run.fail_fast = self.fail_fast.then_some(true);
        r.run.report = self.report.clone();
        r.run.trace = self.trace.clone();
        r.pipeline.layout = self.layout.clone();
        r.pipeline.loaders = self.loaders;
        r.pipeline.workers = self.workers;
        r.pipeline.writers = self.writers;
        r.pipeline.slots = self.slots;
        r.pipeline.max_frame_mib = self.max_frame_mib;
        r.gpu.backend = self.backend.clone();
        r.gpu.transfer = self.transfer.clone();
        r.gpu.gpus = self.gpus.clone().map(RawGpus::Word);
        r.gpu.streams = self.streams;
        r.gpu.decode = self.gpu_decode.clone();
        r.gpu.decode_start = self.gpu_decode_start.clone();
        r.gpu.upload = self.gpu_upload.clone();
        r.gpu.decode_streams = self.decode_streams;
        r.gpu.encode_streams = self.encode_streams;
        r.gpu.encode = self.gpu_encode.clone();
        r.gpu.encode_batch = self.encode_batch;
        r.dashboard.tui = if self.tui {
            Some("on".into())
        } else if self.no_tui {
            Some("off".into())
        } else {
            None
        };
        r
    }
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Output folder.
    pub out_dir: PathBuf,
    /// Rows = columns.
    #[arg(long, default_value_t = 512)]
    pub size: u32,
    /// Number of slices.
    #[arg(long, default_value_t = 200)]
    pub slices: u32,
    /// Signed stored values (PixelRepresentation 1).
    #[arg(long)]
    pub signed: bool,
    /// MONOCHROME1 photometric interpretation.
    #[arg(long)]
    pub monochrome1: bool,
    /// BitsStored for 16-bit data.
    #[arg(long, default_value_t = 12)]
    pub bits_stored: u16,
    /// 8-bit grayscale instead of 16-bit CT.
    #[arg(long)]
    pub eight_bit: bool,
    /// RGB colour phantom.
    #[arg(long)]
    pub rgb: bool,
    /// One multi-frame file instead of one file per slice.
    #[arg(long)]
    pub multiframe: bool,
    /// Windows as "C,W;C,W" ("" for none).
    #[arg(long, default_value = "40,400;-600,1500", allow_hyphen_values = true)]
    pub windows: String,
    /// VOILUTFunction to write (LINEAR, LINEAR_EXACT, SIGMOID).
    #[arg(long)]
    pub voi_function: Option<String>,
    /// Seed for UIDs and noise.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The DICOM file, or a folder: one line per series under it, and a total.
    pub file: PathBuf,
    /// Window to explain (as for `run`).
    #[arg(long, default_value = "file", allow_hyphen_values = true)]
    pub window: String,
    /// VOI function override to explain.
    #[arg(long)]
    pub voi_function: Option<String>,
    /// GPU decode policy to explain (lossless, all, none).
    #[arg(long, default_value = "lossless")]
    pub gpu_decode: String,
    /// Output format whose encoder to explain: png, jpeg, tiff, bmp.
    #[arg(long, default_value = "png")]
    pub format: String,
    /// gpu.encode to explain: auto, gpu, cpu.
    #[arg(long, default_value = "auto")]
    pub gpu_encode: String,
    /// Folder searched first for NVIDIA's codec libraries (as gpu.library_path).
    #[arg(long)]
    pub library_path: Option<PathBuf>,
}
