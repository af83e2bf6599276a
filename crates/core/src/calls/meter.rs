//! The `CallMeter`: one HTTP exchange at a `tool` or `retrieval` tap,
//! turned into calls. Hook calls and instants in (never a clock), `Call`s
//! out through a `CallSink` as each completes.
//!
//! At a tool tap an exchange is one of: a POST of JSON-RPC (its requests
//! are calls, answered by the POST's JSON or SSE answer — or, when its URL
//! names an HTTP+SSE session, on that session's stream, through the tap's
//! `Pending` table); a GET whose answer is an SSE stream (the session
//! stream that answers them, or a streamable-HTTP server stream: no call of
//! its own); a POST of notifications or responses, or a DELETE (no call);
//! anything else, one opaque HTTP call. At a retrieval tap every exchange is
//! one call, read as its API says (`retrieval`).
//!
//! Bounded: the request body and a JSON answer are copied up to
//! `CallLimits`, SSE is framed by the capped decoder, a batch's first
//! `jsonrpc::MAX_TRACKED` requests are timed. A body past its cap makes the
//! call unread, never held: the bytes flow on.

use super::exchange::{read_answer, Answers, Origin, Started, Waiting};
use super::jsonrpc::{self, Id, Message};
use super::retrieval::{self, Route};
use super::{CallKind, CallSink, McpError, McpTransport, MessageCount};
use crate::decode::capped::CappedBuf;
use crate::decode::sse::{SseDecoder, SseItem, SseLimits};
use crate::decode::BodyKind;
use crate::trace::TraceParent;
use std::time::{Instant, SystemTime};

/// Which kind of tap reads the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallProtocol {
    /// MCP, else plain HTTP tools.
    Tool,
    Retrieval,
}

/// Caps of one exchange's copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    pub request_body_bytes: usize,
    pub response_body_bytes: usize,
    pub sse: SseLimits,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            request_body_bytes: 1 << 20,
            response_body_bytes: 4 << 20,
            sse: SseLimits {
                max_line_bytes: 1 << 20,
                max_event_bytes: 4 << 20,
            },
        }
    }
}

/// What the request head says.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallHead<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The path with its query.
    pub path: &'a str,
    /// `traceparent`, parsed.
    pub trace: Option<TraceParent>,
    pub request_id: Option<&'a str>,
}

#[derive(Debug)]
enum Mode {
    /// The request is not read yet.
    Undecided,
    /// A POST's calls, answered on this exchange.
    Post(Answers),
    /// A POST's calls, answered on the session's SSE stream.
    SessionPost {
        session: u64,
        ids: Vec<Id>,
    },
    /// An SSE stream: the older transport's session stream once its
    /// `endpoint` event named the session.
    Stream {
        session: Option<u64>,
    },
    /// Nothing to time (notifications, responses, DELETE).
    NoCall,
    Retrieval(Route, retrieval::Asked),
    Http,
}

/// The response body's copy or decoder.
#[derive(Debug)]
enum Reading {
    None,
    Json(CappedBuf),
    Sse(SseDecoder),
}

/// One exchange's state.
#[derive(Debug)]
pub struct CallMeter {
    protocol: CallProtocol,
    limits: CallLimits,
    with_links: bool,
    t0: Instant,
    started_at: SystemTime,
    http_method: String,
    /// The older transport's session (`session_id`/`sessionId` of the URL), hashed.
    url_session: Option<u64>,
    route: Route,
    trace: Option<TraceParent>,
    request_id: Option<String>,
    body: CappedBuf,
    mode: Mode,
    status: Option<u16>,
    t_head: Option<Instant>,
    t_end: Option<Instant>,
    reading: Reading,
    /// The answer could not be read (compressed, over its cap, broken SSE).
    unreadable: bool,
    response_bytes: u64,
    /// What a retrieval answer returned.
    returned: Option<retrieval::Returned>,
    /// `finish` ran.
    finished: bool,
}

/// The session a URL names (`?session_id=` of the Python SDK, `?sessionId=`
/// of the TypeScript one), hashed.
fn url_session(path: &str) -> Option<u64> {
    let query = path.split_once('?')?.1;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (matches!(k, "session_id" | "sessionId") && !v.is_empty())
            .then(|| crate::hash::of(v.as_bytes()))
    })
}

