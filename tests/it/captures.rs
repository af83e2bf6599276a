//! Real traffic: every response of the capture corpus
//! (`tests/fixtures/captured/`, a copy of `../shared/fixtures/captured/`:
//! bodies public projects recorded against live services — OpenAI, Azure,
//! DeepSeek, OpenRouter, Groq, Mistral, TGI, vLLM, Anthropic, Ollama,
//! Gemini) cut into random pieces and
//!
//! - fed to the meter directly, many cuts each, at the capture's own path
//!   and at a path that names no dialect (the stream names it);
//! - replayed by an upstream through a tap, at both paths and with the
//!   dialect configured: the client's bytes are the recorded bytes.
//!
//! Each time the record must say what the response says: input, output,
//! cached and reasoning tokens equal its usage (input as the GenAI
//! conventions count it: Anthropic's cache reads and writes included),
//! output counted from events where it reports none, TTFT present when it
//! carries visible text and the reasoning/visible distinction kept, events,
//! comments, reasoning and tool-call events as counted in its `meta.json`,
//! and an in-band error an error.

use crate::support::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokentap_core::decode::dialect::DialectSource;
use tokentap_core::decode::sse::SseLimits;
use tokentap_core::record::{
    ErrorType, Meter, MeterLimits, Outcome, RequestRecord, TokenSource, TransportEnd,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One recorded response and what its `meta.json` says about it.
struct Capture {
    name: String,
    path: String,
    request: Vec<u8>,
    content_type: String,
    /// `Content-Encoding` on the wire (`gzip`), when the body was compressed.
    encoding: Option<String>,
    /// The bytes on the wire (compressed when `encoding` says so).
    wire: Vec<u8>,
    meta: serde_json::Value,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured")
}

fn load() -> Vec<Capture> {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("meta.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let dir = corpus_dir().join(&name);
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
            let encoding = meta["content_encoding_on_wire"].as_str().map(str::to_owned);
            let file = if encoding.is_some() {
                "body.wire.bin"
            } else {
                "body.bin"
            };
            Capture {
                path: meta["request_path"].as_str().unwrap().to_owned(),
                request: serde_json::to_vec(&meta["request_body"]).unwrap(),
                content_type: meta["content_type"].as_str().unwrap().to_owned(),
                encoding,
                wire: std::fs::read(dir.join(file)).unwrap(),
                name,
                meta,
            }
        })
        .collect()
}

/// How the capture's own path chooses its dialect: most name one, the
/// Hugging Face router's `/models/<id>` (TGI) does not.
fn own_source(c: &Capture) -> DialectSource {
    if tokentap_core::decode::dialect::route(&c.path).0.is_llm() {
        DialectSource::Path
    } else {
        DialectSource::Content
    }
}

/// A path that names no dialect: the response has to.
fn neutral(c: &Capture) -> String {
    format!("/relay/{}", c.name)
}

fn count(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
}

