//! Request fingerprints: a 64-bit hash of the model and the normalised
//! messages (chat) or prompt (completions), used to join the records of one
//! request seen by several taps when a layer dropped `traceparent`.
//!
//! Normalised means parsed, not compared as bytes: a gateway that
//! re-serialises JSON (other whitespace, `\u00e9` for `é`, other key order)
//! keeps the fingerprint; one that rewrites the model or the messages does
//! not (then there is no join, never a wrong one). Only roles and text count;
//! the text is hashed, never stored. The hash is `crate::hash`'s (XXH3-64
//! over a specified framing): the same on every build and platform, so the
//! joiner can compare the fingerprints of taps on other machines.
//!
//! Also the prompt-prefix fingerprints of the prefix-cache analysis: hashes
//! of the first 1k / 4k / 16k characters of the prompt's text (roles and
//! text of each message, in order), so reuse of a shared prefix (a system
//! prompt, a conversation's history, a code context) is visible whatever the
//! engine reports. They use the same stable hash, so a record log can be
//! read by another build.

use crate::hash::StableHasher;
use serde_json::Value;

/// Fingerprint of a request from its model and its `messages` or `prompt`
/// value (raw JSON). `None` when that value cannot be read.
pub fn fingerprint(model: Option<&str>, messages_or_prompt: &str) -> Option<u64> {
    let value: Value = serde_json::from_str(messages_or_prompt).ok()?;
    Some(fingerprint_value(model, &value))
}

/// `fingerprint` of an already parsed value.
pub fn fingerprint_value(model: Option<&str>, value: &Value) -> u64 {
    let mut h = StableHasher::new();
    h.field(model.unwrap_or_default().as_bytes());
    match value {
        Value::Array(items) if items.iter().all(Value::is_object) => {
            h.tag(0); // chat messages
            for m in items {
                h.field(
                    m.get("role")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .as_bytes(),
                );
                hash_content(m.get("content"), &mut h);
            }
        }
        other => {
            // A prompt: string, strings, or token ids. serde_json's map is
            // sorted, so this form is canonical.
            h.tag(1).field(other.to_string().as_bytes());
        }
    }
    h.finish()
}

/// Prompt lengths (characters) whose prefixes are fingerprinted.
pub const PREFIX_CHARS: [usize; 3] = [1_000, 4_000, 16_000];

/// Fingerprints of the first `PREFIX_CHARS` characters of a prompt's text;
/// `None` where the prompt is shorter.
pub type PrefixHashes = [Option<u64>; 3];

/// Prefix fingerprints of a parsed `messages` or `prompt` value. The text is
/// each message's role, a newline, its text parts, a newline; a prompt is
/// its string(s). Token-id prompts have no text and no prefixes.
pub fn prefix_hashes(value: &Value) -> PrefixHashes {
    let mut p = PrefixHasher::default();
    match value {
        Value::Array(items) if items.iter().all(Value::is_object) => {
            for m in items {
                p.feed(m.get("role").and_then(Value::as_str).unwrap_or_default());
                p.feed("\n");
                match m.get("content") {
                    Some(Value::String(s)) => p.feed(s),
                    Some(Value::Array(parts)) => {
                        for part in parts {
                            p.feed(part.get("text").and_then(Value::as_str).unwrap_or_default());
                        }
                    }
                    _ => {}
                }
                p.feed("\n");
                if p.done() {
                    break;
                }
            }
        }
        Value::String(s) => p.feed(s),
        Value::Array(items) => {
            for s in items.iter().filter_map(Value::as_str) {
                p.feed(s);
            }
        }
        _ => {}
    }
    p.out
}

/// Hashes text as it is fed, taking a snapshot at each prefix length.
#[derive(Default)]
struct PrefixHasher {
    h: StableHasher,
    chars: usize,
    out: PrefixHashes,
}

impl PrefixHasher {
    fn done(&self) -> bool {
        PREFIX_CHARS.last().is_some_and(|last| self.chars >= *last)
    }

