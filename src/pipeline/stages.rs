//! The bodies of the stage threads. Each stage takes work from its input channel, records its
//! time per slice, and either passes the slot on or reports a failure and returns the slot to
//! the ring. Panics from third-party code are caught per file or frame and reported as that
//! file's failure; the thread goes on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use std::sync::Arc;

use crate::backend::{BatchFrame, Encoded, RenderWorker, UploadError};
use crate::decode::compressed::{self, EncodedFrame, FrameCoding, GpuStart, Sample};
use crate::decode::info::SourceHeader;
use crate::decode::{DecodeError, DecodeLimits, ImageFile, ImageInfo, NamingValues};
use crate::error::Stage;
use crate::memory::{Slot, TakeOr};
use crate::observe::stats::StageId;
use crate::observe::{Parts, Piece, StageClock};
use crate::output::dicom::Derived;
use crate::output::encode::ImageEncoder;
use crate::output::naming;
use crate::output::options::{Naming, OutputFormat};
use crate::output::verify::check_existing;
use crate::paths::Escaped;
use crate::pipeline::events::{Event, FileMeta};
use crate::pipeline::Context;
use crate::render::plan::{plan_frame, FramePlan, Window};
use crate::source::live::FeedReceiver;
use crate::source::{self, Candidate, ListingAhead, ScanItem, Sources};

/// One frame in flight: its slot, its plan, and where it goes.
pub(crate) struct InFlight {
    slot: Slot,
    plan: FramePlan,
    id: usize,
    frame: u32,
    output: PathBuf,
    /// Trace label (empty when not tracing).
    label: String,
    /// First byte read for this frame (latency start).
    started: Instant,
    window: Option<Window>,
    device: Option<usize>,
    /// The slot holds PNG-filtered rows, not pixels (`RenderOutcome::png_rows`).
    png_rows: bool,
    /// The slot holds bytes the GPU compressed (`RenderOutcome::encoded`).
    encoded: Option<Encoded>,
    /// What a DICOM output needs of its source (`--format dcm` only).
    dicom: Option<Arc<DicomSource>>,
}

/// The source of a file's DICOM outputs: its carried header and the settings that shape the
/// pixels (which key the derived UIDs).
pub(crate) struct DicomSource {
    header: Arc<SourceHeader>,
    frames: u32,
    instance_number: Option<i64>,
    fingerprint: String,
    path: String,
}

fn panic_reason(what: &str) -> String {
    format!("internal error while {what} (caught panic; please report this file)")
}

/// Sends a failure event. With `--fail-fast` it also stops loading at once: the collector would
/// too, but only after reading the event, and by then a fast loader may have started every
/// remaining file.
fn send_failure(ctx: &Context, events: &Sender<Event>, event: Event) -> bool {
    if ctx.job.pipeline.fail_fast {
        ctx.cancel.store(true, Ordering::Relaxed);
    }
    events.send(event).is_ok()
}

/// Lists the inputs, then probes them in order, assigns each DICOM file its output name (see
/// [`super::outputs`]) and hands it to the loaders; everything else goes to the collector.
pub(crate) fn scan_stage(
    ctx: &Context,
    sources: &Sources,
    ahead: Option<ListingAhead>,
    tx: Sender<ScanItem>,
    events: Sender<Event>,
) {
    let clock = StageClock::new(&ctx.stats, ctx.tracer.clone(), &[StageId::Scan]);
    let mut last = Instant::now();
    let out_dir = ctx.job.output.dir.as_path();
    let listed = ahead
        .filter(|a| a.excludes(out_dir))
        .and_then(|a| a.take(&ctx.cancel));
    let (mut listing, ahead) = match listed {
        Some((listing, took)) => (listing, Some(took)),
        None => (sources.list(Some(out_dir), &ctx.cancel), None),
    };
    let inputs = listing.take_input_files();
    match ahead {
        Some(took) => tracing::info!(
            "listed {} input file(s) in {:.1} ms while the backend started ({:.1} ms more here)",
            inputs.len(),
            took.as_secs_f64() * 1e3,
            last.elapsed().as_secs_f64() * 1e3
        ),
        None => tracing::info!(
            "listed {} input file(s) in {:.1} ms",
            inputs.len(),
            last.elapsed().as_secs_f64() * 1e3
        ),
    }
    ctx.outputs.set_inputs(inputs);
    if ctx.job.output.naming == Naming::Mirror {
        let frame_like = listing
            .files()
            .filter_map(|(path, rel)| {
                let base = out_dir.join(naming::mirror_base(rel));
                naming::is_frame_like(&base).then(|| (base, path.to_path_buf()))
            })
            .collect();
        ctx.outputs.set_frame_like(frame_like);
    }
    listing.scan(&ctx.cancel, |item| {
        let path = match &item {
            ScanItem::Dicom(c) => &c.path,
            ScanItem::Skipped { path, .. }
            | ScanItem::Error { path, .. }
            | ScanItem::NotStarted { path } => path,
        };
        clock.record(StageId::Scan, Escaped(path), last, Instant::now());
        ctx.stats.totals.files_found.fetch_add(1, Ordering::Relaxed);
        let ok = hand_on(ctx, item, None, &tx, &events);
        last = Instant::now();
        ok
    });
    ctx.stats.totals.scan_done.store(true, Ordering::Relaxed);
}

