//! The Ollama dialect (`/api/chat`, `/api/generate`): what one NDJSON line
//! (or a whole non-streaming answer, the same object) says.
//!
//! Output: `message.content` / `response` (visible), `message.thinking` /
//! `thinking` (reasoning), `message.tool_calls` entries. The last line has
//! `done: true`, the `done_reason`, the token counts (`prompt_eval_count`,
//! `eval_count`) and the engine's own durations in nanoseconds, which are
//! kept as `EngineTiming`. `{"error": ...}` is an error.

use super::event::{
    is_output, summary, EngineTiming, EventKind, EventSummary, FinishReason, Malformed,
    OutputKinds, Raw, Usage,
};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct LineView<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<MessageView<'a>>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(borrow, default)]
    thinking: Option<&'a RawValue>,
    #[serde(default)]
    done: bool,
    #[serde(borrow, default)]
    done_reason: Option<&'a str>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    total_duration: Option<u64>,
    #[serde(default)]
    load_duration: Option<u64>,
    #[serde(default)]
    prompt_eval_duration: Option<u64>,
    #[serde(default)]
    eval_duration: Option<u64>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(_) => FinishReason::Other,
    }
}

/// Classifies one NDJSON line or a whole non-streaming answer.
pub fn classify_line(line: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    let v: LineView<'_> = super::from_json(line).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    if v.error.is_some() {
        s.kind = EventKind::Error;
        return Ok(s);
    }
    s.model = v.model.map(Raw::from);
    let mut out = OutputKinds {
        content: is_output(v.response),
        reasoning: is_output(v.thinking),
        tool_call: false,
    };
    s.text = [v.response, v.thinking]
        .into_iter()
        .flatten()
        .find(|r| is_output(Some(r)))
        .map(Raw::from);
    if let Some(m) = v.message {
        if s.text.is_none() {
            s.text = [m.content, m.thinking]
                .into_iter()
                .flatten()
                .find(|r| is_output(Some(r)))
                .map(Raw::from);
        }
        out.content |= is_output(m.content);
        out.reasoning |= is_output(m.thinking);
        out.tool_call = is_output(m.tool_calls);
    }
    s.set_output(out);
    if v.done {
        s.finish = Some(finish(v.done_reason));
        s.usage = Some(Usage {
            prompt_tokens: v.prompt_eval_count,
            completion_tokens: v.eval_count,
            cached_tokens: None,
            reasoning_tokens: None,
            from_extension: false,
        });
        s.engine = Some(EngineTiming {
            total_ns: v.total_duration,
            load_ns: v.load_duration,
            prefill_ns: v.prompt_eval_duration,
            decode_ns: v.eval_duration,
        });
        if s.kind != EventKind::Token {
            s.kind = EventKind::Done;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_lines() {
        let t = classify_line(br#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"The"},"done":false}"#).unwrap();
        assert_eq!(t.kind, EventKind::Token);
        assert!(t.visible);
        let th = classify_line(br#"{"model":"qwen3","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}"#).unwrap();
        assert!(th.output.reasoning && !th.visible);
        let tool = classify_line(br#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}"#).unwrap();
        assert!(tool.output.tool_call);
        let done = classify_line(br#"{"model":"llama3.2","created_at":"x","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":282,"eval_duration":4535599000}"#).unwrap();
        assert_eq!(done.kind, EventKind::Done);
        assert_eq!(done.finish, Some(FinishReason::Stop));
        let u = done.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (Some(26), Some(282))
        );
        let e = done.engine.unwrap();
        assert_eq!(e.prefill_ns, Some(342_546_000));
        assert_eq!(e.decode_ns, Some(4_535_599_000));
        assert_eq!(
            classify_line(br#"{"error":"model not found"}"#)
                .unwrap()
                .kind,
            EventKind::Error
        );
    }

    #[test]
    fn generate_lines() {
        let t = classify_line(br#"{"model":"llama3.2","response":"The","done":false}"#).unwrap();
        assert_eq!(t.kind, EventKind::Token);
        let e = classify_line(br#"{"model":"llama3.2","response":"","done":false}"#).unwrap();
        assert_eq!(e.kind, EventKind::Empty);
        let d = classify_line(br#"{"model":"llama3.2","response":"","done":true,"done_reason":"length","context":[1,2,3],"prompt_eval_count":5,"eval_count":16}"#).unwrap();
        assert_eq!(d.kind, EventKind::Done);
        assert_eq!(d.finish, Some(FinishReason::Length));
    }
}
