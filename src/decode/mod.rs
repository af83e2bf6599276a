//! Pure decoders: bytes in, facts out. No sockets, no pingora types, no clock.
//!
//! - `sse`: WHATWG event-stream framing, incremental and capped.
//! - `openai`: what an OpenAI chat/completions event or JSON body says.
//! - `request`: what the client asked for (model, stream, limits).
//! - `capped`: the capped private copy of a body.
//!
//! This module also decides, from the request path and the response headers,
//! which operation a request is and how its response body is framed.

pub mod capped;
pub mod fingerprint;
pub mod inflate;
pub mod openai;
pub mod request;
pub mod sse;
pub mod verdict;

/// The GenAI operation of a request, from its path. Bounded: everything that
/// is not a known LLM endpoint is `Other` (and is forwarded, counted, never
/// decoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `/v1/chat/completions` (any prefix).
    Chat,
    /// `/v1/completions` (any prefix).
    TextCompletion,
    Other,
}

impl Operation {
    /// Classifies a request path (the query string is ignored).
    pub fn from_path(path: &str) -> Self {
        let path = path
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Operation::Chat
        } else if path.ends_with("/completions") {
            Operation::TextCompletion
        } else {
            Operation::Other
        }
    }

    /// The OpenTelemetry `gen_ai.operation.name` value (also the `operation` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Chat => "chat",
            Operation::TextCompletion => "text_completion",
            Operation::Other => "other",
        }
    }

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
    /// Anything else: forwarded, not decoded.
    Opaque,
}

impl BodyKind {
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
