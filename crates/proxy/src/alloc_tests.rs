//! The per-chunk promise: once a request is under way, feeding response
//! pieces through the `Meter` into the production `TapSink` (histogram
//! observations) allocates nothing; nor does recording a finished request
//! into series that exist. Measured with a counting global allocator (this
//! test binary only).

use crate::metrics::{Metrics, TapLabels, TapSink};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokentap_core::decode::sse::SseLimits;
use tokentap_core::record::{Meter, MeterLimits, TransportEnd};
use tokentap_telemetry::registry::otel::discarding;

pub(crate) const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 1 << 20,
    json_body_bytes: 1 << 20,
    sse: SseLimits {
        max_line_bytes: 1 << 20,
        max_event_bytes: 1 << 20,
    },
};

/// Event shapes seen from real engines (llama.cpp with `timings`, vLLM with
/// null `logprobs`/`stop_reason`, tool-call deltas, reasoning, escapes,
/// continuous usage, keep-alives, CRLF).
fn pieces() -> Vec<Vec<u8>> {
    let mut p: Vec<Vec<u8>> = vec![
        br#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Par"}}],"created":1795946509,"id":"chatcmpl-q","model":"tiny-random-llama","system_fingerprint":"b1-0c1e570","object":"chat.completion.chunk"}"#.to_vec(),
        b"\n\n".to_vec(),
        br#"data: {"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"\n\"quoted\" \u00e9"},"logprobs":null,"finish_reason":null,"stop_reason":null}]}"#.to_vec(),
        b"\r\n\r\n".to_vec(),
        br#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#.to_vec(),
        b"\n\n: keep-alive\n\n".to_vec(),
        br#"data: {"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#.to_vec(),
        b"\n\n".to_vec(),
    ];
    // One event split across three pieces.
    let split =
        br#"data: {"choices":[{"index":0,"delta":{"content":"split"}}],"model":"m"}"#.to_vec();
    let (a, rest) = split.split_at(10);
    let (b, c) = rest.split_at(20);
    p.push(a.to_vec());
    p.push(b.to_vec());
    p.push([c, b"\n\n"].concat());
    p
}

#[test]
fn per_chunk_path_allocates_nothing() {
    per_chunk_allocations(Metrics::new(10, Default::default()).unwrap());
}

#[test]
fn per_chunk_path_allocates_nothing_with_otlp_metrics_on() {
    per_chunk_allocations(
        Metrics::new(10, Default::default())
            .unwrap()
            .with_otel(discarding()),
    );
}

fn per_chunk_allocations(metrics: Metrics) {
    let metrics = Arc::new(metrics);
    let tap = TapLabels {
        tap: Arc::from("t"),
        boundary: tokentap_core::tap::Boundary::Engine,
    };
    let mut sink = TapSink::new(metrics.clone(), tap, None);
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    let req = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    m.request_head("/v1/chat/completions", Some(b"r-1"), Some(req.len() as u64));
    assert_eq!(m.request_body(req, true), None);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
    let pieces = pieces();
    let mut at = t0;
    // Warm-up: label resolution and buffer growth happen once per request.
    for p in &pieces {
        at += Duration::from_millis(1);
        m.response_body(at, p, &mut sink);
    }
    let rounds = 50;
    let info = allocation_counter::measure(|| {
        for _ in 0..rounds {
            for p in &pieces {
                at += Duration::from_millis(1);
                m.response_body(at, p, &mut sink);
            }
        }
    });
    assert_eq!(
        info.count_total,
        0,
        "{} allocations over {} pieces",
        info.count_total,
        rounds * pieces.len()
    );
    let r = m.finish(at, TransportEnd::ClientGone);
    assert_eq!(
        r.token_events,
        5 * (rounds as u32 + 1),
        "five token-bearing shapes per round"
    );
    assert!(r.measure_error.is_none());
}

/// The per-request promise of the metrics: once a (tap, model, operation)
/// has its series, recording a finished request into them allocates
/// nothing (one map lookup, then atomics); with OTLP metrics on too (the
/// attributes are built with the series, not per observation).
#[test]
fn recording_a_finished_request_allocates_nothing_once_its_series_exist() {
    record_allocations(Metrics::new(10, Default::default()).unwrap());
}

#[test]
fn recording_a_finished_request_allocates_nothing_with_otlp_metrics_on() {
    record_allocations(
        Metrics::new(10, Default::default())
            .unwrap()
            .with_otel(discarding()),
    );
}

/// A finished non-streamed chat request with usage (as the simulator
/// answers S9's request), recorded by a `Meter` (also `metrics::series`'
/// tests).
pub(crate) fn finished_non_streamed() -> tokentap_core::record::RequestRecord {
    let req = br#"{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = br#"{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"a b","role":"assistant"}}],"model":"m","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":9,"total_tokens":11}}"#;
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", None, Some(req.len() as u64));
    assert_eq!(m.request_body(req, true), None);
    m.response_head(t0, 200, Some(b"application/json"), None, None);
    m.response_body(t0, resp, &mut ());
    m.response_end(t0);
    m.finish(t0, TransportEnd::Complete)
}

fn record_allocations(metrics: Metrics) {
    let tap = TapLabels {
        tap: Arc::from("t"),
        boundary: tokentap_core::tap::Boundary::Engine,
    };
    let r = finished_non_streamed();
    assert_eq!((r.input_tokens, r.output_tokens), (Some(9), Some(2)));
    let model = metrics.model_label(Some("m"));
    metrics.record(&tap, &model, &r);
    let info = allocation_counter::measure(|| {
        for _ in 0..100 {
            metrics.record(&tap, &model, &r);
        }
    });
    assert_eq!(
        info.count_total, 0,
        "{} allocations over 100 records",
        info.count_total
    );
}
