//! OTLP: the same numbers as Prometheus, one span per request per tap with
//! the right parent, traffic untouched by a collector that is down, silent,
//! slow or failing, and no canary in anything exported or logged.

use crate::collector::{counter_total, histogram_totals, string_attr, value, Collector, Mode};
use crate::support::*;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokentap_core::table::{self, Kind};
use tokentap_proxy::metrics::otel::prometheus_only;
use tokentap_sim::Profile;

fn otlp_yaml(collector: std::net::SocketAddr, extra: &str) -> String {
    format!("otlp:\n  endpoint: http://{collector}\n  interval_seconds: 0.2\n  timeout_seconds: 1\n{extra}")
}

/// (path, body, headers) of one request.
type Req<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>);

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_metrics_equal_the_scrape_and_spans_follow_the_genai_conventions() {
    let _g = serial().await;
    let collector = Collector::start(Mode::Ok);
    let behind = sim(Profile {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        output_tokens: 8,
        ..Profile::default()
    });
    let tap = Tap::start_top(
        &format!("http://{}", behind.addr),
        "    provider: sim\n",
        &otlp_yaml(collector.addr, ""),
        Path::new("."),
    );
    let requests: Vec<Req> = vec![
        (
            "/v1/chat/completions",
            chat(true, true),
            vec![("traceparent", PARENT), ("x-request-id", "o-1")],
        ),
        (
            "/v1/chat/completions",
            chat(true, false),
            vec![("x-request-id", "o-2")],
        ),
        (
            "/v1/chat/completions",
            chat(false, false),
            vec![("x-request-id", "o-3")],
        ),
        (
            "/v1/completions",
            chat(true, true),
            vec![("x-request-id", "o-4")],
        ),
        (
            "/v1/chat/completions",
            chat(true, true),
            vec![("x-sim", "fault=status=503"), ("x-request-id", "o-5")],
        ),
        (
            "/v1/chat/completions",
            chat(true, true),
            vec![
                ("x-sim", "tokens-per-event=2,continuous-usage=true"),
                ("x-request-id", "o-6"),
            ],
        ),
    ];
    for (path, body, headers) in &requests {
        tokentap_net::client::send(tap.addr, "POST", path, headers, body)
            .await
            .unwrap();
    }
    // Wait for an export that has every request (exports are cumulative).
    let deadline = Instant::now() + Duration::from_secs(10);
    let otel = loop {
        let m = collector.latest_metrics();
        let requests_seen = m
            .iter()
            .find(|m| m.name == table::REQUESTS.otel_name)
            .and_then(counter_total);
        if requests_seen == Some(requests.len() as f64) {
            break m;
        }
        assert!(Instant::now() < deadline, "no complete metrics export");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let scrape = tap.scrape();
    let mut compared = 0;
    for def in table::ALL.iter().filter(|d| !prometheus_only(d)) {
        let (p_count, p_sum, p_buckets) = prom_totals(&scrape, def.name);
        let Some(m) = otel.iter().find(|m| m.name == def.otel_name) else {
            assert_eq!(
                p_count, 0.0,
                "{} observed in Prometheus but not exported",
                def.name
            );
            continue;
        };
        assert_eq!(m.unit, def.unit.otel(), "{}", def.otel_name);
        match def.kind {
            Kind::Histogram => {
                let (count, sum, bounds, buckets) = histogram_totals(m).unwrap();
                assert_eq!(bounds, def.buckets, "{}: bucket bounds", def.otel_name);
                assert_eq!(count as f64, p_count, "{}: count", def.otel_name);
                assert!(
                    (sum - p_sum).abs() < 1e-6 * p_sum.abs().max(1.0),
                    "{}: sum {sum} vs {p_sum}",
                    def.otel_name
                );
                // OTel buckets are per bucket; Prometheus's cumulative.
                let mut cumulative = 0;
                for (i, (le, c)) in p_buckets.iter().enumerate() {
                    cumulative += buckets[i];
                    assert_eq!(cumulative as f64, *c, "{} bucket le={le}", def.otel_name);
                }
            }
            Kind::Counter | Kind::Gauge => {
                assert_eq!(counter_total(m), Some(p_count), "{}", def.otel_name);
            }
            Kind::WindowGauge => unreachable!("window gauges are Prometheus-only"),
        }
        compared += 1;
    }
    assert!(compared >= 14, "compared {compared} instruments");
    // Attributes per the GenAI conventions, plus tokentap's.
    let ttft = otel
        .iter()
        .find(|m| m.name == "gen_ai.server.time_to_first_token")
        .unwrap();
    let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Histogram(h)) = &ttft.data
    else {
        panic!()
    };
    let attrs = &h
        .data_points
        .iter()
        .find(|d| string_attr(&d.attributes, "gen_ai.operation.name").as_deref() == Some("chat"))
        .unwrap()
        .attributes;
    for (k, v) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.request.model", "sim-model"),
        ("gen_ai.provider.name", "sim"),
        ("tokentap.tap", "t"),
        ("tokentap.boundary", "engine"),
    ] {
        assert_eq!(string_attr(attrs, k).as_deref(), Some(v), "{k}");
    }
    let usage = otel
        .iter()
        .find(|m| m.name == "gen_ai.client.token.usage")
        .unwrap();
    let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Histogram(h)) = &usage.data
    else {
        panic!()
    };
    let types: Vec<_> = h
        .data_points
        .iter()
        .filter_map(|d| string_attr(&d.attributes, "gen_ai.token.type"))
        .collect();
    assert!(types.contains(&"input".to_string()) && types.contains(&"output".to_string()));
    let reqs = otel
        .iter()
        .find(|m| m.name == table::REQUESTS.otel_name)
        .unwrap();
    let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Sum(s)) = &reqs.data else {
        panic!()
    };
    assert!(s
        .data_points
        .iter()
        .any(|d| string_attr(&d.attributes, "error.type").as_deref() == Some("http_error")));

    // One span per request, GenAI names and attributes, the client's parent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.spans().len() < requests.len() {
        assert!(
            Instant::now() < deadline,
            "spans: {}",
            collector.spans().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spans = collector.spans();
    assert_eq!(spans.len(), requests.len(), "one span per request");
    assert!(collector.service_names().iter().all(|s| s == "tokentap"));
    let by_id = |id: &str| {
        spans
            .iter()
            .find(|s| string_attr(&s.attributes, "tokentap.request_id").as_deref() == Some(id))
            .unwrap()
    };
    let first = by_id("o-1");
    assert_eq!(first.name, "chat sim-model");
    assert_eq!(first.kind, 2, "server");
    assert_eq!(hex(&first.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&first.parent_span_id), "00f067aa0ba902b7");
    for (k, v) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.request.model", "sim-model"),
        ("gen_ai.response.model", "sim-model"),
        ("gen_ai.request.stream", "true"),
        ("gen_ai.usage.output_tokens", "8"),
        ("gen_ai.usage.cache_read.input_tokens", "0"),
        ("gen_ai.response.finish_reasons", "[\"length\"]"),
        ("gen_ai.provider.name", "sim"),
        ("tokentap.outcome", "ok"),
        ("tokentap.boundary", "engine"),
        ("tokentap.dialect", "openai"),
        ("tokentap.dialect.source", "path"),
    ] {
        assert_eq!(string_attr(&first.attributes, k).as_deref(), Some(v), "{k}");
    }
    for k in [
        "gen_ai.usage.input_tokens",
        "gen_ai.response.time_to_first_chunk",
        "tokentap.ttfb",
        "tokentap.ttft",
        "tokentap.tpot",
        "tokentap.itl.max",
    ] {
        assert!(string_attr(&first.attributes, k).is_some(), "{k} missing");
    }
    assert!(
        by_id("o-2").parent_span_id.is_empty(),
        "no incoming traceparent: a root span"
    );
    assert_eq!(by_id("o-4").name, "text_completion sim-model");
    let failed = by_id("o-5");
    assert_eq!(
        string_attr(&failed.attributes, "error.type").as_deref(),
        Some("http_error")
    );
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(2),
        "status error"
    );
    let dropped = tap.sample("tokentap_otlp_dropped_total{signal=\"traces\"}");
    assert_eq!(dropped, 0.0);
    assert!(tap.sample("tokentap_otlp_exported_total{signal=\"traces\"}") >= requests.len() as f64);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_events_mark_each_token_event_and_created_traces_are_roots() {
    let _g = serial().await;
    let collector = Collector::start(Mode::Ok);
    let behind = sim(Profile {
        ttft_ms: 5.0,
        itl_ms: 2.0,
        output_tokens: 6,
        ..Profile::default()
    });
    let top = otlp_yaml(
        collector.addr,
        "  span_events: true\n  max_span_events: 4\n",
    );
    // A gateway tap creates the traceparent it forwards.
    let tap = Tap::start_top(
        &format!("http://{}", behind.addr),
        "    trace: create\n",
        &top,
        Path::new("."),
    );
    post(tap.addr, &[("x-request-id", "ev")], &chat(true, true)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.spans().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let span = &collector.spans()[0];
    assert_eq!(span.events.len(), 4, "capped at max_span_events");
    assert_eq!(span.dropped_events_count, 2);
    assert!(
        span.parent_span_id.is_empty(),
        "the tap created the trace: its span is the root"
    );
    assert!(span
        .events
        .windows(2)
        .all(|w| w[0].time_unix_nano <= w[1].time_unix_nano));
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// (p50, p99) of `n` small requests through a tap, in ms; and the tap.
async fn latency_run(otlp: Option<std::net::SocketAddr>, n: usize) -> (f64, f64, Tap) {
    let behind = sim(Profile {
        ttft_ms: 0.0,
        itl_ms: 0.0,
        output_tokens: 4,
        ..Profile::default()
    });
    let top = match otlp {
        Some(a) => format!(
            "otlp:\n  endpoint: http://{a}\n  interval_seconds: 0.1\n  timeout_seconds: 1\n  queue_spans: 64\n  batch_spans: 16\n  shutdown_seconds: 2\n"
        ),
        None => String::new(),
    };
    let tap = Tap::start_top(&format!("http://{}", behind.addr), "", &top, Path::new("."));
    let body = chat(false, false);
    for _ in 0..50 {
        post(tap.addr, &[], &body).await;
    }
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = post(tap.addr, &[], &body).await;
        assert_eq!(r.status, 200);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99), tap)
}

