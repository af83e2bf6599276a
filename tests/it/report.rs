//! `tokentap report` on a recorded fixture: every section, percentiles only
//! where the sample count supports them, the reference workload each driver
//! workload resembles, and an HTML page that headless Chromium opens with
//! no console errors and every chart drawn.
//!
//! The fixture (`tests/fixtures/records/run.jsonl`) is a real run recorded
//! by `fixture_is_current` with `TOKENTAP_BLESS=1`: the simulator with its
//! engine model (prefill cost, prefix cache, KV capacity, batching) behind
//! an engine tap, driven with the conversation workload by four tenants at
//! rising concurrency, some requests stalled, some long; then a gateway
//! topology (gateway → guardrail + engine) for the guardrail section.

use crate::analyses::{body, sim_engine, Rig};
use crate::gateway::{GatewayConfig, TestGateway};
use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokentap_core::analysis::span_report::read_jsonl;
use tokentap_core::analysis::stats::min_samples;
use tokentap_sim::{EngineArgs, Profile};
use tokentap_tools::drive::{DriveArgs, Workload};

const FIXTURE: &str = "tests/fixtures/records/run.jsonl";
const TESTS: [&str; 10] = [
    "ttft",
    "throughput",
    "tradeoff",
    "itl",
    "capacity",
    "fairness",
    "prefix_cache",
    "memory_pressure",
    "long_context",
    "guardrail",
];
const HEADINGS: [&str; 10] = [
    "### 1. Time to first token",
    "### 2. Output token throughput",
    "### 3. Throughput–latency tradeoff",
    "### 4. Inter-token latency distribution",
    "### 5. Concurrent request capacity",
    "### 6. Scheduling fairness",
    "### 7. Prefix cache effectiveness",
    "### 8. Behaviour under memory pressure",
    "### 9. Long-context scaling",
    "### 10. Guardrail overhead",
];

fn out_dir(name: &str) -> tempfile::TempDir {
    scratch(&format!("report-{name}"))
}

fn tokentap_report(records: &[&Path], out: &Path, extra: &[&str]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokentap"));
    cmd.arg("report")
        .args(records)
        .arg("-o")
        .arg(out)
        .args(extra);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "tokentap report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every summary (an object with `n` and percentiles) reports a percentile
/// only with enough samples.
fn check_percentiles(v: &serde_json::Value, path: &str, checked: &mut usize) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(n), true) = (m.get("n").and_then(|n| n.as_u64()), m.contains_key("p99")) {
                *checked += 1;
                for (name, q) in [
                    ("p50", 0.5),
                    ("p90", 0.9),
                    ("p95", 0.95),
                    ("p99", 0.99),
                    ("p999", 0.999),
                ] {
                    let available = !m[name].is_null();
                    assert_eq!(
                        available,
                        n as usize >= min_samples(q),
                        "{path}.{name} with n = {n}"
                    );
                }
            }
            for (k, x) in m {
                check_percentiles(x, &format!("{path}.{k}"), checked);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_percentiles(x, &format!("{path}[{i}]"), checked);
            }
        }
        _ => {}
    }
}

