//! What links the steps of an agent loop without keeping their content:
//! stable hashes (`crate::hash`) of the user's message, of a tool call
//! (its name and canonical arguments) and of a tool's result, computed in
//! passing where each appears — the compound request, the LLM's request
//! and answer, the MCP call and its result — so that records of taps that
//! saw no common `traceparent` can still be joined (`correlate::compound`).
//!
//! Owns: the hash of each kind (a tag byte keeps kinds apart), the
//! canonical form of arguments (parsed JSON re-serialised with sorted keys:
//! `{"b":1,"a":2}` and `{"a": 2, "b": 1}` hash alike), the text of a
//! message's content (a string, or its text parts concatenated), and the
//! capped lists one record carries (`Links`).
//!
//! Must not touch: where the values come from (the request parser, the
//! stream's tool-call collector, the MCP reader call these functions) or
//! how they are matched (the correlator). Never stores the text.

use crate::hash::StableHasher;
use serde_json::Value;

mod answer;
pub use answer::{AnswerDialect, ToolCallCollector};

/// Hashes kept per list of one record (the newest where there are more).
pub const MAX_PER_LIST: usize = 8;

const USER: u8 = b'U';
const CALL: u8 = b'C';
const RESULT: u8 = b'R';

/// The hash of a user's message text.
pub fn user(text: &str) -> u64 {
    StableHasher::new()
        .tag(USER)
        .field(text.as_bytes())
        .finish()
}

/// The hash of a tool call: its name and its arguments (a JSON value,
/// canonicalised; absent arguments are `{}`).
pub fn call(name: &str, args: Option<&Value>) -> u64 {
    let canonical = match args {
        None | Some(Value::Null) => String::from("{}"),
        Some(v) => v.to_string(),
    };
    StableHasher::new()
        .tag(CALL)
        .field(name.as_bytes())
        .field(canonical.as_bytes())
        .finish()
}

/// `call` with the arguments as a JSON text (OpenAI's `arguments` string);
/// `None` when it is not JSON.
pub fn call_from_text(name: &str, args: &str) -> Option<u64> {
    let v = match args.trim() {
        "" => None,
        t => Some(serde_json::from_str::<Value>(t).ok()?),
    };
    Some(call(name, v.as_ref()))
}

/// The hash of a tool's result text.
pub fn result(text: &str) -> u64 {
    StableHasher::new()
        .tag(RESULT)
        .field(text.as_bytes())
        .finish()
}

/// The text of a content value: a string, or the `text` of its parts
/// concatenated (`[{"type":"text","text":"..."}]`, as MCP results and
/// OpenAI/Anthropic content parts carry it). `None` when it has none.
pub fn content_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            let mut any = false;
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                    any = true;
                } else if let Some(t) = p.as_str() {
                    out.push_str(t);
                    any = true;
                }
            }
            any.then_some(out)
        }
        _ => None,
    }
}

/// A capped list of hashes: the newest `MAX_PER_LIST`, distinct.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hashes(Vec<u64>);

impl Hashes {
    pub fn push(&mut self, h: u64) {
        if self.0.contains(&h) {
            return;
        }
        if self.0.len() >= MAX_PER_LIST {
            self.0.remove(0);
        }
        self.0.push(h);
    }

    pub fn contains(&self, h: u64) -> bool {
        self.0.contains(&h)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    /// Whether the two lists share a hash.
    pub fn meets(&self, other: &Hashes) -> bool {
        self.0.iter().any(|h| other.0.contains(h))
    }

    pub fn from_slice(v: &[u64]) -> Self {
        let mut h = Hashes::default();
        for x in v {
            h.push(*x);
        }
        h
    }

    pub fn as_slice(&self) -> &[u64] {
        &self.0
    }
}

/// What one record offers to, and asks of, the other steps of its loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    /// User messages its request carries (a compound request: the user's
    /// input; an LLM call: each user message of its conversation).
    pub users: Hashes,
    /// Tool calls it asked for (an LLM call's answer).
    pub calls_out: Hashes,
    /// Tool calls it carries or ran (an LLM call's request: the earlier
    /// assistant turns' calls; a tool call: the call it executed).
    pub calls_in: Hashes,
    /// Tool results it carries (an LLM call's request: the tool messages).
    pub results_in: Hashes,
    /// The result it returned (a tool call).
    pub results_out: Hashes,
}

