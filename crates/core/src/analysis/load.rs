//! Tests 2 and 5: throughput and goodput over a span of time, concurrency
//! (time-weighted) and capacity.
//!
//! - Rates divide the tokens and requests of the requests that *completed*
//!   in the span by its length: a stream that crosses a window boundary
//!   counts where it ended.
//! - A request **meets the SLOs** when it completed (`ok`) and each
//!   configured objective holds: TTFT (for a non-streamed answer, its E2E
//!   stands for the first token), TPOT (not applicable below 2 tokens), E2E.
//! - **Concurrency** is the time-weighted mean and the maximum of requests
//!   in flight, from the requests' intervals clipped to the span.
//! - **Capacity** is the highest in-flight level (as seen by each request
//!   when it started, itself included) at which SLO attainment stayed at or
//!   above the target: levels are taken in ascending order, each with at
//!   least `capacity_min_requests` requests, and the first level below
//!   target ends the search.

use super::sample::Sample;
use super::settings::Slo;
use super::stats::Summary;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Throughput {
    pub seconds: f64,
    pub requests: usize,
    pub requests_per_s: f64,
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    pub input_tokens: u64,
    pub input_tokens_per_s: f64,
    /// Input tokens not served from the prefix cache (as usage reports it).
    pub uncached_input_tokens_per_s: f64,
    /// Per request decode rate: (output tokens − 1) / (E2E − TTFT), tokens/s.
    pub decode_tokens_per_s: Summary,
}

pub fn throughput(samples: &[&Sample], seconds: f64) -> Throughput {
    let secs = seconds.max(f64::EPSILON);
    let output: u64 = samples.iter().filter_map(|s| s.output_tokens).sum();
    let input: u64 = samples.iter().filter_map(|s| s.input_tokens).sum();
    let uncached: u64 = samples
        .iter()
        .filter_map(|s| s.uncached_input_tokens())
        .sum();
    Throughput {
        seconds,
        requests: samples.len(),
        requests_per_s: samples.len() as f64 / secs,
        output_tokens: output,
        output_tokens_per_s: output as f64 / secs,
        input_tokens: input,
        input_tokens_per_s: input as f64 / secs,
        uncached_input_tokens_per_s: uncached as f64 / secs,
        decode_tokens_per_s: Summary::of(samples.iter().filter_map(|s| decode_rate(s))),
    }
}

/// Output tokens per second after the first token, for one streamed request.
pub fn decode_rate(s: &Sample) -> Option<f64> {
    let n = s.output_tokens.filter(|n| *n >= 2)?;
    let secs = (s.e2e_ms - s.ttft_ms?) / 1e3;
    (s.is_ok() && s.stream && secs > 0.0).then(|| (n - 1) as f64 / secs)
}

/// Whether a request met every configured objective.
pub fn meets(s: &Sample, slo: &Slo) -> bool {
    if !s.is_ok() {
        return false;
    }
    let ttft = s.ttft_ms.unwrap_or(s.e2e_ms);
    slo.ttft_ms.is_none_or(|t| ttft <= t)
        && slo.tpot_ms.is_none_or(|t| s.tpot_ms.is_none_or(|v| v <= t))
        && slo.e2e_ms.is_none_or(|t| s.e2e_ms <= t)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goodput {
    /// Requests judged (all LLM requests in the span).
    pub requests: usize,
    /// Requests meeting every objective.
    pub met: usize,
    /// met / requests.
    pub attainment: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
}

/// Goodput against `slo`; `None` when no objective is configured or there
/// are no requests.
pub fn goodput(samples: &[&Sample], slo: &Slo, seconds: f64) -> Option<Goodput> {
    if !slo.is_set() || samples.is_empty() {
        return None;
    }
    let secs = seconds.max(f64::EPSILON);
    let met: Vec<&&Sample> = samples.iter().filter(|s| meets(s, slo)).collect();
    let tokens: u64 = met.iter().filter_map(|s| s.output_tokens).sum();
    Some(Goodput {
        requests: samples.len(),
        met: met.len(),
        attainment: met.len() as f64 / samples.len() as f64,
        requests_per_s: met.len() as f64 / secs,
        output_tokens_per_s: tokens as f64 / secs,
    })
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Concurrency {
    /// Time-weighted mean of requests in flight.
    pub mean: f64,
    pub max: u32,
    /// Time-weighted mean of input + output tokens held by requests in
    /// flight (a proxy for KV-cache occupancy).
    pub tokens_in_flight: f64,
}

/// Concurrency over `[start, end]` (ms since epoch) from the intervals of
/// `samples` (any that overlap the span count, completed in it or not).
pub fn concurrency<'a>(
    samples: impl IntoIterator<Item = &'a Sample>,
    start: f64,
    end: f64,
) -> Concurrency {
    let span = end - start;
    if span <= 0.0 {
        return Concurrency::default();
    }
    let mut edges: Vec<(f64, i64)> = Vec::new();
    let (mut area, mut token_area) = (0.0, 0.0);
    for s in samples {
        let (a, b) = (s.start_unix_ms.max(start), s.end_unix_ms().min(end));
        if b < a || (b == a && s.e2e_ms > 0.0) {
            continue;
        }
        area += b - a;
        let tokens = s.input_tokens.unwrap_or(0) + s.output_tokens.unwrap_or(0);
        token_area += (b - a) * tokens as f64;
        edges.push((a, 1));
        edges.push((b, -1));
    }
    // At equal times, starts first: touching intervals overlap for an instant.
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(y.1.cmp(&x.1)));
    let (mut cur, mut max) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        max = max.max(cur);
    }
    Concurrency {
        mean: area / span,
        max: u32::try_from(max).unwrap_or(0),
        tokens_in_flight: token_area / span,
    }
}