    fn feed(&mut self, mut s: &str) {
        while !s.is_empty() {
            let Some((k, target)) = PREFIX_CHARS
                .iter()
                .enumerate()
                .find(|(_, n)| **n > self.chars)
            else {
                return;
            };
            let need = target - self.chars;
            // Most pieces end before the next length: counted whole (a
            // fast count); walked char by char only where a length falls.
            let chars = s.chars().count();
            let (head, rest, taken) =
                match (chars > need).then(|| s.char_indices().nth(need)).flatten() {
                    Some((i, _)) => {
                        let (head, rest) = s.split_at(i);
                        (head, rest, need)
                    }
                    None => (s, "", chars),
                };
            // `raw`, not `field`: no length prefix, so how the text was
            // cut into pieces does not change the result.
            self.h.raw(head.as_bytes());
            self.chars += taken;
            if self.chars == *target {
                if let Some(slot) = self.out.get_mut(k) {
                    *slot = Some(self.h.finish());
                }
            }
            s = rest;
        }
    }
}

fn hash_content(content: Option<&Value>, h: &mut StableHasher) {
    match content {
        Some(Value::String(s)) => {
            h.field(s.as_bytes());
        }
        Some(Value::Array(parts)) => {
            for p in parts {
                match p.get("text").and_then(Value::as_str) {
                    Some(text) => h.field(text.as_bytes()),
                    None => h.field(
                        p.get("type")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .as_bytes(),
                    ),
                };
            }
        }
        Some(other) => {
            h.field(other.to_string().as_bytes());
        }
        None => {}
    }
    // A separator, so that ["ab",""] and ["a","b"] differ.
    h.tag(0xff);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(system: &str, user: &str) -> Value {
        serde_json::json!([{"role":"system","content":system},{"role":"user","content":user}])
    }

    #[test]
    fn prefixes_of_a_shared_system_prompt_match() {
        let system = "s".repeat(5_000);
        let a = prefix_hashes(&chat(&system, "question one"));
        let b = prefix_hashes(&chat(&system, "another question"));
        assert!(a[0].is_some() && a[1].is_some());
        assert_eq!(a[0], b[0]);
        assert_eq!(a[1], b[1]);
        assert_eq!(a[2], None, "shorter than 16k characters");
        let c = prefix_hashes(&chat(&"t".repeat(5_000), "question one"));
        assert_ne!(a[0], c[0]);
    }

    #[test]
    fn prefix_hash_does_not_depend_on_how_text_is_split() {
        let one = prefix_hashes(&Value::String("é".repeat(1_000)));
        let parts = prefix_hashes(&serde_json::json!(["é".repeat(400), "é".repeat(600)]));
        assert!(one[0].is_some());
        assert_eq!(one, parts);
        assert_eq!(prefix_hashes(&Value::String("é".repeat(999))), [None; 3]);
    }

    #[test]
    fn reserialised_json_keeps_the_fingerprint() {
        let a = r#"[{"role":"user","content":"héllo  there"}]"#;
        let b = "[ {\"content\" : \"h\\u00e9llo  there\",\n \"role\":\"user\"} ]";
        assert_eq!(fingerprint(Some("m"), a), fingerprint(Some("m"), b));
        let parts = r#"[{"role":"user","content":[{"type":"text","text":"héllo  there"}]}]"#;
        assert_eq!(fingerprint(Some("m"), a), fingerprint(Some("m"), parts));
    }

    /// The joiner compares fingerprints of taps built elsewhere: the
    /// value of a request is fixed by the spec in `crate::hash`, not by
    /// this build.
    #[test]
    fn a_fingerprint_is_the_same_on_every_build() {
        let a = r#"[{"role":"user","content":"hello"}]"#;
        let mut h = StableHasher::new();
        h.field(b"m")
            .tag(0)
            .field(b"user")
            .field(b"hello")
            .tag(0xff);
        assert_eq!(fingerprint(Some("m"), a), Some(h.finish()));
        assert_eq!(fingerprint(Some("m"), a), Some(0x7b1a_ba2a_a6a5_66eb));
    }

    #[test]
    fn different_requests_differ() {
        let a = r#"[{"role":"user","content":"a"}]"#;
        assert_ne!(fingerprint(Some("m"), a), fingerprint(Some("n"), a));
        assert_ne!(
            fingerprint(Some("m"), a),
            fingerprint(Some("m"), r#"[{"role":"system","content":"a"}]"#)
        );
        assert_ne!(
            fingerprint(
                None,
                r#"[{"role":"user","content":"ab"},{"role":"user","content":""}]"#
            ),
            fingerprint(
                None,
                r#"[{"role":"user","content":"a"},{"role":"user","content":"b"}]"#
            )
        );
        assert_ne!(
            fingerprint(None, r#""once""#),
            fingerprint(None, r#""twice""#)
        );
        assert_eq!(fingerprint(None, "not json"), None);
    }
}
