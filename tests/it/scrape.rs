//! The Prometheus scrape: `promtool check metrics` passes, label values stay
//! bounded under hostile input, and `docs/metrics.md` documents exactly the
//! canonical metric table.

use crate::support::*;
use std::io::Write;
use std::process::{Command, Stdio};
use tokentap_net::client;
use tokentap_sim::Profile;

/// Metrics that only exist when several taps are joined.
pub fn is_attribution(def: &tokentap_core::table::MetricDef) -> bool {
    use tokentap_core::table::Label;
    def.labels.iter().any(|l| {
        matches!(
            l,
            Label::Outer | Label::Hop | Label::Result | Label::GuardPhase
        )
    })
}

/// Metrics of the compound system's calls and breakdown: they need tool
/// and retrieval taps (`tools.rs`) or a compound request joined to its
/// calls (`compound.rs`), where they are checked the same way.
pub fn is_compound_system(def: &tokentap_core::table::MetricDef) -> bool {
    [
        "mcp_",
        "tokentap_mcp_",
        "tokentap_call_",
        "tokentap_retrieval_",
        "tokentap_compound_",
    ]
    .iter()
    .any(|p| def.name.starts_with(p))
}

/// Every metric of the table `which` selects has its family in `scrape`,
/// and promtool accepts the scrape.
pub fn all_present(scrape: &str, which: impl Fn(&tokentap_core::table::MetricDef) -> bool) {
    for def in tokentap_core::table::ALL.iter().filter(|d| which(d)) {
        assert!(
            scrape.contains(&format!("# TYPE {} ", def.name)),
            "{} missing from the scrape",
            def.name
        );
    }
    promtool_check(scrape);
}

