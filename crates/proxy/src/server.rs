//! Builds and runs the pingora `Server` for a validated `Config`: one proxy
//! service per tap (own runtime, own listener, own upstream pool) and one
//! admin service.
//!
//! Two ways to run it: `run` blocks the calling thread and obeys Unix
//! signals (SIGINT fast; SIGTERM graceful: `/readyz` 503 at once, listeners
//! closed after `drain_notice`, in-flight requests get `grace_period`;
//! SIGHUP reloads the config file) — that is `tokentap run`;
//! `spawn` runs it on a background thread and returns a `Running` handle to
//! stop it — that is the demo and the tests. Both first check that every
//! listen address can be bound, so a taken port is a clear error naming the
//! key instead of a panic inside pingora.

use crate::admin::{AdminApp, Readiness};
use crate::config::Config;
pub use crate::foreground::run;
use crate::limits::app::GuardedApp;
use crate::live_analyses::Analyses;
use crate::metrics::Metrics;
use crate::otlp::Otlp;
use crate::proxy::{Tap, TapAnalysis, TapParts, TapProxy};
use crate::recordlog::{LogFlusher, RecordLog};
use crate::reload::{self, Reloader};
use crate::sinks::{self, AnalysisSink, CorrelatorSink, FleetSeries, Hooks, TapSinks};
use async_trait::async_trait;
use pingora::apps::HttpServerOptions;
use pingora::protocols::http::v2::server::H2Options;
use pingora::proxy::HttpProxy;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::listening::Service;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A startup problem.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{key}: cannot listen on {addr}: {source}")]
    Listen {
        key: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("listeners did not come up within {0:?}")]
    NotReady(Duration),
    #[error("cannot start the server thread: {0}")]
    Thread(std::io::Error),
    #[error("{0}")]
    Otlp(#[from] crate::otlp::OtlpError),
    #[error("{0}")]
    Config(String),
    #[error("{key}: cannot open {path}: {source}")]
    RecordLog {
        key: String,
        path: String,
        source: std::io::Error,
    },
}

/// Checks that every listen address can be bound right now.
pub fn check_listeners(config: &Config) -> Result<(), StartError> {
    let mut all = vec![("admin.listen".to_string(), config.admin_listen)];
    for (i, t) in config.taps.iter().enumerate() {
        all.push((format!("taps[{i}].listen"), t.listen));
    }
    for (key, addr) in all {
        TcpListener::bind(addr).map_err(|source| StartError::Listen { key, addr, source })?;
    }
    Ok(())
}

/// The pingora server and what is shared with it.
pub struct Built {
    pub server: Server,
    pub metrics: Arc<Metrics>,
    pub ready: Readiness,
    /// Flushed after the server stopped (bounded).
    pub otlp: Option<Otlp>,
    /// Live analyses (`/report`), when on.
    pub analyses: Option<Analyses>,
    /// The taps, for hot reload.
    pub taps: Vec<Arc<Tap>>,
    /// The taps' record logs, to flush before exit.
    pub record_logs: Vec<LogFlusher>,
}

/// Builds (does not start) the server.
pub fn build(config: &Config, hooks: Hooks) -> Result<Built, StartError> {
    build_with_grace(config, hooks, config.grace_period)
}

