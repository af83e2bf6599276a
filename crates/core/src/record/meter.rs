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
use crate::decode::inflate::{ContentEncoding, Inflater};
use crate::decode::ndjson::NdjsonDecoder;
use crate::decode::request::{self, RequestInfo};
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
    /// What the request's path and the tap's config decided.
    route: Route,
    /// What is kept of the request.
    req: RequestSide,
    /// The load the request arrived into (analyses).
    load: Load,
    /// What is kept of the response but its decoded events.
    resp: ResponseSide,
    /// What the decoded events tell.
    stream: StreamState,
    /// A call to make panic (tests of the fail-open guard).
    #[cfg(feature = "fault-injection")]
    fault: Option<MeterCall>,
}

/// What the request's path and the tap's config decided.
#[derive(Debug)]
struct Route {
    operation: Operation,
    dialect: DialectChoice,
    /// The tap's configured dialect, replacing the path's.
    forced: Option<Dialect>,
    /// The model a path names (`…/models/{model}:generateContent`,
    /// `/models/{org}/{name}`), when the body names none.
    path_model: Option<String>,
}

/// What is kept of the request.
#[derive(Debug)]
struct RequestSide {
    id: Option<String>,
    /// The capped private copy of the body, until it is parsed.
    body: CappedBuf,
    info: RequestInfo,
    error: Option<MeasureError>,
    trace: Option<TraceParent>,
    trace_created: bool,
    /// Hashes of the prompt to compute (`with_fingerprint`, `with_prefixes`).
    hashes: request::Hashes,
}

/// The load a request arrived into, set by the proxy.
#[derive(Debug, Default)]
struct Load {
    /// Tenant key (configured header value or API-key hash).
    tenant: Option<String>,
    /// Requests in flight at this tap when this one started (itself included).
    in_flight: u32,
}

/// What is kept of the response but its decoded events.
#[derive(Debug)]
struct ResponseSide {
    status: Option<u16>,
    t_headers: Option<Instant>,
    t_body_end: Option<Instant>,
    kind: BodyKind,
    /// What the body is decoded with (one state, see `body`).
    body: Body,
    bytes: u64,
    /// Read a guardrail verdict from JSON answers (`with_verdict`).
    read_verdict: bool,
    verdict: Option<Verdict>,
}

impl Meter {
    pub fn new(t0: Instant, started_at: SystemTime, limits: MeterLimits) -> Self {
        Meter {
            t0,
            started_at,
            limits,
            route: Route {
                operation: Operation::Other,
                dialect: DialectChoice::NotLlm(Dialect::OpenAi),
                forced: None,
                path_model: None,
            },
            req: RequestSide {
                id: None,
                body: CappedBuf::new(limits.request_body_bytes),
                info: RequestInfo::default(),
                error: None,
                trace: None,
                trace_created: false,
                hashes: request::Hashes::default(),
            },
            load: Load::default(),
            resp: ResponseSide {
                status: None,
                t_headers: None,
                t_body_end: None,
                kind: BodyKind::Opaque,
                body: Body::Idle,
                bytes: 0,
                read_verdict: false,
                verdict: None,
            },
            #[cfg(feature = "fault-injection")]
            fault: None,
            stream: StreamState::new(t0),
        }
    }

    /// Also fingerprint the request (for joining records across taps).
    pub fn with_fingerprint(mut self, on: bool) -> Self {
        self.req.hashes.fingerprint = on;
        self
    }

    /// Also hash what links the request and its answer to the other steps
    /// of an agent loop (`crate::links`): `Some(false)` an LLM call's
    /// conversation and tool calls, `Some(true)` a compound system's own
    /// request (its user text).
    pub fn with_links(mut self, app: Option<bool>) -> Self {
        self.req.hashes.links = app == Some(false);
        self.req.hashes.app_links = app == Some(true);
        if app == Some(false) {
            self.stream.tools = Some(Box::default());
        }
        self
    }

    /// Also fingerprint the prompt's prefixes (prefix-cache analysis).
    pub fn with_prefixes(mut self, on: bool) -> Self {
        self.req.hashes.prefixes = on;
        self
    }

