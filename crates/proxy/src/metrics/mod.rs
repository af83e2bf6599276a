//! Metrics: the canonical table, the Prometheus registry, the OpenTelemetry
//! instruments, bounded labels, and the places measurements enter them:
//! `TapSink` per token-bearing event (histogram observations, nothing else),
//! `Metrics::record` once per finished request, and `attribution` for what
//! the correlator concludes. Every observation goes to both exports through
//! `Metrics::observe` / `Metrics::add`, named by its `MetricDef`.

pub mod attribution;
pub mod otel;
pub mod prom;
pub mod window;

use crate::observe::EventObserver;
use opentelemetry::KeyValue;
use otel::{Instrument, OtelMetrics};
use prom::PromMetrics;
use prometheus::{Histogram, IntGauge};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokentap_core::labels::{ModelLabel, ModelLabels};
use tokentap_core::record::{MeasureError, RequestRecord, TokenEvent, TokenSink};
use tokentap_core::table::{self, MetricDef};

/// All metric state of a process.
pub struct Metrics {
    pub prom: PromMetrics,
    /// Present when OTLP metrics are on.
    pub otel: Option<OtelMetrics>,
    pub models: ModelLabels,
}

/// The labels fixed for one tap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapLabels {
    pub tap: Arc<str>,
    pub boundary: &'static str,
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// A tap's in-flight gauge in both exports (resolved once per tap).
#[derive(Clone)]
pub struct InFlight {
    /// The value itself (whether or not an export has the metric).
    count: Arc<AtomicI64>,
    prom: Option<IntGauge>,
    otel: Option<(opentelemetry::metrics::UpDownCounter<i64>, Vec<KeyValue>)>,
}

impl InFlight {
    pub fn add(&self, d: i64) {
        self.count.fetch_add(d, Ordering::AcqRel);
        if let Some(g) = &self.prom {
            g.add(d);
        }
        if let Some((u, attrs)) = &self.otel {
            u.add(d, attrs);
        }
    }

    /// The current value (limits, the demo and tests read it).
    pub fn get(&self) -> i64 {
        self.count.load(Ordering::Acquire)
    }
}

impl Metrics {
    pub fn new(max_models: usize) -> prometheus::Result<Self> {
        let m = Metrics {
            prom: PromMetrics::new()?,
            otel: None,
            models: ModelLabels::new(max_models),
        };
        if let Some(c) = m.prom.counter(&table::LABEL_OVERFLOW) {
            c.with_label_values(&["model"]);
        }
        Ok(m)
    }

    /// Also records into OpenTelemetry instruments.
    pub fn with_otel(mut self, otel: OtelMetrics) -> Self {
        self.otel = Some(otel);
        self
    }

    /// One histogram observation in both exports.
    pub fn observe(&self, def: &MetricDef, labels: &[&str], v: f64) {
        if let Some(h) = self.prom.histogram(def) {
            h.with_label_values(labels).observe(v);
        }
        if let Some(o) = &self.otel {
            o.observe(def, labels, v);
        }
    }

    /// Sets a window gauge (Prometheus only, see `otel`).
    pub fn set(&self, def: &MetricDef, labels: &[&str], v: f64) {
        if let Some(g) = self.prom.float_gauge(def) {
            g.with_label_values(labels).set(v);
        }
    }

    /// Sets an integer gauge (Prometheus; these gauges are Prometheus-only).
    pub fn set_int(&self, def: &MetricDef, labels: &[&str], v: i64) {
        if let Some(g) = self.prom.gauge(def) {
            g.with_label_values(labels).set(v);
        }
    }

    /// Removes a window gauge's series (its figure is not available).
    pub fn unset(&self, def: &MetricDef, labels: &[&str]) {
        if let Some(g) = self.prom.float_gauge(def) {
            let _ = g.remove_label_values(labels);
        }
    }

    /// A counter increment in both exports.
    pub fn add(&self, def: &MetricDef, labels: &[&str], n: u64) {
        if let Some(c) = self.prom.counter(def) {
            c.with_label_values(labels).inc_by(n);
        }
        if let Some(o) = &self.otel {
            o.add(def, labels, n);
        }
    }

