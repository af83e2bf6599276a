//! What the correlator keeps of each request at each tap, and what it
//! concludes about a pair of taps or a guardrail hop.

use crate::links::Links;
use crate::record::{Outcome, Verdict};
use crate::tap::Boundary;
use crate::trace::TraceParent;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One request as one tap saw it, reduced to what joining and attribution
/// need (no text, O(1) but for the capped event offsets).
#[derive(Debug, Clone)]
pub struct TapRecord {
    pub tap: Arc<str>,
    pub boundary: Boundary,
    /// The guardrail hop name (guardrail taps only).
    pub hop: Option<Arc<str>>,
    pub trace: Option<TraceParent>,
    pub fingerprint: Option<u64>,
    /// The client's `x-request-id` (for diagnostics and tests).
    pub request_id: Option<Arc<str>>,
    /// When the tap had the request headers.
    pub t0: Instant,
    pub ttfb: Option<Duration>,
    pub ttft: Option<Duration>,
    pub e2e: Duration,
    /// Microseconds from `t0` of each token-bearing event, up to a cap.
    pub events: Vec<u32>,
    /// More token events happened than `events` holds.
    pub events_truncated: bool,
    pub output_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    pub outcome: Outcome,
    pub verdict: Verdict,
    /// What links it to the other steps of an agent loop (hashes only):
    /// how the compound stage (`linker`) joins records no trace id joined.
    pub links: Links,
}

#[cfg(test)]
impl TapRecord {
    /// A test's record: `tap` at `boundary` from `t0` for `e2e`, completed,
    /// nothing else known (set what a test needs with struct update).
    pub(crate) fn sample(tap: &str, boundary: Boundary, t0: Instant, e2e: Duration) -> TapRecord {
        TapRecord {
            tap: Arc::from(tap),
            boundary,
            hop: None,
            trace: None,
            fingerprint: None,
            request_id: None,
            t0,
            ttfb: None,
            ttft: None,
            e2e,
            events: Vec::new(),
            events_truncated: false,
            output_tokens: None,
            input_tokens: None,
            outcome: Outcome::Ok,
            verdict: Verdict::Unknown,
            links: Links::default(),
        }
    }
}

impl TapRecord {
    pub fn end(&self) -> Instant {
        self.t0 + self.e2e
    }

    pub fn is_guardrail(&self) -> bool {
        self.boundary == Boundary::Guardrail
    }

    /// Absolute time of token event `k`.
    pub fn event_at(&self, k: usize) -> Option<Instant> {
        self.events
            .get(k)
            .map(|us| self.t0 + Duration::from_micros(u64::from(*us)))
    }
}

/// Whose clock a group's instants come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clocks {
    /// One monotonic clock for every tap (one process): instants of
    /// different taps can be compared.
    #[default]
    Shared,
    /// Each tap's own clock (taps on different machines, joined from their
    /// spans): only durations measured at one tap are comparable; wall
    /// times group records but order nothing.
    PerTap,
}

/// How two records were found to be the same request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JoinKind {
    Trace,
    Fingerprint,
}

/// What a layer (between an outer and an inner tap) added to one request.
/// Signed seconds: outer minus inner.
#[derive(Debug, Clone, PartialEq)]
pub struct PairAttribution {
    pub outer: Arc<str>,
    pub inner: Arc<str>,
    /// The `x-request-id` at the outer tap, and at the inner tap.
    pub request_id: Option<Arc<str>>,
    pub inner_request_id: Option<Arc<str>>,
    pub joined_by: JoinKind,
    /// Outer request received → inner request received (needs one clock:
    /// `None` when the taps' clocks are their own, see `Clocks`).
    pub request_path: Option<f64>,
    pub ttfb: Option<f64>,
    pub ttft: Option<f64>,
    pub e2e: f64,
    /// k-th token event at the outer tap minus the k-th at the inner tap
    /// (needs one clock: empty when the taps' clocks are their own).
    pub relay_delays: Vec<f64>,
    /// For k ≥ 1: how much later the k-th token event came after the first
    /// at the outer tap than at the inner — each side on its own clock.
    pub relay_after_first: Vec<f64>,
    /// |outer gap − inner gap| for each gap both sides have.
    pub added_jitter: Vec<f64>,
    /// Share of the inner stream's token events that had passed the inner
    /// tap before the outer tap saw its first token.
    pub buffered_share: Option<f64>,
    pub buffered: bool,
    /// Output tokens outer minus inner, when both are known and differ.
    pub token_mismatch: Option<i64>,
}

crate::names::label_enum! {
    /// Which part of a request a guardrail call belongs to.
    pub enum Phase {
        /// Before the engine request (input guardrails).
        Input = "input",
        /// During or after the engine stream (output guardrails).
        Output = "output",
        /// The call could not be placed (not joined to a request).
        Unknown = "unknown",
    }
}

/// One guardrail call placed in its request.
#[derive(Debug, Clone, PartialEq)]
pub struct HopCall {
    pub hop: Arc<str>,
    /// The `x-request-id` of the request the call belongs to, if known.
    pub request_id: Option<Arc<str>>,
    /// The chain tap whose layer made the call (a gateway, else compound).
    pub owner: Option<Arc<str>>,
    pub phase: Phase,
    pub duration: Duration,
    pub verdict: Verdict,
}

/// Guardrail time a request waited for, per phase: the union of its calls'
/// intervals (parallel calls count once) minus what overlapped engine work.
#[derive(Debug, Clone, PartialEq)]
pub struct Exposure {
    pub owner: Arc<str>,
    pub request_id: Option<Arc<str>>,
    pub phase: Phase,
    pub exposed: Duration,
    pub calls: usize,
}

/// Everything concluded about one request group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolution {
    pub pairs: Vec<PairAttribution>,
    pub hops: Vec<HopCall>,
    pub exposure: Vec<Exposure>,
    /// Where each compound request of the group spent its time.
    pub compound: Vec<super::compound::Breakdown>,
}
