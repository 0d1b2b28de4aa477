//! The one-line progress shown when the dashboard is not: on a terminal (`--no-tui`) an
//! indicatif bar redrawn in place at the tick; in a pipe or CI log, where `\r` is useless, a
//! plain line every second ("dicomflow: frames 120/200 (60%) 340 fr/s ETA 0:00:01 errors 0").
//! The figures come from the same statistics as the dashboard and the summary.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use dicomflow::observe::stats::Stats;
use dicomflow::observe::trace::Tracer;
use dicomflow::source::live::LiveStats;

use super::app::{Live, Progress, Rates};
use super::{logsink, sample_counters, wait};

/// Shows progress until `done` fires.
pub fn run(
    tty: bool,
    tick: Duration,
    stats: &Arc<Stats>,
    live: Option<&Arc<LiveStats>>,
    tracer: Option<&Arc<Tracer>>,
    done: &Receiver<()>,
) {
    let mut rates = Rates::default();
    let mut view = Live::default();
    let mut sample = || {
        let snap = stats.snapshot();
        if let Some(t) = tracer {
            sample_counters(t, &snap.gauges);
        }
        rates.push(&snap);
        let progress = Progress::of(&snap, &rates);
        // A run without an end shows arrivals instead of progress towards the end.
        let line = match live {
            Some(l) => {
                view.update(l.snapshot());
                view.line(snap.error_count)
            }
            None => progress.line(),
        };
        (progress, line)
    };
    if tty {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:30.cyan/blue} {msg}") {
            bar.set_style(style.progress_chars("█▉▊▋▌▍▎▏ "));
        }
        logsink::around_bar(bar.clone());
        while !wait(done, tick) {
            let (p, line) = sample();
            bar.set_length(p.expected);
            bar.set_position(p.finished);
            bar.set_message(line);
        }
        bar.finish_and_clear();
        logsink::to_stderr();
    } else {
        // Once a second (or at the tick, if slower), a whole line.
        let period = tick.max(Duration::from_secs(1));
        while !wait(done, period) {
            crate::app::print::errln(&format!("dicomflow: {}", sample().1));
        }
    }
}
