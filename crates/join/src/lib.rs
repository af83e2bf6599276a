//! `tokentap join`: attribution across machines. Every tap exports one
//! span per request (OTLP); the OpenTelemetry Collector's `loadbalancing`
//! exporter (`routing_key: traceID`) sends every span of a trace to the same
//! joiner, which rebuilds each tap's record from its span
//! (`tokentap_core::correlate::span`), joins them with the same correlator
//! as a process's own taps — on the taps' own clocks (`Clocks::PerTap`):
//! only durations measured at one tap are compared — and exports the same
//! attribution families on its `/metrics` and, if configured, over OTLP.
//!
//! Every receiver is bounded against whoever can reach it: work per export
//! (`tokentap_core::otlp`), a connection cap, a request-head deadline and a
//! body deadline, TLS and a bearer token when configured; every label value
//! a span names is bounded (`tokentap_telemetry::correlation::metrics`).
//!
//! Owns: the receivers (`http`: OTLP/HTTP on the shared host; `grpc`:
//! OTLP/gRPC on tonic), reading and counting exports (`receiver`), its
//! config (`config`). Must not touch: what a figure means (the core's
//! `correlate`), a tap's code (`tokentap_proxy`).

pub mod config;
pub mod grpc;
mod grpc_io;
pub mod http;
pub mod receiver;

use config::JoinConfig;
use receiver::Receiver;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::correlate::{AttributionSink, Correlator};
use tokentap_core::labels::ListenerName;
use tokentap_host::admin::{AdminApp, Readiness};
use tokentap_host::serve::{reserve, UnixSignals};
use tokentap_host::{Host, HostError, Listener, Running};
use tokentap_telemetry::listeners::ListenerAdmission;
use tokentap_telemetry::otlp::Otlp;
use tokentap_telemetry::Registry;

/// A startup problem of the joiner.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Otlp(#[from] tokentap_telemetry::otlp::OtlpError),
    #[error("receiver.tls: {0}")]
    Tls(String),
}

/// A running joiner (on background threads: the tests and the demo).
pub struct Joiner {
    pub registry: Arc<Registry>,
    pub ready: Readiness,
    pub correlator: Arc<Correlator>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    running: Option<Running>,
    grpc_server: Option<grpc::Serving>,
    otlp: Option<Otlp>,
    settle: Duration,
}

/// Everything but the running: the host with its listeners, the gRPC
/// receiver to start, and what stopping needs.
struct Parts {
    host: Host,
    registry: Arc<Registry>,
    ready: Readiness,
    correlator: Arc<Correlator>,
    receiver: Arc<Receiver>,
    grpc: SocketAddr,
    http: SocketAddr,
    admin: SocketAddr,
    otlp: Option<Otlp>,
}

fn prepare(
    cfg: &JoinConfig,
    attributions: Vec<Arc<dyn AttributionSink>>,
) -> Result<Parts, JoinError> {
    let mut registry = Registry::new()?;
    let mut otlp = None;
    if let Some(o) = &cfg.otlp {
        // The joiner makes no spans of its own: metrics only.
        let mut o = o.clone();
        o.traces = false;
        let (started, instruments) = Otlp::start(
            &o,
            &registry.prom,
            Default::default(),
            tokentap_core::table::Resolution::Fine,
        )?;
        if let Some(i) = instruments {
            registry = registry.with_otel(i);
        }
        otlp = Some(started);
    }
    let registry = Arc::new(registry);
    let correlator = tokentap_telemetry::correlation::start(
        cfg.correlation,
        cfg.labels,
        &registry,
        None,
        &attributions,
    )
    .map_err(HostError::Thread)?;
    let receiver = Arc::new(Receiver::new(
        correlator.clone(),
        registry.clone(),
        cfg.max_body_bytes,
        cfg.otlp_limits,
        cfg.token.clone(),
    ));
    let grpc = reserve("receiver.grpc_listen", cfg.grpc_listen)?;
    let ready = Readiness::default();
    let mut host = Host::new(pingora::server::configuration::ServerConf {
        threads: 1,
        ..Default::default()
    });
    let http_admission = ListenerAdmission::new(
        ListenerName::OtlpHttp,
        cfg.receiver_limits,
        registry.clone(),
    );
    let http = host.http(
        "otlp http",
        &Listener {
            tls: cfg.tls.clone(),
            ..Listener::tcp("receiver.http_listen", cfg.http_listen)
        },
        http::OtlpHttpApp::new(receiver.clone(), http_admission.clone(), cfg.body_timeout),
        http_admission,
    )?;
    let admin = host.admin(
        &Listener::tcp("admin.listen", cfg.admin_listen),
        AdminApp::new(registry.prom.registry.clone(), ready.clone(), None),
        ListenerAdmission::new(ListenerName::Admin, cfg.admin_limits, registry.clone()),
    )?;
    Ok(Parts {
        host,
        registry,
        ready,
        correlator,
        receiver,
        grpc,
        http,
        admin,
        otlp,
    })
}

