//! The other dialects through the meter: fixture streams (see
//! `tests/fixtures/dialects/README.md`) whole and cut anywhere give the same
//! record, with token counts equal to the dialect's usage fields; and token
//! estimates against the tokenizer's own count of the whole text.

use super::*;
use crate::decode::dialect::DialectSource;
use crate::decode::event::FinishReason;
use crate::decode::sse::SseLimits;
use crate::decode::tokens::Tokenizer;
use proptest::prelude::*;

const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 1 << 16,
    json_body_bytes: 1 << 16,
    sse: SseLimits {
        max_line_bytes: 1 << 14,
        max_event_bytes: 1 << 14,
    },
};

struct Fixture {
    path: &'static str,
    request: &'static [u8],
    content_type: &'static [u8],
    body: &'static [u8],
    dialect: Dialect,
    token_events: u32,
    input: u64,
    output: u64,
    finish: FinishReason,
}

fn fixtures() -> [Fixture; 4] {
    [
        Fixture {
            path: "/v1/messages",
            request: br#"{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Weather in SF?"}]}"#,
            content_type: b"text/event-stream",
            body: include_bytes!("../../../../../tests/fixtures/dialects/anthropic.sse"),
            dialect: Dialect::Anthropic,
            // thinking, two texts, two tool-argument pieces (the empty one
            // and the signature are not output).
            token_events: 5,
            input: 472 + 1024,
            output: 89,
            finish: FinishReason::ToolCalls,
        },
        Fixture {
            path: "/v1/responses",
            request: br#"{"model":"gpt-4.1","input":"Hi","stream":true}"#,
            content_type: b"text/event-stream",
            body: include_bytes!("../../../../../tests/fixtures/dialects/responses.sse"),
            dialect: Dialect::Responses,
            token_events: 3,
            input: 37,
            output: 11,
            finish: FinishReason::Stop,
        },
        Fixture {
            path: "/api/chat",
            request: br#"{"model":"llama3.2","messages":[{"role":"user","content":"Why is the sky blue?"}]}"#,
            content_type: b"application/x-ndjson",
            body: include_bytes!("../../../../../tests/fixtures/dialects/ollama_chat.ndjson"),
            dialect: Dialect::Ollama,
            token_events: 5,
            input: 26,
            output: 5,
            finish: FinishReason::Stop,
        },
        Fixture {
            path: "/generate_stream",
            request: br#"{"inputs":"What is deep learning?","parameters":{"max_new_tokens":20}}"#,
            content_type: b"text/event-stream",
            body: include_bytes!("../../../../../tests/fixtures/dialects/tgi.sse"),
            dialect: Dialect::Tgi,
            // The end-of-sequence token is special: no output.
            token_events: 4,
            input: 9,
            output: 5,
            finish: FinishReason::Stop,
        },
    ]
}

#[derive(Default)]
struct Count(Vec<Option<u64>>);

impl TokenSink for Count {
    fn token_event(&mut self, ev: &TokenEvent<'_>) {
        self.0.push(ev.tokens);
    }
}

/// Feeds `f` cut at `points` (byte i arriving at t0 + i µs).
fn feed(
    f: &Fixture,
    points: &[usize],
    estimator: Option<Estimator>,
) -> (RequestRecord, Vec<Option<u64>>) {
    feed_at(f, f.path, points, estimator)
}

/// `feed`, with the request sent to `path`.
fn feed_at(
    f: &Fixture,
    path: &str,
    points: &[usize],
    estimator: Option<Estimator>,
) -> (RequestRecord, Vec<Option<u64>>) {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::UNIX_EPOCH, LIMITS).with_estimator(estimator);
    m.request_head(path, None, Some(f.request.len() as u64));
    assert_eq!(m.request_body(f.request, true), None);
    m.response_head(t0, 200, Some(f.content_type), None, None);
    let mut sink = Count::default();
    let mut start = 0;
    for &p in points.iter().chain(std::iter::once(&f.body.len())) {
        if p > start {
            let at = t0 + Duration::from_micros(p as u64);
            m.response_body(at, &f.body[start..p], &mut sink);
            start = p;
        }
    }
    let end = t0 + Duration::from_micros(f.body.len() as u64 + 1);
    m.response_end(end);
    (m.finish(end, TransportEnd::Complete), sink.0)
}

