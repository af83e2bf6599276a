//! Fail-open at every entry: a panic inside any `Meter` call a hook makes
//! (`x-tokentap-fault`, a test-build feature) stops measuring that request
//! only. The client gets exactly what it would get direct, the record is
//! counted `unmeasured` with `decoder_panic`, and the next request on the
//! same tap is measured as usual. A decoder that takes its time
//! (`x-tokentap-fault: stall:…`) holds no streamed event back.

use crate::support::*;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokentap_core::record::{MeasureError, MeterCall, Outcome, STALL};
use tokentap_net::client;
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

/// On the chunked path the Meter reads each piece after it was handed to
/// the client: a decoder that blocks for `STALL` (300 ms) on every piece
/// delays no event's first byte. Measured before the write, the first
/// event would reach the client `STALL` late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_decoder_holds_no_event_back() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 100.0,
        itl_ms: 100.0,
        output_tokens: 4,
        // No role delta right after the head: the head comes alone, so
        // every body piece takes the chunked path (a piece read with the
        // head takes pingora's, which measures it before the write).
        role_delta: false,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(profile, "");
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "stalled"),
        ("x-tokentap-fault", "stall:response_body"),
    ];
    let body = chat(true, true);
    let path = "/v1/chat/completions";
    let a = client::send(direct.addr, "POST", path, &headers, &body)
        .await
        .unwrap();
    let b = client::send(tap.addr, "POST", path, &headers, &body)
        .await
        .unwrap();
    assert!(a.complete && b.complete);
    assert_eq!(Sha256::digest(&a.body), Sha256::digest(&b.body));
    // The head comes alone, the first event `ttft` later: the event is
    // the second read, relayed on the chunked path, and written before
    // the decoder's first stall.
    let first_event = |r: &client::Response| {
        assert!(r.reads.len() >= 2, "{:?}", r.reads);
        r.reads[1].at.duration_since(r.sent_at)
    };
    let (direct_ttft, tap_ttft) = (first_event(&a), first_event(&b));
    assert!(
        tap_ttft < direct_ttft + STALL / 2,
        "the first event waited for the decoder: {tap_ttft:?} through the tap, {direct_ttft:?} direct"
    );
    // The stall did happen: it began once the first event was written
    // and held the next read (direct's second event, `itl` later) until
    // it ended. The stream was still measured whole.
    let second_event = |r: &client::Response| {
        assert!(r.reads.len() >= 3, "{:?}", r.reads);
        r.reads[2].at.duration_since(r.sent_at)
    };
    assert!(
        second_event(&b) >= second_event(&a) + STALL / 2,
        "no stall seen: the second event came {:?} through the tap, {:?} direct",
        second_event(&b),
        second_event(&a)
    );
    let r = tap.records.wait("stalled").await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.output_tokens, Some(4));
    println!(
        "stalled decoder ({STALL:?} per piece): first event {tap_ttft:?} through the tap, {direct_ttft:?} direct"
    );
}
