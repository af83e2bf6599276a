//! A tap process's metrics: the shared registry (`tokentap_telemetry`:
//! every family of the canonical table in Prometheus and OTLP) with what
//! the taps add on top — the bounded `model` and `tenant` label values,
//! and the places measurements enter: `TapSink` per token-bearing event
//! (histogram observations, nothing else), `Metrics::record` once per
//! finished request (`series`), `window_gauges` when an analysis window
//! closes.

mod record;
pub mod series;
mod sink;
pub mod window_gauges;

pub use sink::{EventObserver, Offsets, TapSink, OFFSETS_RESERVED};
pub use tokentap_telemetry::registry::{otel, prom, Count, Hist, Level as InFlight};

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

use otel::OtelMetrics;
use std::sync::Arc;
use tokentap_core::inject::InjectResult;
use tokentap_core::labels::{
    Injection, LabelName, ModelLabel, ModelLabels, Overflow, Rejected, StampFallback,
    StampFallbacks, Unmeasured,
};
use tokentap_core::limits::RejectReason;
use tokentap_core::record::MeasureError;
use tokentap_core::table::{self, kind, Metric, Resolution};
use tokentap_telemetry::Registry;

/// All metric state of a tap process.
pub struct Metrics {
    /// The families in both exports (shared with the correlator's sink).
    pub registry: Arc<Registry>,
    pub models: ModelLabels,
    /// The first-N MCP tool names (`metrics.max_tools`; absent: empty).
    pub tools: ModelLabels,
    /// The first-N tenants of the mergeable tenant series.
    pub tenants: ModelLabels,
    /// Each (tap, model, operation)'s series, resolved once.
    series: series::SeriesCache,
}

impl std::ops::Deref for Metrics {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

impl Metrics {
    /// With the first `max_models` model labels and duration histograms
    /// at `buckets` (`metrics.buckets`).
    pub fn new(max_models: usize, buckets: Resolution) -> prometheus::Result<Self> {
        let m = Metrics {
            registry: Arc::new(Registry::of(table::ALL, buckets)?),
            models: ModelLabels::new(max_models),
            tools: ModelLabels::with_absent(max_models, ""),
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

    /// Tool names get their own series up to this many (`metrics.max_tools`).
    pub fn with_max_tools(mut self, max: usize) -> Self {
        self.tools = ModelLabels::with_absent(max, "");
        self
    }

    /// The tool-name label of an MCP call (counting an overflow once).
    pub fn tool_label(&self, raw: Option<&str>) -> ModelLabel {
        let label = self.tools.label(raw);
        if label.overflowed {
            let labels = Overflow {
                label: LabelName::ToolName,
            };
            self.add(&table::LABEL_OVERFLOW, &labels, 1);
        }
        label
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

    /// Also records into OpenTelemetry instruments (before the registry is
    /// shared).
    pub fn with_otel(mut self, otel: OtelMetrics) -> Self {
        if let Some(r) = Arc::get_mut(&mut self.registry) {
            r.otel = Some(otel);
        }
        // Series resolved before had no OpenTelemetry side.
        self.series = series::SeriesCache::default();
        self
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
        self.level(m, tap)
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
