//! The joiner under hostile input, at its shipped settings where a figure
//! depends on them: label values named by spans stay bounded; one export
//! at the body cap costs a bounded multiple of its body; its receivers
//! refuse what is over their caps, take TLS and a bearer token; a flood of
//! large exports does not hold up a small one.

use crate::otlp_send::*;
use crate::support::*;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokentap_join::config::JoinConfig;
use tokentap_join::Joiner;

/// The settings of `config/fleet/join.yaml` (the shipped joiner) on free
/// loopback ports, plus `extra` YAML under `receiver:`.
fn shipped(extra: &str) -> JoinConfig {
    let yaml = format!(
        "receiver:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  max_body_bytes: 8388608\n{extra}admin:\n  listen: 127.0.0.1:0\ncorrelation:\n  settle_seconds: 2\n  max_age_seconds: 300\n  max_traces: 100000\n  fingerprint_window_seconds: 2\n  max_events: 256\n  buffered_share: 0.9\n"
    );
    JoinConfig::from_yaml(&yaml).unwrap()
}

/// Distinct values of `label` in the scrape's series.
fn values(scrape: &str, label: &str) -> BTreeSet<String> {
    let needle = format!("{label}=\"");
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.split_once(&needle)?.1;
            Some(rest.split('"').next()?.to_owned())
        })
        .collect()
}

