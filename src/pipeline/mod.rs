//! The pipeline: scan → loaders → render workers → writers, connected by bounded channels,
//! with frames travelling in slots from a fixed ring. Every stage runs at once; a full
//! channel or an empty ring blocks the stage upstream (backpressure, never dropping data).
//! Each input frame ends as exactly one output or one reported error.
//!
//! Two layouts of the threads ([`Sizing::shared`]): a pool per stage, or (the default) one
//! pool of threads that each load frames and finish them, with the render workers, when the
//! backend has them, between their hand-offs.

pub mod events;
pub mod options;
mod outputs;
mod prepare;
mod stages;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::backend::Backend;
use crate::error::FatalError;
use crate::observe::cpu::ThreadMeter;
use crate::observe::stats::{Pool, Stats, ThreadLayout};
use crate::observe::trace::Tracer;
use crate::source::live::{Done, FeedReceiver};
use crate::source::{ListingAhead, Sources};
use options::{Job, Layout, PipelineOptions};

use crate::memory::SlotPool;
pub use events::{Collector, Event, FileRecord, FileStatus, RunResult};
pub use prepare::{first_file_slot_hint, output_wish, select_backend, select_backend_for};

/// Thread counts and ring depth actually used.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sizing {
    /// The shared layout: the `writers` threads also load (and `loaders` is 0).
    pub shared: bool,
    pub loaders: usize,
    /// Render worker threads; 0 = the writers render each frame before encoding it.
    pub workers: usize,
    /// Threads that encode and write (and load, in the shared layout).
    pub writers: usize,
    pub slots: usize,
}

impl Sizing {
    /// The options, with zeros replaced by defaults derived from the core count.
    pub fn of(opts: &PipelineOptions, backend: &dyn Backend) -> Sizing {
        Sizing::with_workers(opts, backend.default_workers()).with_frames_per_call(
            opts,
            backend.frames_per_call(),
            backend.ring_batches(),
            crate::host::available_cores(),
        )
    }

    /// Room in the ring for render workers that take `per_call` frames per call: each holds
    /// that many slots, and one more fills meanwhile (two per worker already counted), or its
    /// batches could never form; with `batches` 2, a whole second batch per worker waits
    /// loaded while the first is on the GPU. A slot count the user set stays.
    ///
    /// With `batches` 2 (the GPU compresses the PNG of small uncompressed frames) the workers
    /// sleep on their batches most of the time, so half of them are given back to the shared
    /// threads, within `cores`: on the H200 host four such workers were on a CPU 11–39 % of
    /// their lives (0.4–1.6 cores between them), and 14 shared threads beside them ran 512²
    /// series 1–32 % faster than 12 in five pairings (the shared threads, reading and writing
    /// files, bound those rows).
    fn with_frames_per_call(
        mut self,
        opts: &PipelineOptions,
        per_call: usize,
        batches: usize,
        cores: usize,
    ) -> Sizing {
        if opts.slots == 0 && per_call > 1 {
            self.slots += self.workers * (batches.max(1) * per_call - 1);
        }
        if self.shared && opts.writers == 0 && per_call > 1 && batches >= 2 {
            let writers = (self.writers + self.workers / 2)
                .min(cores)
                .max(self.writers);
            if opts.slots == 0 {
                self.slots += writers - self.writers;
            }
            self.writers = writers;
        }
        self
    }

    /// The options, with zeros replaced by defaults; `default_workers` when `workers` is 0 (which
    /// may itself be 0: the writers render).
    fn with_workers(opts: &PipelineOptions, default_workers: usize) -> Sizing {
        Sizing::on_cores(opts, default_workers, crate::host::available_cores())
    }

