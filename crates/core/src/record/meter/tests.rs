use super::*;
use crate::decode::event::FinishReason;
use crate::decode::sse::SseLimits;
use proptest::prelude::*;

const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 1 << 16,
    json_body_bytes: 1 << 16,
    sse: SseLimits {
        max_line_bytes: 1 << 12,
        max_event_bytes: 1 << 12,
    },
};

const REQ: &[u8] = br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Default)]
struct Collect(Vec<Owned>);

#[derive(Debug, Clone, Copy, PartialEq)]
struct Owned {
    index: u32,
    at: Instant,
    gap: Option<Duration>,
    tokens: Option<u64>,
}
impl TokenSink for Collect {
    fn token_event(&mut self, ev: &TokenEvent<'_>) {
        self.0.push(Owned {
            index: ev.index,
            at: ev.at,
            gap: ev.gap,
            tokens: ev.tokens,
        });
    }
}

fn chunk(content: &str) -> String {
    format!("data: {{\"model\":\"m-resp\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n")
}

/// (offset ms, bytes) pieces of a typical stream: role-only at 5 ms, tokens
/// at 100, 120, 140, finish, usage, [DONE].
fn typical() -> Vec<(u64, String)> {
    vec![
        (5, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n".into()),
        (50, ": keep-alive\n\n".into()),
        (100, chunk("Hel")),
        (120, chunk("lo")),
        (140, chunk("!")),
        (141, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".into()),
        (142, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n".into()),
        (143, "data: [DONE]\n\n".into()),
    ]
}

fn run(pieces: &[(u64, String)], end_ms: u64, end: TransportEnd) -> (RequestRecord, Vec<Owned>) {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head(
        "/v1/chat/completions",
        Some(b"req-1"),
        Some(REQ.len() as u64),
    );
    assert_eq!(m.request_body(REQ, true), None);
    m.response_head(t0 + ms(2), 200, Some(b"text/event-stream"), None, None);
    let mut sink = Collect::default();
    for (at, bytes) in pieces {
        m.response_body(t0 + ms(*at), bytes.as_bytes(), &mut sink);
    }
    if end == TransportEnd::Complete {
        m.response_end(t0 + ms(end_ms));
    }
    (m.finish(t0 + ms(end_ms + 1), end), sink.0)
}

#[test]
fn typical_stream_follows_the_definitions() {
    let (r, events) = run(&typical(), 144, TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.ttfb, Some(ms(2)));
    assert_eq!(
        r.time_to_first_event,
        Some(ms(5)),
        "role-only counts as an event"
    );
    assert_eq!(
        r.ttft,
        Some(ms(100)),
        "role-only and keep-alive never count as tokens"
    );
    assert_eq!(r.ttft_visible, Some(ms(100)));
    assert_eq!(r.e2e, ms(144));
    assert_eq!(r.events, 7);
    assert_eq!(r.token_events, 3);
    assert_eq!(r.comments, 1, "the keep-alive");
    assert_eq!((r.reasoning_events, r.tool_call_events), (0, 0));
    assert_eq!(r.gaps.count, 2);
    assert_eq!(r.gaps.min, Some(ms(20)));
    assert_eq!(r.gaps.max, Some(ms(20)));
    assert_eq!(r.output_tokens, Some(3));
    assert_eq!(r.output_source, Some(TokenSource::Usage));
    assert_eq!(r.input_tokens, Some(7));
    assert_eq!(r.cached_tokens, Some(4));
    assert_eq!(r.tpot, Some(ms(22)), "(144 - 100) / (3 - 1)");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert!(r.done_seen);
    assert_eq!(r.request.model.as_deref(), Some("m"));
    assert_eq!(r.response_model.as_deref(), Some("m-resp"));
    assert_eq!(r.request_id.as_deref(), Some("req-1"));
    let gaps: Vec<_> = events.iter().map(|e| e.gap).collect();
    assert_eq!(gaps, vec![None, Some(ms(20)), Some(ms(20))]);
    assert_eq!(
        events.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[test]
fn without_usage_counts_events() {
    let mut p = typical();
    p.retain(|(_, b)| !b.contains("usage"));
    let (r, _) = run(&p, 144, TransportEnd::Complete);
    assert_eq!(r.output_tokens, Some(3));
    assert_eq!(r.output_source, Some(TokenSource::Events));
    assert_eq!(r.input_tokens, None);
}

#[test]
fn reasoning_is_a_token_but_not_visible() {
    let p = vec![
        (
            10,
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n".to_string(),
        ),
        (30, chunk("answer")),
        (31, "data: [DONE]\n\n".to_string()),
    ];
    let (r, _) = run(&p, 32, TransportEnd::Complete);
    assert_eq!(r.ttft, Some(ms(10)));
    assert_eq!(r.ttft_visible, Some(ms(30)));
    assert_eq!(r.reasoning_events, 1);
}

#[test]
fn continuous_usage_gives_tokens_per_event() {
    let ev = |c: &str, n: u64| {
        format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{c}\"}}}}],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{n}}}}}\n\n")
    };
    let p = vec![
        (10, ev("ab", 2)),
        (20, ev("c", 3)),
        (30, ev("def", 6)),
        (31, "data: [DONE]\n\n".into()),
    ];
    let (r, events) = run(&p, 32, TransportEnd::Complete);
    assert_eq!(
        events.iter().map(|e| e.tokens).collect::<Vec<_>>(),
        vec![Some(2), Some(1), Some(3)]
    );
    assert_eq!(r.output_tokens, Some(6));
}

#[test]
fn usage_only_on_the_last_token_event_is_not_per_event() {
    let last = "data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}],\"usage\":{\"completion_tokens\":3}}\n\n";
    let p = vec![
        (10, chunk("x")),
        (20, chunk("y")),
        (30, last.to_string()),
        (31, "data: [DONE]\n\n".into()),
    ];
    let (_, events) = run(&p, 32, TransportEnd::Complete);
    assert!(events.iter().all(|e| e.tokens.is_none()));
}

#[test]
fn a_client_that_leaves_after_the_terminal_event_had_the_whole_answer() {
    let (r, _) = run(&typical(), 180, TransportEnd::ClientGone);
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.error_type, None);
    assert_eq!(r.e2e, ms(143), "ends at [DONE], not at the close");
    assert_eq!(r.output_tokens, Some(3));
    // Without the terminal event, leaving is a cancel even after the
    // finish reason (the usage event may still be to come).
    let mut p = typical();
    p.truncate(6);
    let (r, _) = run(&p, 180, TransportEnd::ClientGone);
    assert_eq!(r.outcome, Outcome::ClientCancelled);
}

#[test]
fn outcomes() {
    let mut p = typical();
    p.truncate(4);
    let (r, _) = run(&p, 130, TransportEnd::ClientGone);
    assert_eq!(r.outcome, Outcome::ClientCancelled);
    assert_eq!(r.token_events, 2);
    assert_eq!(r.output_tokens, Some(2), "partial count kept");
    assert_eq!(r.tpot, None);
    assert_eq!(r.e2e, ms(131));

    let (r, _) = run(&p, 130, TransportEnd::Upstream(ErrorType::ConnectionReset));
    assert_eq!(r.outcome, Outcome::UpstreamTruncated);
    assert_eq!(r.error_type, Some(ErrorType::ConnectionReset));

    let (r, _) = run(&p, 130, TransportEnd::Complete);
    assert_eq!(
        r.outcome,
        Outcome::UpstreamTruncated,
        "clean end without [DONE] or finish"
    );
    assert_eq!(r.error_type, Some(ErrorType::MissingTerminator));

    let mut bad = typical();
    bad.insert(3, (110, "data: {\"choices\":[\n\n".into()));
    let (r, _) = run(&bad, 144, TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Unmeasured);
    assert_eq!(r.measure_error, Some(MeasureError::InvalidJsonEvent));
    assert_eq!(r.output_tokens, Some(3), "usage still read");

    // JSON depth: fields tokentap does not read are skipped without
    // recursion, so 1,000 levels of nesting cost O(n) and measure fine;
    // nesting where a typed field is expected is a malformed event.
    let mut deep = typical();
    let nested = format!(
        "data: {{\"x\":{}{}}}\n\n",
        "[".repeat(1_000),
        "]".repeat(1_000)
    );
    deep.insert(3, (110, nested));
    let (r, _) = run(&deep, 144, TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Ok);
    let mut deep = typical();
    let nested = format!(
        "data: {{\"usage\":{}{}}}\n\n",
        "[".repeat(1_000),
        "]".repeat(1_000)
    );
    deep.insert(3, (110, nested));
    let (r, _) = run(&deep, 144, TransportEnd::Complete);
    assert_eq!(r.measure_error, Some(MeasureError::InvalidJsonEvent));

    let mut err = typical();
    err.insert(
        3,
        (
            110,
            "data: {\"error\":{\"message\":\"overloaded\"}}\n\n".into(),
        ),
    );
    let (r, _) = run(&err, 144, TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::UpstreamError);
    assert_eq!(r.error_type, Some(ErrorType::StreamErrorEvent));
}

#[test]
fn upstream_error_before_headers_and_http_errors() {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", None, None);
    assert_eq!(m.request_body(REQ, true), None);
    let r = m.finish(
        t0 + ms(3),
        TransportEnd::Upstream(ErrorType::ConnectRefused),
    );
    assert_eq!(r.outcome, Outcome::UpstreamError);
    assert_eq!(r.ttfb, None);

    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", None, None);
    m.response_head(t0 + ms(1), 429, Some(b"application/json"), None, None);
    m.response_body(t0 + ms(1), b"{\"error\":{}}", &mut ());
    m.response_end(t0 + ms(2));
    let r = m.finish(t0 + ms(3), TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::HttpError);
    assert_eq!(r.status, Some(429));
}

#[test]
fn non_streaming_json_body() {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    let req = br#"{"model":"m","messages":[]}"#;
    m.request_head("/v1/chat/completions", None, Some(req.len() as u64));
    assert_eq!(m.request_body(req, true), None);
    m.response_head(
        t0 + ms(200),
        200,
        Some(b"application/json"),
        None,
        Some(120),
    );
    let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":5}}"#;
    let (a, b) = body.split_at(40);
    m.response_body(t0 + ms(200), a, &mut ());
    m.response_body(t0 + ms(201), b, &mut ());
    m.response_end(t0 + ms(201));
    let r = m.finish(t0 + ms(202), TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Ok);
    assert!(!r.stream);
    assert_eq!(r.ttft, None);
    assert_eq!(r.output_tokens, Some(5));
    assert_eq!(r.input_tokens, Some(9));
    assert_eq!(r.e2e, ms(201));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn caps_and_unknown_codings_mark_unmeasured() {
    let big = format!("data: {}\n\n", "x".repeat(10_000));
    let (r, _) = run(
        &[(10, big), (20, chunk("a")), (30, "data: [DONE]\n\n".into())],
        31,
        TransportEnd::Complete,
    );
    assert_eq!(r.outcome, Outcome::Unmeasured);
    assert_eq!(r.measure_error, Some(MeasureError::SseLineTooLong));
    assert_eq!(r.ttft, None);
    assert_eq!(r.output_tokens, None, "no guessed counts after a failure");

    for (coding, body, want) in [
        (
            &b"br"[..],
            &b"\x1f\x8b\x08garbage"[..],
            MeasureError::CompressedBody,
        ),
        (
            &b"gzip"[..],
            &b"not gzip at all"[..],
            MeasureError::InflateFailed,
        ),
    ] {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
        m.request_head("/v1/chat/completions", None, None);
        m.response_head(t0, 200, Some(b"text/event-stream"), Some(coding), None);
        m.response_body(t0, body, &mut ());
        m.response_end(t0);
        let r = m.finish(t0, TransportEnd::Complete);
        assert_eq!(r.measure_error, Some(want));
        assert_eq!(r.outcome, Outcome::Unmeasured);
    }
}

#[test]
fn a_gzip_stream_is_measured_like_a_plain_one() {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let plain: Vec<(u64, String)> = typical();
    // Compress with a sync flush after each piece, as a streaming gzip layer
    // does, so each piece inflates to the events it carried.
    let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut pieces = Vec::new();
    for (at, bytes) in &plain {
        enc.write_all(bytes.as_bytes()).unwrap();
        enc.flush().unwrap();
        pieces.push((*at, std::mem::take(enc.get_mut())));
    }
    let tail = enc.finish().unwrap();
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", None, None);
    assert_eq!(m.request_body(REQ, true), None);
    m.response_head(
        t0 + ms(2),
        200,
        Some(b"text/event-stream"),
        Some(b"gzip"),
        None,
    );
    let mut sink = Collect::default();
    for (at, bytes) in &pieces {
        m.response_body(t0 + ms(*at), bytes, &mut sink);
    }
    m.response_body(t0 + ms(144), &tail, &mut sink);
    m.response_end(t0 + ms(144));
    let r = m.finish(t0 + ms(145), TransportEnd::Complete);
    let (want, _) = run(&plain, 144, TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(
        (r.ttft, r.token_events, r.output_tokens, r.tpot),
        (want.ttft, want.token_events, want.output_tokens, want.tpot)
    );
    assert_eq!(r.gaps, want.gaps);
}

#[test]
fn request_errors_do_not_unmeasure_the_response() {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", None, None);
    assert_eq!(m.request_body(b"not json", true), None);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
    m.response_body(t0 + ms(5), chunk("a").as_bytes(), &mut ());
    m.response_body(t0 + ms(6), b"data: [DONE]\n\n", &mut ());
    m.response_end(t0 + ms(6));
    let r = m.finish(t0 + ms(7), TransportEnd::Complete);
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.measure_error, Some(MeasureError::RequestNotJson));
    assert!(r.stream, "stream inferred from the response");
    assert_eq!(r.ttft, Some(ms(5)));
}

#[test]
fn other_paths_are_decoded_only_when_the_response_names_a_dialect() {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/metrics", None, None);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
    m.response_body(t0, b"event: log\ndata: {\"line\":\"started\"}\n\n", &mut ());
    m.response_end(t0);
    let r = m.finish(t0, TransportEnd::Complete);
    assert_eq!((r.operation, r.dialect_source), (Operation::Other, None));
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.output_tokens, None);
    // The same path carrying an OpenAI stream: read as one.
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/metrics", None, None);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
    m.response_body(t0 + ms(1), chunk("a").as_bytes(), &mut ());
    m.response_body(t0 + ms(2), b"data: [DONE]\n\n", &mut ());
    m.response_end(t0 + ms(2));
    let r = m.finish(t0 + ms(2), TransportEnd::Complete);
    assert_eq!(
        (r.operation, r.dialect_source),
        (Operation::Chat, Some(DialectSource::Content))
    );
    assert_eq!(
        (r.outcome, r.ttft, r.output_tokens),
        (Outcome::Ok, Some(ms(1)), Some(1))
    );
}

fn stream_bytes() -> Vec<u8> {
    let mut s = String::new();
    s.push_str(": hello\r\n\r\n");
    s.push_str("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n");
    for i in 0..20 {
        s.push_str(&chunk(&format!("t{i}")).replace('\n', if i % 3 == 0 { "\r" } else { "\n" }));
    }
    s.push_str("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":20}}\n\ndata: [DONE]\n\n");
    s.into_bytes()
}

/// Feeds `bytes` cut at `points`; each piece is stamped with the arrival
/// time of its last byte, byte i arriving at t0 + i µs.
fn feed_split(t0: Instant, bytes: &[u8], points: &[usize]) -> (RequestRecord, Vec<Owned>) {
    let mut m = Meter::new(t0, SystemTime::UNIX_EPOCH, LIMITS);
    m.request_head("/v1/chat/completions", None, None);
    assert_eq!(m.request_body(REQ, true), None);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
    let mut sink = Collect::default();
    let mut start = 0;
    for &p in points.iter().chain(std::iter::once(&bytes.len())) {
        if p > start {
            let at = t0 + Duration::from_micros(p as u64 - 1);
            m.response_body(at, &bytes[start..p], &mut sink);
            start = p;
        }
    }
    let end = t0 + Duration::from_micros(bytes.len() as u64);
    m.response_end(end);
    (m.finish(end, TransportEnd::Complete), sink.0)
}

proptest! {
    /// Any re-chunking of a stream yields the same events and counts, and
    /// every token event is stamped with the time of the piece that
    /// completed it (never earlier, never a later piece's).
    #[test]
    fn split_invariance(cuts in proptest::collection::vec(0usize..4000, 0..60)) {
        let bytes = stream_bytes();
        let t0 = Instant::now();
        // One byte per piece: each event's time reveals its terminator position.
        let all: Vec<usize> = (1..bytes.len()).collect();
        let (fine, fine_events) = feed_split(t0, &bytes, &all);
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % bytes.len()).filter(|&c| c > 0).collect();
        points.sort_unstable();
        points.dedup();
        let (split, split_events) = feed_split(t0, &bytes, &points);
        let (whole, _) = feed_split(t0, &bytes, &[]);
        for r in [&split, &whole] {
            prop_assert_eq!(r.outcome, Outcome::Ok);
            prop_assert_eq!(r.events, fine.events);
            prop_assert_eq!(r.token_events, fine.token_events);
            prop_assert_eq!(r.output_tokens, fine.output_tokens);
            prop_assert_eq!(r.input_tokens, fine.input_tokens);
            prop_assert_eq!(r.finish_reason, fine.finish_reason);
            prop_assert_eq!(r.e2e, fine.e2e);
        }
        prop_assert_eq!(fine.token_events, 20);
        prop_assert_eq!(split_events.len(), fine_events.len());
        for (s, f) in split_events.iter().zip(&fine_events) {
            let terminator = (f.at - t0).as_micros() as usize;
            let piece_end = points.iter().copied().find(|&p| p > terminator).unwrap_or(bytes.len());
            prop_assert_eq!(s.at, t0 + Duration::from_micros(piece_end as u64 - 1));
            prop_assert_eq!(s.index, f.index);
            prop_assert_eq!(s.tokens, f.tokens);
        }
    }
}

#[test]
fn large_request_bodies_are_handed_back_for_parsing_elsewhere() {
    let t0 = Instant::now();
    let limits = MeterLimits {
        request_body_bytes: 1 << 20,
        ..LIMITS
    };
    let mut m = Meter::new(t0, SystemTime::now(), limits);
    let big = format!(
        r#"{{"model":"big","stream":true,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(crate::record::INLINE_PARSE_BYTES)
    );
    m.request_head("/v1/chat/completions", None, None);
    let (a, b) = big.as_bytes().split_at(1000);
    assert_eq!(m.request_body(a, false), None);
    let body = m.request_body(b, true).expect("handed back");
    assert_eq!(body, big.as_bytes());
    assert_eq!(m.requested_model(), None, "not parsed yet");
    m.set_request(crate::decode::request::parse_request(&body, false));
    assert_eq!(m.requested_model(), Some("big"));
    let r = m.finish(t0, TransportEnd::ClientGone);
    assert_eq!(r.request_body_bytes, big.len() as u64);
    assert!(r
        .request
        .prompt_bytes
        .is_some_and(|n| n > crate::record::INLINE_PARSE_BYTES as u64));
}

#[test]
fn guardrail_taps_read_a_verdict_and_failed_calls_are_errors() {
    let t0 = Instant::now();
    let answer = br#"{"results":[{"flagged":true}]}"#;
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS).with_verdict(true);
    m.request_head("/v1/moderations", None, None);
    m.response_head(t0, 200, Some(b"application/json"), None, None);
    m.response_body(t0, answer, &mut ());
    m.response_end(t0);
    let r = m.finish(t0, TransportEnd::Complete);
    assert_eq!(r.verdict, Some(Verdict::Flagged));
    assert_eq!(r.outcome, Outcome::Ok);

    let mut m = Meter::new(t0, SystemTime::now(), LIMITS).with_verdict(true);
    m.request_head("/v1/moderations", None, None);
    let r = m.finish(t0, TransportEnd::Upstream(ErrorType::ReadTimeout));
    assert_eq!(
        r.verdict,
        Some(Verdict::Error),
        "a timed-out guardrail call"
    );

    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/moderations", None, None);
    assert_eq!(
        m.finish(t0, TransportEnd::Complete).verdict,
        None,
        "only guardrail taps read verdicts"
    );
}