#[test]
fn every_fixture_is_read_as_its_dialect_says() {
    for f in fixtures() {
        let (r, _) = feed(&f, &[], None);
        let what = f.path;
        assert_eq!(r.dialect, f.dialect, "{what}");
        assert_eq!(r.outcome, Outcome::Ok, "{what}: {r:?}");
        assert_eq!(r.measure_error, None, "{what}");
        assert_eq!(r.token_events, f.token_events, "{what}");
        assert_eq!(r.input_tokens, Some(f.input), "{what}");
        assert_eq!(r.output_tokens, Some(f.output), "{what}");
        assert_eq!(r.output_source, Some(TokenSource::Usage), "{what}");
        assert_eq!(r.finish_reason, Some(f.finish), "{what}");
        assert!(r.stream, "{what}");
        assert!(r.ttft.is_some() && r.tpot.is_some(), "{what}");
    }
    // Anthropic: the thinking comes first, the visible text after it (fed
    // byte by byte, so each event has its own time).
    let f = &fixtures()[0];
    let every: Vec<usize> = (1..f.body.len()).collect();
    let (r, _) = feed(f, &every, None);
    assert!(r.ttft < r.ttft_visible);
    assert_eq!(r.cached_tokens, Some(1024));
    assert_eq!((r.reasoning_events, r.tool_call_events), (1, 2));
    // Ollama: the engine's own times.
    let (r, _) = feed(&fixtures()[2], &[], None);
    let e = r.engine_timing.unwrap();
    assert_eq!(
        (e.prefill_ns, e.decode_ns),
        (Some(342_546_000), Some(4_535_599_000))
    );
    assert_eq!(r.body_kind, crate::decode::BodyKind::Ndjson);
}

proptest! {
    #[test]
    fn every_dialect_is_split_invariant(which in 0usize..4, cuts in proptest::collection::vec(0usize..8000, 0..40)) {
        let f = &fixtures()[which];
        let (whole, _) = feed(f, &[], None);
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % f.body.len()).filter(|&c| c > 0).collect();
        points.sort_unstable();
        points.dedup();
        let (split, _) = feed(f, &points, None);
        prop_assert_eq!(split.outcome, whole.outcome);
        prop_assert_eq!(split.events, whole.events);
        prop_assert_eq!(split.token_events, whole.token_events);
        prop_assert_eq!(split.output_tokens, whole.output_tokens);
        prop_assert_eq!(split.input_tokens, whole.input_tokens);
        prop_assert_eq!(split.finish_reason, whole.finish_reason);
    }
}

proptest! {
    /// A path that names nothing: the stream's first event names the
    /// dialect, wherever the body is cut, and the record is the one the
    /// path would have given (the operation included: Ollama's chat, TGI's
    /// text completion).
    #[test]
    fn the_stream_names_its_dialect_wherever_it_is_cut(which in 0usize..4, cuts in proptest::collection::vec(0usize..8000, 0..40)) {
        let f = &fixtures()[which];
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % f.body.len()).filter(|&c| c > 0).collect();
        points.sort_unstable();
        points.dedup();
        let (by_path, _) = feed(f, &points, None);
        let (by_content, _) = feed_at(f, "/gateway/route-7", &points, None);
        prop_assert_eq!(by_path.dialect_source, Some(DialectSource::Path));
        prop_assert_eq!(by_content.dialect_source, Some(DialectSource::Content));
        prop_assert_eq!(
            RequestRecord { dialect_source: None, t0: by_path.t0, ..by_content },
            RequestRecord { dialect_source: None, ..by_path }
        );
    }
}

/// One response at a path that names no dialect.
fn unknown(content_type: &[u8], body: &[u8]) -> RequestRecord {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::UNIX_EPOCH, LIMITS);
    m.request_head("/internal/status", None, Some(2));
    assert_eq!(m.request_body(b"{}", true), None);
    m.response_head(t0, 200, Some(content_type), None, None);
    m.response_body(t0, body, &mut ());
    m.response_end(t0);
    m.finish(t0, TransportEnd::Complete)
}