/// Checks one record against the capture's `meta.json`.
fn check(c: &Capture, r: &RequestRecord, how: &str) {
    let (m, u) = (&c.meta, &c.meta["usage"]);
    let stats = &m["stream_stats"];
    let at = format!("{} ({how})", c.name);
    let streaming = m["streaming"].as_bool().unwrap_or(true);
    // Input as the GenAI conventions count it: for Anthropic `input_tokens`
    // is the uncached part, reads and writes of the cache come on top.
    let input = count(&u["input_tokens"]).map(|i| {
        if c.path.ends_with("/v1/messages") {
            i + count(&u["cached_tokens"]).unwrap_or(0)
                + count(&u["cache_creation_input_tokens"]).unwrap_or(0)
        } else {
            i
        }
    });
    assert_eq!(r.measure_error, None, "{at}: measured");
    assert_eq!(r.input_tokens, input, "{at}: input tokens");
    assert_eq!(r.cached_tokens, count(&u["cached_tokens"]), "{at}: cached");
    assert_eq!(
        r.reasoning_tokens,
        count(&u["reasoning_tokens"]),
        "{at}: reasoning"
    );
    let vendor = u["reported_in"]
        .as_str()
        .is_some_and(|s| s.contains("x_groq"));
    match count(&u["output_tokens"]) {
        Some(n) => {
            assert_eq!(r.output_tokens, Some(n), "{at}: output tokens");
            let source = if vendor {
                TokenSource::UsageExtension
            } else {
                TokenSource::Usage
            };
            assert_eq!(r.output_source, Some(source), "{at}: output source");
        }
        None => {
            // Nothing reported: the token-bearing events are counted.
            assert_eq!(r.output_source, Some(TokenSource::Events), "{at}");
            assert_eq!(
                r.output_tokens,
                Some(u64::from(r.token_events)),
                "{at}: events"
            );
        }
    }
    let content = m["content_events"].as_u64().unwrap_or(0);
    let errors = stats["error_events"].as_u64().unwrap_or(0);
    if streaming {
        // meta.json counts every delta event of a kind. Anthropic also sends
        // deltas that carry no output: an empty one opening each tool's
        // arguments (`"partial_json":""`), an empty thinking delta, and the
        // thinking block's `signature_delta` (a signature, not reasoning).
        // Those are no token events.
        let occurrences = |needle: &[u8]| {
            c.wire
                .windows(needle.len())
                .filter(|w| *w == needle)
                .count() as u64
        };
        let reasoning = stats["reasoning_events"].as_u64().unwrap_or(0)
            - occurrences(b"\"thinking\":\"\"}")
            - occurrences(b"\"type\":\"signature_delta\"");
        let tools =
            stats["tool_call_events"].as_u64().unwrap_or(0) - occurrences(b"\"partial_json\":\"\"");
        assert_eq!(
            u64::from(r.reasoning_events),
            reasoning,
            "{at}: reasoning events"
        );
        assert_eq!(
            u64::from(r.tool_call_events),
            tools,
            "{at}: tool-call events"
        );
        let events = stats["sse_events"]
            .as_u64()
            .or(stats["ndjson_lines"].as_u64());
        assert_eq!(Some(u64::from(r.events)), events, "{at}: events");
        let comments = stats["sse_comment_lines"].as_u64().unwrap_or(0);
        assert_eq!(u64::from(r.comments), comments, "{at}: comments");
        // Every event with output is a token event (content, reasoning
        // and tool-call deltas never share an event in these captures).
        assert_eq!(
            u64::from(r.token_events),
            content + reasoning + tools,
            "{at}: token events"
        );
        assert_eq!(
            r.ttft.is_some(),
            content + reasoning + tools > 0,
            "{at}: ttft"
        );
        assert_eq!(
            r.ttft_visible.is_some(),
            content + tools > 0,
            "{at}: visible ttft"
        );
        if content == 0 && tools == 0 && reasoning > 0 {
            assert!(r.ttft_visible.is_none(), "{at}: reasoning is not visible");
        }
        if let (Some(all), Some(visible)) = (r.ttft, r.ttft_visible) {
            assert!(all <= visible, "{at}");
        }
    } else {
        assert!(r.ttft.is_none(), "{at}: no token timing without a stream");
    }
    if errors > 0 {
        assert_eq!(
            (r.outcome, r.error_type),
            (Outcome::UpstreamError, Some(ErrorType::StreamErrorEvent)),
            "{at}: an in-band error"
        );
    } else {
        assert_eq!(r.outcome, Outcome::Ok, "{at}: outcome");
    }
}

const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 1 << 20,
    json_body_bytes: 1 << 20,
    sse: SseLimits {
        max_line_bytes: 1 << 16,
        max_event_bytes: 1 << 18,
    },
};

