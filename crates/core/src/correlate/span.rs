//! The join's span: what each tap's per-request OTLP span carries so that
//! `tokentap join`, on another machine, can rebuild the `TapRecord` the
//! in-process correlator would have had — the attribute names (written by
//! the proxy's span pipeline, read by the joiner) and the pure conversion.
//!
//! Every time is a duration from the tap's own request start, on the tap's
//! own monotonic clock; the span's wall-clock start only groups records
//! (fingerprint window) and is never subtracted from another tap's. Never
//! content, never credentials: the fingerprint is a hash.

use super::types::TapRecord;
use crate::links::{Hashes, Links};
use crate::record::{Outcome, Verdict};
use crate::tap::Boundary;
use crate::trace::TraceParent;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The attribute names (OTel span attributes of the tap's span).
pub mod key {
    pub const TAP: &str = "tokentap.tap";
    pub const BOUNDARY: &str = "tokentap.boundary";
    pub const HOP: &str = "tokentap.hop";
    pub const OUTCOME: &str = "tokentap.outcome";
    pub const REQUEST_ID: &str = "tokentap.request_id";
    /// `header` (read from `traceparent`), `created` (the tap made it) or
    /// `none` (the span's trace id is its own: join by fingerprint only).
    pub const TRACE_SOURCE: &str = "tokentap.trace.source";
    /// The request fingerprint, 16 hex digits (a hash of model and
    /// normalised messages).
    pub const FINGERPRINT: &str = "tokentap.fingerprint";
    pub const TTFB: &str = "tokentap.ttfb";
    pub const FIRST_EVENT: &str = "gen_ai.response.time_to_first_chunk";
    pub const TTFT: &str = "tokentap.ttft";
    pub const LAST_TOKEN: &str = "tokentap.last_token";
    pub const E2E: &str = "tokentap.e2e";
    /// The first token events' times, µs from the request start (int array).
    pub const EVENT_OFFSETS: &str = "tokentap.token_events.offsets_us";
    /// Token events in all (more than the offsets when they were capped).
    pub const EVENTS: &str = "tokentap.token_events.count";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const OUTPUT_SOURCE: &str = "tokentap.output_tokens.source";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const INPUT_SOURCE: &str = "tokentap.input_tokens.source";
    pub const VERDICT: &str = "tokentap.guardrail.verdict";
    /// The API dialect read (`openai`, `anthropic`, `gemini`, …).
    pub const DIALECT: &str = "tokentap.dialect";
    /// How it was chosen: `path`, `content`, `config`.
    pub const DIALECT_SOURCE: &str = "tokentap.dialect.source";
    /// A call's span (tool and retrieval taps): `mcp`, `retrieval` or
    /// `http`. A span without it is a request's.
    pub const CALL_KIND: &str = "tokentap.call.kind";
    /// What links the record to the other steps of an agent loop
    /// (`crate::links`): hashes, 16 hex digits each, space-separated.
    pub const LINKS_USERS: &str = "tokentap.links.users";
    pub const LINKS_CALLS_OUT: &str = "tokentap.links.calls_out";
    pub const LINKS_CALLS_IN: &str = "tokentap.links.calls_in";
    pub const LINKS_RESULTS_IN: &str = "tokentap.links.results_in";
    pub const LINKS_RESULTS_OUT: &str = "tokentap.links.results_out";
    /// A compound request's breakdown span (a conclusion, not a request):
    /// how its calls were joined, `trace` or `links`.
    pub const COMPOUND_JOINED_BY: &str = "tokentap.compound.joined_by";
}

/// Typed access to one span's attributes (the joiner implements it over
/// OTLP key-values).
pub trait Attributes {
    fn str(&self, key: &str) -> Option<&str>;
    fn f64(&self, key: &str) -> Option<f64>;
    fn i64(&self, key: &str) -> Option<i64>;
    /// An int array, copied into `out` up to `cap` values.
    fn i64s(&self, key: &str, cap: usize, out: &mut Vec<u32>);
}

/// Why a span is not a tokentap request span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotJoinable {
    /// No `tokentap.tap` or `tokentap.boundary`: another service's span.
    Foreign,
    /// tokentap's, but a value is out of range.
    Malformed,
}

fn seconds(v: Option<f64>) -> Result<Option<Duration>, NotJoinable> {
    match v {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s)
            .map(Some)
            .map_err(|_| NotJoinable::Malformed),
    }
}

/// Longest tap or hop name (and request id) a span may carry: a name is
/// held per record and may become a label value.
pub const MAX_NAME: usize = 128;

/// A name fit to be held: 1 to `MAX_NAME` bytes, no control characters.
fn bounded(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && !name.chars().any(char::is_control)
}

