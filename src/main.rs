//! The `dicomflow` binary: parse the command line, hand it to its command (`src/app/`), and turn
//! the outcome into an exit code: 0 all ok, 1 some inputs failed, 2 usage/config/fatal error,
//! 130 stopped before every input was done.

mod app;

use std::io::Write;

use clap::Parser;

fn main() {
    let started = std::time::Instant::now();
    let cli = app::cli::Cli::parse();
    let code = match app::dispatch(cli, started) {
        Ok(code) => code,
        Err(e) => {
            app::print::errln(&format!("dicomflow: error: {e}"));
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