/// The capture through a meter, cut at `cuts` (sorted offsets).
fn meter(c: &Capture, t0: Instant, path: &str, cuts: &[usize]) -> RequestRecord {
    let mut m = Meter::new(t0, SystemTime::UNIX_EPOCH, LIMITS);
    m.request_head(path, None, Some(c.request.len() as u64));
    assert_eq!(m.request_body(&c.request, true), None);
    m.response_head(
        t0,
        200,
        Some(c.content_type.as_bytes()),
        c.encoding.as_deref().map(str::as_bytes),
        None,
    );
    let mut start = 0;
    for &p in cuts.iter().chain(std::iter::once(&c.wire.len())) {
        let p = p.min(c.wire.len());
        if p > start {
            let at = t0 + Duration::from_micros(p as u64 + 1);
            m.response_body(at, &c.wire[start..p], &mut ());
            start = p;
        }
    }
    let end = t0 + Duration::from_micros(c.wire.len() as u64 + 2);
    m.response_end(end);
    m.finish(end, TransportEnd::Complete)
}

/// The record without what differs between two readings of one capture:
/// how the dialect was chosen, and the model only its own path names
/// (Gemini's `…/models/{model}:streamGenerateContent`).
fn comparable(c: &Capture, r: &RequestRecord) -> RequestRecord {
    let mut r = RequestRecord {
        dialect_source: None,
        started_at: SystemTime::UNIX_EPOCH,
        ..r.clone()
    };
    if c.meta["request_body"]["model"].is_null() {
        r.request.model = None;
    }
    r
}

#[test]
fn the_vendored_corpus_is_the_shared_one() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/captured");
    let ours = load();
    assert!(ours.len() >= 28, "{} captures", ours.len());
    if !shared.is_dir() {
        return; // a checkout without ../shared: the copy stands alone
    }
    for e in std::fs::read_dir(&shared).unwrap().filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.path().join("meta.json").is_file() {
            continue;
        }
        for file in ["meta.json", "body.bin"] {
            let theirs = std::fs::read(e.path().join(file)).unwrap();
            let mine = std::fs::read(corpus_dir().join(&name).join(file))
                .unwrap_or_else(|_| panic!("{name}/{file} is not in tests/fixtures/captured"));
            assert!(theirs == mine, "{name}/{file} differs from ../shared");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every capture, cut anywhere, read at its own path and at a path that
    /// names nothing: the same, exact record.
    #[test]
    fn every_capture_cut_anywhere_is_measured_exactly(
        cuts in proptest::collection::vec(0usize..20_000, 0..24)
    ) {
        for c in load() {
            let mut cuts: Vec<usize> = cuts.iter().map(|p| p % c.wire.len().max(1)).collect();
            cuts.sort_unstable();
            let t0 = Instant::now();
            let by_path = meter(&c, t0, &c.path, &cuts);
            check(&c, &by_path, "meter, by path");
            prop_assert_eq!(by_path.dialect_source, Some(own_source(&c)));
            if c.meta["request_body"]["model"].is_null() {
                // The model only the path names (Gemini) is the request's.
                let named = tokentap_core::decode::dialect::model_in_path(&c.path);
                prop_assert_eq!(by_path.request.model.as_deref(), named, "{}", c.name);
            }
            let by_content = meter(&c, t0, &neutral(&c), &cuts);
            prop_assert_eq!(by_content.dialect_source, Some(DialectSource::Content), "{}", c.name);
            prop_assert_eq!(comparable(&c, &by_content), comparable(&c, &by_path), "{}", c.name);
        }
    }
}

