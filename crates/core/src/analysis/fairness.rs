//! Test 6, scheduling fairness: how evenly tenants were served.
//!
//! A tenant's normalised service is its **TTFT slowdown** inverted: the best
//! tenant's mean TTFT divided by this tenant's (1 for the best served, toward
//! 0 for a starved one). Jain's index over those values is 1 when every
//! tenant waits alike and 1/n when one is served and the rest starve; the
//! max/min ratio is the worst tenant's mean TTFT over the best's. The same
//! index over per-tenant mean decode rates (tokens/s per active request) is
//! reported beside it. Tenants with fewer than `min_requests` requests with a
//! TTFT are listed but not judged. The list shows the `top` tenants by
//! request count and folds the rest into `other`.

use super::load::decode_rate;
use super::sample::Sample;
use super::stats::{jain, mean};
use serde::Serialize;
use std::collections::HashMap;

/// The tenant name of requests that carried none.
pub const NO_TENANT: &str = "none";
/// The tenant that folds everything beyond the top K.
pub const OTHER: &str = "other";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantStats {
    pub tenant: String,
    pub requests: usize,
    pub ttft_mean_ms: Option<f64>,
    /// This tenant's mean TTFT over the best judged tenant's.
    pub ttft_slowdown: Option<f64>,
    pub decode_tokens_per_s_mean: Option<f64>,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FairnessReport {
    pub tenants_seen: usize,
    /// Tenants with enough requests to enter the index.
    pub tenants_judged: usize,
    pub jain_ttft: Option<f64>,
    pub max_min_ttft_ratio: Option<f64>,
    pub jain_decode_rate: Option<f64>,
    /// Top tenants by requests, then `other`.
    pub tenants: Vec<TenantStats>,
}

#[derive(Default)]
struct Acc {
    requests: usize,
    ttfts: Vec<f64>,
    rates: Vec<f64>,
    output: u64,
}

pub fn analyze(samples: &[&Sample], min_requests: usize, top: usize) -> FairnessReport {
    let mut by: HashMap<&str, Acc> = HashMap::new();
    for s in samples {
        let a = by
            .entry(s.tenant.as_deref().unwrap_or(NO_TENANT))
            .or_default();
        a.requests += 1;
        a.output += s.output_tokens.unwrap_or(0);
        if s.is_ok() {
            a.ttfts.extend(s.ttft_ms);
            a.rates.extend(decode_rate(s));
        }
    }
    let judged: Vec<(&str, f64, Option<f64>)> = by
        .iter()
        .filter(|(_, a)| a.ttfts.len() >= min_requests.max(1))
        .filter_map(|(t, a)| {
            Some((
                *t,
                mean(a.ttfts.iter().copied())?,
                mean(a.rates.iter().copied()),
            ))
        })
        .collect();
    let best = judged.iter().map(|j| j.1).fold(f64::INFINITY, f64::min);
    let worst = judged.iter().map(|j| j.1).fold(0.0, f64::max);
    let service: Vec<f64> = judged
        .iter()
        .map(|j| if j.1 > 0.0 { best / j.1 } else { 1.0 })
        .collect();
    let rates: Vec<f64> = judged.iter().filter_map(|j| j.2).collect();
    let mut report = FairnessReport {
        tenants_seen: by.len(),
        tenants_judged: judged.len(),
        jain_ttft: jain(&service),
        max_min_ttft_ratio: (judged.len() >= 2 && best > 0.0).then(|| worst / best),
        jain_decode_rate: if rates.len() == judged.len() {
            jain(&rates)
        } else {
            None
        },
        tenants: Vec::new(),
    };
    let mut order: Vec<(&str, Acc)> = by.into_iter().collect();
    order.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then(a.0.cmp(b.0)));
    let slowdown = |m: Option<f64>| {
        m.filter(|_| best.is_finite() && best > 0.0)
            .map(|m| m / best)
    };
    let mut other = Acc::default();
    for (i, (tenant, a)) in order.into_iter().enumerate() {
        if i < top {
            let m = mean(a.ttfts.iter().copied());
            report.tenants.push(TenantStats {
                tenant: tenant.to_owned(),
                requests: a.requests,
                ttft_mean_ms: m,
                ttft_slowdown: slowdown(m),
                decode_tokens_per_s_mean: mean(a.rates.iter().copied()),
                output_tokens: a.output,
            });
        } else {
            other.requests += a.requests;
            other.output += a.output;
            other.ttfts.extend(a.ttfts);
            other.rates.extend(a.rates);
        }
    }
    if other.requests > 0 {
        let m = mean(other.ttfts.iter().copied());
        report.tenants.push(TenantStats {
            tenant: OTHER.into(),
            requests: other.requests,
            ttft_mean_ms: m,
            ttft_slowdown: slowdown(m),
            decode_tokens_per_s_mean: mean(other.rates.iter().copied()),
            output_tokens: other.output,
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tenant: &str, ttft: f64) -> Sample {
        Sample {
            outcome: "ok".into(),
            stream: true,
            tenant: Some(tenant.into()),
            ttft_ms: Some(ttft),
            e2e_ms: ttft + 100.0,
            output_tokens: Some(11),
            ..Sample::default()
        }
    }

    fn run(ttfts: &[(&str, f64)], top: usize) -> FairnessReport {
        let v: Vec<Sample> = ttfts
            .iter()
            .flat_map(|(t, ms)| (0..5).map(move |_| req(t, *ms)))
            .collect();
        let refs: Vec<&Sample> = v.iter().collect();
        analyze(&refs, 3, top)
    }

    #[test]
    fn equal_service_is_fair_and_starvation_is_not() {
        let fair = run(&[("a", 100.0), ("b", 100.0), ("c", 100.0)], 10);
        assert_eq!(fair.jain_ttft, Some(1.0));
        assert_eq!(fair.max_min_ttft_ratio, Some(1.0));
        let unfair = run(&[("a", 50.0), ("b", 500.0), ("c", 500.0), ("d", 500.0)], 10);
        let j = unfair.jain_ttft.unwrap();
        // Service 1, 0.1, 0.1, 0.1: (1.3)² / (4 × 1.03).
        assert!((j - 1.69 / 4.12).abs() < 1e-9);
        assert_eq!(unfair.max_min_ttft_ratio, Some(10.0));
        assert_eq!(unfair.tenants_judged, 4);
    }

    #[test]
    fn top_k_then_other() {
        let r = run(&[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)], 2);
        let names: Vec<&str> = r.tenants.iter().map(|t| t.tenant.as_str()).collect();
        assert_eq!(names, ["a", "b", "other"]);
        assert_eq!(r.tenants[2].requests, 10);
        assert_eq!(r.tenants_seen, 4);
    }

    #[test]
    fn one_tenant_has_no_index() {
        let r = run(&[("a", 10.0)], 5);
        assert_eq!(r.jain_ttft, None);
        assert_eq!(r.max_min_ttft_ratio, None);
    }
}
