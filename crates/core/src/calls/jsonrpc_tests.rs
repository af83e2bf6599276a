//! Tests of `calls/jsonrpc.rs`.

use super::*;

fn one(s: &str) -> Message<'_> {
    let b = batch(s.as_bytes()).unwrap();
    message(b.tracked[0])
}

#[test]
fn requests_notifications_and_responses() {
    let m = one(r#"{"method":"tools/call","params":{"name":"lookup"},"jsonrpc":"2.0","id":2}"#);
    let Message::Request { id, method, .. } = m else {
        panic!("{m:?}")
    };
    assert_eq!(method, "tools/call");
    assert_eq!(id, Id(crate::hash::of(b"2")));
    assert!(matches!(
        one(r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#),
        Message::Notification { .. }
    ));
    assert!(matches!(
        one(r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#),
        Message::Response {
            id: Some(_),
            error: None,
            ..
        }
    ));
    assert!(matches!(
        one(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#),
        Message::Response {
            id: None,
            error: Some(-32600),
            ..
        }
    ));
    assert!(
        matches!(one(r#"{"id":1,"method":"x"}"#), Message::Invalid),
        "no jsonrpc"
    );
    assert!(matches!(
        one(r#"{"jsonrpc":"2.0","id":1}"#),
        Message::Invalid
    ));
}

#[test]
fn string_and_number_ids_differ() {
    let a = one(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    let b = one(r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#);
    let id = |m: &Message<'_>| match m {
        Message::Request { id, .. } => *id,
        _ => Id(0),
    };
    assert_ne!(id(&a), id(&b));
}

#[test]
fn a_huge_batch_is_counted_not_kept() {
    let one = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
    let body = format!("[{}]", vec![one; 10_000].join(","));
    let b = batch(body.as_bytes()).unwrap();
    assert_eq!(b.total, 10_000);
    assert_eq!(b.tracked.len(), MAX_TRACKED);
    assert_eq!(b.untracked(), 10_000 - MAX_TRACKED);
    assert!(b.is_batch);
}

#[test]
fn not_json_rpc() {
    assert_eq!(batch(b"hello").err(), Some(NotJsonRpc));
    assert_eq!(batch(b"{\"a\":").err(), Some(NotJsonRpc));
    assert_eq!(batch(b"[1,2").err(), Some(NotJsonRpc));
    assert_eq!(batch(b"\xff{}").err(), Some(NotJsonRpc));
    assert!(matches!(
        message(batch(b"[1]").unwrap().tracked[0]),
        Message::Invalid
    ));
}
