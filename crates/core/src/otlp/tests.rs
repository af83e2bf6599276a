use super::messages::{AnyValue, KeyValue, Value};
use super::*;

/// The outer messages, with fields the reader must skip.
#[derive(Clone, PartialEq, prost::Message)]
struct Export {
    #[prost(message, repeated, tag = "1")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    resource: Option<KeyValue>,
    #[prost(message, repeated, tag = "2")]
    scope_spans: Vec<ScopeSpans>,
    #[prost(string, tag = "3")]
    schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ScopeSpans {
    #[prost(message, repeated, tag = "2")]
    spans: Vec<FullSpan>,
}

/// A span with fields the reader skips (name, events).
#[derive(Clone, PartialEq, prost::Message)]
struct FullSpan {
    #[prost(bytes = "vec", tag = "1")]
    trace_id: Vec<u8>,
    #[prost(string, tag = "5")]
    name: String,
    #[prost(fixed64, tag = "7")]
    start: u64,
    #[prost(message, repeated, tag = "9")]
    attributes: Vec<KeyValue>,
    #[prost(message, repeated, tag = "11")]
    events: Vec<KeyValue>,
}

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn span(i: u8) -> FullSpan {
    FullSpan {
        trace_id: vec![i; 16],
        name: "POST".into(),
        start: 1_000 + u64::from(i),
        attributes: vec![kv("tokentap.tap", Value::StringValue(format!("t{i}")))],
        events: vec![kv("e", Value::IntValue(1))],
    }
}

fn export(per_scope: &[u8]) -> Vec<u8> {
    let scope = |ids: &[u8]| ScopeSpans {
        spans: ids.iter().map(|i| span(*i)).collect(),
    };
    let (a, b) = per_scope.split_at(per_scope.len() / 2);
    Export {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(kv("service.name", Value::StringValue("x".into()))),
                scope_spans: vec![scope(a)],
                schema_url: "u".into(),
            },
            ResourceSpans {
                resource: None,
                scope_spans: vec![scope(&[]), scope(b)],
                schema_url: String::new(),
            },
        ],
    }
    .encode_to_vec()
}

fn taps(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            use crate::correlate::span::Attributes;
            Attrs(&s.attributes)
                .str("tokentap.tap")
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn every_span_is_handed_on_in_order_and_the_rest_skipped() {
    let body = export(&[1, 2, 3]);
    let mut got = Vec::new();
    let s = read(&body, Encoding::Protobuf, Limits::default(), |sp| {
        got.push(sp)
    })
    .unwrap();
    assert_eq!(taps(&got), ["t1", "t2", "t3"]);
    assert_eq!(got[0].trace_id, vec![1; 16]);
    assert_eq!(got[2].start_time_unix_nano, 1_003);
    assert_eq!((s.spans, s.decoded, s.rejected()), (3, 3, 0));
    assert_eq!(response(&s), ExportResponse::default());
}

#[test]
fn spans_over_the_cap_are_rejected_as_a_partial_success() {
    let body = export(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    let limits = Limits {
        max_spans: 4,
        ..Limits::default()
    };
    let mut got = Vec::new();
    let s = read(&body, Encoding::Protobuf, limits, |sp| got.push(sp)).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!((s.spans, s.over_cap), (10, 6));
    let p = response(&s).partial_success.unwrap();
    assert_eq!(p.rejected_spans, 6);
    assert!(p.error_message.contains("6 over"), "{}", p.error_message);
    let j: serde_json::Value = serde_json::from_str(&response_json(&s)).unwrap();
    assert_eq!(j["partialSuccess"]["rejectedSpans"], "6");
}

#[test]
fn a_span_over_its_size_cap_is_rejected_alone() {
    let mut big = span(9);
    big.name = "n".repeat(100_000);
    let body = Export {
        resource_spans: vec![ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                spans: vec![span(1), big, span(2)],
            }],
            schema_url: String::new(),
        }],
    }
    .encode_to_vec();
    let mut got = Vec::new();
    let s = read(&body, Encoding::Protobuf, Limits::default(), |sp| {
        got.push(sp)
    })
    .unwrap();
    assert_eq!(taps(&got), ["t1", "t2"]);
    assert_eq!(s.too_large, 1);
}

/// A broken export hands on nothing, however far it got.
#[test]
fn broken_framing_hands_on_no_span() {
    let body = export(&[1, 2, 3, 4]);
    for cut in [body.len() - 1, body.len() - 7, body.len() / 2, 3] {
        let mut n = 0;
        let r = read(&body[..cut], Encoding::Protobuf, Limits::default(), |_| {
            n += 1
        });
        assert_eq!((r, n), (Err(Malformed), 0), "cut at {cut}");
    }
    let mut garbage = body.clone();
    garbage.extend_from_slice(&[0xff; 11]);
    assert_eq!(
        read(&garbage, Encoding::Protobuf, Limits::default(), |_| ()),
        Err(Malformed)
    );
}

