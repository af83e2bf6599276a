//! Tool calls, as an agent loop needs them from a model: a request that
//! offers tools and does not end in a tool's result is answered with one
//! scripted call of its first tool (`wants_tool_call`); a request that ends
//! in a result gets the ordinary streamed answer. Written in the OpenAI
//! chat, OpenAI Responses and Anthropic Messages dialects, streamed or not,
//! with the call's arguments streamed as the token events (a tool-call
//! delta is a token for TTFT, as tokentap counts it).
//!
//! The arguments are `{"<first parameter>": "<the last user message>"}`:
//! deterministic, and different per question, as a real model's are.

use super::dialects::Shape;
use super::{Builder, Mark, Script};
use serde_json::{json, Value};
use tokentap_core::decode::dialect::Dialect;

/// The call the model makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

fn str_of<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// The text of the last user message (string content or text parts).
fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .find_map(|m| match m.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(parts)) => parts
                .iter()
                .find_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned)),
            _ => None,
        })
        .unwrap_or_default()
}

/// The call a request asks for, if it offers tools and its conversation
/// does not end in a tool's result.
pub fn wants_tool_call(body: &[u8], dialect: Dialect) -> Option<ToolCall> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let tool = v.get("tools")?.as_array()?.first()?;
    let empty = Vec::new();
    let (name, schema, messages, ends_in_result) = match dialect {
        Dialect::OpenAi => {
            let m = v.get("messages")?.as_array()?;
            let last = m.last().and_then(|m| m.get("role")).and_then(Value::as_str);
            (
                str_of(tool, &["function", "name"])?,
                tool.get("function").and_then(|f| f.get("parameters")),
                m,
                last == Some("tool"),
            )
        }
        Dialect::Responses => {
            let input = v.get("input").and_then(Value::as_array).unwrap_or(&empty);
            let last = input
                .last()
                .and_then(|i| i.get("type"))
                .and_then(Value::as_str);
            (
                str_of(tool, &["name"])?,
                tool.get("parameters"),
                input,
                last == Some("function_call_output"),
            )
        }
        Dialect::Anthropic => {
            let m = v.get("messages")?.as_array()?;
            let result = m
                .last()
                .and_then(|m| m.get("content"))
                .and_then(Value::as_array)
                .is_some_and(|parts| {
                    parts
                        .iter()
                        .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
                });
            (
                str_of(tool, &["name"])?,
                tool.get("input_schema"),
                m,
                result,
            )
        }
        _ => return None,
    };
    if ends_in_result {
        return None;
    }
    let text = match (dialect, v.get("input")) {
        (Dialect::Responses, Some(Value::String(s))) => s.clone(),
        _ => last_user_text(messages),
    };
    let param = schema.and_then(|s| {
        s.get("required")
            .and_then(Value::as_array)
            .and_then(|r| r.first())
            .and_then(Value::as_str)
            .or_else(|| {
                s.get("properties")
                    .and_then(Value::as_object)
                    .and_then(|p| p.keys().next())
                    .map(String::as_str)
            })
    });
    let arguments = match param {
        Some(p) => json!({ p: text }).to_string(),
        None => "{}".to_string(),
    };
    Some(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// `arguments` cut into `n` pieces (at char boundaries), at least one.
pub(super) fn pieces(arguments: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = arguments.chars().collect();
    let n = n.clamp(1, chars.len().max(1));
    let per = chars.len().div_ceil(n).max(1);
    let mut out: Vec<String> = chars.chunks(per).map(|c| c.iter().collect()).collect();
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// Writes `s` (its texts are the argument pieces) as a call of `call`.
pub(super) fn plan(mut b: Builder, s: &Shape, call: &ToolCall) -> Script {
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
    let call_id = format!("call_{}", s.id);
    match (s.dialect, s.stream) {
        (Dialect::Responses, true) => responses(&mut b, s, call, &call_id),
        (Dialect::Anthropic, true) => anthropic(&mut b, s, call, &call_id),
        (Dialect::OpenAi, true) => chat(&mut b, s, call, &call_id),
        (dialect, false) => {
            let body = match dialect {
                Dialect::Responses => {
                    json!({"id": s.id, "object": "response", "status": "completed", "model": s.model,
                    "output": [{"type": "function_call", "id": "fc_sim", "call_id": call_id, "name": call.name,
                        "arguments": call.arguments, "status": "completed"}],
                    "usage": {"input_tokens": s.prompt_tokens, "output_tokens": s.completion(),
                        "total_tokens": s.prompt_tokens + s.completion()}})
                }
                Dialect::Anthropic => {
                    json!({"id": s.id, "type": "message", "role": "assistant", "model": s.model,
                    "content": [{"type": "tool_use", "id": call_id, "name": call.name, "input": args}],
                    "stop_reason": "tool_use", "stop_sequence": null,
                    "usage": {"input_tokens": s.prompt_tokens, "output_tokens": s.completion()}})
                }
                _ => {
                    json!({"id": s.id, "object": "chat.completion", "created": 0, "model": s.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                        "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments}}]},
                        "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion(),
                        "total_tokens": s.prompt_tokens + s.completion()}})
                }
            };
            b.json_body(s.t_last(), &body.to_string(), s.completion());
        }
        _ => {}
    }
    b.done(s.prompt_tokens, s.completion(), false)
}

fn chat(b: &mut Builder, s: &Shape, call: &ToolCall, call_id: &str) {
    b.stream_head(s.t_head, "text/event-stream");
    let chunk = |delta: Value, finish: Value| {
        json!({"id": s.id, "object": "chat.completion.chunk", "created": 0, "model": s.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let role = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    b.event(s.t_head, &role, Mark::Role, 0);
    for (i, ((at, piece), k)) in s.times.iter().zip(&s.texts).zip(&s.tokens).enumerate() {
        let entry = if i == 0 {
            json!({"index": 0, "id": call_id, "type": "function",
                "function": {"name": call.name, "arguments": piece}})
        } else {
            json!({"index": 0, "function": {"arguments": piece}})
        };
        let data = chunk(json!({"tool_calls": [entry]}), Value::Null);
        b.event(*at, &data, Mark::Token, *k);
    }
    let t = s.t_last();
    b.event(t, &chunk(json!({}), json!("tool_calls")), Mark::Finish, 0);
    let usage = json!({"id": s.id, "object": "chat.completion.chunk", "created": 0, "model": s.model, "choices": [],
        "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion(),
            "total_tokens": s.prompt_tokens + s.completion()}});
    b.event(t, &usage.to_string(), Mark::Usage, 0);
    b.event(t, "[DONE]", Mark::Done, 0);
    b.end(t);
}

fn responses(b: &mut Builder, s: &Shape, call: &ToolCall, call_id: &str) {
    b.stream_head(s.t_head, "text/event-stream");
    let created = json!({"type": "response.created", "sequence_number": 0, "response": {"id": s.id,
        "object": "response", "status": "in_progress", "model": s.model, "output": [], "usage": null}});
    b.named(
        s.t_head,
        "response.created",
        &created.to_string(),
        Mark::Role,
        0,
    );
    let item = |arguments: &str, status: &str| {
        json!({"type": "function_call", "id": "fc_sim", "call_id": call_id, "name": call.name,
            "arguments": arguments, "status": status})
    };
    let first = s.times.first().copied().unwrap_or(s.t_head);
    let added = json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
        "item": item("", "in_progress")});
    b.named(
        first,
        "response.output_item.added",
        &added.to_string(),
        Mark::Role,
        0,
    );
    let mut seq = 2;
    for ((at, piece), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        let d = json!({"type": "response.function_call_arguments.delta", "sequence_number": seq,
            "item_id": "fc_sim", "output_index": 0, "delta": piece});
        b.named(
            *at,
            "response.function_call_arguments.delta",
            &d.to_string(),
            Mark::Token,
            *k,
        );
        seq += 1;
    }
    let t = s.t_last();
    let done = json!({"type": "response.function_call_arguments.done", "sequence_number": seq,
        "item_id": "fc_sim", "output_index": 0, "arguments": call.arguments});
    b.named(
        t,
        "response.function_call_arguments.done",
        &done.to_string(),
        Mark::Finish,
        0,
    );
    let item_done = json!({"type": "response.output_item.done", "sequence_number": seq + 1,
        "output_index": 0, "item": item(&call.arguments, "completed")});
    b.named(
        t,
        "response.output_item.done",
        &item_done.to_string(),
        Mark::Finish,
        0,
    );
    let completed = json!({"type": "response.completed", "sequence_number": seq + 2,
        "response": {"id": s.id, "object": "response", "status": "completed", "model": s.model,
            "output": [item(&call.arguments, "completed")],
            "usage": {"input_tokens": s.prompt_tokens, "output_tokens": s.completion(),
                "total_tokens": s.prompt_tokens + s.completion()}}});
    b.named(
        t,
        "response.completed",
        &completed.to_string(),
        Mark::Done,
        0,
    );
    b.end(t);
}

fn anthropic(b: &mut Builder, s: &Shape, call: &ToolCall, call_id: &str) {
    b.stream_head(s.t_head, "text/event-stream");
    let start = json!({"type": "message_start", "message": {"id": s.id, "type": "message", "role": "assistant",
        "model": s.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": s.prompt_tokens, "output_tokens": 1}}});
    b.named(s.t_head, "message_start", &start.to_string(), Mark::Role, 0);
    let block = json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}});
    b.named(
        s.t_head,
        "content_block_start",
        &block.to_string(),
        Mark::Role,
        0,
    );
    for ((at, piece), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        let d = json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": piece}});
        b.named(*at, "content_block_delta", &d.to_string(), Mark::Token, *k);
    }
    let t = s.t_last();
    b.named(
        t,
        "content_block_stop",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        Mark::Finish,
        0,
    );
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
        "usage": {"output_tokens": s.completion()}});
    b.named(t, "message_delta", &delta.to_string(), Mark::Usage, 0);
    b.named(
        t,
        "message_stop",
        "{\"type\":\"message_stop\"}",
        Mark::Done,
        0,
    );
    b.end(t);
}
