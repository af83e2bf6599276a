//! One tap's shared state: labels, metric handles, the listeners it reports
//! to, and its settings (validated config + the upstream peer template).
//! Settings sit behind an `ArcSwap`: every request takes one snapshot in
//! `new_ctx` and uses it to the end, so replacing the settings (hot reload)
//! never changes a request mid-flight.

use super::upstream_io::TimedConnector;
use crate::config::TapConfig;
use crate::metrics::EventObserver;
use crate::metrics::{InFlight, Metrics, TapLabels};
use crate::sinks::{Finished, RecordSink, SinkPanics};
use arc_swap::ArcSwap;
use pingora::upstreams::peer::HttpPeer;
use pingora::utils::tls::{parse_x509, WrappedX509};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::TenantSource;
use tokentap_core::correlate::Correlator;
use tokentap_core::inject::InjectResult;
use tokentap_core::labels::{Injection, Rejected};
use tokentap_core::limits::RejectReason;

/// How long an idle pooled upstream connection is kept.
const UPSTREAM_POOL_IDLE: Duration = Duration::from_secs(60);

/// What a request reads from its tap's configuration, swapped as a whole.
pub struct TapSettings {
    pub config: TapConfig,
    peer: HttpPeer,
    /// Whether this upstream closes connections after responses: learned
    /// anew when a reload swaps the settings (the upstream may be another).
    pub reuse: super::stale::ReuseHint,
}

impl TapSettings {
    pub fn new(config: TapConfig) -> Self {
        let peer = peer_template(&config);
        TapSettings {
            config,
            peer,
            reuse: Default::default(),
        }
    }

    /// The upstream peer for one request.
    pub fn peer(&self) -> HttpPeer {
        self.peer.clone()
    }
}

pub struct Tap {
    settings: ArcSwap<TapSettings>,
    /// Name and boundary: fixed for the life of the tap.
    pub labels: TapLabels,
    pub metrics: Arc<Metrics>,
    pub in_flight: InFlight,
    /// Sees every token event (tests).
    pub observer: Option<Arc<dyn EventObserver>>,
    /// Joins this process's taps (when correlation is on): a request keeps
    /// its trace open while it runs.
    pub correlator: Option<Arc<Correlator>>,
    /// Where a finished request goes, in order (`sinks::for_tap`).
    sinks: Vec<Arc<dyn RecordSink>>,
    /// Each sink's guard and its panic counter.
    pub panics: SinkPanics,
    /// Requests are fingerprinted (a join needs it: this process's
    /// correlator, or a joiner reading the spans).
    pub fingerprint: bool,
    /// Token-event times kept per request (correlation, span events,
    /// analyses).
    event_cap: usize,
    /// The request-time side of the analyses.
    pub analysis: TapAnalysis,
    /// A tool or retrieval tap's calls (`crate::calls`).
    pub calls: Option<Arc<crate::calls::CallTap>>,
}

/// What a request needs of the analyses while it runs (all off by default).
#[derive(Default)]
pub struct TapAnalysis {
    /// The live analyses' in-flight integral.
    pub live: Option<Arc<TapLive>>,
    /// Set when the tap samples requests (live analyses or a record log):
    /// requests then carry a tenant and prompt-prefix hashes.
    pub tenant: Option<TenantSource>,
}

impl TapAnalysis {
    /// Whether requests are sampled at all.
    pub fn on(&self) -> bool {
        self.tenant.is_some()
    }
}

/// What a tap is built from (`server::build`).
pub struct TapParts {
    /// The call state of a tool or retrieval tap.
    pub calls: Option<Arc<crate::calls::CallTap>>,
    pub metrics: Arc<Metrics>,
    pub observer: Option<Arc<dyn EventObserver>>,
    pub correlator: Option<Arc<Correlator>>,
    pub sinks: Vec<Arc<dyn RecordSink>>,
    /// Fingerprint requests (correlation here, or spans for a joiner).
    pub fingerprint: bool,
    /// Token events the span sink keeps per request (0: none).
    pub span_events: usize,
    pub analysis: TapAnalysis,
}

impl Tap {
    pub fn new(config: TapConfig, parts: TapParts) -> Self {
        let labels = TapLabels {
            tap: config.name.clone(),
            boundary: config.boundary,
        };
        let in_flight = parts.metrics.in_flight(&labels);
        let event_cap = parts
            .correlator
            .as_ref()
            .map_or(0, |c| c.config().max_events)
            .max(parts.span_events)
            .max(if parts.analysis.on() {
                tokentap_core::analysis::sample::MAX_GAPS + 1
            } else {
                0
            });
        Tap {
            settings: ArcSwap::from_pointee(TapSettings::new(config)),
            panics: SinkPanics::new(parts.metrics.clone(), labels.clone()),
            labels,
            metrics: parts.metrics,
            in_flight,
            observer: parts.observer,
            correlator: parts.correlator,
            sinks: parts.sinks,
            fingerprint: parts.fingerprint,
            event_cap,
            analysis: parts.analysis,
            calls: parts.calls,
        }
    }

    /// Token-event times to keep per request (0: none).
    pub fn event_cap(&self) -> usize {
        self.event_cap
    }

