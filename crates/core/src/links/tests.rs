use super::*;
use crate::decode::sse::{SseDecoder, SseItem, SseLimits};
use serde_json::json;
use std::path::Path;

fn captured(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/captured");
    std::fs::read(dir.join(name).join("body.bin")).unwrap()
}

/// Every event of a captured stream, fed to a collector.
fn collect(dialect: AnswerDialect, body: &[u8]) -> Hashes {
    let mut dec = SseDecoder::new(SseLimits {
        max_line_bytes: 1 << 20,
        max_event_bytes: 1 << 20,
    });
    let mut c = ToolCallCollector::default();
    dec.feed(body, &mut |item| {
        if let SseItem::Event { event, data } = item {
            c.feed_event(dialect, event, data);
        }
    })
    .unwrap();
    c.finish()
}

#[test]
fn canonical_arguments_hash_alike() {
    let a = call_from_text("lookup", r#"{"city": "Paris", "days": 2}"#).unwrap();
    let b = call("lookup", Some(&json!({"days": 2, "city": "Paris"})));
    assert_eq!(a, b);
    assert_ne!(
        a,
        call("lookup", Some(&json!({"city": "Paris", "days": 3})))
    );
    assert_ne!(
        a,
        call("lookup2", Some(&json!({"city": "Paris", "days": 2})))
    );
    assert_eq!(call_from_text("t", "").unwrap(), call("t", None));
    assert_eq!(call("t", None), call("t", Some(&json!({}))));
    assert_eq!(call_from_text("t", "{not json"), None);
    // Kinds never collide: the same text as user message and as result.
    assert_ne!(user("x"), result("x"));
}

#[test]
fn captured_openai_parallel_tool_calls() {
    let h = collect(
        AnswerDialect::Chat,
        &captured("openai-chat-gpt35-parallel-tool-calls"),
    );
    let sf = call(
        "get_current_weather",
        Some(&json!({"location": "San Francisco"})),
    );
    let boston = call("get_current_weather", Some(&json!({"location": "Boston"})));
    assert_eq!(h.as_slice(), &[sf, boston]);
    let h = collect(
        AnswerDialect::Chat,
        &captured("openai-chat-gpt4omini-toolcall-include-usage"),
    );
    assert_eq!(
        h.as_slice(),
        &[call("get_capital", Some(&json!({"country": "UK"})))]
    );
}

#[test]
fn captured_anthropic_tool_use_blocks() {
    let h = collect(
        AnswerDialect::Anthropic,
        &captured("anthropic-sonnet35-tool-use"),
    );
    let weather = call(
        "get_weather",
        Some(&json!({"location": "San Francisco, CA", "unit": "celsius"})),
    );
    let time = call(
        "get_time",
        Some(&json!({"timezone": "America/Los_Angeles"})),
    );
    assert_eq!(h.as_slice(), &[weather, time]);
}

#[test]
fn captured_responses_function_call() {
    let h = collect(
        AnswerDialect::Responses,
        &captured("openai-responses-gpt5-reasoning-function-call"),
    );
    assert_eq!(
        h.as_slice(),
        &[call("final_result", Some(&json!({"result": 6666})))]
    );
}

/// The OpenAI Agents SDK's second LLM request (mcp 2.3, openai-agents
/// 0.25, recorded on loopback): the user's message, the assistant's tool
/// call, the MCP result as content parts.
#[test]
fn an_agent_loops_second_request_links_to_its_call_and_result() {
    let messages = json!([
        {"content": "Use tools.", "role": "system"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0001abc", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0001abc", "content": [{"type": "text", "text": "Sunny in Paris"}]}
    ]);
    let l = Links::of_conversation(&messages);
    assert_eq!(l.users.as_slice(), &[user("Weather in Paris?")]);
    // The MCP request's params: {"name":"lookup","arguments":{"city":"Paris"}}.
    assert_eq!(
        l.calls_in.as_slice(),
        &[call("lookup", Some(&json!({"city": "Paris"})))]
    );
    // The MCP result's content: [{"type":"text","text":"Sunny in Paris"}].
    assert_eq!(l.results_in.as_slice(), &[result("Sunny in Paris")]);
    assert!(l.calls_out.is_empty());
}

#[test]
fn anthropic_and_responses_conversations() {
    let anthropic = json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Sunny"}]}
    ]);
    let l = Links::of_conversation(&anthropic);
    assert_eq!(l.users.as_slice(), &[user("Weather?")]);
    assert_eq!(
        l.calls_in.as_slice(),
        &[call("lookup", Some(&json!({"city": "Paris"})))]
    );
    assert_eq!(l.results_in.as_slice(), &[result("Sunny")]);
    let responses = json!([
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"}
    ]);
    assert_eq!(Links::of_conversation(&responses), l);
    assert_eq!(
        Links::of_conversation(&json!("Weather?")).users.as_slice(),
        &[user("Weather?")]
    );
}

#[test]
fn an_app_request_offers_its_strings_or_its_last_user_message() {
    let l = Links::of_app_request(&json!({"question": "Weather in Paris?", "n": 3, "lang": ""}));
    assert_eq!(l.users.as_slice(), &[user("Weather in Paris?")]);
    let chat = json!({"model": "agent", "messages": [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"}]});
    assert_eq!(
        Links::of_app_request(&chat).users.as_slice(),
        &[user("second")]
    );
}

#[test]
fn lists_are_capped_at_the_newest() {
    let mut h = Hashes::default();
    for i in 0..20 {
        h.push(i);
    }
    h.push(19);
    assert_eq!(h.as_slice(), &(12..20).collect::<Vec<_>>()[..]);
}

#[test]
fn oversized_arguments_get_no_hash_and_calls_are_capped() {
    let mut c = ToolCallCollector::default();
    let big = "x".repeat(answer::MAX_ARGS + 1);
    let chunk = json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "t", "arguments": big}}]}}]});
    c.feed_event(AnswerDialect::Chat, b"", chunk.to_string().as_bytes());
    assert!(c.finish().is_empty());
    let mut c = ToolCallCollector::default();
    for i in 0..20 {
        let chunk = json!({"choices": [{"delta": {"tool_calls": [{"index": i, "function": {"name": "t", "arguments": "{}"}}]}}]});
        c.feed_event(AnswerDialect::Chat, b"", chunk.to_string().as_bytes());
    }
    assert!(c.overflowed);
    assert_eq!(
        c.finish().as_slice().len(),
        1,
        "eight calls, one distinct hash"
    );
}
