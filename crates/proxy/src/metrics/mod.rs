//! Metrics: the Prometheus registry and the OpenTelemetry instruments built
//! from the canonical table (`tokentap_core::table`), and the places
//! measurements enter them: `TapSink` per token-bearing event (histogram
//! observations, nothing else), `Metrics::record` once per finished
//! request, `attribution` for what the correlator concludes, `window` when
//! an analysis window closes. Every observation goes to both exports
//! through `Metrics::observe` / `Metrics::add`, named by a typed
//! `Metric<L>` and labelled by an `L` (`tokentap_core::labels`).

pub mod attribution;
mod handles;
pub mod otel;
pub mod prom;
mod record;
pub mod series;
mod sink;
pub mod window_gauges;

pub use handles::{Count, Hist};
pub use sink::{Offsets, TapSink, OFFSETS_RESERVED};

/// A map keyed by a bounded label value (or a metric name), looked up per
/// request. foldhash, not the standard library's SipHash: these keys are
/// short, the maps are bounded (a flood of distinct values cannot grow
/// them past their cap) and the seed is per process, so SipHash's
/// resistance to chosen collisions buys nothing here and costs a few
/// hundred instructions per lookup.
pub type LabelMap<V> = std::collections::HashMap<Arc<str>, V, foldhash::fast::RandomState>;
pub use tokentap_core::labels::TapLabels;

/// Tenants with their own series when `analysis.max_tenants` is not set.
pub const DEFAULT_MAX_TENANTS: usize = 20;

use opentelemetry::KeyValue;
use otel::{Instrument, OtelMetrics};
use prom::PromMetrics;
use prometheus::IntGauge;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokentap_core::inject::InjectResult;
use tokentap_core::labels::{
    Injection, LabelName, LabelSet, ModelLabel, ModelLabels, Overflow, Rejected, StampFallback,
    StampFallbacks, Unmeasured,
};
use tokentap_core::limits::RejectReason;
use tokentap_core::record::MeasureError;
use tokentap_core::table::{self, kind, Metric};

/// All metric state of a process.
pub struct Metrics {
    pub prom: PromMetrics,
    /// Present when OTLP metrics are on.
    pub otel: Option<OtelMetrics>,
    pub models: ModelLabels,
    /// The first-N tenants of the mergeable tenant series.
    pub tenants: ModelLabels,
    /// Each (tap, model, operation)'s series, resolved once.
    series: series::SeriesCache,
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
            tenants: ModelLabels::with_absent(DEFAULT_MAX_TENANTS, "none"),
            series: series::SeriesCache::default(),
        };
        m.touch(
            &table::LABEL_OVERFLOW,
            &Overflow {
                label: LabelName::Model,
            },
        );
        Ok(m)
    }

    /// Tenants get their own series up to this many (`analysis.max_tenants`).
    pub fn with_max_tenants(mut self, max: usize) -> Self {
        self.tenants = ModelLabels::with_absent(max, "none");
        self
    }

    /// The tenant label of a request (counting an overflow once).
    pub fn tenant_label(&self, raw: Option<&str>) -> ModelLabel {
        let label = self.tenants.label(raw);
        if label.overflowed {
            let labels = Overflow {
                label: LabelName::Tenant,
            };
            self.add(&table::LABEL_OVERFLOW, &labels, 1);
        }
        label
    }

    /// Also records into OpenTelemetry instruments.
    pub fn with_otel(mut self, otel: OtelMetrics) -> Self {
        self.otel = Some(otel);
        // Series resolved before had no OpenTelemetry side.
        self.series = series::SeriesCache::default();
        self
    }

    /// One histogram observation in both exports.
    pub fn observe<L: LabelSet>(&self, m: &Metric<L, kind::Histogram>, labels: &L, v: f64) {
        if let Some(h) = self.prom.histogram(m, labels) {
            h.observe(v);
        }
        if let Some(o) = &self.otel {
            o.observe(m, labels, v);
        }
    }

    /// A counter increment in both exports.
    pub fn add<L: LabelSet>(&self, m: &Metric<L, kind::Counter>, labels: &L, n: u64) {
        if let Some(c) = self.prom.counter(m, labels) {
            c.inc_by(n);
        }
        if let Some(o) = &self.otel {
            o.add(m, labels, n);
        }
    }

    /// Creates a counter's series at 0, so dashboards and `rate()` see it
    /// before its first event.
    pub fn touch<L: LabelSet>(&self, m: &Metric<L, kind::Counter>, labels: &L) {
        self.add(m, labels, 0);
    }

    /// Sets an integer gauge (Prometheus; these gauges are Prometheus-only).
    pub fn set_int<L: LabelSet>(&self, m: &Metric<L, kind::Gauge>, labels: &L, v: i64) {
        if let Some(g) = self.prom.gauge(m, labels) {
            g.set(v);
        }
    }

    /// The in-flight gauge of a tap. Also creates the tap's series whose
    /// label values are all known in advance, at 0.
    pub fn in_flight(&self, tap: &TapLabels) -> InFlight {
        for reason in MeasureError::ALL {
            let labels = Unmeasured {
                tap: tap.clone(),
                reason,
            };
            self.touch(&table::MEASUREMENT_ERRORS, &labels);
        }
        for reason in RejectReason::ALL {
            let labels = Rejected {
                tap: tap.clone(),
                reason,
            };
            self.touch(&table::REJECTED, &labels);
        }
        for reason in StampFallback::ALL {
            let labels = StampFallbacks {
                tap: tap.clone(),
                reason,
            };
            self.touch(&table::STAMP_FALLBACKS, &labels);
        }
        for result in InjectResult::ALL {
            let labels = Injection {
                tap: tap.clone(),
                result,
            };
            self.touch(&table::USAGE_INJECTION, &labels);
        }
        self.touch(&table::SHUTDOWN_CUT, tap);
        self.touch(&table::STALE_UPSTREAM, tap);
        self.tap_gauge(&table::IN_FLIGHT, tap)
    }

    /// A per-tap up-down gauge in both exports.
    pub fn tap_gauge(&self, m: &Metric<TapLabels, kind::Gauge>, tap: &TapLabels) -> InFlight {
        let prom = self.prom.gauge(m, tap);
        let otel = self.otel.as_ref().and_then(|o| match o.instrument(m) {
            Some(Instrument::UpDown(u)) => Some((u.clone(), o.attributes(tap))),
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
            let labels = Overflow {
                label: LabelName::Model,
            };
            self.add(&table::LABEL_OVERFLOW, &labels, 1);
        }
        label
    }
}
