//! Which dialect a response speaks, from what it says: used when the
//! request path names none (a gateway's own routes, a router such as the
//! Hugging Face router's `/models/<id>`) and no tap `dialect:` is set.
//!
//! The first stream event that names a dialect decides (SSE event or NDJSON
//! line), or the whole JSON body of a non-streaming answer:
//!
//! | says | dialect | operation |
//! |---|---|---|
//! | `type` (or SSE `event`) `message_start`; a body `"type":"message"` | anthropic | chat |
//! | `type` (or SSE `event`) `response.*`; a body `"object":"response"` | responses | chat |
//! | `choices` array | openai | `text_completion` if `object` is `text_completion`, else chat |
//! | `"object":"list"` with `data` and `usage` | openai | embeddings |
//! | `token` object, or `generated_text` | tgi | `text_completion` |
//! | `done` and `message` | ollama | chat |
//! | `done` and `response` (a string) | ollama | `text_completion` |
//! | `candidates`, `usageMetadata` or `promptFeedback` (or an array of such) | gemini | `generate_content` |
//!
//! Anything else (`[DONE]`, a keep-alive event, an error object, not JSON)
//! names nothing. Owns only this table: the dialect's own module reads the
//! event once the dialect is known.

use super::dialect::Dialect;
use super::Operation;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Events looked at before a stream is taken for something that is no LLM
/// stream (keep-alive events may come first; comments never count).
pub const MAX_SNIFFED_EVENTS: u32 = 8;

#[derive(Deserialize)]
struct View<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(default)]
    choices: Option<IgnoredAny>,
    #[serde(default)]
    data: Option<IgnoredAny>,
    #[serde(default)]
    usage: Option<IgnoredAny>,
    #[serde(default)]
    token: Option<IgnoredAny>,
    #[serde(default)]
    generated_text: Option<IgnoredAny>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    message: Option<IgnoredAny>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(default)]
    candidates: Option<IgnoredAny>,
    #[serde(default, rename = "usageMetadata")]
    usage_metadata: Option<IgnoredAny>,
    #[serde(default, rename = "promptFeedback")]
    prompt_feedback: Option<IgnoredAny>,
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
}

fn is(raw: Option<&RawValue>, s: &str) -> bool {
    raw.is_some_and(|r| r.get().strip_prefix('"').and_then(|r| r.strip_suffix('"')) == Some(s))
}

fn starts(raw: Option<&RawValue>, prefix: &str) -> bool {
    raw.is_some_and(|r| {
        r.get()
            .strip_prefix('"')
            .is_some_and(|r| r.starts_with(prefix))
    })
}

fn from_view(v: &View<'_>) -> Option<(Dialect, Operation)> {
    if is(v.kind, "message_start") || (is(v.kind, "message") && v.role.is_some()) {
        return Some((Dialect::Anthropic, Operation::Chat));
    }
    if starts(v.kind, "response.") || is(v.object, "response") {
        return Some((Dialect::Responses, Operation::Chat));
    }
    if v.choices.is_some() {
        let op = if is(v.object, "text_completion") {
            Operation::TextCompletion
        } else {
            Operation::Chat
        };
        return Some((Dialect::OpenAi, op));
    }
    // `/v1/models` is a list too, without usage.
    if is(v.object, "list") && v.data.is_some() && v.usage.is_some() {
        return Some((Dialect::OpenAi, Operation::Embeddings));
    }
    if v.token.is_some() || v.generated_text.is_some() {
        return Some((Dialect::Tgi, Operation::TextCompletion));
    }
    if v.done.is_some() && v.message.is_some() {
        return Some((Dialect::Ollama, Operation::Chat));
    }
    if v.done.is_some() && v.response.is_some_and(|r| r.get().starts_with('"')) {
        return Some((Dialect::Ollama, Operation::TextCompletion));
    }
    if v.candidates.is_some() || v.usage_metadata.is_some() || v.prompt_feedback.is_some() {
        return Some((Dialect::Gemini, Operation::GenerateContent));
    }
    None
}