/// Serves each request the capture its `x-request-id` names (up to `#`),
/// chunked, in pieces of 1 to 97 bytes with an occasional 1-3 ms pause.
async fn replay_upstream(captures: Arc<Vec<Capture>>) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let captures = captures.clone();
            tokio::spawn(async move {
                let mut rng = seed;
                let mut next = move |n: u64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % n
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let (id, body_at, len) = loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let mut headers = [httparse::EMPTY_HEADER; 32];
                    let mut req = httparse::Request::new(&mut headers);
                    if let Ok(httparse::Status::Complete(at)) = req.parse(&buf) {
                        let get = |k: &str| {
                            req.headers
                                .iter()
                                .find(|h| h.name.eq_ignore_ascii_case(k))
                                .map(|h| String::from_utf8_lossy(h.value).into_owned())
                        };
                        let len = get("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        break (get("x-request-id").unwrap_or_default(), at, len);
                    }
                };
                while buf.len() < body_at + len {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let name = id.split('#').next().unwrap_or_default();
                let Some(c) = captures.iter().find(|c| c.name == name) else {
                    let _ = s
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                };
                let mut head = format!(
                    "HTTP/1.1 {} OK\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n",
                    c.meta["status"].as_u64().unwrap_or(200),
                    c.content_type
                );
                if let Some(e) = &c.encoding {
                    head.push_str(&format!("content-encoding: {e}\r\n"));
                }
                head.push_str("\r\n");
                s.write_all(head.as_bytes()).await.unwrap();
                let mut at = 0;
                while at < c.wire.len() {
                    let n = (1 + next(97) as usize).min(c.wire.len() - at);
                    let mut piece = format!("{n:x}\r\n").into_bytes();
                    piece.extend_from_slice(&c.wire[at..at + n]);
                    piece.extend_from_slice(b"\r\n");
                    if s.write_all(&piece).await.is_err() {
                        return;
                    }
                    at += n;
                    if next(8) == 0 {
                        tokio::time::sleep(Duration::from_millis(1 + next(3))).await;
                    }
                }
                let _ = s.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_capture_through_a_tap_is_forwarded_byte_exact_and_measured() {
    let _g = serial().await;
    let captures = Arc::new(load());
    let upstream = replay_upstream(captures.clone()).await;
    let scratch = scratch("captures");
    let log = scratch.path().join("records.jsonl");
    let extra = format!("    record_log:\n      path: {}\n", log.display());
    let tap = Tap::start(&format!("http://{upstream}"), &extra);
    for c in captures.iter() {
        for (k, path, source) in [
            (0, c.path.clone(), own_source(c)),
            (1, neutral(c), DialectSource::Content),
        ] {
            let id = format!("{}#{k}", c.name);
            let headers = [
                ("content-type", "application/json"),
                ("x-request-id", id.as_str()),
            ];
            let resp = tokentap_net::client::send(tap.addr, "POST", &path, &headers, &c.request)
                .await
                .unwrap();
            assert_eq!(resp.status, 200, "{id}");
            assert!(
                resp.body == c.wire,
                "{id}: the client's bytes are the recorded bytes"
            );
            let r = tap.records.wait(&id).await;
            check(c, &r, &format!("tap, {path}"));
            assert_eq!(r.dialect_source, Some(source), "{id}");
        }
    }
    // The record log says how each dialect was chosen.
    let want = 2 * captures.len();
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.len() >= want || Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(lines.len(), want, "one record-log line per request");
    for l in &lines {
        let id = l["request_id"].as_str().unwrap();
        let c = captures
            .iter()
            .find(|c| id.starts_with(&format!("{}#", c.name)))
            .unwrap();
        let source = if id.ends_with("#1") {
            DialectSource::Content
        } else {
            own_source(c)
        };
        assert_eq!(l["dialect_source"].as_str(), Some(source.as_str()), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_dialect_is_read_whatever_the_path_and_says_so() {
    let _g = serial().await;
    let captures = Arc::new(load());
    let upstream = replay_upstream(captures.clone()).await;
    let tap = Tap::start(&format!("http://{upstream}"), "    dialect: gemini\n");
    let c = captures
        .iter()
        .find(|c| c.name.starts_with("gemini"))
        .unwrap();
    let id = format!("{}#config", c.name);
    let headers = [("x-request-id", id.as_str())];
    let resp = tokentap_net::client::send(tap.addr, "POST", "/anything", &headers, &c.request)
        .await
        .unwrap();
    assert!(resp.body == c.wire);
    let r = tap.records.wait(&id).await;
    check(c, &r, "configured");
    assert_eq!(r.dialect_source, Some(DialectSource::Config));
}
