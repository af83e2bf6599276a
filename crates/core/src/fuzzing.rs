//! Entry points for fuzzing: each takes arbitrary bytes and must never
//! panic, loop or grow without bound. The cargo-fuzz targets in `fuzz/`
//! call them under libFuzzer; `make test` runs them over the seed corpus
//! (`fuzz/corpus/<target>/`) as ordinary tests, so every crash ever found
//! stays a regression test.

use crate::chunked::ChunkedScan;
use crate::decode::request::{parse_request_with, Hashes};
use crate::decode::sse::{SseDecoder, SseError, SseItem, SseLimits};
use crate::decode::{openai, verdict};
use crate::record::{Meter, MeterLimits, TransportEnd};
use std::time::{Duration, Instant, SystemTime};

/// Small caps, so the fuzzer reaches the limits too.
const LIMITS: SseLimits = SseLimits {
    max_line_bytes: 4096,
    max_event_bytes: 8192,
};

/// Cuts `data` into pieces: each piece's length comes from the byte before
/// it, so the fuzzer controls the chunking as well as the content.
fn pieces(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        let (&n, tail) = rest.split_first()?;
        let take = (usize::from(n) % 64 + 1).min(tail.len());
        let (piece, after) = tail.split_at(take);
        rest = after;
        Some(piece)
    })
}

/// The SSE decoder, fed in fuzzer-chosen pieces; every event is classified
/// as the proxy would. The same bytes fed one at a time, so that no event
/// is ever dispatched from the piece it came in, give the same items and
/// the same failure.
pub fn sse(data: &[u8]) {
    let chosen = sse_items(pieces(data), true);
    let one_by_one = sse_items(pieces(data).flat_map(|p| p.chunks(1)), false);
    debug_assert_eq!(chosen, one_by_one);
}

/// What the decoder said: each item (0 a comment, 1 an event; its type
/// and data), then the failure if any.
type SseSaid = (Vec<(u8, Vec<u8>, Vec<u8>)>, Option<SseError>);

fn sse_items<'a>(pieces: impl Iterator<Item = &'a [u8]>, classify: bool) -> SseSaid {
    let mut d = SseDecoder::new(LIMITS);
    let mut items = Vec::new();
    for piece in pieces {
        let r = d.feed(piece, &mut |item| match item {
            SseItem::Event { event, data } => {
                if classify {
                    let _ = openai::classify_event(event, data);
                }
                items.push((1, event.to_vec(), data.to_vec()));
            }
            SseItem::Comment(c) => items.push((0, Vec::new(), c.to_vec())),
        });
        if r.is_err() {
            break;
        }
    }
    (items, d.failed())
}

/// The dialect classifiers: an event body, a JSON answer, a guardrail verdict.
pub fn classify(data: &[u8]) {
    use crate::decode::dialect::Dialect;
    for d in [
        Dialect::OpenAi,
        Dialect::Responses,
        Dialect::Anthropic,
        Dialect::Ollama,
        Dialect::Tgi,
    ] {
        let _ = d.classify_event(b"", data);
        let _ = d.classify_event(b"error", data);
        let _ = d.classify_json(data);
    }
    let _ = verdict::verdict(data);
    // Usage injection: the request rewrite and the response stripper.
    let _ = crate::inject::rewrite(data);
    let mut s = crate::inject::UsageStripper::default();
    for piece in pieces(data) {
        let _ = s.filter(piece, false);
    }
    let _ = s.filter(b"", true);
}

/// The request scanner with every hash on (fingerprint, prompt prefixes,
/// links) and the tokenizer estimate of the prompt; then as a compound
/// system's request (its links).
pub fn request(data: &[u8]) {
    let _ = parse_request_with(
        data,
        Hashes {
            fingerprint: true,
            prefixes: true,
            estimate: Some(crate::decode::tokens::Estimator::new(
                crate::decode::tokens::Tokenizer::O200kBase,
            )),
            links: true,
            app_links: false,
        },
    );
    let _ = parse_request_with(
        data,
        Hashes {
            app_links: true,
            ..Hashes::default()
        },
    );
}

