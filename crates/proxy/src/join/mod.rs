//! `tokentap join`: attribution across machines. Every tap exports one
//! span per request (OTLP); the OpenTelemetry Collector's `loadbalancing`
//! exporter (`routing_key: traceID`) sends every span of a trace to the same
//! joiner, which rebuilds each tap's record from its span
//! (`tokentap_core::correlate::span`), joins them with the same correlator
//! as a process's own taps — on the taps' own clocks (`Clocks::PerTap`):
//! only durations measured at one tap are compared — and exports the same
//! attribution families on its `/metrics` and, if configured, over OTLP.
//!
//! Owns: the receivers (`http`: OTLP/HTTP; `grpc`: OTLP/gRPC), decoding and
//! counting (`receiver`), its config (`config`). Must not touch: what a
//! figure means (the core's `correlate`).

pub mod config;
pub mod grpc;
pub mod http;
pub mod receiver;

use crate::admin::{AdminApp, Readiness};
use crate::metrics::Metrics;
use crate::otlp::Otlp;
use async_trait::async_trait;
use config::JoinConfig;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::listening::Service;
use receiver::Receiver;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokentap_core::correlate::{AttributionSink, Correlator};

/// A startup problem of the joiner.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("{key}: cannot listen on {addr}: {source}")]
    Listen {
        key: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Otlp(#[from] crate::otlp::OtlpError),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    #[error("listeners did not come up within {0:?}")]
    NotReady(Duration),
}

/// A running joiner (on background threads).
pub struct Joiner {
    pub metrics: Arc<Metrics>,
    pub ready: Readiness,
    pub correlator: Arc<Correlator>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    grpc_stop: Option<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    otlp: Option<Otlp>,
    settle: Duration,
}

/// pingora's stop for the joiner: when `stop` turns true, at once.
struct StopWatch(tokio::sync::watch::Receiver<bool>);

#[async_trait]
impl ShutdownSignalWatch for StopWatch {
    async fn recv(&self) -> ShutdownSignal {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|stop| *stop).await;
        ShutdownSignal::FastShutdown
    }
}

fn bind(key: &'static str, addr: SocketAddr) -> Result<std::net::TcpListener, JoinError> {
    std::net::TcpListener::bind(addr).map_err(|source| JoinError::Listen { key, addr, source })
}

fn listening(addrs: &[SocketAddr], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    addrs.iter().all(|a| loop {
        if std::net::TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    })
}

impl Joiner {
    /// Starts the joiner; `attributions` also receive every conclusion
    /// (tests). Returns once its listeners accept connections.
    pub fn start(
        cfg: &JoinConfig,
        attributions: Vec<Arc<dyn AttributionSink>>,
    ) -> Result<Joiner, JoinError> {
        let mut metrics = Metrics::new(50)?;
        let mut otlp = None;
        if let Some(o) = &cfg.otlp {
            // The joiner makes no spans of its own: metrics only.
            let mut o = o.clone();
            o.traces = false;
            let (started, instruments) = Otlp::start(&o, &metrics.prom, Default::default())?;
            if let Some(i) = instruments {
                metrics = metrics.with_otel(i);
            }
            otlp = Some(started);
        }
        let metrics = Arc::new(metrics);
        let correlator =
            crate::correlation::start(cfg.correlation, cfg.labels, &metrics, &attributions)
                .map_err(JoinError::Thread)?;
        let receiver = Arc::new(Receiver::new(
            correlator.clone(),
            metrics.clone(),
            cfg.max_body_bytes,
            cfg.otlp_limits,
        ));
        // Bind first: a taken port is an error naming the key, and port 0
        // (tests) resolves here.
        let grpc_listener = bind("receiver.grpc_listen", cfg.grpc_listen)?;
        let grpc = grpc_listener.local_addr().map_err(JoinError::Thread)?;
        let http = free_or(cfg.http_listen, "receiver.http_listen")?;
        let admin = free_or(cfg.admin_listen, "admin.listen")?;

        let ready = Readiness::default();
        let conf = ServerConf {
            threads: 1,
            ..Default::default()
        };
        let mut server = Server::new_with_opt_and_conf(None, conf);
        server.bootstrap();
        let mut otlp_http = Service::new(
            "otlp http".to_string(),
            pingora::apps::http_app::HttpServer::new_app(http::OtlpHttpApp(receiver.clone())),
        );
        otlp_http.threads = Some(1);
        otlp_http.add_tcp(&http.to_string());
        server.add_service(otlp_http);
        let mut admin_svc = Service::new(
            "admin".to_string(),
            pingora::apps::http_app::HttpServer::new_app(AdminApp::new(
                metrics.clone(),
                ready.clone(),
                None,
            )),
        );
        admin_svc.threads = Some(1);
        admin_svc.add_tcp(&admin.to_string());
        server.add_service(admin_svc);

        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut threads = Vec::new();
        threads.push(
            std::thread::Builder::new()
                .name("tokentap-join".into())
                .spawn(move || {
                    server.run(RunArgs {
                        shutdown_signal: Box::new(StopWatch(stop_rx)),
                    })
                })
                .map_err(JoinError::Thread)?,
        );
        let (grpc_stop, grpc_stop_rx) = tokio::sync::oneshot::channel();
        let r = receiver.clone();
        threads.push(
            tokentap_net::rt::spawn_async_thread("tokentap-join-grpc", move || async move {
                if let Err(e) = grpc::serve(r, grpc_listener, grpc_stop_rx).await {
                    tracing::error!("OTLP/gRPC receiver stopped: {e}");
                }
            })
            .map_err(JoinError::Thread)?,
        );
        let mut j = Joiner {
            metrics,
            ready,
            correlator,
            http,
            grpc,
            admin,
            stop,
            grpc_stop: Some(grpc_stop),
            threads,
            otlp,
            settle: cfg.correlation.settle + cfg.correlation.max_age,
        };
        let limit = Duration::from_secs(10);
        if !listening(&[http, grpc, admin], limit) {
            j.stop();
            return Err(JoinError::NotReady(limit));
        }
        j.ready.set(true);
        Ok(j)
    }

    /// Stops the receivers, resolves every group still waiting, flushes
    /// OTLP (bounded).
    pub fn stop(&mut self) {
        self.ready.set(false);
        let _ = self.stop.send(true);
        if let Some(g) = self.grpc_stop.take() {
            let _ = g.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // What is still settling is resolved now rather than lost.
        self.correlator.sweep(Instant::now() + self.settle);
        if let Some(o) = self.otlp.take() {
            if !o.shutdown() {
                tracing::warn!("OTLP flush did not finish within its bound");
            }
        }
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}

/// pingora binds its own listeners: port 0 is resolved here by binding
/// once and handing pingora the port (a race only with another process
/// taking it in between, reported as a start error).
fn free_or(addr: SocketAddr, key: &'static str) -> Result<SocketAddr, JoinError> {
    let l = bind(key, addr)?;
    l.local_addr().map_err(JoinError::Thread)
}

/// `tokentap join -c join.yaml`: runs until SIGTERM or SIGINT (both stop
/// at once: the joiner holds no request; groups still settling are
/// resolved before it exits).
pub fn run(cfg: &JoinConfig) -> Result<(), JoinError> {
    let mut j = Joiner::start(cfg, Vec::new())?;
    tracing::info!(http = %j.http, grpc = %j.grpc, admin = %j.admin, "tokentap join ready");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(JoinError::Thread)?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    });
    tracing::info!("tokentap join stopping");
    j.stop();
    Ok(())
}