#[test]
fn a_response_that_names_no_dialect_is_no_llm_call() {
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(LIMITS.json_body_bytes));
    let events = "event: tick\ndata: {\"n\":1}\n\n".repeat(20);
    for (ct, body) in [
        (
            &b"application/json"[..],
            &br#"{"status":"ok","uptime":12}"#[..],
        ),
        (b"application/json", b"not json at all"),
        (b"application/json", big.as_bytes()),
        (b"text/event-stream", events.as_bytes()),
        (
            b"application/x-ndjson",
            b"{\"level\":\"info\"}\n{\"level\":\"warn\"}\n",
        ),
    ] {
        let r = unknown(ct, body);
        let what = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        assert_eq!(r.operation, Operation::Other, "{what}");
        assert_eq!(r.dialect_source, None, "{what}");
        assert_eq!((r.outcome, r.measure_error), (Outcome::Ok, None), "{what}");
        assert_eq!((r.output_tokens, r.ttft), (None, None), "{what}");
    }
    // A non-streaming answer at such a path: its body names the dialect.
    let r = unknown(
        b"application/json",
        br#"{"id":"c","object":"chat.completion","choices":[{"message":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
    );
    assert_eq!((r.operation, r.dialect), (Operation::Chat, Dialect::OpenAi));
    assert_eq!(r.dialect_source, Some(DialectSource::Content));
    assert_eq!((r.input_tokens, r.output_tokens), (Some(5), Some(1)));
}

/// A paragraph as an engine streams it: `words` words per event.
fn prose_stream(words: usize) -> (Vec<u8>, String) {
    const TEXT: &str = "Latency at the boundary is what a user waits for: the first token \
        after the prompt was sent, then a steady rhythm of tokens until the answer ends. \
        Engines batch requests together, so a busy server stretches every gap, and a long \
        prompt delays the first token while the engine reads it. Gateways add their own \
        time: authentication, routing, a guardrail that reads the prompt before the model \
        does. A measuring proxy in the middle sees each piece pass and can say which layer \
        spent the time, as long as it never holds a byte back.";
    // Words with their leading space, as tokenizers (and engines' deltas)
    // carry them.
    let tokens: Vec<String> = TEXT
        .split(' ')
        .enumerate()
        .map(|(i, w)| {
            if i == 0 {
                w.to_string()
            } else {
                format!(" {w}")
            }
        })
        .collect();
    let mut body = String::new();
    for group in tokens.chunks(words) {
        let text = serde_json::to_string(&group.concat()).unwrap();
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}}}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    (body.into_bytes(), TEXT.to_string())
}

#[test]
fn estimates_are_within_5_percent_of_the_tokenizer_on_the_whole_text() {
    let e = Estimator::new(Tokenizer::O200kBase);
    for words in [1, 3, 7] {
        let (body, text) = prose_stream(words);
        let truth = e.count(&text);
        let f = Fixture {
            path: "/v1/chat/completions",
            request: br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Explain latency."}]}"#,
            content_type: b"text/event-stream",
            body: Box::leak(body.into_boxed_slice()),
            dialect: Dialect::OpenAi,
            token_events: 0,
            input: 0,
            output: 0,
            finish: FinishReason::Stop,
        };
        let (r, per_event) = feed(&f, &[], Some(e));
        let got = r.output_tokens.unwrap();
        let err = (got as f64 - truth as f64).abs() / truth as f64;
        println!(
            "estimate, {words} word(s) per event: {got} vs {truth} tokens ({:.1} %)",
            100.0 * err
        );
        assert_eq!(r.output_source, Some(TokenSource::Estimate));
        assert!(err <= 0.05, "{got} vs {truth}");
        // Per event: what the tokenizer counted, summing to the total;
        // several per event when the engine sends several words.
        assert_eq!(per_event.iter().map(|t| t.unwrap()).sum::<u64>(), got);
        if words > 1 {
            assert!(per_event.iter().any(|t| t.unwrap() > 1));
        }
        // TPOT divides by the estimate, not by the events.
        assert!(r.tpot.is_some());
        // The prompt: one user message with OpenAI's chat overhead.
        assert_eq!(
            r.input_tokens,
            Some(3 + 1 + e.count("Explain latency.") + 3)
        );
        assert_eq!(r.input_source, Some(TokenSource::Estimate));
    }
    // Usage, when present, wins over the estimate.
    let (r, _) = feed(&fixtures()[1], &[], Some(e));
    assert_eq!(
        (r.output_tokens, r.output_source),
        (Some(11), Some(TokenSource::Usage))
    );
    assert_eq!(r.input_source, Some(TokenSource::Usage));
}
