//! What the user sees while a run goes on: the live dashboard (ratatui + crossterm) when
//! stderr is a terminal, a one-line progress otherwise, nothing with `-q`.
//!
//! Thread model (after bottom: collection → app state → drawing). The pipeline runs on its own
//! thread ("pipeline") and publishes into [`Stats`] without waiting on readers. The calling
//! thread is the display thread: at each tick (settings `dashboard.tick_ms`, default 100 ms,
//! independent of stage speed) it takes `stats.snapshot()`, folds it into [`app::App`] and
//! draws ([`draw::draw`], a pure function of the app). Keys are read by a small "keys" thread
//! (crossterm `poll`/`read`) and sent over a channel; the display thread waits on that channel,
//! on the pipeline's completion and on the next tick at once, so the end of the run is noticed
//! immediately (no tick of delay). The terminal is restored by a guard (normal end and
//! errors) and by a panic hook; the summary is printed by the caller afterwards.

pub mod app;
pub mod draw;
pub mod logsink;
pub mod progress;
pub mod term;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::app::config::TuiMode;
use dicomflow::error::FatalError;
use dicomflow::observe::stats::{GaugeSnapshot, Stats};
use dicomflow::observe::trace::Tracer;
use dicomflow::source::live::LiveStats;

pub use logsink::LogSink;

/// How the run is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// The live dashboard on stderr.
    Tui,
    /// One progress line: an indicatif bar on a terminal, a plain line every second otherwise.
    Progress { tty: bool },
    /// Nothing (`-q`).
    Quiet,
}

impl Display {
    /// `--tui` forces the dashboard (even with `-q`); `--no-tui` gives the progress line (or
    /// nothing with `-q`); otherwise the dashboard when stderr is a terminal and not `-q`.
    pub fn choose(mode: TuiMode, quiet: bool, stderr_tty: bool) -> Display {
        match mode {
            TuiMode::On => Display::Tui,
            _ if quiet => Display::Quiet,
            TuiMode::Auto if stderr_tty => Display::Tui,
            _ => Display::Progress { tty: stderr_tty },
        }
    }
}

/// Where the dashboard's log goes by default: the output folder's state folder
/// (`OUT/.dicomflow/dicomflow.log`), beside the run's other records and out of the dataset.
pub fn log_file_for(out: &Path) -> PathBuf {
    out.join(".dicomflow").join("dicomflow.log")
}

/// The log of a run without an output folder of its own (one image to a named file or to
/// stdout): `$XDG_STATE_HOME/dicomflow/dicomflow.log`, else `~/.local/state/dicomflow/…`, else
/// the temporary folder.
pub fn state_log_file() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .unwrap_or_else(std::env::temp_dir);
    state.join("dicomflow").join("dicomflow.log")
}

/// What [`supervise`] needs besides the statistics.
#[derive(Debug, Clone)]
pub struct Options {
    pub display: Display,
    pub tick: Duration,
    /// Where logs go while the dashboard owns the terminal.
    pub log_file: PathBuf,
    /// Arrival figures of a run without an end (`listen`, `watch`): shown instead of the
    /// progress towards an end.
    pub live: Option<Arc<LiveStats>>,
}

impl Options {
    /// The display a run's settings ask for (`live`: the arrival figures of `listen` and
    /// `watch`).
    pub fn of(
        settings: &crate::app::config::Settings,
        quiet: bool,
        live: Option<Arc<LiveStats>>,
    ) -> Options {
        Options {
            display: Display::choose(
                settings.dashboard.tui,
                quiet,
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
            ),
            tick: Duration::from_millis(settings.dashboard.tick_ms),
            log_file: (settings.dashboard.log_file.clone())
                .unwrap_or_else(|| log_file_for(&settings.job.output.dir)),
            live,
        }
    }
}

