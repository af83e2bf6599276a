//! A guardrail's verdict, read from its (non-streaming) JSON answer:
//!
//! - OpenAI-style moderation: `results[].flagged` — any true is `flagged`,
//!   all false is `pass`;
//! - a guard model behind chat completions (Llama Guard and the like): the
//!   first choice's content starting with `unsafe` is `flagged`, with `safe`
//!   is `pass`.
//!
//! Anything else is `unknown`. Only the verdict leaves this module, never
//! the text.

use serde::Deserialize;
use std::borrow::Cow;

crate::names::label_enum! {
    /// A guardrail's answer, where its API says one.
    pub enum Verdict {
        /// Allowed (moderation `flagged: false`, Llama Guard `safe`).
        Pass = "pass",
        /// Blocked or flagged (`flagged: true`, `unsafe`).
        Flagged = "flagged",
        /// The guardrail call failed (error status, timeout, reset).
        Error = "error",
        /// The response does not say in a way tokentap reads.
        Unknown = "unknown",
    }
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(default)]
    results: Option<Vec<Moderation>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
}

#[derive(Deserialize)]
struct Moderation {
    #[serde(default)]
    flagged: Option<bool>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

pub fn verdict(body: &[u8]) -> Verdict {
    let Ok(a) = super::from_json::<Answer<'_>>(body) else {
        return Verdict::Unknown;
    };
    if let Some(results) = a.results.filter(|r| !r.is_empty()) {
        let flags: Vec<Option<bool>> = results.iter().map(|r| r.flagged).collect();
        return if flags.contains(&Some(true)) {
            Verdict::Flagged
        } else if flags.iter().all(|f| *f == Some(false)) {
            Verdict::Pass
        } else {
            Verdict::Unknown
        };
    }
    let text = a
        .choices
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.message)
        .and_then(|m| m.content);
    match text.as_deref().map(|t| t.trim_start().to_ascii_lowercase()) {
        Some(t) if t.starts_with("unsafe") => Verdict::Flagged,
        Some(t) if t.starts_with("safe") => Verdict::Pass,
        _ => Verdict::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_moderation_and_guard_models() {
        assert_eq!(
            verdict(br#"{"id":"m","results":[{"flagged":false,"categories":{}}]}"#),
            Verdict::Pass
        );
        assert_eq!(
            verdict(br#"{"results":[{"flagged":false},{"flagged":true}]}"#),
            Verdict::Flagged
        );
        assert_eq!(
            verdict(br#"{"choices":[{"message":{"role":"assistant","content":"safe"}}]}"#),
            Verdict::Pass
        );
        assert_eq!(
            verdict(br#"{"choices":[{"message":{"content":"\n\nunsafe\nS1"}}]}"#),
            Verdict::Flagged
        );
        assert_eq!(
            verdict(br#"{"choices":[{"message":{"content":"Sure!"}}]}"#),
            Verdict::Unknown
        );
        assert_eq!(verdict(b"not json"), Verdict::Unknown);
        assert_eq!(verdict(br#"{"entities":[]}"#), Verdict::Unknown);
    }
}
