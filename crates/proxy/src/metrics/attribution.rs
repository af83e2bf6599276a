//! Where the correlator's conclusions become metrics: boundary overhead,
//! relay delay, added jitter, buffering, token mismatches, guardrail calls
//! and exposure, and the correlation counters. Label values are tap and hop
//! names from the config, and fixed enums.

use super::Metrics;
use std::sync::Arc;
use tokentap_core::correlate::{AttributionSink, Joined, Resolution};
use tokentap_core::table;

pub struct CorrelationMetrics {
    metrics: Arc<Metrics>,
}

impl CorrelationMetrics {
    /// Also creates the `tokentap_correlation_total` series at 0.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        if let Some(c) = metrics.prom.counter(&table::CORRELATION) {
            for r in Joined::ALL {
                c.with_label_values(&[r.as_str()]);
            }
        }
        CorrelationMetrics { metrics }
    }
}

/// Overheads are durations: a negative difference (the layer answered
/// without waiting for the inner side) is observed as 0.
fn non_negative(v: f64) -> f64 {
    v.max(0.0)
}

impl AttributionSink for CorrelationMetrics {
    fn resolved(&self, r: &Resolution) {
        let m = &self.metrics;
        for pair in &r.pairs {
            let (o, i) = (&*pair.outer, &*pair.inner);
            let phases = [
                ("request_path", Some(pair.request_path)),
                ("ttfb", pair.ttfb),
                ("ttft", pair.ttft),
                ("e2e", Some(pair.e2e)),
            ];
            for (phase, v) in phases {
                if let Some(v) = v {
                    m.observe(&table::BOUNDARY_OVERHEAD, &[o, i, phase], non_negative(v));
                }
            }
            for d in &pair.relay_delays {
                m.observe(&table::RELAY_DELAY, &[o, i], non_negative(*d));
            }
            for j in &pair.added_jitter {
                m.observe(&table::ADDED_JITTER, &[o, i], *j);
            }
            if let Some(share) = pair.buffered_share {
                m.observe(&table::BUFFERED_SHARE, &[o, i], share);
            }
            if pair.buffered {
                m.add(&table::STREAM_BUFFERED, &[o, i], 1);
            }
            if pair.token_mismatch.is_some() {
                m.add(&table::TOKEN_MISMATCH, &[o, i], 1);
            }
        }
        for h in &r.hops {
            let phase = h.phase.as_str();
            m.observe(
                &table::GUARDRAIL_DURATION,
                &[&*h.hop, phase],
                h.duration.as_secs_f64(),
            );
            m.add(
                &table::GUARDRAIL_CALLS,
                &[&*h.hop, phase, h.verdict.as_str()],
                1,
            );
        }
        for e in &r.exposure {
            m.observe(
                &table::GUARDRAIL_EXPOSED,
                &[&*e.owner, e.phase.as_str()],
                e.exposed.as_secs_f64(),
            );
        }
    }

    fn counted(&self, result: Joined, n: u64) {
        self.metrics.add(&table::CORRELATION, &[result.as_str()], n);
    }
}
