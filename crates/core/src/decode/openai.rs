//! The OpenAI dialect: what one `/v1/chat/completions` or `/v1/completions`
//! stream event (or non-streaming JSON body) says.
//!
//! Owns: classifying an event as `[DONE]`, error, token-bearing (content,
//! reasoning, tool-call delta, refusal, completion text), finish, role-only,
//! usage-only or empty; reading `usage` (prompt, completion, cached and
//! reasoning tokens) — or, where a vendor leaves `usage` out, its extension
//! (Groq's `x_groq.usage`, marked `from_extension`) — `finish_reason` and
//! the response `model`.
//!
//! Does not own: SSE framing (`decode::sse`), timing (`record`), the request.
//!
//! The JSON is read through borrowed views (`&RawValue`, counted sequences)
//! so that classifying the usual event shapes allocates nothing; only fields
//! tokentap does not know, nested two levels or more (e.g. `logprobs`), make
//! serde_json use a small scratch buffer. The text itself is never copied:
//! we only look at whether a value is empty.

use super::event::*;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;
use std::marker::PhantomData;

/// Classifies the data of one SSE event (`event` is its SSE event type).
pub fn classify_event<'a>(event: &[u8], data: &'a [u8]) -> Result<EventSummary<'a>, Malformed> {
    classify_event_with_pad(event, data).map(|(s, _)| s)
}

/// `classify_event`, also saying where the random padding is (OpenAI's
/// `obfuscation`, Mistral's `p`; for `shape`: it differs in every event and
/// means nothing).
pub fn classify_event_with_pad<'a>(
    event: &[u8],
    data: &'a [u8],
) -> Result<(EventSummary<'a>, Option<&'a RawValue>), Malformed> {
    if data.trim_ascii() == b"[DONE]" {
        return Ok((summary(EventKind::Done), None));
    }
    let (mut s, pad) = classify_view(data)?;
    if event == b"error" {
        s.kind = EventKind::Error;
    }
    Ok((s, pad))
}

/// Classifies a JSON object: a stream chunk or a whole non-streaming body
/// (`message` is read like `delta`).
pub fn classify_json(data: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    classify_view(data).map(|(s, _)| s)
}

fn classify_view(data: &[u8]) -> Result<(EventSummary<'_>, Option<&RawValue>), Malformed> {
    let view: ChunkView<'_> = super::from_json(data).map_err(|_| Malformed)?;
    let choices = view.choices.unwrap_or_default();
    // The standard field first; a vendor's extension only in its absence.
    let usage = match (view.usage, view.x_groq.and_then(|x| x.usage)) {
        (Some(u), _) => Some(u.into_usage()),
        (None, Some(u)) => Some(Usage {
            from_extension: true,
            ..u.into_usage()
        }),
        (None, None) => None,
    };
    let kind = if view.error.is_some() {
        EventKind::Error
    } else if choices.token > 0 {
        EventKind::Token
    } else if choices.finish.is_some() {
        EventKind::Finish
    } else if choices.role {
        EventKind::RoleOnly
    } else if usage.is_some() {
        EventKind::UsageOnly
    } else {
        EventKind::Empty
    };
    let s = EventSummary {
        kind,
        token_choices: choices.token,
        output: choices.output,
        visible: choices.output.content || choices.output.tool_call,
        finish: choices.finish,
        usage,
        model: view.model.map(Raw::from),
        engine: None,
        text: choices.text.map(Raw::from),
    };
    Ok((s, view.obfuscation.or(view.p)))
}

#[derive(Deserialize)]
struct ChunkView<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Option<ChoicesSummary<'a>>,
    #[serde(default)]
    usage: Option<UsageView>,
    /// Groq puts the usage of a stream in `x_groq.usage` (finish chunk).
    #[serde(default)]
    x_groq: Option<VendorView>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    /// OpenAI's random padding (2025): only where it is, for `shape`.
    #[serde(borrow, default)]
    obfuscation: Option<&'a RawValue>,
    /// Mistral's (`p`), the same.
    #[serde(borrow, default)]
    p: Option<&'a RawValue>,
}

/// A vendor's extension object that may carry an OpenAI-shaped `usage`.
#[derive(Deserialize)]
struct VendorView {
    #[serde(default)]
    usage: Option<UsageView>,
}

