//! Tests of `analysis/compound.rs`: record-log samples of an agent's taps,
//! joined by trace id, stacked by percentile.

use super::*;

fn sample(
    tap: &str,
    boundary: &'static str,
    trace: &str,
    start: f64,
    ttft: Option<f64>,
    e2e: f64,
) -> Sample {
    Sample {
        tap: tap.into(),
        boundary: boundary.into(),
        trace_id: Some(trace.into()),
        start_unix_ms: start,
        ttft_ms: ttft,
        e2e_ms: e2e,
        outcome: "ok".into(),
        ..Sample::default()
    }
}

/// Request `i` (trace `t{i}`) at `at` ms: a search 5–15, an LLM call
/// 20–60 at the gateway, a tool call 60–60+`tool`, the answer's LLM call
/// after it streaming its first token 20 ms in; its end 30 ms later.
fn agent(i: usize, at: f64, tool: f64) -> Vec<Sample> {
    let t = format!("t{i}");
    let llm2 = 62.0 + tool;
    vec![
        sample("app", "compound", &t, at, Some(llm2 + 21.0), llm2 + 31.0),
        sample("vectors", "retrieval", &t, at + 5.0, None, 10.0),
        sample("gw", "gateway", &t, at + 20.0, Some(30.0), 40.0),
        sample("mcp", "tool", &t, at + 60.0, None, tool),
        sample("gw", "gateway", &t, at + llm2, Some(20.0), 30.0),
    ]
}

#[test]
fn each_request_is_split_and_stacked_at_its_percentiles_exactly() {
    let mut all: Vec<Sample> = Vec::new();
    // Tool calls of 10, 20 … 200 ms: the E2E percentiles follow them.
    for i in 0..20 {
        all.extend(agent(i, 1000.0 * i as f64, 10.0 * (i + 1) as f64));
    }
    // A compound request no other tap saw.
    all.push(sample("app", "compound", "alone", 50_000.0, Some(5.0), 9.0));
    let refs: Vec<&Sample> = all.iter().collect();
    let mine: Vec<&Sample> = refs.iter().copied().filter(|s| s.tap == "app").collect();
    let r = analyze("app", &mine, &refs, Instant::now());
    assert_eq!((r.requests, r.not_broken_down), (20, 1));
    assert_eq!(r.e2e.n, 20);
    let at: Vec<&str> = r.e2e.rows.iter().map(|row| row.at.as_str()).collect();
    assert_eq!(at, ["p50", "p90", "mean"], "no p99 from 20 requests");
    for row in &r.e2e.rows {
        let sum: f64 = row.parts_ms.values().sum();
        assert!((sum - row.total_ms).abs() < 1e-6, "{row:?}");
    }
    // p50: the 10th request (tool 100 ms): E2E 62 + 100 + 31.
    let p50 = &r.e2e.rows[0];
    assert!((p50.total_ms - 193.0).abs() < 1e-6, "{p50:?}");
    assert!((p50.parts_ms["tool"] - 100.0).abs() < 1e-6);
    assert!((p50.parts_ms["retrieval"] - 10.0).abs() < 1e-6);
    assert!((p50.parts_ms["llm"] - 70.0).abs() < 1e-6);
    assert!((p50.parts_ms["residual"] - 13.0).abs() < 1e-6);
    // TTFT: up to the second LLM call's first token, 10 ms before its end.
    assert!((r.ttft.rows[0].total_ms - 183.0).abs() < 1e-6);
    assert_eq!(r.calls_per_request["llm"][&2], 20);
    assert_eq!(r.calls_per_request["tool"][&1], 20);
    assert_eq!(r.iteration_ms.n, 40);
}

#[test]
fn logs_of_several_machines_are_laid_on_wall_clock_starts() {
    let mut all = agent(0, 0.0, 50.0);
    for (k, s) in all.iter_mut().enumerate() {
        s.origin = k as u32;
    }
    let refs: Vec<&Sample> = all.iter().collect();
    let r = analyze("app", &refs[..1], &refs, Instant::now());
    assert_eq!(r.requests, 1);
    assert!((r.e2e.rows[0].parts_ms["tool"] - 50.0).abs() < 1e-6);
}
