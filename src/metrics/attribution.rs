//! Where the correlator's conclusions become metrics: boundary overhead,
//! relay delay, added jitter, buffering, token mismatches, guardrail calls
//! and exposure, and the correlation counters. Label values are tap and hop
//! names from the config, and fixed enums.

use super::prom::PromMetrics;
use crate::correlate::{AttributionSink, Joined, Resolution};

pub struct CorrelationMetrics {
    prom: PromMetrics,
}

impl CorrelationMetrics {
    /// Also creates the `tokentap_correlation_total` series at 0.
    pub fn new(prom: PromMetrics) -> Self {
        for r in Joined::ALL {
            prom.correlation.with_label_values(&[r.as_str()]);
        }
        CorrelationMetrics { prom }
    }
}

/// Overheads are durations: a negative difference (the layer answered
/// without waiting for the inner side) is observed as 0.
fn non_negative(v: f64) -> f64 {
    v.max(0.0)
}

impl AttributionSink for CorrelationMetrics {
    fn resolved(&self, r: &Resolution) {
        let p = &self.prom;
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
                    p.boundary_overhead
                        .with_label_values(&[o, i, phase])
                        .observe(non_negative(v));
                }
            }
            let relay = p.relay_delay.with_label_values(&[o, i]);
            for d in &pair.relay_delays {
                relay.observe(non_negative(*d));
            }
            let jitter = p.added_jitter.with_label_values(&[o, i]);
            for j in &pair.added_jitter {
                jitter.observe(*j);
            }
            if let Some(share) = pair.buffered_share {
                p.buffered_share.with_label_values(&[o, i]).observe(share);
            }
            if pair.buffered {
                p.stream_buffered.with_label_values(&[o, i]).inc();
            }
            if pair.token_mismatch.is_some() {
                p.token_mismatch.with_label_values(&[o, i]).inc();
            }
        }
        for h in &r.hops {
            let phase = h.phase.as_str();
            p.guardrail_duration
                .with_label_values(&[&*h.hop, phase])
                .observe(h.duration.as_secs_f64());
            p.guardrail_calls
                .with_label_values(&[&*h.hop, phase, h.verdict.as_str()])
                .inc();
        }
        for e in &r.exposure {
            p.guardrail_exposed
                .with_label_values(&[&*e.owner, e.phase.as_str()])
                .observe(e.exposed.as_secs_f64());
        }
    }

    fn counted(&self, result: Joined, n: u64) {
        self.prom
            .correlation
            .with_label_values(&[result.as_str()])
            .inc_by(n);
    }
}
