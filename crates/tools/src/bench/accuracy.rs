//! S6, accuracy: what tokentap records (its record log, one line per
//! request) against what the client saw and what the simulator did (its
//! write time of every token, on the driver's clock). Two variants: the
//! client reads tokentap directly, and the client reads through HAProxy
//! with its default buffering, which coalesces events — the client's view
//! of the gaps collapses there while tokentap's must stay on the truth.

use super::cells::{one_stream, Profile, Stream};
use super::stats::{median, Dist, Hist};
use super::sweep::PACED;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::analysis::sample::Sample;
use tokentap_sim::Simulator;

/// One variant's comparison. Errors in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct S6 {
    pub variant: String,
    pub streams: u64,
    pub failed: u64,
    /// Streams found in tokentap's record log (by `x-request-id`).
    pub recorded: u64,
    /// Recorded streams whose token-event count equals the simulator's.
    pub counts_equal: u64,
    /// Median of tokentap's TTFT − the client's: the forwarding delay
    /// (the client's TTFT includes both legs between it and the tap).
    pub ttft_client_bias: f64,
    /// |tokentap TTFT − client TTFT − bias|.
    pub ttft_client_error: Dist,
    /// Median of tokentap's TTFT − the simulator's (request received →
    /// first token written): the tap↔simulator path.
    pub ttft_truth_bias: f64,
    /// |tokentap TTFT − simulator TTFT − bias|.
    pub ttft_truth_error: Dist,
    /// |tokentap's gap − the simulator's gap|, every gap of every stream.
    pub itl_error_tap: Dist,
    /// |the client's gap − the simulator's gap|.
    pub itl_error_client: Dist,
    /// Median gap as each saw it.
    pub itl_p50_truth: f64,
    pub itl_p50_tap: f64,
    pub itl_p50_client: f64,
    /// Token events per client read that carried any.
    pub client_events_per_read: f64,
}

/// 256 streams of S5's pacing started over one second: many streams at
/// once, within every proxy's S5 ceiling here (accuracy under overload is
/// queueing, which S5 shows).
pub fn paced() -> Vec<(Profile, u32, Duration)> {
    vec![(PACED, 256, Duration::from_secs(1))]
}

/// The S2 profiles: 16 streams of 64 × 20 ms and 16 of 256 × 5 ms.
pub fn mix() -> Vec<(Profile, u32, Duration)> {
    vec![
        (
            Profile {
                events: 64,
                every_ms: 20,
            },
            16,
            Duration::from_millis(20),
        ),
        (
            Profile {
                events: 256,
                every_ms: 5,
            },
            16,
            Duration::from_millis(5),
        ),
    ]
}

/// Runs the mix through `addr` and returns (request id, stream) pairs.
pub async fn traffic(
    addr: SocketAddr,
    sim: &Arc<Simulator>,
    mix: &[(Profile, u32, Duration)],
    tag: &str,
) -> Vec<(String, Option<Stream>)> {
    let mut out = Vec::new();
    for (k, (p, n, spread)) in mix.iter().enumerate() {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..*n {
            let id = format!("{tag}-{k}-{i}");
            let at = start + spread.mul_f64(f64::from(i) / f64::from((*n).max(1)));
            let (sim, p, id2) = (sim.clone(), *p, id.clone());
            tasks.push((
                id,
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    one_stream(addr, sim, p, id2).await
                }),
            ));
        }
        for (id, t) in tasks {
            out.push((id, t.await.ok().flatten()));
        }
    }
    out
}

