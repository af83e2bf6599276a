//! Metrics: the canonical table, the Prometheus registry, bounded labels, and
//! the two places measurements enter them: `TapSink` per token-bearing event
//! (a histogram observation, nothing else) and `Metrics::record` once per
//! finished request.

pub mod attribution;
pub mod labels;
pub mod prom;
pub mod table;

use crate::observe::EventObserver;
use crate::record::{MeasureError, RequestRecord, TokenEvent, TokenSink};
use labels::{ModelLabel, ModelLabels};
use prom::PromMetrics;
use prometheus::{Histogram, IntGauge};
use std::sync::Arc;

/// All metric state of a process.
pub struct Metrics {
    pub prom: PromMetrics,
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

impl Metrics {
    pub fn new(max_models: usize) -> prometheus::Result<Self> {
        let prom = PromMetrics::new()?;
        prom.label_overflow.with_label_values(&["model"]);
        Ok(Metrics {
            prom,
            models: ModelLabels::new(max_models),
        })
    }

    /// The in-flight gauge of a tap (resolved once per tap). Also creates
    /// the tap's series whose label values are all known in advance, at 0,
    /// so that dashboards and `rate()` see them before the first event.
    pub fn in_flight(&self, tap: &TapLabels) -> IntGauge {
        for reason in MeasureError::ALL {
            self.prom.measurement_errors.with_label_values(&[
                &*tap.tap,
                tap.boundary,
                reason.as_str(),
            ]);
        }
        self.prom
            .in_flight
            .with_label_values(&[&*tap.tap, tap.boundary])
    }

    /// Resolves the model label of a request (counting an overflow once).
    pub fn model_label(&self, raw: Option<&str>) -> ModelLabel {
        let label = self.models.label(raw);
        if label.overflowed {
            self.prom.label_overflow.with_label_values(&["model"]).inc();
        }
        label
    }

    /// Everything observed once per request, at its end.
    pub fn record(&self, tap: &TapLabels, model: &ModelLabel, r: &RequestRecord) {
        let p = &self.prom;
        let (t, b, m) = (&*tap.tap, tap.boundary, &*model.value);
        let op = r.operation.as_str();
        let stream = bool_str(r.stream);
        let outcome = r.outcome.as_str();
        p.requests
            .with_label_values(&[t, b, m, op, stream, outcome])
            .inc();
        p.request_duration
            .with_label_values(&[t, b, m, op, stream, outcome])
            .observe(r.e2e.as_secs_f64());
        if let Some(ttfb) = r.ttfb {
            p.ttfb
                .with_label_values(&[t, b, m, op, stream])
                .observe(ttfb.as_secs_f64());
        }
        if r.stream {
            let per_model = [t, b, m, op];
            for (h, v) in [
                (&p.ttft, r.ttft),
                (&p.ttft_visible, r.ttft_visible),
                (&p.time_to_first_event, r.time_to_first_event),
                (&p.tpot, r.tpot),
            ] {
                if let Some(v) = v {
                    h.with_label_values(&per_model).observe(v.as_secs_f64());
                }
            }
        }
        if let Some(n) = r.input_tokens {
            p.token_usage
                .with_label_values(&[t, b, m, op, "input"])
                .observe(n as f64);
            p.input_tokens.with_label_values(&[t, b, m, op]).inc_by(n);
        }
        if let (Some(n), Some(src)) = (r.output_tokens, r.output_source) {
            p.token_usage
                .with_label_values(&[t, b, m, op, "output"])
                .observe(n as f64);
            p.output_tokens
                .with_label_values(&[t, b, m, op, src.as_str()])
                .inc_by(n);
        }
        if let Some(n) = r.cached_tokens {
            p.cached_tokens.with_label_values(&[t, b, m, op]).inc_by(n);
        }
        if let Some(n) = r.reasoning_tokens {
            p.reasoning_tokens
                .with_label_values(&[t, b, m, op])
                .inc_by(n);
        }
        if let Some(e) = r.measure_error {
            p.measurement_errors
                .with_label_values(&[t, b, e.as_str()])
                .inc();
        }
    }
}

/// The per-request sink the proxy gives the `Meter`: resolves the model
/// label at the first token-bearing event, then only observes histograms.
pub struct TapSink {
    metrics: Arc<Metrics>,
    tap: TapLabels,
    observer: Option<Arc<dyn EventObserver>>,
    resolved: Option<Resolved>,
    request_id: Option<Arc<str>>,
    offsets: Option<Offsets>,
}

/// Token-event times of one request (µs from its start), for attribution;
/// the capacity is reserved up front so recording never allocates.
pub struct Offsets {
    pub micros: Vec<u32>,
    pub truncated: bool,
}

struct Resolved {
    model: ModelLabel,
    itl: Histogram,
    tokens_per_event: Histogram,
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

    /// Keeps the time of up to `cap` token events (for the correlator).
    pub fn keep_offsets(&mut self, cap: usize) {
        self.offsets = (cap > 0).then(|| Offsets {
            micros: Vec::with_capacity(cap),
            truncated: false,
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
            let values = [&*tap.tap, tap.boundary, &*model.value, operation];
            Resolved {
                itl: metrics.prom.itl.with_label_values(&values),
                tokens_per_event: metrics.prom.tokens_per_event.with_label_values(&values),
                model,
            }
        })
    }

    /// Resolves the labels before the first response piece when the request
    /// named its model, so the per-chunk path then takes no lock at all
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
        }
        if let Some(o) = self.offsets.as_mut() {
            if o.micros.len() < o.micros.capacity() {
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
