//! The `dicomflow` binary: parse the command line, set up logging, call the library, and turn
//! the outcome into an exit code (0 all ok, 1 some inputs failed, 2 usage/config/fatal).

mod cli;
mod dashboard;
mod signals;

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;

use cli::{Cli, Command};
use dicomflow::config::Settings;
use dicomflow::error::FatalError;
use dicomflow::render::spec::parse_voi_override;
use dicomflow::render::RenderOptions;

fn main() {
    let started = std::time::Instant::now();
    let cli = Cli::parse();
    let code = match run(cli, started) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("dicomflow: error: {e}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Leave without atexit handlers: every output is complete on disk (atomic renames), the
    // report is written and the terminal restored. What remains is releasing page-locked
    // memory and CUDA contexts, which process exit does at once, and a CUDA initialization
    // possibly still running on `auto`'s warm-start thread must not race the driver's own
    // exit handlers.
    // SAFETY: _exit only ends the process; no Rust invariant depends on destructors here.
    unsafe { libc::_exit(code) }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = if quiet {
        "error"
    } else {
        match verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(dashboard::LogSink)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn run(cli: Cli, started: std::time::Instant) -> Result<i32, FatalError> {
    init_logging(cli.verbose, cli.quiet);
    match cli.command {
        Command::Run(args) => {
            let settings = Settings::resolve(args.config.as_deref(), &args.to_raw())?;
            let backend = dicomflow::select_backend_for(&settings, &args.inputs)?;
            // Kept alive to the end: the process exits without tearing the driver down.
            std::mem::forget(backend.clone());
            let mut process = dicomflow::report::ProcessTimes {
                backend_ready_s: started.elapsed().as_secs_f64(),
                ..Default::default()
            };
            let stats = dicomflow::stats::Stats::new();
            let cancel = Arc::new(AtomicBool::new(false));
            signals::cancel_on_interrupt(cancel.clone());
            let tracer = settings
                .trace
                .as_ref()
                .map(|_| Arc::new(dicomflow::trace::Tracer::new()));
            let display = dashboard::Options {
                display: dashboard::Display::choose(
                    settings.tui,
                    cli.quiet,
                    std::io::IsTerminal::is_terminal(&std::io::stderr()),
                ),
                tick: std::time::Duration::from_millis(settings.tick_ms),
                log_file: (settings.log_file.clone())
                    .unwrap_or_else(|| settings.output_dir.join("dicomflow.log")),
            };
            let result = dashboard::supervise(&display, &stats, &cancel, tracer.as_ref(), || {
                dicomflow::pipeline::run(
                    &settings,
                    &args.inputs,
                    backend,
                    stats.clone(),
                    cancel.clone(),
                    tracer.clone(),
                )
            })??;
            process.pipeline_done_s = started.elapsed().as_secs_f64();
            let snapshot = stats.snapshot();
            if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
                t.write(path)
                    .map_err(|e| FatalError::Other(format!("trace {}: {e}", path.display())))?;
            }
            if let Some(path) = &settings.report {
                process.report_s = started.elapsed().as_secs_f64();
                dicomflow::report::write_report(path, &settings, &result, &snapshot, process)
                    .map_err(|e| FatalError::Other(format!("report {}: {e}", path.display())))?;
            }
            if !cli.quiet {
                eprint!("{}", dicomflow::report::summary(&result, &snapshot));
            } else {
                // -q keeps errors: the failed files, one line each.
                eprint!("{}", dicomflow::report::failures(&result));
            }
            Ok(result.exit_code())
        }
        Command::Synth(a) => {
            let windows = parse_windows(&a.windows)?;
            let opts = dicomflow::synth::SynthOptions {
                size: a.size,
                slices: a.slices,
                signed: a.signed,
                monochrome1: a.monochrome1,
                bits_stored: a.bits_stored,
                eight_bit: a.eight_bit,
                rgb: a.rgb,
                multiframe: a.multiframe,
                windows,
                voi_function: a.voi_function,
                seed: a.seed,
                threads: 0,
            };
            let written =
                dicomflow::synth::write_series(&a.out_dir, &opts).map_err(FatalError::Other)?;
            if !cli.quiet {
                eprintln!(
                    "dicomflow: wrote {} file(s) to {}",
                    written.len(),
                    a.out_dir.display()
                );
            }
            Ok(0)
        }
        Command::Bench(cli::BenchCommand::Transfer(a)) => {
            let opts = dicomflow::backend::cuda::bench::TransferBenchOptions {
                sizes: a.sizes,
                iters: a.iters.max(3),
                streams: a.streams,
                device: a.device,
            };
            let table = dicomflow::backend::cuda::bench::run(&opts).map_err(FatalError::Backend)?;
            print!("{table}");
            Ok(0)
        }
        Command::Bench(cli::BenchCommand::GpuEncode(a)) => {
            let opts = dicomflow::backend::cuda::encode_bench::GpuEncodeBenchOptions {
                sizes: a.sizes,
                slices: a.slices,
                streams: a.streams.max(1),
                rounds: a.rounds.max(1),
                algorithms: a.algorithms,
                out: a.out,
                library_path: a.library_path,
                device: a.device,
            };
            let table = dicomflow::backend::cuda::encode_bench::run(&opts)
                .map_err(FatalError::Backend)?;
            print!("{table}");
            Ok(0)
        }
        Command::Bench(cli::BenchCommand::Encode(a)) => {
            let table =
                dicomflow::bench::encode_table(&a.sizes, a.iters).map_err(FatalError::Other)?;
            print!("{table}");
            Ok(0)
        }
        Command::Inspect(a) => {
            let window = a
                .window
                .parse()
                .map_err(|e: String| FatalError::Config(format!("--window: {e}")))?;
            let voi_function = match &a.voi_function {
                Some(v) => parse_voi_override(v)
                    .map_err(|e| FatalError::Config(format!("--voi-function: {e}")))?,
                None => None,
            };
            match dicomflow::inspect::describe(
                &a.file,
                &RenderOptions {
                    window,
                    voi_function,
                },
            ) {
                Ok(text) => {
                    print!("{text}");
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("dicomflow: {e}");
                    Ok(1)
                }
            }
        }
    }
}

fn parse_windows(s: &str) -> Result<Vec<(f64, f64)>, FatalError> {
    s.split(';')
        .filter(|w| !w.trim().is_empty())
        .map(|w| {
            let (c, width) = w
                .split_once(',')
                .ok_or_else(|| FatalError::Config(format!("--windows: `{w}` is not C,W")))?;
            let parse = |x: &str| {
                x.trim()
                    .parse::<f64>()
                    .map_err(|_| FatalError::Config(format!("--windows: `{x}` is not a number")))
            };
            Ok((parse(c)?, parse(width)?))
        })
        .collect()
}
