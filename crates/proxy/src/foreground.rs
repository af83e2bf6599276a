//! `tokentap run`: the server in the foreground, on Unix signals.
//!
//! - SIGTERM: `/readyz` answers 503 at once; `drain_notice` later the
//!   listeners close; from then the process exits as soon as no request is
//!   in flight at any tap, at the latest when `grace_period` ends (streams
//!   still open then are counted in `tokentap_shutdown_cut_total` and cut
//!   by the exit). Before exit the record logs and the OTLP exporters
//!   flush, bounded by `shutdown_timeout`.
//! - SIGINT: stops at once (the same bounded flush follows).
//! - A second SIGTERM or SIGINT while draining: stops at once, no flush.
//! - SIGHUP reloads the config (`reload`); SIGQUIT is pingora's graceful
//!   upgrade.
//!
//! pingora's own grace is a fixed sleep of its main thread, whatever is in
//! flight; so the drain thread here watches the taps' in-flight counts and
//! ends the process itself once they reach zero and the flush is done.
//! (`server::spawn`, the in-process server of the demo and the tests, keeps
//! pingora's stop: it must not end the process.)

use crate::config::Config;
use crate::metrics::Metrics;
use crate::proxy::Tap;
use crate::recordlog::LogFlusher;
use crate::reload::{self, Reloader};
use crate::server::{build_with_grace, wait_listening, Built, StartError};
use crate::sinks::Hooks;
use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_core::table;
use tokentap_host::admin::Readiness;
use tokentap_telemetry::otlp::Otlp;

/// How often the drain looks at the in-flight counts.
const POLL: Duration = Duration::from_millis(10);

/// pingora's own grace runs this much longer than ours: the drain ends the
/// process itself (and counts what it cuts); pingora's is the backstop.
const BACKSTOP: Duration = Duration::from_secs(5);

/// Runs until stopped (see the module docs); blocks the caller. With
/// `source` (the config file), SIGHUP and, if configured, a change of the
/// file's content reload it.
pub fn run(config: &Config, hooks: Hooks, source: Option<&Path>) -> Result<(), StartError> {
    // Before the server's threads exist: a table grown now never stalls a
    // stream later (`fds`).
    let headroom = crate::fds::prepare();
    tracing::info!(
        nofile_soft_before = ?headroom.soft_before,
        nofile_soft = ?headroom.soft,
        nofile_hard = ?headroom.hard,
        fd_table = ?headroom.table,
        "descriptor headroom"
    );
    let Built {
        host,
        metrics,
        ready,
        otlp,
        analyses,
        taps,
        record_logs,
    } = build_with_grace(config, hooks, config.grace_period + BACKSTOP)?;
    if let Some(path) = source {
        let reloader = Arc::new(Reloader::new(
            path,
            config.clone(),
            taps.clone(),
            metrics.clone(),
        ));
        reload::spawn_triggers(reloader, config.watch_config).map_err(StartError::thread)?;
    }
    let cfg = config.clone();
    let ready_set = ready.clone();
    std::thread::Builder::new()
        .name("tokentap-ready".into())
        .spawn(move || {
            if wait_listening(&cfg, Duration::from_secs(30)) {
                ready_set.set(true);
                tracing::info!(admin = %cfg.admin_listen, taps = cfg.taps.len(), "tokentap ready");
            } else {
                tracing::error!("listeners did not come up within 30 s");
            }
        })
        .map_err(StartError::thread)?;
    let flush = Arc::new(Flush {
        otlp: Mutex::new(otlp),
        logs: record_logs,
        bound: config.shutdown_timeout,
    });
    let (term_tx, term_rx) = mpsc::channel();
    let drain = Drain {
        taps,
        metrics,
        notice: config.drain_notice,
        grace: config.grace_period,
        flush: flush.clone(),
    };
    std::thread::Builder::new()
        .name("tokentap-drain".into())
        .spawn(move || drain.run(term_rx))
        .map_err(StartError::thread)?;
    let _analyses = analyses;
    host.run(Box::new(SignalWatch {
        ready,
        notice: config.drain_notice,
        term: term_tx,
    }));
    // pingora stopped: SIGINT (or its backstop grace ended).
    flush.run();
    Ok(())
}