/// The dialect one stream event names (`event` is its SSE type, empty for
/// NDJSON), if any.
pub fn from_event(event: &[u8], data: &[u8]) -> Option<(Dialect, Operation)> {
    if event == b"message_start" {
        return Some((Dialect::Anthropic, Operation::Chat));
    }
    if event.starts_with(b"response.") {
        return Some((Dialect::Responses, Operation::Chat));
    }
    let data = data.trim_ascii();
    if data.first() != Some(&b'{') {
        return None;
    }
    let v: View<'_> = super::from_json(data).ok()?;
    from_view(&v)
}

/// The dialect a whole JSON answer names (an object, or an array whose
/// first element names one: Gemini's unsplit stream, TGI's `/generate`).
pub fn from_body(body: &[u8]) -> Option<(Dialect, Operation)> {
    let body = body.trim_ascii();
    match body.first() {
        Some(b'{') => from_view(&super::from_json(body).ok()?),
        Some(b'[') => {
            let all: Vec<View<'_>> = super::from_json(body).ok()?;
            all.first().and_then(from_view)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Named = Option<(Dialect, Operation)>;

    #[test]
    fn first_events_name_their_dialect() {
        let cases: [(&[u8], &[u8], Named); 12] = [
            (b"", br#"{"id":"c","object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant"}}]}"#, Some((Dialect::OpenAi, Operation::Chat))),
            (b"", br#"{"id":"c","object":"text_completion","choices":[{"text":"a"}]}"#, Some((Dialect::OpenAi, Operation::TextCompletion))),
            // Azure's first event: no object, empty choices, filter results.
            (b"", br#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}"#, Some((Dialect::OpenAi, Operation::Chat))),
            (b"message_start", br#"{"type":"message_start","message":{}}"#, Some((Dialect::Anthropic, Operation::Chat))),
            (b"", br#"{"type":"message_start","message":{}}"#, Some((Dialect::Anthropic, Operation::Chat))),
            (b"response.created", br#"{"type":"response.created","response":{"id":"r"}}"#, Some((Dialect::Responses, Operation::Chat))),
            (b"", br#"{"index":1,"token":{"id":3,"text":" ","special":false},"generated_text":null}"#, Some((Dialect::Tgi, Operation::TextCompletion))),
            (b"", br#"{"model":"llama3","created_at":"t","message":{"role":"assistant","content":"Hi"},"done":false}"#, Some((Dialect::Ollama, Operation::Chat))),
            (b"", br#"{"model":"llama3","created_at":"t","response":"Hi","done":false}"#, Some((Dialect::Ollama, Operation::TextCompletion))),
            (b"", br#"{"candidates": [{"content": {"parts": [{"text": "The"}]}}],"usageMetadata": {}}"#, Some((Dialect::Gemini, Operation::GenerateContent))),
            (b"", b"[DONE]", None),
            (b"ping", br#"{"type": "ping"}"#, None),
        ];
        for (event, data, want) in cases {
            assert_eq!(
                from_event(event, data),
                want,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        assert_eq!(from_event(b"", b"not json"), None);
        assert_eq!(from_event(b"", br#"{"error":{"message":"x"}}"#), None);
    }

    #[test]
    fn whole_bodies_name_their_dialect() {
        let cases: [(&[u8], Named); 8] = [
            (br#"{"id":"c","object":"chat.completion","choices":[{"message":{"content":"Hi"}}],"usage":{}}"#, Some((Dialect::OpenAi, Operation::Chat))),
            (br#"{"object":"list","data":[{"object":"embedding","embedding":[0.1]}],"usage":{}}"#, Some((Dialect::OpenAi, Operation::Embeddings))),
            (br#"{"id":"msg","type":"message","role":"assistant","content":[]}"#, Some((Dialect::Anthropic, Operation::Chat))),
            (br#"{"id":"resp","object":"response","output":[]}"#, Some((Dialect::Responses, Operation::Chat))),
            (br#"[{"generated_text":"Hi"}]"#, Some((Dialect::Tgi, Operation::TextCompletion))),
            (br#"[{"candidates":[]},{"candidates":[]}]"#, Some((Dialect::Gemini, Operation::GenerateContent))),
            (br#"{"object":"list","data":[{"id":"m","object":"model"}]}"#, None),
            (br#"{"status":"ok"}"#, None),
        ];
        for (body, want) in cases {
            assert_eq!(from_body(body), want, "{}", String::from_utf8_lossy(body));
        }
    }
}