/// Sends what the scan found on: candidates (with their output names) to the loaders, the
/// others to the collector. `id`: the file's, when it has one before it is opened, as a live
/// input does. False when the run is ending.
fn hand_on(
    ctx: &Context,
    item: ScanItem,
    id: Option<usize>,
    tx: &Sender<ScanItem>,
    events: &Sender<Event>,
) -> bool {
    match item {
        ScanItem::Skipped { path, reason } => {
            events.send(Event::Skipped { id, path, reason }).is_ok()
        }
        ScanItem::Error { path, reason } => send_failure(
            ctx,
            events,
            Event::FileFailed {
                id,
                path,
                stage: Stage::Scan,
                reason,
            },
        ),
        ScanItem::NotStarted { path } => events.send(Event::FileNotStarted { path }).is_ok(),
        // Probed as the cancel came: not started either.
        ScanItem::Dicom(c) if ctx.cancel.load(Ordering::Relaxed) => {
            events.send(Event::FileNotStarted { path: c.path }).is_ok()
        }
        ScanItem::Dicom(c) => match assign_output(ctx, c, events) {
            Some(c) => tx.send(ScanItem::Dicom(c)).is_ok(),
            // Reported: the file failed, or is no image.
            None => true,
        },
    }
}

/// The scan stage of a run whose inputs arrive while it goes on: each arrival becomes a
/// candidate (announced to the collector first, so its outcome can be reported back), until
/// the feed ends.
pub(crate) fn live_scan_stage(
    ctx: &Context,
    feed: &FeedReceiver,
    tx: Sender<ScanItem>,
    events: Sender<Event>,
) {
    let clock = StageClock::new(&ctx.stats, ctx.tracer.clone(), &[StageId::Scan]);
    let mut next_id = 0usize;
    while let Some(input) = feed.next(&ctx.cancel) {
        let t0 = Instant::now();
        let id = next_id;
        next_id += 1;
        ctx.stats.totals.files_found.fetch_add(1, Ordering::Relaxed);
        let (path, rel, skip_existing) =
            (input.path.clone(), input.rel.clone(), input.skip_existing);
        if events.send(Event::Arrived { id, input }).is_err() {
            return;
        }
        let mut item = source::classify_as(id, path, rel);
        if let ScanItem::Dicom(c) = &mut item {
            c.skip_existing = skip_existing;
        }
        let ok = hand_on(ctx, item, Some(id), &tx, &events);
        // The live scan draws no spans (the walk's scan does); its time counts all the same.
        clock.record_time(StageId::Scan, t0.elapsed());
        if !ok {
            return;
        }
    }
}

/// Gives candidate `c` its output name, in scan order (the first input to want a name keeps
/// it). When it cannot have one, the reason goes to the collector and `None` comes back.
fn assign_output(ctx: &Context, mut c: Candidate, events: &Sender<Event>) -> Option<Candidate> {
    let base = match &ctx.job.output.naming {
        Naming::Mirror => Ok(naming::mirror_base(&c.rel)),
        Naming::Pattern(p) => {
            // Names come from the header: read it now (the loader reads it again), so that
            // the order of the scan, not the loaders' timing, decides who keeps a name.
            let limits = DecodeLimits {
                max_frame_bytes: ctx.job.pipeline.max_frame_bytes,
                damaged: ctx.job.decode.damaged,
            };
            let values = catch_unwind(AssertUnwindSafe(|| {
                crate::decode::naming_values(&c.path, c.kind.clone(), limits)
            }))
            .unwrap_or_else(|_| Err(DecodeError::Fail(panic_reason("reading the header"))));
            values.map(|v| naming::expand_pattern(p, &with_path_values(&c, v)))
        }
    };
    let event = match base {
        Ok(base) => {
            let full = ctx.job.output.dir.join(&base);
            // A live run renders a name again when it arrives again (a re-sent instance, a
            // file written anew): later arrivals replace earlier outputs, in arrival order.
            let reserved = if ctx.live {
                Ok(())
            } else {
                ctx.outputs.reserve(&full, c.id, &c.path)
            };
            match reserved {
                Ok(()) => {
                    c.base = Some(base);
                    return Some(c);
                }
                Err(reason) => Event::FileFailed {
                    id: Some(c.id),
                    path: c.path.clone(),
                    stage: Stage::Write,
                    reason,
                },
            }
        }
        Err(DecodeError::Skip(reason)) => Event::Skipped {
            id: Some(c.id),
            path: c.path.clone(),
            reason,
        },
        Err(DecodeError::Fail(reason)) => Event::FileFailed {
            id: Some(c.id),
            path: c.path.clone(),
            stage: Stage::Decode,
            reason,
        },
    };
    match event {
        e @ Event::Skipped { .. } => {
            let _ = events.send(e);
        }
        e => {
            let _ = send_failure(ctx, events, e);
        }
    }
    None
}

pub(crate) fn load_stage(
    ctx: &Context,
    rx: Receiver<ScanItem>,
    tx: Sender<InFlight>,
    events: Sender<Event>,
) {
    let clock = StageClock::new(&ctx.stats, ctx.tracer.clone(), &[StageId::ReadDecode]);
    let mut loader = Loader::default();
    for item in rx {
        while ctx.stats.is_paused() && !ctx.cancel.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        loader.load(ctx, &clock, item, &tx, &events, &mut SlotWait::Block);
    }
}

/// The stages that finish a frame (after the writer's renderer, if it has one).
const FINISHING: [StageId; 2] = [StageId::Encode, StageId::Write];

/// The stages of a render worker, timed by the worker itself (`RenderTimings`).
const RENDERING: [StageId; 5] = [
    StageId::TransferIn,
    StageId::GpuDecode,
    StageId::Compute,
    StageId::GpuEncode,
    StageId::TransferOut,
];

/// A loading thread's reusable scratch buffer.
#[derive(Default)]
struct Loader {
    scratch: Vec<u8>,
}

