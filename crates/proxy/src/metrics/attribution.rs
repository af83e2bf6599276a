//! Where the correlator's conclusions become metrics: boundary overhead,
//! relay delay, added jitter, buffering, token mismatches, guardrail calls
//! and exposure, and the correlation counters. Label values are tap and hop
//! names from the config, and fixed enums.

use super::Metrics;
use std::sync::Arc;
use tokentap_core::correlate::{AttributionSink, Joined, Resolution};
use tokentap_core::labels::{
    Correlation, GuardExposed, GuardHop, GuardVerdict, Overhead, OverheadPhase, Pair,
};
use tokentap_core::table;

pub struct CorrelationMetrics {
    metrics: Arc<Metrics>,
}

impl CorrelationMetrics {
    /// Also creates the `tokentap_correlation_total` series at 0.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        for result in Joined::ALL {
            metrics.touch(&table::CORRELATION, &Correlation { result });
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
            let (outer, inner) = (pair.outer.clone(), pair.inner.clone());
            let phases = [
                (OverheadPhase::RequestPath, pair.request_path),
                (OverheadPhase::Ttfb, pair.ttfb),
                (OverheadPhase::Ttft, pair.ttft),
                (OverheadPhase::E2e, Some(pair.e2e)),
            ];
            for (phase, v) in phases {
                if let Some(v) = v {
                    let labels = Overhead {
                        outer: outer.clone(),
                        inner: inner.clone(),
                        phase,
                    };
                    m.observe(&table::BOUNDARY_OVERHEAD, &labels, non_negative(v));
                }
            }
            let labels = Pair { outer, inner };
            for d in &pair.relay_delays {
                m.observe(&table::RELAY_DELAY, &labels, non_negative(*d));
            }
            for d in &pair.relay_after_first {
                m.observe(&table::RELAY_AFTER_FIRST, &labels, non_negative(*d));
            }
            for j in &pair.added_jitter {
                m.observe(&table::ADDED_JITTER, &labels, *j);
            }
            if let Some(share) = pair.buffered_share {
                m.observe(&table::BUFFERED_SHARE, &labels, share);
            }
            if pair.buffered {
                m.add(&table::STREAM_BUFFERED, &labels, 1);
            }
            if pair.token_mismatch.is_some() {
                m.add(&table::TOKEN_MISMATCH, &labels, 1);
            }
        }
        for h in &r.hops {
            let hop = GuardHop {
                hop: h.hop.clone(),
                phase: h.phase,
            };
            m.observe(&table::GUARDRAIL_DURATION, &hop, h.duration.as_secs_f64());
            let call = GuardVerdict {
                hop: h.hop.clone(),
                phase: h.phase,
                verdict: h.verdict,
            };
            m.add(&table::GUARDRAIL_CALLS, &call, 1);
        }
        for e in &r.exposure {
            let labels = GuardExposed {
                tap: e.owner.clone(),
                phase: e.phase,
            };
            m.observe(&table::GUARDRAIL_EXPOSED, &labels, e.exposed.as_secs_f64());
        }
    }

    fn counted(&self, result: Joined, n: u64) {
        self.metrics
            .add(&table::CORRELATION, &Correlation { result }, n);
    }
}