    /// The in-flight gauge of a tap. Also creates the tap's series whose
    /// label values are all known in advance, at 0, so that dashboards and
    /// `rate()` see them before the first event.
    pub fn in_flight(&self, tap: &TapLabels) -> InFlight {
        if let Some(c) = self.prom.counter(&table::MEASUREMENT_ERRORS) {
            for reason in MeasureError::ALL {
                c.with_label_values(&[&*tap.tap, tap.boundary, reason.as_str()]);
            }
        }
        if let Some(c) = self.prom.counter(&table::REJECTED) {
            for reason in tokentap_core::limits::RejectReason::ALL {
                c.with_label_values(&[&*tap.tap, tap.boundary, reason.as_str()]);
            }
        }
        if let Some(c) = self.prom.counter(&table::USAGE_INJECTION) {
            for result in tokentap_core::inject::RESULTS {
                c.with_label_values(&[&*tap.tap, tap.boundary, result]);
            }
        }
        self.tap_gauge(&table::IN_FLIGHT, tap)
    }

    /// A per-tap up-down gauge (labels tap, boundary) in both exports.
    pub fn tap_gauge(&self, def: &MetricDef, tap: &TapLabels) -> InFlight {
        let labels = [&*tap.tap, tap.boundary];
        let prom = self.prom.gauge(def).map(|g| g.with_label_values(&labels));
        let otel = self.otel.as_ref().and_then(|o| match o.instrument(def) {
            Some(Instrument::UpDown(u)) => Some((u.clone(), o.attributes(def, &labels))),
            _ => None,
        });
        InFlight {
            count: Arc::new(AtomicI64::new(0)),
            prom,
            otel,
        }
    }

    /// Resolves the model label of a request (counting an overflow once).
    pub fn model_label(&self, raw: Option<&str>) -> ModelLabel {
        let label = self.models.label(raw);
        if label.overflowed {
            self.add(&table::LABEL_OVERFLOW, &["model"], 1);
        }
        label
    }

    /// Everything observed once per request, at its end.
    pub fn record(&self, tap: &TapLabels, model: &ModelLabel, r: &RequestRecord) {
        let (t, b, m) = (&*tap.tap, tap.boundary, &*model.value);
        let op = r.operation.as_str();
        let stream = bool_str(r.stream);
        let outcome = r.outcome.as_str();
        self.add(&table::REQUESTS, &[t, b, m, op, stream, outcome], 1);
        self.observe(
            &table::REQUEST_DURATION,
            &[t, b, m, op, stream, outcome],
            r.e2e.as_secs_f64(),
        );
        if let Some(ttfb) = r.ttfb {
            self.observe(&table::TTFB, &[t, b, m, op, stream], ttfb.as_secs_f64());
        }
        if r.stream {
            let per_model = [t, b, m, op];
            for (def, v) in [
                (&table::TTFT, r.ttft),
                (&table::TTFT_VISIBLE, r.ttft_visible),
                (&table::TIME_TO_FIRST_EVENT, r.time_to_first_event),
                (&table::TPOT, r.tpot),
            ] {
                if let Some(v) = v {
                    self.observe(def, &per_model, v.as_secs_f64());
                }
            }
        }
        if let Some(n) = r.input_tokens {
            self.observe(&table::TOKEN_USAGE, &[t, b, m, op, "input"], n as f64);
            self.add(&table::INPUT_TOKENS, &[t, b, m, op], n);
        }
        if let (Some(n), Some(src)) = (r.output_tokens, r.output_source) {
            self.observe(&table::TOKEN_USAGE, &[t, b, m, op, "output"], n as f64);
            self.add(&table::OUTPUT_TOKENS, &[t, b, m, op, src.as_str()], n);
        }
        if let Some(n) = r.cached_tokens {
            self.add(&table::CACHED_TOKENS, &[t, b, m, op], n);
        }
        if let Some(n) = r.reasoning_tokens {
            self.add(&table::REASONING_TOKENS, &[t, b, m, op], n);
        }
        if let Some(e) = r.measure_error {
            self.add(&table::MEASUREMENT_ERRORS, &[t, b, e.as_str()], 1);
        }
    }
}

/// The per-request sink the proxy gives the `Meter`: resolves the labels
/// (at the response headers, or at the first token event when the request
/// named no model), then only observes histograms.
pub struct TapSink {
    metrics: Arc<Metrics>,
    tap: TapLabels,
    observer: Option<Arc<dyn EventObserver>>,
    resolved: Option<Resolved>,
    request_id: Option<Arc<str>>,
    offsets: Option<Offsets>,
}

/// Token-event times of one request (µs from its start), for attribution,
/// span events and analyses. Up to `OFFSETS_RESERVED` are reserved up front
/// (recording them never allocates); a longer stream grows the list by
/// doubling up to its cap — a handful of allocations per request, not per
/// chunk.
pub struct Offsets {
    pub micros: Vec<u32>,
    pub truncated: bool,
    cap: usize,
}

