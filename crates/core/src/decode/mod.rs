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

/// Reads JSON from bytes as serde_json reads it from text whenever the bytes
/// are UTF-8 (checked once, up front). From bytes, serde_json checks every
/// string it borrows on its own — each key, each borrowed value — about a
/// fifth of a body's classification; from text it checks none again. Bytes
/// that are not UTF-8 are read from bytes as before (serde_json accepts
/// them in strings it skips), so the result is the same either way.
pub(crate) fn from_json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

crate::names::label_enum! {
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

    /// `from_json` reads what serde_json reads from the bytes, to the same
    /// value or to an error: JSON with escapes and multi-byte characters,
    /// cut anywhere or with a byte changed (not UTF-8 among them), into a
    /// `Value` and into a view that borrows strings and raw values.
    mod from_json_is_from_slice {
        use super::super::from_json;
        use proptest::prelude::*;
        use serde::Deserialize;
        use serde_json::value::RawValue;

        #[derive(Deserialize)]
        struct View<'a> {
            #[serde(borrow, default)]
            model: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            choices: Option<&'a RawValue>,
            #[serde(default)]
            n: Option<u64>,
        }

        fn body() -> impl Strategy<Value = Vec<u8>> {
            ("[a\\\"é😀 \\n]{0,12}", "[a-z\\u{e9}]{0,6}", any::<u32>()).prop_map(|(text, key, n)| {
                serde_json::json!({"model": text, "choices": [{"message": {"content": text}}], key: n, "n": n})
                    .to_string()
                    .into_bytes()
            })
        }

        proptest! {
            #[test]
            fn on_any_bytes(body in body(), cut in any::<prop::sample::Index>(), at in any::<prop::sample::Index>(), byte in any::<u8>(), change in any::<bool>()) {
                let mut b = body;
                if change {
                    let i = at.index(b.len());
                    if let Some(x) = b.get_mut(i) {
                        *x = byte;
                    }
                } else {
                    b.truncate(cut.index(b.len() + 1));
                }
                let ours = from_json::<serde_json::Value>(&b).ok();
                let theirs = serde_json::from_slice::<serde_json::Value>(&b).ok();
                prop_assert_eq!(ours, theirs);
                let seen = |v: View<'_>| (v.model.map(|m| m.into_owned()), v.choices.map(|r| r.get().to_owned()), v.n);
                let ours = from_json::<View<'_>>(&b).ok().map(seen);
                let theirs = serde_json::from_slice::<View<'_>>(&b).ok().map(seen);
                prop_assert_eq!(ours, theirs);
            }
        }

        #[test]
        fn bytes_that_are_not_utf8_in_a_skipped_string_read_as_before() {
            let b = b"{\"id\":\"\xff\",\"n\":3}";
            let v: View<'_> = from_json(b).unwrap();
            assert_eq!(v.n, Some(3));
        }
    }
}