/// The record log's samples by request id, waiting up to `limit` for
/// `want` of them (the log is written off the request path).
pub async fn read_log(path: &Path, want: usize, limit: Duration) -> HashMap<String, Sample> {
    let deadline = Instant::now() + limit;
    loop {
        let samples: HashMap<String, Sample> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Sample>(l).ok())
            .filter_map(|s| Some((s.request_id.clone()?, s)))
            .collect();
        if samples.len() >= want || Instant::now() >= deadline {
            return samples;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn signed_us(a: Instant, b: Instant) -> f64 {
    if a >= b {
        micros(a.duration_since(b))
    } else {
        -micros(b.duration_since(a))
    }
}

fn abs_hist(v: &[f64], centre: f64) -> Dist {
    let mut h = Hist::default();
    for x in v {
        h.add(Duration::from_secs_f64((x - centre).abs() / 1e6));
    }
    h.dist()
}

/// Compares every stream of a variant with tokentap's record and the
/// simulator's truth.
pub fn compare(
    variant: &str,
    streams: &[(String, Option<Stream>)],
    log: &HashMap<String, Sample>,
) -> S6 {
    let mut r = S6 {
        variant: variant.to_string(),
        ..S6::default()
    };
    let (mut ttft_client, mut ttft_truth) = (Vec::new(), Vec::new());
    let (mut gaps_truth, mut gaps_tap, mut gaps_client) = (Vec::new(), Vec::new(), Vec::new());
    let (mut err_tap, mut err_client) = (Hist::default(), Hist::default());
    let (mut token_events, mut token_reads) = (0u64, 0u64);
    for (id, s) in streams {
        let Some(s) = s.as_ref().filter(|s| s.ex.status == 200) else {
            r.failed += 1;
            continue;
        };
        r.streams += 1;
        let client: Vec<(Instant, u32)> =
            s.ex.events
                .iter()
                .filter(|e| !e.tokens.is_empty())
                .map(|e| (e.at, e.read))
                .collect();
        token_events += client.len() as u64;
        let mut reads: Vec<u32> = client.iter().map(|(_, r)| *r).collect();
        reads.dedup();
        token_reads += reads.len() as u64;
        let (Some(sample), Some(truth)) = (log.get(id), s.truth.as_ref()) else {
            continue;
        };
        r.recorded += 1;
        let sent = truth.token_times();
        if sample.token_events as usize != sent.len() {
            continue;
        }
        r.counts_equal += 1;
        if let (Some(tap), Some(first), Some(w)) =
            (sample.ttft_ms, s.ex.first_token(), sent.first())
        {
            ttft_client.push(tap * 1e3 - micros(first.saturating_duration_since(s.ex.sent)));
            ttft_truth.push(tap * 1e3 - micros(w.saturating_duration_since(truth.received)));
        }
        let truth_gaps: Vec<f64> = sent
            .windows(2)
            .filter_map(|w| match w {
                [a, b] => Some(signed_us(*b, *a)),
                _ => None,
            })
            .collect();
        if sample.gaps_ms.len() == truth_gaps.len() {
            for (tap, t) in sample.gaps_ms.iter().zip(&truth_gaps) {
                err_tap.add(Duration::from_secs_f64((tap * 1e3 - t).abs() / 1e6));
                gaps_tap.push(tap * 1e3);
            }
        }
        if client.len() == sent.len() {
            for (w, t) in client.windows(2).zip(&truth_gaps) {
                if let [(a, _), (b, _)] = w {
                    let g = signed_us(*b, *a);
                    err_client.add(Duration::from_secs_f64((g - t).abs() / 1e6));
                    gaps_client.push(g);
                }
            }
        }
        gaps_truth.extend(truth_gaps);
    }
    r.ttft_client_bias = median(ttft_client.clone());
    r.ttft_client_error = abs_hist(&ttft_client, r.ttft_client_bias);
    r.ttft_truth_bias = median(ttft_truth.clone());
    r.ttft_truth_error = abs_hist(&ttft_truth, r.ttft_truth_bias);
    r.itl_error_tap = err_tap.dist();
    r.itl_error_client = err_client.dist();
    r.itl_p50_truth = median(gaps_truth);
    r.itl_p50_tap = median(gaps_tap);
    r.itl_p50_client = median(gaps_client);
    r.client_events_per_read = if token_reads == 0 {
        f64::NAN
    } else {
        token_events as f64 / token_reads as f64
    };
    r
}
