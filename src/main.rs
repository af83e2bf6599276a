//! The `tokentap` binary: parse the command line, set up logging, run.

use clap::Parser;
use tokentap::cli::{self, Cli};

/// jemalloc: with glibc's malloc a long-running tap's RSS creeps upward
/// under many concurrent streams (per-thread arenas fragment) although its
/// heap returns to baseline; `make soak` shows the difference.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    // pingora reports through `log`; the subscriber bridges it into tracing.
    tokentap::logging::init(&spec, cli.log_format);
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