fn parse_hex_u64(s: &str) -> Option<u64> {
    (s.len() == 16)
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

/// The record of one tap's span. `trace_id` and `parent_id` come from the
/// span; `t0` is the joiner's instant for the span's wall-clock start
/// (which only groups records). `max_events` caps the offsets kept.
pub fn record(
    attrs: &impl Attributes,
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    t0: Instant,
    max_events: usize,
) -> Result<TapRecord, NotJoinable> {
    let (Some(tap), Some(boundary)) = (attrs.str(key::TAP), attrs.str(key::BOUNDARY)) else {
        return Err(NotJoinable::Foreign);
    };
    // A breakdown a process already concluded is not a request to join.
    if attrs.str(key::COMPOUND_JOINED_BY).is_some() {
        return Err(NotJoinable::Foreign);
    }
    let boundary = Boundary::from_label(boundary).ok_or(NotJoinable::Malformed)?;
    if !bounded(tap) {
        return Err(NotJoinable::Malformed);
    }
    let hop = match (boundary, attrs.str(key::HOP)) {
        (Boundary::Guardrail, Some(h)) if bounded(h) => Some(Arc::from(h)),
        (Boundary::Guardrail, Some(_)) => return Err(NotJoinable::Malformed),
        (Boundary::Guardrail, None) => Some(Arc::from(tap)),
        _ => None,
    };
    let e2e = seconds(attrs.f64(key::E2E))?.ok_or(NotJoinable::Malformed)?;
    let trace = match attrs.str(key::TRACE_SOURCE) {
        Some("none") => None,
        _ if trace_id == [0; 16] => None,
        _ => Some(TraceParent {
            trace_id,
            parent_id,
            flags: 1,
        }),
    };
    let mut events = Vec::new();
    attrs.i64s(key::EVENT_OFFSETS, max_events, &mut events);
    let count = attrs.i64(key::EVENTS).and_then(|n| usize::try_from(n).ok());
    Ok(TapRecord {
        tap: Arc::from(tap),
        boundary,
        hop,
        trace,
        fingerprint: attrs.str(key::FINGERPRINT).and_then(parse_hex_u64),
        request_id: attrs
            .str(key::REQUEST_ID)
            .filter(|id| id.len() <= MAX_NAME)
            .map(Arc::from),
        t0,
        ttfb: seconds(attrs.f64(key::TTFB))?,
        ttft: seconds(attrs.f64(key::TTFT))?,
        e2e,
        events_truncated: count.is_some_and(|n| n > events.len()),
        events,
        output_tokens: attrs
            .i64(key::OUTPUT_TOKENS)
            .and_then(|n| u64::try_from(n).ok()),
        input_tokens: attrs
            .i64(key::INPUT_TOKENS)
            .and_then(|n| u64::try_from(n).ok()),
        outcome: attrs
            .str(key::OUTCOME)
            .and_then(Outcome::from_label)
            .unwrap_or(Outcome::Unmeasured),
        verdict: attrs
            .str(key::VERDICT)
            .and_then(Verdict::from_label)
            .unwrap_or(Verdict::Unknown),
        links: links_of(attrs),
    })
}

/// The links a span carries (`key::LINKS_*`: space-separated 16-hex-digit
/// hashes, at most `links::MAX_PER_LIST` read per list; others ignored).
fn links_of(attrs: &impl Attributes) -> Links {
    let list = |k: &str| {
        let mut h = Hashes::default();
        for x in attrs
            .str(k)
            .unwrap_or_default()
            .split(' ')
            .filter_map(parse_hex_u64)
            .take(crate::links::MAX_PER_LIST)
        {
            h.push(x);
        }
        h
    };
    Links {
        users: list(key::LINKS_USERS),
        calls_out: list(key::LINKS_CALLS_OUT),
        calls_in: list(key::LINKS_CALLS_IN),
        results_in: list(key::LINKS_RESULTS_IN),
        results_out: list(key::LINKS_RESULTS_OUT),
    }
}

/// A list of hashes as a span carries it; `None` when empty.
pub fn hashes_text(h: &Hashes) -> Option<String> {
    (!h.is_empty()).then(|| {
        h.iter()
            .map(|x| format!("{x:016x}"))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The fingerprint as the span carries it.
pub fn fingerprint_hex(fp: u64) -> String {
    format!("{fp:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// One attribute's value, whichever type it has.
    type Value = (Option<String>, Option<f64>, Option<i64>, Vec<i64>);

    #[derive(Default)]
    struct Map(HashMap<&'static str, Value>);

    impl Map {
        fn s(mut self, k: &'static str, v: &str) -> Self {
            self.0.entry(k).or_default().0 = Some(v.into());
            self
        }
        fn f(mut self, k: &'static str, v: f64) -> Self {
            self.0.entry(k).or_default().1 = Some(v);
            self
        }
        fn i(mut self, k: &'static str, v: i64) -> Self {
            self.0.entry(k).or_default().2 = Some(v);
            self
        }
        fn a(mut self, k: &'static str, v: &[i64]) -> Self {
            self.0.entry(k).or_default().3 = v.to_vec();
            self
        }
    }

    impl Attributes for Map {
        fn str(&self, k: &str) -> Option<&str> {
            self.0.get(k)?.0.as_deref()
        }
        fn f64(&self, k: &str) -> Option<f64> {
            self.0.get(k)?.1
        }
        fn i64(&self, k: &str) -> Option<i64> {
            self.0.get(k)?.2
        }
        fn i64s(&self, k: &str, cap: usize, out: &mut Vec<u32>) {
            if let Some(v) = self.0.get(k) {
                out.extend(v.3.iter().take(cap).filter_map(|n| u32::try_from(*n).ok()));
            }
        }
    }

    #[test]
    fn a_tap_span_becomes_its_record() {
        let attrs = Map::default()
            .s(key::TAP, "gw")
            .s(key::BOUNDARY, "gateway")
            .s(key::OUTCOME, "ok")
            .s(key::TRACE_SOURCE, "header")
            .s(key::FINGERPRINT, &fingerprint_hex(0xabc))
            .f(key::TTFB, 0.002)
            .f(key::TTFT, 0.030)
            .f(key::E2E, 0.250)
            .a(key::EVENT_OFFSETS, &[30_000, 40_000, 50_000])
            .i(key::EVENTS, 5)
            .i(key::OUTPUT_TOKENS, 5);
        let t0 = Instant::now();
        let r = record(&attrs, [7; 16], [1; 8], t0, 2).unwrap();
        assert_eq!(
            (&*r.tap, r.boundary, r.outcome),
            ("gw", Boundary::Gateway, Outcome::Ok)
        );
        assert_eq!(r.trace.map(|t| t.trace_id), Some([7; 16]));
        assert_eq!(r.fingerprint, Some(0xabc));
        assert_eq!(r.ttft, Some(Duration::from_millis(30)));
        assert_eq!(r.events, vec![30_000, 40_000], "capped at 2");
        assert!(r.events_truncated);
        assert_eq!(r.output_tokens, Some(5));
        assert_eq!(r.t0, t0);
    }

    #[test]
    fn a_spans_links_round_trip_capped_and_a_breakdown_span_is_not_a_request() {
        let mut users = Hashes::default();
        for h in [1u64, 0xdead_beef_0000_0001, u64::MAX] {
            users.push(h);
        }
        let text = hashes_text(&users).unwrap();
        assert_eq!(text, "0000000000000001 deadbeef00000001 ffffffffffffffff");
        assert_eq!(hashes_text(&Hashes::default()), None);
        let many: Vec<String> = (0..20u64).map(|i| format!("{i:016x}")).collect();
        let attrs = Map::default()
            .s(key::TAP, "gw")
            .s(key::BOUNDARY, "gateway")
            .f(key::E2E, 0.1)
            .s(key::LINKS_USERS, &text)
            .s(key::LINKS_CALLS_OUT, &many.join(" "))
            .s(key::LINKS_RESULTS_IN, "nothex zz 00000000000000ff");
        let r = record(&attrs, [7; 16], [1; 8], Instant::now(), 2).unwrap();
        assert_eq!(r.links.users, users);
        assert_eq!(
            r.links.calls_out.as_slice().len(),
            crate::links::MAX_PER_LIST
        );
        assert_eq!(r.links.results_in.as_slice(), &[0xff], "the rest ignored");
        let breakdown = attrs.s(key::COMPOUND_JOINED_BY, "links");
        assert_eq!(
            record(&breakdown, [7; 16], [1; 8], Instant::now(), 2).err(),
            Some(NotJoinable::Foreign)
        );
    }

    #[test]
    fn foreign_and_malformed_spans_are_told_apart() {
        let t0 = Instant::now();
        let foreign = Map::default().s("http.route", "/x");
        assert_eq!(
            record(&foreign, [1; 16], [1; 8], t0, 8).err(),
            Some(NotJoinable::Foreign)
        );
        let bad = Map::default()
            .s(key::TAP, "t")
            .s(key::BOUNDARY, "moon")
            .f(key::E2E, 1.0);
        assert_eq!(
            record(&bad, [1; 16], [1; 8], t0, 8).err(),
            Some(NotJoinable::Malformed)
        );
        let negative = Map::default()
            .s(key::TAP, "t")
            .s(key::BOUNDARY, "engine")
            .f(key::E2E, -1.0);
        assert_eq!(
            record(&negative, [1; 16], [1; 8], t0, 8).err(),
            Some(NotJoinable::Malformed)
        );
        let untraced = Map::default()
            .s(key::TAP, "t")
            .s(key::BOUNDARY, "engine")
            .s(key::TRACE_SOURCE, "none")
            .f(key::E2E, 1.0);
        assert!(record(&untraced, [1; 16], [1; 8], t0, 8)
            .unwrap()
            .trace
            .is_none());
    }
}
