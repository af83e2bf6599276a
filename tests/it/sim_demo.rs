//! The simulator's ground-truth file and the demo, run as a user would.

use crate::support::*;
use std::process::Command;
use std::time::Duration;
use tokentap_sim::{Profile, SimArgs, Simulator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulator_writes_one_ground_truth_line_per_request() {
    let _g = serial().await;
    let scratch = scratch("truth");
    let file = scratch.path().join("truth.jsonl");
    let s = Simulator::spawn(&SimArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_cert: None,
        tls_key: None,
        ground_truth: Some(file.clone()),
        engine: Default::default(),
        profile: Profile {
            ttft_ms: 10.0,
            itl_ms: 2.0,
            output_tokens: 5,
            ..Profile::default()
        },
    })
    .unwrap();
    for id in ["gt-1", "gt-2"] {
        post(s.addr, &[("x-request-id", id)], &chat(true, true)).await;
        s.truth.wait_for(id, Duration::from_secs(5)).await.unwrap();
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["request_id"], "gt-1");
    let tokens: Vec<f64> = lines[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mark"] == "token")
        .map(|e| e["t_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(tokens.len(), 5);
    assert!(
        tokens[0] >= 10.0,
        "first token at the configured TTFT: {}",
        tokens[0]
    );
    // Sends follow the schedule (4 gaps of 2 ms) up to tokio's 1 ms timer
    // granularity; the file holds the actual send times.
    let span = tokens[4] - tokens[0];
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]) && (6.0..=10.5).contains(&span),
        "{tokens:?}"
    );
    assert_eq!(lines[0]["completion_tokens"], 5);
}

#[test]
fn demo_runs_prints_a_live_table_and_stops_by_itself() {
    let _g = serial_blocking();
    let (listen, admin) = (free_addr(), free_addr());
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["demo", "--duration", "4s", "--interval", "1"])
        .args([
            "--listen",
            &listen.to_string(),
            "--admin",
            &admin.to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("http://{admin}/metrics")));
    assert!(stdout.contains("TTFT p50"));
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" ms ")).collect();
    assert!(rows.len() >= 2, "rows with measurements:\n{stdout}");
    // The compound system's line: its requests broken down into their calls.
    let compound = stdout
        .lines()
        .find(|l| l.contains("app (compound):"))
        .unwrap_or_else(|| panic!("no compound line:\n{stdout}"));
    assert!(
        compound.contains("llm ") && compound.contains("tool "),
        "{compound}"
    );
    assert!(stdout.contains("demo stopped"));
}