/// A whole request through the `Meter`: the first byte picks the response
/// kind, the rest is the body in fuzzer-chosen pieces.
/// `t0` is the request's start (the fuzz target reads the clock).
pub fn meter(data: &[u8], t0: Instant) {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let limits = MeterLimits {
        request_body_bytes: 4096,
        json_body_bytes: 8192,
        sse: LIMITS,
    };
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut m = Meter::new(t0, wall, limits).with_prefixes(true);
    let req = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    m.request_head("/v1/chat/completions", Some(b"f-1"), Some(req.len() as u64));
    let _ = m.request_body(req, true);
    let (ctype, coding): (&[u8], Option<&[u8]>) = match kind % 4 {
        0 => (b"text/event-stream", None),
        1 => (b"application/json", None),
        2 => (b"text/event-stream", Some(b"gzip")),
        _ => (b"text/plain", None),
    };
    m.response_head(t0, 200, Some(ctype), coding, None);
    let mut at = t0;
    for piece in pieces(body) {
        at += Duration::from_micros(100);
        m.response_body(at, piece, &mut ());
    }
    m.response_end(at);
    let _ = m.finish(at, TransportEnd::Complete);
}

/// The chunked-body scan, fed in fuzzer-chosen pieces: it never claims
/// more bytes or payload than it was given, and takes nothing once done.
pub fn chunked(data: &[u8]) {
    let mut scan = ChunkedScan::default();
    let mut given = 0u64;
    for piece in pieces(data) {
        let done_before = scan.is_done();
        given += piece.len() as u64;
        match scan.feed(piece, |_| {}) {
            Ok(used) => {
                debug_assert!(used <= piece.len());
                debug_assert!(!done_before || used == 0);
            }
            Err(_) => break,
        }
    }
    debug_assert!(scan.payload_len() <= given);
}

/// An OTLP trace export, as the joiner reads one: the first byte picks
/// protobuf or JSON, the rest is the body. Every span handed on becomes a
/// join record (`correlate::span::record`), as in the joiner. Invariant:
/// the reader's counts add up, and no more spans are handed on than the
/// cap lets through.
pub fn otlp(data: &[u8], t0: Instant) {
    use crate::otlp::{read, Attrs, Encoding, Limits};
    let Some((pick, body)) = data.split_first() else {
        return;
    };
    let encoding = if pick % 2 == 0 {
        Encoding::Protobuf
    } else {
        Encoding::Json
    };
    let limits = Limits {
        max_spans: 64,
        max_span_bytes: 4096,
    };
    let mut handed = 0u64;
    if let Ok(s) = read(body, encoding, limits, |span| {
        handed += 1;
        let trace = span.trace_id.get(..16).and_then(|b| b.try_into().ok());
        let _ = crate::correlate::span::record(
            &Attrs(&span.attributes),
            trace.unwrap_or([0; 16]),
            [0; 8],
            t0,
            16,
        );
    }) {
        debug_assert_eq!(s.decoded, handed);
        debug_assert!(handed <= 64);
        debug_assert_eq!(s.spans, s.decoded + s.rejected());
    }
}

/// A target's name (its corpus directory) and entry point (the bytes, and
/// an instant for the targets that need one: the caller reads the clock).
pub type Target = (&'static str, fn(&[u8], Instant));

pub const TARGETS: [Target; 6] = [
    ("sse", |d, _| sse(d)),
    ("classify", |d, _| classify(d)),
    ("request", |d, _| request(d)),
    ("meter", meter),
    ("chunked", |d, _| chunked(d)),
    ("otlp", otlp),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_corpus_runs_clean() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let mut runs = 0;
        for (name, target) in TARGETS {
            let dir = root.join(name);
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                target(&data, Instant::now());
                runs += 1;
            }
        }
        assert!(runs >= 20, "{runs} corpus entries");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
            for (_, target) in TARGETS {
                target(&data, Instant::now());
            }
        }
    }
}
