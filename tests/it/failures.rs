//! Failures on either side: the client sees what it would see direct, each
//! request is counted once with the right outcome, nothing panics, the
//! upstream learns at once that a client left, and caps bound the decoder.

use crate::support::*;
use std::time::{Duration, Instant};
use tokentap_core::record::{ErrorType, MeasureError, Outcome};
use tokentap_net::client::{self, Flow};
use tokentap_sim::Profile;

async fn in_flight_drains(tap: &Tap) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while tap.in_flight() != 0.0 {
        assert!(
            Instant::now() < deadline,
            "in-flight stuck at {}",
            tap.in_flight()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_before_first_token_and_mid_stream() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 3000.0,
        itl_ms: 50.0,
        ..Profile::default()
    });
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    let body = chat(true, true);

    // (a) Before the first token: give up after 300 ms of a 3 s prefill.
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "cc-before"),
    ];
    let send = client::send(tap.addr, "POST", "/v1/chat/completions", &headers, &body);
    assert!(tokio::time::timeout(Duration::from_millis(300), send)
        .await
        .is_err());
    let closed = Instant::now();
    let truth = behind
        .truth
        .wait_for("cc-before", Duration::from_secs(5))
        .await
        .unwrap();
    let seen_after = truth.peer_closed.unwrap().saturating_duration_since(closed);
    assert!(
        seen_after <= Duration::from_millis(100),
        "upstream saw the close {:.1} ms later",
        ms(seen_after)
    );
    let r = tap.records.wait("cc-before").await;
    assert_eq!(r.outcome, Outcome::ClientCancelled);
    assert_eq!(r.ttft, None);
    assert_eq!(r.output_tokens, Some(0), "partial count: nothing yet");
    in_flight_drains(&tap).await;

    // (b) Mid-stream: leave after 3 token events.
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "cc-mid"),
        ("x-sim", "ttft-ms=50"),
    ];
    let mut closed = None;
    let resp = client::send_with(
        tap.addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        &body,
        |r| {
            let tokens = r
                .body
                .windows(11)
                .filter(|w| w == b"\"content\":\"")
                .count()
                .saturating_sub(1); // minus the role delta
            if tokens >= 3 {
                closed = Some(Instant::now());
                Flow::Stop
            } else {
                Flow::Continue
            }
        },
    )
    .await
    .unwrap();
    assert!(!resp.complete);
    let closed = closed.unwrap();
    let truth = behind
        .truth
        .wait_for("cc-mid", Duration::from_secs(5))
        .await
        .unwrap();
    let seen_after = truth.peer_closed.unwrap().saturating_duration_since(closed);
    assert!(
        seen_after <= Duration::from_millis(100),
        "upstream saw the close {:.1} ms later",
        ms(seen_after)
    );
    assert!(!truth.complete);
    let r = tap.records.wait("cc-mid").await;
    assert_eq!(r.outcome, Outcome::ClientCancelled);
    assert_eq!(r.token_events, 3);
    assert_eq!(r.output_tokens, Some(3), "partial count");
    assert!(r.ttft.is_some());
    in_flight_drains(&tap).await;
    assert_eq!(tap.records.with_id("cc-mid"), 1);
    let cancelled = tap.sample("tokentap_requests_total{boundary=\"engine\",model=\"sim-model\",operation=\"chat\",outcome=\"client_cancelled\",stream=\"true\",tap=\"t\"}");
    assert_eq!(cancelled, 2.0);
}

struct Case {
    fault: &'static str,
    outcome: Outcome,
    error: &'static [ErrorType],
    measure: Option<MeasureError>,
    /// The body ends as its framing says (else: cut short).
    complete: bool,
}

