//! What the fail-open guard needs from the `Meter`: the entry points a
//! hook calls (each run by the proxy under `catch_unwind`), a record that
//! cannot fail for when `finish` itself panicked, and, in test builds
//! (feature `fault-injection`), a way to make an entry point panic so the
//! guard's promises can be shown end to end (a stalled entry point is the
//! proxy's: the core does not wait).

use super::Meter;
use crate::decode::request::RequestInfo;
use crate::record::types::*;
use std::time::Instant;

crate::names::label_enum! {
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

    /// Panics if a fault was injected at `call` (test builds only).
    #[cfg(feature = "fault-injection")]
    #[allow(clippy::panic)]
    pub(super) fn fault_point(&self, call: MeterCall) {
        if self.fault == Some(call) {
            panic!("fault injected at Meter::{}", call.as_str());
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
            operation: self.route.operation,
            stream: false,
            request: RequestInfo::default(),
            request_id: self.req.id.clone(),
            request_body_bytes: 0,
            status: self.resp.status,
            response_model: None,
            response_body_bytes: self.resp.bytes,
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
            trace: self.req.trace,
            trace_created: self.req.trace_created,
            verdict: None,
            tenant: None,
            in_flight: self.load.in_flight,
            body_kind: self.resp.kind,
            dialect: self.route.dialect.dialect(),
            dialect_source: self.route.dialect.source(),
            engine_timing: None,
        }
    }
}
