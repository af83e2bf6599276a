//! The request side: what a client asked for, read from a capped copy of the
//! request body once it is complete.
//!
//! Owns: `model`, `stream`, the output limit (`max_completion_tokens`,
//! `max_tokens`, Responses' `max_output_tokens`, Ollama's
//! `options.num_predict`, TGI's `parameters.max_new_tokens`, Gemini's
//! `generationConfig.maxOutputTokens`), `stream_options.include_usage`, `n`,
//! the number of messages and the size of the prompt (`messages`, `prompt`,
//! Responses' `input`, TGI's `inputs` or Gemini's `contents`, as JSON
//! bytes). Never keeps the prompt
//! text: only sizes and the model name leave this module.
//!
//! Does not own: copying the body (that is `CappedBuf`, fed by the proxy
//! without holding the body back) or deciding labels (`labels`).

use super::fingerprint::{fingerprint_value, prefix_hashes, PrefixHashes, PREFIX_CHARS};
use crate::links::Links;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Longest model name kept from a request or response (bytes); longer names
/// are cut at a character boundary. The label set caps them again.
pub const MAX_MODEL_BYTES: usize = 256;

/// What the request body says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub model: Option<String>,
    pub stream: Option<bool>,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<u64>,
    pub include_usage: Option<bool>,
    pub n: Option<u64>,
    pub messages: Option<u32>,
    /// Size of `messages` (chat) or `prompt` (completions) as sent, in bytes.
    pub prompt_bytes: Option<u64>,
    /// Hash of model and normalised messages/prompt, when asked for
    /// (`decode::fingerprint`).
    pub fingerprint: Option<u64>,
    /// Prompt-prefix fingerprints (1k / 4k / 16k characters), when asked for.
    pub prefixes: PrefixHashes,
    /// Prompt tokens by the tap's tokenizer, when it has one.
    pub prompt_tokens_estimate: Option<u64>,
    /// What links this request to the other steps of an agent loop
    /// (`crate::links`), when asked for; the answer's tool calls are added
    /// by the meter.
    pub links: Links,
}

/// Which hashes of the prompt to compute (each costs a full parse of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hashes {
    /// The request fingerprint (cross-tap joins).
    pub fingerprint: bool,
    /// The prefix fingerprints (prefix-cache analysis).
    pub prefixes: bool,
    /// Count the prompt's tokens with this tokenizer.
    pub estimate: Option<super::tokens::Estimator>,
    /// The links of an LLM request's conversation (`Links::of_conversation`).
    pub links: bool,
    /// The links of a compound system's own request
    /// (`Links::of_app_request`: its user text, whatever the body's shape).
    pub app_links: bool,
}

/// The body is not a JSON object tokentap can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotJson;

#[derive(Deserialize)]
struct RequestView<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt: Option<&'a RawValue>,
    /// Responses API.
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    /// TGI.
    #[serde(borrow, default)]
    inputs: Option<&'a RawValue>,
    #[serde(default)]
    parameters: Option<Limits>,
    /// Ollama.
    #[serde(default)]
    options: Option<Limits>,
    /// Gemini (the model is in the path).
    #[serde(borrow, default)]
    contents: Option<&'a RawValue>,
    #[serde(default, rename = "generationConfig")]
    generation_config: Option<Limits>,
}