impl Loader {
    /// Reads and decodes every frame of `item` into slots and sends them on `tx`; a file that
    /// cannot be read is reported, as is a file found after a cancel.
    fn load(
        &mut self,
        ctx: &Context,
        clock: &StageClock,
        item: ScanItem,
        tx: &Sender<InFlight>,
        events: &Sender<Event>,
        wait: &mut SlotWait,
    ) {
        if ctx.cancel.load(Ordering::Relaxed) {
            // Drain: files found but not started are listed as cancelled.
            if let ScanItem::Dicom(c) = item {
                let _ = events.send(Event::FileNotStarted { path: c.path });
            }
            return;
        }
        let ScanItem::Dicom(c) = item else {
            return; // the scan stage reports the others itself
        };
        let result = catch_unwind(AssertUnwindSafe(|| {
            load_file(ctx, &c, tx, events, clock, &mut self.scratch, wait)
        }));
        if result.is_err() {
            self.scratch = Vec::new();
            let _ = send_failure(
                ctx,
                events,
                Event::FileFailed {
                    id: Some(c.id),
                    path: c.path.clone(),
                    stage: Stage::Decode,
                    reason: panic_reason("decoding"),
                },
            );
        }
    }
}

/// What a loading thread does while every slot is in flight.
enum SlotWait<'a> {
    /// Waits until a downstream thread gives one back.
    Block,
    /// Finishes the loaded frames that wait in `queued` (they hold the slots) with `writer`
    /// until one is free: a thread that also writes never sits idle beside a full queue.
    Finish {
        writer: &'a mut Writer,
        clock: &'a StageClock,
        queued: &'a Receiver<InFlight>,
        events: &'a Sender<Event>,
    },
}

impl SlotWait<'_> {
    /// A free slot; `None` only when the ring is gone.
    fn take(&mut self, ctx: &Context) -> Option<Slot> {
        match self {
            SlotWait::Block => ctx.pool.take(),
            SlotWait::Finish {
                writer,
                clock,
                queued,
                events,
            } => loop {
                match ctx.pool.take_or(queued) {
                    TakeOr::Slot(slot) => return Some(slot),
                    TakeOr::Other(job) => writer.finish(ctx, clock, job, events),
                    TakeOr::Closed => return None,
                }
            },
        }
    }
}

/// The body of a thread that both loads and finishes frames (`Layout::Shared`): it finishes
/// the frames already loaded first (they hold slots, and a frame this thread has just loaded
/// is still in its core's cache), and loads the next file only when none is waiting. A thread
/// of this layout waits only when it has nothing it could do, so on a machine with few cores
/// none of them idles while another stage's thread holds a core.
pub(crate) fn shared_stage(
    ctx: &Context,
    renderer: Option<Box<dyn RenderWorker>>,
    scan: Receiver<ScanItem>,
    loaded_tx: Sender<InFlight>,
    loaded: Receiver<InFlight>,
    events: Sender<Event>,
) {
    let clock = finishing_clock(ctx, &[StageId::ReadDecode], renderer.is_some());
    let mut writer = Writer::new(ctx, renderer);
    let mut loader = Loader::default();
    // Loads a file; while every slot is in flight, finishes the frames already loaded.
    let mut load = |item: ScanItem, tx: &Sender<InFlight>, writer: &mut Writer| {
        let mut wait = SlotWait::Finish {
            writer,
            clock: &clock,
            queued: &loaded,
            events: &events,
        };
        loader.load(ctx, &clock, item, tx, &events, &mut wait);
    };
    // Dropped once the scan has nothing more: the queue closes when every thread has
    // dropped its sender and the last frame has been taken.
    let mut loaded_tx = Some(loaded_tx);
    // A file taken from the scan while loading was paused (so that the end of the scan is
    // noticed, and the run can end, while paused), loaded when the pause ends.
    let mut pending: Option<ScanItem> = None;
    loop {
        if let Ok(job) = loaded.try_recv() {
            writer.finish(ctx, &clock, job, &events);
            continue;
        }
        let Some(tx) = loaded_tx.as_ref() else {
            // Nothing left to load: finish what comes until no thread can send any more.
            match loaded.recv() {
                Ok(job) => writer.finish(ctx, &clock, job, &events),
                Err(_) => return,
            }
            continue;
        };
        if ctx.stats.is_paused() && !ctx.cancel.load(Ordering::Relaxed) {
            if pending.is_none() {
                match scan.try_recv() {
                    Ok(item) => pending = Some(item),
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        loaded_tx = None;
                        continue;
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => {}
                }
            }
            match loaded.recv_timeout(Duration::from_millis(50)) {
                Ok(job) => writer.finish(ctx, &clock, job, &events),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                // Every render worker is gone: see below.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        if let Some(item) = pending.take() {
            load(item, tx, &mut writer);
            continue;
        }
        crossbeam_channel::select! {
            recv(loaded) -> job => match job {
                Ok(job) => writer.finish(ctx, &clock, job, &events),
                // Only if every render worker is gone while this thread still loads: nothing
                // it loads could be finished, so it stops (and with it, its hold on the scan).
                Err(_) => return,
            },
            recv(scan) -> item => match item {
                Ok(item) => load(item, tx, &mut writer),
                Err(_) => loaded_tx = None,
            },
        }
    }
}

/// Output path of every frame: the name the scan assigned (see [`assign_output`]).
fn output_paths(ctx: &Context, c: &Candidate, info: &ImageInfo) -> Vec<PathBuf> {
    let ext = ctx.job.output.format.extension();
    let base = match (&c.base, &ctx.job.output.naming) {
        (Some(base), _) => base.clone(),
        (None, Naming::Mirror) => naming::mirror_base(&c.rel),
        (None, Naming::Pattern(p)) => {
            naming::expand_pattern(p, &with_path_values(c, info.naming.clone()))
        }
    };
    (0..info.frames)
        .map(|f| naming::frame_path(&ctx.job.output.dir, &base, info.frames, f, ext))
        .collect()
}

/// Header values for a naming pattern, with those that come from the path (`stem`, `dir`).
fn with_path_values(
    c: &Candidate,
    mut v: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let stem = naming::mirror_base(&c.rel);
    v.insert(
        "stem".into(),
        stem.file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    v.insert(
        "dir".into(),
        c.rel
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    v
}

/// The trace label of a file's header part (`a/b.dcm header`), formatted only when drawn.
struct HeaderLabel<'a>(&'a std::path::Path);

impl std::fmt::Display for HeaderLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} header", Escaped(self.0))
    }
}

