//! The `Meter`: one request's measuring state machine.
//!
//! The proxy calls it from its hooks with the bytes it saw and the instant it
//! saw them; it never reads a clock itself, so tests drive it with exact
//! instants. Per response piece it does O(piece) work, allocates nothing in
//! steady state, and reports each token-bearing event to a `TokenSink` (the
//! proxy's histogram handles). `finish` turns the state into a
//! `RequestRecord`. State is O(1) apart from capped buffers.

use super::types::*;
use crate::decode::capped::CappedBuf;
use crate::decode::dialect::{Dialect, DialectSource};
use crate::decode::event::Usage;
use crate::decode::inflate::{ContentEncoding, Inflater};
use crate::decode::ndjson::NdjsonDecoder;
use crate::decode::request::{self, RequestInfo};
use crate::decode::shape::Shape;
use crate::decode::sse::{SseDecoder, SseLimits};
use crate::decode::tokens::Estimator;
use crate::decode::{verdict, BodyKind, Operation};
use crate::trace::TraceParent;
use std::time::{Duration, Instant, SystemTime};

/// Caps of the per-request buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeterLimits {
    /// The private copy of the request body (to read model, stream, ...).
    pub request_body_bytes: usize,
    /// The private copy of a non-streaming JSON response (to read usage).
    pub json_body_bytes: usize,
    pub sse: SseLimits,
}

/// One token-bearing event, as reported to the sink when it is decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenEvent<'a> {
    /// 0 for the first token-bearing event of the request.
    pub index: u32,
    pub operation: Operation,
    /// Best model name known so far (requested, else the response's).
    pub model: Option<&'a str>,
    pub at: Instant,
    pub since_start: Duration,
    /// Time since the previous token-bearing event (none for the first).
    pub gap: Option<Duration>,
    /// Tokens in this event, when the stream says (continuous usage) or
    /// the tap's tokenizer counted them.
    pub tokens: Option<u64>,
}

