//! The `CallMeter` over real MCP traffic: wire captures of the official
//! Python SDK (`mcp` 1.30.0 and 2.3.0, client and server, on loopback),
//! replayed read by read with their recorded times
//! (`tests/fixtures/mcp/`: the raw logs and `convert.py`'s replays).

use super::meter::CallLimits;
use super::*;
use crate::record::TransportEnd;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

fn bytes(s: &str) -> Vec<u8> {
    // The logs are latin-1: one char per byte.
    s.chars().map(|c| c as u32 as u8).collect()
}

/// Replays a capture through one `CallMeter` per exchange.
fn replay(name: &str, protocol: CallProtocol) -> (Collect, Instant) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/mcp")
        .join(format!("{name}.json"));
    let steps: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let t0 = Instant::now();
    let mut sink = Collect::default();
    let mut meters: HashMap<u64, CallMeter> = HashMap::new();
    for s in &steps {
        let at = t0 + Duration::from_secs_f64(s["t"].as_f64().unwrap());
        let conn = s["conn"].as_u64().unwrap();
        let header = |k: &str| s["headers"][k].as_str().map(bytes);
        match s["step"].as_str().unwrap() {
            "request" => {
                if let Some(mut m) = meters.remove(&conn) {
                    m.finish(at, TransportEnd::Complete, &mut sink);
                }
                let mut m = CallMeter::new(protocol, CallLimits::default(), at, SystemTime::now())
                    .with_links(true);
                let trace =
                    header("traceparent").and_then(|t| crate::trace::TraceParent::parse(&t));
                m.request_head(&CallHead {
                    method: s["method"].as_str().unwrap(),
                    path: s["path"].as_str().unwrap(),
                    trace,
                    request_id: None,
                });
                m.request_body(&bytes(s["body"].as_str().unwrap()), true, &mut sink);
                meters.insert(conn, m);
            }
            "response_head" => {
                let m = meters.get_mut(&conn).unwrap();
                let ct = header("content-type");
                let ce = header("content-encoding");
                m.response_head(
                    at,
                    s["status"].as_u64().unwrap() as u16,
                    ct.as_deref(),
                    ce.as_deref(),
                    &mut sink,
                );
            }
            "body" => {
                let m = meters.get_mut(&conn).unwrap();
                m.response_body(at, &bytes(s["data"].as_str().unwrap()), &mut sink);
            }
            "end" => {
                if let Some(mut m) = meters.remove(&conn) {
                    m.response_end(at, &mut sink);
                    m.finish(at, TransportEnd::Complete, &mut sink);
                }
            }
            "gone" => {
                if let Some(mut m) = meters.remove(&conn) {
                    m.finish(at, TransportEnd::ClientGone, &mut sink);
                }
            }
            other => panic!("step {other}"),
        }
    }
    (sink, t0)
}

/// (method, tool, error, progress) of every call, in completion order.
fn summary(c: &Collect) -> Vec<(McpMethod, Option<&str>, McpError, u32)> {
    c.calls
        .iter()
        .map(|c| match &c.kind {
            CallKind::Mcp(m) => (m.method, m.tool.as_deref(), m.error, m.progress),
            other => panic!("not MCP: {other:?}"),
        })
        .collect()
}

fn ms(c: &Call) -> u128 {
    c.duration.as_millis()
}

use McpError as E;
use McpMethod as M;

#[test]
fn streamable_http_with_sse_answers_and_a_session() {
    let (c, _) = replay("v1_sh", CallProtocol::Tool);
    assert_eq!(
        summary(&c),
        vec![
            (M::Initialize, None, E::None, 0),
            (M::ToolsList, None, E::None, 0),
            (M::ToolsCall, Some("lookup"), E::None, 0),
            (M::ToolsCall, Some("fail"), E::ToolError, 0),
            (M::ToolsCall, Some("slow"), E::None, 2),
        ]
    );
    // lookup sleeps 50 ms: request 0.809 s, answer event 0.862 s.
    assert_eq!(ms(&c.calls[2]), 53);
    assert_eq!(c.calls[2].ttfb, Some(Duration::from_millis(2)));
    // slow: two progress events 22 ms apart, then its answer.
    assert_eq!(c.calls[4].first_event, Some(Duration::from_millis(2)));
    assert_eq!(ms(&c.calls[4]), 46);
    assert!(c.calls.iter().all(
        |c| matches!(&c.kind, CallKind::Mcp(m) if m.transport == McpTransport::StreamableHttp)
    ));
    assert_eq!(
        c.count(MessageCount::Notification),
        1,
        "notifications/initialized"
    );
    assert_eq!(c.count(MessageCount::Unmatched), 0);
    // Links: the call and its result, hashed.
    let lookup = &c.calls[2];
    assert_eq!(
        lookup.links.calls_in.as_slice(),
        &[crate::links::call(
            "lookup",
            Some(&serde_json::json!({"city": "Paris"}))
        )]
    );
    assert_eq!(
        lookup.links.results_out.as_slice(),
        &[crate::links::result("Sunny in Paris")]
    );
}

