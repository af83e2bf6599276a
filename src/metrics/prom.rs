//! The Prometheus side: an explicit `Registry` and typed handles built from
//! the canonical table. No global registry, no metric names at call sites.

use super::table::{self, Kind, MetricDef};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every tokentap metric, registered once into one registry.
#[derive(Clone)]
pub struct PromMetrics {
    pub registry: Registry,
    pub ttft: HistogramVec,
    pub ttft_visible: HistogramVec,
    pub ttfb: HistogramVec,
    pub time_to_first_event: HistogramVec,
    pub tpot: HistogramVec,
    pub request_duration: HistogramVec,
    pub token_usage: HistogramVec,
    pub itl: HistogramVec,
    pub tokens_per_event: HistogramVec,
    pub requests: IntCounterVec,
    pub in_flight: IntGaugeVec,
    pub input_tokens: IntCounterVec,
    pub output_tokens: IntCounterVec,
    pub cached_tokens: IntCounterVec,
    pub reasoning_tokens: IntCounterVec,
    pub measurement_errors: IntCounterVec,
    pub label_overflow: IntCounterVec,
    pub boundary_overhead: HistogramVec,
    pub relay_delay: HistogramVec,
    pub added_jitter: HistogramVec,
    pub stream_buffered: IntCounterVec,
    pub buffered_share: HistogramVec,
    pub token_mismatch: IntCounterVec,
    pub guardrail_duration: HistogramVec,
    pub guardrail_calls: IntCounterVec,
    pub guardrail_exposed: HistogramVec,
    pub correlation: IntCounterVec,
}

fn label_names(def: &MetricDef) -> Vec<&'static str> {
    def.labels.iter().map(|l| l.as_str()).collect()
}

fn histogram(r: &Registry, def: &MetricDef) -> prometheus::Result<HistogramVec> {
    debug_assert_eq!(def.kind, Kind::Histogram);
    let opts = HistogramOpts::new(def.name, def.help).buckets(def.buckets.to_vec());
    let h = HistogramVec::new(opts, &label_names(def))?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

fn counter(r: &Registry, def: &MetricDef) -> prometheus::Result<IntCounterVec> {
    debug_assert_eq!(def.kind, Kind::Counter);
    let c = IntCounterVec::new(Opts::new(def.name, def.help), &label_names(def))?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(r: &Registry, def: &MetricDef) -> prometheus::Result<IntGaugeVec> {
    debug_assert_eq!(def.kind, Kind::Gauge);
    let g = IntGaugeVec::new(Opts::new(def.name, def.help), &label_names(def))?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

impl PromMetrics {
    pub fn new() -> prometheus::Result<Self> {
        let r = Registry::new();
        let build = gauge(&r, &table::BUILD_INFO)?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Ok(PromMetrics {
            ttft: histogram(&r, &table::TTFT)?,
            ttft_visible: histogram(&r, &table::TTFT_VISIBLE)?,
            ttfb: histogram(&r, &table::TTFB)?,
            time_to_first_event: histogram(&r, &table::TIME_TO_FIRST_EVENT)?,
            tpot: histogram(&r, &table::TPOT)?,
            request_duration: histogram(&r, &table::REQUEST_DURATION)?,
            token_usage: histogram(&r, &table::TOKEN_USAGE)?,
            itl: histogram(&r, &table::ITL)?,
            tokens_per_event: histogram(&r, &table::TOKENS_PER_EVENT)?,
            requests: counter(&r, &table::REQUESTS)?,
            in_flight: gauge(&r, &table::IN_FLIGHT)?,
            input_tokens: counter(&r, &table::INPUT_TOKENS)?,
            output_tokens: counter(&r, &table::OUTPUT_TOKENS)?,
            cached_tokens: counter(&r, &table::CACHED_TOKENS)?,
            reasoning_tokens: counter(&r, &table::REASONING_TOKENS)?,
            measurement_errors: counter(&r, &table::MEASUREMENT_ERRORS)?,
            label_overflow: counter(&r, &table::LABEL_OVERFLOW)?,
            boundary_overhead: histogram(&r, &table::BOUNDARY_OVERHEAD)?,
            relay_delay: histogram(&r, &table::RELAY_DELAY)?,
            added_jitter: histogram(&r, &table::ADDED_JITTER)?,
            stream_buffered: counter(&r, &table::STREAM_BUFFERED)?,
            buffered_share: histogram(&r, &table::BUFFERED_SHARE)?,
            token_mismatch: counter(&r, &table::TOKEN_MISMATCH)?,
            guardrail_duration: histogram(&r, &table::GUARDRAIL_DURATION)?,
            guardrail_calls: counter(&r, &table::GUARDRAIL_CALLS)?,
            guardrail_exposed: histogram(&r, &table::GUARDRAIL_EXPOSED)?,
            correlation: counter(&r, &table::CORRELATION)?,
            registry: r,
        })
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
