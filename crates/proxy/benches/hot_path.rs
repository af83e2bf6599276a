//! Criterion micro-benchmarks of the per-chunk path, in ns per event:
//! the SSE decoder with the OpenAI classifier (alone and with a stream's
//! `Shape`, as the Meter classifies), and the whole recording path
//! (`Meter::response_body` into a `TapSink` with real Prometheus
//! histograms), also with a tiktoken estimate of every event's text
//! (`estimate_tokens`); and the whole measuring of one non-streamed request
//! (the Meter from request line to record, then the record into the
//! metrics), in ns per request, with Prometheus only and with OTLP metrics
//! too. `cargo bench -p tokentap-proxy --bench hot_path` (the request
//! body's parse: `--bench request_body`).
#![allow(clippy::unwrap_used)] // a benchmark's setup

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokentap_core::decode::dialect::Dialect;
use tokentap_core::decode::openai;
use tokentap_core::decode::shape::Shape;
use tokentap_core::decode::sse::{SseDecoder, SseItem, SseLimits};
use tokentap_core::decode::tokens::{Estimator, Tokenizer};
use tokentap_core::record::{Meter, MeterLimits, TransportEnd};
use tokentap_proxy::metrics::otel;
use tokentap_proxy::metrics::{Metrics, TapLabels, TapSink};

const EVENTS: usize = 64;

const LIMITS: MeterLimits = MeterLimits {
    request_body_bytes: 4 << 20,
    json_body_bytes: 16 << 20,
    sse: SseLimits {
        max_line_bytes: 1 << 20,
        max_event_bytes: 1 << 20,
    },
};

/// A vLLM-like chunk per event (one token each), then usage and [DONE].
fn stream() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..EVENTS)
        .map(|i| {
            format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    out.push(b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":64,\"total_tokens\":74}}\n\ndata: [DONE]\n\n".to_vec());
    out
}

/// A fresh SSE decoder fed every piece, each item to `on`.
fn feed_all(pieces: &[Vec<u8>], on: &mut impl FnMut(SseItem<'_>)) {
    let mut d = SseDecoder::new(LIMITS.sse);
    for p in pieces {
        let _ = d.feed(black_box(p), on);
    }
}

fn decode(c: &mut Criterion) {
    let pieces = stream();
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function("sse+classify per event", |b| {
        b.iter(|| {
            feed_all(&pieces, &mut |item| {
                if let SseItem::Event { event, data } = item {
                    let _ = black_box(openai::classify_event(event, data));
                }
            })
        })
    });
    // The two halves of it, so that a change to either shows apart.
    g.bench_function("sse only per event", |b| {
        b.iter(|| {
            feed_all(&pieces, &mut |item| {
                black_box(item);
            })
        })
    });
    let datas: Vec<&[u8]> = pieces
        .iter()
        .filter_map(|p| p.strip_prefix(b"data: "))
        .map(|d| d.trim_ascii_end())
        .collect();
    g.bench_function("classify only per event", |b| {
        b.iter(|| {
            for d in &datas {
                let _ = black_box(openai::classify_event(b"", black_box(d)));
            }
        })
    });
    // As the Meter classifies: one stream's events against its shape.
    g.bench_function("classify with the stream's shape per event", |b| {
        b.iter(|| {
            let mut shape = Shape::default();
            for d in &datas {
                let _ = black_box(shape.classify(Dialect::OpenAi, b"", black_box(d)));
            }
        })
    });
    g.finish();
}

fn record(c: &mut Criterion) {
    let pieces = stream();
    let metrics = Arc::new(Metrics::new(50, Default::default()).unwrap());
    let labels = TapLabels {
        tap: "bench".into(),
        boundary: tokentap_core::tap::Boundary::Engine,
    };
    let req = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(EVENTS as u64));
    for (name, estimator) in [
        ("meter+metrics per event", None),
        (
            "meter+metrics+tiktoken estimate per event",
            Some(Estimator::new(Tokenizer::O200kBase)),
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let t0 = Instant::now();
                    let mut m = Meter::new(t0, SystemTime::now(), LIMITS).with_estimator(estimator);
                    m.request_head("/v1/chat/completions", None, Some(req.len() as u64));
                    let _ = m.request_body(req, true);
                    m.response_head(t0, 200, Some(b"text/event-stream"), None, None);
                    let mut sink = TapSink::new(metrics.clone(), labels.clone(), None);
                    sink.prepare(Some("m"), tokentap_core::decode::Operation::Chat);
                    (m, sink, t0)
                },
                |(mut m, mut sink, t0)| {
                    let mut at = t0;
                    for p in &pieces {
                        at += Duration::from_micros(20_000);
                        m.response_body(at, black_box(p), &mut sink);
                    }
                    black_box(m)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// The S4/S9 request and the simulator's answer to it.
const REQ: &[u8] = br#"{"model":"sim-16x0","stream":false,"max_tokens":16,"messages":[{"role":"user","content":"benchmark"}]}"#;
const RESP: &[u8] = br#"{"choices":[{"finish_reason":"length","index":0,"message":{"content":"0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 ","role":"assistant"}}],"created":0,"id":"sim-0","model":"sim-16x0","object":"chat.completion","usage":{"completion_tokens":16,"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":25}}"#;

/// What a tap does for one non-streamed request, in the hooks' order.
fn one_request(metrics: &Arc<Metrics>, labels: &TapLabels) {
    let t0 = Instant::now();
    let mut m = Meter::new(t0, SystemTime::now(), LIMITS);
    m.request_head("/v1/chat/completions", Some(b"s9"), Some(REQ.len() as u64));
    let _ = m.request_body(black_box(REQ), true);
    let mut sink = TapSink::new(metrics.clone(), labels.clone(), None);
    sink.prepare(m.requested_model(), m.operation());
    m.response_head(
        t0,
        200,
        Some(b"application/json"),
        None,
        Some(RESP.len() as u64),
    );
    m.response_body(t0, black_box(RESP), &mut sink);
    m.response_end(t0);
    let record = m.finish(t0, TransportEnd::Complete);
    let model = sink.model_label(record.model(), record.operation);
    metrics.record(labels, &model, &record);
    black_box(record);
}

fn request(c: &mut Criterion) {
    let labels = TapLabels {
        tap: "bench".into(),
        boundary: tokentap_core::tap::Boundary::Engine,
    };
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Elements(1));
    for (name, metrics) in [
        (
            "meter+metrics per non-streamed request",
            Metrics::new(50, Default::default()).unwrap(),
        ),
        (
            "meter+metrics+otlp per non-streamed request",
            Metrics::new(50, Default::default())
                .unwrap()
                .with_otel(otel::discarding()),
        ),
    ] {
        let metrics = Arc::new(metrics);
        g.bench_function(name, |b| b.iter(|| one_request(&metrics, &labels)));
    }
    g.finish();
}

criterion_group!(benches, decode, record, request);
criterion_main!(benches);
