//! `tokentap join`: the taps' spans, received over OTLP (HTTP here; gRPC in
//! `join_fleet`), give the same attribution as the process's own correlator;
//! look-alike requests without `traceparent` are counted ambiguous; bad
//! exports get 4xx and a counter; memory stays bounded.

use crate::attribution::topology_with;
use crate::support::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::correlate::{JoinKind, Phase, Resolution};
use tokentap_join::config::JoinConfig;
use tokentap_join::Joiner;
use tokentap_net::client;

/// A joiner on free loopback ports, with a collector of its conclusions
/// (settling 1.5 s: longer than a tap's span batches take, 0.5 s);
/// `receiver` is YAML added to its `receiver:` section (indented 2).
pub fn joiner(receiver: &str) -> (Joiner, Arc<Attributions>) {
    let yaml = format!(
        "receiver:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n{receiver}admin:\n  listen: 127.0.0.1:0\ncorrelation:\n  settle_seconds: 1.5\n"
    );
    let cfg = JoinConfig::from_yaml(&yaml).unwrap();
    let got = Arc::new(Attributions::default());
    (Joiner::start(&cfg, vec![got.clone()]).unwrap(), got)
}

/// The `otlp:` section sending a process's spans to `joiner` (HTTP).
pub fn to_joiner(j: &Joiner) -> String {
    format!(
        "otlp:\n  endpoint: http://{}\n  metrics: false\n  timeout_seconds: 2\n",
        j.http
    )
}