    /// Hands a finished request to every sink of the tap, each under its
    /// own guard: a sink that panics loses its own view only.
    pub fn emit(&self, finished: &Finished<'_>) {
        for sink in &self.sinks {
            let fault = finished.fault.filter(|_| !sink.guards_its_parts());
            self.panics
                .guard(sink.name(), fault, || sink.finished(finished));
        }
    }

    /// The current settings (one snapshot per request).
    pub fn settings(&self) -> Arc<TapSettings> {
        self.settings.load_full()
    }

    /// Replaces the settings for requests that start from now on. The
    /// caller keeps name, boundary and listen address unchanged (those need
    /// a restart).
    pub fn replace(&self, config: TapConfig) {
        self.settings.store(Arc::new(TapSettings::new(config)));
    }

    /// Counts what usage injection did with a request.
    pub fn injection(&self, result: InjectResult) {
        let labels = Injection {
            tap: self.labels.clone(),
            result,
        };
        self.metrics
            .add(&tokentap_core::table::USAGE_INJECTION, &labels, 1);
    }

    /// A request was given a reused upstream connection, found `stale`
    /// (closed by the upstream) or not; returns `stale`. Stale ones are
    /// counted, and teach [`super::stale::ReuseHint`].
    pub fn reused_upstream(&self, reuse: &super::stale::ReuseHint, stale: bool) -> bool {
        if stale {
            self.metrics
                .add(&tokentap_core::table::STALE_UPSTREAM, &self.labels, 1);
            tracing::debug!(tap = %self.labels.tap, "pooled upstream connection was closed; sending on a new one");
        }
        if reuse.checked(stale) {
            self.learned_closes();
        }
        stale
    }

    /// A reused upstream connection was closed before any byte of the
    /// answer (the request failed: pingora's 502); teaches `reuse`.
    pub fn closed_before_answer(&self, reuse: &super::stale::ReuseHint) {
        if reuse.closed_before_answer() {
            self.learned_closes();
        }
    }

    fn learned_closes(&self) {
        tracing::info!(
            tap = %self.labels.tap,
            "the upstream closes its connections after responses: asking for Connection: close from now on"
        );
    }

    /// Counts a refused request or connection.
    pub fn rejected(&self, reason: RejectReason) {
        let labels = Rejected {
            tap: self.labels.clone(),
            reason,
        };
        self.metrics
            .add(&tokentap_core::table::REJECTED, &labels, 1);
        tracing::debug!(tap = %self.labels.tap, reason = reason.as_str(), "refused");
    }
}

fn peer_template(cfg: &TapConfig) -> HttpPeer {
    let up = &cfg.upstream;
    let t = cfg.timeouts;
    let sni = up.tls.as_ref().map(|t| t.sni.clone()).unwrap_or_default();
    let mut p = HttpPeer::new(up.addr, up.tls.is_some(), sni);
    p.options.connection_timeout = Some(t.connect);
    p.options.total_connection_timeout = Some(t.connect.saturating_mul(2));
    p.options.idle_timeout = Some(UPSTREAM_POOL_IDLE);
    // Events are timed by their arrival in the kernel, not by when this
    // tap read them (`proxy::arrival`).
    p.options.rx_timestamp = true;
    if t.first_byte == t.idle {
        // One per-read limit: pingora's own, and its connection pool works.
        p.options.read_timeout = Some(t.idle);
    } else {
        // Distinct first-byte and idle limits need `TimedConnector`'s
        // virtual socket; pooled too (pingora-core 0005: the pool matches a
        // connection by the address it was connected to, and the socket
        // names its TCP fd for the stale check).
        p.options.read_timeout = None;
        p.options.custom_l4 = Some(Arc::new(TimedConnector { timeouts: t }));
    }
    if let Some(tls) = &up.tls {
        p.options.verify_cert = tls.verify;
        p.options.verify_hostname = tls.verify;
        if let Some(ders) = &tls.ca_der {
            // Each DER was parsed by x509-parser when the config loaded.
            let certs: Vec<WrappedX509> = ders
                .iter()
                .map(|d| WrappedX509::new(d.clone(), parse_x509))
                .collect();
            p.options.ca = Some(Arc::from(certs.into_boxed_slice()));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn tap_config(idle: &str) -> TapConfig {
        let yaml = format!(
            "taps:\n  - name: t\n    boundary: engine\n    listen: 127.0.0.1:1\n    upstream: http://127.0.0.1:2\n    timeouts:\n      idle_seconds: {idle}\n"
        );
        Config::from_yaml(&yaml, std::path::Path::new("."))
            .unwrap()
            .taps
            .remove(0)
    }

    #[test]
    fn a_request_keeps_the_settings_it_started_with() {
        let parts = TapParts {
            calls: None,
            metrics: Arc::new(Metrics::new(5, Default::default()).unwrap()),
            observer: None,
            correlator: None,
            sinks: Vec::new(),
            fingerprint: false,
            span_events: 0,
            analysis: TapAnalysis::default(),
        };
        let tap = Tap::new(tap_config("30"), parts);
        let before = tap.settings();
        tap.replace(tap_config("60"));
        assert_eq!(before.config.timeouts.idle, Duration::from_secs(30));
        assert_eq!(tap.settings().config.timeouts.idle, Duration::from_secs(60));
    }
}
