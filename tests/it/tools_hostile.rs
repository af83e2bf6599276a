//! Bad input on a tool tap: malformed JSON-RPC, a batch of 10,000 calls, an
//! SSE answer that never ends, a server that never answers, invalid UTF-8.
//! Each time the client gets the bytes it gets direct, the tap counts what
//! it could not read, and nothing it holds grows with the input.

use crate::support::*;
use crate::tools::sample;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a scripted server answers: pieces written with a pause before each.
#[derive(Clone)]
struct Answer {
    pieces: Vec<(Duration, Vec<u8>)>,
    /// Keep the connection open (silent) after the pieces.
    hang: bool,
}

/// A server that reads one request (head and Content-Length body) per
/// connection and plays `answer`.
async fn scripted(answer: Answer) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                let (end, len) = loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&req[..i]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (i + 4, len);
                    }
                };
                while req.len() < end + len {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                for (pause, bytes) in &answer.pieces {
                    tokio::time::sleep(*pause).await;
                    if s.write_all(bytes).await.is_err() {
                        return;
                    }
                }
                if answer.hang {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            });
        }
    });
    addr
}

fn json_answer(body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", bytes.len()).into_bytes();
    c.extend_from_slice(bytes);
    c.extend_from_slice(b"\r\n");
    c
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// One request's raw answer, read for at most `within` (or to its end).
async fn read_from(addr: SocketAddr, body: &[u8], within: Duration) -> Vec<u8> {
    let request = tokentap_net::client::request_bytes(
        "POST",
        "/mcp",
        "127.0.0.1",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        body,
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// The same request direct and through a tool tap: the raw answers.
async fn both(
    upstream: SocketAddr,
    tap: SocketAddr,
    body: &[u8],
    within: Duration,
) -> (Vec<u8>, Vec<u8>) {
    let direct = read_from(upstream, body, within).await;
    let through = read_from(tap, body, within).await;
    (direct, through)
}

/// The body after the head (the tap's own response headers may differ:
/// `date`, `connection`).
fn body_of(raw: &[u8]) -> &[u8] {
    let i = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| i + 4);
    &raw[i..]
}

fn msgs(s: &str, kind: &str) -> f64 {
    sample(
        s,
        &format!("tokentap_mcp_messages_total{{boundary=\"tool\",kind=\"{kind}\",tap=\"mcp\"}}"),
    )
}

fn calls(s: &str, method: &str, error: &str) -> f64 {
    sample(
        s,
        &format!("mcp_client_operation_duration_seconds_count{{boundary=\"tool\",error_type=\"{error}\",gen_ai_tool_name=\"\",mcp_method_name=\"{method}\",tap=\"mcp\"}}"),
    )
}

fn tool_tap(upstream: SocketAddr, extra: &str) -> (Multi, SocketAddr) {
    let listen = free_addr();
    (
        Multi::start(&tap_yaml("mcp", "tool", listen, upstream, extra), ""),
        listen,
    )
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_rpc_and_invalid_utf8_flow_as_direct_and_are_counted() {
    let _g = serial().await;
    // The server answers whatever it got with a reply holding invalid UTF-8.
    let mut reply =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\""
            .to_vec();
    reply.extend_from_slice(&[0xff, 0xfe, 0x80]);
    reply.extend_from_slice(b"\"}]}}");
    let up = scripted(Answer {
        pieces: vec![(Duration::ZERO, json_answer(&reply))],
        hang: false,
    })
    .await;
    let (tap, listen) = tool_tap(up, "");
    for body in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"[..],
        b"[1, 2, {\"not\": \"rpc\"}]",
        b"\xff\xfe{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
    ] {
        let (d, t) = both(up, listen, body, Duration::from_secs(2)).await;
        assert_eq!(body_of(&d), body_of(&t), "the answer as direct");
        assert_eq!(body_of(&t), &reply[..]);
    }
    settle().await;
    let s = tap.scrape();
    assert!(
        msgs(&s, "invalid") >= 3.0,
        "three bodies are no JSON-RPC:\n{s}"
    );
    // The one valid call: its answer is not valid UTF-8 JSON, so unread.
    let listed = calls(&s, "tools/list", "") + calls(&s, "tools/list", "unmeasured");
    assert_eq!(listed, 1.0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_ten_thousand_calls_is_forwarded_whole_and_timed_up_to_its_cap() {
    let _g = serial().await;
    let n = 10_000;
    let batch: Vec<String> = (0..n)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"t\"}}}}"))
        .collect();
    let body = format!("[{}]", batch.join(","));
    let answers: Vec<String> = (0..n)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":{{\"content\":[]}}}}"))
        .collect();
    let reply = format!("[{}]", answers.join(","));
    let up = scripted(Answer {
        pieces: vec![(Duration::ZERO, json_answer(reply.as_bytes()))],
        hang: false,
    })
    .await;
    let (tap, listen) = tool_tap(up, "");
    let (d, t) = both(up, listen, body.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(body_of(&d).len(), reply.len());
    assert_eq!(body_of(&d), body_of(&t), "the whole answer, as direct");
    settle().await;
    let s = tap.scrape();
    let timed = sample(&s, "mcp_client_operation_duration_seconds_count{boundary=\"tool\",error_type=\"\",gen_ai_tool_name=\"t\",mcp_method_name=\"tools/call\",tap=\"mcp\"}");
    assert_eq!(timed, 64.0, "the first 64 calls of a batch are timed");
    assert_eq!(
        msgs(&s, "untracked"),
        (2 * (n - 64)) as f64,
        "the rest of the requests and their answers, counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_answer_that_never_ends_and_a_server_that_never_answers_end_their_calls() {
    let _g = serial().await;
    // An SSE answer: a progress notification every 20 ms, never the answer.
    let note = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"still here\"}}\n\n";
    let mut pieces = vec![(Duration::ZERO, SSE_HEAD.to_vec())];
    pieces.extend((0..200).map(|_| (Duration::from_millis(20), chunk(note))));
    let endless = scripted(Answer { pieces, hang: true }).await;
    let (tap, listen) = tool_tap(endless, "");
    let call =
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}";
    let (d, t) = both(endless, listen, call, Duration::from_millis(600)).await;
    // What the client read within the same time: whole events, in order.
    let (d, t) = (body_of(&d), body_of(&t));
    let common = d.len().min(t.len());
    assert!(
        common > 10 * note.len(),
        "the events flowed: {common} bytes"
    );
    assert_eq!(&d[..common], &t[..common], "the same bytes as direct");
    settle().await;
    let s = tap.scrape();
    assert_eq!(sample(&s, "mcp_client_operation_duration_seconds_count{boundary=\"tool\",error_type=\"cancelled\",gen_ai_tool_name=\"slow\",mcp_method_name=\"tools/call\",tap=\"mcp\"}"), 1.0, "the client left: cancelled\n{s}");
    assert!(msgs(&s, "server_notification") >= 10.0);
    drop(tap);

    // A server that accepts and never answers: the tap's first-byte limit
    // ends it (pingora answers 502).
    let silent = scripted(Answer {
        pieces: Vec::new(),
        hang: true,
    })
    .await;
    let (tap, listen) = tool_tap(silent, "    timeouts:\n      first_byte_seconds: 1\n");
    let started = Instant::now();
    let t = read_from(listen, call, Duration::from_secs(5)).await;
    assert!(
        t.starts_with(b"HTTP/1.1 502") || t.starts_with(b"HTTP/1.1 504"),
        "{}",
        String::from_utf8_lossy(&t)
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    settle().await;
    let s = tap.scrape();
    assert_eq!(sample(&s, "mcp_client_operation_duration_seconds_count{boundary=\"tool\",error_type=\"transport_error\",gen_ai_tool_name=\"slow\",mcp_method_name=\"tools/call\",tap=\"mcp\"}"), 1.0, "{s}");
}
