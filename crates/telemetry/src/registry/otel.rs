//! The OpenTelemetry side of the canonical table: one SDK instrument per
//! entry (OTel name, unit, description, the same bucket boundaries), and the
//! mapping of each label to its attribute key (`Label::otel_key`). Recording
//! happens at the same call sites as Prometheus (`Metrics::observe`/`add`)
//! from the same typed label set, so both exports count the same
//! observations with the same labels.
//!
//! Attributes add what the GenAI conventions ask beyond the labels:
//! `error.type` (the outcome, when not `ok`) and `gen_ai.provider.name` for
//! taps that configure a provider. `tokentap_otlp_*` (about OTLP itself) and
//! `tokentap_build_info` (a resource attribute here) are Prometheus-only, as
//! are the analysis-window gauges: an OpenTelemetry gauge repeats its last
//! value, and a window figure that is not available must be absent, not
//! the previous window's number (OTLP carries the per-request histograms
//! and spans they are computed from; `/report` serves them as JSON).

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry::KeyValue;
use std::collections::HashMap;
use std::sync::Arc;
use tokentap_core::labels::LabelSet;
use tokentap_core::table::{
    self, bucket_layouts, kind, Kind, Label, Metric, MetricDef, Resolution,
};

#[derive(Clone)]
pub enum Instrument {
    Histogram(Histogram<f64>),
    Counter(Counter<u64>),
    UpDown(UpDownCounter<i64>),
}

pub struct OtelMetrics {
    instruments: HashMap<&'static str, Instrument>,
    /// `gen_ai.provider.name` per tap, where configured.
    providers: HashMap<Arc<str>, Arc<str>>,
}

/// Table entries that have no OTel instrument.
pub fn prometheus_only(def: &MetricDef) -> bool {
    def.kind == Kind::WindowGauge
        || [
            table::OTLP_EXPORTED.name,
            table::OTLP_DROPPED.name,
            table::BUILD_INFO.name,
            table::CONFIG_LAST_SUCCESS.name,
            table::CONFIG_RESTART_PENDING.name,
        ]
        .contains(&def.name)
}

impl OtelMetrics {
    pub fn new(
        meter: &Meter,
        providers: HashMap<Arc<str>, Arc<str>>,
        resolution: Resolution,
    ) -> Self {
        let mut instruments = HashMap::new();
        for def in table::ALL.iter().filter(|d| !prometheus_only(d)) {
            let unit = def.unit.otel();
            let inst = match def.kind {
                Kind::Histogram => Instrument::Histogram(
                    meter
                        .f64_histogram(def.otel_name)
                        .with_unit(unit)
                        .with_description(def.help)
                        .with_boundaries(bucket_layouts::at(def.buckets, resolution).to_vec())
                        .build(),
                ),
                Kind::Counter => Instrument::Counter(
                    meter
                        .u64_counter(def.otel_name)
                        .with_unit(unit)
                        .with_description(def.help)
                        .build(),
                ),
                Kind::WindowGauge => continue,
                Kind::Gauge => Instrument::UpDown(
                    meter
                        .i64_up_down_counter(def.otel_name)
                        .with_unit(unit)
                        .with_description(def.help)
                        .build(),
                ),
            };
            instruments.insert(def.name, inst);
        }
        OtelMetrics {
            instruments,
            providers,
        }
    }

    /// The attributes of one observation: each label under its OTel key,
    /// plus `error.type` and `gen_ai.provider.name` where they apply.
    pub fn attributes<L: LabelSet>(&self, labels: &L) -> Vec<KeyValue> {
        let values = labels.values();
        let values = values.as_ref();
        let mut out = Vec::with_capacity(values.len() + 2);
        for (label, value) in L::LABELS.iter().zip(values) {
            let key = label.otel_key();
            match label {
                Label::Stream => out.push(KeyValue::new(key, *value == "true")),
                Label::Outcome => {
                    out.push(KeyValue::new(key, value.to_string()));
                    if *value != "ok" {
                        out.push(KeyValue::new("error.type", value.to_string()));
                    }
                }
                Label::Tap => {
                    out.push(KeyValue::new(key, value.to_string()));
                    if let Some(p) = self.providers.get(*value) {
                        out.push(KeyValue::new("gen_ai.provider.name", p.to_string()));
                    }
                }
                // An empty value means "not set" (`error.type` of a call
                // that succeeded, `gen_ai.tool.name` of a method that
                // names none): no attribute.
                _ if value.is_empty() => {}
                _ => out.push(KeyValue::new(key, value.to_string())),
            }
        }
        out
    }

    pub fn instrument(&self, def: &MetricDef) -> Option<&Instrument> {
        self.instruments.get(def.name)
    }

    pub fn observe<L: LabelSet>(&self, m: &Metric<L, kind::Histogram>, labels: &L, v: f64) {
        if let Some(Instrument::Histogram(h)) = self.instrument(m) {
            h.record(v, &self.attributes(labels));
        }
    }

    pub fn add<L: LabelSet>(&self, m: &Metric<L, kind::Counter>, labels: &L, n: u64) {
        if let Some(Instrument::Counter(c)) = self.instrument(m) {
            c.add(n, &self.attributes(labels));
        }
    }
}

/// The instruments of a real SDK pipeline whose exporter drops everything
/// (exporting once an hour): what the allocation tests and the benchmarks
/// record into when they measure the OpenTelemetry side.
pub fn discarding() -> OtelMetrics {
    use opentelemetry::metrics::MeterProvider as _;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(Discard)
        .with_interval(std::time::Duration::from_secs(3600))
        .build();
    let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_reader(reader)
        .build();
    OtelMetrics::new(
        &provider.meter("discarding"),
        HashMap::new(),
        Resolution::Fine,
    )
}

/// A metric exporter that drops what it is given.
struct Discard;

impl opentelemetry_sdk::metrics::exporter::PushMetricExporter for Discard {
    async fn export(
        &self,
        _: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(
        &self,
        _: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        opentelemetry_sdk::metrics::Temporality::Cumulative
    }
}
