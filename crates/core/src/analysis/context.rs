//! Test 9, long-context scaling: TTFT, TPOT and prefill rate by input-length
//! bucket (bounded: <1k, 1k–4k, 4k–16k, 16k–64k, >64k input tokens) and a
//! least-squares line of TTFT against the input tokens the engine had to
//! prefill (input minus cached), as milliseconds per 1,000 tokens with R².
//!
//! The prefill rate is uncached input tokens / TTFT: an *effective* rate that
//! includes queueing before prefill, as a client lives it.

use super::sample::Sample;
use super::stats::{fit_line, Fit, Summary};
use serde::Serialize;

/// Input-length buckets: name, lower bound (inclusive), upper (exclusive).
pub const BUCKETS: [(&str, u64, u64); 5] = [
    ("<1k", 0, 1_000),
    ("1k-4k", 1_000, 4_000),
    ("4k-16k", 4_000, 16_000),
    ("16k-64k", 16_000, 64_000),
    (">64k", 64_000, u64::MAX),
];

/// Points kept for the TTFT-versus-input chart.
pub const MAX_POINTS: usize = 5_000;

pub fn bucket_of(input_tokens: u64) -> &'static str {
    BUCKETS
        .iter()
        .find(|(_, lo, hi)| input_tokens >= *lo && input_tokens < *hi)
        .map_or(">64k", |b| b.0)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    pub bucket: &'static str,
    pub requests: usize,
    pub ttft_ms: Summary,
    pub tpot_ms: Summary,
    pub prefill_tokens_per_s: Summary,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContextReport {
    /// Completed requests with a TTFT and known input tokens.
    pub requests: usize,
    pub buckets: Vec<Bucket>,
    /// TTFT (ms) = intercept + slope × uncached input tokens / 1000.
    pub ttft_fit: Option<Fit>,
    /// (uncached input tokens, TTFT ms) for the chart.
    pub points: Vec<(f64, f64)>,
}

pub fn analyze(samples: &[&Sample]) -> ContextReport {
    let usable: Vec<(&Sample, u64, f64)> = samples
        .iter()
        .filter(|s| s.is_ok())
        .filter_map(|s| Some((*s, s.input_tokens?, s.ttft_ms?)))
        .collect();
    let buckets = BUCKETS
        .iter()
        .map(|(name, lo, hi)| {
            let inb: Vec<&(&Sample, u64, f64)> = usable
                .iter()
                .filter(|(_, i, _)| i >= lo && i < hi)
                .collect();
            Bucket {
                bucket: name,
                requests: inb.len(),
                ttft_ms: Summary::of(inb.iter().map(|u| u.2)),
                tpot_ms: Summary::of(inb.iter().filter_map(|u| u.0.tpot_ms)),
                prefill_tokens_per_s: Summary::of(inb.iter().filter_map(|u| {
                    let uncached = u.0.uncached_input_tokens()? as f64;
                    (u.2 > 0.0).then(|| uncached / (u.2 / 1e3))
                })),
            }
        })
        .collect();
    let points: Vec<(f64, f64)> = usable
        .iter()
        .filter_map(|(s, _, ttft)| Some((s.uncached_input_tokens()? as f64, *ttft)))
        .collect();
    let per_1k: Vec<(f64, f64)> = points.iter().map(|(x, y)| (x / 1e3, *y)).collect();
    ContextReport {
        requests: usable.len(),
        buckets,
        ttft_fit: fit_line(&per_1k),
        points: points.into_iter().take(MAX_POINTS).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_slope() {
        let v: Vec<Sample> = [500u64, 2_000, 8_000, 20_000, 70_000]
            .iter()
            .map(|i| Sample {
                outcome: "ok".into(),
                input_tokens: Some(*i),
                cached_tokens: Some(0),
                ttft_ms: Some(30.0 + 2.5 * *i as f64 / 1e3),
                ..Sample::default()
            })
            .collect();
        let refs: Vec<&Sample> = v.iter().collect();
        let r = analyze(&refs);
        assert_eq!(r.requests, 5);
        assert!(r.buckets.iter().all(|b| b.requests == 1));
        let f = r.ttft_fit.unwrap();
        assert!((f.slope - 2.5).abs() < 1e-9);
        assert!((f.intercept - 30.0).abs() < 1e-9);
        assert_eq!(bucket_of(999), "<1k");
        assert_eq!(bucket_of(64_000), ">64k");
    }
}
