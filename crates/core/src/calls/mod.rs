//! The calls a compound system makes that are not LLM calls — MCP tool
//! calls, retrieval (vector search, rerank, embeddings), plain HTTP tools —
//! read at a tap of boundary `tool` or `retrieval`, timed per call.
//!
//! - `jsonrpc`: JSON-RPC 2.0 messages and batches, bounded.
//! - `mcp`: the MCP vocabulary (methods, `error.type`, a tool call's name,
//!   progress token, trace context and links).
//! - `retrieval`: the APIs people use (Chroma, Qdrant, Pinecone, Weaviate,
//!   Elasticsearch/OpenSearch, TEI/Cohere/Jina/vLLM rerank, embeddings):
//!   operation, top-k asked, results returned.
//! - `pending`: the tap-wide table of MCP calls answered on another
//!   exchange (the 2024-11-05 HTTP+SSE transport), bounded, expiring.
//! - `exchange`: one HTTP exchange's MCP calls (a POST and its JSON or SSE
//!   answer; a GET stream's answers), timed as their answers pass.
//! - `meter`: the `CallMeter`, one exchange's state machine: hook calls and
//!   instants in, `Call`s out through a `CallSink`.
//!
//! A call is the unit here, not the HTTP exchange: a batch holds several,
//! and on the older transport an answer arrives on another exchange (the
//! long-lived SSE stream), so calls are emitted as they complete.
//!
//! Must not touch: clocks, sockets, labels (the proxy bounds tool names),
//! content (only hashes leave: `crate::links`).

pub mod exchange;
pub mod jsonrpc;
pub mod mcp;
pub mod meter;
pub mod pending;
pub mod retrieval;

pub use mcp::{McpError, McpMethod};
pub use meter::{CallHead, CallLimits, CallMeter, CallProtocol};
pub use pending::Pending;
pub use retrieval::{RetrievalOp, RetrievalSystem};

use crate::links::Links;
use crate::record::Outcome;
use crate::trace::TraceParent;
use std::time::{Duration, Instant, SystemTime};

crate::names::label_enum! {
    /// Which MCP transport a call went over.
    pub enum McpTransport {
        /// POST answered with JSON or an SSE stream (2025-03-26 and later).
        StreamableHttp = "streamable_http",
        /// POST answered `202`, the answer on the SSE stream (2024-11-05).
        Sse = "sse",
    }
}

/// One MCP request and how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    pub method: McpMethod,
    /// The tool a `tools/call` named (printable, at most 128 bytes; the
    /// proxy bounds it again as a label).
    pub tool: Option<String>,
    pub error: McpError,
    /// The JSON-RPC error code, when there was one.
    pub code: Option<i64>,
    /// `notifications/progress` received for it.
    pub progress: u32,
    pub transport: McpTransport,
    /// It came in a JSON-RPC batch.
    pub batch: bool,
}

/// One retrieval call: what was asked and what came back, counted.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalCall {
    pub system: RetrievalSystem,
    pub operation: RetrievalOp,
    /// Results asked per query (`n_results`, `limit`, `topK`, `top_n`, `k`,
    /// `size`), as sent or the API's documented default.
    pub top_k: Option<u64>,
    /// Inputs of the request: query vectors (search), documents
    /// (rerank), texts (embeddings).
    pub inputs: Option<u64>,
    /// Results returned, over all queries.
    pub results: Option<u64>,
    pub outcome: Outcome,
    pub status: Option<u16>,
}

/// What kind of call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallKind {
    Mcp(McpCall),
    Retrieval(RetrievalCall),
    /// Any other HTTP exchange at a tool tap, timed as an opaque call.
    Http {
        status: Option<u16>,
        outcome: Outcome,
    },
}

/// One call, complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub kind: CallKind,
    /// When the tap had the request head.
    pub t0: Instant,
    pub started_at: SystemTime,
    /// Request head to response head.
    pub ttfb: Option<Duration>,
    /// Request head to the first SSE event about this call (progress, or
    /// the answer itself).
    pub first_event: Option<Duration>,
    /// Request head to the answer (the end of its event or of the body).
    pub duration: Duration,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// `traceparent` of the request's header, else of `params._meta`.
    pub trace: Option<TraceParent>,
    /// `x-request-id` of the exchange.
    pub request_id: Option<String>,
    pub links: Links,
}

impl Call {
    /// The call failed (any error class, an error status, a transport end).
    pub fn failed(&self) -> bool {
        match &self.kind {
            CallKind::Mcp(m) => !m.error.is_ok(),
            CallKind::Retrieval(r) => r.outcome != Outcome::Ok,
            CallKind::Http { outcome, .. } => *outcome != Outcome::Ok,
        }
    }
}

/// Work done on the tap's pending table: it may complete calls, handed to
/// the second argument.
pub type OnPending<'a> = dyn FnMut(&mut Pending, &mut dyn FnMut(Call)) + 'a;

/// Where calls go as they complete, and the tap's pending table.
pub trait CallSink {
    fn call(&mut self, call: Call);
    /// Runs `f` on the tap's table of calls answered elsewhere (under its
    /// lock); a sink without one does nothing.
    fn pending(&mut self, f: &mut OnPending<'_>);
    /// A message that could not be placed: counted by kind.
    fn message(&mut self, kind: MessageCount, n: u64);
}

crate::names::label_enum! {
    /// MCP messages a tool tap counted that are no call of their own, or
    /// that it could not place.
    pub enum MessageCount {
        /// Client notifications (`notifications/initialized`, ...).
        Notification = "notification",
        /// Requests the server sent the client (sampling, elicitation, ...).
        ServerRequest = "server_request",
        /// Server notifications outside a call (logging, list changes).
        ServerNotification = "server_notification",
        /// Responses the client sent to the server's requests.
        ClientResponse = "client_response",
        /// Requests past the `MAX_TRACKED` of one batch: forwarded, not timed.
        Untracked = "untracked",
        /// An answer whose request the tap does not hold.
        Unmatched = "unmatched",
        /// JSON that is no JSON-RPC message, or a body that is no JSON.
        Invalid = "invalid",
        /// A pending call dropped to keep the table bounded.
        Evicted = "evicted",
    }
}

/// A sink that keeps what it gets (tests, fuzzing).
#[derive(Debug, Default)]
pub struct Collect {
    pub calls: Vec<Call>,
    pub table: Pending,
    pub counts: Vec<(MessageCount, u64)>,
}

impl CallSink for Collect {
    fn call(&mut self, call: Call) {
        self.calls.push(call);
    }

    fn pending(&mut self, f: &mut OnPending<'_>) {
        let calls = &mut self.calls;
        f(&mut self.table, &mut |c| calls.push(c));
    }

    fn message(&mut self, kind: MessageCount, n: u64) {
        if n > 0 {
            self.counts.push((kind, n));
        }
    }
}

impl Collect {
    pub fn count(&self, kind: MessageCount) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests;
