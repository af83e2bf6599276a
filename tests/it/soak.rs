//! Soak: many concurrent slow streams through a tokentap process for a
//! while, its RSS and open fds sampled as it goes. Every stream must arrive
//! whole, RSS must be flat after warm-up, fds back near the start after.
//!
//! `make test` runs the CI size (300 streams, 20 s); `make soak` sets
//! `TOKENTAP_SOAK_STREAMS=2000 TOKENTAP_SOAK_SECONDS=120`.

use crate::process::{run_tokentap, status_kib};
use crate::support::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_net::client;
use tokentap_sim::Profile;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Least-squares slope of (seconds, KiB) in KiB per minute.
fn slope_per_min(points: &[(f64, f64)]) -> f64 {
    tokentap_core::analysis::stats::fit_line(points).map_or(0.0, |f| f.slope * 60.0)
}

const TOKENS: u32 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_concurrent_slow_streams_arrive_whole_with_flat_memory() {
    let _g = serial().await;
    let streams = env_or("TOKENTAP_SOAK_STREAMS", 300) as usize;
    let seconds = env_or("TOKENTAP_SOAK_SECONDS", 20);
    let every = Duration::from_secs(if seconds >= 60 { 5 } else { 2 });
    let behind = sim(Profile {
        ttft_ms: 50.0,
        itl_ms: 100.0,
        output_tokens: TOKENS,
        ..Profile::default()
    });
    let (proc, tap, admin) = run_tokentap(behind.addr, "").await;
    let pid = proc.child.id();
    let (fds_start, rss_start) = (fds(pid), status_kib(pid, "VmRSS:"));

    let ok = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let mut clients = Vec::new();
    for i in 0..streams {
        let (ok, bytes, broken) = (ok.clone(), bytes.clone(), broken.clone());
        clients.push(tokio::spawn(async move {
            // Spread the starts over one stream's length.
            tokio::time::sleep(Duration::from_millis((i as u64 * 2_000) / streams as u64)).await;
            while Instant::now() < end {
                let r = client::send(
                    tap,
                    "POST",
                    "/v1/chat/completions",
                    &[("content-type", "application/json")],
                    &chat(true, true),
                )
                .await;
                let whole = r.as_ref().is_ok_and(|r| {
                    let body = String::from_utf8_lossy(&r.body);
                    r.status == 200
                        && r.complete
                        // The role event, then one per token.
                        && body.matches("\"content\":").count() == TOKENS as usize + 1
                        && body.contains(&format!("\"completion_tokens\":{TOKENS}"))
                        && body.ends_with("data: [DONE]\n\n")
                });
                if whole {
                    ok.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(
                        r.map(|r| r.body.len() as u64).unwrap_or(0),
                        Ordering::Relaxed,
                    );
                } else {
                    broken.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut samples = Vec::new(); // (seconds, RSS KiB, fds)
    while Instant::now() < end {
        tokio::time::sleep(every).await;
        samples.push((
            started.elapsed().as_secs_f64(),
            status_kib(pid, "VmRSS:") as f64,
            fds(pid),
        ));
    }
    for c in clients {
        c.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (fds_end, rss_end) = (fds(pid), status_kib(pid, "VmRSS:"));
    let counted = client::send(admin, "GET", "/metrics", &[], b"")
        .await
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("tokentap_requests_total{") && l.contains("outcome=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();

    // After warm-up: the last three quarters of the run.
    let warm: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(t, _, _)| *t >= seconds as f64 / 4.0)
        .map(|(t, r, _)| (*t, *r))
        .collect();
    let peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let peak_fds = samples.iter().map(|s| s.2).max().unwrap_or(0);
    let (ok, broken) = (ok.load(Ordering::Relaxed), broken.load(Ordering::Relaxed));
    println!(
        "soak: {streams} streams × {seconds} s ({TOKENS} tokens at 100 ms each): {ok} streams whole ({:.1} MiB), {broken} broken; tokentap counted {counted} ok; RSS start {rss_start} KiB, peak {peak:.0}, end {rss_end}; slope after warm-up {:.0} KiB/min; fds start {fds_start}, peak {peak_fds}, end {fds_end}",
        bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        slope_per_min(&warm),
    );
    println!(
        "soak samples (s, RSS KiB, fds): {:?}",
        samples
            .iter()
            .map(|(t, r, f)| (t.round() as u64, *r as u64, *f))
            .collect::<Vec<_>>()
    );
    assert_eq!(broken, 0, "streams lost bytes or failed");
    assert!(
        ok >= streams as u64,
        "every client completed at least one stream"
    );
    assert_eq!(counted, ok as f64, "tokentap counted every stream as ok");
    let (first, last) = (
        warm.first().map_or(0.0, |w| w.1),
        warm.last().map_or(0.0, |w| w.1),
    );
    assert!(
        last - first < 8.0 * 1024.0,
        "RSS grew {:.0} KiB after warm-up",
        last - first
    );
    // Client sockets are gone; pooled upstream connections (≤ 128) may stay.
    assert!(
        fds_end <= fds_start + 128 + 5,
        "fds {fds_start} → {fds_end}"
    );
}
