//! One series in both exports, resolved once: a Prometheus child and an
//! OpenTelemetry instrument with its attribute list built at creation, so
//! an observation is atomics, no lookup and no allocation.
//!
//! Owns: the handle kinds (`Hist`, `Count`, `Level`). Must not: choose labels
//! or decide when a series is created (`series` does).

use super::otel::Instrument;
use super::Registry as Metrics;
use opentelemetry::KeyValue;
use prometheus::{Histogram, IntCounter, IntGauge};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokentap_core::labels::LabelSet;
use tokentap_core::table::{kind, Metric};

/// A histogram series in both exports, attributes built once.
pub struct Hist {
    prom: Option<Histogram>,
    otel: Option<(opentelemetry::metrics::Histogram<f64>, Vec<KeyValue>)>,
}

impl Hist {
    pub fn new<L: LabelSet>(metrics: &Metrics, m: &Metric<L, kind::Histogram>, labels: &L) -> Hist {
        Hist {
            prom: metrics.prom.histogram(m, labels),
            otel: metrics.otel.as_ref().and_then(|o| match o.instrument(m) {
                Some(Instrument::Histogram(h)) => Some((h.clone(), o.attributes(labels))),
                _ => None,
            }),
        }
    }

    pub fn observe(&self, v: f64) {
        if let Some(h) = &self.prom {
            h.observe(v);
        }
        if let Some((h, attrs)) = &self.otel {
            h.record(v, attrs);
        }
    }
}

/// A counter series in both exports, attributes built once.
pub struct Count {
    prom: Option<IntCounter>,
    otel: Option<(opentelemetry::metrics::Counter<u64>, Vec<KeyValue>)>,
}

impl Count {
    pub fn new<L: LabelSet>(metrics: &Metrics, m: &Metric<L, kind::Counter>, labels: &L) -> Count {
        Count {
            prom: metrics.prom.counter(m, labels),
            otel: metrics.otel.as_ref().and_then(|o| match o.instrument(m) {
                Some(Instrument::Counter(c)) => Some((c.clone(), o.attributes(labels))),
                _ => None,
            }),
        }
    }

    pub fn add(&self, n: u64) {
        if let Some(c) = &self.prom {
            c.inc_by(n);
        }
        if let Some((c, attrs)) = &self.otel {
            c.add(n, attrs);
        }
    }
}

/// An up-down gauge series in both exports (a tap's requests in flight,
/// its open connections), with its value kept for whoever reads it.
#[derive(Clone)]
pub struct Level {
    /// The value itself (whether or not an export has the metric).
    count: Arc<AtomicI64>,
    prom: Option<IntGauge>,
    otel: Option<(opentelemetry::metrics::UpDownCounter<i64>, Vec<KeyValue>)>,
}

impl Level {
    pub(super) fn new(
        count: Arc<AtomicI64>,
        prom: Option<IntGauge>,
        otel: Option<(opentelemetry::metrics::UpDownCounter<i64>, Vec<KeyValue>)>,
    ) -> Level {
        Level { count, prom, otel }
    }

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
