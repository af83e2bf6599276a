//! Test 3, the throughput–latency tradeoff, across windows: one point per
//! window (concurrency, output tokens/s, TTFT and TPOT percentiles, SLO
//! attainment, stall rate, tokens in flight), the curve they draw, and its
//! knee: the lowest concurrency at which TPOT exceeds twice its minimum over
//! the curve. The knee uses p99 TPOT when at least two windows have enough
//! requests for it, else p90, else p50, and says which it used.
//!
//! Capacity across windows (test 5): the windows sorted by concurrency, the
//! capacity is the concurrency of the busiest window before the first whose
//! SLO attainment fell below the target. Load is a property of a period,
//! so this is the primary capacity figure; the per-request table by
//! in-flight level at arrival (`load::capacity`) is its detail, and the
//! fallback with a single window.
//!
//! Also the memory-pressure signature across windows: the correlation of the
//! stall rate with the tokens held in flight.

use super::load::Concurrency;
use super::stats::{correlation, Summary};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub start_unix_ms: f64,
    pub seconds: f64,
    pub requests: usize,
    pub concurrency: Concurrency,
    pub output_tokens_per_s: f64,
    pub ttft_ms: Summary,
    pub tpot_ms: Summary,
    pub attainment: Option<f64>,
    pub stalls_per_1k_gaps: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Knee {
    /// Time-weighted mean concurrency of the knee window.
    pub concurrency: f64,
    /// The TPOT percentile used (`p99`, `p90` or `p50`).
    pub quantile: &'static str,
    pub min_tpot_ms: f64,
    pub tpot_ms: f64,
}

/// Capacity from windows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WindowCapacity {
    /// Time-weighted mean concurrency of the capacity window.
    pub concurrency: f64,
    pub attainment: f64,
    /// Windows with an attainment figure.
    pub windows: usize,
    /// Attainment fell below target at a higher concurrency (else the
    /// figure is a lower bound: the SLOs held everywhere observed).
    pub bounded: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Curve {
    /// Windows with requests, in time order.
    pub points: Vec<Point>,
    pub knee: Option<Knee>,
    /// Why there is no knee.
    pub knee_note: Option<String>,
    /// Pearson correlation, across windows, of stalls per 1k gaps with
    /// tokens in flight (memory pressure shows as a positive one).
    pub stall_vs_tokens_in_flight: Option<f64>,
    /// Capacity across windows (when SLOs are configured).
    pub capacity: Option<WindowCapacity>,
    pub capacity_note: Option<String>,
}

/// The curve of `points`; `target` is the SLO attainment capacity needs.
pub fn curve(mut points: Vec<Point>, target: f64) -> Curve {
    points.retain(|p| p.requests > 0);
    points.sort_by(|a, b| a.start_unix_ms.total_cmp(&b.start_unix_ms));
    let pressure: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.concurrency.tokens_in_flight, p.stalls_per_1k_gaps?)))
        .collect();
    let (knee, knee_note) = match knee(&points) {
        Ok(k) => (Some(k), None),
        Err(why) => (None, Some(why)),
    };
    let (capacity, capacity_note) = match capacity(&points, target) {
        Ok(c) => (Some(c), None),
        Err(why) => (None, Some(why)),
    };
    Curve {
        stall_vs_tokens_in_flight: correlation(&pressure),
        points,
        knee,
        knee_note,
        capacity,
        capacity_note,
    }
}

fn capacity(points: &[Point], target: f64) -> Result<WindowCapacity, String> {
    let mut judged: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.concurrency.mean, p.attainment?)))
        .collect();
    if judged.is_empty() {
        return Err("no window with SLO attainment (no SLOs configured)".into());
    }
    judged.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best: Option<(f64, f64)> = None;
    let mut bounded = false;
    for (conc, att) in &judged {
        if *att >= target {
            best = Some((*conc, *att));
        } else {
            bounded = true;
            break;
        }
    }
    let windows = judged.len();
    best.map(|(concurrency, attainment)| WindowCapacity {
        concurrency,
        attainment,
        windows,
        bounded,
    })
    .ok_or_else(|| format!("SLO attainment below {target} even in the least loaded window"))
}

