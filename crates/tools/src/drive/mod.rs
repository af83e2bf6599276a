//! `tokentap drive`: a traffic driver for any OpenAI-compatible server. It
//! generates the methodology's five reference workloads (`workload`) under
//! a closed-loop, open-loop or sweep load model (`load`), streams every
//! request through the measuring client (`request`, `stream`), and reports
//! requests by outcome, client-side TTFT/E2E and tokens (`summary`).
//!
//! Usable as a library: [`drive`] runs inside the caller's tokio runtime and
//! returns a [`DriveSummary`] with every request's result (each carries its
//! `x-request-id`, `drive-<n>`, to join with a tap's records or the
//! simulator's truth). [`run`] is the blocking command-line wrapper: Ctrl-C
//! stops it early and still prints the summary.
//!
//! Against `tokentap sim`, give the simulator a large `--output-tokens` so it
//! honours each request's `max_tokens` (it sends the smaller of the two).
//!
//! Does not own: measuring on the server side (that is the tap's job; this
//! is the client's view), or TLS (plain `http://` only).

pub mod load;
pub mod request;
mod runner;
pub mod stream;
pub mod summary;
pub mod workload;

#[cfg(test)]
mod tests;

pub use load::{Arrivals, LoadModel};
pub use request::{Outcome, RequestResult};
pub use summary::{DriveSummary, Outcomes};
pub use workload::{TenantSpread, Workload};

use crate::parse_duration;
use load::{ArrivalClock, Budget, Steps};
use request::{Shared, Target};
use runner::{closed, open, Run};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use summary::RunInfo;
use tokio::sync::watch;
use workload::Options;

/// Requests sent when neither `--requests` nor `--duration` is given (and
/// no sweep sets the length).
pub const DEFAULT_REQUESTS: u64 = 100;

/// `tokentap drive` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DriveArgs {
    /// Base URL of the OpenAI-compatible server (requests go to
    /// BASE/v1/chat/completions); http:// only.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Reference workload.
    #[arg(long, value_enum, default_value_t = Workload::Uniform)]
    pub workload: Workload,
    /// Closed loop: this many workers, each sending its next request when
    /// the previous one ended (the default load, with 1).
    #[arg(long, conflicts_with_all = ["rate", "concurrency_steps"])]
    pub concurrency: Option<usize>,
    /// Open loop: requests per second, whatever the server does.
    #[arg(long, conflicts_with = "concurrency_steps")]
    pub rate: Option<f64>,
    /// Open-loop arrival process (auto: bursty for skewed, else Poisson).
    #[arg(long, value_enum, default_value_t = Arrivals::Auto)]
    pub arrivals: Arrivals,
    /// Closed-loop sweep: step through these concurrency levels (e.g. 1,2,4,8).
    #[arg(long, value_delimiter = ',')]
    pub concurrency_steps: Vec<usize>,
    /// Length of each sweep step (e.g. 10s, 1m).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub step_duration: Duration,
    /// Stop after this many requests (default 100 unless --duration or a sweep sets the length).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Start no request after this long (e.g. 60s); in-flight ones finish.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Spread requests over this many tenants (`Authorization: Bearer tenant-<i>-key`).
    #[arg(long, default_value_t = 1)]
    pub tenants: u32,
    /// How requests spread over tenants.
    #[arg(long, value_enum, default_value_t = TenantSpread::Uniform)]
    pub tenant_spread: TenantSpread,
    /// Model name sent in every request.
    #[arg(long, default_value = "sim-model")]
    pub model: String,
    /// Seed of every draw (lengths, text, tenants, arrivals).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Extra request header, `name: value` (repeatable; e.g. `x-sim: itl-ms=5`).
    /// An `authorization` or `x-request-id` given here replaces the driver's own.
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Longest input of the long-context workload, in tokens.
    #[arg(long, default_value_t = 32_768)]
    pub max_context: u32,
    /// Give up on a request after this long.
    #[arg(long, value_parser = parse_duration, default_value = "300s")]
    pub request_timeout: Duration,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Each request's `x-request-id` is this prefix and its number.
    #[arg(long, default_value = "drive-")]
    pub request_id_prefix: String,
}

impl DriveArgs {
    /// The defaults of the command line, against `url`.
    pub fn new(url: impl Into<String>) -> Self {
        DriveArgs {
            url: url.into(),
            workload: Workload::Uniform,
            concurrency: None,
            rate: None,
            arrivals: Arrivals::Auto,
            concurrency_steps: Vec::new(),
            step_duration: Duration::from_secs(10),
            requests: None,
            duration: None,
            tenants: 1,
            tenant_spread: TenantSpread::Uniform,
            model: "sim-model".into(),
            seed: 1,
            headers: Vec::new(),
            max_context: 32_768,
            request_timeout: Duration::from_secs(300),
            summary_json: None,
            request_id_prefix: "drive-".into(),
        }
    }