fn load_file(
    ctx: &Context,
    c: &Candidate,
    tx: &Sender<InFlight>,
    events: &Sender<Event>,
    clock: &StageClock,
    scratch: &mut Vec<u8>,
    wait: &mut SlotWait,
) {
    let t0 = Instant::now();
    let limits = DecodeLimits {
        max_frame_bytes: ctx.job.pipeline.max_frame_bytes,
        damaged: ctx.job.decode.damaged,
    };
    // The output name is the scan's unless a pattern still has to be filled in from the header.
    let naming = match (&c.base, &ctx.job.output.naming) {
        (None, Naming::Pattern(_)) => NamingValues::Read,
        _ => NamingValues::Skip,
    };
    let mut file = match ImageFile::open_with(&c.path, c.kind.clone(), limits, naming) {
        Ok(f) => f,
        Err(DecodeError::Skip(reason)) => {
            let _ = events.send(Event::Skipped {
                id: Some(c.id),
                path: c.path.clone(),
                reason,
            });
            return;
        }
        Err(DecodeError::Fail(reason)) => {
            let _ = send_failure(
                ctx,
                events,
                Event::FileFailed {
                    id: Some(c.id),
                    path: c.path.clone(),
                    stage: Stage::Decode,
                    reason,
                },
            );
            return;
        }
    };
    let info = file.info.clone();
    let selection = &ctx.job.render.frames;
    let selected = selection.count(info.frames);
    if selected == 0 {
        let _ = events.send(Event::Skipped {
            id: Some(c.id),
            path: c.path.clone(),
            reason: format!(
                "frames = \"{selection}\" selects none of its {} frame(s)",
                info.frames
            ),
        });
        return;
    }
    let outputs = output_paths(ctx, c, &info);
    let dicom = (ctx.job.output.format == OutputFormat::Dcm).then(|| {
        Arc::new(DicomSource {
            header: info.source.clone(),
            frames: info.frames,
            instance_number: info.instance_number,
            fingerprint: ctx
                .job
                .render
                .fingerprint(ctx.job.render.windows_for(&info)),
            path: c.rel.display().to_string(),
        })
    });
    let _ = events.send(Event::FileStarted {
        id: c.id,
        path: c.path.clone(),
        meta: FileMeta {
            frames: info.frames,
            frames_selected: selected,
            rows: info.rows,
            cols: info.cols,
            transfer_syntax: info.transfer_syntax.clone(),
            photometric: info.photometric.as_str().to_string(),
            series_uid: info.series_uid.clone(),
            instance_number: info.instance_number,
            image_position: info.image_position,
            direct_read: file.is_direct(),
            warnings: info.warnings.clone(),
        },
    });
    for w in &info.warnings {
        tracing::warn!(path = %c.path.display(), "{w}");
    }
    let frame_bytes = info.frame_bytes() as usize;
    // Compressed frames a GPU codec of the backend will decode stay compressed in the slot.
    let route = ctx.backend.gpu_route();
    let coding = FrameCoding::of(&info)
        .filter(|c| route.codec(c.codec))
        .map(std::sync::Arc::new);
    for (f, output) in outputs.into_iter().enumerate() {
        let frame = f as u32;
        if !selection.contains(frame, info.frames) {
            continue;
        }
        // The frame's busy time starts here (at the file's open for the first frame: its
        // header, output names and plan are work for this frame too).
        let t_frame = if f == 0 { t0 } else { Instant::now() };
        if ctx.cancel.load(Ordering::Relaxed) {
            let _ = events.send(Event::FrameCancelled { id: c.id, frame });
            continue;
        }
        let fail = |stage: Stage, reason: String| {
            let _ = send_failure(
                ctx,
                events,
                Event::FrameFailed {
                    id: c.id,
                    frame,
                    stage,
                    reason,
                },
            );
        };
        let claimed = if ctx.live {
            // No claims (see `assign_output`), but never over the input itself.
            ctx.outputs.not_the_input(&output, c.key)
        } else {
            ctx.outputs.claim(&output, info.frames, c.id, &c.path)
        };
        if let Err(reason) = claimed {
            fail(Stage::Write, reason);
            continue;
        }
        let planned = plan_frame(&info, frame, &ctx.job.render);
        if ctx.job.output.skip_existing || c.skip_existing {
            // The output the plan makes (operators change its size, window channels its
            // channels); the frame's own when the plan fails (which is reported below).
            let (cols, rows, channels) = match &planned {
                Ok(p) => (p.out_cols(), p.out_rows(), p.channels()),
                Err(_) => (
                    info.cols,
                    info.rows,
                    if info.photometric.is_gray() { 1 } else { 3 },
                ),
            };
            match check_existing(&output, ctx.job.output.format, cols, rows, channels) {
                Ok(()) => {
                    let _ = events.send(Event::FrameExisting {
                        id: c.id,
                        frame,
                        output,
                    });
                    continue;
                }
                Err(why) if output.symlink_metadata().is_ok() => {
                    tracing::info!(
                        "{}: rendered again: the existing output is not a finished image ({why})",
                        Escaped(&output)
                    );
                }
                Err(_) => {} // not there: rendered
            }
        }
        let mut plan = match planned {
            Ok(p) => p,
            Err(e) => {
                fail(Stage::Render, e.to_string());
                continue;
            }
        };
        // The operators may enlarge the image: its output is bounded like its input.
        if plan.output_bytes() as u64 > ctx.job.pipeline.max_frame_bytes {
            fail(
                Stage::Render,
                format!(
                    "the operators make a {}x{} output ({} MiB), above the limit of {} MiB \
                     (pipeline.max_frame_mib)",
                    plan.out_cols(),
                    plan.out_rows(),
                    plan.output_bytes() >> 20,
                    ctx.job.pipeline.max_frame_bytes >> 20
                ),
            );
            continue;
        }
        // Asked per frame: the frames of a large file go to the GPU once its codec started.
        let encoded = coding
            .as_ref()
            .filter(|c| gpu_starts(ctx, &file, c, route, scratch))
            .and_then(|c| encoded_frame(&file, c, frame, route, scratch));
        let input_bytes = frame_bytes.max(encoded.as_ref().map_or(0, |e| e.len));
        let t_wait = Instant::now();
        let Some(mut slot) = wait.take(ctx) else {
            fail(Stage::Decode, "slot ring closed".into());
            return;
        };
        let waited = t_wait.elapsed();
        if let Err(e) = slot.reserve(input_bytes, plan.output_capacity()) {
            ctx.pool.give_back(slot);
            fail(
                Stage::Decode,
                format!("cannot size a slot for this frame: {e}"),
            );
            continue;
        }
        let t_read = Instant::now();
        let started = if f == 0 { t0 } else { t_read };
        slot.on_device = None;
        let uploaded = match encoded {
            Some(_) => None,
            None => upload(ctx, &file, &plan, frame, frame_bytes, &slot),
        };
        if let Some(result) = uploaded {
            match result {
                Ok(on_device) => slot.on_device = Some(on_device),
                Err(reason) => {
                    ctx.pool.give_back(slot);
                    fail(Stage::Decode, reason);
                    continue;
                }
            }
        } else if let Some(e) = encoded {
            // The codestream is in `scratch` (encoded_frame above); the GPU decodes it.
            slot.input
                .bytes_mut(e.len)
                .copy_from_slice(&scratch[..e.len]);
            plan.encoded = Some(e);
        } else if let Err(reason) =
            file.read_frame(frame, slot.input.bytes_mut(frame_bytes), scratch)
        {
            ctx.pool.give_back(slot);
            fail(Stage::Decode, reason);
            continue;
        }
        if let Some(warning) = file.take_frame_warning() {
            let _ = events.send(Event::FrameWarning {
                id: c.id,
                frame,
                warning,
            });
        }
        let end = Instant::now();
        // The label travels with the frame, for the later stages' spans.
        let label = if clock.is_tracing() {
            format!("{}#{}", Escaped(&c.rel), frame + 1)
        } else {
            String::new()
        };
        // Busy time is everything this thread did for the frame but wait for a free slot
        // (that is backpressure, not decoding, and a shared thread finishes other frames
        // meanwhile, timed as theirs): the header parse, output names and plan, then the read.
        // The trace draws the first frame's header part and each frame's read.
        let header = HeaderLabel(&c.rel);
        let before_wait = Piece::new(t_frame, t_wait);
        let before_wait = if f == 0 {
            before_wait.traced(&header)
        } else {
            before_wait
        };
        let read = Piece::new(t_wait + waited, end).traced(&label);
        clock.record_pieces(StageId::ReadDecode, &[before_wait, read]);
        ctx.stats
            .totals
            .bytes_in
            .fetch_add(frame_bytes as u64, Ordering::Relaxed);
        let job = InFlight {
            slot,
            plan,
            id: c.id,
            frame,
            output,
            label,
            started,
            window: None,
            device: None,
            png_rows: false,
            encoded: None,
            dicom: dicom.clone(),
        };
        if let Err(crossbeam_channel::SendError(job)) = tx.send(job) {
            ctx.pool.give_back(job.slot);
            return;
        }
    }
}

