//! One exchange's MCP calls: a request read from a POST body becomes a
//! `Started` call; an answer read from the POST's JSON or SSE answer (or,
//! on the older transport, from the session's SSE stream) completes it.
//!
//! Owns: what a started call holds, how a JSON-RPC message of an answer
//! acts on the calls it may concern (`Answers`): a response completes its
//! call, a progress notification counts on its call, anything else is
//! counted by kind. Must not touch: HTTP framing (the `CallMeter`).

use super::jsonrpc::{self, Id, Message};
use super::mcp::{self, McpError, McpMethod};
use super::{Call, CallKind, CallSink, McpCall, McpTransport, MessageCount};
use crate::links::Links;
use crate::trace::TraceParent;
use serde_json::value::RawValue;
use std::time::{Instant, SystemTime};

/// A call whose answer has not been seen yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub id: Id,
    pub t0: Instant,
    pub started_at: SystemTime,
    pub method: McpMethod,
    pub tool: Option<String>,
    pub progress_token: Option<u64>,
    pub trace: Option<TraceParent>,
    pub call_hash: Option<u64>,
    pub request_bytes: u64,
    pub request_id: Option<String>,
    pub transport: McpTransport,
    pub batch: bool,
    pub ttfb: Option<Instant>,
    pub first_event: Option<Instant>,
    pub progress: u32,
}

/// What every call of one request body shares.
#[derive(Debug, Clone)]
pub struct Origin<'a> {
    pub t0: Instant,
    pub started_at: SystemTime,
    /// The exchange's `traceparent` header (wins over `_meta`'s).
    pub trace: Option<TraceParent>,
    pub request_id: Option<&'a str>,
    pub transport: McpTransport,
    pub with_links: bool,
}

impl Started {
    /// A call from a request message.
    pub fn new(
        origin: &Origin<'_>,
        id: Id,
        method: &str,
        params: Option<&RawValue>,
        bytes: usize,
        batch: bool,
    ) -> Started {
        let method = McpMethod::of(method);
        let p = mcp::params(method, params, origin.with_links);
        Started {
            id,
            t0: origin.t0,
            started_at: origin.started_at,
            method,
            tool: p.tool,
            progress_token: p.progress_token,
            trace: origin.trace.or(p.trace),
            call_hash: p.call_hash,
            request_bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            request_id: origin.request_id.map(str::to_owned),
            transport: origin.transport,
            batch,
            ttfb: None,
            first_event: None,
            progress: 0,
        }
    }

    pub fn progressed(&mut self, at: Instant) {
        self.progress = self.progress.saturating_add(1);
        self.first_event.get_or_insert(at);
    }

    fn call(
        self,
        at: Instant,
        error: McpError,
        code: Option<i64>,
        result_hash: Option<u64>,
        response_bytes: u64,
    ) -> Call {
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(self.t0));
        let mut links = Links::default();
        if let Some(h) = self.call_hash {
            links.calls_in.push(h);
        }
        if let Some(h) = result_hash {
            links.results_out.push(h);
        }
        Call {
            kind: CallKind::Mcp(McpCall {
                method: self.method,
                tool: self.tool,
                error,
                code,
                progress: self.progress,
                transport: self.transport,
                batch: self.batch,
            }),
            t0: self.t0,
            started_at: self.started_at,
            ttfb: since(self.ttfb),
            first_event: since(self.first_event),
            duration: at.saturating_duration_since(self.t0),
            request_bytes: self.request_bytes,
            response_bytes,
            trace: self.trace,
            request_id: self.request_id,
            links,
        }
    }

    /// The call's answer, seen at `at`.
    /// `event`: it came as an SSE event (the first event about the call).
    pub fn answered(
        mut self,
        at: Instant,
        event: bool,
        result: Option<&RawValue>,
        error: Option<i64>,
        bytes: usize,
        with_links: bool,
    ) -> Call {
        if event {
            self.first_event.get_or_insert(at);
        }
        let o = mcp::outcome(self.method, result, error, with_links);
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.call(at, o.error, error, o.result_hash, bytes)
    }

    /// The call ended at `at` without an answer.
    pub fn fail(self, at: Instant, error: McpError) -> Call {
        self.call(at, error, None, None, 0)
    }
}

/// The calls an exchange waits for, where their answers come on the
/// exchange itself (a streamable HTTP POST).
#[derive(Debug, Default)]
pub struct Answers {
    pub calls: Vec<Started>,
}

/// Which calls an answer message may concern.
pub enum Waiting<'a> {
    /// The exchange's own calls.
    Here(&'a mut Answers),
    /// The tap's table, for this session (the older SSE transport).
    Session(u64),
}

/// Reads one SSE event's data (or a JSON body) of an answer: every message
/// in it acts on the calls it concerns. `first_event` marks every call of
/// the exchange: the event is about the request that opened the stream
/// (`event`: the data came as an SSE event, not as a JSON body).
pub fn read_answer(
    data: &[u8],
    at: Instant,
    event: bool,
    waiting: Waiting<'_>,
    with_links: bool,
    sink: &mut dyn CallSink,
) -> bool {
    let Ok(batch) = jsonrpc::batch(data) else {
        sink.message(MessageCount::Invalid, 1);
        return false;
    };
    sink.message(MessageCount::Untracked, batch.untracked() as u64);
    let mut waiting = waiting;
    if let (Waiting::Here(a), true) = (&mut waiting, event) {
        for c in &mut a.calls {
            c.first_event.get_or_insert(at);
        }
    }
    for raw in batch.tracked {
        match jsonrpc::message(raw) {
            Message::Response {
                id: Some(id),
                result,
                error,
                bytes,
            } => {
                let found = match &mut waiting {
                    Waiting::Here(a) => a
                        .calls
                        .iter()
                        .position(|c| c.id == id)
                        .map(|i| a.calls.swap_remove(i))
                        .map(|c| sink.call(c.answered(at, event, result, error, bytes, with_links)))
                        .is_some(),
                    Waiting::Session(s) => {
                        let s = *s;
                        let mut found = false;
                        sink.pending(&mut |table, emit| {
                            table.expire(at, emit);
                            if let Some(c) = table.take(s, id) {
                                found = true;
                                emit(c.answered(at, event, result, error, bytes, with_links));
                            }
                        });
                        found
                    }
                };
                if !found {
                    sink.message(MessageCount::Unmatched, 1);
                }
            }
            Message::Response { id: None, .. } => sink.message(MessageCount::Unmatched, 1),
            Message::Notification { method, params } if method == "notifications/progress" => {
                let token = mcp::progress_token(params);
                let found = match (token, &mut waiting) {
                    (None, _) => false,
                    (Some(t), Waiting::Here(a)) => {
                        match a.calls.iter_mut().find(|c| c.progress_token == Some(t)) {
                            Some(c) => {
                                c.progressed(at);
                                true
                            }
                            None => false,
                        }
                    }
                    (Some(t), Waiting::Session(s)) => {
                        let s = *s;
                        let mut found = false;
                        sink.pending(&mut |table, _| found = table.progress(s, t, at));
                        found
                    }
                };
                if !found {
                    sink.message(MessageCount::Unmatched, 1);
                }
            }
            Message::Notification { .. } => sink.message(MessageCount::ServerNotification, 1),
            Message::Request { .. } => sink.message(MessageCount::ServerRequest, 1),
            Message::Invalid => sink.message(MessageCount::Invalid, 1),
        }
    }
    true
}