#[test]
fn the_older_http_sse_transport_is_matched_by_session_and_id() {
    let (c, _) = replay("v1_sse", CallProtocol::Tool);
    assert_eq!(
        summary(&c),
        vec![
            (M::Initialize, None, E::None, 0),
            (M::ToolsList, None, E::None, 0),
            (M::ToolsCall, Some("lookup"), E::None, 0),
            (M::ToolsCall, Some("fail"), E::ToolError, 0),
            (M::ToolsCall, Some("slow"), E::None, 2),
        ]
    );
    // lookup: POSTed at 0.749 s, answered on the stream at 0.802 s.
    assert_eq!(ms(&c.calls[2]), 53);
    assert!(c
        .calls
        .iter()
        .all(|c| matches!(&c.kind, CallKind::Mcp(m) if m.transport == McpTransport::Sse)));
    assert!(c.table.is_empty(), "every call answered");
    assert_eq!(c.count(MessageCount::Unmatched), 0);
}

#[test]
fn the_2026_protocol_with_json_answers_and_progress_over_sse() {
    let (c, _) = replay("v2_sh_auto", CallProtocol::Tool);
    assert_eq!(
        summary(&c),
        vec![
            (M::ServerDiscover, None, E::None, 0),
            (M::ToolsList, None, E::None, 0),
            (M::ToolsCall, Some("lookup"), E::None, 0),
            (M::ToolsCall, Some("fail"), E::ToolError, 0),
            (M::ToolsCall, Some("slow"), E::None, 2),
        ]
    );
    // A JSON answer completes at the body's end.
    assert_eq!(ms(&c.calls[2]), 54);
    assert_eq!(c.calls[2].first_event, None, "a JSON answer is no event");
    assert!(
        c.calls[4].first_event.is_some(),
        "slow's progress came as events"
    );
    let (c, _) = replay("v2_sh_auto_unknown", CallProtocol::Tool);
    assert_eq!(
        summary(&c)[1],
        (M::ToolsCall, Some("nope"), E::ToolError, 0)
    );
    let (c, _) = replay("v2_sh_json", CallProtocol::Tool);
    // json_response: progress is dropped by the server.
    assert_eq!(summary(&c)[4], (M::ToolsCall, Some("slow"), E::None, 0));
    // A JSON answer is no event: time to first byte, no first event.
    assert!(c.calls.iter().all(|c| c.first_event.is_none()));
    assert!(c.calls.iter().all(|c| c.ttfb.is_some()));
}

#[test]
fn a_discover_probe_refused_by_an_older_server_is_an_http_error() {
    let (c, _) = replay("v2client_v1server_auto", CallProtocol::Tool);
    let s = summary(&c);
    assert_eq!(s[0], (M::ServerDiscover, None, E::HttpError, 0));
    // ... then the classic handshake on the same connection.
    assert_eq!(s[1].0, M::Initialize);
    assert!(s.contains(&(M::ToolsCall, Some("lookup"), E::None, 0)));
}

/// Drives one exchange by hand.
fn exchange(
    body: &[u8],
    status: u16,
    content_type: &[u8],
    answer: &[(u64, &[u8])],
    end: TransportEnd,
) -> Collect {
    let t0 = Instant::now();
    let mut sink = Collect::default();
    let mut m = CallMeter::new(
        CallProtocol::Tool,
        CallLimits::default(),
        t0,
        SystemTime::now(),
    );
    m.request_head(&CallHead {
        method: "POST",
        path: "/mcp",
        ..CallHead::default()
    });
    m.request_body(body, true, &mut sink);
    m.response_head(
        t0 + Duration::from_millis(1),
        status,
        Some(content_type),
        None,
        &mut sink,
    );
    let mut last = 1;
    for (at, piece) in answer {
        m.response_body(t0 + Duration::from_millis(*at), piece, &mut sink);
        last = *at;
    }
    if end == TransportEnd::Complete {
        m.response_end(t0 + Duration::from_millis(last), &mut sink);
    }
    m.finish(t0 + Duration::from_millis(last + 1), end, &mut sink);
    sink
}

