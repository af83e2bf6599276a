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
        if !(self.route.operation.is_llm() || self.resp.read_verdict) {
            self.stream.end.measure_error = None;
            self.req.error = None;
        }
        // What a request body said counts only for an LLM call (it was read
        // in case the response named a dialect).
        if !self.route.operation.is_llm() {
            // A compound system's request is no LLM call, but its links
            // (its user text) are what joins its calls.
            let links = std::mem::take(&mut self.req.info.links);
            self.req.info = crate::decode::request::RequestInfo {
                links,
                ..Default::default()
            };
            self.route.path_model = None;
        }
        if self.req.info.model.is_none() {
            self.req.info.model = self.route.path_model.take();
        }
        let st = &self.stream;
        let t0 = self.t0;
        let usage_source = if st.tokens.from_extension {
            TokenSource::UsageExtension
        } else {
            TokenSource::Usage
        };
        let since = move |t: Option<Instant>| t.map(|t| t.saturating_duration_since(t0));
        // A client that leaves once the stream's terminal event has gone
        // past (the official OpenAI client closes without reading the last
        // chunk) had the whole answer: the request ends at that event.
        let end = match (end, st.end.done_at) {
            (TransportEnd::ClientGone, Some(_)) if self.resp.status.is_some_and(|s| s < 400) => {
                TransportEnd::Complete
            }
            _ => end,
        };
        let end_at = match end {
            TransportEnd::Complete => self.resp.t_body_end.or(st.end.done_at).unwrap_or(at),
            _ => at,
        };
        let e2e = end_at.saturating_duration_since(self.t0);
        let is_sse = matches!(self.resp.kind, BodyKind::Sse | BodyKind::Ndjson)
            && self.route.operation.is_llm();
        let status = self.resp.status.unwrap_or(0);

        let (outcome, error_type) = match end {
            TransportEnd::ClientGone => (Outcome::ClientCancelled, Some(ErrorType::ClientClosed)),
            TransportEnd::BadRequest => (Outcome::HttpError, Some(ErrorType::BadRequest)),
            TransportEnd::Internal => (Outcome::UpstreamError, Some(ErrorType::Internal)),
            TransportEnd::Upstream(kind) if self.resp.status.is_some() => {
                (Outcome::UpstreamTruncated, Some(kind))
            }
            TransportEnd::Upstream(kind) => (Outcome::UpstreamError, Some(kind)),
            TransportEnd::Complete if st.end.error_event => {
                (Outcome::UpstreamError, Some(ErrorType::StreamErrorEvent))
            }
            TransportEnd::Complete if status >= 400 => (Outcome::HttpError, None),
            TransportEnd::Complete
                if is_sse
                    && st.end.measure_error.is_none()
                    && (200..300).contains(&status)
                    && st.end.done_at.is_none()
                    && st.end.finish.is_none() =>
            {
                (
                    Outcome::UpstreamTruncated,
                    Some(ErrorType::MissingTerminator),
                )
            }
            TransportEnd::Complete if st.end.measure_error.is_some() => (Outcome::Unmeasured, None),
            TransportEnd::Complete => (Outcome::Ok, None),
        };

        let decoded = (self.resp.body.is_streaming() || self.resp.kind == BodyKind::Json)
            && st.end.measure_error.is_none();
        let (output_tokens, output_source) = match st.tokens.usage.completion_tokens {
            Some(n) => (Some(n), Some(usage_source)),
            None if st.tokens.estimator.is_some() && decoded && self.route.operation.is_llm() => {
                (Some(st.tokens.estimated), Some(TokenSource::Estimate))
            }
            None if self.resp.body.is_streaming() && st.end.measure_error.is_none() => {
                (Some(st.counts.choice_deltas), Some(TokenSource::Events))
            }
            None => (None, None),
        };
        let ttft = since(st.timing.first_token);
        let tpot = match (outcome, ttft, output_tokens) {
            (Outcome::Ok, Some(ttft), Some(n)) if n >= 2 && self.is_stream() => {
                let n = u32::try_from(n - 1).unwrap_or(u32::MAX);
                Some(e2e.saturating_sub(ttft) / n)
            }
            _ => None,
        };

        // Before the request info is moved into the record.
        let (input_tokens, input_source) = match (
            self.stream.tokens.usage.prompt_tokens,
            self.req.info.prompt_tokens_estimate,
        ) {
            (Some(n), _) => (Some(n), Some(usage_source)),
            (None, Some(n)) => (Some(n), Some(TokenSource::Estimate)),
            (None, None) => (None, None),
        };
        if let Some(tools) = &self.stream.tools {
            self.req.info.links.calls_out = tools.finish();
        }
        RequestRecord {
            started_at: self.started_at,
            t0: self.t0,
            operation: self.route.operation,
            stream: self.is_stream(),
            request: std::mem::take(&mut self.req.info),
            request_id: self.req.id.take(),
            request_body_bytes: self.req.body.total(),
            status: self.resp.status,
            response_model: self.stream.response_model.take(),
            response_body_bytes: self.resp.bytes,
            ttfb: since(self.resp.t_headers),
            time_to_first_event: since(self.stream.timing.first_event),
            ttft,
            ttft_visible: since(self.stream.timing.first_visible),
            last_token: since(self.stream.timing.prev_token),
            e2e,
            events: self.stream.counts.events,
            token_events: self.stream.counts.token_events,
            reasoning_events: self.stream.counts.reasoning_events,
            tool_call_events: self.stream.counts.tool_call_events,
            comments: self.stream.counts.comments,
            gaps: self.stream.timing.gaps,
            input_tokens,
            input_source,
            output_tokens,
            output_source,
            cached_tokens: self.stream.tokens.usage.cached_tokens,
            reasoning_tokens: self.stream.tokens.usage.reasoning_tokens,
            tpot,
            finish_reason: self.stream.end.finish,
            done_seen: self.stream.end.done_at.is_some(),
            outcome,
            error_type,
            measure_error: self.stream.end.measure_error.or(self.req.error),
            trace: self.req.trace,
            trace_created: self.req.trace_created,
            tenant: self.load.tenant.take(),
            in_flight: self.load.in_flight,
            body_kind: self.resp.kind,
            dialect: self.route.dialect.dialect(),
            dialect_source: self.route.dialect.source(),
            engine_timing: self.stream.engine_timing,
            verdict: self.resp.read_verdict.then(|| match outcome {
                Outcome::Ok | Outcome::Unmeasured => self.resp.verdict.unwrap_or(Verdict::Unknown),
                _ => Verdict::Error,
            }),
        }
    }
}
