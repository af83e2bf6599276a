//! One tap's shared state: labels, metric handles, the listeners it reports
//! to, and its settings (validated config + the upstream peer template).
//! Settings sit behind an `ArcSwap`: every request takes one snapshot in
//! `new_ctx` and uses it to the end, so replacing the settings (hot reload)
//! never changes a request mid-flight.

use super::upstream_io::TimedConnector;
use crate::config::{Boundary, TapConfig};
use crate::metrics::Offsets;
use crate::metrics::{InFlight, Metrics, TapLabels};
use crate::observe::Hooks;
use crate::otlp::spans::SpanPipeline;
use crate::recordlog::RecordLog;
use arc_swap::ArcSwap;
use pingora::upstreams::peer::HttpPeer;
use pingora::utils::tls::{parse_x509, WrappedX509};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::{Sample, TenantSource};
use tokentap_core::correlate::{Correlator, TapRecord, Verdict};
use tokentap_core::inject::InjectResult;
use tokentap_core::labels::ModelLabel;
use tokentap_core::labels::{Injection, Rejected};
use tokentap_core::limits::RejectReason;
use tokentap_core::record::RequestRecord;

/// How long an idle pooled upstream connection is kept.
const UPSTREAM_POOL_IDLE: Duration = Duration::from_secs(60);

/// What a request reads from its tap's configuration, swapped as a whole.
pub struct TapSettings {
    pub config: TapConfig,
    peer: HttpPeer,
}

impl TapSettings {
    pub fn new(config: TapConfig) -> Self {
        let peer = peer_template(&config);
        TapSettings { config, peer }
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
    pub hooks: Hooks,
    /// Joins this process's taps (when correlation is on).
    pub correlator: Option<Arc<Correlator>>,
    /// Exports one span per request (when OTLP traces are on).
    pub spans: Option<Arc<SpanPipeline>>,
    /// Token-event times kept per request (correlation, span events,
    /// analyses).
    event_cap: usize,
    /// Live analyses, the record log, and where tenants come from.
    pub analysis: TapAnalysis,
}

/// A tap's part in the analyses (all off by default).
#[derive(Default)]
pub struct TapAnalysis {
    pub live: Option<Arc<TapLive>>,
    pub record_log: Option<RecordLog>,
    /// Set when either of the above is: requests then carry a tenant.
    pub tenant: Option<TenantSource>,
}

impl TapAnalysis {
    /// Whether requests should be sampled at all.
    pub fn on(&self) -> bool {
        self.live.is_some() || self.record_log.is_some()
    }
}

impl Tap {
    pub fn new(
        config: TapConfig,
        metrics: Arc<Metrics>,
        hooks: Hooks,
        correlator: Option<Arc<Correlator>>,
        spans: Option<Arc<SpanPipeline>>,
        span_events: usize,
        analysis: TapAnalysis,
    ) -> Self {
        let labels = TapLabels {
            tap: config.name.clone(),
            boundary: config.boundary,
        };
        let in_flight = metrics.in_flight(&labels);
        Tap {
            settings: ArcSwap::from_pointee(TapSettings::new(config)),
            labels,
            metrics,
            in_flight,
            hooks,
            event_cap: correlator
                .as_ref()
                .map_or(0, |c| c.config().max_events)
                .max(span_events)
                .max(if analysis.on() {
                    tokentap_core::analysis::sample::MAX_GAPS + 1
                } else {
                    0
                }),
            analysis,
            correlator,
            spans,
        }
    }

    /// Token-event times to keep per request (0: none).
    pub fn event_cap(&self) -> usize {
        self.event_cap
    }