#[test]
fn report_on_the_fixture_has_every_section_and_the_page_opens_in_chromium() {
    let _g = serial_blocking();
    let scratch = out_dir("fixture");
    let out = scratch.path();
    tokentap_report(
        &[Path::new(FIXTURE)],
        out,
        &[
            "--window-seconds",
            "1.5",
            "--slo-ttft-ms",
            "300",
            "--slo-tpot-ms",
            "50",
        ],
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let taps = json["taps"].as_array().unwrap();
    assert!(taps.len() >= 4, "engine, gateway, guardrail and its engine");
    // Every tap states boundary, window, traffic, token source, protocol,
    // clock and each of the ten tests (figures or why not).
    for t in taps {
        let a = &t["analysis"];
        let name = a["tap"].as_str().unwrap();
        assert!(md.contains(&format!(
            "## Tap `{name}` — {} boundary",
            a["boundary"].as_str().unwrap()
        )));
        for k in [
            "workload",
            "token_source",
            "protocol",
            "concurrency",
            "by_outcome",
        ] {
            assert!(!a[k].is_null(), "{name}: {k}");
        }
        for test in TESTS {
            let status = a[test]["status"].as_str().unwrap();
            assert!(
                status == "measured" || a[test]["why"].is_string(),
                "{name}.{test}"
            );
        }
    }
    for h in HEADINGS {
        assert_eq!(md.matches(h).count(), taps.len(), "{h}");
    }
    for k in [
        "Clock:",
        "Settings: window 1.50 s",
        "Resembles the",
        "Token source:",
        "Streaming protocol:",
    ] {
        assert!(md.contains(k), "{k}");
    }
    // Each test is measured at some tap of this run.
    for test in TESTS {
        assert!(
            taps.iter()
                .any(|t| t["analysis"][test]["status"] == "measured"),
            "{test} measured nowhere"
        );
    }
    // Percentiles: numbers only with enough samples; the rule in the text.
    let mut checked = 0;
    check_percentiles(&json, "report", &mut checked);
    assert!(checked > 50, "{checked} summaries checked");
    assert!(
        md.contains("p99 n/a (n = "),
        "unavailable percentiles say why"
    );
    // The page: headless Chromium renders it without console errors, and
    // every chart of every tap is there as SVG.
    let page = out.join("report.html");
    let dom = chromium_dom(&page);
    for t in taps {
        let id: String = t["analysis"]["tap"]
            .as_str()
            .unwrap()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        for chart in tokentap_tools::report::html::CHARTS {
            let anchor = format!("id=\"chart-{id}-{chart}\"");
            let at = dom
                .find(&anchor)
                .unwrap_or_else(|| panic!("{anchor} missing"));
            let rest = &dom[at..];
            let end = rest.find("</figure>").unwrap();
            assert!(rest[..end].contains("<svg"), "{anchor} has no SVG");
        }
    }
}

/// The DOM Chromium built from `page`; fails on any console message of
/// level error (and on a page that did not load).
fn chromium_dom(page: &Path) -> String {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium not found: `make deps` installs it (Debian package chromium)");
    let profile = out_dir("chromium-profile");
    let o = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .unwrap();
    drop(profile);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let console: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    let dom = String::from_utf8(o.stdout).unwrap();
    assert!(
        o.status.success() && dom.contains("</html>"),
        "chromium: {stderr}"
    );
    dom
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_driver_workload_is_recognised_as_its_reference_shape() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 5.0,
        itl_ms: 0.3,
        output_tokens: 1_000,
        ..Profile::default()
    };
    let rig = Rig::start(
        profile,
        EngineArgs {
            prefix_cache: true,
            ..EngineArgs::default()
        },
        "",
        "workloads",
    );
    let cases = [
        (Workload::Uniform, "uniform"),
        (Workload::Skewed, "skewed"),
        (Workload::Conversation, "conversation"),
        (Workload::Code, "code_completion"),
        (Workload::LongContext, "long_context"),
    ];
    let mut total = 0;
    let mut seen = Vec::new();
    for (i, (workload, expected)) in cases.into_iter().enumerate() {
        let args = DriveArgs {
            workload,
            concurrency: Some(4),
            requests: Some(40),
            tenants: 2,
            seed: 11 + i as u64,
            model: format!("m-{expected}"),
            ..DriveArgs::new(format!("http://{}", rig.tap.addr))
        };
        let s = tokentap_tools::drive::drive(&args).await.unwrap();
        assert_eq!(s.outcomes.ok, 40, "{expected}: {:?}", s.first_error);
        total += 40;
        let samples = rig.records(total).await;
        let mine: Vec<_> = samples
            .into_iter()
            .filter(|s| s.model.as_deref() == Some(&format!("m-{expected}")))
            .collect();
        let report = tokentap_core::analysis::span_report::build(
            "test",
            &mine,
            0,
            &tokentap_core::analysis::AnalysisSettings::default(),
            std::time::Instant::now(),
        );
        let w = &report.taps[0].analysis.workload;
        seen.push((expected, w.resembles, w.why.clone()));
    }
    for (expected, got, why) in &seen {
        assert_eq!(expected, got, "{why}");
    }
}

/// Regenerates the fixture with `TOKENTAP_BLESS=1`; otherwise checks it
/// reads and holds what the report test needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixture_is_current() {
    if std::env::var("TOKENTAP_BLESS").is_err() {
        let (samples, skipped) = read_jsonl(&std::fs::read_to_string(FIXTURE).unwrap());
        assert_eq!(skipped, 0);
        assert!(samples.len() > 250, "{} samples", samples.len());
        return;
    }
    let _g = serial().await;
    let mut lines = String::new();
    lines.push_str(&engine_run().await);
    lines.push_str(&gateway_run().await);
    std::fs::create_dir_all(Path::new(FIXTURE).parent().unwrap()).unwrap();
    std::fs::write(FIXTURE, lines).unwrap();
}

