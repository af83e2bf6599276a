//! The tool calls an LLM's answer asks for, collected from its stream (or
//! its JSON body) as the events go past, hashed at the end: OpenAI chat's
//! `tool_calls` deltas, Responses' `function_call` items, Anthropic's
//! `tool_use` blocks with their `input_json_delta`s.
//!
//! Bounded: at most `MAX_CALLS` calls per answer, a name of at most
//! `MAX_NAME` bytes and arguments of at most `MAX_ARGS` bytes each (a call
//! past a cap gets no hash). Only events that carry a tool call are parsed
//! (the caller hands over those whose summary says so).

use super::{call, call_from_text, Hashes};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// Calls collected per answer.
pub const MAX_CALLS: usize = 8;
/// Longest tool name kept.
pub const MAX_NAME: usize = 128;
/// Longest arguments text kept per call.
pub const MAX_ARGS: usize = 16 * 1024;

/// Which wire the answer is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerDialect {
    Chat,
    Responses,
    Anthropic,
}

#[derive(Debug, Default)]
struct Slot {
    index: u64,
    name: String,
    args: String,
    /// Anthropic's `input` from the block start (used when no delta came).
    start_input: Option<Value>,
    broken: bool,
}

/// The tool calls of one answer, in the making.
#[derive(Debug, Default)]
pub struct ToolCallCollector {
    slots: Vec<Slot>,
    /// Calls finished whole (Responses' items carry name and arguments).
    done: Hashes,
    /// More calls than `MAX_CALLS`.
    pub overflowed: bool,
}

#[derive(Deserialize)]
struct ChatChunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<ChatChoice<'a>>,
}

#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChatDelta<'a>>,
    #[serde(borrow, default)]
    message: Option<ChatDelta<'a>>,
}

#[derive(Deserialize)]
struct ChatDelta<'a> {
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ChatToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ChatToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    function: Option<ChatFunction<'a>>,
}

#[derive(Deserialize)]
struct ChatFunction<'a> {
    #[serde(borrow, default)]
    name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<std::borrow::Cow<'a, str>>,
}

impl ToolCallCollector {
    fn slot(&mut self, index: u64) -> Option<&mut Slot> {
        let pos = match self.slots.iter().position(|s| s.index == index) {
            Some(p) => p,
            None if self.slots.len() < MAX_CALLS => {
                self.slots.push(Slot {
                    index,
                    ..Slot::default()
                });
                self.slots.len() - 1
            }
            None => {
                self.overflowed = true;
                return None;
            }
        };
        self.slots.get_mut(pos)
    }

    fn append(&mut self, index: u64, name: Option<&str>, args: Option<&str>) {
        let Some(s) = self.slot(index) else { return };
        if let Some(n) = name {
            if s.name.len() + n.len() > MAX_NAME {
                s.broken = true;
            } else {
                s.name.push_str(n);
            }
        }
        if let Some(a) = args {
            if s.args.len() + a.len() > MAX_ARGS {
                s.broken = true;
                s.args = String::new();
            } else if !s.broken {
                s.args.push_str(a);
            }
        }
    }

    /// One event of a stream that carries a tool call (`event` is the SSE
    /// event name, empty when there is none).
    pub fn feed_event(&mut self, dialect: AnswerDialect, event: &[u8], data: &[u8]) {
        match dialect {
            AnswerDialect::Chat => self.chat(data),
            AnswerDialect::Responses => self.responses(event, data),
            AnswerDialect::Anthropic => self.anthropic(data),
        }
    }

    fn chat(&mut self, data: &[u8]) {
        let Ok(c) = serde_json::from_slice::<ChatChunk<'_>>(data) else {
            return;
        };
        for ch in c.choices {
            let calls = ch
                .delta
                .or(ch.message)
                .and_then(|d| d.tool_calls)
                .unwrap_or_default();
            for (i, tc) in calls.into_iter().enumerate() {
                let index = tc.index.unwrap_or(i as u64);
                let f = tc.function;
                let name = f.as_ref().and_then(|f| f.name.as_deref());
                let args = f.as_ref().and_then(|f| f.arguments.as_deref());
                self.append(index, name, args);
            }
        }
    }

    fn responses(&mut self, _event: &[u8], data: &[u8]) {
        #[derive(Deserialize)]
        struct Ev<'a> {
            #[serde(rename = "type", borrow, default)]
            kind: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            item: Option<&'a RawValue>,
        }
        let Ok(ev) = serde_json::from_slice::<Ev<'_>>(data) else {
            return;
        };
        if ev.kind.as_deref() != Some("response.output_item.done") {
            return;
        }
        if let Some(item) = ev
            .item
            .and_then(|i| serde_json::from_str::<Value>(i.get()).ok())
        {
            self.responses_item(&item);
        }
    }

    fn responses_item(&mut self, item: &Value) {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return;
        }
        if let (Some(name), Some(args)) = (
            item.get("name").and_then(Value::as_str),
            item.get("arguments").and_then(Value::as_str),
        ) {
            if let Some(h) = call_from_text(name, args) {
                self.done.push(h);
            }
        }
    }

    fn anthropic(&mut self, data: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                let Some(b) = v.get("content_block") else {
                    return;
                };
                if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                    return;
                }
                let name = b.get("name").and_then(Value::as_str);
                self.append(index, name, None);
                let input = b.get("input").cloned();
                if let Some(s) = self.slots.iter_mut().find(|s| s.index == index) {
                    s.start_input = input;
                }
            }
            Some("content_block_delta") => {
                let d = v.get("delta");
                if d.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("input_json_delta")
                {
                    let part = d
                        .and_then(|d| d.get("partial_json"))
                        .and_then(Value::as_str);
                    // Only blocks that started as tool_use have a slot.
                    if self.slots.iter().any(|s| s.index == index) {
                        self.append(index, None, part);
                    }
                }
            }
            _ => {}
        }
    }

    /// A whole JSON answer.
    pub fn feed_body(&mut self, dialect: AnswerDialect, body: &[u8]) {
        match dialect {
            AnswerDialect::Chat => self.chat(body),
            AnswerDialect::Responses => {
                let Ok(v) = serde_json::from_slice::<Value>(body) else {
                    return;
                };
                if let Some(Value::Array(items)) = v.get("output") {
                    for item in items {
                        self.responses_item(item);
                    }
                }
            }
            AnswerDialect::Anthropic => {
                let Ok(v) = serde_json::from_slice::<Value>(body) else {
                    return;
                };
                if let Some(Value::Array(blocks)) = v.get("content") {
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                            if let Some(name) = b.get("name").and_then(Value::as_str) {
                                self.done.push(call(name, b.get("input")));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The hashes of the calls collected whole.
    pub fn finish(&self) -> Hashes {
        let mut out = self.done.clone();
        for s in self
            .slots
            .iter()
            .filter(|s| !s.broken && !s.name.is_empty())
        {
            let h = match (&s.start_input, s.args.is_empty()) {
                (Some(input), true) => Some(call(&s.name, Some(input))),
                _ => call_from_text(&s.name, &s.args),
            };
            if let Some(h) = h {
                out.push(h);
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.done.is_empty()
    }
}
