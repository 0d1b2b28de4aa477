//! The binary's own layer, which the library never imports: the command line ([`cli`]), the
//! configuration file and its checks ([`config`]: raw TOML and flags → each component's
//! options), the commands, the live dashboard, signal handling and the end-of-run report.

pub mod cli;
pub mod commands;
pub mod config;
pub mod dashboard;
pub mod print;
pub mod report;
pub mod signals;

use dicomflow::error::FatalError;

use cli::{BenchCommand, Cli, Command, ReportCommand};

/// Runs the command `cli` names; the exit code, or the fatal error (exit 2).
pub fn dispatch(cli: Cli, started: std::time::Instant) -> Result<i32, FatalError> {
    init_logging(cli.verbose, cli.quiet);
    match cli.command {
        Command::Run(args) => commands::run::execute(&args, cli.quiet, started),
        Command::Listen(args) => commands::listen::execute(&args, cli.quiet, started),
        Command::Watch(args) => commands::watch::execute(&args, cli.quiet, started),
        Command::Synth(args) => commands::synth::execute(&args, cli.quiet),
        Command::Inspect(args) => commands::inspect::execute(&args),
        Command::Scan(args) => commands::scan::execute(&args, cli.quiet),
        Command::Report(ReportCommand::Merge(args)) => {
            commands::report_merge::execute(&args, cli.quiet)
        }
        Command::Bench(BenchCommand::Transfer(args)) => commands::bench_transfer::execute(&args),
        Command::Bench(BenchCommand::Encode(args)) => commands::bench_encode::execute(&args),
        Command::Bench(BenchCommand::Listen(args)) => commands::bench_listen::execute(&args),
        Command::Bench(BenchCommand::Decode(args)) => commands::bench_decode::execute(&args),
        Command::Bench(BenchCommand::GpuEncode(args)) => commands::bench_gpu_encode::execute(&args),
        Command::Bench(BenchCommand::Io(args)) => commands::bench_io::execute(&args),
    }
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
        // Its own report of a failed write is an `eprintln!`, which panics when stderr is a
        // closed pipe: the sink below already makes such writes succeed quietly.
        .log_internal_errors(false)
        .try_init();
}
