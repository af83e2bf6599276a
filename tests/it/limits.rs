//! Client-side limits under abuse: slowloris heads cut at the head deadline
//! while a normal client keeps its latency, slow readers cut at the write
//! timeout with memory bounded, oversized heads refused without an
//! upstream call, connection and stream caps, keep-alive idle timeout,
//! HTTP/2 stream cap advertised.

use crate::support::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_sim::Profile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn rss_kib() -> u64 {
    crate::process::status_kib(std::process::id(), "VmRSS:")
}

fn rejected(tap: &Tap, reason: &str) -> f64 {
    tap.sample(&format!(
        "tokentap_rejected_total{{boundary=\"engine\",reason=\"{reason}\",tap=\"t\"}}"
    ))
}

/// Reads until EOF or an error; the time it ended.
async fn until_closed(mut s: TcpStream) -> Instant {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return Instant::now(),
            Ok(_) => {}
        }
    }
}

/// Streaming request latencies (send → last byte), in ms, sorted.
async fn latencies(addr: SocketAddr, n: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let r = post(
            addr,
            &[("content-type", "application/json")],
            &chat(true, true),
        )
        .await;
        assert_eq!(r.status, 200);
        out.push(ms(t.elapsed()));
    }
    out.sort_by(f64::total_cmp);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_cut_at_the_head_deadline_and_a_normal_client_keeps_its_latency() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        output_tokens: 20,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    timeouts:\n      request_header_seconds: 2\n",
    );
    latencies(tap.addr, 5).await; // warm the upstream pool
    let baseline = latencies(tap.addr, 30).await;
    let rss_before = rss_kib();

    // 400 connections sending a request head one byte every 250 ms.
    const ATTACKERS: usize = 400;
    let started = Instant::now();
    let mut attackers = Vec::new();
    for i in 0..ATTACKERS {
        let addr = tap.addr;
        attackers.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "GET /slow/{i} HTTP/1.1\r\nHost: a\r\nX-Pad: {}\r\n\r\n",
                "p".repeat(64)
            );
            for b in head.as_bytes() {
                if s.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            until_closed(s).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let under_attack = latencies(tap.addr, 30).await;
    let rss_peak = rss_kib();
    let mut closed_after = Vec::new();
    for a in attackers {
        closed_after.push(a.await.unwrap().duration_since(started));
    }
    let first = closed_after.iter().min().unwrap();
    let last = closed_after.iter().max().unwrap();
    println!(
        "slowloris: {ATTACKERS} connections; normal client p50 {:.1} ms baseline, {:.1} ms under attack (p90 {:.1} / {:.1}); attackers cut after {:.2}–{:.2} s (timeout 2 s); RSS {} → {} KiB",
        median(&baseline),
        median(&under_attack),
        baseline[27],
        under_attack[27],
        first.as_secs_f64(),
        last.as_secs_f64(),
        rss_before,
        rss_peak
    );
    assert!(
        median(&under_attack) <= 1.5 * median(&baseline),
        "p50 {:.1} ms under attack vs {:.1} ms baseline",
        median(&under_attack),
        median(&baseline)
    );
    // Every attacker cut at the deadline (the head needs ~22 s to arrive).
    assert!(*first >= Duration::from_millis(1900), "{first:?}");
    assert!(*last <= Duration::from_millis(4500), "{last:?}");
    assert_eq!(rejected(&tap, "header_timeout"), ATTACKERS as f64);
    assert!(
        rss_peak < rss_before + 64 * 1024,
        "RSS grew {} KiB",
        rss_peak - rss_before
    );
    // No attacker's request reached the upstream or the records: only the
    // normal client's 65.
    assert_eq!(tap.records.count(), 65);
}

/// An upstream that streams SSE as fast as the socket takes it, and counts
/// the streams whose client went away (a write failed).
async fn firehose() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let gone = Arc::new(AtomicUsize::new(0));
    let g = gone.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let g = g.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let event = format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                    "x".repeat(16 << 10)
                );
                let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                loop {
                    if s.write_all(chunk.as_bytes()).await.is_err() {
                        g.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            });
        }
    });
    (addr, gone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_at_the_write_timeout_with_memory_bounded() {
    let _g = serial().await;
    let (up, gone) = firehose().await;
    let tap = Tap::start(
        &format!("http://{up}"),
        "    timeouts:\n      client_write_seconds: 1\n",
    );
    let rss_before = rss_kib();
    const READERS: usize = 20;
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut s = TcpStream::connect(tap.addr).await.unwrap();
        let body = chat(true, false);
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        s.write_all(&body).await.unwrap();
        readers.push(s); // never read
    }
    let started = Instant::now();
    while gone.load(Ordering::SeqCst) < READERS && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cut_after = started.elapsed();
    let rss_after = rss_kib();
    println!(
        "slow read: {READERS} clients that never read; all cut (upstream saw the close) after {:.2} s (write timeout 1 s); RSS {} → {} KiB",
        cut_after.as_secs_f64(),
        rss_before,
        rss_after
    );
    assert_eq!(
        gone.load(Ordering::SeqCst),
        READERS,
        "streams still running"
    );
    assert!(cut_after < Duration::from_secs(10), "{cut_after:?}");
    // Socket buffers and pingora's bounded body channel, not the stream.
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew {} KiB",
        rss_after - rss_before
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while tap.in_flight() > 0.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(tap.in_flight(), 0.0);
    drop(readers);
}

