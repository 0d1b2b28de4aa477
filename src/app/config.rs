//! Configuration in two layers: raw values (the TOML file, then CLI overrides, each an
//! [`RawConfig`]) are applied in order over the built-in defaults into one checked [`Settings`].
//! Every value is validated where it is applied, so an error names the key, the value and
//! where it came from (the file's path or the flag).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use dicomflow::backend::options::{
    BackendChoice, BackendOptions, GpuDecode, GpuDecodeStart, GpuEncodeChoice, GpuSelection,
    GpuUpload, PageLocking, Transfer,
};
use dicomflow::decode::Damaged;
use dicomflow::error::FatalError;
use dicomflow::output::options::{Naming, OutputFormat, PngCompression, PngFilter, SyncMode};
use dicomflow::paths::Escaped;
use dicomflow::pipeline::options::{Job, Layout};
use dicomflow::render::ops::{parse_rotate, Fit, Resize};
use dicomflow::render::spec::{parse_voi_override, Windows};
use dicomflow::source::listen::access::check_ae_title;
use dicomflow::source::listen::{AllowRule, ListenOptions};
use dicomflow::source::watch::WatchOptions;

/// The configuration shipped in `config/default.toml`; a test checks that it equals
/// [`Settings::default`].
#[cfg(test)]
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// One layer of configuration as written by the user: every key optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub decode: RawDecode,
    #[serde(default)]
    pub render: RawRender,
    #[serde(default)]
    pub output: RawOutput,
    #[serde(default)]
    pub run: RawRun,
    #[serde(default)]
    pub pipeline: RawPipeline,
    #[serde(default)]
    pub gpu: RawGpu,
    #[serde(default)]
    pub dashboard: RawDashboard,
    #[serde(default)]
    pub listen: RawListen,
    #[serde(default)]
    pub watch: RawWatch,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    pub host: Option<String>,
    pub port: Option<i64>,
    pub ae_title: Option<String>,
    pub check_called_ae: Option<bool>,
    pub allow: Option<Vec<String>>,
    pub max_pdu: Option<i64>,
    pub max_associations: Option<i64>,
    pub idle_timeout_s: Option<i64>,
    pub stall_timeout_s: Option<i64>,
    pub max_instance_mib: Option<i64>,
    pub spool: Option<PathBuf>,
    pub keep_received: Option<PathBuf>,
    pub queue: Option<i64>,
    pub durable: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatch {
    pub settle_ms: Option<i64>,
    pub give_up_s: Option<i64>,
    pub rescan_s: Option<i64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDecode {
    pub damaged: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRender {
    pub window: Option<RawWindows>,
    pub voi_function: Option<String>,
    pub overlays: Option<bool>,
    pub frames: Option<String>,
    pub resize: Option<String>,
    pub scale: Option<f64>,
    pub fit: Option<String>,
    pub interpolation: Option<String>,
    pub rotate: Option<i64>,
    pub flip: Option<String>,
    pub invert: Option<bool>,
    pub window_by_modality: Option<BTreeMap<String, RawWindows>>,
    pub window_by_series: Option<BTreeMap<String, RawWindows>>,
}

/// `window = "40,400"`, or a list for window channels: `window = ["40,80", "80,200"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawWindows {
    One(String),
    Channels(Vec<String>),
}

impl RawWindows {
    fn values(&self) -> Vec<&str> {
        match self {
            RawWindows::One(v) => vec![v.as_str()],
            RawWindows::Channels(v) => v.iter().map(String::as_str).collect(),
        }
    }

    fn parse(&self) -> Result<Windows, String> {
        Windows::parse_all(&self.values())
    }
}

impl std::fmt::Display for RawWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawWindows::One(v) => f.write_str(v),
            RawWindows::Channels(v) => write!(f, "{v:?}"),
        }
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    pub dir: Option<PathBuf>,
    pub format: Option<String>,
    pub png_compression: Option<String>,
    pub png_filter: Option<String>,
    pub jpeg_quality: Option<i64>,
    pub naming: Option<String>,
    pub skip_existing: Option<bool>,
    pub sync: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    pub fail_fast: Option<bool>,
    pub report: Option<PathBuf>,
    pub trace: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    pub layout: Option<String>,
    pub loaders: Option<i64>,
    pub workers: Option<i64>,
    pub writers: Option<i64>,
    pub slots: Option<i64>,
    pub max_frame_mib: Option<i64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpu {
    pub backend: Option<String>,
    pub transfer: Option<String>,
    pub gpus: Option<RawGpus>,
    pub streams: Option<i64>,
    pub pinned_budget_mib: Option<i64>,
    pub page_locking: Option<String>,
    pub auto_min_input_mib: Option<RawAutoOrCount>,
    pub release_threshold_mib: Option<i64>,
    pub kernel_cache: Option<PathBuf>,
    pub library_path: Option<PathBuf>,
    pub decode: Option<String>,
    pub decode_start: Option<String>,
    pub decode_streams: Option<i64>,
    pub encode_streams: Option<i64>,
    pub encode: Option<String>,
    pub encode_batch: Option<i64>,
    pub upload: Option<String>,
}