const CASES: &[Case] = &[
    Case {
        fault: "reset@3",
        outcome: Outcome::UpstreamTruncated,
        error: &[ErrorType::ConnectionReset, ErrorType::ConnectionClosed],
        measure: None,
        complete: false,
    },
    Case {
        fault: "close@3",
        outcome: Outcome::UpstreamTruncated,
        error: &[ErrorType::ConnectionClosed],
        measure: None,
        complete: false,
    },
    Case {
        fault: "eof@3",
        outcome: Outcome::UpstreamTruncated,
        error: &[ErrorType::MissingTerminator],
        measure: None,
        complete: true,
    },
    Case {
        fault: "status=500",
        outcome: Outcome::HttpError,
        error: &[],
        measure: None,
        complete: true,
    },
    Case {
        fault: "status=429",
        outcome: Outcome::HttpError,
        error: &[],
        measure: None,
        complete: true,
    },
    Case {
        fault: "malformed@2",
        outcome: Outcome::Unmeasured,
        error: &[],
        measure: Some(MeasureError::InvalidJsonEvent),
        complete: true,
    },
    Case {
        fault: "error@2",
        outcome: Outcome::UpstreamError,
        error: &[ErrorType::StreamErrorEvent],
        measure: None,
        complete: true,
    },
    Case {
        fault: "huge-line:10485760",
        outcome: Outcome::Unmeasured,
        error: &[],
        measure: Some(MeasureError::SseLineTooLong),
        complete: true,
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_reach_the_client_as_they_would_direct() {
    let _g = serial().await;
    let base = Profile {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        output_tokens: 10,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(base, "");
    for c in CASES {
        let id = format!("uf-{}", c.fault);
        let opts = format!("fault={}", c.fault);
        let headers = [
            ("content-type", "application/json"),
            ("x-request-id", id.as_str()),
            ("x-sim", opts.as_str()),
        ];
        let body = chat(true, true);
        let a = post(direct.addr, &headers, &body).await;
        let b = post(tap.addr, &headers, &body).await;
        assert_eq!(a.status, b.status, "{id}");
        assert_eq!(b.complete, c.complete, "{id}: the client sees the same end");
        assert_eq!(a.complete, b.complete, "{id}");
        if c.fault.starts_with("reset") {
            // An RST may destroy data the direct client had not read yet;
            // through the tap every byte read before the reset arrives.
            assert!(b.body.starts_with(&a.body), "{id}");
        } else {
            assert_eq!(a.body, b.body, "{id}: same bytes");
        }
        let r = tap.records.wait(&id).await;
        assert_eq!(r.outcome, c.outcome, "{id}");
        if c.error.is_empty() {
            assert_eq!(r.error_type, None, "{id}");
        } else {
            assert!(
                r.error_type.is_some_and(|e| c.error.contains(&e)),
                "{id}: {:?}",
                r.error_type
            );
        }
        assert_eq!(r.measure_error, c.measure, "{id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(tap.records.with_id(&id), 1, "{id}: counted once");
    }
    let scrape = tap.scrape();
    for reason in ["invalid_json_event", "sse_line_too_long"] {
        let line = format!("tokentap_measurement_errors_total{{boundary=\"engine\",reason=\"{reason}\",tap=\"t\"}} 1");
        assert!(scrape.contains(&line), "missing {line}");
    }
    // Later requests on the same tap are unaffected.
    let ok = post(tap.addr, &[("x-request-id", "uf-after")], &chat(true, true)).await;
    assert!(ok.complete);
    assert_eq!(tap.records.wait("uf-after").await.outcome, Outcome::Ok);
    in_flight_drains(&tap).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_a_502_and_an_upstream_error() {
    let _g = serial().await;
    let nobody = free_addr();
    let tap = Tap::start(&format!("http://{nobody}"), "");
    let r = post(tap.addr, &[("x-request-id", "refused")], &chat(true, false)).await;
    assert_eq!(r.status, 502);
    let rec = tap.records.wait("refused").await;
    assert_eq!(rec.outcome, Outcome::UpstreamError);
    assert_eq!(rec.error_type, Some(ErrorType::ConnectRefused));
    assert_eq!(rec.ttfb, None);
    assert_eq!(tap.records.with_id("refused"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_line_cap_stops_decoding_not_forwarding() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 0.0,
        itl_ms: 0.0,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    limits:\n      sse_line_bytes: 65536\n",
    );
    let headers = [
        ("x-request-id", "cap"),
        ("x-sim", "fault=huge-line:1000000"),
    ];
    let r = post(tap.addr, &headers, &chat(true, false)).await;
    assert!(r.complete);
    assert!(r.body.len() > 1_000_000, "all bytes forwarded");
    let rec = tap.records.wait("cap").await;
    assert_eq!(rec.measure_error, Some(MeasureError::SseLineTooLong));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_byte_and_idle_timeouts_are_distinct() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 10.0,
        itl_ms: 10.0,
        output_tokens: 8,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    timeouts:\n      first_byte_seconds: 1.0\n      idle_seconds: 0.3\n",
    );
    // Headers after 700 ms: within the first-byte allowance, though longer than idle.
    let h = [
        ("x-request-id", "slow-headers"),
        ("x-sim", "header-delay-ms=700"),
    ];
    let r = post(tap.addr, &h, &chat(true, false)).await;
    assert!(r.complete);
    assert_eq!(tap.records.wait("slow-headers").await.outcome, Outcome::Ok);

    // Headers after 1.5 s: cut at the first-byte timeout, answered 502.
    let h = [
        ("x-request-id", "no-headers"),
        ("x-sim", "header-delay-ms=1500"),
    ];
    let start = Instant::now();
    let r = post(tap.addr, &h, &chat(true, false)).await;
    assert_eq!(r.status, 502);
    let rec = tap.records.wait("no-headers").await;
    assert_eq!(
        (rec.outcome, rec.error_type),
        (Outcome::UpstreamError, Some(ErrorType::ReadTimeout))
    );
    assert!(
        start.elapsed() >= Duration::from_millis(950)
            && start.elapsed() < Duration::from_millis(1400),
        "{:?}",
        start.elapsed()
    );

    // A 1 s stall after 3 tokens: cut at the idle timeout, truncated.
    let h = [("x-request-id", "stall"), ("x-sim", "fault=stall@3:1000")];
    let r = post(tap.addr, &h, &chat(true, false)).await;
    assert!(!r.complete, "the client sees a truncated stream");
    let rec = tap.records.wait("stall").await;
    assert_eq!(
        (rec.outcome, rec.error_type),
        (Outcome::UpstreamTruncated, Some(ErrorType::ReadTimeout))
    );
    assert_eq!(rec.token_events, 3);
    let silence = rec.e2e - rec.last_token.unwrap();
    assert!(
        silence >= Duration::from_millis(290) && silence < Duration::from_millis(700),
        "{silence:?}"
    );
}

/// An upstream like llama-server: answers `Keep-Alive`, then closes each
/// connection `close_after` after its streamed answer. It records, per
/// request, whether the request asked for `Connection: close`.
async fn closing_upstream(
    close_after: Duration,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                // One request: its head, then Content-Length bytes of body.
                let (head_end, len) = loop {
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
                        log.lock()
                            .unwrap()
                            .push(head.contains("\r\nconnection: close"));
                        break (i + 4, len);
                    }
                };
                while req.len() < head_end + len {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let event = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
                let mut resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nkeep-alive: timeout=5, max=100\r\n\r\n{:x}\r\n",
                    event.len()
                )
                .into_bytes();
                resp.extend_from_slice(event);
                resp.extend_from_slice(b"\r\n0\r\n\r\n");
                let _ = s.write_all(&resp).await;
                tokio::time::sleep(close_after).await;
                // Dropped: closed, whatever the client wrote meanwhile.
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_after_every_stream_is_learned_and_asked_to_close() {
    let _g = serial().await;
    const STALE: &str = "tokentap_upstream_stale_connections_total{boundary=\"engine\",tap=\"t\"}";
    // The upstream closes 2 ms after each stream: a client that follows at
    // once meets the closing connection every time it is reused.
    let (up, seen) = closing_upstream(Duration::from_millis(2)).await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let mut statuses = Vec::new();
    for i in 0..40 {
        let id = format!("close-{i}");
        let h = [
            ("content-type", "application/json"),
            ("x-request-id", id.as_str()),
        ];
        let resp = client::send(
            tap.addr,
            "POST",
            "/v1/chat/completions",
            &h,
            &chat(true, false),
        )
        .await
        .unwrap();
        statuses.push(resp.status);
    }
    let failed = statuses.iter().filter(|s| **s != 200).count();
    let asked: Vec<bool> = seen.lock().unwrap().clone();
    let learned_at = asked
        .iter()
        .position(|c| *c)
        .expect("the tap asked for Connection: close");
    println!(
        "closing upstream: {failed} of 40 answered 502 before the tap learned; {} stale connections resent; Connection: close from upstream request {learned_at} on",
        tap.sample(STALE)
    );
    // Each of the first reuses met a closing connection: found closed before
    // writing (resent, counted) or closed across the request (pingora's 502
    // for a POST it wrote). Two of either and the tap has learned.
    assert!(failed as f64 + tap.sample(STALE) >= 2.0);
    assert!(failed <= 2, "{failed} requests lost before the tap learned");
    assert!(
        asked[learned_at..].iter().all(|c| *c),
        "every request after it asks to close"
    );
    assert!(
        learned_at <= 6,
        "learned only at upstream request {learned_at}"
    );
    let last = statuses.len() - 1;
    assert!(
        statuses[last - 30..].iter().all(|s| *s == 200),
        "no request fails once learned: {statuses:?}"
    );
}
