//! The correlator's cost per record at its cap, with 1,000, 10,000 and
//! 100,000 held (issue 43: it used to grow with what was held). Each
//! iteration submits one record to a store at its cap (so the oldest is
//! evicted) and, every 1,000, sweeps: what a joiner's receiver and a tap's
//! relay thread (`CorrelatorSink`) pay per request. Traced records (a
//! trace group each) and loose ones (no trace id: the fingerprint index).
//!
//! `cargo bench -p tokentap-join --bench store`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::correlate::{
    AttributionSink, Clocks, CorrelationConfig, Correlator, Joined, Resolution, TapRecord,
};
use tokentap_core::record::{Outcome, Verdict};
use tokentap_core::tap::Boundary;
use tokentap_core::trace::TraceParent;

struct Discard;

impl AttributionSink for Discard {
    fn resolved(&self, _: &Resolution) {}
    fn counted(&self, _: Joined, _: u64) {}
}

fn record(base: Instant, i: u64, traced: bool) -> TapRecord {
    TapRecord {
        tap: Arc::from("gw"),
        boundary: Boundary::Gateway,
        hop: None,
        trace: traced.then(TraceParent::generate),
        fingerprint: Some(i),
        request_id: None,
        t0: base,
        ttfb: Some(Duration::from_millis(1)),
        ttft: Some(Duration::from_millis(5)),
        e2e: Duration::from_millis(100),
        events: vec![5_000, 6_000, 7_000],
        events_truncated: false,
        output_tokens: Some(3),
        input_tokens: None,
        outcome: Outcome::Ok,
        verdict: Verdict::Unknown,
        links: Default::default(),
    }
}

fn at_cap(c: &mut Criterion) {
    let mut g = c.benchmark_group("correlator_record_at_cap");
    for traced in [true, false] {
        for held in [1_000usize, 10_000, 100_000] {
            let cfg = CorrelationConfig {
                settle: Duration::from_secs(3600),
                max_age: Duration::from_secs(7200),
                max_groups: held,
                fingerprint_window: Duration::from_secs(5),
                max_events: 256,
                buffered_share: 0.9,
                clocks: Clocks::PerTap,
                compound_links: true,
            };
            let store = Correlator::new(cfg, vec![Arc::new(Discard)]);
            let base = Instant::now();
            for i in 0..held as u64 {
                store.submit(record(base, i, traced), base);
            }
            let mut i = held as u64;
            let name = if traced { "traced" } else { "loose" };
            g.bench_with_input(BenchmarkId::new(name, held), &held, |b, _| {
                b.iter(|| {
                    i += 1;
                    store.submit(black_box(record(base, i, traced)), base);
                    if i.is_multiple_of(1_000) {
                        store.sweep(base);
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, at_cap);
criterion_main!(benches);
