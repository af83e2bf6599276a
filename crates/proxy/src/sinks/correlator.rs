//! A finished request as the compact `TapRecord` the correlator joins.

use super::{Finished, RecordSink};
use std::sync::Arc;
use tokentap_core::correlate::{Correlator, TapRecord, Verdict};
use tokentap_core::tap::Boundary;

pub struct CorrelatorSink(pub Arc<Correlator>);

impl RecordSink for CorrelatorSink {
    fn name(&self) -> tokentap_core::labels::SinkName {
        tokentap_core::labels::SinkName::Correlator
    }

    fn finished(&self, f: &Finished<'_>) {
        let r = f.record;
        let (events, events_truncated) = f
            .offsets
            .map_or((Vec::new(), false), |o| (o.micros.clone(), o.truncated));
        let boundary = f.config.boundary;
        // A tool or retrieval tap's records are its calls (`crate::calls`).
        if matches!(boundary, Boundary::Tool | Boundary::Retrieval) {
            return;
        }
        let hop = match boundary {
            Boundary::Guardrail => f.config.hop.clone(),
            _ => None,
        };
        self.0.submit(
            TapRecord {
                tap: f.tap.tap.clone(),
                boundary,
                hop,
                trace: r.trace,
                fingerprint: r.request.fingerprint,
                request_id: r.request_id.as_deref().map(Arc::from),
                t0: r.t0,
                ttfb: r.ttfb,
                ttft: r.ttft,
                e2e: r.e2e,
                events,
                events_truncated,
                output_tokens: r.output_tokens,
                input_tokens: r.input_tokens,
                outcome: r.outcome,
                verdict: r.verdict.unwrap_or(Verdict::Unknown),
                links: r.request.links.clone(),
            },
            std::time::Instant::now(),
        );
    }
}