fn start_grpc(cfg: &JoinConfig, p: &Parts) -> Result<grpc::Serving, JoinError> {
    let admission = ListenerAdmission::new(
        ListenerName::OtlpGrpc,
        cfg.receiver_limits,
        p.registry.clone(),
    );
    grpc::Serving::start(
        p.receiver.clone(),
        p.grpc,
        admission,
        cfg.body_timeout,
        cfg.tls.as_ref(),
    )
}

impl Joiner {
    /// Starts the joiner on background threads; `attributions` also
    /// receive every conclusion (tests). Returns once its listeners accept
    /// connections.
    pub fn start(
        cfg: &JoinConfig,
        attributions: Vec<Arc<dyn AttributionSink>>,
    ) -> Result<Joiner, JoinError> {
        let p = prepare(cfg, attributions)?;
        let grpc_server = start_grpc(cfg, &p)?;
        let limit = Duration::from_secs(10);
        let Parts {
            host,
            registry,
            ready,
            correlator,
            grpc,
            http,
            admin,
            otlp,
            ..
        } = p;
        let running = host.spawn("tokentap-join", limit)?;
        if !tokentap_host::wait_listening(&[grpc], limit) {
            return Err(HostError::NotReady(limit).into());
        }
        ready.set(true);
        Ok(Joiner {
            registry,
            ready,
            correlator,
            http,
            grpc,
            admin,
            running: Some(running),
            grpc_server: Some(grpc_server),
            otlp,
            settle: cfg.correlation.settle + cfg.correlation.max_age,
        })
    }

    /// Stops the receivers, resolves every group still waiting, flushes
    /// OTLP (bounded).
    pub fn stop(&mut self) {
        self.ready.set(false);
        if let Some(mut r) = self.running.take() {
            r.stop();
        }
        if let Some(g) = self.grpc_server.take() {
            g.stop();
        }
        finish(&self.correlator, self.settle, self.otlp.take());
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        if self.running.is_some() {
            self.stop();
        }
    }
}

/// What is still settling is resolved now rather than lost; then the
/// joiner's own metrics are flushed.
fn finish(correlator: &Correlator, settle: Duration, otlp: Option<Otlp>) {
    correlator.sweep(Instant::now() + settle);
    if let Some(o) = otlp {
        if !o.shutdown() {
            tracing::warn!("OTLP flush did not finish within its bound");
        }
    }
}

/// `tokentap join -c join.yaml`: runs until SIGTERM or SIGINT (both stop
/// at once: the joiner holds no request; groups still settling are
/// resolved before it exits).
pub fn run(cfg: &JoinConfig) -> Result<(), JoinError> {
    let p = prepare(cfg, Vec::new())?;
    let grpc_server = start_grpc(cfg, &p)?;
    let addrs = p.host.addrs().to_vec();
    let ready = p.ready.clone();
    let (http, grpc, admin) = (p.http, p.grpc, p.admin);
    std::thread::Builder::new()
        .name("tokentap-ready".into())
        .spawn(move || {
            if tokentap_host::wait_listening(
                &[&addrs[..], &[grpc]].concat(),
                Duration::from_secs(30),
            ) {
                ready.set(true);
                tracing::info!(%http, %grpc, %admin, "tokentap join ready");
            } else {
                tracing::error!("listeners did not come up within 30 s");
            }
        })
        .map_err(HostError::Thread)?;
    let Parts {
        host,
        correlator,
        otlp,
        ready,
        ..
    } = p;
    host.run(Box::new(UnixSignals));
    ready.set(false);
    grpc_server.stop();
    finish(
        &correlator,
        cfg.correlation.settle + cfg.correlation.max_age,
        otlp,
    );
    Ok(())
}