    /// Emits a finished request: metrics, record sinks, correlator.
    pub fn emit(
        &self,
        model: &ModelLabel,
        record: &RequestRecord,
        offsets: Option<Offsets>,
        hop: Option<Arc<str>>,
    ) {
        self.metrics.record(&self.labels, model, record);
        if let Some(rate) = self.settings().config.access_log {
            if rate >= 1.0 || rand::random::<f64>() < rate {
                access_log(&self.labels, &model.value, record);
            }
        }
        for sink in &self.hooks.records {
            sink.record(&self.labels, &model.value, record);
        }
        if let Some(s) = &self.spans {
            s.record(
                &self.labels,
                &model.value,
                record,
                offsets.as_ref().map(|o| o.micros.as_slice()),
            );
        }
        if self.analysis.on() {
            let (micros, truncated) = offsets
                .as_ref()
                .map_or((&[][..], false), |o| (o.micros.as_slice(), o.truncated));
            let sample = Sample::from_record(
                &self.labels.tap,
                self.labels.boundary.as_str(),
                hop.as_deref(),
                record,
                micros,
                truncated,
            );
            match (&self.analysis.live, &self.analysis.record_log) {
                (Some(live), Some(log)) => {
                    log.write(sample.clone());
                    live.push(sample);
                }
                (Some(live), None) => {
                    live.push(sample);
                }
                (None, Some(log)) => log.write(sample),
                (None, None) => {}
            }
        }
        if let Some(c) = &self.correlator {
            let (events, events_truncated) =
                offsets.map_or((Vec::new(), false), |o| (o.micros, o.truncated));
            let boundary = self.settings().config.boundary;
            c.submit(
                TapRecord {
                    tap: self.labels.tap.clone(),
                    boundary,
                    hop: if boundary == Boundary::Guardrail {
                        hop
                    } else {
                        None
                    },
                    trace: record.trace,
                    fingerprint: record.request.fingerprint,
                    request_id: record.request_id.as_deref().map(Arc::from),
                    t0: record.t0,
                    ttfb: record.ttfb,
                    ttft: record.ttft,
                    e2e: record.e2e,
                    events,
                    events_truncated,
                    output_tokens: record.output_tokens,
                    outcome: record.outcome,
                    verdict: record.verdict.unwrap_or(Verdict::Unknown),
                },
                std::time::Instant::now(),
            );
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
            tap: self.labels.tap.clone(),
            boundary: self.labels.boundary,
            result,
        };
        self.metrics
            .add(&tokentap_core::table::USAGE_INJECTION, &labels, 1);
    }

    /// Counts a refused request or connection.
    pub fn rejected(&self, reason: RejectReason) {
        let labels = Rejected {
            tap: self.labels.tap.clone(),
            boundary: self.labels.boundary,
            reason,
        };
        self.metrics
            .add(&tokentap_core::table::REJECTED, &labels, 1);
        tracing::debug!(tap = %self.labels.tap, reason = reason.as_str(), "refused");
    }
}

/// One access-log event (target `tokentap::access`): bounded names, times,
/// counts and ids — never content, headers or the query string.
fn access_log(tap: &crate::metrics::TapLabels, model: &str, r: &RequestRecord) {
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
    tracing::info!(
        target: "tokentap::access",
        tap = &*tap.tap,
        boundary = tap.boundary.as_str(),
        operation = r.operation.as_str(),
        model,
        stream = r.stream,
        status = r.status,
        outcome = r.outcome.as_str(),
        error_type = r.error_type.map(|e| e.as_str()),
        ttfb_ms = ms(r.ttfb),
        ttft_ms = ms(r.ttft),
        e2e_ms = r.e2e.as_secs_f64() * 1e3,
        input_tokens = r.input_tokens,
        output_tokens = r.output_tokens,
        trace_id = r.trace.map(|t| t.trace_id_hex()),
        request_id = r.request_id.as_deref(),
        "request"
    );
}

fn peer_template(cfg: &TapConfig) -> HttpPeer {
    let up = &cfg.upstream;
    let t = cfg.timeouts;
    let sni = up.tls.as_ref().map(|t| t.sni.clone()).unwrap_or_default();
    let mut p = HttpPeer::new(up.addr, up.tls.is_some(), sni);
    p.options.connection_timeout = Some(t.connect);
    p.options.total_connection_timeout = Some(t.connect.saturating_mul(2));
    p.options.idle_timeout = Some(UPSTREAM_POOL_IDLE);
    if t.first_byte == t.idle {
        // One per-read limit: pingora's own, and its connection pool works.
        p.options.read_timeout = Some(t.idle);
    } else {
        // Distinct first-byte and idle limits need `TimedConnector`'s
        // virtual socket, which pingora's pool never reuses (it matches a
        // pooled connection by its fd, and a virtual socket has none): one
        // upstream connection per request in this mode (see README).
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
        let tap = Tap::new(
            tap_config("30"),
            Arc::new(Metrics::new(5).unwrap()),
            Hooks::default(),
            None,
            None,
            0,
            TapAnalysis::default(),
        );
        let before = tap.settings();
        tap.replace(tap_config("60"));
        assert_eq!(before.config.timeouts.idle, Duration::from_secs(30));
        assert_eq!(tap.settings().config.timeouts.idle, Duration::from_secs(60));
    }
}
