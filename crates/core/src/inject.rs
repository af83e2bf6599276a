//! Usage injection (opt-in per tap, `inject_usage: true`): a streaming
//! OpenAI chat/completions request that did not ask for usage gets
//! `stream_options.include_usage: true`, so the upstream reports exact
//! token counts; the usage-only chunk that this causes is then cut from the
//! stream on its way to the client, who receives the bytes it would have
//! received without tokentap.
//!
//! Pure: `rewrite` edits the request body in place textually (every other
//! byte stays as the client sent it; the caller corrects Content-Length),
//! `UsageStripper` cuts the one usage-only event from the response. The
//! stripper forwards whole events: a piece that ends inside an event is
//! held until the event completes (an event is of no use to a client
//! before its blank line), so an injected stream may reach the client in
//! fewer, never later, writes. Exact for engines that omit `usage` from
//! the other chunks (vLLM, SGLang, llama.cpp, TGI, the simulator); the
//! OpenAI API itself adds `"usage":null` to every chunk, which is left as
//! it comes.

use crate::decode::dialect::Dialect;
use crate::decode::event::{raw_range, EventKind};
use crate::decode::openai::classify_event;
use crate::decode::Operation;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;

crate::names::label_enum! {
    /// What usage injection did with a request (the `result` label of
    /// `tokentap_usage_injection_total`).
    pub enum InjectResult {
        /// `stream_options.include_usage` added, Content-Length corrected.
        Injected = "injected",
        /// The usage-only chunk the injection caused was cut from the
        /// client's stream.
        Stripped = "stripped",
        /// Left as is: not `"stream": true`.
        NotStreaming = "not_streaming",
        /// Left as is: it already asked for usage.
        AlreadyRequested = "already_requested",
        /// Left as is: the body is not a JSON object (or `stream_options`
        /// is not one).
        NotJson = "not_json",
        /// Left as is: no Content-Length, chunked, or over `MAX_BODY`.
        TooLarge = "too_large",
        /// A response event outgrew the stripper's hold: the client saw the
        /// usage chunk.
        StripFailed = "strip_failed",
    }
}

/// Why a request was left as it was (a subset of `InjectResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not `"stream": true`.
    NotStream,
    /// It already asked for usage.
    AlreadyAsked,
    /// The body is not a JSON object (or `stream_options` is not one).
    NotJson,
}

impl Skip {
    pub fn result(self) -> InjectResult {
        match self {
            Skip::NotStream => InjectResult::NotStreaming,
            Skip::AlreadyAsked => InjectResult::AlreadyRequested,
            Skip::NotJson => InjectResult::NotJson,
        }
    }
}

/// What to do with a request, from its head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eligibility {
    /// Not a request injection applies to (not a POST to an OpenAI
    /// chat/completions or completions path): left alone, not counted.
    NotApplicable,
    /// Eligible, but its body cannot be held (no Content-Length, chunked,
    /// or over `MAX_BODY`): left as is, counted `too_large`.
    TooLarge,
    /// Read the body whole, then `rewrite` it.
    Read,
}

/// Decides from the request head whether to read the body for injection.
pub fn eligibility(
    post: bool,
    dialect: Dialect,
    operation: Operation,
    content_length: Option<u64>,
    chunked: bool,
) -> Eligibility {
    let applies = post
        && dialect == Dialect::OpenAi
        && matches!(operation, Operation::Chat | Operation::TextCompletion);
    if !applies {
        Eligibility::NotApplicable
    } else if chunked || !content_length.is_some_and(|n| n > 0 && n <= MAX_BODY as u64) {
        Eligibility::TooLarge
    } else {
        Eligibility::Read
    }
}

type Members<'a> = HashMap<Cow<'a, str>, &'a RawValue>;

/// Where `raw` starts in `body` (it was borrowed from it).
fn offset(body: &[u8], raw: &RawValue) -> Option<usize> {
    raw_range(body, raw.get()).map(|r| r.start)
}

/// `body` with `insert` placed at `at`, or `[at, at + len)` replaced by it.
fn splice(body: &[u8], at: usize, len: usize, insert: &str) -> Option<Vec<u8>> {
    let (head, rest) = body.split_at_checked(at)?;
    let tail = rest.get(len..)?;
    let mut out = Vec::with_capacity(body.len() + insert.len());
    out.extend_from_slice(head);
    out.extend_from_slice(insert.as_bytes());
    out.extend_from_slice(tail);
    Some(out)
}

/// Just after the `{` that opens the object `raw` (at `at` in `body`).
fn after_brace(body: &[u8], at: usize) -> Option<usize> {
    let rel = body.get(at..)?.iter().position(|b| *b == b'{')?;
    Some(at + rel + 1)
}