fn knee(points: &[Point]) -> Result<Knee, String> {
    let quantile = ["p99", "p90", "p50"]
        .into_iter()
        .find(|q| points.iter().filter(|p| p.tpot_ms.get(q).is_some()).count() >= 2)
        .ok_or("fewer than two windows with enough TPOT samples for a percentile")?;
    let mut by_conc: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.concurrency.mean, p.tpot_ms.get(quantile)?)))
        .collect();
    by_conc.sort_by(|a, b| a.0.total_cmp(&b.0));
    let min = by_conc.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    by_conc
        .iter()
        .find(|p| p.1 > 2.0 * min)
        .map(|p| Knee {
            concurrency: p.0,
            quantile,
            min_tpot_ms: min,
            tpot_ms: p.1,
        })
        .ok_or_else(|| {
            let top = by_conc.last().map_or(0.0, |p| p.0);
            format!("{quantile} TPOT stayed within 2x its minimum up to concurrency {top:.1}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: f64, conc: f64, tpot: f64, n: usize) -> Point {
        Point {
            start_unix_ms: t,
            seconds: 60.0,
            requests: n,
            concurrency: Concurrency {
                mean: conc,
                max: 0,
                tokens_in_flight: conc * 100.0,
            },
            output_tokens_per_s: 0.0,
            ttft_ms: Summary::default(),
            tpot_ms: Summary::of(std::iter::repeat_n(tpot, n)),
            attainment: None,
            stalls_per_1k_gaps: Some(conc),
        }
    }

    #[test]
    fn knee_is_the_first_concurrency_beyond_twice_the_minimum() {
        let c = curve(
            vec![
                point(3.0, 4.0, 25.0, 150),
                point(1.0, 1.0, 10.0, 150),
                point(2.0, 2.0, 12.0, 150),
                point(4.0, 8.0, 40.0, 150),
                point(5.0, 9.0, 0.0, 0),
            ],
            0.9,
        );
        assert_eq!(c.points.len(), 4);
        let k = c.knee.unwrap();
        assert_eq!(k.quantile, "p90");
        assert_eq!(k.concurrency, 4.0);
        assert_eq!(k.min_tpot_ms, 10.0);
        assert!((c.stall_vs_tokens_in_flight.unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn capacity_is_the_busiest_window_before_attainment_drops() {
        let mut pts = vec![
            point(1.0, 2.0, 10.0, 30),
            point(2.0, 4.0, 10.0, 30),
            point(3.0, 5.0, 10.0, 30),
            point(4.0, 6.0, 10.0, 30),
        ];
        for (p, a) in pts.iter_mut().zip([1.0, 0.95, 0.7, 0.5]) {
            p.attainment = Some(a);
        }
        let c = curve(pts.clone(), 0.9).capacity.unwrap();
        assert_eq!((c.concurrency, c.windows, c.bounded), (4.0, 4, true));
        pts.iter_mut().for_each(|p| p.attainment = Some(1.0));
        let c = curve(pts, 0.9).capacity.unwrap();
        assert_eq!((c.concurrency, c.bounded), (6.0, false));
    }

    #[test]
    fn no_knee_says_why() {
        let c = curve(
            vec![point(1.0, 1.0, 10.0, 30), point(2.0, 2.0, 11.0, 30)],
            0.9,
        );
        assert!(c.knee.is_none());
        assert!(c.knee_note.unwrap().contains("p50 TPOT stayed within 2x"));
        let c = curve(vec![point(1.0, 1.0, 10.0, 3)], 0.9);
        assert!(c.knee_note.unwrap().contains("fewer than two windows"));
    }
}
