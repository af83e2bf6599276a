//! The meter's links (`with_links`): real captured requests and answers
//! replayed through it, their tool calls hashed as the collector reading
//! every event hashes them (the meter hands over only the events that
//! carry or open a tool call), the request's conversation and a compound
//! system's own request hashed, and nothing when links are off.

use super::*;
use crate::decode::sse::SseLimits;
use crate::links::{self, AnswerDialect, Hashes, ToolCallCollector};
use serde_json::Value;
use std::path::Path;

const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 1 << 20,
    json_body_bytes: 1 << 20,
    sse: SseLimits {
        max_line_bytes: 1 << 16,
        max_event_bytes: 1 << 16,
    },
};

struct Capture {
    path: String,
    request: Vec<u8>,
    content_type: String,
    encoding: Option<String>,
    body: Vec<u8>,
}

fn capture(name: &str) -> Capture {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/captured")
        .join(name);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    let header = |k: &str| {
        meta["response_headers"][k]
            .get(0)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Capture {
        path: meta["request_path"].as_str().unwrap().to_owned(),
        request: meta["request_body"].to_string().into_bytes(),
        content_type: header("content-type").unwrap(),
        encoding: header("content-encoding"),
        body: std::fs::read(dir.join("body.bin")).unwrap(),
    }
}

/// The capture through a meter (`links`: `with_links`), in pieces of
/// `piece` bytes.
fn replay(c: &Capture, links: Option<bool>, piece: usize) -> RequestRecord {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS).with_links(links);
    m.request_head(&c.path, None, Some(c.request.len() as u64));
    assert_eq!(m.request_body(&c.request, true), None);
    m.response_head(
        t0,
        200,
        Some(c.content_type.as_bytes()),
        c.encoding.as_deref().map(str::as_bytes),
        None,
    );
    for p in c.body.chunks(piece) {
        m.response_body(t0, p, &mut ());
    }
    m.response_end(t0);
    m.finish(t0, TransportEnd::Complete)
}

/// The tool calls of every event of an SSE answer, or of a JSON one.
fn every_event(d: AnswerDialect, c: &Capture) -> Hashes {
    let mut t = ToolCallCollector::default();
    if c.content_type.starts_with("text/event-stream") {
        let mut dec = crate::decode::sse::SseDecoder::new(LIMITS.sse);
        dec.feed(&c.body, &mut |item| {
            if let crate::decode::sse::SseItem::Event { event, data } = item {
                t.feed_event(d, event, data);
            }
        })
        .unwrap();
    }
    t.finish()
}

#[test]
fn captured_answers_tool_calls_are_hashed_as_every_event_gives_them() {
    for (name, d) in [
        ("openai-chat-gpt35-parallel-tool-calls", AnswerDialect::Chat),
        (
            "openai-chat-gpt4omini-toolcall-include-usage",
            AnswerDialect::Chat,
        ),
        ("anthropic-sonnet35-tool-use", AnswerDialect::Anthropic),
        (
            "openai-responses-gpt5-reasoning-function-call",
            AnswerDialect::Responses,
        ),
    ] {
        let c = capture(name);
        let want = every_event(d, &c);
        assert!(!want.is_empty(), "{name}: the capture asks for tools");
        for piece in [7, 64, usize::MAX] {
            let r = replay(&c, Some(false), piece.min(c.body.len()));
            assert_eq!(r.outcome, Outcome::Ok, "{name}");
            assert_eq!(
                r.request.links.calls_out, want,
                "{name} in {piece}-byte pieces"
            );
            assert!(
                !r.request.links.users.is_empty(),
                "{name}: the user's message"
            );
        }
        // Off: nothing hashed.
        let r = replay(&c, None, 64);
        assert!(r.request.links.is_empty(), "{name}");
    }
}

#[test]
fn a_captured_json_answer_gzipped_gives_its_tool_calls() {
    let mut c = capture("anthropic-json-sonnet35-tool-use-gzip");
    // `body.bin` is the answer inflated; the meter gets the wire's bytes.
    let v: Value = serde_json::from_slice(&c.body).unwrap();
    c.body =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../../tests/fixtures/captured/anthropic-json-sonnet35-tool-use-gzip/body.wire.bin",
        ))
        .unwrap();
    let r = replay(&c, Some(false), 100);
    assert_eq!(r.outcome, Outcome::Ok);
    let want: Vec<u64> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| links::call(b["name"].as_str().unwrap(), b.get("input")))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(r.request.links.calls_out.as_slice(), want.as_slice());
    let user = links::user(
        "What is the weather like right now in New York? Also what time is it there now?",
    );
    assert_eq!(r.request.links.users.as_slice(), &[user]);
}

#[test]
fn a_compound_systems_request_offers_its_users_text_on_any_path() {
    let t0 = Instant::now();
    for (path, body) in [
        (
            "/v1/chat/completions",
            br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"Paris?"}]}"#
                .as_slice(),
        ),
        ("/ask", br#"{"question":"Paris?","n":3}"#.as_slice()),
    ] {
        let mut m = Meter::new(t0, SystemTime::now(), LIMITS).with_links(Some(true));
        m.request_head(path, None, Some(body.len() as u64));
        assert_eq!(m.request_body(body, true), None);
        m.response_head(t0, 200, Some(b"text/plain"), None, None);
        m.response_body(t0, b"Sunny", &mut ());
        m.response_end(t0);
        let r = m.finish(t0, TransportEnd::Complete);
        assert_eq!(
            r.request.links.users.as_slice(),
            &[links::user("Paris?")],
            "{path}"
        );
        assert!(r.request.links.calls_out.is_empty());
    }
}