    /// [`with_workers`](Self::with_workers) on a machine of `cores` cores.
    fn on_cores(opts: &PipelineOptions, default_workers: usize, cores: usize) -> Sizing {
        let workers = if opts.workers > 0 {
            opts.workers
        } else {
            default_workers
        };
        let shared = match opts.layout {
            Layout::Shared => true,
            Layout::Stages => false,
            // Threads that load and finish frames beat a pool per stage: no thread waits for
            // work another stage's thread could have given it. H200 host, 1000 × 2000²:
            // pipeline −12 to −21 % beside the GPU, −6 % on the CPU backend; 4000 × 512² −9 to
            // −14 % / a tie; 2-core box −2 to −6 %. A loader count asks for stages.
            Layout::Auto => opts.loaders == 0,
        };
        // The threads that finish frames take the cores the other threads leave: beside
        // render workers (a GPU backend's workers spin on cores while their kernels run)
        // every loader and worker counts whole, and at least half the cores stay for writers.
        let finishing_threads = |others: usize| cores.saturating_sub(others).max(cores / 2).max(1);
        if shared {
            // Beside 2 render workers on 16 cores that is 14. On the H200 host 16 threads were
            // 2–8 % faster but left the 512² overlap figure at 1.20–1.24 (14: 1.11), and 12
            // were 11–18 % slower.
            let writers = if opts.writers > 0 {
                opts.writers
            } else {
                finishing_threads(workers)
            };
            // One slot per thread, two per render worker, and a little slack for the queue.
            let slots = if opts.slots > 0 {
                opts.slots
            } else {
                (writers + 2 * workers + 2).max(4)
            };
            return Sizing {
                shared,
                loaders: 0,
                workers,
                writers,
                slots,
            };
        }
        // Beside GPU render workers the writers only deflate rows the GPU has already
        // PNG-filtered, so reading and decoding is the larger share of the CPU work: 3/8 of the
        // cores load (6 of 16), a quarter otherwise. On the 16-core H200 host 4 loaders were
        // the busiest pool (86–98 %) once the GPU filtered; 6 loaders, 8 writers and 2 streams
        // ran 4000 × 512² in 0.142–0.175 s against 0.178–0.201 s with 4 / 12 / 4, with an
        // overlap figure of 1.08–1.11.
        let loaders = if opts.loaders > 0 {
            opts.loaders
        } else if workers > 0 {
            (3 * cores / 8).max(1)
        } else {
            (cores / 4).max(1)
        };
        // Beside render workers the writers get the cores left (8 on the H200 host: 6
        // loaders, 2 streams); when the writers render (the CPU backend), half a core per
        // loader (its loaders were 25–31 % busy at 512² and 62 % at 2000² on the H200), 14 on
        // 16 cores. More writers than cores left only wait runnable, and their frames with
        // them: at 4000 × 512², 16 writers beside the GPU ran as fast as 12 with an overlap
        // figure of 1.38 against 1.10, and on the CPU backend 16 against 14 gave 1.24 against
        // 1.11 at the same speed. On 2 cores: 1 loader, 2 writers (CPU) or 1 (GPU).
        let writers = if opts.writers > 0 {
            opts.writers
        } else if workers > 0 {
            finishing_threads(loaders + workers)
        } else {
            cores.saturating_sub(loaders / 2).max(1)
        };
        // One slot per busy thread, two per render worker (double buffering per stream), and a
        // little slack: more only lengthens queues, and so latency, without adding throughput.
        let slots = if opts.slots > 0 {
            opts.slots
        } else {
            (loaders + 2 * workers + writers + 2).max(4)
        };
        Sizing {
            shared,
            loaders,
            workers,
            writers,
            slots,
        }
    }
}

/// Shared, read-only context of the stage threads.
pub(crate) struct Context<'a> {
    pub job: &'a Job,
    /// Inputs arrive while the run goes on (no output claims: a name that arrives again is
    /// rendered again).
    pub live: bool,
    pub stats: Arc<Stats>,
    pub cancel: Arc<AtomicBool>,
    pub pool: SlotPool,
    pub outputs: outputs::Outputs,
    /// Writes the outputs (atomic, durable as `output.sync` says).
    pub files: crate::output::atomic::OutputFiles,
    pub tracer: Option<Arc<Tracer>>,
    /// Asked per file which compressed frames to leave compressed for the backend's GPU
    /// codecs (it can change during a run: the warm start turns it on when CUDA is ready).
    pub backend: Arc<dyn Backend>,
}

fn spawn_named<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    name: String,
    pool: Option<(Pool, &Arc<Stats>)>,
    f: Box<dyn FnOnce() + Send + 'scope>,
) -> Result<(), FatalError> {
    // A pool's thread reports its CPU time when it ends (observe::cpu): one system call per
    // thread, none per slice.
    let pool = pool.map(|(p, stats)| (p, stats.clone()));
    let body = move || {
        let meter = ThreadMeter::start();
        f();
        if let (Some((pool, stats)), Some(used)) = (pool, meter.finish()) {
            stats.record_thread_use(pool, used);
        }
    };
    std::thread::Builder::new()
        .name(name.clone())
        .spawn_scoped(s, body)
        .map(|_| ())
        .map_err(|e| FatalError::Other(format!("cannot start thread {name}: {e}")))
}

/// Makes the output folder of a run over `sources`, unless it is one of the input folders:
/// the pipeline does it first, and `run` before it starts the backend, so that the listing
/// made meanwhile ([`ListingAhead`]) leaves it out.
pub fn prepare_output_dir(job: &Job, sources: &Sources) -> Result<(), FatalError> {
    check_output_dir(&job.output.dir, &sources.roots())?;
    create_output_dir(job)
}

fn create_output_dir(job: &Job) -> Result<(), FatalError> {
    std::fs::create_dir_all(&job.output.dir).map_err(|source| FatalError::OutputDir {
        path: job.output.dir.clone(),
        source,
    })
}

