//! Attribution across machines: the client, an edge tap, the reference
//! gateway (20 ms of its own, one input guardrail call), an engine tap, a
//! guardrail tap, the simulators and a joiner, each in its own network
//! namespace (`netns`), each tokentap its own process exporting spans. A
//! stand-in for the Collector (`Relay`) in the test process receives the
//! taps' spans and fans them out: as they are to the joiner of its own
//! namespace (OTLP/gRPC, like the Collector's loadbalancing exporter) and
//! to an in-process joiner; with every machine's wall clock moved by up to
//! ±500 ms to another; split by trace id over two more (the loadbalancing
//! exporter's routing). The yardstick is one process's resolution of the
//! same requests: the taps' record logs read back and resolved together,
//! request by request.

use crate::collector::Collector;
use crate::join::joiner;
use crate::netns::{Netns, Procs};
use crate::process::wait_200;
use crate::support::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant};
use tokentap_core::analysis::guardrail::record_of;
use tokentap_core::analysis::span_report::read_jsonl;
use tokentap_core::analysis::Sample;
use tokentap_core::correlate::resolve::resolve;
use tokentap_core::correlate::{Clocks, JoinKind, Phase, Resolution, TapRecord};
use tokentap_net::client;

/// Where the relay sends a copy of every export.
#[derive(Clone)]
enum Target {
    /// OTLP/gRPC, unchanged (the joiner in its namespace).
    Grpc(String),
    /// OTLP/HTTP protobuf: each tap's span times moved by its offset (ms),
    /// and only the traces whose id falls in `split` = (index, of).
    Http {
        addr: std::net::SocketAddr,
        skew: HashMap<&'static str, i64>,
        split: Option<(u8, u8)>,
    },
}

fn tap_of(span: &opentelemetry_proto::tonic::trace::v1::Span) -> Option<&str> {
    span.attributes
        .iter()
        .find(|kv| kv.key == "tokentap.tap")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        })
}

fn shifted(
    mut req: ExportTraceServiceRequest,
    skew: &HashMap<&str, i64>,
    split: Option<(u8, u8)>,
) -> ExportTraceServiceRequest {
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            ss.spans.retain(|s| match split {
                None => true,
                Some((i, n)) => s.trace_id.first().is_some_and(|b| b % n == i),
            });
            for s in &mut ss.spans {
                let ms = tap_of(s).and_then(|t| skew.get(t)).copied().unwrap_or(0);
                let ns = ms * 1_000_000;
                s.start_time_unix_nano = s.start_time_unix_nano.saturating_add_signed(ns);
                s.end_time_unix_nano = s.end_time_unix_nano.saturating_add_signed(ns);
            }
        }
    }
    req
}