/// A number, or the word "auto".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawAutoOrCount {
    Word(String),
    Count(i64),
}

/// `gpus = "all"` or `gpus = [0, 1]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawGpus {
    Word(String),
    List(Vec<i64>),
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDashboard {
    pub tui: Option<String>,
    pub tick_ms: Option<i64>,
    pub log_file: Option<PathBuf>,
}

/// Where a layer of configuration came from, for error messages.
#[derive(Debug, Clone)]
pub enum Origin {
    /// The built-in defaults (`config/default.toml`, checked against [`Settings::default`]).
    #[cfg(test)]
    Defaults,
    /// A TOML file given with `-c`.
    File(PathBuf),
    /// Command-line flags.
    Cli,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(test)]
            Origin::Defaults => write!(f, "built-in defaults"),
            Origin::File(p) => write!(f, "{}", Escaped(p)),
            Origin::Cli => write!(f, "command line"),
        }
    }
}

/// Whether the live dashboard is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TuiMode {
    /// When stderr is a terminal.
    Auto,
    On,
    Off,
}

/// The dashboard's options (the binary's own).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DashboardOptions {
    pub tui: TuiMode,
    pub tick_ms: u64,
    /// Where logs go while the dashboard owns the terminal; `None` = `OUT/.dicomflow/dicomflow.log`.
    #[serde(serialize_with = "dicomflow::paths::serialize_opt")]
    pub log_file: Option<PathBuf>,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            tui: TuiMode::Auto,
            tick_ms: 100,
            log_file: None,
        }
    }
}

/// The checked settings of one run, each component's options apart: built from
/// [`Settings::default`] by [`Settings::apply`], then handed out piece by piece (the pipeline
/// gets the [`Job`], the backend selection its [`BackendOptions`]); nothing below `app/` sees
/// the whole. Serialized flat into the report, one key per config key.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Settings {
    #[serde(flatten)]
    pub job: Job,
    #[serde(flatten)]
    pub backend: BackendOptions,
    /// `--report`: the JSON report's path.
    #[serde(serialize_with = "dicomflow::paths::serialize_opt")]
    pub report: Option<PathBuf>,
    /// `--trace`: the Chrome trace's path.
    #[serde(serialize_with = "dicomflow::paths::serialize_opt")]
    pub trace: Option<PathBuf>,
    #[serde(flatten)]
    pub dashboard: DashboardOptions,
    /// `dicomflow listen` (`[listen]`).
    pub listen: ListenOptions,
    /// `dicomflow watch` (`[watch]`).
    pub watch: WatchOptions,
}

/// The largest configuration file read (the shipped one is 6 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Builds the message for a rejected value.
fn bad(
    origin: &Origin,
    key: &str,
    value: impl std::fmt::Display,
    why: impl AsRef<str>,
) -> FatalError {
    // Control characters shown escaped: a NUL or an escape sequence in a value is printed as
    // `\u{0}`, never raw to the terminal.
    let shown: String = value
        .to_string()
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    // On the command line the user typed a flag, not a configuration key: name the flag.
    let name = match origin {
        Origin::Cli => flag_of(key),
        _ => key.to_string(),
    };
    FatalError::Config(format!(
        "{origin}: invalid value `{shown}` for `{name}`: {}",
        why.as_ref()
    ))
}

/// The flag that sets configuration key `key` (`render.window` → `--window`).
fn flag_of(key: &str) -> String {
    let flag = match key {
        "output.dir" => "output",
        "gpu.decode" => "gpu-decode",
        "gpu.decode_start" => "gpu-decode-start",
        "gpu.encode" => "gpu-encode",
        "gpu.upload" => "gpu-upload",
        "dashboard.tui" => "tui",
        _ => key.rsplit('.').next().unwrap_or(key),
    };
    format!("--{}", flag.replace('_', "-"))
}