    /// The tenant key and the tap's in-flight level at the start (analyses).
    pub fn set_load_context(&mut self, tenant: Option<String>, in_flight: u32) {
        self.load.tenant = tenant;
        self.load.in_flight = in_flight;
    }

    /// Estimate tokens with this tokenizer where nothing reports them.
    pub fn with_estimator(mut self, estimator: Option<Estimator>) -> Self {
        self.req.hashes.estimate = estimator;
        self.stream.tokens.estimator = estimator;
        self
    }

    /// Read every request in this dialect, whatever its path says.
    pub fn with_dialect(mut self, dialect: Option<Dialect>) -> Self {
        self.route.forced = dialect;
        self
    }

    /// Also read a guardrail verdict from JSON answers of any path.
    pub fn with_verdict(mut self, on: bool) -> Self {
        self.resp.read_verdict = on;
        self
    }

    /// The hashes to compute where the request body is parsed.
    pub fn hashes(&self) -> request::Hashes {
        self.req.hashes
    }

    /// The request's trace context (read, or `created` by the tap).
    pub fn set_trace(&mut self, trace: Option<TraceParent>, created: bool) {
        self.req.trace = trace;
        self.req.trace_created = created;
    }

    pub fn started(&self) -> Instant {
        self.t0
    }

    pub fn operation(&self) -> Operation {
        self.route.operation
    }

    pub fn dialect(&self) -> Dialect {
        self.route.dialect.dialect()
    }

    /// How the dialect was chosen (`None` until it is known).
    pub fn dialect_source(&self) -> Option<DialectSource> {
        self.route.dialect.source()
    }

    /// The requested model, once the request body has been read (or the
    /// one the path names, when the body names none).
    pub fn requested_model(&self) -> Option<&str> {
        self.req
            .info
            .model
            .as_deref()
            .or(self.route.path_model.as_deref())
    }

    /// The request asked to stream (or, unknown, the response is SSE).
    pub fn is_stream(&self) -> bool {
        self.req
            .info
            .stream
            .unwrap_or(matches!(self.resp.kind, BodyKind::Sse | BodyKind::Ndjson))
    }

    /// The request line and headers: path, `x-request-id`, `Content-Length`.
    pub fn request_head(
        &mut self,
        path: &str,
        request_id: Option<&[u8]>,
        content_length: Option<u64>,
    ) {
        self.choose_dialect(path);
        self.req.id = request_id
            .filter(|id| id.len() <= MAX_REQUEST_ID && id.iter().all(|b| b.is_ascii_graphic()))
            .and_then(|id| std::str::from_utf8(id).ok())
            .map(str::to_owned);
        if let (true, Some(len)) = (self.may_be_llm(), content_length) {
            self.req.body.reserve_for(len);
        }
        self.fault_point(MeterCall::RequestHead);
    }

    /// A piece of the request body (copied, capped; never held back). At
    /// the end the body is parsed here, or, above `INLINE_PARSE_BYTES`,
    /// returned for the caller to parse elsewhere and hand back with
    /// `set_request`.
    #[must_use = "a large body comes back to be parsed off the forwarding thread"]
    pub fn request_body(&mut self, piece: &[u8], end: bool) -> Option<Vec<u8>> {
        if !(self.may_be_llm() || self.req.hashes.app_links) {
            return None;
        }
        self.req.body.push(piece);
        if !end {
            return None;
        }
        self.fault_point(MeterCall::RequestBody);
        match self.req.body.bytes() {
            None => self.req.error = Some(MeasureError::RequestBodyTooLarge),
            Some([]) => {}
            Some(b) if b.len() > self.inline_parse_bytes() => return Some(self.req.body.take()),
            Some(b) => {
                let parsed = request::parse_request_with(b, self.req.hashes);
                self.set_request(parsed);
            }
        }
        self.req.body.release();
        None
    }