/// The request body with `include_usage: true`, or why it stays as is.
pub fn rewrite(body: &[u8]) -> Result<Vec<u8>, Skip> {
    let top: Members<'_> = crate::decode::from_json(body).map_err(|_| Skip::NotJson)?;
    if top.get("stream").map(|r| r.get()) != Some("true") {
        return Err(Skip::NotStream);
    }
    let edited = match top.get("stream_options") {
        None => {
            let at = after_brace(body, 0).ok_or(Skip::NotJson)?;
            splice(body, at, 0, "\"stream_options\":{\"include_usage\":true},")
        }
        Some(raw) if raw.get() == "null" => {
            let at = offset(body, raw).ok_or(Skip::NotJson)?;
            splice(body, at, raw.get().len(), "{\"include_usage\":true}")
        }
        Some(raw) => {
            let opts: Members<'_> = serde_json::from_str(raw.get()).map_err(|_| Skip::NotJson)?;
            let at = offset(body, raw).ok_or(Skip::NotJson)?;
            match opts.get("include_usage") {
                Some(v) if v.get() == "true" => return Err(Skip::AlreadyAsked),
                Some(v) => {
                    // false or null: the value becomes true. `v` points into
                    // `raw`, which points into `body`.
                    let at = offset(body, v).ok_or(Skip::NotJson)?;
                    splice(body, at, v.get().len(), "true")
                }
                None => {
                    let inner = after_brace(body, at).ok_or(Skip::NotJson)?;
                    let member = if opts.is_empty() {
                        "\"include_usage\":true"
                    } else {
                        "\"include_usage\":true,"
                    };
                    splice(body, inner, 0, member)
                }
            }
        }
    };
    edited.ok_or(Skip::NotJson)
}

/// Largest request body rewritten (pingora's retry buffer, which holds
/// the body read early, keeps at most this much).
pub const MAX_BODY: usize = 64 * 1024;

/// Most bytes of one incomplete event the stripper holds; beyond, it gives
/// up (forwards everything from then on, counted by the caller).
pub const MAX_HELD: usize = 1 << 20;

/// Cuts the first usage-only event out of an SSE stream.
#[derive(Debug, Default)]
pub struct UsageStripper {
    /// Bytes of the event in progress (not yet forwarded).
    held: Vec<u8>,
    /// The usage-only event has been cut.
    pub stripped: bool,
    /// Gave up (an event over `MAX_HELD`): forwarding as is.
    pub gave_up: bool,
}

/// What to forward for one piece.
#[derive(Debug, PartialEq, Eq)]
pub enum Out {
    /// The piece as it came.
    Same,
    /// These bytes instead (possibly none).
    Bytes(Vec<u8>),
}

impl UsageStripper {
    /// What the stripper did, as a `result` label value (`None`: the
    /// stream had no usage-only event to cut).
    pub fn result(&self) -> Option<InjectResult> {
        if self.gave_up {
            Some(InjectResult::StripFailed)
        } else if self.stripped {
            Some(InjectResult::Stripped)
        } else {
            None
        }
    }

    /// Filters one piece of the response body; `end` on the last one.
    pub fn filter(&mut self, piece: &[u8], end: bool) -> Out {
        if self.gave_up || (self.stripped && self.held.is_empty()) {
            return Out::Same;
        }
        let whole: Cow<'_, [u8]> = if self.held.is_empty() {
            Cow::Borrowed(piece)
        } else {
            let mut v = std::mem::take(&mut self.held);
            v.extend_from_slice(piece);
            Cow::Owned(v)
        };
        let mut out = Vec::new();
        let mut start = 0;
        let mut cut = false;
        let mut pos = 0;
        // Walk line by line; a blank line ends an event.
        while let Some((line_end, next)) = line_at(&whole, pos, end) {
            if line_end == pos {
                let event = whole.get(start..next).unwrap_or_default();
                if !self.stripped && usage_only(event) {
                    self.stripped = true;
                    cut = true;
                } else {
                    out.extend_from_slice(event);
                }
                start = next;
            }
            pos = next;
        }
        let tail = whole.get(start..).unwrap_or_default();
        if end {
            out.extend_from_slice(tail);
        } else if tail.len() > MAX_HELD {
            self.gave_up = true;
            out.extend_from_slice(tail);
        } else {
            self.held.extend_from_slice(tail);
        }
        let unchanged = !cut && self.held.is_empty() && matches!(whole, Cow::Borrowed(_));
        if unchanged {
            Out::Same
        } else {
            Out::Bytes(out)
        }
    }
}

/// The line starting at `pos`: (where its text ends, where the next line
/// starts). `None` when no complete line starts there (a trailing `\r` may
/// still be a `\r\n`, unless the body has ended).
fn line_at(buf: &[u8], pos: usize, end: bool) -> Option<(usize, usize)> {
    let rest = buf.get(pos..)?;
    let i = memchr::memchr2(b'\n', b'\r', rest)?;
    let at = pos + i;
    match (buf.get(at), buf.get(at + 1)) {
        (Some(b'\r'), Some(b'\n')) => Some((at, at + 2)),
        (Some(b'\r'), None) if !end => None,
        _ => Some((at, at + 1)),
    }
}