/// The same, with pingora's own grace (a fixed wait after the listeners
/// close) set apart: `tokentap run` ends the drain itself and keeps
/// pingora's only as a backstop.
pub(crate) fn build_with_grace(
    config: &Config,
    hooks: Hooks,
    pingora_grace: Duration,
) -> Result<Built, StartError> {
    check_listeners(config)?;
    let mut metrics = Metrics::new(config.max_models)?.with_max_tenants(
        config
            .analysis
            .as_ref()
            .map_or(crate::metrics::DEFAULT_MAX_TENANTS, |a| a.max_tenants),
    );
    let mut otlp = None;
    let mut span_events = 0;
    if let Some(cfg) = &config.otlp {
        let providers = config
            .taps
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.provider.clone()?)))
            .collect();
        let (o, instruments) = Otlp::start(cfg, &metrics.prom, providers)?;
        if let Some(i) = instruments {
            metrics = metrics.with_otel(i);
        }
        // The span carries the first token-event offsets for the joiner,
        // and, when asked, one span event per token event.
        span_events = cfg.span_token_offsets.max(if cfg.span_events {
            cfg.max_span_events
        } else {
            0
        });
        otlp = Some(o);
    }
    let metrics = Arc::new(metrics);
    crate::reload::register(&metrics);
    let spans = otlp.as_ref().and_then(Otlp::spans);
    let ready = Readiness::default();
    let correlator = match config.correlation {
        None => None,
        Some(cfg) => Some(
            crate::correlation::start(cfg, Default::default(), &metrics, &hooks.attributions)
                .map_err(StartError::Thread)?,
        ),
    };
    let conf = ServerConf {
        threads: config.threads,
        // One thread: pingora's no-steal runtime, a current-thread tokio
        // runtime, ~7 % fewer instructions per event than a one-worker
        // multi-thread one (BENCHMARKS.md, run I). Needs vendor/README.md's
        // pingora-runtime 0001 in any process that starts a server after
        // another stopped.
        work_stealing: config.threads > 1,
        grace_period_seconds: Some(pingora_grace.as_secs()),
        // After the grace, runtimes stop at once: what is still in flight
        // is cut (and counted by the drain); the flush has its own bound.
        graceful_shutdown_timeout_seconds: Some(config.shutdown_timeout.as_secs().min(1)),
        // POSTs are never retried once sent; connect failures are not either.
        // A request refused a stale pooled connection before any of it was
        // sent (proxy::stale) is, on the next pooled connection, which may be
        // stale too: up to three times.
        max_retries: 3,
        // Every timer of a second or more on tokio's timer wheel, which
        // wakes only for a deadline, not pingora's clock thread, which
        // wakes 100 times a second whether a timer is due or not (its
        // pool's idle timers too: vendor/README.md, pingora-timeout 0001).
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        ..Default::default()
    };
    let analyses = Analyses::start(config, &metrics).map_err(StartError::Thread)?;
    let live = analyses.as_ref().map(|a| a.live.clone());
    // Nothing here reads pingora's per-stream read and write pending times,
    // and keeping them costs two clock reads for every read that waits:
    // every paced event (vendor/README.md, pingora-core 0009).
    pingora::protocols::l4::stream::set_pending_time_tracking(false);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut taps = Vec::with_capacity(config.taps.len());
    let mut record_logs = Vec::new();
    for (i, tap_cfg) in config.taps.iter().enumerate() {
        let labels = crate::metrics::TapLabels {
            tap: tap_cfg.name.clone(),
            boundary: tap_cfg.boundary,
        };
        let labels_for_fleet = labels.clone();
        let slo = config
            .analysis
            .as_ref()
            .map(|a| a.settings.slo)
            .unwrap_or_default();
        let record_log =
            match &tap_cfg.record_log {
                None => None,
                Some(rl) => Some(RecordLog::open(rl, metrics.clone(), labels).map_err(
                    |source| StartError::RecordLog {
                        key: format!("taps[{i}].record_log.path"),
                        path: rl.path.display().to_string(),
                        source,
                    },
                )?),
            };
        record_logs.extend(record_log.as_ref().map(RecordLog::flusher));
        let tap_live = live.as_ref().and_then(|l| l.tap(&tap_cfg.name));
        let tenant = config
            .analysis
            .as_ref()
            .map_or(tokentap_core::analysis::TenantSource::ApiKey, |a| {
                a.settings.tenant.clone()
            });
        let sampled = tap_live.is_some() || record_log.is_some();
        let analysis = TapAnalysis {
            tenant: sampled.then_some(tenant),
            live: tap_live.clone(),
        };
        let sinks = sinks::for_tap(TapSinks {
            metrics: metrics.clone(),
            hooks: hooks.records.clone(),
            spans: spans.clone(),
            analysis: sampled.then(|| AnalysisSink {
                live: tap_live,
                record_log,
                fleet: FleetSeries::new(metrics.clone(), labels_for_fleet, slo),
            }),
            correlator: correlator.clone().map(CorrelatorSink),
        });
        let parts = TapParts {
            metrics: metrics.clone(),
            observer: hooks.observer.clone(),
            correlator: correlator.clone(),
            sinks,
            fingerprint: correlator.is_some() || spans.is_some(),
            span_events,
            analysis,
        };
        let tap = Arc::new(Tap::new(tap_cfg.clone(), parts));
        taps.push(tap.clone());
        let mut svc = Service::new(
            format!("tap {}", tap_cfg.name),
            GuardedApp::new(tap_proxy(&server.configuration, tap.clone()), tap),
        );
        svc.threads = Some(config.threads);
        svc.add_tcp(&tap_cfg.listen.to_string());
        server.add_service(svc);
    }
    let mut admin = Service::new(
        "admin".to_string(),
        pingora::apps::http_app::HttpServer::new_app(AdminApp::new(
            metrics.clone(),
            ready.clone(),
            live,
        )),
    );
    admin.threads = Some(1);
    admin.add_tcp(&config.admin_listen.to_string());
    server.add_service(admin);
    Ok(Built {
        server,
        metrics,
        ready,
        otlp,
        analyses,
        taps,
        record_logs,
    })
}

