//! The command line: `run`, `validate`, `join`, `sim`, `demo`, `drive`, `report`. Each subcommand is a
//! thin call into the library; exit codes and messages are decided here.

use crate::demo::DemoArgs;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tokentap_proxy::config::Config;
use tokentap_proxy::sinks::Hooks;
use tokentap_sim::{SimArgs, Simulator};
use tokentap_tools::drive::DriveArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tokentap",
    version,
    about = "A transparent measuring reverse proxy for LLM serving"
)]
pub struct Cli {
    /// Log filter (tracing syntax, e.g. `info,tokentap=debug`); RUST_LOG also works.
    #[arg(long, global = true, env = "TOKENTAP_LOG", default_value = "info")]
    pub log: String,
    /// Log lines as text or as JSON objects (one per line; access-log
    /// fields become keys).
    #[arg(long, global = true, env = "TOKENTAP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the taps of a config file until SIGINT (fast) or SIGTERM (graceful).
    Run {
        /// YAML config file.
        #[arg(short, long, env = "TOKENTAP_CONFIG")]
        config: PathBuf,
    },
    /// Check a config file (parse, resolve upstreams, read CA files) and exit.
    Validate {
        /// YAML config file.
        #[arg(short, long, env = "TOKENTAP_CONFIG")]
        config: PathBuf,
    },
    /// Run the simulated OpenAI-compatible engine (ground truth for tests and demos).
    Sim(SimArgs),
    /// Simulator + a tap + traffic + a live table: see tokentap measure, nothing to install.
    Demo(DemoArgs),
    /// The methodology report of record logs: Markdown, JSON and an HTML page with charts.
    Report(tokentap_tools::report::ReportArgs),
    /// Send a reference workload (uniform, skewed, conversation, code,
    /// long-context) to an OpenAI-compatible server and summarise it.
    Drive(DriveArgs),
    /// Benchmark tokentap against a direct connection, itself with
    /// measurement off, nginx, HAProxy and LiteLLM on this machine.
    Bench(tokentap_tools::bench::BenchArgs),
    /// Receive the taps' OTLP spans (gRPC and HTTP) and attribute each
    /// request's time to the layers between taps on different machines.
    Join {
        /// YAML config file (`join.yaml`).
        #[arg(short, long, env = "TOKENTAP_JOIN_CONFIG")]
        config: PathBuf,
        /// Check the file and exit.
        #[arg(long)]
        check: bool,
    },
    /// A small reference LLM gateway (guardrail calls, then the engine) for
    /// demos, the compose stack and attribution tests.
    Gateway(tokentap_sim::gateway::GatewayArgs),
    /// A reference compound app (a RAG agent: a Chroma search, an LLM call
    /// that asks for a tool, the MCP tool call, a second LLM call streamed
    /// back) for demos and tests.
    App(tokentap_sim::app::AppArgs),
    /// Exit 0 when tokentap's admin endpoint answers 2xx (a container
    /// healthcheck that needs no curl), 1 otherwise.
    Health {
        /// The URL to probe (plain HTTP).
        #[arg(long, default_value = "http://127.0.0.1:9464/readyz")]
        url: String,
        /// Give up after this long.
        #[arg(long, default_value_t = 3)]
        timeout_seconds: u64,
    },
}

/// Runs a parsed command line; the error is printed by `main`.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config } => {
            let cfg =
                Config::load(&config).map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
            tokentap_proxy::foreground::run(&cfg, Hooks::default(), Some(&config))?;
            Ok(())
        }
        Command::Join { config, check } => {
            let cfg = tokentap_join::config::JoinConfig::load(&config)
                .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
            if check {
                println!(
                    "{}: ok (OTLP/gRPC {}, OTLP/HTTP {}, admin {}, {} traces at most)",
                    config.display(),
                    cfg.grpc_listen,
                    cfg.http_listen,
                    cfg.admin_listen,
                    cfg.correlation.max_groups
                );
                return Ok(());
            }
            tokentap_join::run(&cfg)?;
            Ok(())
        }
        Command::Validate { config } => {
            let cfg =
                Config::load(&config).map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
            println!("{}: ok", config.display());
            println!("  admin {}", cfg.admin_listen);
            for t in &cfg.taps {
                let hop = t
                    .hop
                    .as_deref()
                    .map(|h| format!(", hop {h}"))
                    .unwrap_or_default();
                println!(
                    "  tap {} ({}{hop}) {} -> {} [{}], traceparent: {}",
                    t.name,
                    t.boundary.as_str(),
                    t.listen,
                    t.upstream.url,
                    t.upstream.addr,
                    t.trace.as_str()
                );
            }
            match &cfg.correlation {
                Some(c) => println!("  correlation: on, settle {:?}", c.settle),
                None => println!("  correlation: off"),
            }
            match &cfg.analysis {
                Some(a) => println!(
                    "  analysis: on, window {:?}, SLOs set: {}, engines scraped: {}",
                    a.settings.window,
                    a.settings.slo.is_set(),
                    a.engines.len()
                ),
                None => println!("  analysis: off"),
            }
            for t in cfg.taps.iter().filter(|t| t.record_log.is_some()) {
                if let Some(r) = &t.record_log {
                    println!("  tap {} record log: {}", t.name, r.path.display());
                }
            }
            Ok(())
        }
        Command::Sim(args) => Ok(Simulator::run_blocking(&args)?),
        Command::Demo(args) => crate::demo::run(&args),
        Command::Report(args) => tokentap_tools::report::run(&args),
        Command::Drive(args) => tokentap_tools::drive::run(&args),
        Command::Bench(args) => tokentap_tools::bench::run(&args),
        Command::Gateway(args) => tokentap_sim::gateway::Gateway::run_blocking(&args),
        Command::App(args) => tokentap_sim::app::App::run_blocking(&args),
        Command::Health {
            url,
            timeout_seconds,
        } => {
            let status =
                tokentap_host::admin::probe(&url, std::time::Duration::from_secs(timeout_seconds))?;
            println!("{url}: {status}");
            if (200..300).contains(&status) {
                Ok(())
            } else {
                anyhow::bail!("{url} answered {status}")
            }
        }
    }
}
