//! Usage injection: with `inject_usage: true`, a streaming request without
//! usage reaches the engine with `stream_options.include_usage: true`, the
//! tap records the engine's exact usage, and the client receives the bytes
//! it would have received without tokentap — compared, by hash, with the
//! same request sent to an identical simulator directly.

use crate::support::*;
use sha2::{Digest, Sha256};
use tokentap_core::record::{Outcome, TokenSource};
use tokentap_sim::Profile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_usage_is_recorded_and_invisible_to_the_client() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 5.0,
        itl_ms: 2.0,
        output_tokens: 40,
        ..Profile::default()
    };
    let direct = sim(profile.clone());
    let behind = sim(profile);
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    inject_usage: true\n",
    );
    // (name, body, injected?)
    let cases = [
        (
            "absent",
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
            true,
        ),
        (
            "null",
            r#"{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}"#,
            true,
        ),
        (
            "object",
            r#"{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false},"messages":[]}"#,
            true,
        ),
        (
            "false",
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#,
            true,
        ),
        (
            "asked",
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
            false,
        ),
        (
            "plain",
            r#"{"model":"m","stream":false,"messages":[]}"#,
            false,
        ),
    ];
    let mut hashes = Sha256::new();
    for (name, body, injected) in cases {
        for split in ["none", "random"] {
            let id = format!("inj-{name}-{split}");
            let opts = format!("split={split},seed=3,line-ending=crlf");
            let h = [
                ("content-type", "application/json"),
                ("x-sim", opts.as_str()),
                ("x-request-id", id.as_str()),
            ];
            let a = post(direct.addr, &h, body.as_bytes()).await;
            let b = post(tap.addr, &h, body.as_bytes()).await;
            assert_eq!(b.status, 200, "{id}: {}", String::from_utf8_lossy(&b.body));
            assert!(b.complete, "{id}");
            assert_eq!(
                Sha256::digest(&a.body),
                Sha256::digest(&b.body),
                "{id}: the client's bytes differ from a direct request's:\n{}\n---\n{}",
                String::from_utf8_lossy(&a.body),
                String::from_utf8_lossy(&b.body)
            );
            hashes.update(&b.body);
            let r = tap.records.wait(&id).await;
            assert_eq!(r.outcome, Outcome::Ok, "{id}");
            let streamed = name != "plain";
            if injected || name == "asked" || !streamed {
                // The engine's own count, not counted events.
                assert_eq!(r.output_tokens, Some(40), "{id}");
                assert_eq!(r.output_source, Some(TokenSource::Usage), "{id}");
                assert!(r.input_tokens.is_some(), "{id}");
            }
        }
    }
    let count = |result: &str| {
        tap.sample(&format!(
            "tokentap_usage_injection_total{{boundary=\"engine\",result=\"{result}\",tap=\"t\"}}"
        ))
    };
    println!(
        "usage injection: 8 injected streams byte-identical to direct ones (sha256 of all {:x}); injected {} stripped {} already_requested {} not_streaming {}",
        hashes.finalize(),
        count("injected"),
        count("stripped"),
        count("already_requested"),
        count("not_streaming")
    );
    assert_eq!(count("injected"), 8.0);
    assert_eq!(count("stripped"), 8.0);
    assert_eq!(count("already_requested"), 2.0);
    assert_eq!(count("not_streaming"), 2.0);
}
