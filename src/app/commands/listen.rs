//! `dicomflow listen`: open the spool (what a previous run left is rendered first), start the
//! DICOM listener, and render every instance it acknowledges until stopped.

use std::sync::Arc;
use std::time::Instant;

use dicomflow::error::FatalError;
use dicomflow::paths::Escaped;
use dicomflow::source::listen::finish::Finisher;
use dicomflow::source::listen::{Listener, Spool};
use dicomflow::source::live::{Feed, LiveInput, LiveStats};

use super::live::{self, LiveSources};
use crate::app::cli::ListenArgs;
use crate::app::config::Settings;
use crate::app::print;
use crate::app::report::RunFiles;

/// Runs `args` until SIGTERM, Ctrl-C or `q`.
pub fn execute(args: &ListenArgs, quiet: bool, started: Instant) -> Result<i32, FatalError> {
    let settings = Settings::resolve(args.job.config.as_deref(), &args.to_raw())?;
    let files = RunFiles::create(settings.report.as_deref(), settings.trace.as_deref())?;
    let opts = &settings.listen;
    let out = &settings.job.output.dir;
    live::open_output(&settings.job)?;
    let spool_dir = opts.spool.clone().unwrap_or_else(|| out.join(".spool"));
    let (spool, leftovers) =
        Spool::open(&spool_dir, opts.durable).map_err(|e| FatalError::Other(e.to_string()))?;
    let spool = Arc::new(spool);
    let stats = LiveStats::new();
    // Room for the leftovers too, so that queueing them cannot wait on the pipeline.
    let (feed, feed_rx) = Feed::new(opts.queue + leftovers.len(), stats.clone());
    if !leftovers.is_empty() {
        tracing::warn!(
            "{} instance(s) received by a previous run but not rendered are in {}: rendering \
             them first",
            leftovers.len(),
            Escaped(&spool_dir)
        );
    }
    let origin: Arc<str> = Arc::from("spool (previous run)");
    for entry in leftovers {
        let input = LiveInput {
            path: entry.path,
            rel: entry.rel,
            arrived: Instant::now(),
            origin: origin.clone(),
            skip_existing: false,
        };
        feed.submit(input)
            .map_err(|e| FatalError::Other(format!("spool: {e}")))?;
    }
    let stop = live::stop_on_signal();
    let opened = live::open_backend(&settings, started)?;
    let listener = Listener::start(opts.clone(), spool.clone(), feed.clone())
        .map_err(|e| FatalError::Other(e.to_string()))?;
    if !quiet {
        print::errln(&format!(
            "dicomflow: listening on {} as {} (spool {}); SIGTERM, Ctrl-C or q stops",
            listener.local_addr(),
            opts.ae_title,
            Escaped(&spool_dir)
        ));
    }
    let finisher = Finisher {
        spool,
        feed: feed.clone(),
        output_dir: out.clone(),
        keep: opts.keep_received.clone(),
    };
    let closing = feed.clone();
    live::run(
        &settings,
        quiet,
        opened,
        files,
        stop,
        &feed_rx,
        LiveSources {
            stats,
            stop: Box::new(move || listener.join()),
            on_done: Box::new(move |rx| finisher.run(&rx)),
            close: Box::new(move || closing.close()),
        },
    )
}