/// An event whose data is an OpenAI chunk with usage and no choices.
fn usage_only(event: &[u8]) -> bool {
    let mut data = Vec::new();
    let mut pos = 0;
    while let Some((line_end, next)) = line_at(event, pos, true) {
        let line = event.get(pos..line_end).unwrap_or_default();
        if let Some(d) = line.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(d.strip_prefix(b" ").unwrap_or(d));
        }
        pos = next;
    }
    !data.is_empty() && classify_event(b"", &data).is_ok_and(|s| s.kind == EventKind::UsageOnly)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn eligibility_from_the_head() {
        use Eligibility::*;
        let e = |post, d, op, len, chunked| eligibility(post, d, op, len, chunked);
        assert_eq!(
            e(true, Dialect::OpenAi, Operation::Chat, Some(300), false),
            Read
        );
        assert_eq!(
            e(
                true,
                Dialect::OpenAi,
                Operation::TextCompletion,
                Some(300),
                false
            ),
            Read
        );
        assert_eq!(
            e(false, Dialect::OpenAi, Operation::Chat, Some(300), false),
            NotApplicable
        );
        assert_eq!(
            e(true, Dialect::Anthropic, Operation::Chat, Some(300), false),
            NotApplicable
        );
        assert_eq!(
            e(
                true,
                Dialect::OpenAi,
                Operation::Embeddings,
                Some(300),
                false
            ),
            NotApplicable
        );
        assert_eq!(
            e(true, Dialect::OpenAi, Operation::Chat, None, false),
            TooLarge
        );
        assert_eq!(
            e(true, Dialect::OpenAi, Operation::Chat, Some(300), true),
            TooLarge
        );
        assert_eq!(
            e(
                true,
                Dialect::OpenAi,
                Operation::Chat,
                Some(MAX_BODY as u64 + 1),
                false
            ),
            TooLarge
        );
        assert_eq!(
            e(true, Dialect::OpenAi, Operation::Chat, Some(0), false),
            TooLarge
        );
    }

    #[test]
    fn rewrites_every_shape() {
        let r = |b: &str| rewrite(b.as_bytes()).map(text);
        assert_eq!(
            r(r#"{"model":"m","stream":true,"messages":[]}"#).unwrap(),
            r#"{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}"#
        );
        assert_eq!(
            r(r#"{"stream": true, "stream_options": null}"#).unwrap(),
            r#"{"stream": true, "stream_options": {"include_usage":true}}"#
        );
        assert_eq!(
            r(r#"{"stream":true,"stream_options":{}}"#).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        );
        assert_eq!(
            r(r#"{"stream":true,"stream_options":{"continuous_usage_stats":true}}"#).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#
        );
        assert_eq!(
            r(r#"{"stream":true,"stream_options":{"include_usage": false}}"#).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage": true}}"#
        );
        assert_eq!(
            r(r#"{"stream":true,"stream_options":{"include_usage":true}}"#),
            Err(Skip::AlreadyAsked)
        );
        assert_eq!(r(r#"{"stream":false}"#), Err(Skip::NotStream));
        assert_eq!(r(r#"{"model":"m"}"#), Err(Skip::NotStream));
        assert_eq!(r("not json"), Err(Skip::NotJson));
        assert_eq!(
            r(r#"{"stream":true,"stream_options":5}"#),
            Err(Skip::NotJson)
        );
        // Escaped keys elsewhere do not confuse it.
        let out = r(r#"  {"a\"b":"{","stream":true}"#).unwrap();
        assert_eq!(
            out,
            r#"  {"stream_options":{"include_usage":true},"a\"b":"{","stream":true}"#
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
    }

    const WITH: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
    const WITHOUT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    fn run(pieces: &[&[u8]]) -> (Vec<u8>, UsageStripper) {
        let mut s = UsageStripper::default();
        let mut out = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            match s.filter(p, i + 1 == pieces.len()) {
                Out::Same => out.extend_from_slice(p),
                Out::Bytes(b) => out.extend_from_slice(&b),
            }
        }
        (out, s)
    }

    #[test]
    fn cuts_the_usage_event_only() {
        let (out, s) = run(&[WITH.as_bytes()]);
        assert_eq!(text(out), WITHOUT);
        assert!(s.stripped);
        let crlf = WITH.replace('\n', "\r\n");
        let (out, _) = run(&[crlf.as_bytes()]);
        assert_eq!(text(out), WITHOUT.replace('\n', "\r\n"));
        // A stream without a usage event passes untouched, piece by piece.
        let mut s = UsageStripper::default();
        assert_eq!(s.filter(WITHOUT.as_bytes(), false), Out::Same);
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_bytes(cuts in proptest::collection::vec(0usize..400, 0..8), cr in 0..3u8) {
            let with = match cr { 0 => WITH.to_string(), 1 => WITH.replace('\n', "\r\n"), _ => WITH.replace('\n', "\r") };
            let without = match cr { 0 => WITHOUT.to_string(), 1 => WITHOUT.replace('\n', "\r\n"), _ => WITHOUT.replace('\n', "\r") };
            let body = with.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain(std::iter::once(body.len())) {
                pieces.push(&body[start..c]);
                start = c;
            }
            let (out, s) = run(&pieces);
            prop_assert_eq!(text(out), without);
            prop_assert!(s.stripped);
        }
    }
}
