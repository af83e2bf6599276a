//! Builds and runs the server for a validated `Config` on the shared host
//! (`tokentap_host::Host`): one proxy listener per tap (own runtime, own
//! upstream pool, the tap's own limits) and the admin listener.
//!
//! Two ways to run it: `foreground::run` blocks the calling thread and obeys Unix
//! signals (SIGINT fast; SIGTERM graceful: `/readyz` 503 at once, listeners
//! closed after `drain_notice`, in-flight requests get `grace_period`;
//! SIGHUP reloads the config file) — that is `tokentap run`;
//! `spawn` runs it on a background thread and returns a `Running` handle to
//! stop it — that is the demo and the tests. Both first check that every
//! listen address can be bound, so a taken port is a clear error naming the
//! key instead of a panic inside pingora.

use crate::config::Config;
use crate::limits::app::TapAdmission;
use crate::live_analyses::Analyses;
use crate::metrics::Metrics;
use crate::proxy::{Tap, TapAnalysis, TapParts, TapProxy};
use crate::recordlog::{LogFlusher, RecordLog};
use crate::reload::{self, Reloader};
use crate::sinks::{self, AnalysisSink, CorrelatorSink, FleetSeries, Hooks, TapSinks};
use pingora::apps::HttpServerOptions;
use pingora::protocols::http::v2::server::H2Options;
use pingora::proxy::HttpProxy;
use pingora::server::configuration::ServerConf;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::correlate::CorrelationConfig;
use tokentap_core::labels::ListenerName;
use tokentap_core::tap::Boundary;
use tokentap_host::admin::{AdminApp, Readiness};
use tokentap_host::{Guarded, Host, HostError, Listener};
use tokentap_telemetry::listeners::ListenerAdmission;
use tokentap_telemetry::otlp::Otlp;

/// A startup problem.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Otlp(#[from] tokentap_telemetry::otlp::OtlpError),
    #[error("{0}")]
    Config(String),
    #[error("{key}: cannot open {path}: {source}")]
    RecordLog {
        key: String,
        path: String,
        source: std::io::Error,
    },
}

impl StartError {
    pub(crate) fn thread(e: std::io::Error) -> StartError {
        StartError::Host(HostError::Thread(e))
    }
}

/// Every listener of `config`, with the key each comes from.
fn listeners(config: &Config) -> Vec<Listener> {
    let mut all = vec![Listener::tcp("admin.listen", config.admin_listen)];
    for (i, t) in config.taps.iter().enumerate() {
        all.push(Listener {
            threads: config.threads,
            ..Listener::tcp(format!("taps[{i}].listen"), t.listen)
        });
    }
    all
}

/// Checks that every listen address can be bound right now.
pub fn check_listeners(config: &Config) -> Result<(), StartError> {
    for l in listeners(config) {
        tokentap_host::serve::reserve(&l.key, l.addr)?;
    }
    Ok(())
}

/// The server with its listeners, and what is shared with it.
pub struct Built {
    pub host: Host,
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
    let mut metrics = Metrics::new(config.max_models, config.buckets)?
        .with_max_tools(config.max_tools)
        .with_max_tenants(
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
        let (o, instruments) = Otlp::start(cfg, &metrics.prom, providers, config.buckets)?;
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
            tokentap_telemetry::correlation::start(
                CorrelationConfig {
                    // The compound stage holds every call for a while: only
                    // where a compound tap may claim them.
                    compound_links: cfg.compound_links
                        && config.taps.iter().any(|t| t.boundary == Boundary::Compound),
                    ..cfg
                },
                Default::default(),
                &metrics.registry,
                spans.clone(),
                &hooks.attributions,
            )
            .map_err(StartError::thread)?,
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
    let analyses = Analyses::start(config, &metrics).map_err(StartError::thread)?;
    let live = analyses.as_ref().map(|a| a.live.clone());
    // Nothing here reads pingora's per-stream read and write pending times,
    // and keeping them costs two clock reads for every read that waits:
    // every paced event (vendor/README.md, pingora-core 0009).
    pingora::protocols::l4::stream::set_pending_time_tracking(false);
    let mut host = Host::new(conf);
    let mut taps = Vec::with_capacity(config.taps.len());
    let mut record_logs = Vec::new();
    for (i, tap_cfg) in config.taps.iter().enumerate() {
        let labels = crate::metrics::TapLabels {
            tap: tap_cfg.name.clone(),
            boundary: tap_cfg.boundary,
        };
        let labels_for_fleet = labels.clone();
        let calls =
            crate::calls::CallTap::for_tap(&labels, &metrics, spans.clone(), correlator.clone());
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
            calls,
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
        let proxy = tap_proxy(host.configuration(), tap.clone());
        let listener = Listener {
            threads: config.threads,
            ..Listener::tcp(format!("taps[{i}].listen"), tap_cfg.listen)
        };
        host.listen(
            &format!("tap {}", tap_cfg.name),
            &listener,
            Guarded::new(proxy, TapAdmission::new(tap)),
        )?;
    }
    host.admin(
        &Listener::tcp("admin.listen", config.admin_listen),
        AdminApp::new(metrics.prom.registry.clone(), ready.clone(), live),
        ListenerAdmission::new(
            ListenerName::Admin,
            config.admin_limits,
            metrics.registry.clone(),
        ),
    )?;
    Ok(Built {
        host,
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
    let addrs: Vec<SocketAddr> = listeners(config).iter().map(|l| l.addr).collect();
    tokentap_host::wait_listening(&addrs, limit)
}

/// A server running on a background thread.
pub struct Running {
    pub metrics: Arc<Metrics>,
    pub ready: Readiness,
    host: Option<tokentap_host::Running>,
    otlp: Option<Otlp>,
    /// Whether the OTLP flush at stop finished within its bound.
    pub otlp_flushed: Option<bool>,
    /// Live analyses (tests close windows by hand with `close_window`).
    pub analyses: Option<Analyses>,
    /// Set by `spawn_file`: reloads the config file.
    pub reloader: Option<Arc<Reloader>>,
    pub taps: Vec<Arc<Tap>>,
}

/// Starts the server on a background thread; returns once every listener
/// accepts connections.
pub fn spawn(config: &Config, hooks: Hooks) -> Result<Running, StartError> {
    let Built {
        host,
        metrics,
        ready,
        otlp,
        analyses,
        taps,
        record_logs: _,
    } = build(config, hooks)?;
    let running = host.spawn("tokentap-server", Duration::from_secs(10))?;
    ready.set(true);
    Ok(Running {
        metrics,
        ready,
        host: Some(running),
        otlp,
        otlp_flushed: None,
        analyses,
        reloader: None,
        taps,
    })
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
        self.finish(false);
    }

    /// Graceful shutdown (like SIGTERM).
    pub fn stop_graceful(&mut self) {
        self.finish(true);
    }

    fn finish(&mut self, graceful: bool) {
        self.ready.set(false);
        if let Some(mut h) = self.host.take() {
            if graceful {
                h.stop_graceful();
            } else {
                h.stop();
            }
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
