//! The process's correlator, started: built with its attribution sinks
//! (the metrics first, then the server's hooks), and the thread that lets
//! its groups settle on the clock (the core's `Correlator` never reads a
//! clock: `sweep` takes the instant).

pub mod metrics;

use crate::otlp::spans::SpanPipeline;
use crate::Registry;
use metrics::{CorrelationMetrics, NameLimits};
use std::sync::{Arc, Weak};
use std::time::SystemTime;
use std::time::{Duration, Instant};
use tokentap_core::correlate::{
    AttributionSink, CorrelationConfig, Correlator, Joined, Resolution,
};

/// A span per compound breakdown (`otlp::spans`), when spans are exported.
struct CompoundSpans(Arc<SpanPipeline>);

impl AttributionSink for CompoundSpans {
    fn resolved(&self, r: &Resolution) {
        for b in &r.compound {
            // The request's wall-clock start, from how long ago it was.
            let ago = Instant::now().saturating_duration_since(b.t0);
            let started_at = SystemTime::now()
                .checked_sub(ago)
                .unwrap_or(SystemTime::now());
            self.0.record_breakdown(b, started_at);
        }
    }

    fn counted(&self, _: Joined, _: u64) {}
}

/// Builds the correlator and starts its sweeper thread, which ends when
/// the correlator is dropped.
pub fn start(
    cfg: CorrelationConfig,
    names: NameLimits,
    metrics: &Arc<Registry>,
    spans: Option<Arc<SpanPipeline>>,
    hooks: &[Arc<dyn AttributionSink>],
) -> std::io::Result<Arc<Correlator>> {
    let mut sinks: Vec<Arc<dyn AttributionSink>> =
        vec![Arc::new(CorrelationMetrics::new(metrics.clone(), names))];
    if let Some(spans) = spans {
        sinks.push(Arc::new(CompoundSpans(spans)));
    }
    sinks.extend(hooks.iter().cloned());
    let c = Correlator::new(cfg, sinks);
    let weak: Weak<Correlator> = Arc::downgrade(&c);
    let every = (cfg.settle / 4).max(Duration::from_millis(20));
    std::thread::Builder::new()
        .name("tokentap-correlate".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            match weak.upgrade() {
                Some(c) => c.sweep(Instant::now()),
                None => return,
            }
        })?;
    Ok(c)
}