impl CallMeter {
    pub fn new(
        protocol: CallProtocol,
        limits: CallLimits,
        t0: Instant,
        started_at: SystemTime,
    ) -> Self {
        CallMeter {
            protocol,
            limits,
            with_links: false,
            t0,
            started_at,
            http_method: String::new(),
            url_session: None,
            route: retrieval::route("", ""),
            trace: None,
            request_id: None,
            body: CappedBuf::new(limits.request_body_bytes),
            mode: Mode::Undecided,
            status: None,
            t_head: None,
            t_end: None,
            reading: Reading::None,
            unreadable: false,
            response_bytes: 0,
            returned: None,
            finished: false,
        }
    }

    /// Also hash what links calls to the steps of an agent loop.
    pub fn with_links(mut self, on: bool) -> Self {
        self.with_links = on;
        self
    }

    pub fn request_head(&mut self, head: &CallHead<'_>) {
        self.http_method = head.method.chars().take(16).collect();
        self.url_session = url_session(head.path);
        self.trace = head.trace;
        self.request_id = head
            .request_id
            .filter(|id| id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()))
            .map(str::to_owned);
        if self.protocol == CallProtocol::Retrieval {
            self.route = retrieval::route(head.method, head.path);
        }
    }

    /// A piece of the request body (copied, capped).
    pub fn request_body(&mut self, piece: &[u8], end: bool, sink: &mut dyn CallSink) {
        self.body.push(piece);
        if end {
            self.decide(sink);
        }
    }

    fn origin(&self, transport: McpTransport) -> Origin<'_> {
        Origin {
            t0: self.t0,
            started_at: self.started_at,
            trace: self.trace,
            request_id: self.request_id.as_deref(),
            transport,
            with_links: self.with_links,
        }
    }

    /// Reads the complete request: what the exchange is.
    fn decide(&mut self, sink: &mut dyn CallSink) {
        if !matches!(self.mode, Mode::Undecided) {
            return;
        }
        let body = self.body.bytes();
        self.mode = match self.protocol {
            CallProtocol::Retrieval => Mode::Retrieval(
                self.route,
                body.map_or_else(Default::default, |b| retrieval::read_request(self.route, b)),
            ),
            CallProtocol::Tool => match (self.http_method.as_str(), body) {
                ("GET", _) => Mode::Stream { session: None },
                ("DELETE", _) => Mode::NoCall,
                ("POST", Some(b)) if !b.is_empty() => self.read_post(b, sink),
                _ => Mode::Http,
            },
        };
        self.body.release();
    }

    fn read_post(&self, body: &[u8], sink: &mut dyn CallSink) -> Mode {
        let Ok(batch) = jsonrpc::batch(body) else {
            return Mode::Http;
        };
        sink.message(MessageCount::Untracked, batch.untracked() as u64);
        let transport = match self.url_session {
            Some(_) => McpTransport::Sse,
            None => McpTransport::StreamableHttp,
        };
        let origin = self.origin(transport);
        let mut calls = Vec::new();
        for raw in &batch.tracked {
            match jsonrpc::message(raw) {
                Message::Request {
                    id,
                    method,
                    params,
                    bytes,
                } => calls.push(Started::new(
                    &origin,
                    id,
                    &method,
                    params,
                    bytes,
                    batch.is_batch,
                )),
                Message::Notification { .. } => sink.message(MessageCount::Notification, 1),
                Message::Response { .. } => sink.message(MessageCount::ClientResponse, 1),
                Message::Invalid => sink.message(MessageCount::Invalid, 1),
            }
        }
        if calls.is_empty() {
            return Mode::NoCall;
        }
        match self.url_session {
            Some(session) => {
                let ids: Vec<Id> = calls.iter().map(|c| c.id).collect();
                let mut calls = Some(calls);
                let mut evicted = 0;
                sink.pending(&mut |table, _| {
                    for c in calls.take().into_iter().flatten() {
                        evicted += table.insert(session, c.id, c);
                    }
                });
                sink.message(MessageCount::Evicted, evicted);
                Mode::SessionPost { session, ids }
            }
            None => Mode::Post(Answers { calls }),
        }
    }

    /// The upstream's final response head.
    pub fn response_head(
        &mut self,
        at: Instant,
        status: u16,
        content_type: Option<&[u8]>,
        content_encoding: Option<&[u8]>,
        sink: &mut dyn CallSink,
    ) {
        self.decide(sink);
        self.t_head = Some(at);
        self.status = Some(status);
        if let Mode::Post(a) = &mut self.mode {
            for c in &mut a.calls {
                c.ttfb = Some(at);
            }
        }
        let kind = content_type.map_or(BodyKind::Opaque, BodyKind::from_content_type);
        let encoded =
            content_encoding.is_some_and(|e| !e.trim_ascii().eq_ignore_ascii_case(b"identity"));
        let wants_body = match &self.mode {
            Mode::Post(_) | Mode::Retrieval(..) => true,
            Mode::Stream { .. } => kind == BodyKind::Sse,
            _ => false,
        };
        if !wants_body {
            if let Mode::Stream { .. } = self.mode {
                // A GET that opened no stream: an ordinary request.
                self.mode = Mode::Http;
            }
            return;
        }
        if encoded {
            self.unreadable = true;
            return;
        }
        self.reading = match kind {
            BodyKind::Sse => Reading::Sse(SseDecoder::new(self.limits.sse)),
            BodyKind::Opaque if matches!(self.mode, Mode::Retrieval(..)) => {
                Reading::Json(CappedBuf::new(self.limits.response_body_bytes))
            }
            _ => Reading::Json(CappedBuf::new(self.limits.response_body_bytes)),
        };
    }

    /// A piece of the response body, seen at `at`.
    pub fn response_body(&mut self, at: Instant, piece: &[u8], sink: &mut dyn CallSink) {
        self.response_bytes = self
            .response_bytes
            .saturating_add(u64::try_from(piece.len()).unwrap_or(u64::MAX));
        let with_links = self.with_links;
        match &mut self.reading {
            Reading::None => {}
            Reading::Json(buf) => buf.push(piece),
            Reading::Sse(dec) => {
                let mode = &mut self.mode;
                let unreadable = &mut self.unreadable;
                let r = dec.feed(piece, &mut |item| {
                    let SseItem::Event { event, data } = item else {
                        return;
                    };
                    match mode {
                        Mode::Post(a) => {
                            // An event that is no JSON-RPC may have been the
                            // answer: its calls end unmeasured, not unanswered.
                            *unreadable |=
                                !read_answer(data, at, true, Waiting::Here(a), with_links, sink);
                        }
                        Mode::Stream { session } => {
                            if event == b"endpoint" {
                                *session = std::str::from_utf8(data).ok().and_then(url_session);
                            } else if let Some(s) = *session {
                                read_answer(data, at, true, Waiting::Session(s), with_links, sink);
                            } else if !data.is_empty() {
                                // A streamable-HTTP server stream: messages
                                // outside any call.
                                read_answer(
                                    data,
                                    at,
                                    true,
                                    Waiting::Here(&mut Answers::default()),
                                    false,
                                    sink,
                                );
                            }
                        }
                        _ => {}
                    }
                });
                if r.is_err() {
                    self.unreadable = true;
                    self.reading = Reading::None;
                }
            }
        }
    }

    /// The response body ended at `at`.
    pub fn response_end(&mut self, at: Instant, sink: &mut dyn CallSink) {
        self.t_end = Some(at);
        let Reading::Json(buf) = std::mem::replace(&mut self.reading, Reading::None) else {
            return;
        };
        let Some(body) = buf.bytes() else {
            self.unreadable = true;
            return;
        };
        let ok = self.status.is_some_and(|s| (200..300).contains(&s));
        match &mut self.mode {
            Mode::Post(a) if !body.is_empty() && ok => {
                self.unreadable |=
                    !read_answer(body, at, false, Waiting::Here(a), self.with_links, sink);
            }
            Mode::Post(a) if !body.is_empty() => {
                // An error status: a JSON-RPC error without an id names no
                // call; every call of the POST failed with it.
                let code = jsonrpc::batch(body).ok().and_then(|b| {
                    b.tracked.first().and_then(|r| match jsonrpc::message(r) {
                        Message::Response { error, .. } => error,
                        _ => None,
                    })
                });
                for c in a.calls.drain(..) {
                    let mut call = c.fail(at, McpError::HttpError);
                    if let CallKind::Mcp(m) = &mut call.kind {
                        m.code = code;
                    }
                    sink.call(call);
                }
            }
            Mode::Retrieval(route, _) if ok => {
                let r = retrieval::count_results(*route, body);
                self.returned = Some(r);
            }
            _ => {}
        }
    }
}

mod finish;