    fn inline_parse_bytes(&self) -> usize {
        if self.req.hashes.fingerprint
            || self.req.hashes.links
            || self.req.hashes.app_links
            || self.req.hashes.prefixes
            || self.req.hashes.estimate.is_some()
        {
            INLINE_HASH_BYTES
        } else {
            INLINE_PARSE_BYTES
        }
    }

    /// The parsed request (from `request_body` or from elsewhere).
    pub fn set_request(&mut self, parsed: Result<RequestInfo, request::NotJson>) {
        self.fault_point(MeterCall::RequestBody);
        match parsed {
            Ok(info) => self.req.info = info,
            Err(_) => self.req.error = Some(MeasureError::RequestNotJson),
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
        self.resp.t_headers = Some(at);
        self.resp.status = Some(status);
        self.fault_point(MeterCall::ResponseHead);
        if matches!(self.resp.body, Body::Poisoned) {
            return; // measuring stopped for good (a caught panic)
        }
        self.resp.kind = content_type.map_or(BodyKind::Opaque, BodyKind::from_content_type);
        let verdict_body = self.resp.read_verdict && self.resp.kind == BodyKind::Json;
        if !(self.may_be_llm() || verdict_body) || !(200..300).contains(&status) {
            self.route.dialect = self.route.dialect.stop_sniffing();
            return;
        }
        let encoding = ContentEncoding::from_header(content_encoding);
        if encoding == ContentEncoding::Unsupported && self.resp.kind != BodyKind::Opaque {
            self.stream.fail(MeasureError::CompressedBody);
            return;
        }
        let inflater = Inflater::new(encoding);
        self.resp.body = match self.resp.kind {
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
        self.resp.bytes = self
            .resp
            .bytes
            .saturating_add(u64::try_from(piece.len()).unwrap_or(u64::MAX));
        let ctx = EventCtx {
            at,
            operation: self.route.operation,
            dialect: self.route.dialect.decoding(),
            requested_model: self
                .req
                .info
                .model
                .as_deref()
                .or(self.route.path_model.as_deref()),
        };
        self.resp.body.feed(&ctx, piece, &mut self.stream, sink);
        if self.route.dialect.sniffing() {
            self.settle_dialect(false);
        }
    }

    /// The upstream body ended (the last byte has been seen).
    pub fn response_end(&mut self, at: Instant) {
        self.resp.t_body_end = Some(at);
        self.fault_point(MeterCall::ResponseEnd);
        if let Body::Ndjson(d) = &mut self.resp.body {
            let ctx = EventCtx {
                at,
                operation: self.route.operation,
                dialect: self.route.dialect.decoding(),
                requested_model: self
                    .req
                    .info
                    .model
                    .as_deref()
                    .or(self.route.path_model.as_deref()),
            };
            let st = &mut self.stream;
            d.dec.finish(&mut |line| st.on_line(&ctx, line, &mut ()));
        }
        if self.route.dialect.sniffing() && !matches!(self.resp.body, Body::Json(_)) {
            self.settle_dialect(true);
        }
        if matches!(self.resp.body, Body::Json(_)) {
            let Body::Json(d) = std::mem::take(&mut self.resp.body) else {
                return;
            };
            match d.dec.bytes() {
                // Too large to tell whether it is an LLM answer at all.
                None if self.route.dialect.sniffing() => {
                    self.route.dialect = self.route.dialect.stop_sniffing();
                }
                None => self.stream.fail(MeasureError::JsonBodyTooLarge),
                Some(body) => {
                    if self.resp.read_verdict {
                        self.resp.verdict = Some(verdict::verdict(body));
                    }
                    if self.route.dialect.sniffing() {
                        self.route.dialect = self.route.dialect.stop_sniffing();
                        self.dialect_from_body(body);
                    }
                    if self.route.operation.is_llm() {
                        let dialect = self.route.dialect.dialect();
                        self.stream.tool_calls_of_body(dialect, body);
                        match dialect.classify_json(body) {
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
        self.resp.body = Body::Poisoned;
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
use sniff::DialectChoice;
use stream::{EventCtx, StreamState};

#[cfg(test)]
mod dialect_tests;
#[cfg(test)]
mod links_tests;
#[cfg(test)]
mod tests;
