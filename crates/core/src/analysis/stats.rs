//! Small statistics the analyses share: percentiles with the methodology's
//! sample-count rules, means, Jain's fairness index, least squares with R².
//!
//! A percentile is *available* only when the sample count supports it: at
//! least 10 observations beyond it (n·(1−q) ≥ 10), so p50 needs 20 samples,
//! p90 100, p95 200, p99 1,000 and p99.9 10,000 — the rule the methodology
//! states for p99 and p99.9, applied to every quantile. Below that the value
//! is `None` and reports say "not available (n = …)", never a number.
//! Every summary carries its sample count.

use serde::{Deserialize, Serialize};

/// Observations needed beyond a quantile for it to be reported.
pub const TAIL_SAMPLES: f64 = 10.0;

/// Smallest sample count for which quantile `q` is reported.
pub fn min_samples(q: f64) -> usize {
    let tail = (1.0 - q).max(f64::EPSILON);
    // Rounded first: 10 / 0.01 is 1000.0000000000001 in floating point.
    let need = (TAIL_SAMPLES / tail * 1e6).round() / 1e6;
    need.ceil() as usize
}

/// Quantile `q` of `sorted` (ascending) by linear interpolation between
/// closest ranks (the "R-7" definition numpy and PromQL use), or `None`
/// when the sample count does not support it.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.len() < min_samples(q) || sorted.is_empty() {
        return None;
    }
    quantile_unchecked(sorted, q)
}

/// Quantile without the sample-count rule (for internal decisions such as
/// a request's median gap, never for reported percentiles).
pub fn quantile_unchecked(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let (a, b) = (*sorted.get(lo)?, *sorted.get(hi)?);
    Some(a + (b - a) * (h - lo as f64))
}

/// A distribution's summary: count, mean, extremes and the standard
/// percentiles, each `None` when not available.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
}

impl Summary {
    /// Summarises `values` (any order; NaNs are dropped).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Summary {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Summary::of_sorted(&v)
    }

    /// Summarises values already sorted ascending.
    pub fn of_sorted(v: &[f64]) -> Summary {
        Summary {
            n: v.len(),
            mean: mean(v.iter().copied()),
            min: v.first().copied(),
            max: v.last().copied(),
            p50: quantile(v, 0.5),
            p90: quantile(v, 0.9),
            p95: quantile(v, 0.95),
            p99: quantile(v, 0.99),
            p999: quantile(v, 0.999),
        }
    }

    /// The named percentile (`"p50"`, …, `"p999"`).
    pub fn get(&self, name: &str) -> Option<f64> {
        match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            "mean" => self.mean,
            "max" => self.max,
            "min" => self.min,
            _ => None,
        }
    }
}

/// The percentiles reports show, with the quantile each stands for.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
];

/// Arithmetic mean, `None` for no values.
pub fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for v in values {
        n += 1;
        sum += v;
    }
    (n > 0).then(|| sum / n as f64)
}

/// Jain's fairness index (Σx)² / (n·Σx²) of non-negative allocations: 1 when
/// all are equal, 1/n when one gets everything. `None` for fewer than two
/// values or all zero.
pub fn jain(values: &[f64]) -> Option<f64> {
    if values.len() < 2 || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return None;
    }
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    (sq > 0.0).then(|| sum * sum / (values.len() as f64 * sq))
}

/// A least-squares line y = intercept + slope·x.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination (1 − SS_res / SS_tot).
    pub r2: f64,
    pub n: usize,
}

/// Ordinary least squares over `(x, y)` points. `None` with fewer than three
/// points or when x does not vary.
pub fn fit_line(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= f64::EPSILON * nf {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_res: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - ss_res / syy } else { 1.0 };
    Some(Fit {
        slope,
        intercept,
        r2,
        n,
    })
}

/// A least-squares plane y = intercept + slope_x·x + slope_z·z.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlaneFit {
    pub intercept: f64,
    pub slope_x: f64,
    pub slope_z: f64,
    /// Coefficient of determination (1 − SS_res / SS_tot).
    pub r2: f64,
    pub n: usize,
}

