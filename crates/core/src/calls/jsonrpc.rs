//! JSON-RPC 2.0 messages as MCP carries them (a POST body, an SSE event's
//! data), read with bounded work: one object or a batch, of which the
//! first `MAX_TRACKED` messages are read and the rest only counted.
//!
//! Owns: telling requests, notifications and responses apart, the request
//! id as a stable hash (the raw JSON of the id: `1` and `"1"` differ, as
//! JSON-RPC says), an error's code. Keeps no text: method names are
//! borrowed from the body for the caller to classify, params and results
//! are handed back raw.
//!
//! Must not touch: what MCP methods mean (`mcp`).

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// Messages of one batch that are read; the rest are counted.
pub const MAX_TRACKED: usize = 64;

/// A request id, hashed (`crate::hash`) from its raw JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub u64);

impl Id {
    fn of(raw: &RawValue) -> Id {
        Id(crate::hash::of(raw.get().as_bytes()))
    }
}

/// One message.
#[derive(Debug, Clone)]
pub enum Message<'a> {
    /// A call: it expects a response with its id.
    Request {
        id: Id,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
        /// Its size in bytes as sent.
        bytes: usize,
    },
    /// No id: nothing answers it.
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    /// The answer to a request: `result`, or `error` with its code.
    Response {
        /// `None` for an error that could not name its request.
        id: Option<Id>,
        result: Option<&'a RawValue>,
        error: Option<i64>,
        bytes: usize,
    },
    /// JSON, but no JSON-RPC message.
    Invalid,
}

#[derive(Deserialize)]
struct View<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorView>,
}

#[derive(Deserialize)]
struct ErrorView {
    #[serde(default)]
    code: Option<i64>,
}

/// One message from its raw JSON.
pub fn message(raw: &RawValue) -> Message<'_> {
    let Ok(v) = serde_json::from_str::<View<'_>>(raw.get()) else {
        return Message::Invalid;
    };
    if v.jsonrpc.as_deref() != Some("2.0") {
        return Message::Invalid;
    }
    // `"id": null` reads as no id.
    let id = v.id.filter(|id| id.get() != "null").map(Id::of);
    let bytes = raw.get().len();
    match (v.method, id) {
        (Some(method), Some(id)) => Message::Request {
            id,
            method,
            params: v.params,
            bytes,
        },
        (Some(method), None) => Message::Notification {
            method,
            params: v.params,
        },
        (None, id) if v.result.is_some() || v.error.is_some() => Message::Response {
            id,
            result: v.result,
            error: v.error.map(|e| e.code.unwrap_or(0)),
            bytes,
        },
        _ => Message::Invalid,
    }
}

/// A body: one message or a batch (capped).
#[derive(Debug, Default)]
pub struct Batch<'a> {
    /// The first `MAX_TRACKED` messages, raw.
    pub tracked: Vec<&'a RawValue>,
    /// Messages in all (a single message is 1).
    pub total: usize,
    /// It was an array (a JSON-RPC batch).
    pub is_batch: bool,
}

impl<'a> Batch<'a> {
    pub fn untracked(&self) -> usize {
        self.total.saturating_sub(self.tracked.len())
    }
}

/// Why a body is no JSON-RPC at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJsonRpc;

/// Reads a body: `{...}` is one message, `[...]` a batch (of which the
/// first `MAX_TRACKED` are kept, raw, and the rest counted without being
/// kept). The body must be valid UTF-8 JSON.
pub fn batch(body: &[u8]) -> Result<Batch<'_>, NotJsonRpc> {
    let text = std::str::from_utf8(body).map_err(|_| NotJsonRpc)?;
    let first = text.trim_start().as_bytes().first().copied();
    match first {
        Some(b'{') => {
            let raw: &RawValue = serde_json::from_str(text).map_err(|_| NotJsonRpc)?;
            Ok(Batch {
                tracked: vec![raw],
                total: 1,
                is_batch: false,
            })
        }
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_str(text);
            let b = de.deserialize_seq(BatchVisitor).map_err(|_| NotJsonRpc)?;
            de.end().map_err(|_| NotJsonRpc)?;
            Ok(b)
        }
        _ => Err(NotJsonRpc),
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = Batch<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Batch<'de>, A::Error> {
        let mut b = Batch {
            is_batch: true,
            ..Batch::default()
        };
        loop {
            if b.tracked.len() < MAX_TRACKED {
                match seq.next_element::<&'de RawValue>()? {
                    Some(raw) => b.tracked.push(raw),
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            b.total = b.total.saturating_add(1);
        }
        Ok(b)
    }
}

#[cfg(test)]
#[path = "jsonrpc_tests.rs"]
mod tests;