/// What is flushed before exit, once, whoever gets there first.
struct Flush {
    otlp: Mutex<Option<Otlp>>,
    logs: Vec<LogFlusher>,
    bound: Duration,
}

impl Flush {
    fn run(&self) {
        let deadline = Instant::now() + self.bound;
        for log in &self.logs {
            if !log.flush(deadline) {
                tracing::warn!("a record log did not flush within shutdown_timeout_seconds");
            }
        }
        let otlp = self.otlp.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(o) = otlp {
            if !o.shutdown_within(deadline.saturating_duration_since(Instant::now())) {
                tracing::warn!("OTLP flush did not finish within its bound; the rest is dropped");
            }
        }
    }
}

/// Watches a SIGTERM's drain (see the module docs).
struct Drain {
    taps: Vec<Arc<Tap>>,
    metrics: Arc<Metrics>,
    notice: Duration,
    grace: Duration,
    flush: Arc<Flush>,
}

impl Drain {
    fn in_flight(&self) -> i64 {
        self.taps.iter().map(|t| t.in_flight.get()).sum()
    }

    /// Counts the streams the end of the grace cuts.
    fn cut(&self) {
        for tap in &self.taps {
            let open = tap.in_flight.get();
            if let Ok(n @ 1..) = u64::try_from(open) {
                self.metrics.add(&table::SHUTDOWN_CUT, &tap.labels, n);
                tracing::warn!(tap = %tap.labels.tap, streams = n, "grace over: cutting the requests still in flight");
            }
        }
    }

    /// Waits for the SIGTERM (`term` carries its time), then for the drain.
    fn run(self, term: Receiver<Instant>) {
        let Ok(term_at) = term.recv() else {
            return; // the server stopped without a SIGTERM
        };
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return; // pingora's grace still applies
        };
        rt.block_on(self.watch(term_at));
    }

    async fn watch(&self, term_at: Instant) {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        let closed = term_at + self.notice;
        let deadline = closed + self.grace;
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                _ = term.recv() => stop_now("SIGTERM"),
                _ = int.recv() => stop_now("SIGINT"),
                _ = tick.tick() => {
                    let now = Instant::now();
                    if now < closed {
                        continue;
                    }
                    if self.in_flight() <= 0 {
                        self.flush.run();
                        tracing::info!(after = ?term_at.elapsed(), "drained: nothing in flight; exiting");
                        std::process::exit(0);
                    }
                    if now >= deadline {
                        // Count what is cut, flush (the count too), end:
                        // the kernel closes the streams still open.
                        self.cut();
                        self.flush.run();
                        tracing::info!(after = ?term_at.elapsed(), "grace over; exiting");
                        std::process::exit(0);
                    }
                }
            }
        }
    }
}

fn stop_now(which: &str) -> ! {
    tracing::warn!("{which} during the drain: stopping at once");
    std::process::exit(1)
}

/// Unix signals for `run`: SIGTERM marks the process not ready at once,
/// starts the drain and lets `notice` pass (load balancers see `/readyz`
/// 503 and stop sending) before pingora closes the listeners; SIGINT stops
/// at once; SIGQUIT is pingora's graceful upgrade.
struct SignalWatch {
    ready: Readiness,
    notice: Duration,
    term: Sender<Instant>,
}

#[async_trait]
impl ShutdownSignalWatch for SignalWatch {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot listen for signals; stopping");
            return ShutdownSignal::FastShutdown;
        };
        tokio::select! {
            _ = term.recv() => {
                self.ready.set(false);
                let _ = self.term.send(Instant::now());
                tracing::info!(notice = ?self.notice, "SIGTERM: not ready; draining");
                tokio::time::sleep(self.notice).await;
                ShutdownSignal::GracefulTerminate
            }
            _ = int.recv() => ShutdownSignal::FastShutdown,
            _ = quit.recv() => ShutdownSignal::GracefulUpgrade,
        }
    }
}