/// Receives token-bearing events as they are decoded. Implementations run on
/// the forwarding path: they must be cheap and must not block.
pub trait TokenSink {
    fn token_event(&mut self, ev: &TokenEvent<'_>);
}

impl TokenSink for () {
    fn token_event(&mut self, _ev: &TokenEvent<'_>) {}
}

/// Longest `x-request-id` kept (bytes).
const MAX_REQUEST_ID: usize = 128;

/// Request bodies up to this size are parsed where they complete; larger
/// ones are handed back to be parsed off the forwarding thread (parsing runs
/// at about 4 GB/s for chat bodies, much slower for dense JSON such as
/// token-id arrays, and a tap's thread also relays other streams).
pub const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// The same bound when the prompt is also hashed (fingerprint, prefixes):
/// that parses it into a tree, about ten times slower, and the parse delays
/// the body's last piece on its way upstream.
pub const INLINE_HASH_BYTES: usize = 16 * 1024;

/// The measuring state of one request.
#[derive(Debug)]
pub struct Meter {
    t0: Instant,
    started_at: SystemTime,
    limits: MeterLimits,
    /// Hashes of the prompt to compute (`with_fingerprint`, `with_prefixes`).
    hashes: request::Hashes,
    /// Tenant key (configured header value or API-key hash), set by the proxy.
    tenant: Option<String>,
    /// Requests in flight at this tap when this one started (itself included).
    in_flight: u32,
    /// Read a guardrail verdict from JSON answers (`with_verdict`).
    read_verdict: bool,
    verdict: Option<Verdict>,
    trace: Option<TraceParent>,
    trace_created: bool,
    operation: Operation,
    dialect: Dialect,
    /// How `dialect` was chosen; `None` while it is unknown (and for
    /// anything that is no LLM call).
    dialect_source: Option<DialectSource>,
    /// The path named no dialect and none is configured: the response's
    /// first event (or JSON body) decides (`decode::detect`).
    sniffing: bool,
    /// The model a path names (`…/models/{model}:generateContent`,
    /// `/models/{org}/{name}`), when the body names none.
    path_model: Option<String>,
    /// The tap's configured dialect, replacing the path's.
    forced_dialect: Option<Dialect>,
    request_id: Option<String>,
    req_body: CappedBuf,
    request: RequestInfo,
    request_error: Option<MeasureError>,
    status: Option<u16>,
    t_headers: Option<Instant>,
    t_body_end: Option<Instant>,
    body_kind: BodyKind,
    /// What the response body is decoded with (one state, see `body`).
    body: Body,
    response_bytes: u64,
    stream: StreamState,
    /// A call to make panic (tests of the fail-open guard).
    #[cfg(feature = "fault-injection")]
    fault: Option<MeterCall>,
    #[cfg(feature = "fault-injection")]
    stall: Option<MeterCall>,
}

impl Meter {
    pub fn new(t0: Instant, started_at: SystemTime, limits: MeterLimits) -> Self {
        Meter {
            t0,
            started_at,
            limits,
            hashes: request::Hashes::default(),
            tenant: None,
            in_flight: 0,
            read_verdict: false,
            verdict: None,
            trace: None,
            trace_created: false,
            operation: Operation::Other,
            dialect: Dialect::OpenAi,
            dialect_source: None,
            sniffing: false,
            path_model: None,
            forced_dialect: None,
            request_id: None,
            req_body: CappedBuf::new(limits.request_body_bytes),
            request: RequestInfo::default(),
            request_error: None,
            status: None,
            t_headers: None,
            t_body_end: None,
            body_kind: BodyKind::Opaque,
            body: Body::Idle,
            response_bytes: 0,
            #[cfg(feature = "fault-injection")]
            fault: None,
            #[cfg(feature = "fault-injection")]
            stall: None,
            stream: StreamState {
                t0,
                t_first_event: None,
                t_first_token: None,
                t_first_visible: None,
                prev_token: None,
                events: 0,
                token_events: 0,
                reasoning_events: 0,
                tool_call_events: 0,
                comments: 0,
                choice_deltas: 0,
                gaps: GapStats::default(),
                usage: Usage::default(),
                estimator: None,
                estimated: 0,
                last_completion_tokens: None,
                prev_token_had_usage: false,
                finish: None,
                done: false,
                error_event: false,
                response_model: None,
                engine_timing: None,
                measure_error: None,
                detected: None,
                usage_from_extension: false,
                shape: Shape::default(),
            },
        }
    }

    /// Also fingerprint the request (for joining records across taps).
    pub fn with_fingerprint(mut self, on: bool) -> Self {
        self.hashes.fingerprint = on;
        self
    }

    /// Also fingerprint the prompt's prefixes (prefix-cache analysis).
    pub fn with_prefixes(mut self, on: bool) -> Self {
        self.hashes.prefixes = on;
        self
    }

    /// The tenant key and the tap's in-flight level at the start (analyses).
    pub fn set_load_context(&mut self, tenant: Option<String>, in_flight: u32) {
        self.tenant = tenant;
        self.in_flight = in_flight;
    }

    /// Estimate tokens with this tokenizer where nothing reports them.
    pub fn with_estimator(mut self, estimator: Option<Estimator>) -> Self {
        self.hashes.estimate = estimator;
        self.stream.estimator = estimator;
        self
    }

    /// Read every request in this dialect, whatever its path says.
    pub fn with_dialect(mut self, dialect: Option<Dialect>) -> Self {
        self.forced_dialect = dialect;
        self
    }

    /// Also read a guardrail verdict from JSON answers of any path.
    pub fn with_verdict(mut self, on: bool) -> Self {
        self.read_verdict = on;
        self
    }

    /// The hashes to compute where the request body is parsed.
    pub fn hashes(&self) -> request::Hashes {
        self.hashes
    }