fn series(scrape: &str, family: &str) -> usize {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(family))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_names_from_spans_stay_bounded() {
    let _g = serial().await;
    let mut cfg = shipped("");
    cfg.correlation.settle = Duration::from_millis(300);
    let j = Joiner::start(&cfg, Vec::new()).unwrap();
    // 10,000 requests, each with its own edge, engine and guardrail names
    // (and one name of 65,536 bytes).
    let n = 10_000u64;
    for batch in (0..n).step_by(1_000) {
        let mut spans = Vec::new();
        for i in batch..batch + 1_000 {
            let t = Some(u128::from(i) + 1);
            let outer = if i == 0 {
                "x".repeat(65_536)
            } else {
                format!("edge-{i}")
            };
            spans.push(tap_span(t, i, &outer, "compound", None, 0.05, 0.3, "r"));
            spans.push(tap_span(
                t,
                i,
                &format!("engine-{i}"),
                "engine",
                None,
                0.03,
                0.25,
                "r",
            ));
            spans.push(tap_span(
                t,
                i,
                &format!("guard-{i}"),
                "guardrail",
                Some(&format!("hop-{i}")),
                0.0,
                0.01,
                "r",
            ));
        }
        let (status, _) = post_export(j.http, &export(spans), None).await;
        assert_eq!(status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let scrape = loop {
        let s = String::from_utf8(j.registry.encode()).unwrap();
        if prom_totals(&s, "tokentap_correlation_total").0 >= (3 * n - 1) as f64 {
            break s;
        }
        assert!(Instant::now() < deadline, "the records did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (outer, inner, hop, tap) = (
        values(&scrape, "outer"),
        values(&scrape, "inner"),
        values(&scrape, "hop"),
        values(&scrape, "tap"),
    );
    let attribution: usize = [
        "tokentap_boundary_overhead_seconds",
        "tokentap_relay_delay",
        "tokentap_added_itl_jitter_seconds",
        "tokentap_stream_buffered",
        "tokentap_token_mismatch",
        "tokentap_guardrail_",
    ]
    .iter()
    .map(|f| series(&scrape, f))
    .sum();
    let all = scrape.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "{n} requests, {} distinct tap and hop names: outer {} values, inner {}, hop {}, tap {}; {attribution} attribution series, {all} series in all, a {} KiB scrape",
        3 * n,
        outer.len(),
        inner.len(),
        hop.len(),
        tap.len(),
        scrape.len() / 1024
    );
    // The defaults: 64 taps, 32 hops, 64 pairs, then `other`.
    assert!(outer.len() <= 65 && inner.len() <= 65, "{outer:?}");
    assert!(hop.len() <= 33, "{} hops", hop.len());
    assert!(outer.contains("other") && hop.contains("other"));
    assert!(!scrape.contains(&"x".repeat(200)), "a 65,536-byte name");
    for label in ["tap", "hop"] {
        let line = format!("tokentap_label_overflow_total{{label=\"{label}\"}}");
        let v = scrape
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(v > 0.0, "{label} overflow counted");
    }
    assert!(
        scrape.contains("tokentap_join_spans_total{result=\"rejected\"} 1"),
        "the span with a 65,536-byte name is over the span size cap"
    );
    // At most 64 pairs of ~800 attribution series each (their duration
    // buckets resolve 5 %), 32 hops of ~330, 16 compound taps (+ `other`)
    // of ~1,000 (`labels.max_compound_taps`): the bound, whatever arrives.
    let compound_taps: std::collections::HashSet<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("tokentap_compound_"))
        .filter_map(|l| l.split_once("tap=\"")?.1.split('"').next())
        .collect();
    assert!(
        compound_taps.len() <= 17,
        "{} compound taps",
        compound_taps.len()
    );
    assert!(all < 64 * 820 + 32 * 340 + 17 * 1_000, "{all} series");
}

fn status_kib(pid: u32, field: &str) -> u64 {
    crate::process::status_kib(pid, field)
}

/// A `tokentap join` process at the shipped settings; its OTLP/HTTP,
/// OTLP/gRPC and admin addresses.
async fn joiner_process(
    extra: &str,
) -> (
    KillOnDrop,
    SocketAddr,
    SocketAddr,
    SocketAddr,
    tempfile::TempDir,
) {
    let (http, grpc, admin) = (free_addr(), free_addr(), free_addr());
    let scratch = scratch("join-hostile");
    let path = scratch.path().join("join.yaml");
    std::fs::write(
        &path,
        format!(
            "receiver:\n  grpc_listen: {grpc}\n  http_listen: {http}\n  max_body_bytes: 8388608\n{extra}admin:\n  listen: {admin}\ncorrelation:\n  settle_seconds: 2\n  max_traces: 100000\n  max_events: 256\n"
        ),
    )
    .unwrap();
    let child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["join", "-c"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    crate::process::wait_ready(admin, "the joiner").await;
    (child, http, grpc, admin, scratch)
}

/// One export at `max_body_bytes` (8 MiB) of 4,194,296 empty spans, over
/// HTTP then gRPC, and one of as many tokentap spans as fit: the joiner's
/// peak RSS grows by at most 32 times the body, the spans over the cap
/// are a partial success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_at_the_body_cap_costs_a_bounded_multiple_of_its_body() {
    let _g = serial().await;
    let (child, http, grpc, _admin, _s) = joiner_process("").await;
    let pid = child.0.id();
    let body = empty_spans(4_194_296);
    assert!(body.len() <= 8 << 20, "{} bytes", body.len());
    let base = status_kib(pid, "VmHWM:");
    let (status, response) = post_export(http, &body, None).await;
    assert_eq!(status, 200);
    let rejected = rejected_spans(&response);
    let after_http = status_kib(pid, "VmHWM:");
    let (grpc_status, grpc_response) = grpc_export(grpc, None, None, &body).await;
    assert_eq!(grpc_status, 0);
    let after_grpc = status_kib(pid, "VmHWM:");
    // Tokentap spans, as many as 8 MiB hold (~1 KiB each): all read.
    let one = export(vec![tap_span(None, 1, "t", "engine", None, 0.01, 0.1, "r")]).len();
    let fit = (8 << 20) / one - 64;
    let spans = (0..fit as u64)
        .map(|i| tap_span(None, i, "t", "engine", None, 0.01, 0.1, "r"))
        .collect();
    let full = export(spans);
    let (status, _) = post_export(http, &full, None).await;
    assert_eq!(status, 200);
    let after_full = status_kib(pid, "VmHWM:");
    let mib = |kib: u64| kib as f64 / 1024.0;
    let body_mib = body.len() as f64 / (1 << 20) as f64;
    println!(
        "one 8 MiB export of 4,194,296 empty spans: peak RSS {:.1} -> {:.1} MiB over HTTP ({:.1}x the body), {:.1} MiB after the same over gRPC; {rejected} spans rejected (partial success; gRPC response {} bytes); then {fit} tokentap spans in {:.1} MiB: peak {:.1} MiB",
        mib(base),
        mib(after_http),
        (mib(after_http) - mib(base)) / body_mib,
        mib(after_grpc),
        grpc_response.len(),
        full.len() as f64 / (1 << 20) as f64,
        mib(after_full)
    );
    assert_eq!(rejected, 4_194_296 - 65_536);
    assert_eq!(rejected_spans(&grpc_response), 4_194_296 - 65_536);
    for (what, peak) in [
        ("HTTP", after_http),
        ("gRPC", after_grpc),
        ("tokentap spans", after_full),
    ] {
        let growth = mib(peak) - mib(base);
        assert!(
            growth <= 32.0 * body_mib,
            "{what}: peak RSS grew by {growth:.1} MiB for a {body_mib:.1} MiB body"
        );
    }
}

/// Receivers over their connection cap refuse, and count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receivers_over_their_connection_cap_refuse_and_count() {
    let _g = serial().await;
    let j = Joiner::start(
        &shipped("  max_connections: 4\n  request_header_seconds: 10\n"),
        Vec::new(),
    )
    .unwrap();
    let mut held = Vec::new();
    for addr in [j.http, j.grpc] {
        for _ in 0..4 {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The fifth to sixth on each: refused (HTTP: a 503; gRPC: closed).
    use tokio::io::AsyncReadExt;
    for addr in [j.http, j.grpc] {
        for _ in 0..2 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf)).await;
            if addr == j.http {
                assert!(
                    buf.starts_with(b"HTTP/1.1 503"),
                    "{:?}",
                    String::from_utf8_lossy(&buf)
                );
            } else {
                assert!(buf.is_empty());
            }
        }
    }
    let scrape = String::from_utf8(j.registry.encode()).unwrap();
    for listener in ["otlp_http", "otlp_grpc"] {
        let line = format!(
            "tokentap_listener_refused_total{{listener=\"{listener}\",reason=\"too_many_connections\"}} 2"
        );
        assert!(scrape.contains(&line), "missing {line}");
        let open = format!("tokentap_listener_connections{{listener=\"{listener}\"}} 4");
        assert!(scrape.contains(&open), "missing {open}");
    }
    drop(held);
}

