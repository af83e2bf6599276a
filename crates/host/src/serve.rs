//! One way to host a server: a pingora `Server` with its listeners, each
//! bound first (a taken port is an error naming its config key, and port 0
//! resolves to a real port), run on the caller's thread until a signal
//! (`Host::run`: `tokentap run`, `tokentap join`) or on a background thread
//! until a handle stops it (`Host::spawn`: the demo, the tests), and one
//! wait-until-listening for both and for tools.
//!
//! Must not touch: what a listener serves.

use crate::admin::AdminApp;
use crate::guard::Guarded;
use crate::tls::TlsFiles;
use async_trait::async_trait;
use pingora::apps::http_app::{HttpServer, ServeHttp};
use pingora::apps::ServerApp;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::listening::Service;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokentap_core::limits::Admission;
use tokio::sync::watch;

/// A hosting problem, naming the config key it is about.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{key}: cannot listen on {addr}: {source}")]
    Listen {
        key: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{key}: {message}")]
    Tls { key: String, message: String },
    #[error("listeners did not come up within {0:?}")]
    NotReady(Duration),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// One listener: its config key (for errors), address, threads and TLS.
#[derive(Debug, Clone)]
pub struct Listener {
    pub key: String,
    pub addr: SocketAddr,
    pub threads: usize,
    pub tls: Option<TlsFiles>,
}

impl Listener {
    pub fn tcp(key: impl Into<String>, addr: SocketAddr) -> Listener {
        Listener {
            key: key.into(),
            addr,
            threads: 1,
            tls: None,
        }
    }
}

/// Checks that `addr` can be bound right now; returns the address it
/// would get (port 0: a free port, taken and released, which another
/// process could take in between: a start error then).
pub fn reserve(key: &str, addr: SocketAddr) -> Result<SocketAddr, HostError> {
    let l = TcpListener::bind(addr).map_err(|source| HostError::Listen {
        key: key.to_string(),
        addr,
        source,
    })?;
    l.local_addr().map_err(HostError::Thread)
}

/// Where a listener on `addr` is reached locally (a wildcard listens on
/// loopback too).
fn local(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], a.port()))
        }
        a => a,
    }
}

/// Waits until every address accepts connections, at most `limit`.
pub fn wait_listening(addrs: &[SocketAddr], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    addrs.iter().all(|a| loop {
        if TcpStream::connect_timeout(&local(*a), Duration::from_millis(200)).is_ok() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    })
}

/// A server being put together: listeners added, not yet running.
pub struct Host {
    server: Server,
    addrs: Vec<SocketAddr>,
}

impl Host {
    /// A bootstrapped pingora server with `conf`.
    pub fn new(conf: ServerConf) -> Host {
        let mut server = Server::new_with_opt_and_conf(None, conf);
        server.bootstrap();
        Host {
            server,
            addrs: Vec::new(),
        }
    }

    pub fn configuration(&self) -> &Arc<ServerConf> {
        &self.server.configuration
    }

    /// The addresses of the listeners added so far.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Adds a listener serving `app` (a tap's proxy, already guarded by
    /// its own admission); returns its address (port 0 resolved).
    pub fn listen<A>(
        &mut self,
        name: &str,
        listener: &Listener,
        app: A,
    ) -> Result<SocketAddr, HostError>
    where
        A: ServerApp + Send + Sync + 'static,
    {
        let addr = reserve(&listener.key, listener.addr)?;
        let mut svc = Service::new(name.to_string(), app);
        svc.threads = Some(listener.threads);
        match &listener.tls {
            None => svc.add_tcp(&addr.to_string()),
            Some(tls) => {
                let (cert, key) = (tls.cert.to_string_lossy(), tls.key.to_string_lossy());
                svc.add_tls(&addr.to_string(), &cert, &key)
                    .map_err(|e| HostError::Tls {
                        key: listener.key.clone(),
                        message: e.to_string(),
                    })?
            }
        }
        self.server.add_service(svc);
        self.addrs.push(addr);
        Ok(addr)
    }

    /// Adds an HTTP listener serving `app` behind `admission`'s limits (a
    /// connection cap and a request-head deadline, counted there).
    pub fn http<S>(
        &mut self,
        name: &str,
        listener: &Listener,
        app: S,
        admission: Arc<dyn Admission>,
    ) -> Result<SocketAddr, HostError>
    where
        S: ServeHttp + Send + Sync + 'static,
    {
        let app = Guarded::new(HttpServer::new_app(app), admission);
        self.listen(name, listener, app)
    }

    /// The admin endpoints (`/metrics`, `/healthz`, `/readyz`, `/report`).
    pub fn admin(
        &mut self,
        listener: &Listener,
        app: AdminApp,
        admission: Arc<dyn Admission>,
    ) -> Result<SocketAddr, HostError> {
        self.http("admin", listener, app, admission)
    }

    /// Runs on this thread until `signal` says stop.
    pub fn run(self, signal: Box<dyn ShutdownSignalWatch>) {
        self.server.run(RunArgs {
            shutdown_signal: signal,
        });
    }

    /// Runs on a background thread named `name`; returns once every
    /// listener accepts connections (at most `limit`).
    pub fn spawn(self, name: &str, limit: Duration) -> Result<Running, HostError> {
        let (stop, rx) = watch::channel(None);
        let Host { server, addrs } = self;
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                server.run(RunArgs {
                    shutdown_signal: Box::new(StopWatch(rx)),
                })
            })
            .map_err(HostError::Thread)?;
        let mut running = Running {
            stop,
            thread: Some(thread),
        };
        if !wait_listening(&addrs, limit) {
            running.stop();
            return Err(HostError::NotReady(limit));
        }
        Ok(running)
    }
}

/// How a running server stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// At once (SIGINT).
    Fast,
    /// Listeners close, work in flight gets the grace period (SIGTERM).
    Graceful,
}

struct StopWatch(watch::Receiver<Option<Stop>>);

#[async_trait]
impl ShutdownSignalWatch for StopWatch {
    async fn recv(&self) -> ShutdownSignal {
        let mut rx = self.0.clone();
        let kind = match rx.wait_for(Option::is_some).await {
            Ok(v) => *v,
            Err(_) => Some(Stop::Fast),
        };
        match kind {
            Some(Stop::Graceful) => ShutdownSignal::GracefulTerminate,
            _ => ShutdownSignal::FastShutdown,
        }
    }
}

/// A server running on a background thread; stopped (fast) when dropped.
pub struct Running {
    stop: watch::Sender<Option<Stop>>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops at once; returns when the server thread ended.
    pub fn stop(&mut self) {
        self.finish(Stop::Fast);
    }

    /// Stops gracefully; returns when the server thread ended.
    pub fn stop_graceful(&mut self) {
        self.finish(Stop::Graceful);
    }

    fn finish(&mut self, kind: Stop) {
        let _ = self.stop.send(Some(kind));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Whether it still runs.
    pub fn is_running(&self) -> bool {
        self.thread.is_some()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM or SIGINT: stop at once (a program that holds no request in
/// flight, such as the joiner).
pub struct UnixSignals;

#[async_trait]
impl ShutdownSignalWatch for UnixSignals {
    async fn recv(&self) -> ShutdownSignal {
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
        tracing::info!("stopping");
        ShutdownSignal::FastShutdown
    }
}
