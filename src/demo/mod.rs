//! `tokentap demo`: the whole thing on one machine with nothing installed.
//! Starts the simulator, one tap in front of it, the admin listener and a
//! traffic generator, and a small compound system (the reference app, its
//! LLM calls through that tap, its MCP calls through a tool tap to the
//! simulator's MCP server, a compound tap in front), then prints a live
//! table from tokentap's own metrics until Ctrl-C or `--duration`.

pub mod compound;
pub mod table;
pub mod traffic;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokentap_proxy::config::Config;
use tokentap_proxy::server;
use tokentap_proxy::sinks::Hooks;
use tokentap_sim::app::{App, AppConfig};
use tokentap_sim::mcp::McpSim;
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
    let mcp = McpSim::spawn(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        Duration::from_millis(50),
    )?;
    let [app, app_tap, tool_tap] = [free_port()?, free_port()?, free_port()?];
    let yaml = format!(
        "admin:\n  listen: {}\ncorrelation:\n  settle_seconds: 0.5\ntaps:\n  - name: demo\n    boundary: engine\n    listen: {}\n    upstream: http://{}\n  - name: {}\n    boundary: compound\n    listen: {app_tap}\n    upstream: http://{app}\n  - name: mcp\n    boundary: tool\n    listen: {tool_tap}\n    upstream: http://{}\n",
        args.admin, args.listen, sim.addr, compound::TAP, mcp.addr
    );
    let config = Config::from_yaml(&yaml, Path::new("."))?;
    let running = server::spawn(&config, Hooks::default())
        .map_err(|e| anyhow::anyhow!("{e}\n(pick other ports with --listen and --admin)"))?;
    let app = App::spawn(
        app,
        AppConfig {
            llm: args.listen.to_string(),
            mcp: tool_tap.to_string(),
            mcp_path: "/mcp".into(),
            retrieval: None,
            before: Duration::from_millis(5),
            between: Duration::from_millis(5),
            strip_traceparent: false,
        },
    )?;
    println!("tokentap demo");
    println!("  simulated engine  http://{}", sim.addr);
    println!("  tap (engine)      http://{}   (try: curl -N http://{}/v1/chat/completions -d '{{\"model\":\"m\",\"stream\":true,\"messages\":[]}}')", args.listen, args.listen);
    println!("  compound app      http://{app_tap}   (tokentap app: LLM call → MCP tool → LLM call, taps on each)");
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
        let agent = tokio::spawn(compound::traffic(
            app_tap,
            Duration::from_millis(500),
            stop_rx.clone(),
        ));
        let traffic = tokio::spawn(traffic::run(args.listen, args.max_concurrency, stop_rx));
        let mut parts = compound::Parts::take(&registry_of(&running));
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
                    let now = compound::Parts::take(&registry_of(&running));
                    if let Some(l) = compound::line(&parts, &now) {
                        println!("{l}");
                    }
                    parts = now;
                }
                _ = tokio::signal::ctrl_c() => break,
                _ = tokio::time::sleep(over.unwrap_or(Duration::MAX)), if over.is_some() => break,
            }
        }
        let _ = stop_tx.send(true);
        let _ = traffic.await;
        let _ = agent.await;
    });
    drop(app);
    drop(running);
    drop(mcp);
    drop(sim);
    println!("demo stopped");
    Ok(())
}

/// A free loopback address (bound, then released for its user).
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

fn registry_of(running: &server::Running) -> prometheus::Registry {
    running.metrics.prom.registry.clone()
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
