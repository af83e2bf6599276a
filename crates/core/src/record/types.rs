//! The values a finished request leaves behind, and their bounded enums.

use crate::decode::event::FinishReason;
use crate::decode::request::RequestInfo;
use crate::decode::Operation;
use crate::trace::TraceParent;
use std::time::{Duration, Instant, SystemTime};

crate::names::label_enum! {
    /// How a request ended, as the `outcome` label says it.
    pub enum Outcome {
        /// Complete, measured.
        Ok = "ok",
        /// The client went away before the response was complete.
        ClientCancelled = "client_cancelled",
        /// The upstream gave no usable response (connect, TLS, reset or close
        /// before the response headers, invalid HTTP) or reported an error
        /// inside the stream.
        UpstreamError = "upstream_error",
        /// The response started but ended early: the connection closed or reset
        /// mid-body, an idle timeout, or a clean end without the stream's
        /// terminator (`data: [DONE]` and no `finish_reason`).
        UpstreamTruncated = "upstream_truncated",
        /// A complete response with status 400 or above.
        HttpError = "http_error",
        /// Complete as far as the transport goes, but tokentap could not measure
        /// it (see `MeasureError`).
        Unmeasured = "unmeasured",
    }
}

/// What went wrong, in more detail than the outcome. Bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    ClientClosed,
    ConnectRefused,
    ConnectTimeout,
    ConnectError,
    Tls,
    ReadTimeout,
    ConnectionClosed,
    ConnectionReset,
    InvalidHttp,
    Http2,
    /// The stream carried an error object.
    StreamErrorEvent,
    /// The body ended cleanly without `[DONE]` or a finish reason.
    MissingTerminator,
    /// The client sent something tokentap (pingora) refused.
    BadRequest,
    Internal,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::ClientClosed => "client_closed",
            ErrorType::ConnectRefused => "connect_refused",
            ErrorType::ConnectTimeout => "connect_timeout",
            ErrorType::ConnectError => "connect_error",
            ErrorType::Tls => "tls",
            ErrorType::ReadTimeout => "read_timeout",
            ErrorType::ConnectionClosed => "connection_closed",
            ErrorType::ConnectionReset => "connection_reset",
            ErrorType::InvalidHttp => "invalid_http",
            ErrorType::Http2 => "http2",
            ErrorType::StreamErrorEvent => "stream_error_event",
            ErrorType::MissingTerminator => "missing_terminator",
            ErrorType::BadRequest => "bad_request",
            ErrorType::Internal => "internal",
        }
    }
}

crate::names::label_enum! {
    /// Why a request could not be measured (the `reason` of
    /// `tokentap_measurement_errors_total`). Bounded.
    pub enum MeasureError {
        SseLineTooLong = "sse_line_too_long",
        SseEventTooLarge = "sse_event_too_large",
        InvalidJsonEvent = "invalid_json_event",
        JsonBodyTooLarge = "json_body_too_large",
        InvalidJsonBody = "invalid_json_body",
        /// A body coding tokentap does not inflate (brotli, zstd, several).
        CompressedBody = "compressed_body",
        /// A gzip/deflate body that does not inflate.
        InflateFailed = "inflate_failed",
        /// More than `decode::inflate::MAX_INFLATED_BYTES` once inflated.
        InflatedTooLarge = "inflated_too_large",
        DecoderPanic = "decoder_panic",
        /// Request side: the body was larger than the request copy cap.
        RequestBodyTooLarge = "request_body_too_large",
        /// Request side: the body of an LLM request was not JSON.
        RequestNotJson = "request_not_json",
    }
}

impl MeasureError {
    /// Request-side errors leave the response measurement intact: they only
    /// make request fields (model, max_tokens...) unknown.
    pub fn is_request_side(self) -> bool {
        matches!(
            self,
            MeasureError::RequestBodyTooLarge | MeasureError::RequestNotJson
        )
    }
}

pub use crate::decode::verdict::Verdict;

crate::names::label_enum! {
    /// Where a token count came from.
    pub enum TokenSource {
        /// The upstream's `usage` object (the dialect's own usage field).
        Usage = "usage",
        /// A vendor's extension carrying usage where the dialect's field is
        /// absent (Groq's `x_groq.usage`).
        UsageExtension = "usage_extension",
        /// Counted token-bearing choice deltas (no usage in the stream).
        Events = "events",
        /// Counted by the tap's tokenizer (`estimate_tokens`), no usage.
        Estimate = "estimate",
    }
}