/// A collector that is down, never answers, answers late or fails must not
/// slow the requests passing the tap: the exporter's queue is bounded and
/// filled with `try_send`, the exports run on their own thread.
///
/// Each mode is compared with a run without OTLP (p50 within 1.5× + 1 ms,
/// p99 within 1.5× + 2 ms over 500 requests). This VM's hypervisor steals
/// the CPU now and then for a few milliseconds (`steal` in `/proc/stat`),
/// and five such requests in a 0.2 s run move its p99, so an attempt out of
/// bounds is reported and repeated against a fresh baseline, three attempts
/// at most. An exporter in the request's way (a blocking send, a lock held
/// through an export) slows every request of every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_silent_slow_or_failing_collector_never_slows_traffic() {
    let _g = serial().await;
    let n = 500;
    let baseline = || async move {
        let (b50, b99, _) = latency_run(None, n).await;
        println!("baseline without OTLP: p50 {b50:.3} ms, p99 {b99:.3} ms over {n} requests");
        (b50, b99)
    };
    let (mut b50, mut b99) = baseline().await;
    let down = free_addr();
    let blackhole = Collector::start(Mode::Blackhole);
    let slow = Collector::start(Mode::Slow(Duration::from_secs(5)));
    let failing = Collector::start(Mode::Failing(503));
    for (name, addr) in [
        ("down", down),
        ("blackholed", blackhole.addr),
        ("slow", slow.addr),
        ("failing", failing.addr),
    ] {
        let mut misses = Vec::new();
        for attempt in 1..=3 {
            if attempt > 1 {
                (b50, b99) = baseline().await;
            }
            let (p50, p99, mut tap) = latency_run(Some(addr), n).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let dropped = tap.sample("tokentap_otlp_dropped_total{signal=\"traces\"}");
            let started = Instant::now();
            tap.server.stop();
            let stop = started.elapsed();
            println!("collector {name} (attempt {attempt}): p50 {p50:.3} ms, p99 {p99:.3} ms, spans dropped {dropped}, stop took {:.2} s", stop.as_secs_f64());
            assert!(dropped > 0.0, "{name}: the drop counter rises");
            assert!(
                stop <= Duration::from_millis(3500),
                "{name}: shutdown bounded (2 s flush): {stop:?}"
            );
            if p50 <= 1.5 * b50 + 1.0 && p99 <= 1.5 * b99 + 2.0 {
                misses.clear();
                break;
            }
            misses.push(format!(
                "p50 {p50:.3} vs {b50:.3}, p99 {p99:.3} vs {b99:.3}"
            ));
        }
        assert!(
            misses.is_empty(),
            "{name}: slower than without OTLP in three attempts: {misses:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_in_prompts_and_credentials_never_leave() {
    let _g = serial().await;
    let collector = Collector::start(Mode::Ok);
    let behind = sim(Profile {
        ttft_ms: 2.0,
        itl_ms: 1.0,
        output_tokens: 6,
        ..Profile::default()
    });
    let (tap, admin) = (free_addr(), free_addr());
    // Everything tokentap can write is on: OTLP, analyses (windows close
    // every 0.5 s; /report) and the record log.
    let scratch = scratch("canary");
    let records = scratch.path().join("records.jsonl");
    let yaml = format!(
        "admin:\n  listen: {admin}\n{}analysis:\n  window_seconds: 0.5\ntaps:\n  - name: c\n    boundary: gateway\n    listen: {tap}\n    upstream: http://{}\n    record_log:\n      path: {}\n",
        otlp_yaml(collector.addr, "  span_events: true\n"),
        behind.addr,
        records.display()
    );
    let path = scratch.path().join("tokentap.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["run", "-c"])
        .arg(&path)
        .env(
            "RUST_LOG",
            "trace,pingora_proxy=trace,pingora_core=trace,h2=trace,hyper=trace,reqwest=trace",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes while it runs (trace logging would otherwise fill
    // them and block the process).
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut child = KillOnDrop(child);
    crate::process::wait_ready(admin, "tokentap").await;
    let prompt = "CANARY-PROMPT-7f3a";
    let key = "CANARY-KEY-9d1c";
    for stream in [true, false] {
        let body = serde_json::json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": prompt}]}).to_string();
        let auth = format!("Bearer {key}");
        let basic = format!("Basic {key}");
        let cookie = format!("session={key}");
        // Every credential header and query parameter at once.
        let h = [
            ("authorization", auth.as_str()),
            ("proxy-authorization", basic.as_str()),
            ("x-api-key", key),
            ("api-key", key),
            ("x-goog-api-key", key),
            ("cookie", cookie.as_str()),
        ];
        let path = format!("/v1/chat/completions?key={key}&api_key={key}&access_token={key}");
        let r = tokentap_net::client::send(tap, "POST", &path, &h, body.as_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }
    // Let spans and a metrics export out, then stop gracefully.
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.spans().len() < 2 || collector.latest_metrics().is_empty() {
        assert!(Instant::now() < deadline, "nothing exported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let scrape = tokentap_net::client::send(admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap()
        .body;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = tokentap_net::client::send(admin, "GET", "/report", &[], b"")
        .await
        .unwrap();
    assert_eq!(report.status, 200);
    let report = report.body;
    let record_log = std::fs::read(&records).unwrap();
    let tenant = b"\"tenant\":\"k-";
    assert!(
        record_log.windows(tenant.len()).any(|w| w == tenant),
        "the record log has lines with a tenant (an API-key hash)"
    );
    Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap();
    let _ = child.0.wait();
    let logs =
        String::from_utf8_lossy(&[out.join().unwrap(), err.join().unwrap()].concat()).into_owned();
    assert!(!logs.is_empty(), "trace logging produced output");
    for canary in [prompt, key] {
        for (what, bytes) in collector
            .raw()
            .iter()
            .map(|b| ("OTLP export", b.as_slice()))
            .chain([
                ("/metrics", scrape.as_slice()),
                ("logs", logs.as_bytes()),
                ("/report", report.as_slice()),
                ("record log", record_log.as_slice()),
            ])
        {
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                "{canary} found in {what}"
            );
        }
    }
    let _ = value; // keep the helper in use for attribute debugging
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_environment_variables_configure_otlp() {
    let _g = serial().await;
    let collector = Collector::start(Mode::Ok);
    let behind = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 3,
        ..Profile::default()
    });
    let (tap, admin) = (free_addr(), free_addr());
    // No otlp: section at all.
    let yaml = format!(
        "admin:\n  listen: {admin}\ntaps:\n  - name: e\n    boundary: engine\n    listen: {tap}\n    upstream: http://{}\n",
        behind.addr
    );
    let scratch = scratch("otelenv");
    let path = scratch.path().join("tokentap.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["run", "-c"])
            .arg(&path)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://{}", collector.addr),
            )
            .env("OTEL_SERVICE_NAME", "llm-edge")
            .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
            .env("OTEL_METRICS_EXPORTER", "none")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    crate::process::wait_ready(admin, "tokentap").await;
    post(tap, &[], &chat(true, true)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.spans().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no span exported from the environment's settings"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
    assert_eq!(collector.service_names(), vec!["llm-edge".to_string()]);
    assert!(
        collector.latest_metrics().is_empty(),
        "OTEL_METRICS_EXPORTER=none"
    );
}
