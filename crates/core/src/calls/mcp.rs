//! What the Model Context Protocol's messages mean to a measurement: the
//! method (a bounded label, the OpenTelemetry `mcp.method.name`), the tool
//! a `tools/call` names, its progress token and propagated trace context
//! (`params._meta`), how a response ended (`error.type`: a JSON-RPC code,
//! `tool_error` for a result with `isError: true`), and the links of a call
//! (its name and arguments, its result's text: hashes only).
//!
//! Owns the MCP vocabulary (2024-11-05 through 2026-07-28). Must not
//! touch: framing (JSON-RPC is `jsonrpc`, SSE the decoder's) or timing
//! (`exchange`).

use crate::links;
use crate::trace::TraceParent;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

mod names;
pub use names::{McpError, McpMethod};

/// Longest tool name read (MCP names are at most 128 characters).
pub const MAX_TOOL_NAME: usize = 128;

/// What a request's params say (`tools/call`, `prompts/get`, `_meta`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    /// `params.name` of `tools/call` (bounded, printable; else `None`).
    pub tool: Option<String>,
    /// `params._meta.progressToken`, hashed like an id.
    pub progress_token: Option<u64>,
    /// `params._meta.traceparent` (SEP-414 trace context propagation).
    pub trace: Option<TraceParent>,
    /// The call's link: its name and canonical arguments (`tools/call`).
    pub call_hash: Option<u64>,
}

#[derive(Deserialize)]
struct ParamsView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<MetaView<'a>>,
}

#[derive(Deserialize)]
struct MetaView<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    #[serde(borrow, default)]
    traceparent: Option<Cow<'a, str>>,
}

fn printable(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TOOL_NAME && !s.chars().any(char::is_control)
}

/// Reads a request's params; `links` also hashes a tool call's arguments.
pub fn params(method: McpMethod, raw: Option<&RawValue>, with_links: bool) -> Params {
    let Some(raw) = raw else {
        return Params::default();
    };
    let Ok(v) = serde_json::from_str::<ParamsView<'_>>(raw.get()) else {
        return Params::default();
    };
    let meta = v.meta;
    let tool = match method {
        McpMethod::ToolsCall => v
            .name
            .as_deref()
            .filter(|n| printable(n))
            .map(str::to_owned),
        _ => None,
    };
    let call_hash = match (&tool, with_links) {
        (Some(name), true) => Some(links::call(name, v.arguments.as_ref())),
        _ => None,
    };
    Params {
        tool,
        progress_token: meta
            .as_ref()
            .and_then(|m| m.progress_token)
            .map(|t| crate::hash::of(t.get().as_bytes())),
        trace: meta
            .as_ref()
            .and_then(|m| m.traceparent.as_deref())
            .and_then(|t| TraceParent::parse(t.as_bytes())),
        call_hash,
    }
}

/// What a successful response's result says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub error: McpError,
    /// The result's text, hashed (a tool call's link to the next LLM call).
    pub result_hash: Option<u64>,
}

#[derive(Deserialize)]
struct ResultView {
    #[serde(default, rename = "isError")]
    is_error: Option<bool>,
    #[serde(default)]
    content: Option<Value>,
}

/// The outcome of a response: its error code, or for `tools/call` its
/// `isError` flag and (with `links`) its text's hash.
pub fn outcome(
    method: McpMethod,
    result: Option<&RawValue>,
    error: Option<i64>,
    with_links: bool,
) -> Outcome {
    if let Some(code) = error {
        return Outcome {
            error: McpError::of_code(code),
            result_hash: None,
        };
    }
    if method != McpMethod::ToolsCall {
        return Outcome::default();
    }
    let Some(v) = result.and_then(|r| serde_json::from_str::<ResultView>(r.get()).ok()) else {
        return Outcome::default();
    };
    Outcome {
        error: if v.is_error == Some(true) {
            McpError::ToolError
        } else {
            McpError::None
        },
        result_hash: match (with_links, v.content.as_ref().and_then(links::content_text)) {
            (true, Some(t)) => Some(links::result(&t)),
            _ => None,
        },
    }
}

/// `notifications/progress`: the token it reports on, hashed.
pub fn progress_token(params: Option<&RawValue>) -> Option<u64> {
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow, rename = "progressToken")]
        token: &'a RawValue,
    }
    let p: P<'_> = serde_json::from_str(params?.get()).ok()?;
    Some(crate::hash::of(p.token.get().as_bytes()))
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