/// Reads the frame straight into the memory of the GPU that will render it, when the backend
/// uploads such frames (`gpu.upload`, backend/cuda/upload.rs). `None`: read it into the slot
/// (not such a frame, or the upload failed on the GPU's side, which the uploader reports once);
/// `Some(Err)`: reading the file failed, as the slot's read would have.
fn upload(
    ctx: &Context,
    file: &ImageFile,
    plan: &FramePlan,
    frame: u32,
    frame_bytes: usize,
    slot: &Slot,
) -> Option<Result<u64, String>> {
    let uploader = ctx.backend.uploader()?;
    if !uploader.wants(plan, slot) {
        return None;
    }
    let (handle, offset) = file.plain_frame(frame)?;
    match uploader.upload(handle, offset, frame_bytes, slot) {
        Ok(on_device) => Some(Ok(on_device)),
        Err(UploadError::Read(e)) => Some(Err(format!(
            "reading {frame_bytes} bytes of pixel data: {e}"
        ))),
        Err(UploadError::Gpu(_)) => None,
    }
}

/// Whether a frame of `file`, coded as `coding` (which the route takes), goes to the GPU now;
/// while the codec starts it is decoded here, and the first such frame's file hands a copy of
/// its first frame to the backend, which the render workers start the library with
/// (backend/cuda/decode/start.rs).
fn gpu_starts(
    ctx: &Context,
    file: &ImageFile,
    coding: &std::sync::Arc<FrameCoding>,
    route: compressed::GpuRoute,
    scratch: &mut Vec<u8>,
) -> bool {
    match ctx.backend.gpu_start(coding.codec) {
        GpuStart::Now => true,
        GpuStart::Meanwhile { sample: false } => false,
        GpuStart::Meanwhile { sample: true } => {
            if let Some(frame) = encoded_frame(file, coding, 0, route, scratch) {
                let bytes = scratch.get(..frame.len).unwrap_or_default().to_vec();
                ctx.backend.gpu_sample(Sample { frame, bytes });
            }
            false
        }
    }
}