impl Links {
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
            && self.calls_out.is_empty()
            && self.calls_in.is_empty()
            && self.results_in.is_empty()
            && self.results_out.is_empty()
    }

    /// The links of an LLM request's conversation (`messages` of chat,
    /// Responses' `input`, Anthropic's `messages`): its user messages, the
    /// tool calls of its assistant turns, its tool results.
    pub fn of_conversation(messages: &Value) -> Links {
        let mut l = Links::default();
        match messages {
            // Responses' `input` may be a bare string: the user's message.
            Value::String(s) => l.users.push(user(s)),
            Value::Array(items) => {
                for m in items {
                    l.read_message(m);
                }
            }
            _ => {}
        }
        l
    }

    fn read_message(&mut self, m: &Value) {
        let role = m.get("role").and_then(Value::as_str);
        let kind = m.get("type").and_then(Value::as_str);
        match (role, kind) {
            // Responses: {"type":"function_call","name","arguments"} and
            // {"type":"function_call_output","output"}.
            (_, Some("function_call")) => {
                if let (Some(name), Some(args)) = (
                    m.get("name").and_then(Value::as_str),
                    m.get("arguments").and_then(Value::as_str),
                ) {
                    if let Some(h) = call_from_text(name, args) {
                        self.calls_in.push(h);
                    }
                }
            }
            (_, Some("function_call_output")) => {
                if let Some(t) = m.get("output").and_then(content_text) {
                    self.results_in.push(result(&t));
                }
            }
            (Some("user"), _) => {
                let content = m.get("content");
                // Anthropic carries tool results as user turns of
                // `tool_result` blocks.
                if let Some(Value::Array(blocks)) = content {
                    let mut any_result = false;
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                            any_result = true;
                            if let Some(t) = b.get("content").and_then(content_text) {
                                self.results_in.push(result(&t));
                            }
                        }
                    }
                    if any_result {
                        return;
                    }
                }
                if let Some(t) = content.and_then(content_text) {
                    self.users.push(user(&t));
                }
            }
            (Some("tool"), _) => {
                if let Some(t) = m.get("content").and_then(content_text) {
                    self.results_in.push(result(&t));
                }
            }
            (Some("assistant"), _) => {
                // OpenAI chat: tool_calls[].function.{name,arguments}.
                if let Some(Value::Array(calls)) = m.get("tool_calls") {
                    for c in calls {
                        let f = c.get("function");
                        if let (Some(name), Some(args)) = (
                            f.and_then(|f| f.get("name")).and_then(Value::as_str),
                            f.and_then(|f| f.get("arguments")).and_then(Value::as_str),
                        ) {
                            if let Some(h) = call_from_text(name, args) {
                                self.calls_in.push(h);
                            }
                        }
                    }
                }
                // Anthropic: content blocks {"type":"tool_use","name","input"}.
                if let Some(Value::Array(blocks)) = m.get("content") {
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                            if let Some(name) = b.get("name").and_then(Value::as_str) {
                                self.calls_in.push(call(name, b.get("input")));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The links of a request that is no LLM call (a compound system's own
    /// API): each top-level string of a JSON object body counts as a user
    /// message (the app is expected to pass the user's text on verbatim);
    /// a chat-shaped body (`messages`, `input`) counts its last user
    /// message.
    pub fn of_app_request(body: &Value) -> Links {
        if let Some(conv) = body.get("messages").or_else(|| body.get("input")) {
            let all = Links::of_conversation(conv);
            let mut l = Links::default();
            if let Some(last) = all.users.as_slice().last() {
                l.users.push(*last);
            }
            return l;
        }
        let mut l = Links::default();
        if let Value::Object(map) = body {
            for v in map.values() {
                if let Value::String(s) = v {
                    if !s.is_empty() {
                        l.users.push(user(s));
                    }
                }
            }
        }
        l
    }
}

#[cfg(test)]
mod tests;
