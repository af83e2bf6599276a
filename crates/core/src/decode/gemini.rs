//! The Gemini dialect (`…/models/{model}:streamGenerateContent` and
//! `…:generateContent`, Google AI and Vertex AI): what one stream chunk or a
//! whole answer says.
//!
//! A chunk is a `GenerateContentResponse`: `candidates[].content.parts[]`
//! (`text`, reasoning as `text` with `thought: true`, `functionCall`,
//! `executableCode`, `inlineData`), `candidates[].finishReason` (`STOP`,
//! `MAX_TOKENS`, `SAFETY`…), `modelVersion`, and `usageMetadata`, which every
//! chunk repeats **cumulatively** (the last one wins; the prompt count may
//! change between chunks). Streams come as SSE (`alt=sse`, CRLF framing, no
//! `[DONE]`: the finish reason ends them) or, without `alt=sse`, as one JSON
//! array of chunks. `{"error": …}` is an error.
//!
//! Usage in the GenAI conventions' terms: input = `promptTokenCount`
//! (cached content included) + `toolUsePromptTokenCount`; output =
//! `candidatesTokenCount` + `thoughtsTokenCount` (Gemini counts thoughts
//! apart, OpenAI inside `completion_tokens`); cached =
//! `cachedContentTokenCount`; reasoning = `thoughtsTokenCount`.
//!
//! Does not own: SSE framing, timing, the request.

use super::event::{
    is_output, summary, EventKind, EventSummary, FinishReason, Malformed, OutputKinds, Raw, Usage,
};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChunkView<'a> {
    #[serde(borrow, default)]
    candidates: Option<Vec<CandidateView<'a>>>,
    #[serde(default)]
    usage_metadata: Option<UsageView>,
    #[serde(borrow, default)]
    model_version: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CandidateView<'a> {
    #[serde(borrow, default)]
    content: Option<ContentView<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct ContentView<'a> {
    #[serde(borrow, default)]
    parts: Option<Vec<PartView<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartView<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<IgnoredAny>,
    #[serde(default)]
    executable_code: Option<IgnoredAny>,
    #[serde(default)]
    inline_data: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageView {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    tool_use_prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
}

impl UsageView {
    fn into_usage(self) -> Usage {
        let prompt = self
            .prompt_token_count
            .map(|p| p.saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)));
        let output = match (self.candidates_token_count, self.thoughts_token_count) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        Usage {
            prompt_tokens: prompt,
            completion_tokens: output,
            cached_tokens: self.cached_content_token_count,
            reasoning_tokens: self.thoughts_token_count,
            from_extension: false,
        }
    }
}

/// Gemini's finish reasons in OpenAI's terms.
fn finish(reason: &str) -> FinishReason {
    match reason {
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" => FinishReason::ToolCalls,
        _ => FinishReason::Other,
    }
}

fn summarize(v: ChunkView<'_>) -> EventSummary<'_> {
    let mut s = summary(EventKind::Empty);
    if v.error.is_some() {
        s.kind = EventKind::Error;
        return s;
    }
    s.model = v.model_version.map(Raw::from);
    s.usage = v.usage_metadata.map(UsageView::into_usage);
    for c in v.candidates.unwrap_or_default() {
        if let Some(r) = c
            .finish_reason
            .filter(|r| *r != "FINISH_REASON_UNSPECIFIED")
        {
            s.finish = Some(finish(r));
        }
        let mut out = OutputKinds::default();
        for p in c.content.and_then(|c| c.parts).unwrap_or_default() {
            let text = is_output(p.text);
            out.reasoning |= text && p.thought;
            out.content |=
                (text && !p.thought) || p.executable_code.is_some() || p.inline_data.is_some();
            out.tool_call |= p.function_call.is_some();
            if s.text.is_none() && text {
                s.text = p.text.map(Raw::from);
            }
        }
        if out.content || out.reasoning || out.tool_call {
            s.token_choices = s.token_choices.saturating_add(1);
            s.output.content |= out.content;
            s.output.reasoning |= out.reasoning;
            s.output.tool_call |= out.tool_call;
        }
    }
    s.kind = if s.token_choices > 0 {
        s.visible = s.output.content || s.output.tool_call;
        EventKind::Token
    } else if s.finish.is_some() {
        EventKind::Finish
    } else if s.usage.is_some() {
        EventKind::UsageOnly
    } else {
        EventKind::Empty
    };
    s
}

/// Classifies one stream chunk (`event` is its SSE event type, unused by
/// Gemini but for `event: error`).
pub fn classify_event<'a>(event: &[u8], data: &'a [u8]) -> Result<EventSummary<'a>, Malformed> {
    let v: ChunkView<'a> = super::from_json(data).map_err(|_| Malformed)?;
    let mut s = summarize(v);
    if event == b"error" {
        s.kind = EventKind::Error;
    }
    Ok(s)
}