/// TLS on both receivers, and a bearer token: without it 401 and
/// UNAUTHENTICATED (counted), with it accepted and joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receivers_take_tls_and_require_the_bearer_token() {
    let _g = serial().await;
    let scratch = scratch("join-tls");
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_file, key_file, token_file) = (
        scratch.path().join("cert.pem"),
        scratch.path().join("key.pem"),
        scratch.path().join("token"),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    std::fs::write(&token_file, "t0ken-5ecret\n").unwrap();
    let extra = format!(
        "  tls:\n    cert_file: {}\n    key_file: {}\n  auth:\n    bearer_token_file: {}\n",
        cert_file.display(),
        key_file.display(),
        token_file.display()
    );
    let mut cfg = shipped(&extra);
    cfg.correlation.settle = Duration::from_millis(200);
    let j = Joiner::start(&cfg, Vec::new()).unwrap();
    let body = export(vec![tap_span(
        Some(7),
        7,
        "edge",
        "compound",
        None,
        0.02,
        0.1,
        "tls-1",
    )]);
    // OTLP/HTTP over TLS, by hand (HTTP/1.1).
    let tls = tls_client(cert.pem().as_bytes(), &[b"http/1.1"]);
    let https = |token: Option<&'static str>| {
        let (tls, body) = (tls.clone(), body.clone());
        let addr = j.http;
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let mut s = tls.connect(name, tcp).await.unwrap();
            let auth = token
                .map(|t| format!("authorization: Bearer {t}\r\n"))
                .unwrap_or_default();
            let head = format!(
                "POST /v1/traces HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n{auth}connection: close\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(&body).await.unwrap();
            let mut resp = Vec::new();
            let _ = s.read_to_end(&mut resp).await;
            String::from_utf8_lossy(&resp).into_owned()
        }
    };
    let without = https(None).await;
    assert!(without.starts_with("HTTP/1.1 401"), "{without}");
    let wrong = https(Some("guess")).await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    let with = https(Some("t0ken-5ecret")).await;
    assert!(with.starts_with("HTTP/1.1 200"), "{with}");
    // Plain text on the TLS port gets nothing useful.
    let plain = tokentap_net::client::send(j.http, "POST", "/v1/traces", &[], &body).await;
    assert!(plain.map(|r| r.status != 200).unwrap_or(true));
    // OTLP/gRPC over TLS (h2).
    let h2tls = tls_client(cert.pem().as_bytes(), &[b"h2"]);
    let (status, _) = grpc_export(j.grpc, Some(&h2tls), None, &body).await;
    assert_eq!(status, 16, "UNAUTHENTICATED");
    let (status, _) = grpc_export(j.grpc, Some(&h2tls), Some("t0ken-5ecret"), &body).await;
    assert_eq!(status, 0);
    let scrape = String::from_utf8(j.registry.encode()).unwrap();
    for needle in [
        "tokentap_listener_refused_total{listener=\"otlp_http\",reason=\"unauthorized\"} 2",
        "tokentap_listener_refused_total{listener=\"otlp_grpc\",reason=\"unauthorized\"} 1",
        "tokentap_join_exports_total{result=\"unauthorized\"} 3",
        "tokentap_join_spans_total{result=\"joined\"} 2",
    ] {
        assert!(scrape.contains(needle), "missing {needle}");
    }
}