/// How the transport ended, as the proxy layer classified it. Pure input to
/// `Meter::finish`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportEnd {
    /// The response was relayed completely.
    Complete,
    /// The client closed or reset its connection.
    ClientGone,
    /// The client sent something unacceptable (tokentap answered 4xx).
    BadRequest,
    /// The upstream failed; `ErrorType` says how.
    Upstream(ErrorType),
    /// tokentap itself failed.
    Internal,
}

/// Inter-token gap statistics of one request (O(1) state).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GapStats {
    pub count: u32,
    pub sum: Duration,
    pub min: Option<Duration>,
    pub max: Option<Duration>,
}

impl GapStats {
    pub fn add(&mut self, gap: Duration) {
        self.count = self.count.saturating_add(1);
        self.sum = self.sum.saturating_add(gap);
        self.min = Some(self.min.map_or(gap, |m| m.min(gap)));
        self.max = Some(self.max.map_or(gap, |m| m.max(gap)));
    }

    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| self.sum / self.count)
    }
}

/// One request as one tap saw it. Durations are from the tap having the
/// request headers (`started_at` on the wall clock).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub started_at: SystemTime,
    /// The same moment on the monotonic clock (for joining taps in-process).
    pub t0: Instant,
    pub operation: Operation,
    /// The request asked to stream (or, when the request was unreadable, the
    /// response was an event stream).
    pub stream: bool,
    pub request: RequestInfo,
    /// The client's `x-request-id`, if any (capped).
    pub request_id: Option<String>,
    pub request_body_bytes: u64,
    pub status: Option<u16>,
    pub response_model: Option<String>,
    pub response_body_bytes: u64,
    /// Response headers from the upstream.
    pub ttfb: Option<Duration>,
    /// First complete SSE event of any kind (comments excluded).
    pub time_to_first_event: Option<Duration>,
    /// First event carrying output (content, reasoning, tool-call delta).
    pub ttft: Option<Duration>,
    /// First event carrying visible output (anything but reasoning).
    pub ttft_visible: Option<Duration>,
    /// Last token-bearing event.
    pub last_token: Option<Duration>,
    /// Last byte of the response passed on (or the end of the request when
    /// it failed).
    pub e2e: Duration,
    /// SSE events (comments excluded).
    pub events: u32,
    /// Events carrying output (content, reasoning or tool calls).
    pub token_events: u32,
    /// Token events carrying reasoning / tool-call deltas (a subset).
    pub reasoning_events: u32,
    pub tool_call_events: u32,
    /// SSE comments (`: keep-alive`), never events nor tokens.
    pub comments: u32,
    pub gaps: GapStats,
    pub input_tokens: Option<u64>,
    /// Where `input_tokens` came from (`usage` or `estimate`).
    pub input_source: Option<TokenSource>,
    pub output_tokens: Option<u64>,
    pub output_source: Option<TokenSource>,
    pub cached_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    /// (E2E − TTFT) / (output tokens − 1), for complete streams with ≥ 2 tokens.
    pub tpot: Option<Duration>,
    pub finish_reason: Option<FinishReason>,
    pub done_seen: bool,
    pub outcome: Outcome,
    pub error_type: Option<ErrorType>,
    pub measure_error: Option<MeasureError>,
    /// The request's W3C trace context, as read or created by the tap.
    pub trace: Option<TraceParent>,
    /// This tap created `trace` (the request came without one).
    pub trace_created: bool,
    /// A guardrail tap's reading of the answer (`None` elsewhere).
    pub verdict: Option<Verdict>,
    /// The tenant key, when analyses are on: a configured header's value or
    /// a hash of the API key (never the key).
    pub tenant: Option<String>,
    /// Requests in flight at this tap when this one started, itself
    /// included (0 when analyses are off).
    pub in_flight: u32,
    /// How the response body was framed (from its content type).
    pub body_kind: crate::decode::BodyKind,
    /// The API dialect the request was read in.
    pub dialect: crate::decode::dialect::Dialect,
    /// How `dialect` was chosen: the path, the response's content, the
    /// tap's configuration (`None`: no LLM call).
    pub dialect_source: Option<crate::decode::dialect::DialectSource>,
    /// The engine's own account of its time, when it gives one (Ollama).
    pub engine_timing: Option<crate::decode::event::EngineTiming>,
}

impl RequestRecord {
    /// The model for labels: requested, else the one the response named.
    pub fn model(&self) -> Option<&str> {
        self.request
            .model
            .as_deref()
            .or(self.response_model.as_deref())
    }
}