/// `parameters` (TGI), `options` (Ollama) or `generationConfig` (Gemini):
/// only the output limit.
#[derive(Deserialize)]
struct Limits {
    #[serde(default, alias = "num_predict", alias = "maxOutputTokens")]
    max_new_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// Parses a complete request body; with `fingerprint`, also hashes its
/// model and messages/prompt (for joining records across taps).
pub fn parse_request(body: &[u8], fingerprint: bool) -> Result<RequestInfo, NotJson> {
    parse_request_with(
        body,
        Hashes {
            fingerprint,
            ..Hashes::default()
        },
    )
}

/// Parses a complete request body, computing the hashes asked for.
pub fn parse_request_with(body: &[u8], hashes: Hashes) -> Result<RequestInfo, NotJson> {
    let v: RequestView<'_> = super::from_json(body).map_err(|_| NotJson)?;
    let prompt = v
        .messages
        .or(v.prompt)
        .or(v.input)
        .or(v.inputs)
        .or(v.contents);
    let prompt_bytes = prompt.map(|raw| u64::try_from(raw.get().len()).unwrap_or(u64::MAX));
    // Every character of the prefixes' text (roles, text, two newlines a
    // message) takes at least one byte of the prompt's JSON, so a prompt
    // shorter than the shortest prefix has none: not parsed for them.
    let prefixes_possible =
        |raw: &RawValue| PREFIX_CHARS.first().is_some_and(|n| raw.get().len() >= *n);
    let parsed = match prompt {
        Some(raw)
            if hashes.fingerprint
                || hashes.links
                || (hashes.prefixes && prefixes_possible(raw)) =>
        {
            serde_json::from_str::<serde_json::Value>(raw.get()).ok()
        }
        _ => None,
    };
    // The messages counted from the value the hashes parsed (`prompt` is
    // the messages when there are any), else in a pass of their own.
    let messages = v.messages.and_then(|raw| {
        let len = match &parsed {
            Some(serde_json::Value::Array(items)) => items.len(),
            _ => serde_json::from_str::<Vec<IgnoredAny>>(raw.get())
                .ok()?
                .len(),
        };
        Some(u32::try_from(len).unwrap_or(u32::MAX))
    });
    let fingerprint = parsed
        .as_ref()
        .filter(|_| hashes.fingerprint)
        .map(|p| fingerprint_value(v.model.as_deref(), p));
    let prefixes = parsed
        .as_ref()
        .filter(|_| hashes.prefixes)
        .map_or([None; 3], prefix_hashes);
    let links = if hashes.app_links {
        serde_json::from_slice::<serde_json::Value>(body)
            .map(|b| Links::of_app_request(&b))
            .unwrap_or_default()
    } else {
        parsed
            .as_ref()
            .filter(|_| hashes.links)
            .map(Links::of_conversation)
            .unwrap_or_default()
    };
    Ok(RequestInfo {
        links,
        fingerprint,
        prefixes,
        model: v.model.map(|m| truncate(&m, MAX_MODEL_BYTES).to_owned()),
        stream: v.stream,
        max_tokens: v
            .max_completion_tokens
            .or(v.max_tokens)
            .or(v.max_output_tokens)
            .or(v.parameters.and_then(|p| p.max_new_tokens))
            .or(v.options.and_then(|o| o.max_new_tokens))
            .or(v.generation_config.and_then(|g| g.max_new_tokens)),
        include_usage: v.stream_options.and_then(|o| o.include_usage),
        n: v.n,
        messages,
        prompt_bytes,
        prompt_tokens_estimate: hashes.estimate.and_then(|e| e.prompt(body)),
    })
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The prefix hashes are those of the parsed prompt, whether or not
        /// its length let the parse be skipped: text with escapes and
        /// multi-byte characters, around the 1,000-character mark.
        #[test]
        fn prefixes_skipped_only_where_there_are_none(
            parts in proptest::collection::vec(("(user|system|)", "[a\\n\"é😀 ]{0,600}"), 1..4),
            as_prompt in any::<bool>(),
        ) {
            let prompt = if as_prompt {
                serde_json::Value::String(parts.iter().map(|(_, t)| t.as_str()).collect())
            } else {
                serde_json::Value::Array(parts.iter().map(|(role, text)| {
                    serde_json::json!({"role": role, "content": text})
                }).collect())
            };
            let key = if as_prompt { "prompt" } else { "messages" };
            let body = serde_json::json!({"model": "m", key: prompt}).to_string();
            let hashes = Hashes { prefixes: true, ..Hashes::default() };
            let got = parse_request_with(body.as_bytes(), hashes).unwrap_or_default();
            prop_assert_eq!(got.prefixes, prefix_hashes(&prompt));
        }
    }

    #[test]
    fn reads_other_dialects_limits_and_prompts() {
        let responses = parse_request(
            br#"{"model":"gpt-5","input":"Hi","max_output_tokens":64,"stream":true}"#,
            false,
        )
        .unwrap();
        assert_eq!(responses.max_tokens, Some(64));
        assert_eq!(responses.prompt_bytes, Some(4));
        let tgi = parse_request(
            br#"{"inputs":"Hello","parameters":{"max_new_tokens":20}}"#,
            false,
        )
        .unwrap();
        assert_eq!((tgi.max_tokens, tgi.prompt_bytes), (Some(20), Some(7)));
        let ollama = parse_request(
            br#"{"model":"llama3.2","messages":[{"role":"user","content":"x"}],"options":{"num_predict":16}}"#,
            false,
        )
        .unwrap();
        assert_eq!(
            (ollama.max_tokens, ollama.messages, ollama.stream),
            (Some(16), Some(1), None)
        );
        let gemini = parse_request(
            br#"{"contents":[{"parts":[{"text":"Hi"}],"role":"user"}],"generationConfig":{"maxOutputTokens":8}}"#,
            false,
        )
        .unwrap();
        assert_eq!(
            (gemini.max_tokens, gemini.prompt_bytes, gemini.model),
            (Some(8), Some(41), None)
        );
    }

    #[test]
    fn reads_chat_request() {
        let r = parse_request(
            br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],
                "model":"llama","stream":true,"max_tokens":12,"max_completion_tokens":20,
                "stream_options":{"include_usage":true},"n":1,"temperature":0}"#,
            true,
        );
        let r = r.unwrap_or_default();
        assert_eq!(r.model.as_deref(), Some("llama"));
        assert_eq!(r.stream, Some(true));
        assert_eq!(r.max_tokens, Some(20));
        assert_eq!(r.include_usage, Some(true));
        assert_eq!(r.n, Some(1));
        assert_eq!(r.messages, Some(2));
        assert_eq!(r.prompt_bytes, Some(64));
        assert!(r.fingerprint.is_some());
    }

    #[test]
    fn reads_completions_request_and_nulls() {
        let r = parse_request(
            br#"{"model":"m","prompt":"Once upon","stream_options":null}"#,
            false,
        );
        let r = r.unwrap_or_default();
        assert_eq!(r.prompt_bytes, Some(11));
        assert_eq!(r.include_usage, None);
        assert_eq!(r.messages, None);
    }

    #[test]
    fn rejects_non_json_and_truncates_long_models() {
        assert_eq!(parse_request(b"model=x", false), Err(NotJson));
        let long = format!(r#"{{"model":"{}"}}"#, "é".repeat(200));
        let r = parse_request(long.as_bytes(), false).unwrap_or_default();
        assert!(r
            .model
            .is_some_and(|m| m.len() <= MAX_MODEL_BYTES && m.len() >= 254));
    }
}
