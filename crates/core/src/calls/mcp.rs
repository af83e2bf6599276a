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

crate::names::label_enum! {
    /// The MCP method of a request (`mcp.method.name`); methods outside
    /// the specification are `other`.
    pub enum McpMethod {
        Initialize = "initialize",
        Ping = "ping",
        ServerDiscover = "server/discover",
        ToolsList = "tools/list",
        ToolsCall = "tools/call",
        ResourcesList = "resources/list",
        ResourceTemplatesList = "resources/templates/list",
        ResourcesRead = "resources/read",
        ResourcesSubscribe = "resources/subscribe",
        ResourcesUnsubscribe = "resources/unsubscribe",
        SubscriptionsListen = "subscriptions/listen",
        PromptsList = "prompts/list",
        PromptsGet = "prompts/get",
        CompletionComplete = "completion/complete",
        LoggingSetLevel = "logging/setLevel",
        TasksGet = "tasks/get",
        TasksResult = "tasks/result",
        TasksList = "tasks/list",
        TasksCancel = "tasks/cancel",
        SamplingCreateMessage = "sampling/createMessage",
        ElicitationCreate = "elicitation/create",
        RootsList = "roots/list",
        Other = "other",
    }
}

impl McpMethod {
    pub fn of(method: &str) -> McpMethod {
        McpMethod::from_label(method)
            .filter(|m| *m != McpMethod::Other)
            .unwrap_or(McpMethod::Other)
    }
}

crate::names::label_enum! {
    /// How an MCP call ended (`error.type`; empty when it succeeded).
    /// JSON-RPC codes the specifications name are their own value; other
    /// codes of the server range are `server_error`, any other code
    /// `_OTHER`; the rest are tokentap's transport classes.
    #[derive(Default)]
    pub enum McpError {
        #[default]
        None = "",
        /// A `tools/call` result with `isError: true`.
        ToolError = "tool_error",
        ParseError = "-32700",
        InvalidRequest = "-32600",
        MethodNotFound = "-32601",
        InvalidParams = "-32602",
        InternalError = "-32603",
        ResourceNotFound = "-32002",
        HeaderMismatch = "-32020",
        MissingClientCapability = "-32021",
        UnsupportedProtocolVersion = "-32022",
        UrlElicitationRequired = "-32042",
        /// Another code in -32000..=-32099 (implementation-defined).
        ServerError = "server_error",
        /// A code outside the reserved ranges.
        Other = "_OTHER",
        /// The HTTP answer was an error status and named no JSON-RPC answer.
        HttpError = "http_error",
        /// The upstream connection failed or broke before the answer.
        TransportError = "transport_error",
        /// The client went away before the answer.
        Cancelled = "cancelled",
        /// The response stream ended without this call's answer.
        NoResponse = "no_response",
        /// No answer within the tap's pending-call timeout (the older
        /// HTTP+SSE transport).
        Timeout = "timeout",
        /// The answer could not be read (too large, not JSON-RPC).
        Unmeasured = "unmeasured",
    }
}

impl McpError {
    /// The class of a JSON-RPC error code.
    pub fn of_code(code: i64) -> McpError {
        match code {
            -32700 => McpError::ParseError,
            -32600 => McpError::InvalidRequest,
            -32601 => McpError::MethodNotFound,
            -32602 => McpError::InvalidParams,
            -32603 => McpError::InternalError,
            -32002 => McpError::ResourceNotFound,
            -32020 => McpError::HeaderMismatch,
            -32021 => McpError::MissingClientCapability,
            -32022 => McpError::UnsupportedProtocolVersion,
            -32042 => McpError::UrlElicitationRequired,
            -32099..=-32000 => McpError::ServerError,
            _ => McpError::Other,
        }
    }

    pub fn is_ok(self) -> bool {
        self == McpError::None
    }
}

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
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn methods_are_bounded() {
        assert_eq!(McpMethod::of("tools/call"), McpMethod::ToolsCall);
        assert_eq!(McpMethod::of("server/discover"), McpMethod::ServerDiscover);
        assert_eq!(McpMethod::of("x/y"), McpMethod::Other);
        assert_eq!(McpMethod::of("other"), McpMethod::Other);
    }

    #[test]
    fn error_codes_by_class() {
        assert_eq!(McpError::of_code(-32602).as_str(), "-32602");
        assert_eq!(McpError::of_code(-32001), McpError::ServerError);
        assert_eq!(McpError::of_code(42), McpError::Other);
        assert_eq!(McpError::of_code(-32769), McpError::Other);
    }

    #[test]
    fn a_tool_call_names_its_tool_progress_trace_and_link() {
        let p = raw(json!({"name": "lookup", "arguments": {"city": "Paris"},
            "_meta": {"progressToken": 4, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}));
        let got = params(McpMethod::ToolsCall, Some(&p), true);
        assert_eq!(got.tool.as_deref(), Some("lookup"));
        assert_eq!(got.progress_token, Some(crate::hash::of(b"4")));
        assert!(got.trace.is_some());
        assert_eq!(
            got.call_hash,
            Some(links::call("lookup", Some(&json!({"city": "Paris"}))))
        );
        assert_eq!(
            params(McpMethod::ToolsCall, Some(&p), false).call_hash,
            None
        );
        // A name that is no label value is not kept.
        let bad = raw(json!({"name": "a\nb"}));
        assert_eq!(params(McpMethod::ToolsCall, Some(&bad), true).tool, None);
        let long = raw(json!({"name": "x".repeat(200)}));
        assert_eq!(params(McpMethod::ToolsCall, Some(&long), true).tool, None);
        // prompts/get names a prompt, not a tool.
        let prompt = raw(json!({"name": "greet"}));
        assert_eq!(
            params(McpMethod::PromptsGet, Some(&prompt), true).tool,
            None
        );
    }

    #[test]
    fn results_errors_and_tool_errors() {
        // mcp 1.30's answers, as recorded.
        let ok = raw(
            json!({"content": [{"type": "text", "text": "Sunny in Paris"}],
            "structuredContent": {"result": "Sunny in Paris"}, "isError": false}),
        );
        let o = outcome(McpMethod::ToolsCall, Some(&ok), None, true);
        assert_eq!(o.error, McpError::None);
        assert_eq!(o.result_hash, Some(links::result("Sunny in Paris")));
        let failed = raw(
            json!({"content": [{"type": "text", "text": "Error executing tool fail: boom"}], "isError": true}),
        );
        assert_eq!(
            outcome(McpMethod::ToolsCall, Some(&failed), None, false).error,
            McpError::ToolError
        );
        assert_eq!(
            outcome(McpMethod::ToolsList, None, Some(-32601), false).error,
            McpError::MethodNotFound
        );
        assert_eq!(
            progress_token(Some(&raw(json!({"progressToken": 4, "progress": 1.0})))),
            Some(crate::hash::of(b"4"))
        );
    }
}