/// The value named `v` among `choices` (name, value; aliases allowed); `why` lists the names
/// in the error.
fn one_of<T: Copy>(
    origin: &Origin,
    key: &str,
    v: &str,
    choices: &[(&str, T)],
    why: &str,
) -> Result<T, FatalError> {
    choices
        .iter()
        .find(|(name, _)| *name == v)
        .map(|&(_, value)| value)
        .ok_or_else(|| bad(origin, key, v, why))
}

fn count(origin: &Origin, key: &str, v: i64, min: i64, max: i64) -> Result<usize, FatalError> {
    if v < min || v > max {
        return Err(bad(
            origin,
            key,
            v,
            format!("expected an integer in {min}..={max}"),
        ));
    }
    Ok(v as usize)
}

fn nonempty_path(p: &Path) -> Option<PathBuf> {
    if p.as_os_str().is_empty() {
        None
    } else {
        Some(p.to_path_buf())
    }
}

impl Settings {
    /// Parses a TOML layer; syntax errors and unknown keys name the file.
    pub fn parse_toml(text: &str, origin: &Origin) -> Result<RawConfig, FatalError> {
        toml::from_str::<RawConfig>(text)
            .map_err(|e| FatalError::Config(format!("{origin}: {}", e.to_string().trim_end())))
    }

