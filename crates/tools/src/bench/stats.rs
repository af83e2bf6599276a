//! Distributions (HdrHistogram, nanoseconds, 3 significant digits), the
//! machine description and the CPU's idle share while a cell runs.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::time::Duration;
use tokentap_core::analysis::stats::quantile_unchecked;

/// Percentiles of one distribution, microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Dist {
    pub n: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Collects durations (negative differences clamp to 0, counted apart).
pub struct Hist {
    h: Histogram<u64>,
    pub negative: u64,
}

impl Default for Hist {
    // Constant, valid bounds (1 ns .. 10 min, 3 digits): cannot fail.
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Hist {
            h: Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds"),
            negative: 0,
        }
    }
}

impl Hist {
    pub fn add(&mut self, d: Duration) {
        let _ = self.h.record((d.as_nanos() as u64).max(1));
    }

    /// A signed difference in nanoseconds.
    pub fn add_signed_ns(&mut self, ns: i128) {
        if ns < 0 {
            self.negative += 1;
        }
        let _ = self.h.record((ns.max(1)) as u64);
    }

    pub fn merge(&mut self, other: &Hist) {
        let _ = self.h.add(&other.h);
        self.negative += other.negative;
    }

    pub fn dist(&self) -> Dist {
        let us = |q: f64| self.h.value_at_quantile(q) as f64 / 1e3;
        Dist {
            n: self.h.len(),
            p50: us(0.5),
            p90: us(0.9),
            p99: us(0.99),
            p999: us(0.999),
            max: self.h.max() as f64 / 1e3,
        }
    }
}

/// The median of a few round figures (rounds interleave systems, so the
/// median of round medians resists a noisy round). NaN when there are none.
pub fn median(v: Vec<f64>) -> f64 {
    quantile(v, 0.5)
}

/// Interquartile range of round figures (NaN below four rounds).
pub fn iqr(v: Vec<f64>) -> f64 {
    if v.iter().filter(|x| x.is_finite()).count() < 4 {
        return f64::NAN;
    }
    quantile(v.clone(), 0.75) - quantile(v, 0.25)
}

/// `analysis::stats::quantile_unchecked` over the finite values.
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    quantile_unchecked(&v, q).unwrap_or(f64::NAN)
}

/// What ran the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cpus: usize,
    pub kernel: String,
    pub clocksource: String,
    pub memory_gib: f64,
    pub pinned: bool,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Machine {
    pub fn here(pinned: bool) -> Self {
        let cpuinfo = read("/proc/cpuinfo");
        let mem_kib: f64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpu: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
                .unwrap_or_default(),
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            kernel: read("/proc/sys/kernel/osrelease"),
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            memory_gib: mem_kib / (1024.0 * 1024.0),
            pinned,
        }
    }
}

/// `/proc/stat` totals: (idle + iowait, all) jiffies.
fn cpu_jiffies() -> (u64, u64) {
    let stat = read("/proc/stat");
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (idle, v.iter().sum())
}

/// Measures the CPU's idle share between `start` and `share`.
pub struct Idle((u64, u64));

impl Idle {
    pub fn start() -> Self {
        Idle(cpu_jiffies())
    }

    /// Idle share of all CPUs since `start` (0–1).
    pub fn share(&self) -> f64 {
        let (i1, t1) = cpu_jiffies();
        let (i0, t0) = self.0;
        let dt = t1.saturating_sub(t0);
        if dt == 0 {
            return f64::NAN;
        }
        i1.saturating_sub(i0) as f64 / dt as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_round_figures() {
        let mut h = Hist::default();
        for us in 1..=1000u64 {
            h.add(Duration::from_micros(us));
        }
        let d = h.dist();
        assert_eq!(d.n, 1000);
        assert!((d.p50 - 500.0).abs() < 1.0, "{d:?}");
        assert!((d.p99 - 990.0).abs() < 2.0, "{d:?}");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(iqr(vec![1.0, 2.0, 3.0, 4.0, 5.0]), 2.0);
    }
}
