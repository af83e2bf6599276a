//! Transparent forwarding: bytes, statuses and headers through a tap equal
//! those sent direct; events are neither delayed nor coalesced; h2c clients
//! work; admin paths are never answered on a tap.

use crate::support::*;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokentap_net::client::{self, Response};
use tokentap_sim::Profile;

/// Headers a proxy may legitimately rewrite: hop-by-hop framing, and `date`,
/// which pingora always sets (RFC 9110 §6.6.1 requires a proxy to add one
/// when the upstream sent none; pingora also refreshes an existing one).
const PROXY_OWNED: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "date",
];

fn end_to_end(r: &Response) -> Vec<(String, Vec<u8>)> {
    r.headers
        .iter()
        .filter(|(k, _)| !PROXY_OWNED.contains(&k.as_str()))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_exact_over_1200_random_responses() {
    let _g = serial().await;
    let base = Profile {
        ttft_ms: 0.0,
        itl_ms: 0.0,
        ..Profile::default()
    };
    // Two identical simulators fed the same request sequence produce the
    // same bytes: one is reached direct, one through the tap.
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(base, "");
    let mut rng = StdRng::seed_from_u64(7);
    let (mut streamed, mut plain, mut bytes) = (0, 0, 0usize);
    let mut all = Sha256::new();
    let n = 1200;
    for i in 0..n {
        let stream = rng.random_range(0..5) != 0;
        let path = if rng.random_bool(0.7) {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let sim_opts = format!(
            "output-tokens={},tokens-per-event={},line-ending={},split={},seed={},role-delta={},keepalive-ms={}",
            rng.random_range(1..300),
            rng.random_range(1..4),
            ["lf", "crlf", "cr", "mixed"][rng.random_range(0..4)],
            ["none", "random"][rng.random_range(0..2)],
            rng.random_range(0..1_000_000u64),
            rng.random_bool(0.5),
            0,
        );
        let body = chat(stream, rng.random_bool(0.5));
        let id = format!("bx-{i}");
        let headers = [
            ("content-type", "application/json"),
            ("x-sim", sim_opts.as_str()),
            ("x-request-id", id.as_str()),
        ];
        let a = client::send(direct.addr, "POST", path, &headers, &body)
            .await
            .unwrap();
        let b = client::send(tap.addr, "POST", path, &headers, &body)
            .await
            .unwrap();
        assert_eq!(a.status, b.status, "{id} {sim_opts}");
        assert_eq!(end_to_end(&a), end_to_end(&b), "{id}: headers differ");
        assert!(
            b.header("date").is_some(),
            "{id}: a proxy adds Date when the upstream has none"
        );
        assert!(a.complete && b.complete, "{id}: complete");
        let (ha, hb) = (Sha256::digest(&a.body), Sha256::digest(&b.body));
        assert_eq!(
            ha,
            hb,
            "{id} {sim_opts}: body differs ({} vs {} bytes)",
            a.body.len(),
            b.body.len()
        );
        all.update(hb);
        bytes += b.body.len();
        if stream {
            streamed += 1;
        } else {
            plain += 1;
        }
    }
    // Every request was counted exactly once.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tap.records.count() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(tap.records.count(), n);
    assert!(tap
        .records
        .all()
        .iter()
        .all(|r| r.outcome == tokentap_core::record::Outcome::Ok));
    println!("byte-exact: {streamed} streamed + {plain} non-streamed responses, {bytes} body bytes, 0 mismatches, sha256 of hashes {:x}", all.finalize());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_50ms_apart_arrive_as_separate_reads_within_5ms() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 50.0,
        itl_ms: 50.0,
        output_tokens: 12,
        ..Profile::default()
    });
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    let body = chat(true, false);
    let req = client::request_bytes(
        "POST",
        "/v1/chat/completions",
        "x",
        &[
            ("content-type", "application/json"),
            ("x-request-id", "nc-1"),
        ],
        &body,
    );
    let raw = raw_exchange(tap.addr, &req).await;
    let truth = behind
        .truth
        .wait_for("nc-1", Duration::from_secs(5))
        .await
        .unwrap();
    let sends = truth.token_times();
    assert_eq!(sends.len(), 12);
    let mut worst = Duration::ZERO;
    // The last token is followed at once by finish, [DONE] and the end: those
    // may share a read. Every earlier token was sent 50 ms after the previous.
    for (k, send) in sends.iter().enumerate().take(sends.len() - 1) {
        let hits: Vec<_> = raw
            .reads
            .iter()
            .filter(|(t, _)| {
                *t + Duration::from_millis(1) >= *send && *t <= *send + Duration::from_millis(5)
            })
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "token {k}: expected one read within 5 ms of its send, got {}",
            hits.len()
        );
        let (t, bytes) = hits[0];
        let events = bytes.windows(6).filter(|w| w == b"data: ").count();
        assert_eq!(
            events,
            1,
            "token {k} coalesced with another event: {:?}",
            String::from_utf8_lossy(bytes)
        );
        worst = worst.max(diff(*t, *send));
    }
    println!(
        "no coalescing: 11 events 50 ms apart, each its own read, worst send->read {:.3} ms",
        ms(worst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_clients_stream_and_the_empty_final_data_frame_is_harmless() {
    let _g = serial().await;
    let base = Profile {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        output_tokens: 20,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(base, "");
    let tcp = tokio::net::TcpStream::connect(tap.addr).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    for round in 0..3 {
        let body = chat(true, true);
        let direct_resp = post(direct.addr, &[("content-type", "application/json")], &body).await;
        let mut h2 = h2.clone().ready().await.unwrap();
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}/v1/chat/completions", tap.addr))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (resp, mut send) = h2.send_request(req, false).unwrap();
        send.send_data(Bytes::from(body), false).unwrap();
        // An empty DATA frame with END_STREAM: pingora #935 would write a
        // second chunked terminator upstream and break the next request.
        send.send_data(Bytes::new(), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200, "round {round}");
        let mut stream = resp.into_body();
        let mut got = Vec::new();
        while let Some(chunk) = stream.data().await {
            let chunk = chunk.unwrap();
            stream.flow_control().release_capacity(chunk.len()).unwrap();
            got.extend_from_slice(&chunk);
        }
        assert_eq!(
            got, direct_resp.body,
            "round {round}: h2c body equals direct"
        );
    }
    let ok = tap.sample("tokentap_requests_total{boundary=\"engine\",model=\"sim-model\",operation=\"chat\",outcome=\"ok\",stream=\"true\",tap=\"t\"}");
    assert_eq!(ok, 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_paths_are_served_on_the_admin_listener_only() {
    let _g = serial().await;
    let behind = sim(Profile::default());
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    let on_tap = client::send(tap.addr, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    // The simulator's own metrics page came through, not tokentap's.
    let body = String::from_utf8_lossy(&on_tap.body);
    assert_eq!(on_tap.status, 200);
    assert!(body.contains("vllm:kv_cache_usage_perc") && !body.contains("tokentap_"));
    assert_eq!(on_tap.header("server"), Some(&b"tokentap-sim"[..]));
    let metrics = client::send(tap.admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    assert_eq!(metrics.status, 200);
    assert!(String::from_utf8_lossy(&metrics.body).contains("tokentap_build_info"));
    assert_eq!(
        client::send(tap.admin, "GET", "/healthz", &[], b"")
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        client::send(tap.admin, "GET", "/readyz", &[], b"")
            .await
            .unwrap()
            .status,
        200
    );
    let models = client::send(tap.addr, "GET", "/v1/models", &[], b"")
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&models.body).contains("sim-model"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_encoding_identity_is_the_one_change_upstream_and_can_be_off() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 0.0,
        itl_ms: 0.0,
        output_tokens: 3,
        ..Profile::default()
    });
    let on = Tap::start(&format!("http://{}", behind.addr), "");
    let off = Tap::start(
        &format!("http://{}", behind.addr),
        "    accept_encoding_identity: false\n",
    );
    for (tap, id, want) in [(&on, "ae-on", "identity"), (&off, "ae-off", "gzip, br")] {
        let h = [
            ("accept-encoding", "gzip, br"),
            ("x-request-id", id),
            ("x-custom", "kept"),
        ];
        post(tap.addr, &h, &chat(true, false)).await;
        let truth = behind
            .truth
            .wait_for(id, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(truth.accept_encoding.as_deref(), Some(want), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_tap_forwards_untouched_and_measures_nothing() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 10,
        ..Profile::default()
    });
    let direct = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 10,
        ..Profile::default()
    });
    let tap = Tap::start(
        &format!("http://{}", behind.addr),
        "    measure: false\n    trace: create\n",
    );
    for (i, stream) in [true, false, true].into_iter().enumerate() {
        let id = format!("pass-{i}");
        let h = [("accept-encoding", "gzip"), ("x-request-id", id.as_str())];
        let through = post(tap.addr, &h, &chat(stream, true)).await;
        let straight = post(direct.addr, &h, &chat(stream, true)).await;
        assert_eq!(through.body, straight.body, "{id}");
        assert_eq!(end_to_end(&through), end_to_end(&straight), "{id}");
        let truth = behind
            .truth
            .wait_for(&id, Duration::from_secs(5))
            .await
            .unwrap();
        // No header changes at all: no identity, no created traceparent.
        assert_eq!(truth.accept_encoding.as_deref(), Some("gzip"), "{id}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(tap.records.count(), 0, "nothing recorded");
    assert!(
        !tap.scrape().contains("tokentap_requests_total{"),
        "nothing counted"
    );
    assert_eq!(tap.in_flight(), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_prompt_is_forwarded_whole_and_read_off_the_forwarding_thread() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        output_tokens: 8,
        ..Profile::default()
    });
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    // 2 MiB of prompt: above the inline-parse threshold, below the copy cap.
    let prompt = "lorem ipsum ".repeat(2 * 1024 * 1024 / 12);
    let messages = serde_json::json!([{"role": "user", "content": prompt}]);
    let body = serde_json::json!({
        "model": "big-prompt", "stream": true, "stream_options": {"include_usage": true},
        "messages": messages,
    })
    .to_string();
    assert!(body.len() > tokentap_core::record::INLINE_PARSE_BYTES);
    let h = [
        ("content-type", "application/json"),
        ("x-request-id", "big"),
    ];
    let r = post(tap.addr, &h, body.as_bytes()).await;
    assert!(r.complete);
    let truth = behind
        .truth
        .wait_for("big", Duration::from_secs(5))
        .await
        .unwrap();
    // The simulator counts a prompt token per 4 bytes of `messages`.
    let messages_len = messages.to_string().len();
    assert_eq!(
        truth.prompt_tokens as usize,
        messages_len / 4,
        "the simulator got the whole body"
    );
    let rec = tap.records.wait("big").await;
    assert_eq!(rec.request.model.as_deref(), Some("big-prompt"));
    assert_eq!(rec.request_body_bytes, body.len() as u64);
    assert_eq!(rec.request.prompt_bytes, Some(messages_len as u64));
    let series = "tokentap_requests_total{boundary=\"engine\",model=\"big-prompt\",operation=\"chat\",outcome=\"ok\",stream=\"true\",tap=\"t\"}";
    assert_eq!(tap.sample(series), 1.0, "labelled with the parsed model");
}

/// A keep-alive upstream answering every request with a small JSON body;
/// counts the connections it accepted.
async fn keepalive_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                loop {
                    let n = match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&tmp[..n]);
                    // Requests here carry small bodies with a Content-Length.
                    let mut headers = [httparse::EMPTY_HEADER; 32];
                    let mut req = httparse::Request::new(&mut headers);
                    let Ok(httparse::Status::Complete(head)) = req.parse(&buf) else {
                        continue;
                    };
                    let len: usize = req
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                        .unwrap_or(0);
                    if buf.len() < head + len {
                        continue;
                    }
                    buf.drain(..head + len);
                    let body = br#"{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err()
                        || s.write_all(body).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, conns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused() {
    let _g = serial().await;
    let (up, conns) = keepalive_upstream().await;
    let tap = Tap::start(&format!("http://{up}"), "");
    for _ in 0..50 {
        let r = post(tap.addr, &[], &chat(false, false)).await;
        assert_eq!(r.status, 200);
    }
    let pooled = conns.load(std::sync::atomic::Ordering::SeqCst);
    // Distinct first-byte and idle timeouts take tokentap's timed socket (a
    // pingora virtual socket, no fd of its own): pooled all the same, since
    // pingora-core 0005 matches a pooled connection by the address it was
    // connected to.
    let (up2, conns2) = keepalive_upstream().await;
    let distinct = Tap::start(
        &format!("http://{up2}"),
        "    timeouts:\n      first_byte_seconds: 60\n      idle_seconds: 30\n",
    );
    for _ in 0..50 {
        assert_eq!(
            post(distinct.addr, &[], &chat(false, false)).await.status,
            200
        );
    }
    let timed = conns2.load(std::sync::atomic::Ordering::SeqCst);
    println!("upstream connections for 50 requests: {pooled} (default timeouts), {timed} (distinct first-byte and idle timeouts)");
    assert!(pooled <= 2, "{pooled} upstream connections for 50 requests");
    assert!(
        timed <= 2,
        "{timed} upstream connections for 50 requests through the timed socket"
    );
}
