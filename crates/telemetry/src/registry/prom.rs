//! The Prometheus side: an explicit `Registry` holding one family per entry
//! of the canonical table, built by walking the table. No global registry;
//! call sites name a typed `Metric<L>` and give an `L`, never a string, so
//! a series always has its family's labels (`prometheus`' own
//! `with_label_values` would panic on a wrong count; it is never called).

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use tokentap_core::labels::LabelSet;
use tokentap_core::table::{self, bucket_layouts, kind, Kind, Metric, MetricDef, Resolution};

#[derive(Clone)]
enum Family {
    Histogram(HistogramVec),
    Counter(IntCounterVec),
    Gauge(IntGaugeVec),
    FloatGauge(GaugeVec),
}

/// Every tokentap metric, registered once into one registry.
#[derive(Clone)]
pub struct PromMetrics {
    pub registry: Registry,
    families: HashMap<&'static str, Family>,
}

fn family(def: &MetricDef, resolution: Resolution) -> prometheus::Result<Family> {
    let labels: Vec<&str> = def.labels.iter().map(|l| l.as_str()).collect();
    Ok(match def.kind {
        Kind::Histogram => Family::Histogram(HistogramVec::new(
            HistogramOpts::new(def.name, def.help)
                .buckets(bucket_layouts::at(def.buckets, resolution).to_vec()),
            &labels,
        )?),
        Kind::Counter => {
            Family::Counter(IntCounterVec::new(Opts::new(def.name, def.help), &labels)?)
        }
        Kind::Gauge => Family::Gauge(IntGaugeVec::new(Opts::new(def.name, def.help), &labels)?),
        Kind::WindowGauge => {
            Family::FloatGauge(GaugeVec::new(Opts::new(def.name, def.help), &labels)?)
        }
    })
}

/// The series of `values` in `vec`; `None` only if the values do not fit
/// the family, which typed label sets rule out.
fn child<T: MetricVecBuilder>(vec: &MetricVec<T>, values: &[&str]) -> Option<T::M> {
    vec.get_metric_with_label_values(values).ok()
}

fn register(registry: &Registry, f: &Family) -> prometheus::Result<()> {
    let c: Box<dyn Collector> = match f {
        Family::Histogram(h) => Box::new(h.clone()),
        Family::Counter(c) => Box::new(c.clone()),
        Family::Gauge(g) => Box::new(g.clone()),
        Family::FloatGauge(g) => Box::new(g.clone()),
    };
    registry.register(c)
}

impl PromMetrics {
    pub fn new() -> prometheus::Result<Self> {
        PromMetrics::of(table::ALL, Resolution::Fine)
    }

    /// The families of `defs`, duration histograms at `resolution`.
    pub fn of(defs: &[&MetricDef], resolution: Resolution) -> prometheus::Result<Self> {
        let registry = Registry::new();
        let mut families = HashMap::new();
        for def in defs {
            let f = family(def, resolution)?;
            register(&registry, &f)?;
            families.insert(def.name, f);
        }
        let m = PromMetrics { registry, families };
        let build = tokentap_core::labels::Build {
            version: env!("CARGO_PKG_VERSION"),
        };
        if let Some(g) = m.gauge(&table::BUILD_INFO, &build) {
            g.set(1);
        }
        Ok(m)
    }

    fn family(&self, def: &MetricDef) -> Option<&Family> {
        self.families.get(def.name)
    }

    /// The histogram series of `labels` (`None`: `m` is not a histogram).
    pub fn histogram<L: LabelSet>(
        &self,
        m: &Metric<L, kind::Histogram>,
        labels: &L,
    ) -> Option<Histogram> {
        match self.family(m)? {
            Family::Histogram(h) => child(h, labels.values().as_ref()),
            _ => None,
        }
    }

    /// The counter series of `labels` (created at 0 if new).
    pub fn counter<L: LabelSet>(
        &self,
        m: &Metric<L, kind::Counter>,
        labels: &L,
    ) -> Option<IntCounter> {
        match self.family(m)? {
            Family::Counter(c) => child(c, labels.values().as_ref()),
            _ => None,
        }
    }

    /// The integer gauge series of `labels`.
    pub fn gauge<L: LabelSet>(&self, m: &Metric<L, kind::Gauge>, labels: &L) -> Option<IntGauge> {
        match self.family(m)? {
            Family::Gauge(g) => child(g, labels.values().as_ref()),
            _ => None,
        }
    }

    /// The window gauge series of `labels`.
    pub fn float_gauge<L: LabelSet>(
        &self,
        m: &Metric<L, kind::WindowGauge>,
        labels: &L,
    ) -> Option<Gauge> {
        match self.family(m)? {
            Family::FloatGauge(g) => child(g, labels.values().as_ref()),
            _ => None,
        }
    }

    /// Sets a window gauge series by its values (the window sink keeps the
    /// values of the series it set, from typed label sets, to remove them).
    pub fn set_window(&self, def: &MetricDef, values: &[&str], v: f64) {
        if let Some(Family::FloatGauge(g)) = self.family(def) {
            if let Some(s) = child(g, values) {
                s.set(v);
            }
        }
    }

    /// Removes a window gauge series (its figure is not available).
    pub fn unset_window(&self, def: &MetricDef, values: &[&str]) {
        if let Some(Family::FloatGauge(g)) = self.family(def) {
            let _ = g.remove_label_values(values);
        }
    }

    /// Whether the registry has `def`'s family with its kind (tests).
    pub fn has(&self, def: &MetricDef) -> bool {
        matches!(
            (self.family(def), def.kind),
            (Some(Family::Histogram(_)), Kind::Histogram)
                | (Some(Family::Counter(_)), Kind::Counter)
                | (Some(Family::Gauge(_)), Kind::Gauge)
                | (Some(Family::FloatGauge(_)), Kind::WindowGauge)
        )
    }

    /// The text exposition of everything registered.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if TextEncoder::new().encode(&families, &mut buf).is_err() {
            buf.clear();
        }
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_entry_has_its_family() {
        let m = PromMetrics::new().unwrap();
        for def in table::ALL {
            assert!(m.has(def), "{}", def.name);
        }
    }
}
