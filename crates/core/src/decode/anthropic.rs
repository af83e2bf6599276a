//! The Anthropic Messages dialect (`/v1/messages`): what one stream event
//! or a whole message says.
//!
//! Stream: `message_start` (the model and the prompt's usage: uncached
//! input, cache reads and writes), `content_block_start`,
//! `content_block_delta` (`text_delta`, `thinking_delta`, `input_json_delta`
//! — output; `signature_delta` and `citations_delta` are not),
//! `content_block_stop`, `message_delta` (the stop reason and the
//! cumulative output tokens), `message_stop` (the terminator), `ping`,
//! `error`. The event type is read from the data's `type` (the SSE `event:`
//! line says the same; an `event: error` line alone also counts).

use super::event::{
    is_output, summary, EventKind, EventSummary, FinishReason, Malformed, OutputKinds, Raw,
};
use super::openai::UsageView;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
    #[serde(borrow, default)]
    message: Option<MessageView<'a>>,
    #[serde(borrow, default)]
    delta: Option<DeltaView<'a>>,
    #[serde(borrow, default)]
    content_block: Option<BlockView<'a>>,
    #[serde(default)]
    usage: Option<UsageView>,
}

#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<UsageView>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow, default)]
    partial_json: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stop_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct BlockView<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    thinking: Option<&'a RawValue>,
    #[serde(default)]
    #[allow(dead_code)]
    input: Option<IgnoredAny>,
}

/// Anthropic's stop reasons in OpenAI's terms.
pub fn finish(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Classifies one stream event.
pub fn classify_event<'a>(event: &[u8], data: &'a [u8]) -> Result<EventSummary<'a>, Malformed> {
    let v: EventView<'a> = super::from_json(data).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    match v.kind {
        "message_start" => {
            if let Some(m) = v.message {
                s.model = m.model.map(Raw::from);
                // The prompt's side only: output_tokens here is a
                // placeholder, the count comes with message_delta.
                s.usage = m.usage.map(|u| {
                    let mut u = u.into_usage();
                    u.completion_tokens = None;
                    u
                });
            }
            s.kind = EventKind::RoleOnly;
        }
        "content_block_delta" => {
            if let Some(d) = v.delta {
                s.text = d.text.or(d.thinking).map(Raw::from);
                let out = match d.kind.unwrap_or_default() {
                    "text_delta" => OutputKinds {
                        content: is_output(d.text),
                        ..OutputKinds::default()
                    },
                    "thinking_delta" => OutputKinds {
                        reasoning: is_output(d.thinking),
                        ..OutputKinds::default()
                    },
                    "input_json_delta" => OutputKinds {
                        tool_call: is_output(d.partial_json),
                        ..OutputKinds::default()
                    },
                    _ => OutputKinds::default(),
                };
                s.set_output(out);
            }
        }
        "content_block_start" => {
            // A block may open with text already in it.
            if let Some(b) = v.content_block {
                let out = OutputKinds {
                    content: b.kind == Some("text") && is_output(b.text),
                    reasoning: b.kind == Some("thinking") && is_output(b.thinking),
                    tool_call: false,
                };
                s.set_output(out);
            }
        }
        "message_delta" => {
            if let Some(r) = v.delta.and_then(|d| d.stop_reason) {
                s.finish = Some(finish(r));
                s.kind = EventKind::Finish;
            }
            // Cumulative: input (newer API versions) and output tokens.
            s.usage = v.usage.map(UsageView::into_usage);
            if s.kind != EventKind::Finish && s.usage.is_some() {
                s.kind = EventKind::UsageOnly;
            }
        }
        "message_stop" => s.kind = EventKind::Done,
        "error" => s.kind = EventKind::Error,
        _ => {}
    }
    if event == b"error" {
        s.kind = EventKind::Error;
    }
    Ok(s)
}

#[derive(Deserialize)]
struct BodyView<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Vec<BlockView<'a>>>,
    #[serde(borrow, default)]
    stop_reason: Option<&'a str>,
    #[serde(default)]
    usage: Option<UsageView>,
}

/// Classifies a whole (non-streaming) message.
pub fn classify_json(body: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    let v: BodyView<'_> = super::from_json(body).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    if v.kind == Some("error") {
        s.kind = EventKind::Error;
        return Ok(s);
    }
    s.model = v.model.map(Raw::from);
    s.usage = v.usage.map(UsageView::into_usage);
    s.finish = v.stop_reason.map(finish);
    let mut out = OutputKinds::default();
    for b in v.content.unwrap_or_default() {
        match b.kind.unwrap_or_default() {
            "text" => out.content |= is_output(b.text),
            "thinking" => out.reasoning |= is_output(b.thinking),
            "tool_use" => out.tool_call = true,
            _ => {}
        }
    }
    s.set_output(out);
    if s.kind == EventKind::Empty && s.finish.is_some() {
        s.kind = EventKind::Finish;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream() {
        let start = br#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_read_input_tokens":100,"cache_creation_input_tokens":0,"output_tokens":1}}}"#;
        let s = classify_event(b"message_start", start).unwrap();
        assert_eq!(s.kind, EventKind::RoleOnly);
        let u = s.usage.unwrap();
        assert_eq!(u.prompt_tokens, Some(125));
        assert_eq!(u.cached_tokens, Some(100));
        assert_eq!(u.completion_tokens, None);
        assert_eq!(s.model.map(|m| m.get()), Some("\"claude-sonnet-4-5\""));
        let k = |d: &[u8]| classify_event(b"", d).unwrap().kind;
        assert_eq!(
            k(br#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
            EventKind::Empty
        );
        let t = classify_event(
            b"content_block_delta",
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        )
        .unwrap();
        assert_eq!(t.kind, EventKind::Token);
        assert!(t.visible && t.output.content);
        let th = classify_event(
            b"",
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#,
        )
        .unwrap();
        assert_eq!(th.kind, EventKind::Token);
        assert!(th.output.reasoning && !th.visible);
        assert_eq!(
            k(br#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#),
            EventKind::Empty
        );
        let tool = classify_event(
            b"",
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"loc"}}"#,
        )
        .unwrap();
        assert!(tool.output.tool_call && tool.kind == EventKind::Token);
        assert_eq!(
            k(br#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#),
            EventKind::Empty
        );
        let end = classify_event(
            b"message_delta",
            br#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        )
        .unwrap();
        assert_eq!(end.kind, EventKind::Finish);
        assert_eq!(end.finish, Some(FinishReason::Stop));
        assert_eq!(end.usage.unwrap().completion_tokens, Some(15));
        assert_eq!(k(br#"{"type":"message_stop"}"#), EventKind::Done);
        assert_eq!(k(br#"{"type":"ping"}"#), EventKind::Empty);
        assert_eq!(
            k(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            EventKind::Error
        );
        assert!(classify_event(b"", b"{not json").is_err());
    }

    #[test]
    fn a_message() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"Hi!"},{"type":"tool_use","id":"t","name":"get","input":{"a":{"b":1}}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":20}}"#;
        let s = classify_json(body).unwrap();
        assert_eq!(s.kind, EventKind::Token);
        assert!(s.output.content && s.output.reasoning && s.output.tool_call);
        assert_eq!(s.finish, Some(FinishReason::ToolCalls));
        let u = s.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(10), Some(20)));
        let err = br#"{"type":"error","error":{"type":"invalid_request_error","message":"x"}}"#;
        assert_eq!(classify_json(err).unwrap().kind, EventKind::Error);
    }
}