/// Refuses an output folder that is one of the input folders: the outputs would be mixed with
/// the inputs, and the scan (which never enters the output folder) would find nothing. An
/// output folder inside an input folder is fine: the scan lists it as skipped.
fn check_output_dir(out: &std::path::Path, inputs: &[PathBuf]) -> Result<(), FatalError> {
    let Ok(out_meta) = std::fs::metadata(out) else {
        return Ok(()); // not there yet: no input can be it
    };
    let key = crate::source::key_of(&out_meta);
    for input in inputs {
        match std::fs::metadata(input) {
            Ok(m) if m.is_dir() && crate::source::key_of(&m) == key => {
                return Err(FatalError::Config(format!(
                    "the output folder {} is the input folder {}: the outputs would be mixed \
                     with the inputs; choose another output folder (-o)",
                    crate::paths::Escaped(out),
                    crate::paths::Escaped(input)
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where a run's inputs come from.
enum Inputs<'a> {
    /// Files and folders walked once (all, a shard, or a manifest's shard), perhaps listed
    /// already.
    Sources(&'a Sources, Option<ListingAhead>),
    /// Inputs that arrive while the run goes on; each one's outcome goes to `done`.
    Live {
        feed: &'a FeedReceiver,
        done: crossbeam_channel::Sender<Done>,
    },
}

/// What the scan stage reads.
enum Scan<'a> {
    Walk(&'a Sources, Option<ListingAhead>),
    Feed(&'a FeedReceiver),
}

/// Processes inputs as they arrive from `feed` until it ends (its sources stopped and every
/// input is done), sending each one's outcome on `done` as soon as its outputs are written.
/// The result lists only failed files (the first ones); its totals count every file.
pub fn run_live(
    job: &Job,
    feed: &FeedReceiver,
    done: crossbeam_channel::Sender<Done>,
    backend: Arc<dyn Backend>,
    stats: Arc<Stats>,
    cancel: Arc<AtomicBool>,
    tracer: Option<Arc<Tracer>>,
) -> Result<RunResult, FatalError> {
    let inputs = Inputs::Live { feed, done };
    run_inputs(job, inputs, backend, stats, cancel, tracer)
}

/// Processes `inputs` with `backend` and returns what happened to every file.
/// `cancel` stops loading new frames (in-flight frames are finished, nothing partial is left).
pub fn run(
    job: &Job,
    inputs: &[PathBuf],
    backend: Arc<dyn Backend>,
    stats: Arc<Stats>,
    cancel: Arc<AtomicBool>,
    tracer: Option<Arc<Tracer>>,
) -> Result<RunResult, FatalError> {
    let sources = Sources::walk(inputs);
    run_sources(job, &sources, None, backend, stats, cancel, tracer)
}

/// [`run`] over `sources`: every file under some inputs, one shard of them, or one shard of a
/// manifest. `ahead`: their listing, started before the backend (see [`prepare_output_dir`]).
pub fn run_sources(
    job: &Job,
    sources: &Sources,
    ahead: Option<ListingAhead>,
    backend: Arc<dyn Backend>,
    stats: Arc<Stats>,
    cancel: Arc<AtomicBool>,
    tracer: Option<Arc<Tracer>>,
) -> Result<RunResult, FatalError> {
    run_inputs(
        job,
        Inputs::Sources(sources, ahead),
        backend,
        stats,
        cancel,
        tracer,
    )
}

fn run_inputs(
    job: &Job,
    inputs: Inputs,
    backend: Arc<dyn Backend>,
    stats: Arc<Stats>,
    cancel: Arc<AtomicBool>,
    tracer: Option<Arc<Tracer>>,
) -> Result<RunResult, FatalError> {
    let started = Instant::now();
    let sizing = Sizing::of(&job.pipeline, backend.as_ref());
    if sizing.shared && job.pipeline.loaders > 0 {
        tracing::warn!(
            "pipeline.loaders = {} is not used: in the shared layout the writer threads load",
            job.pipeline.loaders
        );
    }
    // An output folder that is missing or empty now holds only what this run writes.
    let empty_at_start = std::fs::read_dir(&job.output.dir)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or_else(|e| e.kind() == std::io::ErrorKind::NotFound);
    match &inputs {
        Inputs::Sources(sources, _) => prepare_output_dir(job, sources)?,
        Inputs::Live { .. } => create_output_dir(job)?,
    }
    let pool = SlotPool::new(sizing.slots, 0, 0, backend.allocator())
        .map_err(|e| FatalError::Other(format!("cannot allocate the slot ring: {e}")))?;
    backend.attach_stats(stats.clone());
    let info = backend.info();
    stats.set_backend(format!(
        "{}{}",
        info.name,
        if info.transfer == "none" {
            String::new()
        } else {
            format!(" ({})", info.transfer)
        }
    ));
    tracing::info!(
        backend = %info.name, devices = ?info.devices, transfer = %info.transfer, reason = %info.reason,
        shared = sizing.shared, loaders = sizing.loaders, workers = sizing.workers, writers = sizing.writers, slots = sizing.slots,
        "pipeline starting"
    );

    // Without render workers every writer renders its frames with a worker of its own.
    let render_on_writers = sizing.workers == 0;
    stats.set_layout(ThreadLayout {
        render_on_writers,
        shared: sizing.shared,
    });
    let mut writer_renderers = Vec::with_capacity(sizing.writers);
    for i in 0..sizing.writers {
        writer_renderers.push(if render_on_writers {
            Some(backend.worker(i).map_err(|e| {
                FatalError::Backend(format!("cannot start the renderer of writer {i}: {e}"))
            })?)
        } else {
            None
        });
    }

    // Render workers are made on their own threads, beside the scan and the loaders' first
    // files: made one after the other before the scan started, their streams, events and
    // kernels put 0.8 ms before a 4000 × 512² run's first file on the H200 (session 33). One
    // that cannot start fails the run, as it did then, through `worker_failed`.
    let worker_failed: std::sync::Mutex<Option<FatalError>> = std::sync::Mutex::new(None);
    let workers_made = std::sync::atomic::AtomicUsize::new(0);

    let (scan_tx, scan_rx) = crossbeam_channel::bounded(256);
    let (load_tx, load_rx) = crossbeam_channel::bounded(sizing.slots);
    let (done_tx, done_rx) = crossbeam_channel::bounded(sizing.slots);
    let (event_tx, event_rx) = crossbeam_channel::unbounded();

    {
        let (a, b, c) = (scan_rx.clone(), load_rx.clone(), done_rx.clone());
        stats.add_gauge(
            "scan → load",
            Box::new(move || (a.len(), a.capacity().unwrap_or(0))),
        );
        if render_on_writers {
            stats.add_gauge(
                "load → write",
                Box::new(move || (b.len(), b.capacity().unwrap_or(0))),
            );
        } else {
            stats.add_gauge(
                "load → render",
                Box::new(move || (b.len(), b.capacity().unwrap_or(0))),
            );
            stats.add_gauge(
                "render → write",
                Box::new(move || (c.len(), c.capacity().unwrap_or(0))),
            );
        }
        let p = pool.clone();
        stats.add_gauge(
            "slots in flight",
            Box::new(move || (p.count() - p.free(), p.count())),
        );
    }

    let ctx = Context {
        job,
        stats: stats.clone(),
        cancel: cancel.clone(),
        pool: pool.clone(),
        outputs: outputs::Outputs::default(),
        files: crate::output::atomic::OutputFiles::new(job.output.sync),
        tracer,
        backend: backend.clone(),
        live: matches!(inputs, Inputs::Live { .. }),
    };

    if empty_at_start {
        ctx.outputs.set_empty_at_start(job.output.dir.clone());
    }
    let mut collector = Collector::new(job.pipeline.fail_fast, cancel.clone(), stats.clone())
        .shown_as(job.pipeline.shown_as.clone());
    // What the scan stage reads; a live run's outcomes go to `done` from the collector.
    let scan = match inputs {
        Inputs::Sources(sources, ahead) => Scan::Walk(sources, ahead),
        Inputs::Live { feed, done } => {
            collector = collector.live(done);
            Scan::Feed(feed)
        }
    };
    std::thread::scope(|s| -> Result<(), FatalError> {
        let event_tx = event_tx;
        let ctx = &ctx;
        // Temporaries of the named-file fallback that a killed run left behind.
        spawn_named(
            s,
            "cleanup".into(),
            None,
            Box::new(|| {
                let n = crate::output::atomic::remove_leftovers(&job.output.dir);
                if n > 0 {
                    tracing::info!("removed {n} temporary file(s) left by an earlier run");
                }
            }),
        )?;
        spawn_named(s, "scan".into(), Some((Pool::Scan, &stats)), {
            let ev = event_tx.clone();
            match scan {
                Scan::Walk(sources, ahead) => {
                    Box::new(move || stages::scan_stage(ctx, sources, ahead, scan_tx, ev))
                }
                Scan::Feed(feed) => {
                    Box::new(move || stages::live_scan_stage(ctx, feed, scan_tx, ev))
                }
            }
        })?;
        for i in 0..sizing.loaders {
            let (rx, tx, ev) = (scan_rx.clone(), load_tx.clone(), event_tx.clone());
            spawn_named(
                s,
                format!("load-{i}"),
                Some((Pool::Loaders, &stats)),
                Box::new(move || stages::load_stage(ctx, rx, tx, ev)),
            )?;
        }
        // The shared layout's threads load too: they keep the scan's receiver and a sender of
        // loaded frames until the scan is done.
        let shared_loading = sizing.shared.then_some((scan_rx, load_tx));
        for i in 0..sizing.workers {
            let (rx, tx, ev) = (load_rx.clone(), done_tx.clone(), event_tx.clone());
            let (backend, worker_failed, workers_made) = (&backend, &worker_failed, &workers_made);
            spawn_named(
                s,
                format!("render-{i}"),
                Some((Pool::RenderWorkers, &stats)),
                Box::new(move || {
                    let worker = match backend.worker(i) {
                        Ok(worker) => worker,
                        Err(e) => {
                            let mut failed =
                                worker_failed.lock().unwrap_or_else(|e| e.into_inner());
                            failed.get_or_insert_with(|| {
                                FatalError::Backend(format!("cannot start render worker {i}: {e}"))
                            });
                            // Nothing more is loaded; what was is rendered by the others.
                            ctx.cancel.store(true, Ordering::Relaxed);
                            return;
                        }
                    };
                    if workers_made.fetch_add(1, Ordering::Relaxed) + 1 == sizing.workers {
                        tracing::info!(
                            "render workers ready {:.1} ms after the pipeline started",
                            started.elapsed().as_secs_f64() * 1e3
                        );
                    }
                    let worker = stages::render_stage(ctx, worker, rx, tx, ev);
                    backend.retire(worker);
                }),
            )?;
        }
        // The writers take rendered frames, or loaded ones when they render them themselves.
        let writer_rx = if render_on_writers {
            load_rx
        } else {
            drop(load_rx);
            done_rx
        };
        drop(done_tx);
        for (i, renderer) in writer_renderers.into_iter().enumerate() {
            let (rx, ev) = (writer_rx.clone(), event_tx.clone());
            match &shared_loading {
                Some((scan, loaded)) => {
                    let (scan, loaded) = (scan.clone(), loaded.clone());
                    spawn_named(
                        s,
                        format!("work-{i}"),
                        Some((Pool::Shared, &stats)),
                        Box::new(move || stages::shared_stage(ctx, renderer, scan, loaded, rx, ev)),
                    )?
                }
                None => spawn_named(
                    s,
                    format!("write-{i}"),
                    Some((Pool::Writers, &stats)),
                    Box::new(move || stages::write_stage(ctx, renderer, rx, ev)),
                )?,
            }
        }
        drop((writer_rx, shared_loading));
        drop(event_tx);
        // Every stage holds a sender clone: the loop ends when the last stage has finished.
        for event in event_rx.iter() {
            collector.handle(event);
        }
        Ok(())
    })?;
    if let Some(e) = worker_failed
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
    {
        return Err(e);
    }
    // The last frame is done: the statistics' clock stops here.
    stats.set_finished();
    // What the run wrote, on the disk before anyone is told it is done.
    if let Err(e) = ctx.files.finish(&job.output.dir) {
        tracing::warn!(
            "syncing the outputs in {} to the disk: {e}",
            crate::paths::Escaped(&job.output.dir)
        );
    }
    // Final GPU figures, and the backend's description after the run (e.g. the strategy
    // that `transfer = auto` measured and chose).
    backend.finish();
    Ok(collector.finish(
        backend.info(),
        sizing,
        started.elapsed(),
        pool.bytes_in_use(),
        pool.memory_kind(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_leave_the_loaders_their_cores() {
        let with = |layout: Layout| PipelineOptions {
            layout,
            ..PipelineOptions::default()
        };
        let sizes = |opts: &PipelineOptions, workers: usize, cores: usize| {
            let z = Sizing::on_cores(opts, workers, cores);
            (z.shared, z.loaders, z.workers, z.writers, z.slots)
        };
        let (auto, stages, shared) = (
            PipelineOptions::default(),
            with(Layout::Stages),
            with(Layout::Shared),
        );
        // Shared by default. The CPU backend (its writers render): one thread per core loads
        // and finishes.
        assert_eq!(sizes(&auto, 0, 16), (true, 0, 0, 16, 18));
        assert_eq!(sizes(&auto, 0, 2), (true, 0, 0, 2, 4));
        // Beside GPU render workers (2 streams): the cores the workers leave, at least half.
        assert_eq!(sizes(&auto, 2, 16), (true, 0, 2, 14, 20));
        assert_eq!(sizes(&auto, 4, 4), (true, 0, 4, 2, 12));
        // Workers that batch 8 frames per call (GPU PNG) hold 9 slots each: 8 workers beside
        // 8 writers, 8 + 2 × 8 + 2 slots and 7 more per worker.
        let batched = Sizing::on_cores(&auto, 8, 16).with_frames_per_call(&auto, 8, 1, 16);
        assert_eq!(batched.slots, 8 + 2 * 8 + 2 + 8 * 7);
        assert_eq!(batched.writers, 8);
        // Room for two batches (small frames the GPU compresses): 4 workers of 16, which
        // mostly sleep, beside 12 + 2 threads, 14 + 2 × 4 + 2 slots and 31 more per worker.
        let two = Sizing::on_cores(&auto, 4, 16).with_frames_per_call(&auto, 16, 2, 16);
        assert_eq!(two.writers, 14);
        assert_eq!(two.slots, 14 + 2 * 4 + 2 + 4 * 31);
        // Never more threads than cores; a count the user set stays.
        let small = Sizing::on_cores(&auto, 4, 4).with_frames_per_call(&auto, 16, 2, 4);
        assert_eq!(small.writers, 4);
        let writers = PipelineOptions {
            writers: 12,
            ..PipelineOptions::default()
        };
        let kept = Sizing::on_cores(&writers, 4, 16).with_frames_per_call(&writers, 16, 2, 16);
        assert_eq!(kept.writers, 12);
        let set = PipelineOptions {
            slots: 30,
            ..PipelineOptions::default()
        };
        assert_eq!(
            Sizing::on_cores(&set, 8, 16)
                .with_frames_per_call(&set, 8, 1, 16)
                .slots,
            30
        );
        // In stages, a quarter of the cores load, the writers get the rest less half a core
        // per loader.
        assert_eq!(sizes(&stages, 0, 16), (false, 4, 0, 14, 20));
        assert_eq!(sizes(&stages, 0, 2), (false, 1, 0, 2, 5));
        // Stages beside GPU render workers: 3/8 of the cores load, the writers take the rest,
        // at least half the cores.
        assert_eq!(sizes(&stages, 2, 16), (false, 6, 2, 8, 20));
        assert_eq!(sizes(&stages, 4, 32), (false, 12, 4, 16, 38));
        assert_eq!(sizes(&stages, 2, 4), (false, 1, 2, 2, 9));
        assert_eq!(sizes(&stages, 2, 2), (false, 1, 2, 1, 8));
        assert_eq!(sizes(&shared, 2, 2), (true, 0, 2, 1, 7));
        // An explicit count is taken as it is, and a loader count keeps `auto` in stages.
        let fixed = PipelineOptions {
            loaders: 3,
            writers: 7,
            ..PipelineOptions::default()
        };
        assert_eq!(sizes(&fixed, 4, 16), (false, 3, 4, 7, 20));
        assert_eq!(sizes(&fixed, 0, 16), (false, 3, 0, 7, 12));
    }

    #[test]
    fn pause_holds_loading_in_every_layout_and_resume_finishes_the_run() {
        let dir = crate::scratch_dir("pause");
        let input = dir.join("in");
        let opts = crate::synth::SynthOptions {
            size: 64,
            slices: 24,
            ..Default::default()
        };
        crate::synth::write_series(&input, &opts).unwrap();
        for layout in [Layout::Shared, Layout::Stages] {
            let job = Job {
                pipeline: PipelineOptions {
                    layout,
                    writers: 2,
                    ..PipelineOptions::default()
                },
                output: crate::output::options::OutputOptions {
                    dir: dir.join(format!("out-{layout:?}")),
                    ..Default::default()
                },
                ..Job::default()
            };
            let stats = Stats::new();
            stats.set_paused(true);
            let cancel = Arc::new(AtomicBool::new(false));
            let backend: Arc<dyn Backend> = Arc::new(crate::backend::cpu::CpuBackend::new("test"));
            let result = std::thread::scope(|s| {
                let run = s.spawn(|| {
                    run(
                        &job,
                        std::slice::from_ref(&input),
                        backend,
                        stats.clone(),
                        cancel,
                        None,
                    )
                });
                std::thread::sleep(std::time::Duration::from_millis(300));
                assert_eq!(
                    stats.snapshot().frames_done,
                    0,
                    "{layout:?} loaded while paused"
                );
                stats.set_paused(false);
                run.join().unwrap()
            })
            .unwrap();
            assert_eq!(result.totals.frames_written, 24, "{layout:?}");
            assert_eq!(result.sizing.shared, layout == Layout::Shared);
            assert_eq!(result.exit_code(), 0);

            // Nothing to load: the run ends although loading is paused.
            let empty = dir.join("no-images");
            std::fs::create_dir_all(&empty).unwrap();
            std::fs::write(empty.join("notes.txt"), b"not DICOM").unwrap();
            let stats = Stats::new();
            stats.set_paused(true);
            let backend: Arc<dyn Backend> = Arc::new(crate::backend::cpu::CpuBackend::new("test"));
            let (done_tx, done_rx) = crossbeam_channel::bounded(1);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let r = run(
                        &job,
                        std::slice::from_ref(&empty),
                        backend,
                        stats.clone(),
                        Arc::new(AtomicBool::new(false)),
                        None,
                    );
                    let _ = done_tx.send(r.map(|r| r.totals.files_skipped));
                });
                let ended = done_rx.recv_timeout(std::time::Duration::from_secs(10));
                stats.set_paused(false); // lets a stuck run end, so the test can fail cleanly
                assert!(
                    matches!(ended, Ok(Ok(1))),
                    "{layout:?}: a paused run with nothing to load did not end"
                );
            });
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A backend standing in for the CUDA backend with a GPU encoder: it renders on the CPU,
    /// then "encodes on the device" with other encoders (flate2's gzip member rewritten to zlib
    /// as `kernels/zlib.cu` does; the `image` crate's JPEG), leaving compressed bytes in the
    /// slot as the CUDA worker does, and every third PNG frame as filtered rows (the fallback).
    struct EncodingBackend {
        format: crate::output::options::OutputFormat,
        /// Frames rendered by all workers (every third falls back).
        frames: Arc<std::sync::atomic::AtomicUsize>,
    }

    struct EncodingWorker {
        format: crate::output::options::OutputFormat,
        cpu: crate::backend::cpu::CpuRenderer,
        frames: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Backend for EncodingBackend {
        fn info(&self) -> crate::backend::BackendInfo {
            crate::backend::BackendInfo {
                name: "test-gpu".into(),
                devices: vec![],
                transfer: "none".into(),
                reason: "test".into(),
                decode: vec![],
                encoder: "gpu: test".into(),
                encoder_reason: "test".into(),
            }
        }
        fn allocator(&self) -> Arc<dyn crate::memory::HostAllocator> {
            Arc::new(crate::memory::HeapAllocator::default())
        }
        fn worker(
            &self,
            _index: usize,
        ) -> Result<Box<dyn crate::backend::RenderWorker>, crate::backend::BackendError> {
            Ok(Box::new(EncodingWorker {
                format: self.format,
                cpu: Default::default(),
                frames: self.frames.clone(),
            }))
        }
        fn default_workers(&self) -> usize {
            2
        }
    }

    impl crate::backend::RenderWorker for EncodingWorker {
        fn render(
            &mut self,
            plan: &crate::render::plan::FramePlan,
            slot: &mut crate::memory::Slot,
        ) -> Result<crate::backend::RenderOutcome, crate::backend::RenderError> {
            use crate::backend::Encoded;
            use crate::output::options::{OutputFormat, PngFilter};
            use std::io::Write;
            let mut pixels = vec![0u8; plan.output_bytes()];
            let input = slot.input.bytes(plan.input_bytes()).to_vec();
            let window = self.cpu.render_bytes(plan, &input, &mut pixels)?;
            let (w, h, ch) = (plan.cols, plan.rows, plan.channels());
            let cap = plan.output_capacity();
            let n = 1 + self
                .frames
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut outcome = crate::backend::RenderOutcome {
                window,
                timings: crate::backend::RenderTimings {
                    compute: std::time::Duration::from_micros(50),
                    encode: std::time::Duration::from_micros(70),
                    ..Default::default()
                },
                ..Default::default()
            };
            match self.format {
                OutputFormat::Png => {
                    let mut rows = Vec::new();
                    crate::output::png::filter_rows(
                        PngFilter::Adaptive,
                        &pixels,
                        w as usize * ch,
                        ch,
                        &mut rows,
                    );
                    if n.is_multiple_of(3) {
                        slot.output.bytes_mut(cap).copy_from_slice(&rows);
                        outcome.png_rows = true;
                        outcome.timings.encode = std::time::Duration::ZERO;
                        return Ok(outcome);
                    }
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    e.write_all(&rows).unwrap();
                    let member = e.finish().unwrap();
                    let adler = crate::output::zlib::adler32(&rows);
                    let mut z = Vec::new();
                    crate::output::zlib::zlib_from_gzip(
                        &member,
                        rows.len() as u64,
                        adler,
                        0,
                        &mut z,
                    )
                    .unwrap();
                    let out = slot.output.bytes_mut(8 + z.len());
                    out[..8].copy_from_slice(&(z.len() as u64).to_le_bytes());
                    out[8..].copy_from_slice(&z);
                    outcome.encoded = Some(Encoded::PngZlib {
                        offset: 8,
                        len: z.len(),
                    });
                }
                _ => {
                    let mut jpeg = Vec::new();
                    let color = if ch == 1 {
                        image::ExtendedColorType::L8
                    } else {
                        image::ExtendedColorType::Rgb8
                    };
                    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
                        .encode(&pixels, w, h, color)
                        .unwrap();
                    slot.output.bytes_mut(jpeg.len()).copy_from_slice(&jpeg);
                    outcome.encoded = Some(Encoded::Jpeg { len: jpeg.len() });
                }
            }
            Ok(outcome)
        }
    }

    #[test]
    fn writers_wrap_what_a_gpu_encoder_left_in_the_slot() {
        use crate::observe::stats::StageId;
        use crate::output::options::{OutputFormat, OutputOptions};
        let dir = crate::scratch_dir("gpu-encoded");
        let input = dir.join("in");
        let opts = crate::synth::SynthOptions {
            size: 96,
            slices: 9,
            ..Default::default()
        };
        crate::synth::write_series(&input, &opts).unwrap();
        let run_with = |backend: Arc<dyn Backend>, format: OutputFormat, out: &str| {
            let job = Job {
                pipeline: PipelineOptions {
                    layout: Layout::Stages,
                    loaders: 1,
                    writers: 2,
                    ..PipelineOptions::default()
                },
                output: OutputOptions {
                    dir: dir.join(out),
                    format,
                    ..Default::default()
                },
                ..Job::default()
            };
            let stats = Stats::new();
            let result = run(
                &job,
                std::slice::from_ref(&input),
                backend,
                stats.clone(),
                Arc::new(AtomicBool::new(false)),
                None,
            )
            .unwrap();
            assert_eq!(result.exit_code(), 0);
            (result, stats.snapshot())
        };
        let decoded = |out: &str, ext: &str| -> Vec<Vec<u8>> {
            let mut files: Vec<_> = std::fs::read_dir(dir.join(out))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect();
            files.sort();
            files
                .iter()
                .map(|p| image::open(p).unwrap().into_bytes())
                .collect()
        };
        let cpu: Arc<dyn Backend> = Arc::new(crate::backend::cpu::CpuBackend::new("test"));
        run_with(cpu, OutputFormat::Png, "cpu");
        let gpu: Arc<dyn Backend> = Arc::new(EncodingBackend {
            format: OutputFormat::Png,
            frames: Default::default(),
        });
        let (result, snap) = run_with(gpu, OutputFormat::Png, "gpu");
        assert_eq!(result.backend.encoder, "gpu: test");
        assert_eq!(result.totals.frames_written, 9);
        // Every third frame (of all workers) fell back to filtered rows: the writers deflated
        // those.
        assert_eq!(snap.gpu_encoded_frames, 6);
        assert!(snap.gpu_encoded_bytes > 0);
        assert_eq!(snap.stages[StageId::GpuEncode as usize].count, 6);
        let (a, b) = (decoded("cpu", "png"), decoded("gpu", "png"));
        assert_eq!(a.len(), 9);
        assert_eq!(a, b, "pixels of GPU-encoded PNGs differ from the CPU's");

        let jpeg: Arc<dyn Backend> = Arc::new(EncodingBackend {
            format: OutputFormat::Jpeg,
            frames: Default::default(),
        });
        let (_, snap) = run_with(jpeg, OutputFormat::Jpeg, "jpeg");
        assert_eq!(snap.gpu_encoded_frames, 9);
        assert_eq!(decoded("jpeg", "jpg").len(), 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Render workers that start on their own threads, one of which cannot.
    struct FailingBackend {
        inner: EncodingBackend,
        retired: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Backend for FailingBackend {
        fn info(&self) -> crate::backend::BackendInfo {
            self.inner.info()
        }
        fn allocator(&self) -> Arc<dyn crate::memory::HostAllocator> {
            self.inner.allocator()
        }
        fn worker(
            &self,
            index: usize,
        ) -> Result<Box<dyn crate::backend::RenderWorker>, crate::backend::BackendError> {
            if index == 1 {
                return Err(crate::backend::BackendError::Unavailable(
                    "out of streams".into(),
                ));
            }
            self.inner.worker(index)
        }
        fn default_workers(&self) -> usize {
            2
        }
        fn retire(&self, worker: Box<dyn crate::backend::RenderWorker>) {
            self.retired
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(worker);
        }
    }

    #[test]
    fn a_render_worker_that_cannot_start_fails_the_run_and_the_others_are_retired() {
        use crate::output::options::{OutputFormat, OutputOptions};
        let dir = crate::scratch_dir("worker-fails");
        let input = dir.join("in");
        let opts = crate::synth::SynthOptions {
            size: 64,
            slices: 40,
            ..Default::default()
        };
        crate::synth::write_series(&input, &opts).unwrap();
        for layout in [Layout::Shared, Layout::Stages] {
            let retired = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let backend: Arc<dyn Backend> = Arc::new(FailingBackend {
                inner: EncodingBackend {
                    format: OutputFormat::Png,
                    frames: Default::default(),
                },
                retired: retired.clone(),
            });
            let job = Job {
                pipeline: PipelineOptions {
                    layout,
                    loaders: if layout == Layout::Stages { 1 } else { 0 },
                    writers: 2,
                    ..PipelineOptions::default()
                },
                output: OutputOptions {
                    dir: dir.join(format!("{layout:?}")),
                    format: OutputFormat::Png,
                    ..Default::default()
                },
                ..Job::default()
            };
            let ended = run(
                &job,
                std::slice::from_ref(&input),
                backend,
                Stats::new(),
                Arc::new(AtomicBool::new(false)),
                None,
            );
            match ended {
                Err(FatalError::Backend(why)) => assert_eq!(
                    why, "cannot start render worker 1: out of streams",
                    "{layout:?}"
                ),
                other => panic!("{layout:?}: {:?}", other.map(|r| r.exit_code())),
            }
            // The worker that started was handed back when its thread ended.
            assert_eq!(retired.load(std::sync::atomic::Ordering::Relaxed), 1);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
