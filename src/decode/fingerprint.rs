//! Request fingerprints: a 64-bit hash of the model and the normalised
//! messages (chat) or prompt (completions), used to join the records of one
//! request seen by several taps when a layer dropped `traceparent`.
//!
//! Normalised means parsed, not compared as bytes: a gateway that
//! re-serialises JSON (other whitespace, `\u00e9` for `é`, other key order)
//! keeps the fingerprint; one that rewrites the model or the messages does
//! not (then there is no join, never a wrong one). Only roles and text count;
//! the text is hashed, never stored. The hash is process-local (std's SipHash
//! with fixed keys): fingerprints are compared inside one process only.

use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Fingerprint of a request from its model and its `messages` or `prompt`
/// value (raw JSON). `None` when that value cannot be read.
pub fn fingerprint(model: Option<&str>, messages_or_prompt: &str) -> Option<u64> {
    let value: Value = serde_json::from_str(messages_or_prompt).ok()?;
    let mut h = DefaultHasher::new();
    model.unwrap_or_default().hash(&mut h);
    match &value {
        Value::Array(items) if items.iter().all(Value::is_object) => {
            0u8.hash(&mut h); // chat messages
            for m in items {
                m.get("role")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .hash(&mut h);
                hash_content(m.get("content"), &mut h);
            }
        }
        other => {
            1u8.hash(&mut h); // a prompt: string, strings, or token ids
                              // serde_json's map is sorted, so this form is canonical.
            other.to_string().hash(&mut h);
        }
    }
    Some(h.finish())
}

fn hash_content(content: Option<&Value>, h: &mut DefaultHasher) {
    match content {
        Some(Value::String(s)) => s.hash(h),
        Some(Value::Array(parts)) => {
            for p in parts {
                match p.get("text").and_then(Value::as_str) {
                    Some(text) => text.hash(h),
                    None => p
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .hash(h),
                }
            }
        }
        Some(other) => other.to_string().hash(h),
        None => {}
    }
    // A separator, so that ["ab",""] and ["a","b"] differ.
    0xffu8.hash(h);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserialised_json_keeps_the_fingerprint() {
        let a = r#"[{"role":"user","content":"héllo  there"}]"#;
        let b = "[ {\"content\" : \"h\\u00e9llo  there\",\n \"role\":\"user\"} ]";
        assert_eq!(fingerprint(Some("m"), a), fingerprint(Some("m"), b));
        let parts = r#"[{"role":"user","content":[{"type":"text","text":"héllo  there"}]}]"#;
        assert_eq!(fingerprint(Some("m"), a), fingerprint(Some("m"), parts));
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