    /// Reads and parses a config file.
    /// Reads and parses a config file: a regular file (a FIFO or a device would block or
    /// never end: `-c /dev/zero`) of at most [`MAX_CONFIG_BYTES`].
    pub fn load_file(path: &Path) -> Result<RawConfig, FatalError> {
        use std::io::Read;
        let err = |e: &dyn std::fmt::Display| {
            FatalError::Config(format!("config file {}: {e}", Escaped(path)))
        };
        let file = dicomflow::decode::probe::open_input(path).map_err(|e| err(&e))?;
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| err(&e))?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(err(&format!(
                "larger than {} KiB: not a configuration file",
                MAX_CONFIG_BYTES >> 10
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| err(&"not UTF-8 text"))?;
        Self::parse_toml(&text, &Origin::File(path.to_path_buf()))
    }

    /// Applies one layer over `self`, checking every value it sets.
    pub fn apply(&mut self, raw: &RawConfig, origin: &Origin) -> Result<(), FatalError> {
        if let Some(v) = &raw.decode.damaged {
            self.job.decode.damaged = one_of(
                origin,
                "decode.damaged",
                v,
                &[("fail", Damaged::Fail), ("render", Damaged::Render)],
                "use fail or render",
            )?;
        }
        let r = &raw.render;
        let render = &mut self.job.render;
        if let Some(v) = &r.window {
            render.window = v.parse().map_err(|e| bad(origin, "render.window", v, e))?;
            // A layer's window replaces the tables of earlier layers unless it sets its own:
            // `--window` on the command line applies to every file.
            if r.window_by_modality.is_none() {
                render.window_by_modality.clear();
            }
            if r.window_by_series.is_none() {
                render.window_by_series.clear();
            }
        }
        if let Some(table) = &r.window_by_modality {
            render.window_by_modality.clear();
            for (modality, v) in table {
                let key = format!("render.window_by_modality.{modality}");
                let m = modality.trim().to_ascii_uppercase();
                if m.is_empty() {
                    return Err(bad(origin, &key, v, "the modality is empty"));
                }
                let w = v.parse().map_err(|e| bad(origin, &key, v, e))?;
                render.window_by_modality.insert(m, w);
            }
        }
        if let Some(table) = &r.window_by_series {
            render.window_by_series.clear();
            for (series, v) in table {
                let key = format!("render.window_by_series.\"{series}\"");
                let uid = series.trim();
                if uid.is_empty() || !uid.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    return Err(bad(
                        origin,
                        &key,
                        v,
                        "the key must be a Series Instance UID (digits and dots)",
                    ));
                }
                let w = v.parse().map_err(|e| bad(origin, &key, v, e))?;
                render.window_by_series.insert(uid.to_string(), w);
            }
        }
        if let Some(v) = &r.voi_function {
            render.voi_function =
                parse_voi_override(v).map_err(|e| bad(origin, "render.voi_function", v, e))?;
        }
        if let Some(v) = r.overlays {
            render.overlays = v;
        }
        if let Some(v) = &r.frames {
            render.frames = v.parse().map_err(|e| bad(origin, "render.frames", v, e))?;
        }
        match (&r.resize, r.scale) {
            (Some(size), Some(scale)) if size != "none" && scale != 1.0 => {
                return Err(bad(
                    origin,
                    "render.scale",
                    scale,
                    format!("give resize (here \"{size}\") or scale, not both"),
                ))
            }
            (Some(size), scale) => {
                render.ops.resize = size
                    .parse()
                    .map_err(|e| bad(origin, "render.resize", size, e))?;
                if let Some(f) = scale.filter(|&f| f != 1.0) {
                    render.ops.resize =
                        Resize::scale(f).map_err(|e| bad(origin, "render.scale", f, e))?;
                }
            }
            (None, Some(f)) => {
                render.ops.resize =
                    Resize::scale(f).map_err(|e| bad(origin, "render.scale", f, e))?;
            }
            (None, None) => {}
        }
        if let Some(v) = &r.fit {
            render.ops.fit = v.parse().map_err(|e| bad(origin, "render.fit", v, e))?;
        }
        if let Some(v) = &r.interpolation {
            render.ops.interpolation = v
                .parse()
                .map_err(|e| bad(origin, "render.interpolation", v, e))?;
        }
        if let Some(v) = r.rotate {
            render.ops.rotate = parse_rotate(v).map_err(|e| bad(origin, "render.rotate", v, e))?;
        }
        if let Some(v) = &r.flip {
            render.ops.flip = v.parse().map_err(|e| bad(origin, "render.flip", v, e))?;
        }
        if let Some(v) = r.invert {
            render.ops.invert = v;
        }

        let o = &raw.output;
        if let Some(v) = &o.dir {
            if v.as_os_str().is_empty() {
                return Err(bad(origin, "output.dir", "", "must not be empty"));
            }
            self.job.output.dir = v.clone();
        }
        if let Some(v) = &o.format {
            self.job.output.format = one_of(
                origin,
                "output.format",
                v,
                &[
                    ("png", OutputFormat::Png),
                    ("jpeg", OutputFormat::Jpeg),
                    ("jpg", OutputFormat::Jpeg),
                    ("tiff", OutputFormat::Tiff),
                    ("tif", OutputFormat::Tiff),
                    ("bmp", OutputFormat::Bmp),
                    ("dcm", OutputFormat::Dcm),
                    ("dicom", OutputFormat::Dcm),
                ],
                "use png, jpeg, tiff, bmp or dcm",
            )?;
        }
        if let Some(v) = &o.png_compression {
            self.job.output.png_compression = one_of(
                origin,
                "output.png_compression",
                v,
                &[
                    ("none", PngCompression::None),
                    ("fast", PngCompression::Fast),
                    ("balanced", PngCompression::Balanced),
                    ("best", PngCompression::Best),
                ],
                "use none, fast, balanced or best",
            )?;
        }
        if let Some(v) = &o.png_filter {
            self.job.output.png_filter = one_of(
                origin,
                "output.png_filter",
                v,
                &[
                    ("none", PngFilter::None),
                    ("sub", PngFilter::Sub),
                    ("up", PngFilter::Up),
                    ("paeth", PngFilter::Paeth),
                    ("adaptive", PngFilter::Adaptive),
                ],
                "use none, sub, up, paeth or adaptive",
            )?;
        }
        if let Some(v) = o.jpeg_quality {
            self.job.output.jpeg_quality = count(origin, "output.jpeg_quality", v, 1, 100)? as u8;
        }
        if let Some(v) = &o.naming {
            self.job.output.naming = if v == "mirror" {
                Naming::Mirror
            } else {
                dicomflow::output::naming::check_pattern(v)
                    .map_err(|e| bad(origin, "output.naming", v, e))?;
                Naming::Pattern(v.clone())
            };
        }
        if let Some(v) = o.skip_existing {
            self.job.output.skip_existing = v;
        }
        if let Some(v) = &o.sync {
            self.job.output.sync = one_of(
                origin,
                "output.sync",
                v,
                &[
                    ("run", SyncMode::Run),
                    ("file", SyncMode::File),
                    ("none", SyncMode::None),
                ],
                "use run, file or none",
            )?;
        }

        let run = &raw.run;
        if let Some(v) = run.fail_fast {
            self.job.pipeline.fail_fast = v;
        }
        if let Some(v) = &run.report {
            self.report = nonempty_path(v);
        }
        if let Some(v) = &run.trace {
            self.trace = nonempty_path(v);
        }

        let p = &raw.pipeline;
        if let Some(v) = &p.layout {
            self.job.pipeline.layout = one_of(
                origin,
                "pipeline.layout",
                v,
                &[
                    ("auto", Layout::Auto),
                    ("stages", Layout::Stages),
                    ("shared", Layout::Shared),
                ],
                "use auto, stages or shared",
            )?;
        }
        if let Some(v) = p.loaders {
            self.job.pipeline.loaders = count(origin, "pipeline.loaders", v, 0, 256)?;
        }
        if let Some(v) = p.workers {
            self.job.pipeline.workers = count(origin, "pipeline.workers", v, 0, 256)?;
        }
        if let Some(v) = p.writers {
            self.job.pipeline.writers = count(origin, "pipeline.writers", v, 0, 256)?;
        }
        if let Some(v) = p.slots {
            if v == 1 {
                return Err(bad(
                    origin,
                    "pipeline.slots",
                    v,
                    "at least 2 slots are needed (double buffering); 0 = automatic",
                ));
            }
            self.job.pipeline.slots = count(origin, "pipeline.slots", v, 0, 4096)?;
        }
        if let Some(v) = p.max_frame_mib {
            self.job.pipeline.max_frame_bytes =
                count(origin, "pipeline.max_frame_mib", v, 1, 1 << 20)? as u64 * (1 << 20);
        }

        let g = &raw.gpu;
        if let Some(v) = &g.backend {
            self.backend.choice = one_of(
                origin,
                "gpu.backend",
                v,
                &[
                    ("auto", BackendChoice::Auto),
                    ("cuda", BackendChoice::Cuda),
                    ("cpu", BackendChoice::Cpu),
                ],
                "use auto, cuda or cpu",
            )?;
        }
        if let Some(v) = &g.transfer {
            self.backend.gpu.transfer = one_of(
                origin,
                "gpu.transfer",
                v,
                &[
                    ("auto", Transfer::Auto),
                    ("zero-copy", Transfer::ZeroCopy),
                    ("pinned", Transfer::Pinned),
                    ("pageable", Transfer::Pageable),
                ],
                "use auto, zero-copy, pinned or pageable",
            )?;
        }
        if let Some(v) = &g.gpus {
            self.backend.gpu.gpus = match v {
                RawGpus::Word(w) if w == "all" => GpuSelection::All,
                RawGpus::Word(w) => parse_gpu_list(w).map_err(|e| bad(origin, "gpu.gpus", w, e))?,
                RawGpus::List(list) => {
                    let mut ids = Vec::new();
                    for &i in list {
                        ids.push(count(origin, "gpu.gpus", i, 0, 63)?);
                    }
                    if ids.is_empty() {
                        return Err(bad(
                            origin,
                            "gpu.gpus",
                            "[]",
                            "list at least one GPU or say \"all\"",
                        ));
                    }
                    GpuSelection::List(ids)
                }
            };
        }
        if let Some(v) = g.streams {
            self.backend.gpu.streams = count(origin, "gpu.streams", v, 1, 64)?;
        }
        if let Some(v) = g.pinned_budget_mib {
            self.backend.gpu.pinned_budget_bytes =
                count(origin, "gpu.pinned_budget_mib", v, 0, 1 << 24)? as u64 * (1 << 20);
        }
        if let Some(v) = &g.page_locking {
            self.backend.gpu.page_locking = one_of(
                origin,
                "gpu.page_locking",
                v,
                &[
                    ("register", PageLocking::Register),
                    ("host-alloc", PageLocking::HostAlloc),
                ],
                "use register or host-alloc",
            )?;
        }
        if let Some(v) = &g.auto_min_input_mib {
            self.backend.gpu.auto_min_input_bytes = match v {
                RawAutoOrCount::Word(w) if w == "auto" => None,
                RawAutoOrCount::Word(w) => {
                    return Err(bad(
                        origin,
                        "gpu.auto_min_input_mib",
                        w,
                        "use \"auto\" or a number of MiB (0 = always use the GPU)",
                    ))
                }
                RawAutoOrCount::Count(n) => Some(
                    count(origin, "gpu.auto_min_input_mib", *n, 0, 1 << 30)? as u64 * (1 << 20),
                ),
            };
        }
        if let Some(v) = g.release_threshold_mib {
            self.backend.gpu.release_threshold_bytes =
                count(origin, "gpu.release_threshold_mib", v, 0, 1 << 24)? as u64 * (1 << 20);
        }
        if let Some(v) = &g.kernel_cache {
            self.backend.gpu.kernel_cache = nonempty_path(v);
        }
        if let Some(v) = &g.library_path {
            self.backend.gpu.library_path = nonempty_path(v);
        }
        if let Some(v) = g.decode_streams {
            self.backend.gpu.decode_streams = count(origin, "gpu.decode_streams", v, 1, 64)?;
        }
        if let Some(v) = g.encode_streams {
            self.backend.gpu.encode_streams = count(origin, "gpu.encode_streams", v, 1, 64)?;
        }
        if let Some(v) = g.encode_batch {
            self.backend.gpu.encode_batch = count(origin, "gpu.encode_batch", v, 1, 64)?;
        }
        if let Some(v) = &g.decode {
            self.backend.gpu.decode = one_of(
                origin,
                "gpu.decode",
                v,
                &[
                    ("lossless", GpuDecode::Lossless),
                    ("all", GpuDecode::All),
                    ("none", GpuDecode::None),
                ],
                "use lossless, all or none",
            )?;
        }
        if let Some(v) = &g.upload {
            self.backend.gpu.upload = one_of(
                origin,
                "gpu.upload",
                v,
                &[("auto", GpuUpload::Auto), ("off", GpuUpload::Off)],
                "use auto or off",
            )?;
        }
        if let Some(v) = &g.decode_start {
            self.backend.gpu.decode_start = one_of(
                origin,
                "gpu.decode_start",
                v,
                &[("cpu", GpuDecodeStart::Cpu), ("wait", GpuDecodeStart::Wait)],
                "use cpu or wait",
            )?;
        }
        if let Some(v) = &g.encode {
            self.backend.gpu.encode = one_of(
                origin,
                "gpu.encode",
                v,
                &[
                    ("auto", GpuEncodeChoice::Auto),
                    ("gpu", GpuEncodeChoice::Gpu),
                    ("cpu", GpuEncodeChoice::Cpu),
                ],
                "use auto, gpu or cpu",
            )?;
        }

        let d = &raw.dashboard;
        if let Some(v) = &d.tui {
            self.dashboard.tui = one_of(
                origin,
                "dashboard.tui",
                v,
                &[
                    ("auto", TuiMode::Auto),
                    ("on", TuiMode::On),
                    ("off", TuiMode::Off),
                ],
                "use auto, on or off",
            )?;
        }
        if let Some(v) = d.tick_ms {
            self.dashboard.tick_ms = count(origin, "dashboard.tick_ms", v, 10, 10_000)? as u64;
        }
        if let Some(v) = &d.log_file {
            self.dashboard.log_file = nonempty_path(v);
        }
        self.apply_listen(&raw.listen, origin)?;
        self.apply_watch(&raw.watch, origin)
    }