/// Classifies a whole answer: one `GenerateContentResponse`, or the JSON
/// array of chunks a stream without `alt=sse` is (folded: any output, the
/// last usage, finish and model).
pub fn classify_json(body: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    let trimmed = body.trim_ascii();
    if trimmed.first() != Some(&b'[') {
        let v: ChunkView<'_> = super::from_json(trimmed).map_err(|_| Malformed)?;
        return Ok(summarize(v));
    }
    let chunks: Vec<ChunkView<'_>> = super::from_json(trimmed).map_err(|_| Malformed)?;
    let mut all = summary(EventKind::Empty);
    for c in chunks {
        let s = summarize(c);
        if s.kind == EventKind::Error {
            return Ok(s);
        }
        all.token_choices = all.token_choices.max(s.token_choices);
        all.output.content |= s.output.content;
        all.output.reasoning |= s.output.reasoning;
        all.output.tool_call |= s.output.tool_call;
        all.visible |= s.visible;
        all.text = all.text.or(s.text);
        all.model = s.model.or(all.model);
        all.finish = s.finish.or(all.finish);
        all.usage = s.usage.or(all.usage);
    }
    all.kind = if all.token_choices > 0 {
        EventKind::Token
    } else if all.finish.is_some() {
        EventKind::Finish
    } else {
        EventKind::Empty
    };
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_chunk_with_cumulative_usage() {
        let first = classify_event(b"", br#"{"candidates": [{"content": {"parts": [{"text": "The"}],"role": "model"}}],"usageMetadata": {"promptTokenCount": 15,"totalTokenCount": 15},"modelVersion": "gemini-2.0-flash-exp"}"#).unwrap();
        assert_eq!(first.kind, EventKind::Token);
        assert!(first.visible);
        let u = first.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(15), None));
        let last = classify_event(b"", br#"{"candidates": [{"content": {"parts": [{"text": " is Paris.\n"}],"role": "model"},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 13,"candidatesTokenCount": 8,"totalTokenCount": 21}}"#).unwrap();
        assert_eq!(last.finish, Some(FinishReason::Stop));
        let u = last.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(13), Some(8)));
    }

    #[test]
    fn thoughts_are_reasoning_and_counted_as_output() {
        let s = classify_event(b"", br#"{"candidates":[{"content":{"parts":[{"text":"Let me think","thought":true}]}}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":0,"thoughtsTokenCount":7,"cachedContentTokenCount":4}}"#).unwrap();
        assert_eq!(s.kind, EventKind::Token);
        assert!(s.output.reasoning && !s.visible);
        let u = s.usage.unwrap();
        assert_eq!(
            (u.completion_tokens, u.reasoning_tokens, u.cached_tokens),
            (Some(7), Some(7), Some(4))
        );
        let call = classify_event(b"", br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"a":1}}}]}}]}"#).unwrap();
        assert!(call.output.tool_call && call.visible);
    }

    #[test]
    fn errors_and_whole_answers() {
        let e = classify_event(
            b"",
            br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#,
        )
        .unwrap();
        assert_eq!(e.kind, EventKind::Error);
        let one = classify_json(br#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1}}"#).unwrap();
        assert_eq!(one.kind, EventKind::Token);
        assert_eq!(one.finish, Some(FinishReason::Length));
        let arr = classify_json(br#"[{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"promptTokenCount":3}},{"candidates":[{"content":{"parts":[{"text":" there"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}]"#).unwrap();
        assert_eq!(arr.kind, EventKind::Token);
        assert_eq!(arr.usage.unwrap().completion_tokens, Some(2));
        assert_eq!(arr.finish, Some(FinishReason::Stop));
    }
}