/// The engine tap: conversation traffic of four tenants at rising
/// concurrency against a KV-limited, prefix-caching simulator; then a few
/// stalled and long requests.
async fn engine_run() -> String {
    // About four conversation requests fit the KV capacity; each running
    // one slows the others' decode by 40 %: the curve has a knee, capacity
    // a bound, and queued requests show in TTFT.
    let profile = Profile {
        ttft_ms: 20.0,
        itl_ms: 4.0,
        itl_jitter_ms: 1.0,
        output_tokens: 24,
        prefill_ms_per_1k: 3.0,
        batch_slowdown: 0.4,
        ..Profile::default()
    };
    let engine = EngineArgs {
        prefix_cache: true,
        kv_capacity_tokens: 4_500,
        ..EngineArgs::default()
    };
    let rig = Rig::start(profile, engine, "", "fixture-engine");
    let args = DriveArgs {
        workload: Workload::Conversation,
        concurrency_steps: vec![1, 2, 4, 8],
        step_duration: Duration::from_millis(2_500),
        tenants: 4,
        seed: 3,
        ..DriveArgs::new(format!("http://{}", rig.tap.addr))
    };
    let s = tokentap_tools::drive::drive(&args).await.unwrap();
    assert!(s.outcomes.ok > 100, "{:?}", s.first_error);
    for i in 0..12u32 {
        let stall = format!("fault=stall@{}:{}", 4 + i % 10, 150 + 20 * i);
        let content = "context ".repeat(250 * (1 + i as usize % 6));
        let msgs = serde_json::json!([{"role": "user", "content": content}]);
        let r = post(rig.tap.addr, &[("x-sim", stall.as_str())], &body(msgs, 24)).await;
        assert_eq!(r.status, 200);
    }
    let n = rig.tap.records.count();
    rig.records(n).await;
    std::fs::read_to_string(rig.dir.join("records.jsonl")).unwrap()
}

/// A gateway that calls a moderation guardrail before and after the engine,
/// each behind its own tap.
async fn gateway_run() -> String {
    let engine = sim_engine(
        Profile {
            ttft_ms: 30.0,
            itl_ms: 5.0,
            output_tokens: 12,
            ..Profile::default()
        },
        EngineArgs::default(),
    );
    let guard = sim_engine(
        Profile {
            ttft_ms: 15.0,
            ..Profile::default()
        },
        EngineArgs::default(),
    );
    let (gw_tap, engine_tap, guard_tap) = (free_addr(), free_addr(), free_addr());
    let gateway = TestGateway::spawn(GatewayConfig {
        engine: engine_tap.to_string(),
        guard: Some(guard_tap.to_string()),
        input_guards: 1,
        output_guard: true,
        processing: Duration::from_millis(5),
        relay_delay: Duration::from_millis(1),
        strip_traceparent: false,
    });
    let scratch = scratch("fixture-gw");
    let dir = scratch.path();
    let log = |name: &str| {
        format!(
            "    record_log:\n      path: {}\n",
            dir.join(format!("{name}.jsonl")).display()
        )
    };
    let taps = [
        tap_yaml("gw", "gateway", gw_tap, gateway.addr, &log("gw")),
        tap_yaml(
            "gw-engine",
            "engine",
            engine_tap,
            engine.addr,
            &log("gw-engine"),
        ),
        tap_yaml(
            "guard",
            "guardrail",
            guard_tap,
            guard.addr,
            &format!("    hop: moderation\n{}", log("guard")),
        ),
    ]
    .concat();
    let m = Multi::start(&taps, "");
    for i in 0..30 {
        let id = format!("gw-{i}");
        let r = post(
            gw_tap,
            &[("content-type", "application/json"), ("x-request-id", &id)],
            &chat(true, true),
        )
        .await;
        assert!(r.complete);
    }
    let mut out = String::new();
    for name in ["gw", "gw-engine", "guard"] {
        let path = dir.join(format!("{name}.jsonl"));
        let want = if name == "guard" { 60 } else { 30 };
        for _ in 0..300 {
            let (v, _) = read_jsonl(&std::fs::read_to_string(&path).unwrap_or_default());
            if v.len() >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        out.push_str(&std::fs::read_to_string(&path).unwrap());
    }
    drop(m);
    out
}