/// Waits until every listener of `config` accepts connections.
pub(crate) fn wait_listening(config: &Config, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let addrs: Vec<SocketAddr> = std::iter::once(config.admin_listen)
        .chain(config.taps.iter().map(|t| t.listen))
        .collect();
    for addr in addrs {
        loop {
            let probe = match addr {
                // A wildcard listener is reachable on loopback.
                SocketAddr::V4(a) if a.ip().is_unspecified() => {
                    SocketAddr::from(([127, 0, 0, 1], a.port()))
                }
                SocketAddr::V6(a) if a.ip().is_unspecified() => {
                    SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], a.port()))
                }
                a => a,
            };
            if TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    true
}

/// A server running on a background thread.
pub struct Running {
    pub metrics: Arc<Metrics>,
    pub ready: Readiness,
    stop: watch::Sender<Option<StopKind>>,
    thread: Option<JoinHandle<()>>,
    otlp: Option<Otlp>,
    /// Whether the OTLP flush at stop finished within its bound.
    pub otlp_flushed: Option<bool>,
    /// Live analyses (tests close windows by hand with `close_window`).
    pub analyses: Option<Analyses>,
    /// Set by `spawn_file`: reloads the config file.
    pub reloader: Option<Arc<Reloader>>,
    pub taps: Vec<Arc<Tap>>,
}

#[derive(Debug, Clone, Copy)]
enum StopKind {
    Fast,
    Graceful,
}

struct StopWatch(watch::Receiver<Option<StopKind>>);

#[async_trait]
impl ShutdownSignalWatch for StopWatch {
    async fn recv(&self) -> ShutdownSignal {
        let mut rx = self.0.clone();
        let kind = match rx.wait_for(Option::is_some).await {
            Ok(v) => *v,
            Err(_) => Some(StopKind::Fast),
        };
        match kind {
            Some(StopKind::Graceful) => ShutdownSignal::GracefulTerminate,
            _ => ShutdownSignal::FastShutdown,
        }
    }
}

/// Starts the server on a background thread; returns once every listener
/// accepts connections.
pub fn spawn(config: &Config, hooks: Hooks) -> Result<Running, StartError> {
    let Built {
        server,
        metrics,
        ready,
        otlp,
        analyses,
        taps,
        record_logs: _,
    } = build(config, hooks)?;
    let (stop, rx) = watch::channel(None);
    let thread = std::thread::Builder::new()
        .name("tokentap-server".into())
        .spawn(move || {
            server.run(RunArgs {
                shutdown_signal: Box::new(StopWatch(rx)),
            })
        })
        .map_err(StartError::Thread)?;
    let limit = Duration::from_secs(10);
    let mut running = Running {
        metrics,
        ready,
        stop,
        thread: Some(thread),
        otlp,
        otlp_flushed: None,
        analyses,
        reloader: None,
        taps,
    };
    if !wait_listening(config, limit) {
        running.stop();
        return Err(StartError::NotReady(limit));
    }
    running.ready.set(true);
    Ok(running)
}

/// `spawn` for a config file that `Running::reload` re-reads.
pub fn spawn_file(path: &Path, hooks: Hooks) -> Result<Running, StartError> {
    let config = Config::load(path).map_err(|e| StartError::Config(e.to_string()))?;
    let mut running = spawn(&config, hooks)?;
    running.reloader = Some(Arc::new(Reloader::new(
        path,
        config,
        running.taps.clone(),
        running.metrics.clone(),
    )));
    Ok(running)
}

impl Running {
    /// Re-reads the config file (`spawn_file` only), as SIGHUP does.
    pub fn reload(&self) -> Option<reload::Outcome> {
        self.reloader.as_ref().map(|r| r.reload())
    }

    /// Fast shutdown (like SIGINT); returns when the server thread ended.
    pub fn stop(&mut self) {
        self.finish(StopKind::Fast);
    }

    /// Graceful shutdown (like SIGTERM).
    pub fn stop_graceful(&mut self) {
        self.finish(StopKind::Graceful);
    }

    fn finish(&mut self, kind: StopKind) {
        self.ready.set(false);
        let _ = self.stop.send(Some(kind));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(o) = self.otlp.take() {
            self.otlp_flushed = Some(o.shutdown());
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A tap's pingora proxy with its HTTP/1 and HTTP/2 server options.
/// Connection-level options are read here once: changing them needs a
/// restart (`reload::diff` says so).
fn tap_proxy(conf: &Arc<ServerConf>, tap: Arc<Tap>) -> HttpProxy<TapProxy> {
    let cfg = tap.settings().config.clone();
    let mut proxy = pingora::proxy::http_proxy(conf, TapProxy::new(tap));
    let mut opts = HttpServerOptions::default();
    opts.h2c = cfg.h2c;
    opts.h2_idle_timeout = Some(cfg.clients.keepalive);
    proxy.server_options = Some(opts);
    let mut h2 = H2Options::new();
    h2.max_concurrent_streams(cfg.clients.h2_max_streams);
    proxy.h2_options = Some(h2);
    proxy
}