/// OpenAI's `usage`, also read in Anthropic's spelling.
#[derive(Deserialize)]
pub(crate) struct UsageView {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    /// Anthropic-style usage: `input_tokens` counts only the uncached part;
    /// the prompt is it plus the cache reads and writes.
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

impl UsageView {
    pub(crate) fn into_usage(self) -> Usage {
        let anthropic_prompt = self.input_tokens.map(|i| {
            i.saturating_add(self.cache_read_input_tokens.unwrap_or(0))
                .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
        });
        Usage {
            from_extension: false,
            prompt_tokens: self.prompt_tokens.or(anthropic_prompt),
            completion_tokens: self.completion_tokens,
            cached_tokens: self
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(self.cache_read_input_tokens),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens),
        }
    }
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow, default, alias = "message")]
    delta: Option<DeltaView<'a>>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow, default)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<Count<ToolCallView<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<FunctionView<'a>>,
}

/// Typed down to the leaves so that skipping it never nests (no scratch).
#[derive(Deserialize)]
struct ToolCallView<'a> {
    #[serde(borrow, default)]
    #[allow(dead_code)]
    function: Option<FunctionView<'a>>,
}

#[derive(Deserialize)]
struct FunctionView<'a> {
    #[serde(borrow, default)]
    #[allow(dead_code)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    #[allow(dead_code)]
    arguments: Option<&'a RawValue>,
}

/// Folds `choices` element by element, never collecting them.
#[derive(Default)]
struct ChoicesSummary<'a> {
    text: Option<&'a RawValue>,
    token: u32,
    output: OutputKinds,
    role: bool,
    finish: Option<FinishReason>,
}

/// The first of these that is output.
fn first_output<'a>(raws: &[Option<&'a RawValue>]) -> Option<&'a RawValue> {
    raws.iter().copied().find(|r| is_output(*r)).flatten()
}

