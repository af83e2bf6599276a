//! The Prometheus side: an explicit `Registry` holding one family per entry
//! of the canonical table, built by walking the table. No global registry;
//! call sites name a `MetricDef`, never a string.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use std::collections::HashMap;
use tokentap_core::table::{self, Kind, MetricDef};

#[derive(Clone)]
pub enum Family {
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

fn family(def: &MetricDef) -> prometheus::Result<Family> {
    let labels: Vec<&str> = def.labels.iter().map(|l| l.as_str()).collect();
    Ok(match def.kind {
        Kind::Histogram => Family::Histogram(HistogramVec::new(
            HistogramOpts::new(def.name, def.help).buckets(def.buckets.to_vec()),
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

impl PromMetrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let mut families = HashMap::new();
        for def in table::ALL {
            let f = family(def)?;
            match &f {
                Family::Histogram(h) => registry.register(Box::new(h.clone()))?,
                Family::Counter(c) => registry.register(Box::new(c.clone()))?,
                Family::Gauge(g) => registry.register(Box::new(g.clone()))?,
                Family::FloatGauge(g) => registry.register(Box::new(g.clone()))?,
            }
            families.insert(def.name, f);
        }
        let m = PromMetrics { registry, families };
        if let Some(g) = m.gauge(&table::BUILD_INFO) {
            g.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        }
        Ok(m)
    }

    pub fn histogram(&self, def: &MetricDef) -> Option<&HistogramVec> {
        match self.families.get(def.name) {
            Some(Family::Histogram(h)) => Some(h),
            _ => None,
        }
    }

    pub fn counter(&self, def: &MetricDef) -> Option<&IntCounterVec> {
        match self.families.get(def.name) {
            Some(Family::Counter(c)) => Some(c),
            _ => None,
        }
    }

    pub fn gauge(&self, def: &MetricDef) -> Option<&IntGaugeVec> {
        match self.families.get(def.name) {
            Some(Family::Gauge(g)) => Some(g),
            _ => None,
        }
    }

    pub fn float_gauge(&self, def: &MetricDef) -> Option<&GaugeVec> {
        match self.families.get(def.name) {
            Some(Family::FloatGauge(g)) => Some(g),
            _ => None,
        }
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
            let found = match def.kind {
                Kind::Histogram => m.histogram(def).is_some(),
                Kind::Counter => m.counter(def).is_some(),
                Kind::Gauge => m.gauge(def).is_some(),
                Kind::WindowGauge => m.float_gauge(def).is_some(),
            };
            assert!(found, "{}", def.name);
        }
    }
}
