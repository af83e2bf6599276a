//! Joining the records of one request seen by several taps of this process,
//! and attributing time to the layers between them.
//!
//! - `types`: the compact `TapRecord` kept per request per tap, and the
//!   conclusions (pair attribution, guardrail calls, exposure).
//! - `resolve`: pure — a settled group of records → nesting, attribution,
//!   guardrail phases and exposed time.
//! - `compound`: pure — a compound request's TTFT and E2E split into its
//!   LLM, tool, retrieval and guardrail calls and the residual.
//! - `linker`: the compound stage — a compound request no trace id joined
//!   gets the calls its links (and, for calls without any, time) give it;
//!   ambiguity is counted, never assigned.
//! - `store`: the bounded, settling `Correlator` (join by trace id, fall back
//!   to fingerprints, count what it did).

pub mod compound;
pub mod linker;
pub mod resolve;
pub mod span;
pub mod store;
pub mod types;

pub use crate::record::Verdict;
pub use store::{AttributionSink, CorrelationConfig, Correlator, Joined, OpenCompound, OpenTrace};
pub use types::*;