/// Token-event times reserved per request before any is recorded.
pub const OFFSETS_RESERVED: usize = 1024;

/// A histogram child in both exports, attributes built once per request.
struct Handle {
    prom: Option<Histogram>,
    otel: Option<(opentelemetry::metrics::Histogram<f64>, Vec<KeyValue>)>,
}

impl Handle {
    fn new(metrics: &Metrics, def: &MetricDef, labels: &[&str]) -> Handle {
        Handle {
            prom: metrics
                .prom
                .histogram(def)
                .map(|h| h.with_label_values(labels)),
            otel: metrics.otel.as_ref().and_then(|o| match o.instrument(def) {
                Some(Instrument::Histogram(h)) => Some((h.clone(), o.attributes(def, labels))),
                _ => None,
            }),
        }
    }

    fn observe(&self, v: f64) {
        if let Some(h) = &self.prom {
            h.observe(v);
        }
        if let Some((h, attrs)) = &self.otel {
            h.record(v, attrs);
        }
    }
}

struct Resolved {
    model: ModelLabel,
    itl: Handle,
    itl_per_token: Handle,
    tokens_per_event: Handle,
}

impl TapSink {
    pub fn new(
        metrics: Arc<Metrics>,
        tap: TapLabels,
        observer: Option<Arc<dyn EventObserver>>,
    ) -> Self {
        TapSink {
            metrics,
            tap,
            observer,
            resolved: None,
            request_id: None,
            offsets: None,
        }
    }

    /// Keeps the time of up to `cap` token events.
    pub fn keep_offsets(&mut self, cap: usize) {
        self.offsets = (cap > 0).then(|| Offsets {
            micros: Vec::with_capacity(cap.min(OFFSETS_RESERVED)),
            truncated: false,
            cap,
        });
    }

    /// The kept token-event times.
    pub fn take_offsets(&mut self) -> Option<Offsets> {
        self.offsets.take()
    }

    /// Remembers the request id for the observer (only kept when one is set).
    pub fn set_request_id(&mut self, id: Option<&str>) {
        if self.observer.is_some() {
            self.request_id = id.map(Arc::from);
        }
    }

    fn resolve(&mut self, raw_model: Option<&str>, operation: &str) -> &Resolved {
        let metrics = &self.metrics;
        let tap = &self.tap;
        self.resolved.get_or_insert_with(|| {
            let model = metrics.model_label(raw_model);
            let labels = [&*tap.tap, tap.boundary, &*model.value, operation];
            Resolved {
                itl: Handle::new(metrics, &table::ITL, &labels),
                itl_per_token: Handle::new(metrics, &table::ITL_PER_TOKEN, &labels),
                tokens_per_event: Handle::new(metrics, &table::TOKENS_PER_EVENT, &labels),
                model,
            }
        })
    }

    /// Resolves the labels before the first response piece when the request
    /// named its model, so the per-chunk path then takes no lock of ours
    /// (only requests without a model resolve at their first token event,
    /// from the model the response names).
    pub fn prepare(&mut self, requested_model: Option<&str>, operation: &str) {
        if requested_model.is_some() {
            self.resolve(requested_model, operation);
        }
    }

    /// The model label this request uses (resolving it now if no token
    /// event did), so every metric of a request carries the same one.
    pub fn model_label(&mut self, raw_model: Option<&str>, operation: &str) -> ModelLabel {
        self.resolve(raw_model, operation).model.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn tap(&self) -> &TapLabels {
        &self.tap
    }
}

impl TokenSink for TapSink {
    fn token_event(&mut self, ev: &TokenEvent<'_>) {
        let r = self.resolve(ev.model, ev.operation.as_str());
        if let Some(gap) = ev.gap {
            r.itl.observe(gap.as_secs_f64());
        }
        if let Some(n) = ev.tokens {
            r.tokens_per_event.observe(n as f64);
            if let (Some(gap), true) = (ev.gap, n > 0) {
                let per_token = gap.as_secs_f64() / n as f64;
                for _ in 0..n.min(table::ITL_PER_TOKEN_MAX_OBSERVATIONS) {
                    r.itl_per_token.observe(per_token);
                }
            }
        }
        if let Some(o) = self.offsets.as_mut() {
            if o.micros.len() < o.cap {
                o.micros
                    .push(u32::try_from(ev.since_start.as_micros()).unwrap_or(u32::MAX));
            } else {
                o.truncated = true;
            }
        }
        if let Some(o) = &self.observer {
            o.token_event(&self.tap.tap, self.request_id.as_deref(), ev);
        }
    }
}