/// Ordinary least squares over `(x, z, y)` points (the centred normal
/// equations, solved directly). `None` with fewer than four points, when x
/// or z does not vary, or when they move together (collinear: no telling
/// their effects apart).
pub fn fit_plane(points: &[(f64, f64, f64)]) -> Option<PlaneFit> {
    let n = points.len();
    if n < 4 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let mz = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.2).sum::<f64>() / nf;
    let (mut sxx, mut szz, mut sxz, mut sxy, mut szy, mut syy) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, z, y) in points {
        let (dx, dz, dy) = (x - mx, z - mz, y - my);
        sxx += dx * dx;
        szz += dz * dz;
        sxz += dx * dz;
        sxy += dx * dy;
        szy += dz * dy;
        syy += dy * dy;
    }
    let det = sxx * szz - sxz * sxz;
    if sxx <= f64::EPSILON * nf || szz <= f64::EPSILON * nf || det <= 1e-6 * sxx * szz {
        return None;
    }
    let slope_x = (sxy * szz - szy * sxz) / det;
    let slope_z = (szy * sxx - sxy * sxz) / det;
    let intercept = my - slope_x * mx - slope_z * mz;
    let ss_res: f64 = points
        .iter()
        .map(|&(x, z, y)| (y - intercept - slope_x * x - slope_z * z).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - ss_res / syy } else { 1.0 };
    Some(PlaneFit {
        intercept,
        slope_x,
        slope_z,
        r2,
        n,
    })
}

/// Pearson correlation of paired values; `None` with fewer than three pairs
/// or no variation.
pub fn correlation(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plane_fit_recovers_both_slopes_and_refuses_collinear_inputs() {
        // y = 10 + 20x + 2z, exactly, over x and z that vary apart.
        let pts: Vec<(f64, f64, f64)> = (0..12)
            .map(|i| {
                let (x, z) = (f64::from(i % 4), f64::from(i / 3) * 1.5);
                (x, z, 10.0 + 20.0 * x + 2.0 * z)
            })
            .collect();
        let f = fit_plane(&pts).unwrap();
        assert!((f.intercept - 10.0).abs() < 1e-9, "{f:?}");
        assert!((f.slope_x - 20.0).abs() < 1e-9 && (f.slope_z - 2.0).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        // z = 2x: the two effects cannot be told apart.
        let line: Vec<(f64, f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 2.0 * f64::from(i), 1.0))
            .collect();
        assert_eq!(fit_plane(&line), None);
        assert_eq!(fit_plane(&pts[..3]), None);
    }

    #[test]
    fn sample_count_rules() {
        assert_eq!(min_samples(0.5), 20);
        assert_eq!(min_samples(0.9), 100);
        assert_eq!(min_samples(0.99), 1000);
        assert_eq!(min_samples(0.999), 10_000);
        let v: Vec<f64> = (0..999).map(f64::from).collect();
        let s = Summary::of(v.clone());
        assert_eq!(s.n, 999);
        assert!(s.p95.is_some());
        assert_eq!(s.p99, None, "p99 needs 1,000 samples");
        let mut v2 = v;
        v2.push(999.0);
        let s = Summary::of(v2);
        assert!(s.p99.is_some());
        assert_eq!(s.p999, None);
        assert_eq!(Summary::of([1.0, 2.0]).p50, None);
        assert_eq!(Summary::of([1.0, 2.0]).mean, Some(1.5));
    }

    #[test]
    fn interpolated_quantiles() {
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(51.0));
        assert_eq!(quantile_unchecked(&[1.0, 2.0], 0.5), Some(1.5));
        assert_eq!(quantile_unchecked(&[], 0.5), None);
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[1.0, 1.0, 1.0, 1.0]), Some(1.0));
        let one = jain(&[1.0, 0.0, 0.0, 0.0]).unwrap();
        assert!((one - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[1.0]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn line_fit_recovers_slope() {
        let pts: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 2.0 + 0.5 * f64::from(i)))
            .collect();
        let f = fit_line(&pts).unwrap();
        assert!((f.slope - 0.5).abs() < 1e-12);
        assert!((f.intercept - 2.0).abs() < 1e-12);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        assert!(fit_line(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]).is_none());
        let c = correlation(&pts).unwrap();
        assert!((c - 1.0).abs() < 1e-12);
    }

    proptest::proptest! {
        #[test]
        fn quantiles_are_monotone_and_bounded(mut v in proptest::collection::vec(-1e6f64..1e6, 20..3000)) {
            v.sort_by(f64::total_cmp);
            let s = Summary::of_sorted(&v);
            let ps: Vec<f64> = [s.p50, s.p90, s.p95, s.p99, s.p999].into_iter().flatten().collect();
            for w in ps.windows(2) {
                proptest::prop_assert!(w[0] <= w[1]);
            }
            for p in ps {
                proptest::prop_assert!(p >= v[0] && p <= v[v.len() - 1]);
            }
        }
    }
}