    /// The request's trace context (read, or `created` by the tap).
    pub fn set_trace(&mut self, trace: Option<TraceParent>, created: bool) {
        self.trace = trace;
        self.trace_created = created;
    }

    pub fn started(&self) -> Instant {
        self.t0
    }

    pub fn operation(&self) -> Operation {
        self.operation
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// How the dialect was chosen (`None` until it is known).
    pub fn dialect_source(&self) -> Option<DialectSource> {
        self.dialect_source
    }

    /// The requested model, once the request body has been read (or the
    /// one the path names, when the body names none).
    pub fn requested_model(&self) -> Option<&str> {
        self.request.model.as_deref().or(self.path_model.as_deref())
    }

    /// The request asked to stream (or, unknown, the response is SSE).
    pub fn is_stream(&self) -> bool {
        self.request
            .stream
            .unwrap_or(matches!(self.body_kind, BodyKind::Sse | BodyKind::Ndjson))
    }

    /// The request line and headers: path, `x-request-id`, `Content-Length`.
    pub fn request_head(
        &mut self,
        path: &str,
        request_id: Option<&[u8]>,
        content_length: Option<u64>,
    ) {
        self.choose_dialect(path);
        self.request_id = request_id
            .filter(|id| id.len() <= MAX_REQUEST_ID && id.iter().all(|b| b.is_ascii_graphic()))
            .and_then(|id| std::str::from_utf8(id).ok())
            .map(str::to_owned);
        if let (true, Some(len)) = (self.may_be_llm(), content_length) {
            self.req_body.reserve_for(len);
        }
        self.fault_point(MeterCall::RequestHead);
    }

    /// A piece of the request body (copied, capped; never held back). At
    /// the end the body is parsed here, or, above `INLINE_PARSE_BYTES`,
    /// returned for the caller to parse elsewhere and hand back with
    /// `set_request`.
    #[must_use = "a large body comes back to be parsed off the forwarding thread"]
    pub fn request_body(&mut self, piece: &[u8], end: bool) -> Option<Vec<u8>> {
        if !self.may_be_llm() {
            return None;
        }
        self.req_body.push(piece);
        if !end {
            return None;
        }
        self.fault_point(MeterCall::RequestBody);
        match self.req_body.bytes() {
            None => self.request_error = Some(MeasureError::RequestBodyTooLarge),
            Some([]) => {}
            Some(b) if b.len() > self.inline_parse_bytes() => return Some(self.req_body.take()),
            Some(b) => {
                let parsed = request::parse_request_with(b, self.hashes);
                self.set_request(parsed);
            }
        }
        self.req_body.release();
        None
    }

    fn inline_parse_bytes(&self) -> usize {
        if self.hashes.fingerprint || self.hashes.prefixes || self.hashes.estimate.is_some() {
            INLINE_HASH_BYTES
        } else {
            INLINE_PARSE_BYTES
        }
    }

    /// The parsed request (from `request_body` or from elsewhere).
    pub fn set_request(&mut self, parsed: Result<RequestInfo, request::NotJson>) {
        self.fault_point(MeterCall::RequestBody);
        match parsed {
            Ok(info) => self.request = info,
            Err(_) => self.request_error = Some(MeasureError::RequestNotJson),
        }
    }

    /// The final (non-1xx) response header from the upstream.
    pub fn response_head(
        &mut self,
        at: Instant,
        status: u16,
        content_type: Option<&[u8]>,
        content_encoding: Option<&[u8]>,
        content_length: Option<u64>,
    ) {
        self.t_headers = Some(at);
        self.status = Some(status);
        self.fault_point(MeterCall::ResponseHead);
        if matches!(self.body, Body::Poisoned) {
            return; // measuring stopped for good (a caught panic)
        }
        self.body_kind = content_type.map_or(BodyKind::Opaque, BodyKind::from_content_type);
        let verdict_body = self.read_verdict && self.body_kind == BodyKind::Json;
        if !(self.may_be_llm() || verdict_body) || !(200..300).contains(&status) {
            self.sniffing = false;
            return;
        }
        let encoding = ContentEncoding::from_header(content_encoding);
        if encoding == ContentEncoding::Unsupported && self.body_kind != BodyKind::Opaque {
            self.stream.fail(MeasureError::CompressedBody);
            return;
        }
        let inflater = Inflater::new(encoding);
        self.body = match self.body_kind {
            BodyKind::Opaque => Body::Idle,
            BodyKind::Sse => Body::Sse(Decoding::new(SseDecoder::new(self.limits.sse), inflater)),
            BodyKind::Ndjson => Body::Ndjson(Decoding::new(
                NdjsonDecoder::new(self.limits.sse.max_event_bytes),
                inflater,
            )),
            BodyKind::Json => {
                let mut buf = CappedBuf::new(self.limits.json_body_bytes);
                if let Some(len) = content_length {
                    buf.reserve_for(len);
                }
                Body::Json(Decoding::new(buf, inflater))
            }
        };
    }

    /// A piece of the response body, seen at `at` (before it is written on).
    pub fn response_body(&mut self, at: Instant, piece: &[u8], sink: &mut dyn TokenSink) {
        self.fault_point(MeterCall::ResponseBody);
        self.response_bytes = self
            .response_bytes
            .saturating_add(u64::try_from(piece.len()).unwrap_or(u64::MAX));
        let ctx = EventCtx {
            at,
            operation: self.operation,
            dialect: (!self.sniffing).then_some(self.dialect),
            requested_model: self.request.model.as_deref().or(self.path_model.as_deref()),
        };
        self.body.feed(&ctx, piece, &mut self.stream, sink);
        if self.sniffing {
            self.settle_dialect(false);
        }
    }

    /// The upstream body ended (the last byte has been seen).
    pub fn response_end(&mut self, at: Instant) {
        self.t_body_end = Some(at);
        self.fault_point(MeterCall::ResponseEnd);
        if let Body::Ndjson(d) = &mut self.body {
            let ctx = EventCtx {
                at,
                operation: self.operation,
                dialect: (!self.sniffing).then_some(self.dialect),
                requested_model: self.request.model.as_deref().or(self.path_model.as_deref()),
            };
            let st = &mut self.stream;
            d.dec.finish(&mut |line| st.on_line(&ctx, line, &mut ()));
        }
        if self.sniffing && !matches!(self.body, Body::Json(_)) {
            self.settle_dialect(true);
        }
        if matches!(self.body, Body::Json(_)) {
            let Body::Json(d) = std::mem::take(&mut self.body) else {
                return;
            };
            match d.dec.bytes() {
                // Too large to tell whether it is an LLM answer at all.
                None if self.sniffing => self.sniffing = false,
                None => self.stream.fail(MeasureError::JsonBodyTooLarge),
                Some(body) => {
                    if self.read_verdict {
                        self.verdict = Some(verdict::verdict(body));
                    }
                    if std::mem::take(&mut self.sniffing) {
                        self.dialect_from_body(body);
                    }
                    if self.operation.is_llm() {
                        match self.dialect.classify_json(body) {
                            Ok(s) => self.stream.absorb_body(&s),
                            Err(_) => self.stream.fail(MeasureError::InvalidJsonBody),
                        }
                    }
                }
            }
        }
    }

    /// Stops all decoding after a decoder panicked; the stream flows on.
    pub fn poison(&mut self) {
        self.body = Body::Poisoned;
        self.stream.fail(MeasureError::DecoderPanic);
    }
}

mod body;
mod finish;
mod guard;
mod sniff;
mod stream;
use body::{Body, Decoding};
pub use guard::MeterCall;
#[cfg(feature = "fault-injection")]
pub use guard::STALL;
use stream::{EventCtx, StreamState};

#[cfg(test)]
mod dialect_tests;
#[cfg(test)]
mod tests;