    /// The load model these arguments ask for.
    pub fn load_model(&self) -> anyhow::Result<LoadModel> {
        if !self.concurrency_steps.is_empty() {
            if self.concurrency_steps.contains(&0) {
                anyhow::bail!("--concurrency-steps: every level must be at least 1");
            }
            return Ok(LoadModel::Sweep {
                concurrency_steps: self.concurrency_steps.clone(),
                step_seconds: self.step_duration.as_secs_f64(),
            });
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                anyhow::bail!("--rate must be a positive number of requests per second");
            }
            let arrivals = match (self.arrivals, self.workload) {
                (Arrivals::Auto, Workload::Skewed) => Arrivals::Bursty,
                (Arrivals::Auto, _) => Arrivals::Poisson,
                (a, _) => a,
            };
            return Ok(LoadModel::Open {
                rate_per_second: rate,
                arrivals,
            });
        }
        match self.concurrency.unwrap_or(1) {
            0 => anyhow::bail!("--concurrency must be at least 1"),
            c => Ok(LoadModel::Closed { concurrency: c }),
        }
    }
}

/// `name: value` → (lower-cased name, trimmed value).
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not `name: value`"))?;
    let name = name.trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("`{s}`: bad header name"));
    }
    Ok((name.to_ascii_lowercase(), value.trim().to_string()))
}

/// Runs the workload to the end and summarises it (inside the caller's runtime).
pub async fn drive(args: &DriveArgs) -> anyhow::Result<DriveSummary> {
    let (keep, stop) = watch::channel(false);
    let summary = drive_until(args, stop).await;
    drop(keep);
    summary
}

/// Like [`drive`], ending early once `stop` turns true: no new requests,
/// in-flight ones counted as `cancelled`.
pub async fn drive_until(
    args: &DriveArgs,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<DriveSummary> {
    let load = args.load_model()?;
    let target = Target::resolve(&args.url).await?;
    let started = Instant::now();
    let steps = match &load {
        LoadModel::Sweep {
            concurrency_steps, ..
        } => Some(Steps {
            levels: concurrency_steps.clone(),
            step: args.step_duration,
        }),
        _ => None,
    };
    let length = [args.duration, steps.as_ref().map(Steps::total)]
        .into_iter()
        .flatten()
        .min();
    let max_requests = match (args.requests, length) {
        (None, None) => Some(DEFAULT_REQUESTS),
        (r, _) => r,
    };
    let run = Arc::new(Run {
        shared: Shared {
            target,
            model: args.model.clone(),
            headers: args.headers.clone(),
            id_prefix: args.request_id_prefix.clone(),
            timeout: args.request_timeout,
            started,
        },
        budget: Budget::new(max_requests, length.map(|d| started + d)),
        steps,
        workload: args.workload,
        opts: Options {
            tenants: args.tenants.max(1),
            spread: args.tenant_spread,
            max_context_tokens: args.max_context,
        },
        seed: args.seed,
    });
    let results = match &load {
        LoadModel::Closed { concurrency } => closed(&run, *concurrency, &stop).await,
        LoadModel::Sweep { .. } => {
            let workers = run.steps.as_ref().map_or(1, Steps::max_level);
            closed(&run, workers, &stop).await
        }
        LoadModel::Open {
            rate_per_second,
            arrivals,
        } => open(&run, ArrivalClock::new(*arrivals, *rate_per_second), stop).await,
    };
    let info = RunInfo {
        workload: args.workload,
        load,
        url: args.url.clone(),
        seed: args.seed,
        tenants: args.tenants.max(1),
        elapsed_seconds: started.elapsed().as_secs_f64(),
    };
    Ok(summary::summarize(info, results))
}

/// `tokentap drive`: runs on its own runtime, prints the summary, writes
/// `--summary-json`. Ctrl-C stops early (in-flight requests are cancelled).
/// Fails (after printing) when requests were sent and none succeeded.
pub fn run(args: &DriveArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summary = rt.block_on(async {
        let (tx, rx) = watch::channel(false);
        let ctrl_c = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("stopping: no new requests, in-flight ones cancelled");
                let _ = tx.send(true);
                std::future::pending::<()>().await;
            }
        });
        let summary = drive_until(args, rx).await;
        ctrl_c.abort();
        summary
    })?;
    print!("{}", summary::render(&summary));
    if let Some(path) = &args.summary_json {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json + "\n")
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    if summary.requests > 0 && summary.outcomes.ok == 0 {
        anyhow::bail!("no request succeeded");
    }
    Ok(())
}
