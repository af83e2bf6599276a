//! The reference scrape: a fixed, deterministic run (the simulator with a
//! seed, a fixed list of requests through three taps, correlation, usage
//! injection, a refusal) gives the same metric names, help texts, label
//! sets and counter values every time. The normalised scrape is kept in
//! `tests/fixtures/reference-scrape.txt`; a change of what tokentap exports
//! shows up as a diff of that file (`TOKENTAP_BLESS=1` re-records it after
//! a deliberate change).
//!
//! Normalised: `# HELP` and `# TYPE` lines as they are; counters with their
//! value; histograms with their `_count` value and, per series, one
//! `_bucket` line that says how many finite bounds it has and its first
//! and last (a layout's bounds are `tokentap_core::table::buckets`' and
//! tested there; timings are not kept); gauges and histogram sums without
//! their value (they are timings or window figures).

use crate::support::*;
use std::collections::BTreeSet;
use std::time::Duration;
use tokentap_net::client;
use tokentap_sim::Profile;

/// Counters whose value depends on wall-clock time, not on the traffic.
const TIMED_COUNTERS: &[&str] = &["tokentap_engine_scrapes_total"];

/// The normalised form of a scrape (see the module docs), one line per
/// series, sorted.
pub fn normalise(scrape: &str) -> String {
    let mut counters = BTreeSet::new();
    let mut lines = BTreeSet::new();
    for l in scrape.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if rest.ends_with(" counter") {
                counters.insert(rest.split(' ').next().unwrap_or_default().to_string());
            }
        }
    }
    // A histogram series' finite bucket bounds, by the series without `le`.
    let mut buckets: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in scrape.lines() {
        if l.starts_with('#') {
            lines.insert(l.to_string());
            continue;
        }
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        if name.ends_with("_bucket") {
            let mut le = String::new();
            let labels: Vec<&str> = series
                .trim_start_matches(name)
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .filter(|kv| match kv.strip_prefix("le=") {
                    Some(v) => {
                        le = v.trim_matches('"').to_string();
                        false
                    }
                    None => true,
                })
                .collect();
            let key = format!("{name}{{{}}}", labels.join(","));
            let bounds = buckets.entry(key).or_default();
            if le != "+Inf" {
                bounds.push(le);
            }
            continue;
        }
        let keep_value = (counters.contains(name) && !TIMED_COUNTERS.contains(&name))
            || name.ends_with("_count");
        lines.insert(if keep_value {
            format!("{series} {value}")
        } else {
            series.to_string()
        });
    }
    for (series, bounds) in buckets {
        let (first, last) = (bounds.first(), bounds.last());
        lines.insert(format!(
            "{series} {} bounds, {}..{}",
            bounds.len(),
            first.map_or("", String::as_str),
            last.map_or("", String::as_str)
        ));
    }
    lines.into_iter().collect::<Vec<_>>().join("\n") + "\n"
}

async fn reference_run() -> String {
    let sim = sim(Profile {
        // Gaps long enough that no stream looks buffered by the gateway
        // tap's relay (`tokentap_stream_buffered_total` is about timing).
        ttft_ms: 5.0,
        itl_ms: 5.0,
        output_tokens: 8,
        seed: 7,
        ..Profile::default()
    });
    let (gw, eng, inj) = (free_addr(), free_addr(), free_addr());
    let taps = [
        tap_yaml("gw", "gateway", gw, eng, ""),
        tap_yaml(
            "eng",
            "engine",
            eng,
            sim.addr,
            "    limits:\n      max_uri_bytes: 512\n",
        ),
        tap_yaml("inj", "engine", inj, sim.addr, "    inject_usage: true\n"),
    ]
    .concat();
    let m = Multi::start(
        &taps,
        "correlation:\n  settle_seconds: 0.2\nmetrics:\n  max_models: 3\n",
    );
    let named = |model: &str| {
        serde_json::json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
            .into_bytes()
    };
    let mut requests = every_kind_of_request();
    requests.extend([
        ("/v1/chat/completions", named("a"), ""),
        ("/v1/chat/completions", named("b"), ""),
        ("/v1/chat/completions", named("c"), ""),
        ("/v1/chat/completions", named("d\ne"), ""),
    ]);
    for (path, body, x_sim) in &requests {
        let _ = client::send(gw, "POST", path, &[("x-sim", x_sim)], body)
            .await
            .unwrap();
    }
    let long = format!("/v1/chat/completions?{}", "q".repeat(600));
    let refused = client::send(gw, "POST", &long, &[], &chat(true, true))
        .await
        .unwrap();
    assert_eq!(refused.status, 414, "the engine tap refuses the long URI");
    // Their own prompt: no fingerprint join with the gateway tap's requests.
    let own = |stream: bool, usage: bool| {
        serde_json::json!({"model": "sim-model", "stream": stream,
            "stream_options": if usage { serde_json::json!({"include_usage": true}) } else { serde_json::Value::Null },
            "messages": [{"role": "user", "content": "injected"}]})
        .to_string()
        .into_bytes()
    };
    for body in [own(true, false), own(true, true), own(false, false)] {
        let _ = client::send(inj, "POST", "/v1/chat/completions", &[], &body)
            .await
            .unwrap();
    }
    let _ = client::send(gw, "GET", "/v1/models", &[], b"")
        .await
        .unwrap();
    // Every record is joined or counted unjoined: two per request through
    // both taps (the list and /v1/models), one for the refused request (at
    // the gateway tap only) and one per injection request.
    let records = 2 * (requests.len() + 1) + 1 + 3;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let settled = |s: &str| prom_totals(s, "tokentap_correlation_total").0 >= records as f64;
    while !settled(&m.scrape()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    normalise(&m.scrape())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_run_exports_the_reference_scrape() {
    let _g = serial().await;
    let got = reference_run().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reference-scrape.txt");
    if std::env::var_os("TOKENTAP_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    let (got_set, want_set): (BTreeSet<&str>, BTreeSet<&str>) =
        (got.lines().collect(), want.lines().collect());
    let missing: Vec<_> = want_set.difference(&got_set).collect();
    let extra: Vec<_> = got_set.difference(&want_set).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the scrape differs from tests/fixtures/reference-scrape.txt\nmissing:\n{}\nextra:\n{}\n(TOKENTAP_BLESS=1 re-records it after a deliberate change)",
        missing.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n"),
        extra.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n"),
    );
}
