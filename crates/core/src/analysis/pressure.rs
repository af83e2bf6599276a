//! Test 8, behaviour under memory pressure, passively: when KV memory runs
//! short an engine queues, preempts or swaps, and clients see it as stalls
//! (long inter-token gaps) and TTFT growth that rise with the requests and
//! tokens in flight. This module tabulates stalls and TTFT by the in-flight
//! level each request started at, beside the time-weighted tokens in
//! flight; `series` correlates stall rate with tokens in flight across
//! windows, and `engines` joins what the engines' own metrics say (KV-cache
//! usage, preemptions) when they are scraped.

use super::itl::stall_indices;
use super::load::Concurrency;
use super::sample::Sample;
use super::settings::StallRule;
use super::stats::mean;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PressureLevel {
    pub in_flight: u32,
    pub requests: usize,
    pub gaps: usize,
    pub stalls: usize,
    pub stalls_per_1k_gaps: Option<f64>,
    pub ttft_mean_ms: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PressureReport {
    pub concurrency: Concurrency,
    pub stalls_per_1k_gaps: Option<f64>,
    pub by_level: Vec<PressureLevel>,
}

pub fn analyze(samples: &[&Sample], load: Concurrency, rule: &StallRule) -> PressureReport {
    #[derive(Default)]
    struct Acc {
        requests: usize,
        gaps: usize,
        stalls: usize,
        ttfts: Vec<f64>,
    }
    let mut by: BTreeMap<u32, Acc> = BTreeMap::new();
    let (mut gaps, mut stalls) = (0usize, 0usize);
    for s in samples.iter().filter(|s| s.in_flight > 0) {
        let a = by.entry(s.in_flight).or_default();
        let n = stall_indices(&s.gaps_ms, rule).len();
        a.requests += 1;
        a.gaps += s.gaps_ms.len();
        a.stalls += n;
        a.ttfts.extend(s.ttft_ms.filter(|_| s.is_ok()));
        gaps += s.gaps_ms.len();
        stalls += n;
    }
    let rate = |stalls: usize, gaps: usize| (gaps > 0).then(|| stalls as f64 * 1e3 / gaps as f64);
    PressureReport {
        concurrency: load,
        stalls_per_1k_gaps: rate(stalls, gaps),
        by_level: by
            .into_iter()
            .map(|(in_flight, a)| PressureLevel {
                in_flight,
                requests: a.requests,
                gaps: a.gaps,
                stalls: a.stalls,
                stalls_per_1k_gaps: rate(a.stalls, a.gaps),
                ttft_mean_ms: mean(a.ttfts.iter().copied()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_by_level() {
        let calm = Sample {
            outcome: "ok".into(),
            in_flight: 1,
            ttft_ms: Some(10.0),
            gaps_ms: vec![20.0; 10],
            ..Sample::default()
        };
        let mut g = vec![20.0; 10];
        g[3] = 500.0;
        let busy = Sample {
            in_flight: 8,
            gaps_ms: g,
            ..calm.clone()
        };
        let r = analyze(
            &[&calm, &busy],
            Concurrency::default(),
            &StallRule::default(),
        );
        assert_eq!(r.by_level.len(), 2);
        assert_eq!(r.by_level[0].stalls, 0);
        assert_eq!(r.by_level[1].stalls, 1);
        assert_eq!(r.by_level[1].stalls_per_1k_gaps, Some(100.0));
        assert_eq!(r.stalls_per_1k_gaps, Some(50.0));
    }
}
