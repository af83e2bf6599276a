//! Joins that do not depend on the order spans arrive in. The reference
//! gateway drops `traceparent`, so the engine and guardrail taps' records
//! are joined by fingerprint (or not at all); a forwarder between the
//! process's span export and the joiner re-sends each span alone after
//! its tap's own delay — as if each tap flushed on its own timer, spans of
//! one request arriving up to 0.9 s apart, in either order. The joiner
//! pairs every request the process's own correlator pairs, and counts
//! every guardrail call.

use crate::attribution::topology_with;
use crate::join::joiner;
use crate::otlp_send::{export, post_export};
use crate::support::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Accepts OTLP/HTTP span exports (answered 200 at once) and re-sends
/// each span alone to `to` after `delay[tap]`.
fn reorder(to: SocketAddr, delay: HashMap<&'static str, Duration>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let delay = delay.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 65536];
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[head_end..head_end + len].to_vec();
                    buf.drain(..head_end + len);
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    let Ok(req) = ExportTraceServiceRequest::decode(&body[..]) else {
                        continue;
                    };
                    for span in req
                        .resource_spans
                        .into_iter()
                        .flat_map(|r| r.scope_spans)
                        .flat_map(|s| s.spans)
                    {
                        let tap = span
                            .attributes
                            .iter()
                            .find(|kv| kv.key == "tokentap.tap")
                            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        let wait = delay.get(tap.as_str()).copied().unwrap_or_default();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            let (status, _) = post_export(to, &export(vec![span]), None).await;
                            assert_eq!(status, 200);
                        });
                    }
                }
            });
        }
    });
    addr
}

fn pairs_of(r: &tokentap_core::correlate::Resolution) -> BTreeSet<(String, String)> {
    r.pairs
        .iter()
        .map(|p| (p.outer.to_string(), p.inner.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_up_to_a_second_apart_in_either_order_join_as_in_one_process() {
    let _g = serial().await;
    let ms = Duration::from_millis;
    for (name, outer, inner) in [
        ("inner spans 0.9 s late", ms(0), ms(900)),
        ("outer spans 0.9 s late", ms(900), ms(0)),
    ] {
        // Settling 1.5 s: longer than the spread of the spans.
        let (j, joined) = joiner("");
        let mut delay = HashMap::new();
        delay.insert("edge", outer);
        delay.insert("gw", outer);
        delay.insert("engine", inner);
        delay.insert("guard", inner / 2);
        let fwd = reorder(j.http, delay);
        let t = topology_with(
            1,
            false,
            true,
            &format!("otlp:\n  endpoint: http://{fwd}\n  metrics: false\n  timeout_seconds: 2\n"),
        );
        let n = 10;
        for i in 0..n {
            let id = format!("order-{i}");
            // Each request its own prompt, as users' are: look-alikes in
            // the fingerprint window would be ambiguous at the joiner,
            // which has no common clock to tell them apart by.
            let body = serde_json::json!({
                "model": "sim-model", "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": format!("question {i} of {name}")}],
            })
            .to_string();
            let r = post(
                t.edge,
                &[("content-type", "application/json"), ("x-request-id", &id)],
                body.as_bytes(),
            )
            .await;
            assert!(r.complete);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut joined_pairs = 0;
        for i in 0..n {
            let id = format!("order-{i}");
            let (here, there) = loop {
                let here = t.m.attributions.resolution_of(&id);
                let there = joined.resolution_of(&id);
                if let (Some(a), Some(b)) = (&here, &there) {
                    if pairs_of(a).len() <= pairs_of(b).len() {
                        break (a.clone(), b.clone());
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "{name}: {id}: in process {:?}, joiner {:?} (joiner: {} ambiguous, {} unjoined, {} by fingerprint)",
                    here.as_ref().map(pairs_of),
                    there.as_ref().map(pairs_of),
                    joined.count("ambiguous"),
                    joined.count("unjoined"),
                    joined.count("joined_fingerprint")
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            assert_eq!(pairs_of(&here), pairs_of(&there), "{name}: {id}");
            assert!(
                pairs_of(&there).contains(&("gw".to_string(), "engine".to_string())),
                "{name}: {id}: the engine joined by fingerprint"
            );
            joined_pairs += there.pairs.len();
        }
        // Every guardrail call counted, joined or not (phase unknown).
        let deadline = Instant::now() + Duration::from_secs(10);
        let calls = loop {
            let s = String::from_utf8(j.registry.encode()).unwrap();
            let c = prom_totals(&s, "tokentap_guardrail_calls_total").0;
            if c >= n as f64 || Instant::now() > deadline {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let here_calls = prom_totals(&t.m.scrape(), "tokentap_guardrail_calls_total").0;
        println!(
            "{name}: {n} requests without traceparent past the gateway: {joined_pairs} pairs at the joiner, as in the process; guardrail calls counted {calls} (process {here_calls}); {} ambiguous, {} unjoined",
            joined.count("ambiguous"),
            joined.count("unjoined")
        );
        assert_eq!(calls, n as f64, "{name}: guardrail calls at the joiner");
        let _ = &t;
        assert_eq!(
            here_calls, n as f64,
            "{name}: guardrail calls in the process"
        );
    }
}