/// A TCP upstream that only counts connections.
async fn counting_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    (addr, n)
}

async fn status_of(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&out);
    text.lines().next().unwrap_or("(closed)").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_get_4xx_without_an_upstream_call() {
    let _g = serial().await;
    let (up, calls) = counting_upstream().await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let headers = |n: usize| -> String { (0..n).map(|i| format!("x-h{i}: v\r\n")).collect() };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "101 headers (limit 100)",
            format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", headers(100)),
            "431",
        ),
        (
            "300 headers (pingora's own limit 256)",
            format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", headers(299)),
            "400",
        ),
        (
            "a 100 KiB header (limit 64 KiB)",
            format!(
                "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
                "b".repeat(100 << 10)
            ),
            "431",
        ),
        (
            "a 2 MiB header block (pingora's own limit 1 MiB)",
            format!(
                "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
                "b".repeat(2 << 20)
            ),
            "",
        ),
        (
            "a 20 KiB URI (limit 16 KiB)",
            format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "u".repeat(20 << 10)),
            "414",
        ),
        (
            "a 64 KiB URI (the http crate's own limit: 64 KiB - 2)",
            format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "u".repeat(64 << 10)),
            "400",
        ),
    ];
    let mut report = Vec::new();
    for (name, bytes, want) in &cases {
        let status = status_of(tap.addr, bytes.as_bytes()).await;
        report.push(format!("{name}: {status}"));
        if want.is_empty() {
            // Refused either way: a 4xx or a closed connection.
            assert!(
                status == "(closed)" || status.contains(" 4"),
                "{name}: {status}"
            );
        } else {
            assert!(status.contains(&format!(" {want} ")), "{name}: {status}");
        }
    }
    println!("header limits:\n  {}", report.join("\n  "));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the upstream was called");
    assert_eq!(rejected(&tap, "too_many_headers"), 1.0);
    assert_eq!(rejected(&tap, "header_too_large"), 1.0);
    assert_eq!(rejected(&tap, "uri_too_long"), 1.0);
    assert!(
        tap.records.all().is_empty(),
        "refusals are not measurements"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_and_stream_caps_refuse_with_503_and_recover() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 300.0,
        itl_ms: 5.0,
        output_tokens: 5,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    limits:\n      max_connections: 4\n      max_streams: 2\n",
    );
    // Streams: three at once, one refused.
    let addr = tap.addr;
    let a = tokio::spawn(async move { post(addr, &[], &chat(true, true)).await });
    let b = tokio::spawn(async move { post(addr, &[], &chat(true, true)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = post(tap.addr, &[], &chat(true, true)).await;
    assert_eq!(c.status, 503);
    assert_eq!(a.await.unwrap().status, 200);
    assert_eq!(b.await.unwrap().status, 200);
    assert_eq!(rejected(&tap, "too_many_streams"), 1.0);
    // Connections: four open and idle, the fifth refused before a byte.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(tap.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tap.sample("tokentap_client_connections{boundary=\"engine\",tap=\"t\"}"),
        4.0
    );
    let fifth = status_of(tap.addr, b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(fifth.contains(" 503 "), "{fifth}");
    assert_eq!(rejected(&tap, "too_many_connections"), 1.0);
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = post(tap.addr, &[], &chat(false, false)).await;
    assert_eq!(
        again.status, 200,
        "capacity comes back when connections close"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keepalive_connections_close_and_http2_advertises_its_stream_cap() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 3,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    timeouts:\n      keepalive_seconds: 1\n    limits:\n      h2_max_streams: 7\n",
    );
    let mut s = TcpStream::connect(tap.addr).await.unwrap();
    s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let answered = Instant::now();
    let closed = until_closed(s).await.duration_since(answered);
    println!(
        "keep-alive idle: closed {:.2} s after the response (timeout 1 s)",
        closed.as_secs_f64()
    );
    assert!(
        closed >= Duration::from_millis(900) && closed < Duration::from_secs(3),
        "{closed:?}"
    );

    let tcp = TcpStream::connect(tap.addr).await.unwrap();
    let (h2, mut conn) = h2::client::handshake(tcp).await.unwrap();
    // The server's SETTINGS arrive while the connection is driven.
    let mut h2 = h2.ready().await.unwrap();
    let req = http::Request::get(format!("http://{}/v1/models", tap.addr))
        .body(())
        .unwrap();
    let (resp, _) = h2.send_request(req, true).unwrap();
    let resp = tokio::select! {
        r = resp => r.unwrap(),
        _ = &mut conn => panic!("connection ended"),
    };
    assert_eq!(resp.status(), 200);
    assert_eq!(conn.max_concurrent_send_streams(), 7);
}
