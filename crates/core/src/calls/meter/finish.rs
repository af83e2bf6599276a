//! `CallMeter::finish`: the calls an exchange still owes when it ends —
//! unanswered MCP calls with why, the opaque or retrieval call the
//! exchange itself was.

use super::{CallMeter, Mode};
use crate::calls::{Call, CallKind, CallSink, McpError, RetrievalCall};
use crate::links::Links;
use crate::record::{Outcome, TransportEnd};
use std::time::Instant;

impl CallMeter {
    /// The exchange ended at `at`, as `end` says.
    pub fn finish(&mut self, at: Instant, end: TransportEnd, sink: &mut dyn CallSink) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.decide(sink);
        let end_at = match end {
            TransportEnd::Complete => self.t_end.unwrap_or(at),
            _ => at,
        };
        let ok_status = self.status.is_some_and(|s| (200..300).contains(&s));
        let mcp_error = match end {
            TransportEnd::ClientGone => McpError::Cancelled,
            TransportEnd::Upstream(_) | TransportEnd::Internal => McpError::TransportError,
            TransportEnd::BadRequest => McpError::HttpError,
            TransportEnd::Complete if !ok_status => McpError::HttpError,
            TransportEnd::Complete if self.unreadable => McpError::Unmeasured,
            TransportEnd::Complete => McpError::NoResponse,
        };
        let outcome = match end {
            TransportEnd::ClientGone => Outcome::ClientCancelled,
            TransportEnd::Upstream(_) if self.status.is_some() => Outcome::UpstreamTruncated,
            TransportEnd::Upstream(_) | TransportEnd::Internal => Outcome::UpstreamError,
            TransportEnd::BadRequest => Outcome::HttpError,
            TransportEnd::Complete => crate::calls::retrieval::outcome(
                self.status,
                self.returned.is_some_and(|r| r.error),
            ),
        };
        match std::mem::replace(&mut self.mode, Mode::NoCall) {
            Mode::Post(a) => {
                for c in a.calls {
                    sink.call(c.fail(end_at, mcp_error));
                }
            }
            Mode::SessionPost { session, ids } => {
                // Accepted: the answers come on the session's stream.
                if end == TransportEnd::Complete && ok_status {
                    return;
                }
                sink.pending(&mut |table, emit| {
                    for id in &ids {
                        if let Some(c) = table.take(session, *id) {
                            emit(c.fail(end_at, mcp_error));
                        }
                    }
                });
            }
            Mode::Stream { session: Some(s) } => {
                // The session's stream is gone: nothing will answer its calls.
                sink.pending(&mut |table, emit| {
                    for c in table.take_session(s) {
                        emit(c.fail(end_at, McpError::NoResponse));
                    }
                });
            }
            Mode::Stream { session: None } | Mode::NoCall => {}
            Mode::Undecided | Mode::Http => {
                let kind = CallKind::Http {
                    status: self.status,
                    outcome,
                };
                sink.call(self.opaque(kind, end_at));
            }
            Mode::Retrieval(route, asked) => {
                let kind = CallKind::Retrieval(RetrievalCall {
                    system: route.system,
                    operation: route.operation,
                    top_k: asked.top_k,
                    inputs: asked.inputs,
                    results: self.returned.and_then(|r| r.results),
                    outcome,
                    status: self.status,
                });
                sink.call(self.opaque(kind, end_at));
            }
        }
    }

    /// The exchange as one call.
    fn opaque(&self, kind: CallKind, end_at: Instant) -> Call {
        Call {
            kind,
            t0: self.t0,
            started_at: self.started_at,
            ttfb: self.t_head.map(|t| t.saturating_duration_since(self.t0)),
            first_event: None,
            duration: end_at.saturating_duration_since(self.t0),
            request_bytes: self.body.total(),
            response_bytes: self.response_bytes,
            trace: self.trace,
            request_id: self.request_id.clone(),
            links: Links::default(),
        }
    }
}
