//! The Text Generation Inference dialect (`/generate_stream`, `/generate`):
//! what one stream event or a whole answer says.
//!
//! Each stream event carries one `token` (`text`, `special`); special
//! tokens (end of sequence) are not output. The last event also carries
//! `generated_text` and `details` (`finish_reason`, `generated_tokens`,
//! and on newer versions `input_length`), which ends the stream: TGI sends
//! no `[DONE]`. `{"error": ...}` is an error.

use super::event::{
    is_output, summary, EventKind, EventSummary, FinishReason, Malformed, OutputKinds, Raw, Usage,
};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(borrow, default)]
    token: Option<TokenView<'a>>,
    #[serde(borrow, default)]
    details: Option<DetailsView<'a>>,
    #[serde(borrow, default)]
    generated_text: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct TokenView<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct DetailsView<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<&'a str>,
    #[serde(default)]
    generated_tokens: Option<u64>,
    #[serde(default)]
    input_length: Option<u64>,
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("eos_token") | Some("stop_sequence") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        _ => FinishReason::Other,
    }
}

fn details(s: &mut EventSummary<'_>, d: Option<DetailsView<'_>>) {
    if let Some(d) = d {
        s.finish = Some(finish(d.finish_reason));
        s.usage = Some(Usage {
            prompt_tokens: d.input_length,
            completion_tokens: d.generated_tokens,
            cached_tokens: None,
            reasoning_tokens: None,
            from_extension: false,
        });
    }
}

/// TGI's output is always visible text.
const TEXT: OutputKinds = OutputKinds {
    content: true,
    reasoning: false,
    tool_call: false,
};

/// Classifies one stream event.
pub fn classify_event<'a>(event: &[u8], data: &'a [u8]) -> Result<EventSummary<'a>, Malformed> {
    let v: EventView<'a> = super::from_json(data).map_err(|_| Malformed)?;
    let mut s = summary(EventKind::Empty);
    if v.error.is_some() || event == b"error" {
        s.kind = EventKind::Error;
        return Ok(s);
    }
    if let Some(t) = v.token.filter(|t| !t.special && is_output(t.text)) {
        s.set_output(TEXT);
        s.text = t.text.map(Raw::from);
    }
    details(&mut s, v.details);
    if s.kind == EventKind::Empty && s.finish.is_some() {
        s.kind = EventKind::Finish;
    }
    Ok(s)
}

/// Classifies a whole `/generate` answer (an object, or a one-element array).
pub fn classify_json(body: &[u8]) -> Result<EventSummary<'_>, Malformed> {
    let trimmed = body.trim_ascii();
    let v: EventView<'_> = if trimmed.first() == Some(&b'[') {
        let mut all: Vec<EventView<'_>> = super::from_json(trimmed).map_err(|_| Malformed)?;
        all.pop().ok_or(Malformed)?
    } else {
        super::from_json(trimmed).map_err(|_| Malformed)?
    };
    let mut s = summary(EventKind::Empty);
    if v.error.is_some() {
        s.kind = EventKind::Error;
        return Ok(s);
    }
    if is_output(v.generated_text) {
        s.set_output(TEXT);
    }
    details(&mut s, v.details);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream() {
        let t = classify_event(b"", br#"{"index":1,"token":{"id":578,"text":" The","logprob":-0.3,"special":false},"generated_text":null,"details":null,"top_tokens":null}"#).unwrap();
        assert_eq!(t.kind, EventKind::Token);
        assert!(t.usage.is_none() && t.finish.is_none());
        let last = classify_event(b"", br#"{"index":20,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"The answer","details":{"finish_reason":"eos_token","generated_tokens":20,"seed":null,"input_length":7}}"#).unwrap();
        assert_eq!(last.kind, EventKind::Finish);
        assert_eq!(last.finish, Some(FinishReason::Stop));
        let u = last.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(7), Some(20)));
        let len = classify_event(b"", br#"{"index":16,"token":{"id":9,"text":" end","logprob":0,"special":false},"generated_text":"...","details":{"finish_reason":"length","generated_tokens":16,"seed":null}}"#).unwrap();
        assert_eq!(len.kind, EventKind::Token);
        assert_eq!(len.finish, Some(FinishReason::Length));
        assert_eq!(
            classify_event(
                b"",
                br#"{"error":"Request failed during generation","error_type":"generation"}"#
            )
            .unwrap()
            .kind,
            EventKind::Error
        );
    }

    #[test]
    fn an_answer() {
        let s = classify_json(br#"{"generated_text":"Hello","details":{"finish_reason":"length","generated_tokens":5,"seed":null,"prefill":[],"tokens":[]}}"#).unwrap();
        assert_eq!(s.kind, EventKind::Token);
        assert_eq!(s.usage.unwrap().completion_tokens, Some(5));
        let a = classify_json(br#"[{"generated_text":"Hi"}]"#).unwrap();
        assert_eq!(a.kind, EventKind::Token);
    }
}
