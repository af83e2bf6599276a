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
