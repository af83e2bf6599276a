//! The demo's traffic: streaming chat requests of varied prompt and output
//! lengths at a concurrency that steps 1 → 2 → 4 → 8 → 4 → 2 every 10 s, so
//! the live table (and any dashboard) shows latency moving with load. A few
//! requests cancel mid-stream, fail upstream or do not stream, so every
//! outcome appears.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_net::client::{self, Flow};
use tokio::sync::watch;

const STEPS: [usize; 6] = [1, 2, 4, 8, 4, 2];
const STEP: Duration = Duration::from_secs(10);

/// The concurrency target `elapsed` after the start.
pub fn target(elapsed: Duration, max: usize) -> usize {
    let i = (elapsed.as_secs() / STEP.as_secs()) as usize % STEPS.len();
    STEPS.get(i).copied().unwrap_or(1).min(max).max(1)
}

/// Runs workers until `stop` turns true.
pub async fn run(tap: SocketAddr, max_concurrency: usize, stop: watch::Receiver<bool>) {
    let start = Instant::now();
    let seq = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..max_concurrency.max(1) {
        let mut stop = stop.clone();
        let seq = seq.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(worker as u64 + 1);
            loop {
                if *stop.borrow() {
                    return;
                }
                if worker >= target(start.elapsed(), max_concurrency) {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        _ = stop.changed() => {}
                    }
                    continue;
                }
                let n = seq.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = one_request(tap, n, &mut rng) => {}
                    _ = stop.changed() => return,
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn one_request(tap: SocketAddr, n: u64, rng: &mut StdRng) {
    let words = rng.random_range(10..1500usize);
    let prompt: String = (0..words)
        .map(|i| if i % 7 == 0 { "context " } else { "word " })
        .collect();
    let max_tokens = rng.random_range(16..=256u32);
    let roll = rng.random_range(0..100u32);
    let stream = roll >= 10;
    let fault = if roll < 2 { "status=503" } else { "none" };
    let cancel_after = (roll < 5 && stream).then(|| rng.random_range(2..10usize));
    let ttft_ms = 60 + prompt.len() / 40;
    let itl_ms = rng.random_range(12..30u32);
    let body = json!({
        "model": "sim-model",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "max_tokens": max_tokens,
        "messages": [{"role": "system", "content": "You are a demo."}, {"role": "user", "content": prompt}],
    })
    .to_string();
    let sim = format!("ttft-ms={ttft_ms},itl-ms={itl_ms},itl-jitter-ms=4,fault={fault}");
    let id = format!("demo-{n}");
    let headers = [
        ("content-type", "application/json"),
        ("x-sim", sim.as_str()),
        ("x-request-id", id.as_str()),
    ];
    let _ = client::send_with(
        tap,
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
        |r| {
            let events = r.body.windows(6).filter(|w| w == b"data: ").count();
            match cancel_after {
                Some(k) if events >= k => Flow::Stop,
                _ => Flow::Continue,
            }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_steps() {
        let t = |s| target(Duration::from_secs(s), 8);
        assert_eq!(
            [t(0), t(10), t(20), t(30), t(40), t(50), t(60)],
            [1, 2, 4, 8, 4, 2, 1]
        );
        assert_eq!(target(Duration::from_secs(30), 3), 3);
    }
}
