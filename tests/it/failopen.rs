//! Fail-open at every entry: a panic inside any `Meter` call a hook makes
//! (`x-tokentap-fault`, a test-build feature) stops measuring that request
//! only. The client gets exactly what it would get direct, the record is
//! counted `unmeasured` with `decoder_panic`, and the next request on the
//! same tap is measured as usual. A decoder that takes its time
//! (`x-tokentap-fault: stall:…`) holds no piece back: each is measured
//! after it was written.

use crate::support::*;
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use tokentap_core::record::{MeasureError, MeterCall, Outcome, RequestRecord};
use tokentap_net::client;
use tokentap_proxy::proxy::STALL;
use tokentap_sim::Profile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_any_meter_call_leaves_the_bytes_and_counts_the_record_unmeasured() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 12,
        ..Profile::default()
    };
    // Two identical simulators fed the same requests send the same bytes.
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(profile, "");
    let mut cases: Vec<(String, Option<MeterCall>, bool)> = Vec::new();
    for call in MeterCall::ALL {
        cases.push((format!("fault-{}-stream", call.as_str()), Some(call), true));
        cases.push((format!("fault-{}-json", call.as_str()), Some(call), false));
    }
    cases.push(("control".into(), None, true));
    for (id, call, stream) in &cases {
        let fault = call.map_or("", |c| c.as_str());
        let headers = [
            ("content-type", "application/json"),
            ("x-request-id", id.as_str()),
            ("x-tokentap-fault", fault),
        ];
        let body = chat(*stream, true);
        let path = "/v1/chat/completions";
        let a = client::send(direct.addr, "POST", path, &headers, &body)
            .await
            .unwrap();
        let b = client::send(tap.addr, "POST", path, &headers, &body)
            .await
            .unwrap();
        assert_eq!(a.status, 200, "{id}");
        assert_eq!(b.status, a.status, "{id}");
        assert!(a.complete && b.complete, "{id}: complete");
        assert_eq!(
            Sha256::digest(&a.body),
            Sha256::digest(&b.body),
            "{id}: the client's bytes differ from direct"
        );
        let r = tap.records.wait(id).await;
        match call {
            Some(call) => {
                assert_eq!(r.outcome, Outcome::Unmeasured, "{id}: {r:?}");
                assert_eq!(r.measure_error, Some(MeasureError::DecoderPanic), "{id}");
                if *call != MeterCall::Finish {
                    assert_eq!(r.status, Some(200), "{id}");
                }
            }
            None => {
                assert_eq!(r.outcome, Outcome::Ok, "{id}: the tap measures on");
                assert_eq!(r.output_tokens, Some(12), "{id}");
            }
        }
        assert_eq!(tap.records.with_id(id), 1, "{id}: counted once");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let faults = 2 * MeterCall::ALL.len();
    assert_eq!(
        tap.sample(
            "tokentap_measurement_errors_total{boundary=\"engine\",reason=\"decoder_panic\",tap=\"t\"}"
        ),
        faults as f64
    );
    assert_eq!(tap.in_flight(), 0.0);
    println!(
        "fail-open: {faults} requests with a panic in one of {} Meter calls each, byte-exact and counted unmeasured; the control request measured",
        MeterCall::ALL.len()
    );
}

/// Sends one request with a decoder that blocks for `STALL` (300 ms) on
/// every response piece, direct and through the tap; returns both answers,
/// the record and when it came.
async fn stalled(
    profile: Profile,
    stream: bool,
    id: &str,
) -> (client::Response, client::Response, RequestRecord, Instant) {
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(profile, "");
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", id),
        ("x-tokentap-fault", "stall:response_body"),
    ];
    let body = chat(stream, true);
    let path = "/v1/chat/completions";
    let a = client::send(direct.addr, "POST", path, &headers, &body)
        .await
        .unwrap();
    let b = client::send(tap.addr, "POST", path, &headers, &body)
        .await
        .unwrap();
    assert!(a.complete && b.complete, "{id}");
    assert_eq!(Sha256::digest(&a.body), Sha256::digest(&b.body), "{id}");
    let r = tap.records.wait(id).await;
    (a, b, r, Instant::now())
}

/// Four tokens 100 ms apart, the first 100 ms after the head; with or
/// without a role-only delta sent together with the head.
fn four_slow_tokens(role_delta: bool) -> Profile {
    Profile {
        ttft_ms: 100.0,
        itl_ms: 100.0,
        output_tokens: 4,
        role_delta,
        ..Profile::default()
    }
}

/// When read `i` of a response came, from the request's send.
fn read_at(r: &client::Response, i: usize) -> Duration {
    let read = r
        .reads
        .get(i)
        .unwrap_or_else(|| panic!("no read {i}: {:?}", r.reads));
    read.at.duration_since(r.sent_at)
}