#[test]
fn a_batch_is_timed_call_by_call_and_capped() {
    let body = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}},
        {"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}]"#;
    let c = exchange(
        body,
        200,
        b"text/event-stream",
        &[
            (30, b"data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\n\n"),
            (70, b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32603,\"message\":\"x\"}}\n\n"),
        ],
        TransportEnd::Complete,
    );
    assert_eq!(
        summary(&c),
        vec![
            (M::ToolsCall, Some("b"), E::None, 0),
            (M::ToolsCall, Some("a"), E::InternalError, 0)
        ]
    );
    assert_eq!((ms(&c.calls[0]), ms(&c.calls[1])), (30, 70));
    assert!(matches!(&c.calls[1].kind, CallKind::Mcp(m) if m.code == Some(-32603) && m.batch));
    assert_eq!(c.count(MessageCount::Notification), 1);

    let one = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
    let big = format!("[{}]", vec![one; 10_000].join(","));
    let c = exchange(
        big.as_bytes(),
        200,
        b"text/event-stream",
        &[],
        TransportEnd::ClientGone,
    );
    assert_eq!(c.calls.len(), jsonrpc::MAX_TRACKED);
    assert!(c
        .calls
        .iter()
        .all(|c| matches!(&c.kind, CallKind::Mcp(m) if m.error == E::Cancelled)));
    assert_eq!(
        c.count(MessageCount::Untracked),
        (10_000 - jsonrpc::MAX_TRACKED) as u64
    );
}

#[test]
fn unanswered_calls_say_why() {
    let req = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}"#;
    let s = |c: &Collect| summary(c)[0].2;
    // The stream ended without the answer.
    assert_eq!(
        s(&exchange(
            req,
            200,
            b"text/event-stream",
            &[],
            TransportEnd::Complete
        )),
        E::NoResponse
    );
    // The server broke the connection.
    let broken = TransportEnd::Upstream(crate::record::ErrorType::ConnectionReset);
    assert_eq!(
        s(&exchange(req, 200, b"text/event-stream", &[], broken)),
        E::TransportError
    );
    // An error status with an id-less JSON-RPC error.
    let c = exchange(
        req,
        400,
        b"application/json",
        &[(
            2,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request"}}"#,
        )],
        TransportEnd::Complete,
    );
    assert_eq!(s(&c), E::HttpError);
    assert!(matches!(&c.calls[0].kind, CallKind::Mcp(m) if m.code == Some(-32600)));
    // Not JSON-RPC at all: one opaque call.
    let c = exchange(
        b"hello",
        200,
        b"text/plain",
        &[(3, b"hi")],
        TransportEnd::Complete,
    );
    assert!(matches!(
        c.calls[0].kind,
        CallKind::Http {
            status: Some(200),
            outcome: crate::record::Outcome::Ok
        }
    ));
    // Invalid UTF-8 in the answer: counted, and the call ends unmeasured
    // (that event may have been its answer), not unanswered.
    let c = exchange(
        req,
        200,
        b"text/event-stream",
        &[(4, b"data: \xff\xfe\n\n")],
        TransportEnd::Complete,
    );
    assert_eq!(s(&c), E::Unmeasured);
    assert_eq!(c.count(MessageCount::Invalid), 1);
}

#[test]
fn an_endless_answer_stays_bounded() {
    let req = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
    let t0 = Instant::now();
    let mut sink = Collect::default();
    let mut m = CallMeter::new(
        CallProtocol::Tool,
        CallLimits::default(),
        t0,
        SystemTime::now(),
    );
    m.request_head(&CallHead {
        method: "POST",
        path: "/mcp",
        ..CallHead::default()
    });
    m.request_body(req, true, &mut sink);
    m.response_head(t0, 200, Some(b"text/event-stream"), None, &mut sink);
    // One event that never ends: past the decoder's cap, decoding stops.
    let line = vec![b'x'; 64 * 1024];
    m.response_body(t0, b"data: ", &mut sink);
    for _ in 0..200 {
        m.response_body(t0, &line, &mut sink);
    }
    m.finish(
        t0 + Duration::from_secs(9),
        TransportEnd::ClientGone,
        &mut sink,
    );
    assert_eq!(summary(&sink)[0].2, E::Cancelled);
}

#[test]
fn the_pending_table_is_bounded_and_expires() {
    let mut t = Pending::new(2, Duration::from_secs(10));
    let t0 = Instant::now();
    let origin = exchange::Origin {
        t0,
        started_at: SystemTime::now(),
        trace: None,
        request_id: None,
        transport: McpTransport::Sse,
        with_links: false,
    };
    let call = |id: u64| exchange::Started::new(&origin, jsonrpc::Id(id), "ping", None, 10, false);
    assert_eq!(t.insert(1, jsonrpc::Id(1), call(1)), 0);
    assert_eq!(t.insert(1, jsonrpc::Id(2), call(2)), 0);
    assert_eq!(
        t.insert(1, jsonrpc::Id(3), call(3)),
        1,
        "the oldest evicted"
    );
    assert!(t.take(1, jsonrpc::Id(1)).is_none());
    assert!(t.take(2, jsonrpc::Id(2)).is_none(), "another session");
    let mut expired = Vec::new();
    t.expire(t0 + Duration::from_secs(11), &mut |c| expired.push(c));
    assert_eq!(expired.len(), 2);
    assert!(expired
        .iter()
        .all(|c| matches!(&c.kind, CallKind::Mcp(m) if m.error == E::Timeout)));
    assert_eq!(expired[0].duration, Duration::from_secs(10));
    assert!(t.is_empty());
}
