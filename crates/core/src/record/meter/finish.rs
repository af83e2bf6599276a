//! `Meter::finish`: the record of a request from what its hooks reported —
//! the outcome (transport end, status, stream terminator, measurement
//! errors), the token counts and where they came from, TTFT and TPOT.

use super::{Meter, MeterCall};
use crate::decode::BodyKind;
use crate::record::types::*;
use std::time::Instant;

impl Meter {
    /// Closes the record.
    pub fn finish(&mut self, at: Instant, end: TransportEnd) -> RequestRecord {
        self.fault_point(MeterCall::Finish);
        // A request that was never known to be an LLM call (or a guardrail
        // answer to read) has nothing measured to fail.
        if !(self.operation.is_llm() || self.read_verdict) {
            self.stream.measure_error = None;
            self.request_error = None;
        }
        // What a request body said counts only for an LLM call (it was read
        // in case the response named a dialect).
        if !self.operation.is_llm() {
            self.request = crate::decode::request::RequestInfo::default();
            self.path_model = None;
        }
        if self.request.model.is_none() {
            self.request.model = self.path_model.take();
        }
        let st = &self.stream;
        let t0 = self.t0;
        let usage_source = if st.usage_from_extension {
            TokenSource::UsageExtension
        } else {
            TokenSource::Usage
        };
        let since = move |t: Option<Instant>| t.map(|t| t.saturating_duration_since(t0));
        let end_at = match end {
            TransportEnd::Complete => self.t_body_end.unwrap_or(at),
            _ => at,
        };
        let e2e = end_at.saturating_duration_since(self.t0);
        let is_sse =
            matches!(self.body_kind, BodyKind::Sse | BodyKind::Ndjson) && self.operation.is_llm();
        let status = self.status.unwrap_or(0);

        let (outcome, error_type) = match end {
            TransportEnd::ClientGone => (Outcome::ClientCancelled, Some(ErrorType::ClientClosed)),
            TransportEnd::BadRequest => (Outcome::HttpError, Some(ErrorType::BadRequest)),
            TransportEnd::Internal => (Outcome::UpstreamError, Some(ErrorType::Internal)),
            TransportEnd::Upstream(kind) if self.status.is_some() => {
                (Outcome::UpstreamTruncated, Some(kind))
            }
            TransportEnd::Upstream(kind) => (Outcome::UpstreamError, Some(kind)),
            TransportEnd::Complete if st.error_event => {
                (Outcome::UpstreamError, Some(ErrorType::StreamErrorEvent))
            }
            TransportEnd::Complete if status >= 400 => (Outcome::HttpError, None),
            TransportEnd::Complete
                if is_sse
                    && st.measure_error.is_none()
                    && (200..300).contains(&status)
                    && !st.done
                    && st.finish.is_none() =>
            {
                (
                    Outcome::UpstreamTruncated,
                    Some(ErrorType::MissingTerminator),
                )
            }
            TransportEnd::Complete if st.measure_error.is_some() => (Outcome::Unmeasured, None),
            TransportEnd::Complete => (Outcome::Ok, None),
        };

        let decoded = (self.body.is_streaming() || self.body_kind == BodyKind::Json)
            && st.measure_error.is_none();
        let (output_tokens, output_source) = match st.usage.completion_tokens {
            Some(n) => (Some(n), Some(usage_source)),
            None if st.estimator.is_some() && decoded && self.operation.is_llm() => {
                (Some(st.estimated), Some(TokenSource::Estimate))
            }
            None if self.body.is_streaming() && st.measure_error.is_none() => {
                (Some(st.choice_deltas), Some(TokenSource::Events))
            }
            None => (None, None),
        };
        let ttft = since(st.t_first_token);
        let tpot = match (outcome, ttft, output_tokens) {
            (Outcome::Ok, Some(ttft), Some(n)) if n >= 2 && self.is_stream() => {
                let n = u32::try_from(n - 1).unwrap_or(u32::MAX);
                Some(e2e.saturating_sub(ttft) / n)
            }
            _ => None,
        };

        // Before the request info is moved into the record.
        let (input_tokens, input_source) = match (
            self.stream.usage.prompt_tokens,
            self.request.prompt_tokens_estimate,
        ) {
            (Some(n), _) => (Some(n), Some(usage_source)),
            (None, Some(n)) => (Some(n), Some(TokenSource::Estimate)),
            (None, None) => (None, None),
        };
        RequestRecord {
            started_at: self.started_at,
            t0: self.t0,
            operation: self.operation,
            stream: self.is_stream(),
            request: std::mem::take(&mut self.request),
            request_id: self.request_id.take(),
            request_body_bytes: self.req_body.total(),
            status: self.status,
            response_model: self.stream.response_model.take(),
            response_body_bytes: self.response_bytes,
            ttfb: since(self.t_headers),
            time_to_first_event: since(self.stream.t_first_event),
            ttft,
            ttft_visible: since(self.stream.t_first_visible),
            last_token: since(self.stream.prev_token),
            e2e,
            events: self.stream.events,
            token_events: self.stream.token_events,
            reasoning_events: self.stream.reasoning_events,
            tool_call_events: self.stream.tool_call_events,
            comments: self.stream.comments,
            gaps: self.stream.gaps,
            input_tokens,
            input_source,
            output_tokens,
            output_source,
            cached_tokens: self.stream.usage.cached_tokens,
            reasoning_tokens: self.stream.usage.reasoning_tokens,
            tpot,
            finish_reason: self.stream.finish,
            done_seen: self.stream.done,
            outcome,
            error_type,
            measure_error: self.stream.measure_error.or(self.request_error),
            trace: self.trace,
            trace_created: self.trace_created,
            tenant: self.tenant.take(),
            in_flight: self.in_flight,
            body_kind: self.body_kind,
            dialect: self.dialect,
            dialect_source: self.dialect_source,
            engine_timing: self.stream.engine_timing,
            verdict: self.read_verdict.then(|| match outcome {
                Outcome::Ok | Outcome::Unmeasured => self.verdict.unwrap_or(Verdict::Unknown),
                _ => Verdict::Error,
            }),
        }
    }
}