async fn resolution(a: &Attributions, id: &str) -> Resolution {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = a.resolution_of(id) {
            return r;
        }
        assert!(Instant::now() < deadline, "no resolution for {id}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ms(v: f64) -> f64 {
    v * 1e3
}

/// Every clock-free figure of `a` (in process) and `b` (joiner) agrees
/// within `tol` seconds; returns the largest difference.
fn compare(id: &str, a: &Resolution, b: &Resolution, tol: f64) -> f64 {
    let mut worst: f64 = 0.0;
    let mut near = |what: &str, x: f64, y: f64| {
        let d = (x - y).abs();
        worst = worst.max(d);
        assert!(
            d <= tol,
            "{id} {what}: in process {:.3} ms, joiner {:.3} ms",
            ms(x),
            ms(y)
        );
    };
    assert_eq!(
        a.pairs.len(),
        b.pairs.len(),
        "{id}: pairs {:?} vs {:?}",
        a.pairs,
        b.pairs
    );
    for p in &a.pairs {
        let q = b
            .pairs
            .iter()
            .find(|q| q.outer == p.outer && q.inner == p.inner)
            .unwrap_or_else(|| panic!("{id}: the joiner has no {}/{} pair", p.outer, p.inner));
        near("e2e overhead", p.e2e, q.e2e);
        near("TTFB overhead", p.ttfb.unwrap(), q.ttfb.unwrap());
        near("TTFT overhead", p.ttft.unwrap(), q.ttft.unwrap());
        assert_eq!(p.relay_after_first.len(), q.relay_after_first.len(), "{id}");
        for (x, y) in p.relay_after_first.iter().zip(&q.relay_after_first) {
            near("relay delay after the first token", *x, *y);
        }
        for (x, y) in p.added_jitter.iter().zip(&q.added_jitter) {
            near("added jitter", *x, *y);
        }
        assert_eq!(p.token_mismatch, q.token_mismatch, "{id}");
        assert!(q.request_path.is_none() && q.relay_delays.is_empty());
    }
    let hops = |r: &Resolution| {
        let mut h: Vec<_> = r
            .hops
            .iter()
            .map(|h| (h.phase.as_str(), h.duration))
            .collect();
        h.sort();
        h
    };
    let (ha, hb) = (hops(a), hops(b));
    assert_eq!(ha.len(), hb.len(), "{id}: hops");
    for ((pa, da), (pb, db)) in ha.iter().zip(&hb) {
        assert_eq!(pa, pb, "{id}: guardrail phase");
        near("guardrail duration", da.as_secs_f64(), db.as_secs_f64());
    }
    for e in b.exposure.iter() {
        let f = a
            .exposure
            .iter()
            .find(|f| f.phase == e.phase && f.owner == e.owner)
            .unwrap();
        near(
            "exposed guardrail time",
            f.exposed.as_secs_f64(),
            e.exposed.as_secs_f64(),
        );
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_fed_the_taps_spans_attributes_as_the_process_does() {
    let _g = serial().await;
    let (j, joined) = joiner("");
    // edge → gw → reference gateway (20 ms of its own, one input guardrail
    // call) → engine tap → simulator; every tap's span to the joiner.
    let t = topology_with(1, false, false, &to_joiner(&j));
    let mut worst: f64 = 0.0;
    let (mut own_legs, mut guard_legs_all): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let mut long = Vec::new();
    let n = 12;
    // Warm-up requests, joined and counted but not compared with the
    // gateway's record: a cold path's first requests also open the
    // gateway's and the taps' connections (milliseconds on a loaded VM),
    // time the taps rightly give the gateway and its record leaves out.
    let warm = 2;
    let warm_ids = (0..warm).map(|i| format!("join-warm-{i}"));
    for id in warm_ids.chain((0..n).map(|i| format!("join-{i}"))) {
        let r = post(
            t.edge,
            &[("content-type", "application/json"), ("x-request-id", &id)],
            &chat(true, true),
        )
        .await;
        assert!(r.complete);
    }
    for i in 0..n {
        let id = format!("join-{i}");
        let here = resolution(&t.m.attributions, &id).await;
        let there = resolution(&joined, &id).await;
        worst = worst.max(compare(&id, &here, &there, 0.001));
        let gw = there.pairs.iter().find(|p| &*p.outer == "gw").unwrap();
        assert_eq!(gw.joined_by, JoinKind::Trace);
        // The gateway's own time before the first token — its TTFT overhead
        // minus the guardrail call — against its record: processing before
        // the engine request plus the first token's relay.
        let guard = there
            .exposure
            .iter()
            .find(|e| e.phase == Phase::Input)
            .unwrap();
        let own = gw.ttft.unwrap() - guard.exposed.as_secs_f64();
        let truth = t.gateway.truth(&id).await;
        let guard_truth: f64 = truth
            .input_guards
            .iter()
            .map(|(s, e)| (*e - *s).as_secs_f64())
            .sum();
        let first_relay = truth
            .relays
            .iter()
            .find(|r| r.2)
            .map(|(recv, sent, _)| (*sent - *recv).as_secs_f64())
            .unwrap();
        let processing = (truth.forwarded - truth.received).as_secs_f64() - guard_truth;
        let want = processing + first_relay;
        // Signed: the taps give the gateway the loopback legs between
        // their observation points and its record's (through the gw and
        // engine taps, and around the guardrail call, which the guard tap
        // sees from inside), never less. A slip that gives the gateway
        // less than its record (the 3 ms relay delay, the 20 ms
        // processing or the 30 ms guardrail call on the wrong side) turns
        // these negative; one that gives it more shows in the median.
        let legs = own - want;
        let guard_legs = guard_truth - guard.exposed.as_secs_f64();
        let said = format!(
            "{id}: the gateway's own time {:.2} ms vs its record's {:.2} ms; guardrail {:.2} ms vs {:.2} ms",
            ms(own),
            ms(want),
            ms(guard.exposed.as_secs_f64()),
            ms(guard_truth)
        );
        assert!(legs >= -0.000_2 && guard_legs >= -0.000_2, "{said}");
        if legs >= 0.010 || guard_legs >= 0.010 {
            println!("over 10 ms of legs: {said}");
            long.push(said);
        }
        own_legs.push(legs);
        guard_legs_all.push(guard_legs);
    }
    // The legs themselves, as a median: four passes through a tap and two
    // around the guardrail call, 1.0–2.0 ms on the slow 2-vCPU host of
    // the sixth session (a host stall adds milliseconds to single
    // requests, not to the median).
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (own_p50, guard_p50) = (median(&mut own_legs), median(&mut guard_legs_all));
    // A plateau (Nagle × delayed ACK, 40 ms) on some requests shows here;
    // one request the hypervisor stalled (this VM's `steal`) may pass.
    assert!(long.len() <= 1, "over 10 ms of legs: {long:?}");
    let own_worst = own_legs.last().copied().unwrap_or(0.0);
    assert!(
        own_p50 < 0.003 && guard_p50 < 0.002,
        "median legs given to the gateway {:.2} ms, around its guardrail call {:.2} ms (over {n})",
        ms(own_p50),
        ms(guard_p50)
    );
    let scrape = String::from_utf8(j.registry.encode()).unwrap();
    for needle in [
        format!("tokentap_boundary_overhead_seconds_count{{inner=\"engine\",outer=\"gw\",phase=\"ttft\"}} {}", n + warm),
        format!("tokentap_guardrail_exposed_seconds_count{{phase=\"input\",tap=\"gw\"}} {}", n + warm),
        format!("tokentap_join_spans_total{{result=\"joined\"}} {}", 4 * (n + warm)),
        "tokentap_join_exports_total{result=\"ok\"}".to_string(),
    ] {
        assert!(scrape.contains(&needle), "missing `{needle}`");
    }
    assert!(
        !scrape.contains("phase=\"request_path\""),
        "the joiner gives no request path (it needs one clock)"
    );
    println!(
        "joiner vs the process's correlator, {n} requests through four taps: every clock-free figure within {:.3} ms; the gateway given its record plus {:.3} ms of legs at the median, {:.3} ms at worst",
        ms(worst),
        ms(own_p50),
        ms(own_worst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_traceparent_the_fingerprint_joins_and_look_alikes_are_ambiguous() {
    let _g = serial().await;
    let (j, joined) = joiner("");
    // The gateway strips traceparent: gw and engine join by fingerprint.
    let t = topology_with(0, false, true, &to_joiner(&j));
    let id = "fp-1";
    let r = post(t.edge, &[("x-request-id", id)], &chat(true, true)).await;
    assert!(r.complete);
    let there = resolution(&joined, id).await;
    let gw = there.pairs.iter().find(|p| &*p.outer == "gw").unwrap();
    assert_eq!(gw.joined_by, JoinKind::Fingerprint);
    assert!(gw.ttft.is_some());
    // Two identical requests at once: their engine records match two groups.
    let before = joined.count("ambiguous");
    let body = chat(true, true);
    let (a, b) = tokio::join!(
        post(t.edge, &[("x-request-id", "twin-a")], &body),
        post(t.edge, &[("x-request-id", "twin-b")], &body),
    );
    assert!(a.complete && b.complete);
    let deadline = Instant::now() + Duration::from_secs(10);
    while joined.count("ambiguous") < before + 2 {
        assert!(
            Instant::now() < deadline,
            "look-alikes were not counted ambiguous"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "fingerprint join without traceparent; two look-alikes in flight: {} records ambiguous",
        joined.count("ambiguous") - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_and_foreign_exports_are_refused_and_counted() {
    let _g = serial().await;
    let (j, _) = joiner("  max_body_bytes: 4096\n");
    let post_to = |body: Vec<u8>, ctype: &'static str, enc: Option<&'static str>| {
        let addr = j.http;
        async move {
            let mut h = vec![("content-type", ctype)];
            if let Some(e) = enc {
                h.push(("content-encoding", e));
            }
            client::send(addr, "POST", "/v1/traces", &h, &body)
                .await
                .unwrap()
                .status
        }
    };
    assert_eq!(
        post_to(b"\xff\xff\xff".to_vec(), "application/x-protobuf", None).await,
        400
    );
    assert_eq!(
        post_to(b"{not json".to_vec(), "application/json", None).await,
        400
    );
    assert_eq!(
        post_to(b"x".repeat(8192), "application/x-protobuf", None).await,
        413
    );
    assert_eq!(post_to(b"{}".to_vec(), "text/plain", None).await, 415);
    assert_eq!(
        post_to(b"{}".to_vec(), "application/json", Some("br")).await,
        415
    );
    assert_eq!(
        post_to(b"not gzip".to_vec(), "application/json", Some("gzip")).await,
        400
    );
    // A valid export of another service's span: accepted, counted foreign.
    let foreign = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"GET /","startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"http.route","value":{"stringValue":"/"}}]}]}]}]}"#;
    assert_eq!(
        post_to(foreign.as_bytes().to_vec(), "application/json", None).await,
        200
    );
    let get = client::send(j.http, "GET", "/v1/traces", &[], b"")
        .await
        .unwrap();
    assert_eq!(get.status, 405);
    let scrape = String::from_utf8(j.registry.encode()).unwrap();
    for needle in [
        "tokentap_join_exports_total{result=\"malformed\"} 3",
        "tokentap_join_exports_total{result=\"too_large\"} 1",
        "tokentap_join_exports_total{result=\"unsupported\"} 2",
        "tokentap_join_exports_total{result=\"ok\"} 1",
        "tokentap_join_spans_total{result=\"foreign\"} 1",
    ] {
        assert!(scrape.contains(needle), "missing `{needle}`:\n{scrape}");
    }
}

/// One tokentap-looking span of its own trace (engine tap, 64 offsets).
fn tap_span(i: u64) -> opentelemetry_proto::tonic::trace::v1::Span {
    use opentelemetry_proto::tonic::common::v1::{
        any_value::Value, AnyValue, ArrayValue, KeyValue,
    };
    let kv = |k: &str, v: Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    };
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&(i + 1).to_be_bytes());
    let offsets = (0..64)
        .map(|k| AnyValue {
            value: Some(Value::IntValue(20_000 + k * 5_000)),
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: trace_id.to_vec(),
        span_id: (i + 1).to_be_bytes().to_vec(),
        name: "chat m".into(),
        start_time_unix_nano: now,
        end_time_unix_nano: now + 400_000_000,
        attributes: vec![
            kv("tokentap.tap", Value::StringValue("engine".into())),
            kv("tokentap.boundary", Value::StringValue("engine".into())),
            kv("tokentap.outcome", Value::StringValue("ok".into())),
            kv("tokentap.trace.source", Value::StringValue("header".into())),
            kv(
                "tokentap.request_id",
                Value::StringValue(format!("open-{i}")),
            ),
            kv("tokentap.ttft", Value::DoubleValue(0.02)),
            kv("tokentap.e2e", Value::DoubleValue(0.4)),
            kv(
                "tokentap.token_events.offsets_us",
                Value::ArrayValue(ArrayValue { values: offsets }),
            ),
        ],
        ..Default::default()
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_times_max_traces_of_open_traces_keep_memory_bounded_and_count_evictions() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    use prost::Message;
    let _g = serial().await;
    let (http, admin) = (free_addr(), free_addr());
    let scratch = scratch("join-mem");
    let cfg = scratch.path().join("join.yaml");
    std::fs::write(
        &cfg,
        format!("receiver:\n  grpc_listen: 127.0.0.1:0\n  http_listen: {http}\nadmin:\n  listen: {admin}\ncorrelation:\n  settle_seconds: 300\n  max_age_seconds: 600\n  max_traces: 2000\n"),
    )
    .unwrap();
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["join", "-c"])
            .arg(&cfg)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    crate::process::wait_ready(admin, "the joiner").await;
    let send = |from: u64, to: u64| async move {
        for batch in (from..to).step_by(500) {
            let spans = (batch..(batch + 500).min(to)).map(tap_span).collect();
            let req = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            let r = client::send(
                http,
                "POST",
                "/v1/traces",
                &[("content-type", "application/x-protobuf")],
                &req.encode_to_vec(),
            )
            .await
            .unwrap();
            assert_eq!(r.status, 200);
        }
    };
    // Twice the cap (memory at its bound), then ten times.
    send(0, 4_000).await;
    let at_cap = rss_kib(child.id());
    send(4_000, 20_000).await;
    let at_ten = rss_kib(child.id());
    let scrape = client::send(admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    let scrape = String::from_utf8_lossy(&scrape.body).into_owned();
    let _ = child.kill();
    let _ = child.wait();
    let total = prom_totals(&scrape, "tokentap_correlation_total").0;
    let evicted_only = scrape
        .lines()
        .find_map(|l| l.strip_prefix("tokentap_correlation_total{result=\"evicted\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    println!(
        "20,000 open traces into a joiner holding 2,000: RSS {} KiB at 2x the cap, {} KiB at 10x; {evicted_only} records evicted (of {total} counted)",
        at_cap, at_ten
    );
    assert_eq!(
        evicted_only, 18_000.0,
        "every record beyond the cap is evicted and counted"
    );
    assert!(
        at_ten <= at_cap + 8 * 1024,
        "RSS grew from {at_cap} KiB to {at_ten} KiB past the cap"
    );
}