/// Runs `work` (the pipeline) on its own thread and shows its progress on this one until it
/// ends; returns what `work` returned. q / Ctrl-C in the dashboard set `cancel`; p toggles
/// `stats.set_paused`. A panic of `work` is resumed here once the terminal is restored.
pub fn supervise<R: Send>(
    opts: &Options,
    stats: &Arc<Stats>,
    cancel: &Arc<AtomicBool>,
    tracer: Option<&Arc<Tracer>>,
    work: impl FnOnce() -> R + Send,
) -> Result<R, FatalError> {
    std::thread::scope(|s| {
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let handle = std::thread::Builder::new()
            .name("pipeline".into())
            .spawn_scoped(s, move || {
                let r = work();
                let _ = done_tx.send(());
                r
            })
            .map_err(|e| FatalError::Other(format!("cannot start the pipeline thread: {e}")))?;
        let mut display = opts.display;
        if display == Display::Tui {
            match Dashboard::start(opts, stats, cancel, tracer) {
                Ok(d) => d.run(&done_rx),
                Err(e) => {
                    tracing::warn!("cannot show the dashboard ({e}); showing progress instead");
                    display = Display::Progress { tty: false };
                }
            }
        }
        match display {
            Display::Tui => {}
            Display::Progress { tty } => {
                progress::run(tty, opts.tick, stats, opts.live.as_ref(), tracer, &done_rx)
            }
            Display::Quiet => {
                if let Some(t) = tracer {
                    while !wait(&done_rx, opts.tick) {
                        sample_counters(t, &stats.gauges());
                    }
                }
            }
        }
        match handle.join() {
            Ok(r) => Ok(r),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Waits up to `d` for the work to end; true when it has.
fn wait(done: &Receiver<()>, d: Duration) -> bool {
    !matches!(
        done.recv_timeout(d),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    )
}

/// Queue depths and slot occupancy as trace counter tracks.
fn sample_counters(tracer: &Tracer, gauges: &[GaugeSnapshot]) {
    let (slots, queues): (Vec<_>, Vec<_>) = gauges.iter().partition(|g| g.name.contains("slot"));
    let series = |v: Vec<&GaugeSnapshot>| {
        v.iter()
            .map(|g| (g.name.clone(), g.current as f64))
            .collect()
    };
    if !queues.is_empty() {
        tracer.counter("queue depth", series(queues));
    }
    if !slots.is_empty() {
        tracer.counter("slot ring", series(slots));
    }
}

/// The dashboard while it owns the terminal.
struct Dashboard<'a> {
    term: term::TerminalGuard,
    app: app::App,
    stats: &'a Arc<Stats>,
    cancel: &'a Arc<AtomicBool>,
    tracer: Option<&'a Arc<Tracer>>,
    tick: Duration,
    log_file: PathBuf,
    log_len_before: u64,
    live: Option<Arc<LiveStats>>,
}

fn file_len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

impl<'a> Dashboard<'a> {
    fn start(
        opts: &Options,
        stats: &'a Arc<Stats>,
        cancel: &'a Arc<AtomicBool>,
        tracer: Option<&'a Arc<Tracer>>,
    ) -> std::io::Result<Dashboard<'a>> {
        let log_len_before = file_len(&opts.log_file);
        logsink::to_file(&opts.log_file)?;
        let term = match term::TerminalGuard::enter() {
            Ok(t) => t,
            Err(e) => {
                logsink::to_stderr();
                return Err(e);
            }
        };
        Ok(Dashboard {
            term,
            app: app::App::new(stats.snapshot(), Some(opts.log_file.clone())),
            stats,
            cancel,
            tracer,
            tick: opts.tick,
            log_file: opts.log_file.clone(),
            log_len_before,
            live: opts.live.clone(),
        })
    }

    fn run(mut self, done: &Receiver<()>) {
        let (key_tx, mut key_rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            // Not joined: it notices `stop` within one poll and ends by itself.
            let _ = std::thread::Builder::new()
                .name("keys".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match crossterm::event::poll(Duration::from_millis(50)) {
                            Ok(true) => match crossterm::event::read() {
                                Ok(ev) => {
                                    if key_tx.send(ev).is_err() {
                                        return;
                                    }
                                }
                                Err(_) => return,
                            },
                            Ok(false) => {}
                            Err(_) => return,
                        }
                    }
                });
        }
        self.frame();
        let mut next = Instant::now() + self.tick;
        loop {
            let timeout = next.saturating_duration_since(Instant::now());
            select! {
                recv(done) -> _ => break,
                recv(key_rx) -> ev => match ev {
                    Ok(ev) => {
                        if self.key(ev) {
                            self.frame(); // at once; the tick stays put
                        }
                    }
                    // No more input (the terminal went away): keep showing, stop listening.
                    Err(_) => key_rx = crossbeam_channel::never(),
                },
                default(timeout) => {
                    self.frame();
                    let now = Instant::now();
                    next += self.tick;
                    if next <= now {
                        next = now + self.tick;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        // No last frame: the alternate screen is left at once and the summary follows.
        drop(self.term);
        logsink::to_stderr();
        if file_len(&self.log_file) > self.log_len_before {
            crate::app::print::errln(&format!(
                "dicomflow: messages logged while the dashboard was shown are in {}",
                dicomflow::paths::Escaped(&self.log_file)
            ));
        }
    }

    fn frame(&mut self) {
        let snap = self.stats.snapshot();
        if let Some(t) = self.tracer {
            sample_counters(t, &snap.gauges);
        }
        self.app.cancelling |= self.cancel.load(Ordering::Relaxed);
        if let Some(live) = &self.live {
            let view = self.app.live.get_or_insert_with(app::Live::default);
            view.update(live.snapshot());
        }
        self.app.update(snap);
        let app = &self.app;
        if let Err(e) = self.term.draw(|f| draw::draw(f, app)) {
            tracing::warn!("dashboard: {e}");
        }
    }

    /// Handles an input event; true when the screen should be redrawn now.
    fn key(&mut self, ev: Event) -> bool {
        let key = match ev {
            Event::Key(k) if k.kind != KeyEventKind::Release => k,
            Event::Resize(..) => return true,
            _ => return false,
        };
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        match key.code {
            _ if ctrl_c && self.app.cancelling => {
                // Second interrupt: leave at once, like a second SIGINT.
                term::restore();
                crate::app::print::errln("dicomflow: interrupted twice; stopping now");
                std::process::exit(130);
            }
            _ if ctrl_c => self.finish(),
            KeyCode::Char('q') | KeyCode::Char('Q') => self.finish(),
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.stats.set_paused(!self.stats.is_paused());
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.app.help = !self.app.help,
            KeyCode::Esc if self.app.help => self.app.help = false,
            _ => return false,
        }
        true
    }

    /// q / Ctrl-C: stop loading; in-flight slices are finished and written, nothing partial.
    fn finish(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.stats.set_paused(false);
        self.app.cancelling = true;
    }
}
