//! One request as one tap saw it: the `RequestRecord`, and the `Meter` that
//! builds it from hook calls.
//!
//! Owns: the working definitions of `../shared/design/methodology.md` (TTFB,
//! time to first event, TTFT, ITL, TPOT, E2E, token counts and their source)
//! and the outcome of a request. Every duration is measured from the moment
//! the tap had the request headers, on one monotonic clock.
//!
//! Does not own: where records go (metrics, logs, later OTLP and the
//! correlator) or any label decision.

mod meter;
mod types;

pub use meter::{Meter, MeterCall, MeterLimits, TokenEvent, TokenSink, INLINE_PARSE_BYTES};
pub use types::*;
