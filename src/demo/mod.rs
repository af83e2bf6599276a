//! `tokentap demo`: the whole thing on one machine with nothing installed.
//! Starts the simulator, one tap in front of it, the admin listener and a
//! traffic generator, then prints a live table from tokentap's own metrics
//! until Ctrl-C or `--duration`.

pub mod table;
pub mod traffic;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokentap_proxy::config::Config;
use tokentap_proxy::server;
use tokentap_proxy::sinks::Hooks;
use tokentap_sim::{Profile, SimArgs, Simulator};
pub use tokentap_tools::parse_duration;
use tokio::sync::watch;

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Stop after this long (e.g. 90s, 5m); default: run until Ctrl-C.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Admin listener (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub admin: SocketAddr,
    /// The demo tap's listener (clients can send their own requests here too).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Seconds between table rows.
    #[arg(long, default_value_t = 5)]
    pub interval: u64,
    /// Highest concurrency the traffic generator reaches.
    #[arg(long, default_value_t = 8)]
    pub max_concurrency: usize,
}

/// Runs the demo; returns when it is over.
pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    let sim_args = SimArgs {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        tls_cert: None,
        tls_key: None,
        ground_truth: None,
        engine: Default::default(),
        profile: Profile {
            itl_jitter_ms: 4.0,
            ..Profile::default()
        },
    };
    let sim = Simulator::spawn(&sim_args)?;
    let yaml = format!(
        "admin:\n  listen: {}\ntaps:\n  - name: demo\n    boundary: engine\n    listen: {}\n    upstream: http://{}\n",
        args.admin, args.listen, sim.addr
    );
    let config = Config::from_yaml(&yaml, Path::new("."))?;
    let running = server::spawn(&config, Hooks::default())
        .map_err(|e| anyhow::anyhow!("{e}\n(pick other ports with --listen and --admin)"))?;
    println!("tokentap demo");
    println!("  simulated engine  http://{}", sim.addr);
    println!("  tap (engine)      http://{}   (try: curl -N http://{}/v1/chat/completions -d '{{\"model\":\"m\",\"stream\":true,\"messages\":[]}}')", args.listen, args.listen);
    println!("  metrics           http://{}/metrics", args.admin);
    match args.duration {
        Some(d) => println!("  running for {d:?}; Ctrl-C stops earlier"),
        None => println!("  Ctrl-C to stop"),
    }
    println!("  latency columns are what PromQL histogram_quantile() gives over each interval\n");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (stop_tx, stop_rx) = watch::channel(false);
        let traffic = tokio::spawn(traffic::run(args.listen, args.max_concurrency, stop_rx));
        let registry = running.metrics.prom.registry.clone();
        let started = Instant::now();
        let mut prev = table::Snapshot::take(&registry, "demo");
        let mut ticker = tokio::time::interval(Duration::from_secs(args.interval.max(1)));
        ticker.tick().await;
        println!("{}", table::HEADER);
        loop {
            let over = args.duration.map(|d| d.saturating_sub(started.elapsed()));
            tokio::select! {
                _ = ticker.tick() => {
                    let cur = table::Snapshot::take(&registry, "demo");
                    println!("{}", table::render(&table::row(&prev, &cur)));
                    prev = cur;
                }
                _ = tokio::signal::ctrl_c() => break,
                _ = tokio::time::sleep(over.unwrap_or(Duration::MAX)), if over.is_some() => break,
            }
        }
        let _ = stop_tx.send(true);
        let _ = traffic.await;
    });
    drop(running);
    drop(sim);
    println!("demo stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