/// When the client had received the first `n` bytes of a response, from
/// the request's send.
fn bytes_by(r: &client::Response, n: usize) -> Duration {
    let mut seen = 0;
    let read = r
        .reads
        .iter()
        .find(|read| {
            seen += read.len;
            seen >= n
        })
        .unwrap_or_else(|| panic!("fewer than {n} bytes: {:?}", r.reads));
    read.at.duration_since(r.sent_at)
}

/// On the chunked path the Meter reads each piece after it was handed to
/// the client: a decoder that blocks for `STALL` (300 ms) on every piece
/// delays no event's first byte. Measured before the write, the first
/// event would reach the client `STALL` late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_decoder_holds_no_event_back() {
    let _g = serial().await;
    // No role delta right after the head: the head comes alone, so every
    // body piece takes the chunked path (`raw_body`).
    let (a, b, r, _) = stalled(four_slow_tokens(false), true, "stalled").await;
    // The head comes alone, the first event `ttft` later: the event is
    // the second read, relayed on the chunked path, and written before
    // the decoder's first stall.
    let (direct_ttft, tap_ttft) = (read_at(&a, 1), read_at(&b, 1));
    assert!(
        tap_ttft < direct_ttft + STALL / 2,
        "the first event waited for the decoder: {tap_ttft:?} through the tap, {direct_ttft:?} direct"
    );
    // The stall did happen: it began once the first event was written
    // and held the next read (direct's second event, `itl` later) until
    // it ended. The stream was still measured whole.
    assert!(
        read_at(&b, 2) >= read_at(&a, 2) + STALL / 2,
        "no stall seen: the second event came {:?} through the tap, {:?} direct",
        read_at(&b, 2),
        read_at(&a, 2)
    );
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.output_tokens, Some(4));
    println!(
        "stalled decoder ({STALL:?} per piece): first event {tap_ttft:?} through the tap, {direct_ttft:?} direct"
    );
}

/// What pingora's own path writes (the piece read with the response head,
/// a content-length body) is measured once written (`held`, pingora-proxy
/// 0011): the same stalled decoder delays neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_decoder_holds_no_piece_back() {
    let _g = serial().await;
    // The role delta goes out with the head, in one write: the tap reads
    // both at once and they take pingora's path together.
    let (a, b, r, _) = stalled(four_slow_tokens(true), true, "stalled-head").await;
    // What the simulator wrote at once (the head, then the role delta)
    // reached direct's client within a few ms, the first token 100 ms
    // later: that many bytes, however the reads fell. Through the tap
    // (the same bytes), when the client had as many.
    let first = a.reads.first().map_or(0, |read| {
        let soon = |r: &&client::Read| r.at.duration_since(read.at) < Duration::from_millis(50);
        a.reads.iter().filter(soon).map(|r| r.len).sum()
    });
    assert!(
        first > b"HTTP/1.1 200 OK\r\n".len() + 200,
        "the head and the role delta came together: {:?}",
        a.reads
    );
    let (direct_head, tap_head) = (bytes_by(&a, first), bytes_by(&b, first));
    assert!(
        tap_head < direct_head + STALL / 2,
        "the piece read with the head waited for the decoder: {tap_head:?} through the tap, {direct_head:?} direct; reads {:?}",
        b.reads
            .iter()
            .map(|read| (read.at.duration_since(b.sent_at), read.len))
            .collect::<Vec<_>>()
    );
    // The decoder's stall held what came after.
    let last = |r: &client::Response| read_at(r, r.reads.len().saturating_sub(1));
    assert!(
        last(&b) >= last(&a) + STALL / 2,
        "no stall seen: the last read came {:?} through the tap, {:?} direct",
        last(&b),
        last(&a)
    );
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.output_tokens, Some(4));

    // A non-streamed answer: its body, with a content-length, is one piece.
    let plain = Profile {
        ttft_ms: 50.0,
        output_tokens: 4,
        ..Profile::default()
    };
    let (a, b, r, recorded) = stalled(plain, false, "stalled-json").await;
    let (direct_done, tap_done) = (last(&a), last(&b));
    assert!(
        tap_done < direct_done + STALL / 2,
        "the body waited for the decoder: complete after {tap_done:?} through the tap, {direct_done:?} direct"
    );
    // The decoding came after the write, and took the stall.
    let written = b.sent_at + tap_done;
    assert!(
        recorded.duration_since(written) >= STALL / 2,
        "no stall seen: the record came {:?} after the body",
        recorded.duration_since(written)
    );
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.output_tokens, Some(4));
    println!(
        "stalled decoder ({STALL:?} per piece): head and role delta {tap_head:?} through the tap, {direct_head:?} direct; a JSON body complete after {tap_done:?}, {direct_done:?} direct"
    );
}