/// Reads frame `frame`'s codestream into `scratch` and returns its description when `route`
/// sends it to a GPU codec; `None` (the loader decodes it) for a frame whose header the codec
/// cannot take, a lossy one under `gpu.decode = "lossless"`, or one that cannot be read here
/// (the CPU decode then reports why).
fn encoded_frame(
    file: &ImageFile,
    coding: &std::sync::Arc<FrameCoding>,
    frame: u32,
    route: compressed::GpuRoute,
    scratch: &mut Vec<u8>,
) -> Option<EncodedFrame> {
    file.read_encoded_frame(frame, scratch).ok()?;
    let facts = compressed::inspect(coding, scratch);
    match route.accepts(coding.codec, &facts) {
        Ok(()) => Some(EncodedFrame {
            coding: coding.clone(),
            len: scratch.len(),
            lossless: facts.lossless,
        }),
        Err(why) => {
            tracing::debug!(
                "{} frame {}: decoded on the CPU: {why}",
                crate::paths::Escaped(&file.path),
                frame + 1
            );
            None
        }
    }
}

/// Renders `job` with `worker` and records its times (the writers' path when they render, and
/// a render worker's when one frame waits). On failure the frame is reported, its slot goes
/// back to the ring, and `None` is returned.
fn render_job(
    ctx: &Context,
    worker: &mut dyn RenderWorker,
    mut job: InFlight,
    clock: &StageClock,
    events: &Sender<Event>,
) -> Option<InFlight> {
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| worker.render(&job.plan, &mut job.slot)));
    let result = match result {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(panic_reason("rendering")),
    };
    rendered(ctx, job, result, (start, Instant::now()), clock, events)
}

/// Renders `jobs` (several: a worker that batches asked for them, [`RenderWorker::batch_size`])
/// in one call and records each frame's times; returns the frames rendered, in order. A
/// batch's frames share its wall-clock interval, inside which each one's measured parts are
/// laid end to end.
fn render_batch(
    ctx: &Context,
    worker: &mut dyn RenderWorker,
    mut jobs: Vec<InFlight>,
    clock: &StageClock,
    events: &Sender<Event>,
) -> Vec<InFlight> {
    let start = Instant::now();
    let results = catch_unwind(AssertUnwindSafe(|| {
        let mut frames: Vec<BatchFrame<'_>> = jobs
            .iter_mut()
            .map(|j| BatchFrame {
                plan: &j.plan,
                slot: &mut j.slot,
            })
            .collect();
        worker.render_batch(&mut frames)
    }));
    let interval = (start, Instant::now());
    let (mut results, panicked) = match results {
        Ok(r) => (r, false),
        Err(_) => (Vec::new(), true),
    };
    results.truncate(jobs.len());
    let mut outcomes = results.into_iter().map(|r| r.map_err(|e| e.to_string()));
    jobs.into_iter()
        .filter_map(|job| {
            let result = match outcomes.next() {
                Some(r) => r,
                None if panicked => Err(panic_reason("rendering")),
                None => Err("the render worker returned no outcome for this frame".to_string()),
            };
            rendered(ctx, job, result, interval, clock, events)
        })
        .collect()
}

/// Takes a frame's render result: records its times and fills in the outcome, or reports the
/// failure and gives its slot back (`None`).
fn rendered(
    ctx: &Context,
    mut job: InFlight,
    result: Result<crate::backend::RenderOutcome, String>,
    (start, end): (Instant, Instant),
    clock: &StageClock,
    events: &Sender<Event>,
) -> Option<InFlight> {
    match result {
        Ok(outcome) => {
            let t = outcome.timings;
            // GPU parts as measured by CUDA events, laid end to end in the worker's
            // wall-clock interval (the CPU backend has compute only).
            let parts = Parts {
                leading: &[
                    (StageId::TransferIn, t.transfer_in),
                    (StageId::GpuDecode, t.decode),
                ],
                middle: (StageId::Compute, t.compute),
                trailing: &[
                    (StageId::GpuEncode, t.encode),
                    (StageId::TransferOut, t.transfer_out),
                ],
            };
            clock.record_parts(&job.label, start, end, parts);
            job.window = outcome.window;
            job.device = outcome.device;
            job.png_rows = outcome.png_rows;
            job.encoded = outcome.encoded;
            Some(job)
        }
        Err(reason) => {
            let _ = send_failure(
                ctx,
                events,
                Event::FrameFailed {
                    id: job.id,
                    frame: job.frame,
                    stage: Stage::Render,
                    reason,
                },
            );
            ctx.pool.give_back(job.slot);
            None
        }
    }
}

