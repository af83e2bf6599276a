//! The registry of one tokentap program: every family of the canonical
//! table (`tokentap_core::table`) in a Prometheus registry and, when OTLP
//! metrics are on, as OpenTelemetry instruments. Every observation goes to
//! both exports through `observe` / `add` / `set_int`, named by a typed
//! `Metric<L, K>` and labelled by an `L`: a counter cannot be observed as
//! a histogram, a series always has its family's labels.
//!
//! ```
//! use tokentap_core::labels::Correlation;
//! use tokentap_core::correlate::Joined;
//! use tokentap_core::table;
//! let r = tokentap_telemetry::Registry::new().unwrap();
//! r.add(&table::CORRELATION, &Correlation { result: Joined::Trace }, 1);
//! ```
//!
//! A counter where a histogram is expected does not compile:
//!
//! ```compile_fail
//! use tokentap_core::labels::Correlation;
//! use tokentap_core::correlate::Joined;
//! use tokentap_core::table;
//! let r = tokentap_telemetry::Registry::new().unwrap();
//! r.observe(&table::CORRELATION, &Correlation { result: Joined::Trace }, 1.0);
//! ```
//!
//! Owns: the two exports' families and instruments (`prom`, `otel`), the
//! handles that keep a resolved series (`handles`). Must not: choose label
//! values or decide what a program measures.

mod handles;
pub mod otel;
pub mod prom;

pub use handles::{Count, Hist, Level};

use otel::{Instrument, OtelMetrics};
use prom::PromMetrics;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use tokentap_core::labels::LabelSet;
use tokentap_core::table::{kind, Metric, MetricDef, Resolution};

/// Every family of a table, in both exports.
pub struct Registry {
    pub prom: PromMetrics,
    /// Present when OTLP metrics are on.
    pub otel: Option<OtelMetrics>,
}

impl Registry {
    /// The whole canonical table, duration histograms resolving 5 %.
    pub fn new() -> prometheus::Result<Self> {
        Registry::of(tokentap_core::table::ALL, Resolution::Fine)
    }

    /// The families of `table` (a test's own, or the canonical one),
    /// duration histograms at `resolution`.
    pub fn of(table: &[&MetricDef], resolution: Resolution) -> prometheus::Result<Self> {
        Ok(Registry {
            prom: PromMetrics::of(table, resolution)?,
            otel: None,
        })
    }

    /// Also records into OpenTelemetry instruments.
    pub fn with_otel(mut self, otel: OtelMetrics) -> Self {
        self.otel = Some(otel);
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

    /// An up-down gauge series in both exports, resolved once.
    pub fn level<L: LabelSet>(&self, m: &Metric<L, kind::Gauge>, labels: &L) -> Level {
        let prom = self.prom.gauge(m, labels);
        let otel = self.otel.as_ref().and_then(|o| match o.instrument(m) {
            Some(Instrument::UpDown(u)) => Some((u.clone(), o.attributes(labels))),
            _ => None,
        });
        Level::new(Arc::new(AtomicI64::new(0)), prom, otel)
    }

    /// The text exposition of everything registered.
    pub fn encode(&self) -> Vec<u8> {
        self.prom.encode()
    }
}