/// Behind a flood of 50,000-span exports (trace-less: the store's worst
/// case) at the shipped settings, a one-span export is answered within
/// 100 ms at p99.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_large_exports_leaves_a_small_one_answered_within_100ms() {
    let _g = serial().await;
    let j = Joiner::start(&shipped(""), Vec::new()).unwrap();
    let bodies: Vec<Vec<u8>> = (0..4)
        .map(|_| export((0..50_000).map(|_| small_span()).collect()))
        .collect();
    assert!(bodies[0].len() <= 8 << 20, "{} bytes", bodies[0].len());
    let http = j.http;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let body = &bodies[(sent % 4) as usize];
                let (status, _) = post_export(http, body, None).await;
                assert_eq!(status, 200);
                sent += 1;
            }
            sent
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut lat = Vec::new();
    let started = Instant::now();
    let mut i = 0u64;
    while started.elapsed() < Duration::from_secs(12) {
        let one = export(vec![tap_span(
            Some(u128::from(i) << 64 | 1),
            i,
            "edge",
            "compound",
            None,
            0.02,
            0.2,
            "one",
        )]);
        let t = Instant::now();
        let (status, _) = post_export(http, &one, None).await;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(status, 200);
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let floods = flood.await.unwrap();
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((q * lat.len() as f64).ceil() as usize).min(lat.len()) - 1];
    println!(
        "one-span exports behind {floods} exports of 50,000 spans in 12 s: latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
        p(0.5),
        p(0.99),
        lat[lat.len() - 1],
        lat.len()
    );
    assert!(floods >= 4, "the flood sent {floods} exports");
    assert!(p(0.99) < 100.0, "p99 {:.1} ms", p(0.99));
}