async fn forward(req: &ExportTraceServiceRequest, targets: &[Target]) {
    for t in targets {
        match t {
            Target::Grpc(url) => {
                if let Ok(mut c) = TraceServiceClient::connect(url.clone()).await {
                    let _ = c.export(req.clone()).await;
                }
            }
            Target::Http { addr, skew, split } => {
                let body = shifted(req.clone(), skew, *split).encode_to_vec();
                let _ = client::send(
                    *addr,
                    "POST",
                    "/v1/traces",
                    &[("content-type", "application/x-protobuf")],
                    &body,
                )
                .await;
            }
        }
    }
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A tap's config: spans to the relay, and a record log in `dir`.
#[allow(clippy::too_many_arguments)]
fn tap(
    dir: &std::path::Path,
    name: &str,
    boundary: &str,
    listen: std::net::SocketAddr,
    up: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    otlp: std::net::SocketAddr,
    extra: &str,
) -> String {
    let log = dir.join(format!("{name}.jsonl"));
    format!(
        "admin:\n  listen: {admin}\notlp:\n  endpoint: http://{otlp}\n  metrics: false\n  timeout_seconds: 2\ntaps:\n  - name: {name}\n    boundary: {boundary}\n    listen: {listen}\n    upstream: http://{up}\n    record_log:\n      path: {}\n{extra}",
        log.display()
    )
}

fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// The figures compared, per request: from the joiner and from the logs.
#[derive(Default, Debug)]
struct Figures {
    ttft: Vec<f64>,
    e2e: Vec<f64>,
    relay_after_first: Vec<f64>,
    guard: Vec<f64>,
    own: Vec<f64>,
}

fn figures(rs: &[Resolution]) -> Figures {
    let mut f = Figures::default();
    for r in rs {
        let Some(p) = r
            .pairs
            .iter()
            .find(|p| &*p.outer == "edge" && &*p.inner == "engine")
        else {
            continue;
        };
        f.ttft.push(p.ttft.unwrap_or(f64::NAN));
        f.e2e.push(p.e2e);
        f.relay_after_first.extend(&p.relay_after_first);
        let guard: f64 = r
            .hops
            .iter()
            .filter(|h| h.phase == Phase::Input)
            .map(|h| h.duration.as_secs_f64())
            .sum();
        f.guard.push(guard);
        f.own.push(p.ttft.unwrap_or(f64::NAN) - guard);
    }
    f
}

/// The pid of the tap process of host `h` (the order of `procs`).
fn procs_pid(procs: &Procs, h: usize) -> String {
    let i = match h {
        3 => 2, // engine tap
        4 => 3, // guard tap
        _ => 5, // edge tap
    };
    procs.0[i].id().to_string()
}

fn all_calls(a: &Attributions, ids: &[String]) -> u64 {
    resolutions(a, ids)
        .iter()
        .map(|r| r.hops.len() as u64)
        .sum()
}

fn resolutions(a: &Attributions, ids: &[String]) -> Vec<Resolution> {
    ids.iter().filter_map(|id| a.resolution_of(id)).collect()
}

async fn all_resolved(a: &Attributions, ids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while resolutions(a, ids).len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} requests resolved",
            resolutions(a, ids).len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const N: usize = 100;
/// Requests before the measured ones: a cold path's first requests also
/// open the gateway's and the taps' connections (milliseconds on a loaded
/// VM), time the taps give the gateway and its record leaves out.
const WARM: usize = 2;
/// How far a figure resolved from the record logs may be from the
/// joiner's from the spans: the logs keep token-event offsets in µs.
const LOG_PRECISION: f64 = 20e-6;
const PROCESSING_MS: f64 = 20.0;
const RELAY_MS: f64 = 3.0;
const GUARD_MS: f64 = 30.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taps_on_five_machines_are_attributed_by_joiners_as_in_one_process() {
    let _g = serial().await;
    let net = Netns::new(&["client", "edge", "gw", "engtap", "guard", "sim", "join"]);
    let (edge, gw, engtap, guard, simh, joinh) = (1, 2, 3, 4, 5, 6);
    // The collector stand-in, on the test's own address on the bridge.
    let (raw, raw_got) = joiner("");
    let (skewed, skewed_got) = joiner("");
    let (half_a, a_got) = joiner("");
    let (half_b, b_got) = joiner("");
    let skew: HashMap<&'static str, i64> = [
        ("edge", 500),
        ("engine", -500),
        ("moderation", 250),
        ("guard", 250),
    ]
    .into();
    let targets = vec![
        Target::Grpc(format!("http://{}", net.sock(joinh, 4317))),
        Target::Http {
            addr: raw.http,
            skew: HashMap::new(),
            split: None,
        },
        Target::Http {
            addr: skewed.http,
            skew,
            split: None,
        },
        Target::Http {
            addr: half_a.http,
            skew: HashMap::new(),
            split: Some((0, 2)),
        },
        Target::Http {
            addr: half_b.http,
            skew: HashMap::new(),
            split: Some((1, 2)),
        },
    ];
    let relay = Collector::relay(net.root_sock(0), move |req| {
        let targets = targets.clone();
        async move { forward(&req, &targets).await }
    });

    let scratch = scratch("fleet");
    let dir = scratch.path();
    let bin = env!("CARGO_BIN_EXE_tokentap");
    let (sim_engine, sim_guard) = (net.sock(simh, 8000), net.sock(simh, 8001));
    let admin = |h| net.sock(h, 9464);
    let edge_cfg = write(
        dir,
        "edge.yaml",
        &tap(
            dir,
            "edge",
            "gateway",
            net.sock(edge, 8080),
            net.sock(gw, 8000),
            admin(edge),
            relay.addr,
            "    trace: create\n",
        ),
    );
    let eng_cfg = write(
        dir,
        "engine.yaml",
        &tap(
            dir,
            "engine",
            "engine",
            net.sock(engtap, 8080),
            sim_engine,
            admin(engtap),
            relay.addr,
            "",
        ),
    );
    let guard_cfg = write(
        dir,
        "guard.yaml",
        &tap(
            dir,
            "guard",
            "guardrail",
            net.sock(guard, 8080),
            sim_guard,
            admin(guard),
            relay.addr,
            "    hop: moderation\n",
        ),
    );
    let join_cfg = write(
        dir,
        "join.yaml",
        &format!(
            "receiver:\n  grpc_listen: {}\n  http_listen: {}\nadmin:\n  listen: {}\ncorrelation:\n  settle_seconds: 1.5\n",
            net.sock(joinh, 4317),
            net.sock(joinh, 4318),
            net.sock(joinh, 9465)
        ),
    );
    let s = |a: std::net::SocketAddr| a.to_string();
    let mut procs = Procs(vec![
        net.spawn(
            simh,
            bin,
            &[
                "sim",
                "--listen",
                &s(sim_engine),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "5",
                "--output-tokens",
                "8",
            ],
        ),
        net.spawn(
            simh,
            bin,
            &[
                "sim",
                "--listen",
                &s(sim_guard),
                "--ttft-ms",
                &GUARD_MS.to_string(),
            ],
        ),
        net.spawn(engtap, bin, &["run", "-c", &eng_cfg]),
        net.spawn(guard, bin, &["run", "-c", &guard_cfg]),
        net.spawn(
            gw,
            bin,
            &[
                "gateway",
                "--listen",
                &s(net.sock(gw, 8000)),
                "--engine",
                &format!("http://{}", net.sock(engtap, 8080)),
                "--guardrail",
                &format!("http://{}", net.sock(guard, 8080)),
                "--input-guards",
                "1",
                "--processing-ms",
                &PROCESSING_MS.to_string(),
                "--relay-delay-ms",
                &RELAY_MS.to_string(),
            ],
        ),
        net.spawn(edge, bin, &["run", "-c", &edge_cfg]),
        net.spawn(joinh, bin, &["join", "-c", &join_cfg]),
    ]);
    // Processes in namespaces start slower: 20 s each.
    let limit = Duration::from_secs(20);
    for (h, what) in [
        (edge, "edge tap"),
        (engtap, "engine tap"),
        (guard, "guard tap"),
    ] {
        wait_200(admin(h), "/readyz", limit, what).await;
    }
    wait_200(net.sock(joinh, 9465), "/readyz", limit, "joiner").await;
    wait_200(net.sock(gw, 8000), "/healthz", limit, "gateway").await;

    // The client, on its own machine: warm-up requests (a cold path's
    // first requests also open the gateway's and the taps' connections;
    // joined, counted and reported, not compared), then N sequential
    // streams, ids known.
    let url = format!("http://{}", net.sock(edge, 8080));
    drive(&net, bin, &url, WARM, "fleet-warm-").await;
    drive(&net, bin, &url, N, "fleet-").await;
    let measured: Vec<String> = (0..N).map(|i| format!("fleet-{i}")).collect();
    let ids: Vec<String> = (0..WARM)
        .map(|i| format!("fleet-warm-{i}"))
        .chain(measured.iter().cloned())
        .collect();
    all_resolved(&raw_got, &ids).await;
    all_resolved(&skewed_got, &ids).await;
    let many = figures(&resolutions(&raw_got, &measured));
    // 2. The gateway's delay and the guardrail time, recovered, p50 within
    // the wire legs of the gateway's own record of each request (its /truth): the
    // layer's TTFT overhead against the time until it sent the engine
    // request (its configured processing and its guardrail call) plus the
    // first token's relay; the guardrail time against its call.
    let mut truth_own = Vec::new();
    let mut truth_guard = Vec::new();
    let mut truth_ttft = Vec::new();
    for id in &measured {
        let r = client::send(net.sock(gw, 8000), "GET", &format!("/truth/{id}"), &[], b"")
            .await
            .unwrap();
        let t: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let guards: f64 = t["input_guards_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g[1].as_f64().unwrap() - g[0].as_f64().unwrap())
            .sum();
        truth_guard.push(guards / 1e3);
        truth_own.push(
            (t["forwarded_ms"].as_f64().unwrap() - guards
                + t["first_token_relay_ms"].as_f64().unwrap())
                / 1e3,
        );
        truth_ttft.push(
            (t["forwarded_ms"].as_f64().unwrap() + t["first_token_relay_ms"].as_f64().unwrap())
                / 1e3,
        );
    }
    let own = quantile(many.own.clone(), 0.5) * 1e3;
    let own_truth = quantile(truth_own, 0.5) * 1e3;
    let guard_p50 = quantile(many.guard.clone(), 0.5) * 1e3;
    let guard_truth = quantile(truth_guard, 0.5) * 1e3;
    let ttft = quantile(many.ttft.clone(), 0.5) * 1e3;
    let ttft_truth = quantile(truth_ttft, 0.5) * 1e3;
    // Signed, as it::join and it::attribution: the taps around the gateway
    // see its record plus the wire legs between the machines (the request
    // to it and on to the engine tap, the first token back through it:
    // 0.7-1.0 ms here), never less; the guard tap, inside the guardrail
    // call, sees less than the gateway's call. A slip that puts the 20 ms
    // processing or the 30 ms call on the wrong side turns a leg negative
    // by milliseconds; a bias shows above 2 ms.
    let ttft_leg = ttft - ttft_truth;
    let guard_leg = guard_truth - guard_p50;
    assert!(
        (-0.2..2.0).contains(&ttft_leg),
        "the gateway's TTFT overhead p50: joiner {ttft:.3} ms, its record {ttft_truth:.3} ms"
    );
    assert!(
        (-0.2..2.0).contains(&guard_leg),
        "guardrail time p50: joiner {guard_p50:.3} ms, the gateway's record {guard_truth:.3} ms (configured {GUARD_MS})"
    );
    // 3. Wall clocks ±500 ms apart change nothing.
    for id in &ids {
        let (a, b) = (
            raw_got.resolution_of(id).unwrap(),
            skewed_got.resolution_of(id).unwrap(),
        );
        assert_eq!(a.pairs, b.pairs, "{id}: the clocks' offsets changed a pair");
        assert_eq!(a.hops, b.hops, "{id}");
        assert_eq!(a.exposure, b.exposure, "{id}");
    }
    // 4. Two joiners, traces split between them, give one joiner's totals.
    let totals = |js: &[&tokentap_join::Joiner], name: &str| {
        js.iter()
            .map(|j| prom_totals(&String::from_utf8(j.registry.encode()).unwrap(), name))
            .fold((0.0, 0.0), |acc, (c, s, _)| (acc.0 + c, acc.1 + s))
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    for family in [
        "tokentap_boundary_overhead_seconds",
        "tokentap_relay_delay_after_first_token_seconds",
        "tokentap_guardrail_duration_seconds",
        "tokentap_guardrail_exposed_seconds",
    ] {
        let one_joiner = totals(&[&raw], family);
        let two = totals(&[&half_a, &half_b], family);
        assert!(one_joiner.0 > 0.0, "{family}: nothing observed");
        assert_eq!(
            one_joiner.0, two.0,
            "{family}: counts of one joiner and of two"
        );
        assert!((one_joiner.1 - two.1).abs() < 1e-9, "{family}: sums");
    }
    assert!(
        a_got.count("joined_trace") > 0 && b_got.count("joined_trace") > 0,
        "both halves joined"
    );
    // 5. The joiner in its own namespace (OTLP/gRPC) saw the same.
    let scrape = client::send(net.sock(joinh, 9465), "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    let scrape = String::from_utf8_lossy(&scrape.body).into_owned();
    let raw_scrape = String::from_utf8(raw.registry.encode()).unwrap();
    for family in [
        "tokentap_boundary_overhead_seconds",
        "tokentap_guardrail_duration_seconds",
    ] {
        let (c1, s1, _) = prom_totals(&scrape, family);
        let (c2, s2, _) = prom_totals(&raw_scrape, family);
        assert_eq!(c1, c2, "{family}: the namespace joiner's count");
        assert!((s1 - s2).abs() < 1e-6, "{family}: sums {s1} vs {s2}");
    }
    // 6. `tokentap report` over the three machines' record logs joins them
    // the same way (the same resolve, on the logs' own clocks).
    for t in [edge, engtap, guard] {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &procs_pid(&procs, t)])
            .status();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let out = dir.join("report");
    let logs: Vec<String> = ["edge", "engine", "guard"]
        .iter()
        .map(|n| dir.join(format!("{n}.jsonl")).display().to_string())
        .collect();
    let status = std::process::Command::new(bin)
        .args(["report", "-o", &out.display().to_string()])
        .args(&logs)
        .status()
        .unwrap();
    assert!(status.success());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let edge_tap = report["taps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["analysis"]["tap"] == "edge")
        .unwrap();
    let g = &edge_tap["analysis"]["guardrail"];
    assert_eq!(g["status"], "measured", "{g}");
    let report_ttft = g["ttft_overhead_ms"]["p50"].as_f64().unwrap();
    let joiner_ttft = quantile(figures(&resolutions(&raw_got, &ids)).ttft, 0.5) * 1e3;
    assert_eq!(
        g["hops"][0]["calls"].as_u64(),
        Some(all_calls(&raw_got, &ids)),
        "{g}"
    );
    assert_eq!(
        g["hops"][0]["input_phase_calls"], g["hops"][0]["calls"],
        "{g}"
    );
    assert!(
        (report_ttft - joiner_ttft).abs() <= 1.0,
        "tokentap report's TTFT overhead p50 {report_ttft:.3} ms, the joiner's {joiner_ttft:.3} ms"
    );
    // 1. Across machines as in one process, request by request: the three
    // machines' record logs read back and each trace's records resolved
    // together (the correlator's `resolve`, as one process or `tokentap
    // report` does) give every figure the joiner gave from the spans —
    // to the logs' precision (gaps are kept in µs), not a noise bound: the
    // same requests, not another run of them.
    let samples: Vec<Sample> = logs
        .iter()
        .flat_map(|p| read_jsonl(&std::fs::read_to_string(p).unwrap()).0)
        .collect();
    let mut worst: f64 = 0.0;
    for id in &measured {
        let here = resolved_from_logs(&samples, id);
        let there = raw_got.resolution_of(id).unwrap();
        let (a, b) = (figures(&[here]), figures(&[there]));
        for (what, x, y) in [
            ("TTFT overhead", &a.ttft, &b.ttft),
            ("E2E overhead", &a.e2e, &b.e2e),
            (
                "relay delay after the first token",
                &a.relay_after_first,
                &b.relay_after_first,
            ),
            ("guardrail time", &a.guard, &b.guard),
            ("gateway's own time", &a.own, &b.own),
        ] {
            assert_eq!(x.len(), y.len(), "{id}: {what}: logs {x:?}, joiner {y:?}");
            for (x, y) in x.iter().zip(y) {
                worst = worst.max((x - y).abs());
                assert!(
                    (x - y).abs() < LOG_PRECISION,
                    "{id}: {what}: one process from the logs {:.4} ms, the joiner {:.4} ms",
                    x * 1e3,
                    y * 1e3
                );
            }
        }
    }
    println!(
        "{N} requests, client → edge tap → gateway (+{PROCESSING_MS} ms, guardrail {GUARD_MS} ms) → engine tap → simulator, seven namespaces, joiner over OTLP/gRPC: every figure of every request within {:.4} ms of one process's resolution of the same records; the gateway's TTFT overhead p50 {ttft:.2} ms (its record {ttft_truth:.2}), its own time without the guardrail {own:.2} ms (record {own_truth:.2}, configured {}), guardrail p50 {guard_p50:.2} ms (its record {guard_truth:.2}); ±500 ms clock offsets: identical; two joiners split by trace id: identical totals; tokentap report over the three machines' logs: TTFT overhead p50 {report_ttft:.2} ms",
        worst * 1e3,
        PROCESSING_MS + RELAY_MS
    );
    drop(procs.0.drain(..).collect::<Procs>());
}

impl FromIterator<Child> for Procs {
    fn from_iter<T: IntoIterator<Item = Child>>(iter: T) -> Self {
        Procs(iter.into_iter().collect())
    }
}

/// `tokentap drive` from the client's machine: `requests` sequential
/// streams with ids `prefix0`, `prefix1`, …
async fn drive(net: &Netns, bin: &str, url: &str, requests: usize, prefix: &str) {
    let n = requests.to_string();
    let mut c = net.spawn(
        0,
        bin,
        &[
            "drive",
            "--url",
            url,
            "--requests",
            &n,
            "--concurrency",
            "1",
            "--request-id-prefix",
            prefix,
        ],
    );
    let status = tokio::task::spawn_blocking(move || c.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the client's requests failed");
}

/// One process's resolution of request `id` from the taps' record logs:
/// its trace's samples as the correlator's records, resolved on the taps'
/// own clocks (as `analysis::guardrail` does for `tokentap report`).
fn resolved_from_logs(samples: &[Sample], id: &str) -> Resolution {
    let trace = samples
        .iter()
        .find(|s| s.tap == "edge" && s.request_id.as_deref() == Some(id))
        .and_then(|s| s.trace_id.clone())
        .unwrap_or_else(|| panic!("{id}: no edge record with a trace id"));
    let group: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.trace_id.as_deref() == Some(trace.as_str()))
        .collect();
    let first = group
        .iter()
        .map(|s| s.start_unix_ms)
        .fold(f64::INFINITY, f64::min);
    let base = Instant::now();
    let records: Vec<TapRecord> = group
        .iter()
        .filter_map(|s| {
            let after = Duration::from_secs_f64((s.start_unix_ms - first).max(0.0) / 1e3);
            record_of(s, base + after)
        })
        .collect();
    resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::PerTap)
}