/// 8 MiB of empty spans: counted, at most the cap decoded.
#[test]
fn millions_of_empty_spans_cost_only_the_cap() {
    let n_spans = 4 << 20; // two bytes each
    let mut scope = Vec::with_capacity(2 * n_spans);
    for _ in 0..n_spans {
        scope.extend_from_slice(&[0x12, 0x00]);
    }
    let mut rs = vec![0x12];
    prost::encoding::encode_varint(scope.len() as u64, &mut rs);
    rs.extend_from_slice(&scope);
    let mut body = vec![0x0a];
    prost::encoding::encode_varint(rs.len() as u64, &mut body);
    body.extend_from_slice(&rs);
    let mut decoded = 0;
    let s = read(&body, Encoding::Protobuf, Limits::default(), |_| {
        decoded += 1
    })
    .unwrap();
    assert_eq!(s.spans, n_spans as u64);
    assert_eq!(decoded, 65_536);
    assert_eq!(s.over_cap, n_spans as u64 - 65_536);
}

const JSON: &str = r#"{
  "resourceSpans": [
    {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "x"}}]},
     "scopeSpans": [
       {"scope": {"name": "tokentap"},
        "spans": [
          {"traceId": "0102030405060708090A0B0C0D0E0F10", "spanId": "0102030405060708",
           "parentSpanId": "", "name": "POST", "kind": 3,
           "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": 1700000000500000000,
           "attributes": [
             {"key": "tokentap.tap", "value": {"stringValue": "edge"}},
             {"key": "tokentap.e2e", "value": {"doubleValue": 0.5}},
             {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "12"}},
             {"key": "tokentap.token_events.offsets_us", "value": {"arrayValue": {"values": [{"intValue": 5}, {"intValue": "7"}]}}}
           ],
           "events": [{"name": "e"}]}
        ]},
       {"spans": null}
     ]},
    {"scopeSpans": []}
  ]
}"#;

#[test]
fn otlp_json_reads_as_protobuf_does() {
    use crate::correlate::span::Attributes;
    let mut got = Vec::new();
    let s = read(JSON.as_bytes(), Encoding::Json, Limits::default(), |sp| {
        got.push(sp)
    })
    .unwrap();
    assert_eq!(s.decoded, 1);
    let sp = &got[0];
    assert_eq!(sp.trace_id, (1..=16).collect::<Vec<u8>>());
    assert!(sp.parent_span_id.is_empty());
    assert_eq!(sp.start_time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(sp.end_time_unix_nano, 1_700_000_000_500_000_000);
    let a = Attrs(&sp.attributes);
    assert_eq!(a.str("tokentap.tap"), Some("edge"));
    assert_eq!(a.f64("tokentap.e2e"), Some(0.5));
    assert_eq!(a.i64("gen_ai.usage.output_tokens"), Some(12));
    let mut offsets = Vec::new();
    a.i64s("tokentap.token_events.offsets_us", 8, &mut offsets);
    assert_eq!(offsets, [5, 7]);
}

#[test]
fn broken_json_hands_on_no_span_and_a_bad_span_is_rejected_alone() {
    let broken = JSON.replacen("\"scopeSpans\": []", "\"scopeSpans\": {}", 1);
    let mut n = 0;
    assert_eq!(
        read(broken.as_bytes(), Encoding::Json, Limits::default(), |_| {
            n += 1
        }),
        Err(Malformed)
    );
    assert_eq!(n, 0);
    let truncated = &JSON.as_bytes()[..JSON.len() - 3];
    assert_eq!(
        read(truncated, Encoding::Json, Limits::default(), |_| ()),
        Err(Malformed)
    );
    let bad_id = JSON.replacen("0102030405060708090A", "zz02030405060708090A", 1);
    let s = read(bad_id.as_bytes(), Encoding::Json, Limits::default(), |_| ()).unwrap();
    assert_eq!((s.decoded, s.malformed), (0, 1));
}

proptest::proptest! {
    #[test]
    fn any_bytes_read_without_a_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = read(&body, Encoding::Protobuf, Limits::default(), |_| ());
        let _ = read(&body, Encoding::Json, Limits::default(), |_| ());
    }
}

/// The fuzz seeds are what they say: two tokentap spans that make join
/// records, one JSON span.
#[test]
fn the_fuzz_seeds_hold_joinable_spans() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/otlp");
    let pb = std::fs::read(root.join("protobuf-two-spans")).unwrap();
    let mut records = 0;
    let s = read(&pb[1..], Encoding::Protobuf, Limits::default(), |sp| {
        let r = crate::correlate::span::record(
            &Attrs(&sp.attributes),
            sp.trace_id.clone().try_into().unwrap(),
            [0; 8],
            std::time::Instant::now(),
            8,
        )
        .unwrap();
        assert_eq!((&*r.tap, r.events.len()), ("edge", 3));
        records += 1;
    })
    .unwrap();
    assert_eq!((s.spans, records), (2, 2));
    let js = std::fs::read(root.join("json-one-span")).unwrap();
    let s = read(&js[1..], Encoding::Json, Limits::default(), |_| ()).unwrap();
    assert_eq!(s.decoded, 1);
}
