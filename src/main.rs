//! The `tokentap` binary: parse the command line, set up logging, run.

use clap::Parser;
use tokentap::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    // pingora reports through `log`; the subscriber bridges it into tracing.
    let filter = format!("{filter},pingora_core=warn,pingora_proxy=warn");
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