/// A render worker thread: takes a frame, and with it as many as already wait in the queue up
/// to the worker's batch size. When the last batch was full (frames are queueing: the workers
/// are the bottleneck) and this one is not, it waits for more up to half the last call's
/// time: a call costs nearly as much for one frame as for sixteen (nvCOMP on the H200: 4.6
/// against 6.4 ms when eight workers compress at once), so a full batch a little later beats
/// a small one now. A quiet pipeline never waits, so it keeps its latency. When the loaders
/// are done, it gives the worker back (for [`Backend::retire`](crate::backend::Backend::retire)).
pub(crate) fn render_stage(
    ctx: &Context,
    mut worker: Box<dyn RenderWorker>,
    rx: Receiver<InFlight>,
    tx: Sender<InFlight>,
    events: Sender<Event>,
) -> Box<dyn RenderWorker> {
    let clock = StageClock::new(&ctx.stats, ctx.tracer.clone(), &RENDERING);
    let mut last = (false, Duration::ZERO);
    while let Ok(first) = rx.recv() {
        // Asked each time: a worker may batch some frames and not others.
        let batch = worker.batch_size().max(1);
        let mut jobs = Vec::with_capacity(batch);
        jobs.push(first);
        take_waiting(&rx, &mut jobs, batch, last);
        let full = jobs.len() == batch;
        let t0 = Instant::now();
        let done = if jobs.len() == 1 {
            jobs.pop()
                .and_then(|job| render_job(ctx, worker.as_mut(), job, &clock, &events))
                .into_iter()
                .collect()
        } else {
            render_batch(ctx, worker.as_mut(), jobs, &clock, &events)
        };
        for job in done {
            if let Err(crossbeam_channel::SendError(job)) = tx.send(job) {
                ctx.pool.give_back(job.slot);
            }
        }
        last = (full && batch > 1, t0.elapsed());
        worker.between_calls();
    }
    worker
}

