//! Token estimates with a real tokenizer, for streams that report no usage
//! (opt-in per tap, `estimate_tokens: o200k_base | cl100k_base`): the
//! tiktoken encodings of OpenAI's models, through the `tiktoken-rs` crate.
//! Exact for models that use the encoding; for others (Llama, Qwen, ...)
//! an estimate whose error is the two tokenizers' difference.
//!
//! Output: each token-bearing event's text is counted as it passes (so a
//! multi-token event — speculative decoding, chunked detokenisation — is
//! known to carry several), never kept. Input: the prompt's texts (chat
//! messages, completion prompt, Responses input, Anthropic system, TGI
//! inputs), with OpenAI's per-message overhead for chat.

use crate::decode::event::Raw;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use tiktoken_rs::CoreBPE;

/// A tiktoken encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// GPT-4o, GPT-4.1, GPT-5, o-series.
    O200kBase,
    /// GPT-4, GPT-3.5.
    Cl100kBase,
}

/// Counts tokens with one encoding (a process-wide table, built once).
#[derive(Clone, Copy)]
pub struct Estimator {
    bpe: &'static CoreBPE,
    pub encoding: Tokenizer,
}

impl fmt::Debug for Estimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Estimator({:?})", self.encoding)
    }
}

impl PartialEq for Estimator {
    fn eq(&self, other: &Self) -> bool {
        self.encoding == other.encoding
    }
}

impl Eq for Estimator {}

/// Tokens OpenAI's chat format adds per message, and to prime the reply.
const PER_MESSAGE: u64 = 3;
const REPLY_PRIMING: u64 = 3;

impl Estimator {
    /// Loads the encoding's table (once per process; ~0.1–0.3 s, done when
    /// the config is loaded so that no request waits for it).
    pub fn new(encoding: Tokenizer) -> Self {
        let bpe = match encoding {
            Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        };
        Estimator { bpe, encoding }
    }

    pub fn count(&self, text: &str) -> u64 {
        u64::try_from(self.bpe.count_ordinary(text)).unwrap_or(u64::MAX)
    }

    /// Tokens of a JSON string value (still escaped); 0 when it is not one.
    pub fn count_raw(&self, raw: Raw<'_>) -> u64 {
        serde_json::from_str::<Cow<'_, str>>(raw.get()).map_or(0, |t| self.count(&t))
    }

    /// Tokens of a prompt, from the request body; `None` when it has none
    /// this module reads.
    pub fn prompt(&self, body: &[u8]) -> Option<u64> {
        #[derive(Deserialize)]
        struct Req<'a> {
            #[serde(borrow, default)]
            messages: Option<&'a RawValue>,
            #[serde(borrow, default)]
            system: Option<&'a RawValue>,
            #[serde(borrow, default)]
            prompt: Option<&'a RawValue>,
            #[serde(borrow, default)]
            input: Option<&'a RawValue>,
            #[serde(borrow, default)]
            inputs: Option<&'a RawValue>,
        }
        let r: Req<'_> = super::from_json(body).ok()?;
        let mut total = None::<u64>;
        let mut add = |n: u64| *total.get_or_insert(0) += n;
        if let Some(m) = r.messages {
            let msgs: Vec<Value> = serde_json::from_str(m.get()).ok()?;
            for msg in &msgs {
                add(PER_MESSAGE + self.texts(msg));
            }
            add(REPLY_PRIMING);
        }
        for raw in [r.system, r.prompt, r.input, r.inputs]
            .into_iter()
            .flatten()
        {
            if let Ok(v) = serde_json::from_str::<Value>(raw.get()) {
                add(self.texts(&v));
            }
        }
        total
    }

    /// Tokens of every text in a JSON value: strings themselves, `content`
    /// and `text` members (recursively, so content parts and Responses
    /// items count), a message's `role`.
    fn texts(&self, v: &Value) -> u64 {
        match v {
            Value::String(s) => self.count(s),
            Value::Array(a) => a.iter().map(|x| self.texts(x)).sum(),
            Value::Object(o) => ["role", "content", "text", "input"]
                .iter()
                .filter_map(|k| o.get(*k))
                .map(|x| self.texts(x))
                .sum(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings() {
        let e = Estimator::new(Tokenizer::O200kBase);
        // Reference counts from OpenAI's tokenizer for o200k_base.
        assert_eq!(e.count("hello world"), 2);
        assert_eq!(e.count(""), 0);
        let raw = serde_json::value::to_raw_value(" quick brown fox").unwrap();
        assert_eq!(e.count_raw(Raw::from(&*raw)), 3);
        let c = Estimator::new(Tokenizer::Cl100kBase);
        assert_eq!(c.count("hello world"), 2);
    }

    #[test]
    fn counts_prompts_of_every_shape() {
        let e = Estimator::new(Tokenizer::O200kBase);
        let chat = e
            .prompt(br#"{"messages":[{"role":"user","content":"hello world"}]}"#)
            .unwrap();
        // 3 per message + role (1) + content (2) + 3 priming.
        assert_eq!(chat, 3 + 1 + 2 + 3);
        let parts = e
            .prompt(br#"{"messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}]}"#)
            .unwrap();
        assert_eq!(parts, chat);
        assert_eq!(e.prompt(br#"{"prompt":"hello world"}"#), Some(2));
        assert_eq!(e.prompt(br#"{"inputs":"hello world"}"#), Some(2));
        assert_eq!(e.prompt(br#"{"input":"hello world"}"#), Some(2));
        assert_eq!(e.prompt(br#"{"model":"m"}"#), None);
        assert_eq!(e.prompt(b"nope"), None);
    }
}
