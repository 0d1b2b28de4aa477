//! `dicomflow watch DIR…`: render what the folders hold (keeping outputs that exist), then
//! every file written or moved into them once complete, until stopped.

use std::time::Instant;

use dicomflow::error::FatalError;
use dicomflow::source::live::{Feed, LiveStats};
use dicomflow::source::watch::Watcher;

use super::live::{self, LiveSources};
use crate::app::cli::WatchArgs;
use crate::app::config::Settings;
use crate::app::print;
use crate::app::report::RunFiles;

/// Runs `args` until SIGTERM, Ctrl-C or `q`.
pub fn execute(args: &WatchArgs, quiet: bool, started: Instant) -> Result<i32, FatalError> {
    let settings = Settings::resolve(args.job.config.as_deref(), &args.to_raw())?;
    let files = RunFiles::create(settings.report.as_deref(), settings.trace.as_deref())?;
    let out = &settings.job.output.dir;
    live::open_output(&settings.job)?;
    let stats = LiveStats::new();
    let (feed, feed_rx) = Feed::new(1024, stats.clone());
    let stop = live::stop_on_signal();
    let opened = live::open_backend(&settings, started)?;
    let watcher = Watcher::start(
        &args.folders,
        std::slice::from_ref(out),
        feed.clone(),
        dicomflow::source::watch::WatchOptions {
            limits: dicomflow::decode::DecodeLimits {
                max_frame_bytes: settings.job.pipeline.max_frame_bytes,
                ..Default::default()
            },
            ..settings.watch.clone()
        },
    )
    .map_err(|e| FatalError::Other(e.to_string()))?;
    if !quiet {
        print::errln(&format!(
            "dicomflow: watching {} folder(s); SIGTERM, Ctrl-C or q stops",
            args.folders.len()
        ));
    }
    let (done_feed, closing) = (feed.clone(), feed);
    live::run(
        &settings,
        quiet,
        opened,
        files,
        stop,
        &feed_rx,
        LiveSources {
            stats,
            stop: Box::new(move || watcher.join()),
            on_done: Box::new(move |rx| {
                for d in rx {
                    done_feed.done(&d.input, d.outcome, d.at);
                }
            }),
            close: Box::new(move || closing.close()),
        },
    )
}
