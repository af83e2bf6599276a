//! Pure decoders: bytes in, facts out. No sockets, no pingora types, no clock.
//!
//! - `sse`: WHATWG event-stream framing, incremental and capped;
//!   `ndjson`: newline-delimited JSON framing (Ollama).
//! - `dialect`: which API a path speaks and the dispatch to its classifier:
//!   `openai` (chat/completions, completions, embeddings), `responses`,
//!   `anthropic`, `ollama`, `tgi`, `gemini` — each says what one event or
//!   JSON body says, in the same `EventSummary`; `detect` names the
//!   dialect of a response whose path names none, from its first event or
//!   JSON body; `shape` classifies an OpenAI or Anthropic stream's events that repeat
//!   the previous token event but for its text without parsing them again.
//! - `raw`: a JSON value borrowed as it lies in the bytes (a summary's
//!   text and model), never kept.
//! - `request`: what the client asked for (model, stream, limits).
//! - `capped`: the capped private copy of a body.
//!
//! This module also decides, from the request path and the response headers,
//! which operation a request is and how its response body is framed.

pub mod anthropic;
pub mod capped;
pub mod detect;
pub mod dialect;
pub mod event;
pub mod fingerprint;
pub mod gemini;
pub mod inflate;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod raw;
pub mod request;
pub mod responses;
pub mod shape;
pub mod sse;
pub mod tgi;
pub mod tokens;
pub mod verdict;

crate::labels::label_enum! {
    /// The GenAI operation of a request, from its path (or, where the path
    /// names no endpoint, from the response: `detect`); its label value is
    /// the OpenTelemetry `gen_ai.operation.name`. Bounded: everything that
    /// is no LLM call is `Other` (and is forwarded, counted, not measured).
    pub enum Operation {
        /// `/v1/chat/completions` (any prefix).
        Chat = "chat",
        /// `/v1/completions` (any prefix), Ollama's `/api/generate`, TGI.
        TextCompletion = "text_completion",
        /// `/v1/embeddings`: no stream, input tokens and E2E.
        Embeddings = "embeddings",
        /// Gemini's `generateContent` / `streamGenerateContent`.
        GenerateContent = "generate_content",
        Other = "other",
    }
}

impl Operation {
    /// Classifies a request path (the query string is ignored); see
    /// `dialect::route` for the paths of every dialect. A path that names
    /// none is `Other` until its response names a dialect (`detect`).
    pub fn from_path(path: &str) -> Self {
        dialect::route(path).0
    }

    /// An LLM call (decoded and timed), not anything else on the path.
    pub fn is_llm(self) -> bool {
        !matches!(self, Operation::Other)
    }
}

/// How a response body is framed, from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`.
    Sse,
    /// `application/json` (a non-streaming answer).
    Json,
    /// `application/x-ndjson` (Ollama's streams).
    Ndjson,
    /// Anything else: forwarded, not decoded.
    Opaque,
}

impl BodyKind {
    /// How the record log and the report name it.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKind::Sse => "sse",
            BodyKind::Json => "json",
            BodyKind::Ndjson => "ndjson",
            BodyKind::Opaque => "none",
        }
    }

    pub fn from_content_type(content_type: &[u8]) -> Self {
        let essence = content_type
            .split(|b| *b == b';')
            .next()
            .unwrap_or_default();
        let essence = essence.trim_ascii();
        if essence.eq_ignore_ascii_case(b"text/event-stream") {
            BodyKind::Sse
        } else if essence.eq_ignore_ascii_case(b"application/json") {
            BodyKind::Json
        } else if essence.eq_ignore_ascii_case(b"application/x-ndjson")
            || essence.eq_ignore_ascii_case(b"application/jsonl")
        {
            BodyKind::Ndjson
        } else {
            BodyKind::Opaque
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_from_paths() {
        assert_eq!(
            Operation::from_path("/v1/chat/completions"),
            Operation::Chat
        );
        assert_eq!(
            Operation::from_path("/openai/v1/chat/completions/?x=1"),
            Operation::Chat
        );
        assert_eq!(
            Operation::from_path("/v1/completions"),
            Operation::TextCompletion
        );
        assert_eq!(Operation::from_path("/v1/models"), Operation::Other);
        assert_eq!(Operation::from_path("/metrics"), Operation::Other);
    }

    #[test]
    fn body_kinds() {
        assert_eq!(
            BodyKind::from_content_type(b"text/event-stream; charset=utf-8"),
            BodyKind::Sse
        );
        assert_eq!(
            BodyKind::from_content_type(b"Application/JSON"),
            BodyKind::Json
        );
        assert_eq!(BodyKind::from_content_type(b"text/plain"), BodyKind::Opaque);
    }
}
