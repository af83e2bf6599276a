//! What the fail-open guard needs from the `Meter`: the entry points a
//! hook calls (each run by the proxy under `catch_unwind`), a record that
//! cannot fail for when `finish` itself panicked, and, in test builds
//! (feature `fault-injection`), a way to make an entry point panic (or
//! stall) so the guard's promises can be shown end to end.

use super::Meter;
use crate::decode::request::RequestInfo;
use crate::record::types::*;
use std::time::Instant;

/// How long an injected stall blocks (`Meter::inject_stall`).
#[cfg(feature = "fault-injection")]
pub const STALL: std::time::Duration = std::time::Duration::from_millis(300);

crate::labels::label_enum! {
    /// A `Meter` call a pingora hook makes (its name is how a test names
    /// it in `x-tokentap-fault`).
    pub enum MeterCall {
        /// `request_head`: path, request id, Content-Length.
        RequestHead = "request_head",
        /// `request_body` and `set_request`: the body copy and its parse.
        RequestBody = "request_body",
        /// `response_head`: status, content type, decoder choice.
        ResponseHead = "response_head",
        /// `response_body`: one piece through the decoders.
        ResponseBody = "response_body",
        /// `response_end`: the last byte, a JSON body's parse.
        ResponseEnd = "response_end",
        /// `finish`: the record.
        Finish = "finish",
    }
}

impl Meter {
    /// Makes `call` panic when it next runs (test builds only).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&mut self, call: MeterCall) {
        self.fault = Some(call);
    }

    /// Makes every run of `call` block its thread for [`STALL`] (test
    /// builds only): a decoder that takes its time, to show that the
    /// bytes it measures are not held for it.
    #[cfg(feature = "fault-injection")]
    pub fn inject_stall(&mut self, call: MeterCall) {
        self.stall = Some(call);
    }

    /// Panics if a fault was injected at `call`, blocks if a stall was
    /// (test builds only).
    #[cfg(feature = "fault-injection")]
    #[allow(clippy::panic)]
    pub(super) fn fault_point(&self, call: MeterCall) {
        if self.fault == Some(call) {
            panic!("fault injected at Meter::{}", call.as_str());
        }
        if self.stall == Some(call) {
            std::thread::sleep(STALL);
        }
    }

    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub(super) fn fault_point(&self, _call: MeterCall) {}

    /// The record of a request whose `finish` panicked: what is known
    /// without running any decoding code (start, end, status, ids),
    /// counted as `unmeasured` with `decoder_panic`.
    pub fn unmeasured_record(&self, at: Instant) -> RequestRecord {
        RequestRecord {
            started_at: self.started_at,
            t0: self.t0,
            operation: self.operation,
            stream: false,
            request: RequestInfo::default(),
            request_id: self.request_id.clone(),
            request_body_bytes: 0,
            status: self.status,
            response_model: None,
            response_body_bytes: self.response_bytes,
            ttfb: None,
            time_to_first_event: None,
            ttft: None,
            ttft_visible: None,
            last_token: None,
            e2e: at.saturating_duration_since(self.t0),
            events: 0,
            token_events: 0,
            reasoning_events: 0,
            tool_call_events: 0,
            comments: 0,
            gaps: GapStats::default(),
            input_tokens: None,
            input_source: None,
            output_tokens: None,
            output_source: None,
            cached_tokens: None,
            reasoning_tokens: None,
            tpot: None,
            finish_reason: None,
            done_seen: false,
            outcome: Outcome::Unmeasured,
            error_type: None,
            measure_error: Some(MeasureError::DecoderPanic),
            trace: self.trace,
            trace_created: self.trace_created,
            verdict: None,
            tenant: None,
            in_flight: self.in_flight,
            body_kind: self.body_kind,
            dialect: self.dialect,
            dialect_source: self.dialect_source,
            engine_timing: None,
        }
    }
}
