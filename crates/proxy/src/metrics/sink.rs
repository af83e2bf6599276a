//! The per-request, per-chunk side of the metrics: `TapSink` is the
//! `TokenSink` the proxy hands the `Meter`. It resolves a request's labels
//! once (its `series::ModelSeries`), then every token-bearing event is a
//! few observations and, when kept, one event time.

use super::series::ModelSeries;
use super::{Metrics, TapLabels};
use std::sync::Arc;
use tokentap_core::decode::Operation;
use tokentap_core::labels::ModelLabel;
use tokentap_core::record::{TokenEvent, TokenSink};

/// Receives every token-bearing event as it passes (per chunk: keep it O(1));
/// the tests' extension point.
pub trait EventObserver: Send + Sync {
    fn token_event(&self, tap: &str, request_id: Option<&str>, ev: &TokenEvent<'_>);
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
/// span events and analyses. `OFFSETS_RESERVED` are reserved up front (a
/// short answer's times never allocate); a longer stream grows the list by
/// doubling up to its cap — a handful of allocations per request (five for
/// 2,000 events), never per chunk. Reserving little keeps what an open
/// stream holds small: 1,024 reserved were 4 KiB per stream, 4 MiB of a
/// tap's memory at 1,000 open streams.
pub struct Offsets {
    pub micros: Vec<u32>,
    pub truncated: bool,
    cap: usize,
}

/// Token-event times reserved per request before any is recorded.
pub const OFFSETS_RESERVED: usize = 64;

struct Resolved {
    model: ModelLabel,
    series: Arc<ModelSeries>,
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

    /// Counts a receive stamp not used (`proxy::arrival`).
    pub fn stamp_fallback(&self, reason: tokentap_core::labels::StampFallback) {
        let labels = tokentap_core::labels::StampFallbacks {
            tap: self.tap.clone(),
            reason,
        };
        self.metrics
            .add(&tokentap_core::table::STAMP_FALLBACKS, &labels, 1);
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

    fn resolve(&mut self, raw_model: Option<&str>, operation: Operation) -> &Resolved {
        resolve(
            &mut self.resolved,
            &self.metrics,
            &self.tap,
            raw_model,
            operation,
        )
    }

    /// Resolves the labels before the first response piece when the request
    /// named its model, so the per-chunk path then takes no lock of ours
    /// (only requests without a model resolve at their first token event,
    /// from the model the response names).
    pub fn prepare(&mut self, requested_model: Option<&str>, operation: Operation) {
        if requested_model.is_some() {
            self.resolve(requested_model, operation);
        }
    }

    /// The model label this request uses (resolving it now if no token
    /// event did), so every metric of a request carries the same one.
    pub fn model_label(&mut self, raw_model: Option<&str>, operation: Operation) -> ModelLabel {
        self.resolve(raw_model, operation).model.clone()
    }

    /// The series this request resolved, if it resolved one.
    pub fn series(&self) -> Option<&Arc<ModelSeries>> {
        self.resolved.as_ref().map(|r| &r.series)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn tap(&self) -> &TapLabels {
        &self.tap
    }
}

/// The request's labels and series, resolved at the first call.
fn resolve<'a>(
    resolved: &'a mut Option<Resolved>,
    metrics: &Metrics,
    tap: &TapLabels,
    raw_model: Option<&str>,
    operation: Operation,
) -> &'a Resolved {
    resolved.get_or_insert_with(|| {
        let model = metrics.model_label(raw_model);
        Resolved {
            series: metrics.series(tap, &model.value, operation),
            model,
        }
    })
}

impl TokenSink for TapSink {
    fn token_event(&mut self, ev: &TokenEvent<'_>) {
        self.resolve(ev.model, ev.operation)
            .series
            .token_event(ev.gap, ev.tokens);
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
