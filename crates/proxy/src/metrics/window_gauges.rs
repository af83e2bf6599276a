//! Where a closed analysis window becomes Prometheus gauges (the
//! `tokentap_window_*`, capacity, knee and engine entries of the table). A
//! figure that is not available removes its series; series of a tap that
//! the new window does not set (a tenant that left the top K, a percentile
//! whose sample count fell) are removed too, so a scrape never shows a
//! stale window's number.

use super::Metrics;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokentap_core::analysis::context::BUCKETS;
use tokentap_core::analysis::engines::EngineWindow;
use tokentap_core::analysis::live::WindowSink;
use tokentap_core::analysis::span_report::TapReport;
use tokentap_core::analysis::stats::Summary;
use tokentap_core::labels::*;
use tokentap_core::table::{self, Metric, MetricDef, WindowGauge};
use tokentap_core::tap::Boundary;

/// One series as it was set: its family and label values (from a typed
/// label set), kept to remove it when a later window does not set it.
type Series = (&'static str, Vec<String>);

pub struct WindowGauges {
    metrics: Arc<Metrics>,
    /// The series each tap (or engine) set at its last window.
    last: Mutex<HashMap<String, HashSet<Series>>>,
}

impl WindowGauges {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        WindowGauges {
            metrics,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Sets `now` and removes what `key` set last time but not now.
    fn apply(&self, key: &str, now: Vec<(&'static MetricDef, Vec<String>, f64)>) {
        let mut set = HashSet::new();
        for (def, labels, v) in &now {
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.metrics.prom.set_window(def, &refs, *v);
            set.insert((def.name, labels.clone()));
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(before) = last.get(key) {
            for (name, labels) in before.difference(&set) {
                if let Some(def) = table::ALL.iter().find(|d| d.name == *name) {
                    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
                    self.metrics.prom.unset_window(def, &refs);
                }
            }
        }
        last.insert(key.to_owned(), set);
    }
}

/// Collects the gauge values of one window.
#[derive(Default)]
struct Out {
    v: Vec<(&'static MetricDef, Vec<String>, f64)>,
}

impl Out {
    fn put<L: LabelSet>(&mut self, m: &'static Metric<L, WindowGauge>, labels: L, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let values = labels.values();
            let values = values.as_ref().iter().map(|s| s.to_string()).collect();
            self.v.push((&m.def, values, v));
        }
    }
}

/// The gauges of one tap's window: every label set starts with the tap's.
struct TapOut<'a> {
    tap: &'a TapLabels,
    out: Out,
}

impl TapOut<'_> {
    fn put(&mut self, m: &'static Metric<TapLabels, WindowGauge>, v: Option<f64>) {
        self.out.put(m, self.tap.clone(), v);
    }

    /// Percentiles of a summary in ms, as seconds, each when available.
    fn percentiles(&mut self, m: &'static Metric<TapPercentile, WindowGauge>, s: &Summary) {
        for percentile in Percentile::ALL {
            let labels = TapPercentile {
                tap: self.tap.clone(),
                percentile,
            };
            self.out
                .put(m, labels, s.get(percentile.as_str()).map(|ms| ms / 1e3));
        }
    }

    fn stat(&mut self, stat: Stat, v: f64) {
        let labels = TapStat {
            tap: self.tap.clone(),
            stat,
        };
        self.out.put(&table::W_CONCURRENCY, labels, Some(v));
    }

    fn samples(&mut self, figure: Figure, n: usize) {
        let labels = TapFigure {
            tap: self.tap.clone(),
            figure,
        };
        self.out.put(&table::W_SAMPLES, labels, Some(n as f64));
    }

    fn input(&mut self, kind: InputKind, v: f64) {
        let labels = TapInput {
            tap: self.tap.clone(),
            kind,
        };
        self.out.put(&table::W_INPUT_RATE, labels, Some(v));
    }

    fn cache(&mut self, cache: CacheResult, ms: Option<f64>) {
        let labels = TapCache {
            tap: self.tap.clone(),
            cache,
        };
        self.out
            .put(&table::W_CACHE_TTFT, labels, ms.map(|ms| ms / 1e3));
    }

    fn bucket(
        &mut self,
        m: &'static Metric<TapBucket, WindowGauge>,
        bucket: ContextBucket,
        v: Option<f64>,
    ) {
        let labels = TapBucket {
            tap: self.tap.clone(),
            bucket,
        };
        self.out.put(m, labels, v);
    }
}

impl WindowSink for WindowGauges {
    fn window(&self, r: &TapReport, dropped: u64) {
        let a = &r.analysis;
        // Live windows are of configured taps: their boundary always parses.
        let Some(boundary) = Boundary::from_label(&a.boundary) else {
            return;
        };
        let tap = TapLabels {
            tap: a.tap.as_str().into(),
            boundary,
        };
        self.metrics
            .add(&table::WINDOW_SAMPLES_DROPPED, &tap, dropped);
        let mut o = TapOut {
            tap: &tap,
            out: Out::default(),
        };
        o.stat(Stat::Mean, a.concurrency.mean);
        o.stat(Stat::Max, f64::from(a.concurrency.max));
        o.samples(Figure::Requests, a.llm_requests);
        if let Some(t) = a.throughput.measured() {
            let th = &t.throughput;
            o.put(&table::W_REQUEST_RATE, Some(th.requests_per_s));
            o.put(&table::W_OUTPUT_RATE, Some(th.output_tokens_per_s));
            o.input(InputKind::All, th.input_tokens_per_s);
            o.input(InputKind::Uncached, th.uncached_input_tokens_per_s);
            if let Some(g) = &t.goodput {
                o.put(&table::W_GOODPUT_REQUESTS, Some(g.requests_per_s));
                o.put(&table::W_GOODPUT_TOKENS, Some(g.output_tokens_per_s));
                o.put(&table::W_ATTAINMENT, Some(g.attainment));
            }
        }
        if let Some(p) = a.memory_pressure.measured() {
            o.put(
                &table::W_TOKENS_IN_FLIGHT,
                Some(p.concurrency.tokens_in_flight),
            );
        }
        if let Some(c) = a.capacity.measured() {
            o.put(&table::CAPACITY, c.figure());
        }
        if let Some(k) = a.tradeoff.measured().and_then(|c| c.knee.as_ref()) {
            o.put(&table::KNEE, Some(k.concurrency));
        }
        if let Some(t) = a.ttft.measured() {
            o.percentiles(&table::W_TTFT, &t.ttft_ms);
            o.percentiles(&table::W_TPOT, &t.tpot_ms);
            o.samples(Figure::Ttft, t.ttft_ms.n);
            o.samples(Figure::Tpot, t.tpot_ms.n);
        }
        if let Some(i) = a.itl.measured() {
            o.percentiles(&table::W_ITL, &i.gap_ms);
            o.samples(Figure::Itl, i.gap_ms.n);
            o.put(&table::W_STALLS, Some(i.stalls as f64));
            o.put(&table::W_STALL_RATIO, i.stalls_per_1k_gaps.map(|r| r / 1e3));
            o.put(&table::W_FAKE_STREAMS, Some(i.fake_streams as f64));
        }
        if let Some(f) = a.fairness.measured() {
            o.put(&table::W_JAIN, f.jain_ttft);
            o.put(&table::W_MAX_MIN, f.max_min_ttft_ratio);
            for t in &f.tenants {
                let labels = TapTenant {
                    tap: tap.clone(),
                    tenant: t.tenant.as_str().into(),
                };
                o.out.put(
                    &table::W_TENANT_TTFT,
                    labels,
                    t.ttft_mean_ms.map(|ms| ms / 1e3),
                );
            }
        }
        if let Some(c) = a.prefix_cache.measured() {
            o.put(&table::W_CACHED_RATIO, c.cached_token_ratio);
            o.put(&table::W_CACHE_HIT_RATIO, c.hit_ratio);
            o.cache(CacheResult::Hit, c.ttft_hit_ms.mean);
            o.cache(CacheResult::Miss, c.ttft_miss_ms.mean);
            o.put(
                &table::W_CACHE_SAVED,
                c.saving_per_hit_ms.map(|ms| ms / 1e3),
            );
            o.put(&table::W_CACHED_COST, c.cached_token_cost_ratio);
            for (p, prefix) in c.prefix_reuse.iter().zip(PrefixSize::ALL) {
                let labels = TapPrefix {
                    tap: tap.clone(),
                    prefix,
                };
                o.out.put(&table::W_PREFIX_REUSE, labels, p.reuse_ratio);
            }
        }
        if let Some(c) = a.long_context.measured() {
            for (b, (name, _, _)) in c.buckets.iter().zip(BUCKETS) {
                let Some(bucket) = ContextBucket::from_label(name) else {
                    continue;
                };
                let ttft = b.ttft_ms.mean.map(|ms| ms / 1e3);
                o.bucket(&table::W_CONTEXT_TTFT, bucket, ttft);
                o.bucket(
                    &table::W_CONTEXT_PREFILL,
                    bucket,
                    b.prefill_tokens_per_s.mean,
                );
            }
            if let Some(f) = &c.ttft_fit {
                o.put(&table::W_TTFT_SLOPE, Some(f.slope / 1e3));
                o.put(&table::W_TTFT_SLOPE_R2, Some(f.r2));
            }
        }
        let key = format!("tap:{}", a.tap);
        self.apply(&key, o.out.v);
    }

    fn engines(&self, engines: &[EngineWindow]) {
        for e in engines {
            let mut out = Out::default();
            let labels = || Engine {
                engine: e.engine.as_str().into(),
            };
            out.put(&table::ENGINE_KV_USAGE, labels(), e.kv_usage_max);
            out.put(&table::ENGINE_PREEMPTIONS, labels(), e.preemptions);
            self.apply(&format!("engine:{}", e.engine), out.v);
        }
    }
}