/// SLO attainment of the requests that started at one in-flight level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Level {
    pub in_flight: u32,
    pub requests: usize,
    pub met: usize,
    pub attainment: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    pub target: f64,
    pub min_requests: usize,
    /// The highest level at which attainment stayed ≥ target, if any.
    pub capacity: Option<u32>,
    /// Why there is no capacity figure (or what bounds it).
    pub note: Option<String>,
    pub levels: Vec<Level>,
}

/// SLO attainment by the in-flight level at which requests started.
pub fn levels(samples: &[&Sample], slo: &Slo) -> Vec<Level> {
    let mut by_level: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.in_flight > 0) {
        let e = by_level.entry(s.in_flight).or_default();
        e.0 += 1;
        e.1 += usize::from(meets(s, slo));
    }
    by_level
        .into_iter()
        .map(|(in_flight, (requests, met))| Level {
            in_flight,
            requests,
            met,
            attainment: met as f64 / requests.max(1) as f64,
        })
        .collect()
}

/// Adds up levels of several windows.
pub fn merge_levels<'a>(parts: impl IntoIterator<Item = &'a Level>) -> Vec<Level> {
    let mut by_level: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for l in parts {
        let e = by_level.entry(l.in_flight).or_default();
        e.0 += l.requests;
        e.1 += l.met;
    }
    by_level
        .into_iter()
        .map(|(in_flight, (requests, met))| Level {
            in_flight,
            requests,
            met,
            attainment: met as f64 / requests.max(1) as f64,
        })
        .collect()
}

/// Capacity from the requests' in-flight level at start.
pub fn capacity(samples: &[&Sample], slo: &Slo, target: f64, min_requests: usize) -> Capacity {
    capacity_of_levels(levels(samples, slo), slo, target, min_requests)
}

/// Capacity from levels (one window's or several windows' merged).
pub fn capacity_of_levels(
    levels: Vec<Level>,
    slo: &Slo,
    target: f64,
    min_requests: usize,
) -> Capacity {
    let mut out = Capacity {
        target,
        min_requests,
        capacity: None,
        note: None,
        levels,
    };
    if !slo.is_set() {
        out.note = Some("no SLOs configured".into());
        return out;
    }
    let mut broke = false;
    for l in out.levels.iter().filter(|l| l.requests >= min_requests) {
        if l.attainment >= target {
            out.capacity = Some(l.in_flight);
        } else {
            broke = true;
            break;
        }
    }
    out.note = match (out.capacity, broke) {
        (None, true) => Some("SLO attainment below target at the lowest observed level".into()),
        (None, false) => Some(format!(
            "no in-flight level with {min_requests} or more requests"
        )),
        (Some(c), false) => Some(format!(
            "SLOs held at every observed level: capacity is at least {c}"
        )),
        (Some(_), true) => None,
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(start: f64, e2e: f64, ttft: f64, in_flight: u32) -> Sample {
        Sample {
            outcome: "ok".into(),
            stream: true,
            start_unix_ms: start,
            e2e_ms: e2e,
            ttft_ms: Some(ttft),
            output_tokens: Some(11),
            input_tokens: Some(100),
            in_flight,
            ..Sample::default()
        }
    }

    #[test]
    fn goodput_counts_requests_meeting_every_slo() {
        let slo = Slo {
            ttft_ms: Some(100.0),
            tpot_ms: None,
            e2e_ms: Some(1_000.0),
        };
        let a = req(0.0, 500.0, 50.0, 1);
        let b = req(0.0, 500.0, 150.0, 1); // TTFT too slow
        let c = req(0.0, 1_500.0, 50.0, 1); // E2E too slow
        let mut d = req(0.0, 500.0, 50.0, 1);
        d.outcome = "upstream_truncated".into();
        let g = goodput(&[&a, &b, &c, &d], &slo, 10.0).unwrap();
        assert_eq!((g.requests, g.met), (4, 1));
        assert_eq!(g.attainment, 0.25);
        assert!((g.output_tokens_per_s - 1.1).abs() < 1e-12);
        assert!(goodput(&[&a], &Slo::default(), 10.0).is_none());
    }

    #[test]
    fn concurrency_is_time_weighted() {
        // Two requests overlapping for half of a 1 s span.
        let a = req(0.0, 1_000.0, 1.0, 1);
        let b = req(500.0, 1_000.0, 1.0, 2);
        let c = concurrency([&a, &b], 0.0, 1_000.0);
        assert!((c.mean - 1.5).abs() < 1e-12);
        assert_eq!(c.max, 2);
        assert!((c.tokens_in_flight - 1.5 * 111.0).abs() < 1e-9);
    }

    #[test]
    fn capacity_is_the_last_level_before_attainment_drops() {
        let slo = Slo {
            ttft_ms: Some(100.0),
            ..Slo::default()
        };
        let mut v = Vec::new();
        for level in 1..=6u32 {
            for i in 0..20 {
                // Levels above 4 miss the TTFT objective 3 times in 4.
                let slow = level > 4 && i % 4 != 0;
                v.push(req(0.0, 500.0, if slow { 300.0 } else { 50.0 }, level));
            }
        }
        v.push(req(0.0, 500.0, 50.0, 9)); // too few requests to count
        let refs: Vec<&Sample> = v.iter().collect();
        let c = capacity(&refs, &slo, 0.9, 10);
        assert_eq!(c.capacity, Some(4));
        assert_eq!(c.levels.len(), 7);
        assert!(c.note.is_none());
    }
}
