//! The `tokentap` binary: parse the command line, set up logging, run.

use clap::Parser;
use tokentap::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

/// jemalloc: with glibc's malloc a long-running tap's RSS creeps upward
/// under many concurrent streams (per-thread arenas fragment) although its
/// heap returns to baseline; `make soak` shows the difference.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Crates whose debug and trace logs print request headers (credentials):
/// capped at `warn` whatever the filter asks for.
const CAPPED: &[&str] = &[
    "pingora",
    "pingora_core",
    "pingora_proxy",
    "pingora_pool",
    "pingora_http",
    "h2",
    "hyper",
    "hyper_util",
    "reqwest",
];

fn filter(spec: &str) -> EnvFilter {
    let mut f = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
    for target in CAPPED {
        // A directive for the same target replaces the user's one.
        if let Ok(d) = format!("{target}=warn").parse() {
            f = f.add_directive(d);
        }
    }
    f
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    // pingora reports through `log`; the subscriber bridges it into tracing.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(&spec))
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Text => builder.init(),
        // One JSON object per line: the access log's fields become keys.
        cli::LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
