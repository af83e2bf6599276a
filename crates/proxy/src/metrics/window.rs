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
use tokentap_core::analysis::report::TapReport;
use tokentap_core::analysis::stats::{Summary, PERCENTILES};
use tokentap_core::table;

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
    fn apply(&self, key: &str, now: Vec<(&'static table::MetricDef, Vec<String>, f64)>) {
        let mut set = HashSet::new();
        for (def, labels, v) in &now {
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.metrics.set(def, &refs, *v);
            set.insert((def.name, labels.clone()));
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(before) = last.get(key) {
            for (name, labels) in before.difference(&set) {
                if let Some(def) = table::ALL.iter().find(|d| d.name == *name) {
                    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
                    self.metrics.unset(def, &refs);
                }
            }
        }
        last.insert(key.to_owned(), set);
    }
}

/// Collects the gauge values of one window.
struct Out<'a> {
    tap: &'a str,
    boundary: &'a str,
    v: Vec<(&'static table::MetricDef, Vec<String>, f64)>,
}

impl Out<'_> {
    fn put(&mut self, def: &'static table::MetricDef, extra: &[&str], v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let mut labels = vec![self.tap.to_owned(), self.boundary.to_owned()];
            labels.extend(extra.iter().map(|s| s.to_string()));
            self.v.push((def, labels, v));
        }
    }

    /// Percentiles of a summary in ms, as seconds, each when available.
    fn quantiles(&mut self, def: &'static table::MetricDef, s: &Summary) {
        for (name, _) in PERCENTILES {
            self.put(def, &[name], s.get(name).map(|ms| ms / 1e3));
        }
    }
}

impl WindowSink for WindowGauges {
    fn window(&self, r: &TapReport, dropped: u64) {
        let a = &r.analysis;
        let mut o = Out {
            tap: &a.tap,
            boundary: &a.boundary,
            v: Vec::new(),
        };
        let labels = [a.tap.as_str(), a.boundary.as_str()];
        self.metrics
            .add(&table::WINDOW_SAMPLES_DROPPED, &labels, dropped);
        o.put(&table::W_CONCURRENCY, &["mean"], Some(a.concurrency.mean));
        o.put(
            &table::W_CONCURRENCY,
            &["max"],
            Some(f64::from(a.concurrency.max)),
        );
        o.put(
            &table::W_SAMPLES,
            &["requests"],
            Some(a.llm_requests as f64),
        );
        if let Some(t) = a.throughput.measured() {
            let th = &t.throughput;
            o.put(&table::W_REQUEST_RATE, &[], Some(th.requests_per_s));
            o.put(&table::W_OUTPUT_RATE, &[], Some(th.output_tokens_per_s));
            o.put(&table::W_INPUT_RATE, &["all"], Some(th.input_tokens_per_s));
            o.put(
                &table::W_INPUT_RATE,
                &["uncached"],
                Some(th.uncached_input_tokens_per_s),
            );
            if let Some(g) = &t.goodput {
                o.put(&table::W_GOODPUT_REQUESTS, &[], Some(g.requests_per_s));
                o.put(&table::W_GOODPUT_TOKENS, &[], Some(g.output_tokens_per_s));
                o.put(&table::W_ATTAINMENT, &[], Some(g.attainment));
            }
        }
        if let Some(p) = a.memory_pressure.measured() {
            o.put(
                &table::W_TOKENS_IN_FLIGHT,
                &[],
                Some(p.concurrency.tokens_in_flight),
            );
        }
        if let Some(c) = a.capacity.measured() {
            o.put(&table::CAPACITY, &[], c.figure());
        }
        if let Some(k) = a.tradeoff.measured().and_then(|c| c.knee.as_ref()) {
            o.put(&table::KNEE, &[], Some(k.concurrency));
        }
        if let Some(t) = a.ttft.measured() {
            o.quantiles(&table::W_TTFT, &t.ttft_ms);
            o.quantiles(&table::W_TPOT, &t.tpot_ms);
            o.put(&table::W_SAMPLES, &["ttft"], Some(t.ttft_ms.n as f64));
            o.put(&table::W_SAMPLES, &["tpot"], Some(t.tpot_ms.n as f64));
        }
        if let Some(i) = a.itl.measured() {
            o.quantiles(&table::W_ITL, &i.gap_ms);
            o.put(&table::W_SAMPLES, &["itl"], Some(i.gap_ms.n as f64));
            o.put(&table::W_STALLS, &[], Some(i.stalls as f64));
            o.put(
                &table::W_STALL_RATIO,
                &[],
                i.stalls_per_1k_gaps.map(|r| r / 1e3),
            );
            o.put(&table::W_FAKE_STREAMS, &[], Some(i.fake_streams as f64));
        }
        if let Some(f) = a.fairness.measured() {
            o.put(&table::W_JAIN, &[], f.jain_ttft);
            o.put(&table::W_MAX_MIN, &[], f.max_min_ttft_ratio);
            for t in &f.tenants {
                o.put(
                    &table::W_TENANT_TTFT,
                    &[&t.tenant],
                    t.ttft_mean_ms.map(|ms| ms / 1e3),
                );
            }
        }
        if let Some(c) = a.prefix_cache.measured() {
            o.put(&table::W_CACHED_RATIO, &[], c.cached_token_ratio);
            o.put(&table::W_CACHE_HIT_RATIO, &[], c.hit_ratio);
            o.put(
                &table::W_CACHE_TTFT,
                &["hit"],
                c.ttft_hit_ms.mean.map(|ms| ms / 1e3),
            );
            o.put(
                &table::W_CACHE_TTFT,
                &["miss"],
                c.ttft_miss_ms.mean.map(|ms| ms / 1e3),
            );
            for (p, name) in c.prefix_reuse.iter().zip(["1k", "4k", "16k"]) {
                o.put(&table::W_PREFIX_REUSE, &[name], p.reuse_ratio);
            }
        }
        if let Some(c) = a.long_context.measured() {
            for (b, (name, _, _)) in c.buckets.iter().zip(BUCKETS) {
                o.put(
                    &table::W_CONTEXT_TTFT,
                    &[name],
                    b.ttft_ms.mean.map(|ms| ms / 1e3),
                );
                o.put(
                    &table::W_CONTEXT_PREFILL,
                    &[name],
                    b.prefill_tokens_per_s.mean,
                );
            }
            if let Some(f) = &c.ttft_fit {
                o.put(&table::W_TTFT_SLOPE, &[], Some(f.slope / 1e3));
                o.put(&table::W_TTFT_SLOPE_R2, &[], Some(f.r2));
            }
        }
        self.apply(&format!("tap:{}", a.tap), o.v);
    }

    fn engines(&self, engines: &[EngineWindow]) {
        for e in engines {
            let mut v = Vec::new();
            if let Some(u) = e.kv_usage_max {
                v.push((&table::ENGINE_KV_USAGE, vec![e.engine.clone()], u));
            }
            if let Some(p) = e.preemptions {
                v.push((&table::ENGINE_PREEMPTIONS, vec![e.engine.clone()], p));
            }
            self.apply(&format!("engine:{}", e.engine), v);
        }
    }
}