    fn apply_listen(&mut self, l: &RawListen, origin: &Origin) -> Result<(), FatalError> {
        let o = &mut self.listen;
        if let Some(v) = &l.host {
            let ip: std::net::IpAddr = v.trim().parse().map_err(|_| {
                bad(
                    origin,
                    "listen.host",
                    v,
                    "expected an IP address such as 0.0.0.0, 127.0.0.1 or ::",
                )
            })?;
            o.bind.set_ip(ip);
        }
        if let Some(v) = l.port {
            o.bind
                .set_port(count(origin, "listen.port", v, 0, 65535)? as u16);
        }
        if let Some(v) = &l.ae_title {
            check_ae_title(v).map_err(|e| bad(origin, "listen.ae_title", v, e))?;
            o.ae_title = v.trim().to_string();
        }
        if let Some(v) = l.check_called_ae {
            o.check_called_ae = v;
        }
        if let Some(list) = &l.allow {
            o.allow = list
                .iter()
                .map(|v| {
                    v.parse::<AllowRule>()
                        .map_err(|e| bad(origin, "listen.allow", v, e))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = l.max_pdu {
            // PS3.8: at least 4 KiB is sensible; dicom-ul accepts up to ~4 GiB, 64 MiB is plenty.
            o.max_pdu = count(origin, "listen.max_pdu", v, 4096, 64 << 20)? as u32;
        }
        if let Some(v) = l.max_associations {
            o.max_associations = count(origin, "listen.max_associations", v, 1, 4096)?;
        }
        if let Some(v) = l.idle_timeout_s {
            o.idle_timeout =
                std::time::Duration::from_secs(
                    count(origin, "listen.idle_timeout_s", v, 1, 86_400)? as u64,
                );
        }
        if let Some(v) = l.stall_timeout_s {
            o.stall_timeout = std::time::Duration::from_secs(count(
                origin,
                "listen.stall_timeout_s",
                v,
                1,
                86_400,
            )? as u64);
        }
        if let Some(v) = l.max_instance_mib {
            o.max_instance_bytes =
                count(origin, "listen.max_instance_mib", v, 1, 1 << 20)? as u64 * (1 << 20);
        }
        if let Some(v) = &l.spool {
            o.spool = nonempty_path(v);
        }
        if let Some(v) = &l.keep_received {
            o.keep_received = nonempty_path(v);
        }
        if let Some(v) = l.queue {
            o.queue = count(origin, "listen.queue", v, 1, 1 << 20)?;
        }
        if let Some(v) = l.durable {
            o.durable = v;
        }
        Ok(())
    }

    fn apply_watch(&mut self, w: &RawWatch, origin: &Origin) -> Result<(), FatalError> {
        let o = &mut self.watch;
        if let Some(v) = w.settle_ms {
            o.settle =
                std::time::Duration::from_millis(
                    count(origin, "watch.settle_ms", v, 0, 600_000)? as u64
                );
        }
        if let Some(v) = w.give_up_s {
            o.give_up =
                std::time::Duration::from_secs(
                    count(origin, "watch.give_up_s", v, 1, 86_400)? as u64
                );
        }
        if let Some(v) = w.rescan_s {
            o.rescan = std::time::Duration::from_secs(
                count(origin, "watch.rescan_s", v, 0, 86_400)? as u64,
            );
        }
        Ok(())
    }

    /// Defaults, then the file (if any), then the CLI layer.
    pub fn resolve(file: Option<&Path>, cli: &RawConfig) -> Result<Settings, FatalError> {
        let mut s = Settings::default();
        if let Some(path) = file {
            let raw = Self::load_file(path)?;
            s.apply(&raw, &Origin::File(path.to_path_buf()))?;
        }
        s.apply(cli, &Origin::Cli)?;
        s.check()?;
        Ok(s)
    }

    /// Checks that hold across keys, once every layer is applied.
    pub fn check(&self) -> Result<(), FatalError> {
        let ops = &self.job.render.ops;
        if ops.fit != Fit::Stretch && !matches!(ops.resize, Resize::Exact { .. }) {
            return Err(FatalError::Config(format!(
                "render.fit = \"{}\" needs resize = \"WxH\" (resize is \"{}\", which keeps \
                 the aspect ratio by itself)",
                ops.fit, ops.resize
            )));
        }
        Ok(())
    }
}

/// `"0,1"` → `[0, 1]` (the CLI form of `gpus`).
pub fn parse_gpu_list(s: &str) -> Result<GpuSelection, String> {
    if s.trim() == "all" {
        return Ok(GpuSelection::All);
    }
    let mut ids = Vec::new();
    for part in s.split(',') {
        let id = part
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("`{part}` is not a GPU index; use \"all\" or e.g. 0,1"))?;
        ids.push(id);
    }
    Ok(GpuSelection::List(ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicomflow::render::spec::WindowSpec;

    #[test]
    fn shipped_default_toml_equals_built_in_defaults() {
        let raw = Settings::parse_toml(DEFAULT_TOML, &Origin::Defaults).unwrap();
        let mut s = Settings::default();
        s.apply(&raw, &Origin::Defaults).unwrap();
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn unknown_key_is_rejected_naming_key_and_file() {
        let origin = Origin::File("my.toml".into());
        let err = Settings::parse_toml("[render]\nwindw = \"file\"\n", &origin)
            .unwrap_err()
            .to_string();
        assert!(err.contains("my.toml"), "{err}");
        assert!(err.contains("windw"), "{err}");
    }

    #[test]
    fn unknown_section_is_rejected() {
        let err = Settings::parse_toml("[rendr]\n", &Origin::File("x.toml".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rendr"), "{err}");
    }

    #[test]
    fn bad_value_names_key_value_and_file() {
        let origin = Origin::File("cfg/bad.toml".into());
        for (key, flag) in [
            ("render.window", "--window"),
            ("output.jpeg_quality", "--jpeg-quality"),
            ("output.dir", "--output"),
            ("gpu.decode", "--gpu-decode"),
            ("gpu.decode_streams", "--decode-streams"),
            ("gpu.encode_streams", "--encode-streams"),
            ("gpu.decode_start", "--gpu-decode-start"),
            ("gpu.upload", "--gpu-upload"),
            ("gpu.encode_batch", "--encode-batch"),
            ("pipeline.max_frame_mib", "--max-frame-mib"),
            ("listen.ae_title", "--ae-title"),
        ] {
            assert_eq!(flag_of(key), flag);
        }
        for (text, key, value) in [
            ("[render]\nwindow = \"file:0\"", "render.window", "file:0"),
            ("[output]\nformat = \"gif\"", "output.format", "gif"),
            ("[pipeline]\nslots = 1", "pipeline.slots", "1"),
            ("[pipeline]\nloaders = -3", "pipeline.loaders", "-3"),
            ("[pipeline]\nlayout = \"fused\"", "pipeline.layout", "fused"),
            ("[gpu]\ntransfer = \"dma\"", "gpu.transfer", "dma"),
            ("[gpu]\nupload = \"workers\"", "gpu.upload", "workers"),
            (
                "[gpu]\ndecode_start = \"later\"",
                "gpu.decode_start",
                "later",
            ),
            ("[output]\njpeg_quality = 0", "output.jpeg_quality", "0"),
            ("[output]\nsync = \"always\"", "output.sync", "always"),
            ("[output]\nnaming = \"{../x}\"", "output.naming", "{../x}"),
            ("[dashboard]\ntick_ms = 1", "dashboard.tick_ms", "1"),
            (
                "[gpu]\nauto_min_input_mib = \"big\"",
                "gpu.auto_min_input_mib",
                "big",
            ),
            (
                "[gpu]\nauto_min_input_mib = -1",
                "gpu.auto_min_input_mib",
                "-1",
            ),
            (
                "[gpu]\npage_locking = \"mlock\"",
                "gpu.page_locking",
                "mlock",
            ),
        ] {
            let raw = Settings::parse_toml(text, &origin).unwrap();
            let err = Settings::default()
                .apply(&raw, &origin)
                .unwrap_err()
                .to_string();
            assert!(err.contains("cfg/bad.toml"), "{err}");
            assert!(err.contains(key), "{err}");
            assert!(err.contains(value), "{err}");
        }
    }

    #[test]
    fn wrong_type_is_rejected_by_the_parser() {
        let err = Settings::parse_toml(
            "[pipeline]\nslots = \"many\"",
            &Origin::File("t.toml".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("t.toml"), "{err}");
        assert!(err.contains("slots"), "{err}");
    }

    #[test]
    fn cli_overrides_file_which_overrides_defaults() {
        let file = Settings::parse_toml(
            "[render]\nwindow = \"minmax\"\n[output]\nformat = \"bmp\"\n[pipeline]\nlayout = \"stages\"\n",
            &Origin::Defaults,
        )
        .unwrap();
        let mut cli = RawConfig::default();
        cli.render.window = Some(RawWindows::One("40,400".into()));
        cli.pipeline.layout = Some("shared".into());
        let mut s = Settings::default();
        s.apply(&file, &Origin::File("f.toml".into())).unwrap();
        s.apply(&cli, &Origin::Cli).unwrap();
        assert_eq!(
            s.job.render.window,
            Windows::one(WindowSpec::Explicit {
                center: 40.0,
                width: 400.0
            })
        );
        assert_eq!(s.job.output.format, OutputFormat::Bmp);
        assert_eq!(s.job.output.png_compression, PngCompression::Fast);
        assert_eq!(s.job.pipeline.layout, Layout::Shared);
        s.apply(&file, &Origin::File("f.toml".into())).unwrap();
        assert_eq!(s.job.pipeline.layout, Layout::Stages);
    }

    #[test]
    fn gpus_accepts_all_list_and_csv() {
        let raw = Settings::parse_toml("[gpu]\ngpus = [0, 1]", &Origin::Defaults).unwrap();
        let mut s = Settings::default();
        s.apply(&raw, &Origin::Defaults).unwrap();
        assert_eq!(s.backend.gpu.gpus, GpuSelection::List(vec![0, 1]));
        assert_eq!(parse_gpu_list("all"), Ok(GpuSelection::All));
        assert!(parse_gpu_list("0,x").is_err());
    }

    #[test]
    fn upload_is_auto_by_default_and_off_when_asked() {
        assert_eq!(Settings::default().backend.gpu.upload, GpuUpload::Auto);
        let raw = Settings::parse_toml("[gpu]\nupload = \"off\"", &Origin::Defaults).unwrap();
        let mut s = Settings::default();
        s.apply(&raw, &Origin::Defaults).unwrap();
        assert_eq!(s.backend.gpu.upload, GpuUpload::Off);
    }

    #[test]
    fn auto_min_input_accepts_auto_and_mib() {
        let origin = Origin::File("g.toml".into());
        for (text, want) in [
            ("[gpu]\nauto_min_input_mib = \"auto\"", None),
            ("[gpu]\nauto_min_input_mib = 0", Some(0)),
            ("[gpu]\nauto_min_input_mib = 100", Some(100 << 20)),
        ] {
            let raw = Settings::parse_toml(text, &origin).unwrap();
            let mut s = Settings::default();
            s.apply(&raw, &origin).unwrap();
            assert_eq!(s.backend.gpu.auto_min_input_bytes, want, "{text}");
        }
    }
}
