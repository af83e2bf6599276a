//! The OpenAI Responses dialect (`/v1/responses`): what one stream event or
//! a whole response says.
//!
//! Output deltas: `response.output_text.delta` and `response.refusal.delta`
//! (visible), `response.reasoning_text.delta` and
//! `response.reasoning_summary_text.delta` (reasoning),
//! `response.function_call_arguments.delta` and
//! `response.custom_tool_call_input.delta` (tool calls). The terminator is
//! `response.completed` or `response.incomplete` (with the usage: input
//! tokens including the cached ones, output tokens including reasoning);
//! `response.failed` and `error` are errors. The model comes with
//! `response.created`.

use super::event::{
    is_output, summary, EventKind, EventSummary, FinishReason, Malformed, OutputKinds, Raw, Usage,
};
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<ResponseView<'a>>,
}

#[derive(Deserialize)]
struct ResponseView<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<UsageView>,
    #[serde(borrow, default)]
    incomplete_details: Option<Incomplete<'a>>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct UsageView {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl UsageView {
    fn into_usage(self) -> Usage {
        Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens: self.output_tokens,
            cached_tokens: self.input_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: self.output_tokens_details.and_then(|d| d.reasoning_tokens),
            from_extension: false,
        }
    }
}

fn incomplete(r: Option<Incomplete<'_>>) -> FinishReason {
    match r.and_then(|r| r.reason) {
        Some("max_output_tokens") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Classifies one stream event.
pub fn classify_event<'a>(event: &[u8], data: &'a [u8]) -> Result<EventSummary<'a>, Malformed> {
    let v: EventView<'a> = super::from_json(data).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    let out = |content, reasoning, tool_call| OutputKinds {
        content,
        reasoning,
        tool_call,
    };
    let delta = is_output(v.delta);
    let output = match v.kind {
        "response.output_text.delta" | "response.refusal.delta" => out(delta, false, false),
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            out(false, delta, false)
        }
        "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
            out(false, false, delta)
        }
        _ => OutputKinds::default(),
    };
    s.set_output(output);
    if s.kind == EventKind::Token && !output.tool_call {
        s.text = v.delta.map(Raw::from);
    }
    match v.kind {
        "response.created" | "response.in_progress" => {
            s.model = v.response.and_then(|r| r.model).map(Raw::from);
            s.kind = EventKind::RoleOnly;
        }
        "response.completed" | "response.incomplete" => {
            let (model, usage, details) = v.response.map_or((None, None, None), |r| {
                (r.model, r.usage, r.incomplete_details)
            });
            s.finish = Some(if v.kind == "response.completed" {
                FinishReason::Stop
            } else {
                incomplete(details)
            });
            s.model = model.map(Raw::from);
            s.usage = usage.map(UsageView::into_usage);
            s.kind = EventKind::Done;
        }
        "response.failed" | "error" => s.kind = EventKind::Error,
        _ => {}
    }
    if event == b"error" {
        s.kind = EventKind::Error;
    }
    Ok(s)
}

#[derive(Deserialize)]
struct BodyView<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a str>,
    #[serde(borrow, default)]
    output: Option<Vec<ItemView<'a>>>,
    #[serde(default)]
    usage: Option<UsageView>,
    #[serde(borrow, default)]
    incomplete_details: Option<Incomplete<'a>>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ItemView<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    content: Option<Vec<PartView<'a>>>,
    #[serde(borrow, default)]
    summary: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct PartView<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    refusal: Option<&'a RawValue>,
}

/// Classifies a whole (non-streaming) response object.
pub fn classify_json(body: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    let v: BodyView<'_> = super::from_json(body).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    if v.status == Some("failed") || v.error.is_some_and(|e| e.get() != "null") {
        s.kind = EventKind::Error;
        return Ok(s);
    }
    s.model = v.model.map(Raw::from);
    s.usage = v.usage.map(UsageView::into_usage);
    s.finish = match v.status {
        Some("completed") => Some(FinishReason::Stop),
        Some("incomplete") => Some(incomplete(v.incomplete_details)),
        _ => None,
    };
    let mut out = OutputKinds::default();
    for item in v.output.unwrap_or_default() {
        match item.kind.unwrap_or_default() {
            "message" => {
                for p in item.content.unwrap_or_default() {
                    out.content |= match p.kind.unwrap_or_default() {
                        "refusal" => is_output(p.refusal),
                        _ => is_output(p.text),
                    };
                }
            }
            "reasoning" => {
                out.reasoning |= is_output(item.summary)
                    || item
                        .content
                        .unwrap_or_default()
                        .iter()
                        .any(|p| is_output(p.text));
            }
            "function_call" | "custom_tool_call" => out.tool_call = true,
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

    fn ev(t: &str) -> EventSummary<'_> {
        classify_event(b"", t.as_bytes()).unwrap()
    }

    #[test]
    fn a_stream() {
        let c = ev(
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5-mini","output":[],"usage":null}}"#,
        );
        assert_eq!(c.kind, EventKind::RoleOnly);
        assert_eq!(c.model.map(|m| m.get()), Some("\"gpt-5-mini\""));
        let t = ev(
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[]}"#,
        );
        assert_eq!(t.kind, EventKind::Token);
        assert!(t.visible);
        let r = ev(
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Think"}"#,
        );
        assert!(r.output.reasoning && !r.visible);
        let f = ev(
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"a\""}"#,
        );
        assert!(f.output.tool_call);
        assert_eq!(
            ev(r#"{"type":"response.output_text.delta","delta":""}"#).kind,
            EventKind::Empty
        );
        assert_eq!(
            ev(r#"{"type":"response.output_text.done","text":"Hi there"}"#).kind,
            EventKind::Empty
        );
        let done = ev(
            r#"{"type":"response.completed","response":{"id":"resp_1","status":"completed","model":"gpt-5-mini","output":[{"type":"message","content":[{"type":"output_text","text":"Hi there"}]}],"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":12},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":70}}}"#,
        );
        assert_eq!(done.kind, EventKind::Done);
        assert_eq!(done.finish, Some(FinishReason::Stop));
        let u = done.usage.unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.cached_tokens,
                u.reasoning_tokens
            ),
            (Some(30), Some(40), Some(12), Some(32))
        );
        let inc = ev(
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":16}}}"#,
        );
        assert_eq!(inc.finish, Some(FinishReason::Length));
        assert_eq!(
            ev(r#"{"type":"response.failed","response":{"status":"failed"}}"#).kind,
            EventKind::Error
        );
        assert_eq!(
            ev(r#"{"type":"error","code":"server_error","message":"x"}"#).kind,
            EventKind::Error
        );
    }

    #[test]
    fn a_response() {
        let body = br#"{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"usage":{"input_tokens":5,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":3}},"error":null}"#;
        let s = classify_json(body).unwrap();
        assert_eq!(s.kind, EventKind::Token);
        assert!(s.output.content && !s.output.reasoning);
        assert_eq!(s.usage.unwrap().completion_tokens, Some(9));
        assert_eq!(s.finish, Some(FinishReason::Stop));
    }
}
