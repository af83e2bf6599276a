//! Tests of `calls/mcp.rs`.

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