impl<'a> ChoicesSummary<'a> {
    fn add(&mut self, c: ChoiceView<'a>) {
        if let Some(f) = c.finish_reason {
            self.finish = Some(FinishReason::from_raw(f));
        }
        let mut out = OutputKinds {
            content: is_output(c.text),
            ..OutputKinds::default()
        };
        if self.text.is_none() {
            self.text = first_output(&[c.text]).or_else(|| {
                c.delta.as_ref().and_then(|d| {
                    first_output(&[d.content, d.refusal, d.reasoning_content, d.reasoning])
                })
            });
        }
        if let Some(d) = c.delta {
            out.content |= is_output(d.content) || is_output(d.refusal);
            out.reasoning = is_output(d.reasoning_content) || is_output(d.reasoning);
            out.tool_call = d.tool_calls.is_some_and(|n| n.0 > 0) || d.function_call.is_some();
            self.role |= d.role.is_some();
        }
        if out.content || out.reasoning || out.tool_call {
            self.token = self.token.saturating_add(1);
        }
        self.output.content |= out.content;
        self.output.reasoning |= out.reasoning;
        self.output.tool_call |= out.tool_call;
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ChoicesSummary<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ChoicesSummary<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut s = ChoicesSummary::default();
                while let Some(c) = seq.next_element::<ChoiceView<'a>>()? {
                    s.add(c);
                }
                Ok(s)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// The number of elements of a JSON array, each read as `T` and dropped.
struct Count<T>(u32, PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Count<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Count<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut n = 0u32;
                while seq.next_element::<T>()?.is_some() {
                    n = n.saturating_add(1);
                }
                Ok(Count(n, PhantomData))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(data: &str) -> EventKind {
        classify_event(b"", data.as_bytes())
            .map(|s| s.kind)
            .unwrap_or(EventKind::Empty)
    }

    #[test]
    fn groq_usage_is_read_from_its_extension_when_usage_is_absent() {
        let finish = br#"{"id":"c","object":"chat.completion.chunk","model":"llama3-8b-8192","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.28,"prompt_tokens":18,"prompt_time":0.0027,"completion_tokens":73,"completion_time":0.06,"total_tokens":91,"total_time":0.063}}}"#;
        let u = classify_json(finish).ok().and_then(|s| s.usage);
        assert_eq!(
            u.map(|u| (u.prompt_tokens, u.completion_tokens, u.from_extension)),
            Some((Some(18), Some(73), true))
        );
        // The standard field wins where both are present.
        let both = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2},"x_groq":{"usage":{"prompt_tokens":18,"completion_tokens":73}}}"#;
        let u = classify_json(both).ok().and_then(|s| s.usage);
        assert_eq!(
            u.map(|u| (u.prompt_tokens, u.from_extension)),
            Some((Some(1), false))
        );
        // The first chunk's x_groq has an id and no usage.
        let first = br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"x_groq":{"id":"req_1"}}"#;
        assert_eq!(classify_json(first).ok().and_then(|s| s.usage), None);
    }

    #[test]
    fn classifies_the_event_kinds() {
        assert_eq!(kind("[DONE]"), EventKind::Done);
        assert_eq!(
            kind(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#),
            EventKind::RoleOnly
        );
        assert_eq!(
            kind(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#),
            EventKind::RoleOnly
        );
        assert_eq!(
            kind(r#"{"choices":[{"delta":{"content":"hi"}}]}"#),
            EventKind::Token
        );
        assert_eq!(
            kind(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#),
            EventKind::Token
        );
        assert_eq!(
            kind(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#),
            EventKind::Token
        );
        assert_eq!(
            kind(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}}]}"#
            ),
            EventKind::Token
        );
        assert_eq!(
            kind(r#"{"choices":[{"text":"x","index":0}]}"#),
            EventKind::Token
        );
        assert_eq!(
            kind(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#),
            EventKind::Finish
        );
        assert_eq!(
            kind(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#),
            EventKind::Finish
        );
        assert_eq!(
            kind(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#),
            EventKind::UsageOnly
        );
        assert_eq!(kind(r#"{"choices":[{"delta":{}}]}"#), EventKind::Empty);
        assert_eq!(kind(r#"{"error":{"message":"boom"}}"#), EventKind::Error);
        assert_eq!(
            classify_event(b"error", br#"{"message":"x"}"#).map(|s| s.kind),
            Ok(EventKind::Error)
        );
        assert!(classify_event(b"", b"{not json").is_err());
    }

    #[test]
    fn reads_anthropic_style_cache_usage() {
        let s = classify_json(
            br#"{"choices":[],"usage":{"input_tokens":10,"output_tokens":4,
                "cache_read_input_tokens":90,"cache_creation_input_tokens":5}}"#,
        );
        let u = s.ok().and_then(|s| s.usage).unwrap_or_default();
        assert_eq!(u.prompt_tokens, Some(105));
        assert_eq!(u.cached_tokens, Some(90));
        assert_eq!(u.completion_tokens, Some(4));
    }

    #[test]
    fn reads_usage_finish_model_and_visibility() {
        let s = classify_json(
            br#"{"model":"m-1","choices":[{"delta":{"content":"a"},"finish_reason":"length"}],
                "usage":{"prompt_tokens":18,"completion_tokens":12,"total_tokens":30,
                "prompt_tokens_details":{"cached_tokens":17},
                "completion_tokens_details":{"reasoning_tokens":5}}}"#,
        );
        let s = s.unwrap_or_else(|_| summary(EventKind::Empty));
        assert_eq!(s.kind, EventKind::Token);
        assert!(s.visible);
        assert_eq!(s.finish, Some(FinishReason::Length));
        assert_eq!(
            s.usage,
            Some(Usage {
                prompt_tokens: Some(18),
                completion_tokens: Some(12),
                cached_tokens: Some(17),
                reasoning_tokens: Some(5),
                from_extension: false,
            })
        );
        assert_eq!(s.model.and_then(raw_str).as_deref(), Some("m-1"));
        let r = classify_json(br#"{"choices":[{"delta":{"reasoning_content":"x"}}]}"#);
        assert_eq!(
            r.map(|s| (s.visible, s.output.reasoning)),
            Ok((false, true))
        );
        let t = classify_json(
            br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#,
        );
        assert_eq!(
            t.map(|s| (s.visible, s.output)),
            Ok((
                true,
                OutputKinds {
                    content: false,
                    reasoning: false,
                    tool_call: true
                }
            ))
        );
    }

    #[test]
    fn non_streaming_body_uses_message() {
        let s = classify_json(
            br#"{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"hello"}}],
               "usage":{"completion_tokens":1,"prompt_tokens":2,"prompt_tokens_details":null}}"#,
        );
        assert_eq!(s.as_ref().map(|s| s.kind), Ok(EventKind::Token));
        assert_eq!(
            s.map(|s| s.usage.and_then(|u| u.completion_tokens)),
            Ok(Some(1))
        );
    }

    #[test]
    fn n_greater_than_one_counts_choices() {
        let s = classify_json(br#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#);
        assert_eq!(s.map(|s| s.token_choices), Ok(2));
    }
}