pub fn promtool_check(scrape: &str) -> String {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: `make deps` installs it (Debian package prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_a_scrape_with_every_kind_of_request() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 2.0,
        itl_ms: 1.0,
        output_tokens: 16,
        ..Profile::default()
    });
    // Analyses with the simulator's own /metrics scraped as an engine, and a
    // record log, so that their series are in the scrape too.
    let dir = scratch("scrape");
    let top = format!(
        "analysis:\n  window_seconds: 3600\n  slo:\n    ttft_ms: 500\n  engines:\n    - name: sim\n      url: http://{}/metrics\n      interval_seconds: 0.1\n",
        behind.addr
    );
    let log = format!(
        "    record_log:\n      path: {}\n",
        dir.path().join("r.jsonl").display()
    );
    let tap = Tap::start_top(
        &format!("http://{}", behind.addr),
        &log,
        &top,
        std::path::Path::new("."),
    );
    let requests = every_kind_of_request();
    for (path, body, x_sim) in &requests {
        let _ = client::send(tap.addr, "POST", path, &[("x-sim", x_sim)], body)
            .await
            .unwrap();
    }
    let _ = client::send(tap.addr, "GET", "/v1/models", &[], b"")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3;
    tap.server.analyses.as_ref().unwrap().live.close_window(now);
    let resp = client::send(tap.admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    let scrape = String::from_utf8(resp.body).unwrap();
    // Attribution metrics need several taps (see `attribution.rs`), OTLP
    // metrics an OTLP export (see `otlp.rs`); window gauges exist only when
    // their figure is available (`analyses.rs`, `report.rs`): the ones this
    // traffic supports are checked below.
    use tokentap_core::table::Kind;
    for def in tokentap_core::table::ALL.iter().filter(|d| {
        !is_attribution(d)
            && !is_compound_system(d)
            && !d.name.starts_with("tokentap_otlp_")
            && !d.name.starts_with("tokentap_join_")
            && d.kind != Kind::WindowGauge
    }) {
        assert!(
            scrape.contains(&format!("# TYPE {} ", def.name)),
            "{} missing from the scrape",
            def.name
        );
    }
    assert!(
        scrape.contains("tokentap_tokens_per_event_bucket"),
        "continuous usage gave per-event tokens"
    );
    for series in [
        "tokentap_window_requests_per_second{boundary=\"engine\",tap=\"t\"}",
        "tokentap_window_concurrency{boundary=\"engine\",stat=\"mean\",tap=\"t\"}",
        "tokentap_window_slo_attainment_ratio{boundary=\"engine\",tap=\"t\"}",
        "tokentap_window_samples{boundary=\"engine\",figure=\"itl\",tap=\"t\"}",
        "tokentap_window_itl_seconds{boundary=\"engine\",percentile=\"p50\",tap=\"t\"}",
        "tokentap_window_stall_ratio{boundary=\"engine\",tap=\"t\"}",
        "tokentap_engine_kv_cache_usage_ratio{engine=\"sim\"} 0",
        "tokentap_engine_preemptions{engine=\"sim\"} 0",
    ] {
        assert!(scrape.contains(series), "{series} missing");
    }
    assert!(!scrape.contains("tokentap_engine_scrapes_total{engine=\"sim\",result=\"ok\"} 0"));
    let lint = promtool_check(&scrape);
    println!(
        "promtool check metrics: ok ({} bytes scraped) {lint}",
        scrape.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_stay_bounded_under_10000_models_paths_and_api_keys() {
    let _g = serial().await;
    let (fine, fine_kib) = ten_thousand_models("fine").await;
    let (standard, standard_kib) = ten_thousand_models("standard").await;
    println!(
        "10,000 models, paths and keys: {fine} series ({fine_kib} KiB) with metrics.buckets: fine, {standard} ({standard_kib} KiB) with standard"
    );
    assert!(
        standard * 4 < fine,
        "standard buckets: {standard} series, fine {fine}"
    );
}

/// 10,000 requests with their own models, paths and keys through a tap
/// with `metrics.buckets: buckets`: checks the labels; the series and the
/// scrape's KiB.
async fn ten_thousand_models(buckets: &str) -> (usize, usize) {
    let behind = sim(Profile {
        ttft_ms: 0.0,
        itl_ms: 0.0,
        output_tokens: 2,
        ..Profile::default()
    });
    let tap = Tap::start_top(
        &format!("http://{}", behind.addr),
        "",
        &format!("metrics:\n  buckets: {buckets}\nanalysis:\n  window_seconds: 3600\n"),
        std::path::Path::new("."),
    );
    // 10,000 requests, each with its own model name (one in ten hostile),
    // its own path and its own API key.
    let n = 10_000usize;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (next, addr) = (next.clone(), tap.addr);
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let model = if i % 10 == 0 {
                    format!("evil\n{i}")
                } else {
                    format!("model-{i}")
                };
                let body =
                    serde_json::json!({"model": model, "stream": true, "messages": []}).to_string();
                let path = if i % 2 == 0 {
                    format!("/tenant-{i}/v1/chat/completions")
                } else {
                    format!("/random-{i}/elsewhere")
                };
                let key = format!("Bearer sk-random-{i}");
                client::send(
                    addr,
                    "POST",
                    &path,
                    &[("authorization", &key)],
                    body.as_bytes(),
                )
                .await
                .unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3;
    tap.server.analyses.as_ref().unwrap().live.close_window(now);
    let started = std::time::Instant::now();
    let scrape = tap.scrape();
    let scrape_time = started.elapsed();
    let values = |label: &str| {
        let mut v: Vec<&str> = scrape
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(&format!("{label}=\"")).nth(1)?.split('"').next())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let models = values("model");
    assert_eq!(
        models.len(),
        52,
        "50 models, other, unknown (paths that are not LLM calls)"
    );
    assert!(models.contains(&"other") && models.contains(&"unknown"));
    // Window gauges name the window's top 10 tenants, the mergeable tenant
    // series the process's first 20: never more than 20 + other.
    let tenants = values("tenant");
    assert!(
        tenants.len() <= 21,
        "first 20 tenants + other: {}",
        tenants.len()
    );
    let overflow_t = tap.sample("tokentap_label_overflow_total{label=\"tenant\"}");
    assert!(overflow_t > 0.0, "tenants beyond the first 20 are counted");
    assert!(
        !scrape.contains("random-") && !scrape.contains("sk-random"),
        "no path or key in labels"
    );
    let overflow = tap.sample("tokentap_label_overflow_total{label=\"model\"}");
    // Chat requests (even i) name their models; the others are `other`
    // without naming any (not an LLM path: no body is read).
    assert_eq!(
        overflow,
        (n / 2 - 50) as f64,
        "every request that did not get its own value is counted"
    );
    let mut per_family = std::collections::BTreeMap::<&str, usize>::new();
    for l in scrape.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap_or_default();
        *per_family.entry(name).or_default() += 1;
    }
    let (widest, series) = per_family.iter().max_by_key(|(_, n)| **n).unwrap();
    println!(
        "10,000 models, paths and keys ({buckets} buckets): {} series in all, widest family {widest} with {series}, /metrics {} KiB encoded in {:?}",
        per_family.values().sum::<usize>(),
        scrape.len() / 1024,
        scrape_time
    );
    promtool_check(&scrape);
    (per_family.values().sum::<usize>(), scrape.len() / 1024)
}

#[test]
fn docs_metrics_md_matches_the_metric_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = (
        "<!-- BEGIN GENERATED: metric reference -->\n",
        "<!-- END GENERATED -->",
    );
    let start = doc.find(begin).expect("begin marker") + begin.len();
    let stop = doc.find(end).expect("end marker");
    let generated = tokentap_core::table::render_markdown();
    if std::env::var_os("TOKENTAP_BLESS").is_some() {
        let updated = format!("{}{}{}", &doc[..start], generated, &doc[stop..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        doc[start..stop] == generated,
        "docs/metrics.md is out of date with crates/core/src/table/: run `TOKENTAP_BLESS=1 cargo test --test it docs_metrics` and review the diff"
    );
}
