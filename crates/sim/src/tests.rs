//! The engine model over real sockets: KV queueing shifts whole responses,
//! waiters that leave free their place, the favoured tenant jumps the
//! queue, oversize requests are refused, and repeated prompts hit the
//! prefix cache (in the truth and in `usage`).

use super::*;
use std::time::Duration;
use tokentap_net::client::{self, Response};

/// `hello there` as one user message: 41 bytes of JSON = 10 prompt tokens.
fn body(content: &str) -> Vec<u8> {
    serde_json::json!({
        "model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": content}],
    })
    .to_string()
    .into_bytes()
}

fn sim(profile: Profile, engine: EngineArgs) -> Simulator {
    Simulator::spawn(&SimArgs {
        profile,
        engine,
        ..SimArgs::default()
    })
    .unwrap()
}

async fn post(sim: &Simulator, id: &str, extra: &[(&str, &str)], content: &str) -> Response {
    let mut h = vec![("x-request-id", id)];
    h.extend_from_slice(extra);
    client::send(sim.addr, "POST", "/v1/chat/completions", &h, &body(content))
        .await
        .unwrap()
}

async fn truth(sim: &Simulator, id: &str) -> Truth {
    sim.truth
        .wait_for(id, Duration::from_secs(5))
        .await
        .unwrap()
}

fn fast(output_tokens: u32, itl_ms: f64) -> Profile {
    Profile {
        ttft_ms: 10.0,
        itl_ms,
        output_tokens,
        ..Profile::default()
    }
}

fn kv(capacity: u64, favour: Option<&str>) -> EngineArgs {
    EngineArgs {
        kv_capacity_tokens: capacity,
        favour_tenant: favour.map(str::to_owned),
        ..EngineArgs::default()
    }
}

#[tokio::test]
async fn a_queued_request_waits_and_its_whole_response_shifts() {
    // 10 prompt + 10 output tokens: room for one request at a time.
    let s = sim(fast(10, 5.0), kv(20, None));
    let a = post(&s, "a", &[], "hello there");
    let b = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        post(&s, "b", &[], "hello there").await
    };
    let (ra, rb) = tokio::join!(a, b);
    assert_eq!((ra.status, rb.status), (200, 200));
    let (ta, tb) = (truth(&s, "a").await, truth(&s, "b").await);
    assert_eq!((ta.running, tb.running), (1, 1));
    assert!(ta.queue_wait_ms < 5.0, "{}", ta.queue_wait_ms);
    // a lasts 10 + 9 × 5 = 55 ms; b arrived 10 ms in.
    assert!(tb.queue_wait_ms > 25.0, "{}", tb.queue_wait_ms);
    let headers = tb.events.first().unwrap();
    assert!(headers.t_ms >= tb.queue_wait_ms);
    assert!(tb.ttft().unwrap().as_secs_f64() * 1000.0 >= tb.queue_wait_ms + 10.0);
    assert_eq!(tb.prompt_tokens, 10);
}

#[tokio::test]
async fn oversize_is_a_400_and_a_leaving_waiter_frees_its_place() {
    let s = sim(fast(10, 20.0), kv(20, None));
    let big = post(&s, "big", &[], &"x".repeat(200)).await;
    assert_eq!(big.status, 400);
    assert!(String::from_utf8_lossy(&big.body).contains("capacity"));
    assert!(truth(&s, "big").await.rejected);

    let a = post(&s, "a", &[], "hello there");
    let b = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Gives up while queued: the client closes the connection.
        let gone =
            tokio::time::timeout(Duration::from_millis(40), post(&s, "b", &[], "hello there"))
                .await;
        assert!(gone.is_err());
        post(&s, "c", &[], "hello there").await
    };
    let (ra, rc) = tokio::join!(a, b);
    assert_eq!((ra.status, rc.status), (200, 200));
    let tb = truth(&s, "b").await;
    assert_eq!(tb.running, 0, "never admitted");
    assert!(tb.peer_closed_ms.is_some());
    assert!(!tb.complete);
    // c was admitted when a ended, not a whole request (190 ms) later
    // after b: generous on a loaded machine, where a itself runs late.
    let ta = truth(&s, "a").await;
    let tc = truth(&s, "c").await;
    let a_end = ta.events.last().unwrap().at;
    let admitted = tc.received + Duration::from_secs_f64(tc.queue_wait_ms / 1000.0);
    assert!(admitted >= a_end);
    assert!(
        admitted < a_end + Duration::from_millis(100),
        "c admitted {:?} after a ended",
        admitted - a_end
    );
}

#[tokio::test]
async fn the_favoured_tenant_jumps_the_queue() {
    let s = sim(fast(10, 10.0), kv(20, Some("vip")));
    let first = post(&s, "first", &[("x-tenant", "t1")], "hello there");
    let other = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        post(
            &s,
            "other",
            &[("authorization", "Bearer t2")],
            "hello there",
        )
        .await
    };
    let vip = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        post(&s, "vip", &[("authorization", "Bearer vip")], "hello there").await
    };
    let (r1, r2, r3) = tokio::join!(first, other, vip);
    assert_eq!((r1.status, r2.status, r3.status), (200, 200, 200));
    let (to, tv) = (truth(&s, "other").await, truth(&s, "vip").await);
    assert_eq!((to.tenant.as_str(), tv.tenant.as_str()), ("t2", "vip"));
    let admitted = |t: &Truth| t.received + Duration::from_secs_f64(t.queue_wait_ms / 1000.0);
    assert!(admitted(&tv) < admitted(&to));
}

#[tokio::test]
async fn a_repeated_prompt_hits_the_prefix_cache() {
    let engine = EngineArgs {
        prefix_cache: true,
        ..EngineArgs::default()
    };
    let s = sim(fast(3, 1.0), engine);
    let long = "lorem ipsum ".repeat(100);
    post(&s, "one", &[], &long).await;
    let second = post(&s, "two", &[], &long).await;
    let (t1, t2) = (truth(&s, "one").await, truth(&s, "two").await);
    assert_eq!(t1.cached_tokens, 0);
    // 1,230 bytes: 4 full blocks of 64 tokens.
    assert_eq!(t2.cached_tokens, 256);
    let text = String::from_utf8_lossy(&second.body);
    assert!(text.contains(r#""cached_tokens":256"#), "{text}");
    post(&s, "three", &[], "something else entirely").await;
    assert_eq!(truth(&s, "three").await.cached_tokens, 0);
}
