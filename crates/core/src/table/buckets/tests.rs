//! The bucket layouts: the resolution rule, and PromQL's estimate against
//! the exact percentile over known distributions.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The duration families and the range each resolves.
fn families() -> Vec<(&'static str, &'static [f64], f64, f64)> {
    vec![
        ("ttft", TTFT_BUCKETS, 0.001, 60.0),
        ("tpot", TPOT_BUCKETS, 0.001, 10.0),
        ("duration", DURATION_BUCKETS, 0.001, 300.0),
        ("itl", ITL_BUCKETS, 0.001, 10.0),
        ("overhead", OVERHEAD_BUCKETS, 0.001, 10.0),
        ("call", CALL_BUCKETS, 0.001, 300.0),
    ]
}

#[test]
fn inside_its_range_every_bucket_is_1ms_wide_or_5_percent() {
    for (name, b, lo, hi) in families() {
        assert!(b.windows(2).all(|w| w[0] < w[1]), "{name} increases");
        assert!(
            b.contains(&lo) && b.contains(&hi),
            "{name} has {lo} and {hi}"
        );
        for w in b.windows(2).filter(|w| w[0] >= lo && w[1] <= hi) {
            let (l, u) = (w[0], w[1]);
            assert!(
                u - l <= 0.001 + 1e-12 || u / l <= 1.05 + 1e-12,
                "{name}: ({l}, {u}]"
            );
        }
        // Readable `le` values: at most three significant digits (but for
        // OpenTelemetry's doubling ones, 10.24 s and such).
        let anchor = |v: f64| OTEL_DURATION.iter().any(|a| *a as f64 / 1e6 == v);
        for v in b.iter().filter(|v| **v >= lo && **v <= hi && !anchor(**v)) {
            let s = format!("{v}");
            let digits = s.trim_start_matches(['0', '.']).replace('.', "");
            assert!(
                digits.trim_end_matches('0').len() <= 3,
                "{name}: {s} has more than three significant digits"
            );
        }
    }
}

#[test]
fn open_telemetry_advised_boundaries_are_kept() {
    for v in OTEL_TTFT {
        assert!(TTFT_BUCKETS.contains(&(*v as f64 / 1e6)), "{v}");
    }
    for v in OTEL_TPOT {
        assert!(TPOT_BUCKETS.contains(&(*v as f64 / 1e6)), "{v}");
    }
    for v in OTEL_DURATION {
        assert!(DURATION_BUCKETS.contains(&(*v as f64 / 1e6)), "{v}");
    }
    for v in OTEL_MCP {
        assert!(CALL_BUCKETS.contains(&(*v as f64 / 1e6)), "{v}");
    }
    assert_eq!(TTFT_BUCKETS.last(), Some(&2560.0));
    assert_eq!(DURATION_BUCKETS.last(), Some(&10485.76));
}

/// Prometheus's `histogram_quantile` (promql/quantile.go `bucketQuantile`)
/// over cumulative bucket counts, `+Inf` last.
fn histogram_quantile(q: f64, bounds: &[f64], cumulative: &[u64]) -> f64 {
    let total = *cumulative.last().unwrap() as f64;
    let rank = q * total;
    let b = cumulative.iter().position(|c| *c as f64 >= rank).unwrap();
    if b == bounds.len() {
        // The +Inf bucket: the highest finite bound.
        return bounds[bounds.len() - 1];
    }
    let (start, below) = if b == 0 {
        (0.0, 0)
    } else {
        (bounds[b - 1], cumulative[b - 1])
    };
    let end = bounds[b];
    let in_bucket = (cumulative[b] - below) as f64;
    start + (end - start) * (rank - below as f64) / in_bucket
}

fn cumulative(bounds: &[f64], samples: &[f64]) -> Vec<u64> {
    let mut counts = vec![0u64; bounds.len() + 1];
    for s in samples {
        let i = bounds.iter().position(|b| s <= b).unwrap_or(bounds.len());
        counts[i] += 1;
    }
    let mut acc = 0;
    counts
        .iter()
        .map(|c| {
            acc += c;
            acc
        })
        .collect()
}

fn normal(rng: &mut StdRng) -> f64 {
    // Box–Muller.
    let (u1, u2): (f64, f64) = (rng.random_range(1e-12..1.0), rng.random());
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Known distributions, centred at `at` seconds.
fn distributions(at: f64, rng: &mut StdRng) -> Vec<(&'static str, Vec<f64>)> {
    let n = 20_000;
    let mut d = Vec::new();
    d.push(("point mass", vec![at; n]));
    d.push((
        "narrow normal (σ 0.5 %)",
        (0..n).map(|_| at * (1.0 + 0.005 * normal(rng))).collect(),
    ));
    d.push((
        "normal (σ 10 %)",
        (0..n)
            .map(|_| (at * (1.0 + 0.1 * normal(rng))).max(at * 0.5))
            .collect(),
    ));
    d.push((
        "log-normal (σ 0.5)",
        (0..n).map(|_| at * (0.5 * normal(rng)).exp()).collect(),
    ));
    d.push((
        "uniform ±30 %",
        (0..n).map(|_| at * rng.random_range(0.7..1.3)).collect(),
    ));
    d.push((
        "bimodal 1:3",
        (0..n)
            .map(|i| if i % 4 == 0 { at * 3.0 } else { at } * (1.0 + 0.01 * normal(rng)))
            .collect(),
    ));
    d
}

/// For every duration family, at centres across its range and for each
/// distribution: `histogram_quantile` at p50, p90 and p99 is within 5 %
/// or 1 ms of the exact percentile of the samples.
#[test]
fn histogram_quantile_is_within_5_percent_or_1ms_across_each_range() {
    let mut rng = StdRng::seed_from_u64(43);
    let mut worst = (0.0f64, String::new());
    for (name, bounds, lo, hi) in families() {
        let mut at = lo * 1.5;
        while at <= hi / 3.5 {
            for (dist, mut samples) in distributions(at, &mut rng) {
                samples.retain(|s| *s >= lo && *s <= hi);
                samples.sort_by(f64::total_cmp);
                let cum = cumulative(bounds, &samples);
                for q in [0.5, 0.9, 0.99] {
                    let k = ((q * samples.len() as f64).ceil() as usize).max(1) - 1;
                    let exact = samples[k];
                    let est = histogram_quantile(q, bounds, &cum);
                    let err = (est - exact).abs();
                    let allowed = (0.05 * exact).max(0.001);
                    let rel = err / allowed;
                    if rel > worst.0 {
                        worst = (rel, format!("{name} {dist} at {at:.4} s p{q}"));
                    }
                    assert!(
                        err <= allowed + 1e-9,
                        "{name}, {dist} at {at} s, p{}: estimate {est}, exact {exact}",
                        q * 100.0
                    );
                }
            }
            at *= 1.37;
        }
    }
    eprintln!(
        "largest error: {:.0} % of the allowance ({})",
        worst.0 * 100.0,
        worst.1
    );
}

#[test]
fn the_standard_resolution_stands_for_every_fine_layout() {
    for (name, fine, _) in LAYOUTS {
        let standard = at(fine, Resolution::Standard);
        assert!(
            standard.len() < 30 && standard.len() < fine.len() / 5,
            "{name}"
        );
        assert!(standard.windows(2).all(|w| w[0] < w[1]), "{name}");
        assert_eq!(at(fine, Resolution::Fine), *fine);
    }
    // Not a duration layout: the same at any resolution.
    let shares = crate::table::SHARE_BUCKETS;
    assert_eq!(at(shares, Resolution::Standard), shares);
}