/// Adds to `jobs` the frames waiting in `rx`, up to `batch`; when the last batch was full
/// (`last.0`), waits for more up to half its call time (`last.1`).
fn take_waiting<T>(rx: &Receiver<T>, jobs: &mut Vec<T>, batch: usize, last: (bool, Duration)) {
    while jobs.len() < batch {
        match rx.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    let (was_full, took) = last;
    if !was_full || jobs.len() >= batch {
        return;
    }
    let deadline = Instant::now() + took / 2;
    while jobs.len() < batch {
        match rx.recv_deadline(deadline) {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
}

/// Encodes and atomically writes each frame; with a `renderer`, renders it first (the frames
/// then come straight from the loaders).
pub(crate) fn write_stage(
    ctx: &Context,
    renderer: Option<Box<dyn RenderWorker>>,
    rx: Receiver<InFlight>,
    events: Sender<Event>,
) {
    let clock = finishing_clock(ctx, &[], renderer.is_some());
    let mut writer = Writer::new(ctx, renderer);
    for job in rx {
        writer.finish(ctx, &clock, job, &events);
    }
}

/// The clock of a thread that finishes frames: `also` (the shared layout's loading), the
/// render stages when it renders them itself, encode, write and the frames' latency.
fn finishing_clock(ctx: &Context, also: &[StageId], renders: bool) -> StageClock {
    let renders: &[StageId] = if renders { &RENDERING } else { &[] };
    let stages: Vec<StageId> = [also, renders, &FINISHING].concat();
    StageClock::new(&ctx.stats, ctx.tracer.clone(), &stages).with_latency(&ctx.stats)
}

/// What a thread needs to take a frame from its slot to its output file: the encoder, and a
/// renderer when the frames arrive unrendered.
struct Writer {
    encoder: ImageEncoder,
    renderer: Option<Box<dyn RenderWorker>>,
}

fn new_encoder(ctx: &Context) -> ImageEncoder {
    ImageEncoder::new(ctx.job.output.encode())
}

impl Writer {
    fn new(ctx: &Context, renderer: Option<Box<dyn RenderWorker>>) -> Writer {
        Writer {
            encoder: new_encoder(ctx),
            renderer,
        }
    }

    /// Renders `job` when this writer renders, encodes it, gives its slot back and writes the
    /// output atomically; reports the frame done or failed.
    fn finish(&mut self, ctx: &Context, clock: &StageClock, job: InFlight, events: &Sender<Event>) {
        let job = match self.renderer.as_mut() {
            Some(worker) => match render_job(ctx, worker.as_mut(), job, clock, events) {
                Some(job) => job,
                None => return,
            },
            None => job,
        };
        let InFlight {
            slot,
            plan,
            id,
            frame,
            output,
            label,
            started,
            window,
            device,
            png_rows,
            encoded: gpu_encoded,
            dicom,
        } = job;
        let t0 = Instant::now();
        let fail = |stage: Stage, reason: String| {
            let _ = send_failure(
                ctx,
                events,
                Event::FrameFailed {
                    id,
                    frame,
                    stage,
                    reason,
                },
            );
        };
        // The output is written: the frame is done, its latency measured at `t2`.
        let done = |output: PathBuf, bytes: u64, t2: Instant| {
            let _ = events.send(Event::FrameDone {
                id,
                frame,
                output,
                bytes,
                window,
                device,
                latency: clock.latency(started, t2),
            });
        };
        if let Some(e) = gpu_encoded {
            // Compressed on the GPU: the file is written straight from the output slot (a PNG
            // between its container's head and tail), with no copy of the bytes on the CPU.
            let (cols, rows, channels) = (plan.out_cols(), plan.out_rows(), plan.channels());
            let (offset, len) = match e {
                Encoded::PngZlib { offset, len } => (offset, len),
                Encoded::Jpeg { len } => (0, len),
            };
            let body = &slot.output.bytes(offset + len)[offset..];
            let around = match e {
                Encoded::PngZlib { .. } => self
                    .encoder
                    .png_around_zlib(cols, rows, channels, body)
                    .map(|(head, tail)| (head, Some(tail))),
                Encoded::Jpeg { .. } => Ok((&[][..], None)),
            };
            let written = match around {
                Err(e) => Err((Stage::Encode, e.to_string())),
                Ok((head, tail)) => {
                    let t1 = Instant::now();
                    clock.record(StageId::Encode, &label, t0, t1);
                    let tail = tail.as_ref().map_or(&[][..], |t| &t[..]);
                    let bytes = (head.len() + len + tail.len()) as u64;
                    ctx.files
                        .write_parts(&output, &[head, body, tail])
                        .map(|()| (t1, bytes))
                        .map_err(|e| (Stage::Write, format!("{}: {e}", Escaped(&output))))
                }
            };
            ctx.pool.give_back(slot);
            match written {
                Ok((t1, bytes)) => {
                    let t = &ctx.stats.totals;
                    t.gpu_encoded_frames.fetch_add(1, Ordering::Relaxed);
                    t.gpu_encoded_bytes.fetch_add(len as u64, Ordering::Relaxed);
                    let t2 = Instant::now();
                    clock.record(StageId::Write, &label, t1, t2);
                    done(output, bytes, t2);
                }
                Err((stage, reason)) => fail(stage, reason),
            }
            return;
        }
        let encoder = &mut self.encoder;
        let encoded = catch_unwind(AssertUnwindSafe(|| {
            let (cols, rows, channels) = (plan.out_cols(), plan.out_rows(), plan.channels());
            if png_rows {
                let filtered = slot.output.bytes(plan.output_capacity());
                encoder.encode_filtered(cols, rows, channels, filtered)
            } else if let Some(src) = &dicom {
                let pixels = slot.output.bytes(plan.output_bytes());
                let mut description = format!(
                    "Rendered to 8 bits by dicomflow {}: {}",
                    env!("CARGO_PKG_VERSION"),
                    plan.describe()
                );
                if let Some(w) = &window {
                    description.push_str(&format!(" (window applied {}/{})", w.center, w.width));
                }
                let derived = Derived {
                    source: &src.header,
                    frame,
                    frames: src.frames,
                    instance_number: src.instance_number,
                    description: &description,
                    fingerprint: &src.fingerprint,
                    fallback_id: &src.path,
                };
                encoder.encode_dicom(cols, rows, channels, pixels, &derived)
            } else {
                let pixels = slot.output.bytes(plan.output_bytes());
                encoder.encode(cols, rows, channels, pixels)
            }
            .map(|b| b.len())
        }));
        // The pixels are in the encoder's buffer now: the slot can take the next frame.
        ctx.pool.give_back(slot);
        match encoded {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                fail(Stage::Encode, e.to_string());
                return;
            }
            Err(_) => {
                self.encoder = new_encoder(ctx);
                fail(Stage::Encode, panic_reason("encoding"));
                return;
            }
        }
        let t1 = Instant::now();
        clock.record(StageId::Encode, &label, t0, t1);
        let bytes = self.encoder.last();
        if let Err(e) = ctx.files.write(&output, bytes) {
            fail(Stage::Write, format!("{}: {e}", Escaped(&output)));
            return;
        }
        let t2 = Instant::now();
        clock.record(StageId::Write, &label, t1, t2);
        done(output, bytes.len() as u64, t2);
    }
}

#[cfg(test)]
mod tests {
    use super::take_waiting;
    use std::time::{Duration, Instant};

    #[test]
    fn a_batch_takes_what_waits_and_no_more() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 1..=5 {
            tx.send(i).unwrap();
        }
        let mut jobs = vec![0];
        take_waiting(&rx, &mut jobs, 4, (false, Duration::from_secs(60)));
        assert_eq!(jobs, vec![0, 1, 2, 3]);
        // After a batch that was not full nothing is waited for, however long it took.
        let mut jobs = vec![40];
        let t = Instant::now();
        take_waiting(&rx, &mut jobs, 4, (false, Duration::from_secs(60)));
        assert_eq!(jobs, vec![40, 4, 5]);
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn after_a_full_batch_it_waits_for_more_until_full() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let sender = std::thread::spawn(move || {
            for i in 1..=3 {
                std::thread::sleep(Duration::from_millis(5));
                tx.send(i).unwrap();
            }
            // Keeps the channel open well past the batch.
            std::thread::sleep(Duration::from_millis(200));
        });
        let mut jobs = vec![0];
        let t = Instant::now();
        // Half of 60 s may be waited; the batch fills long before.
        take_waiting(&rx, &mut jobs, 4, (true, Duration::from_secs(60)));
        assert_eq!(jobs, vec![0, 1, 2, 3]);
        assert!(t.elapsed() < Duration::from_secs(10));
        sender.join().unwrap();
    }

    #[test]
    fn the_wait_ends_at_its_deadline_or_when_the_queue_closes() {
        let (tx, rx) = crossbeam_channel::unbounded::<u32>();
        let mut jobs = vec![0];
        let t = Instant::now();
        take_waiting(&rx, &mut jobs, 4, (true, Duration::from_millis(40)));
        assert_eq!(jobs, vec![0]);
        assert!(t.elapsed() >= Duration::from_millis(20));
        drop(tx);
        let t = Instant::now();
        take_waiting(&rx, &mut jobs, 4, (true, Duration::from_secs(60)));
        assert_eq!(jobs, vec![0]);
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
