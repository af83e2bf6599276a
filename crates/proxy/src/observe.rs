//! Extension points for whoever wants records or token events besides the
//! metrics: tests (ground-truth comparisons), the demo, later the record log,
//! OTLP and the correlator. Both are called inline, so implementations must
//! be cheap and must never block.

use crate::metrics::TapLabels;
use std::sync::Arc;
use tokentap_core::correlate::AttributionSink;
use tokentap_core::record::{RequestRecord, TokenEvent};

/// Receives every finished request of every tap.
pub trait RecordSink: Send + Sync {
    fn record(&self, tap: &TapLabels, model: &str, record: &RequestRecord);
}

/// Receives every token-bearing event as it passes (per chunk: keep it O(1)).
pub trait EventObserver: Send + Sync {
    fn token_event(&self, tap: &str, request_id: Option<&str>, ev: &TokenEvent<'_>);
}

/// The optional listeners a server is built with.
#[derive(Clone, Default)]
pub struct Hooks {
    pub observer: Option<Arc<dyn EventObserver>>,
    pub records: Vec<Arc<dyn RecordSink>>,
    /// Receive the correlator's conclusions (besides the metrics).
    pub attributions: Vec<Arc<dyn AttributionSink>>,
}
