//! Load models: when requests start. Closed loop (C workers, each sending
//! its next request when the previous one ended), open loop (arrivals at a
//! rate: constant, Poisson, or bursty) and the closed-loop concurrency sweep.
//!
//! Owns: the arrival-gap draws, the sweep's schedule, and the request budget
//! (`--requests`, `--duration`). Pure apart from the budget's atomic counter:
//! times are arguments, so tests need no clock. Does not own: what is sent
//! (`workload`) or sending it (`request`).

use rand::rngs::StdRng;
use rand::Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How open-loop arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Poisson for every workload but `skewed`, which gets `bursty`.
    Auto,
    /// Exactly 1/rate apart.
    Constant,
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Bursts (geometric size, mean 4) arriving as a Poisson process at
    /// rate/4; the requests of a burst arrive together. Mean rate: `rate`.
    Bursty,
}

/// Mean requests per burst of `Arrivals::Bursty`.
pub const MEAN_BURST: f64 = 4.0;

/// The load model of a run, as reported in the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadModel {
    Closed {
        concurrency: usize,
    },
    Open {
        rate_per_second: f64,
        arrivals: Arrivals,
    },
    Sweep {
        concurrency_steps: Vec<usize>,
        step_seconds: f64,
    },
}

impl std::fmt::Display for LoadModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadModel::Closed { concurrency } => {
                write!(f, "closed loop, concurrency {concurrency}")
            }
            LoadModel::Open {
                rate_per_second,
                arrivals,
            } => write!(
                f,
                "open loop, {rate_per_second} req/s, {} arrivals",
                format!("{arrivals:?}").to_lowercase()
            ),
            LoadModel::Sweep {
                concurrency_steps,
                step_seconds,
            } => write!(
                f,
                "closed-loop sweep, concurrency {concurrency_steps:?}, {step_seconds} s each"
            ),
        }
    }
}

/// Uniform in (0, 1]: safe under `ln`.
fn unit(rng: &mut StdRng) -> f64 {
    1.0 - rng.random::<f64>()
}

/// Draws open-loop inter-arrival gaps.
#[derive(Debug, Clone)]
pub struct ArrivalClock {
    arrivals: Arrivals,
    rate_per_second: f64,
    /// Requests of the current burst still to arrive (with no gap).
    burst_left: u32,
}

impl ArrivalClock {
    /// `arrivals` must be resolved (not `Auto`, which is treated as Poisson).
    pub fn new(arrivals: Arrivals, rate_per_second: f64) -> Self {
        ArrivalClock {
            arrivals,
            rate_per_second: rate_per_second.max(f64::MIN_POSITIVE),
            burst_left: 0,
        }
    }

    /// Time from the previous arrival to the next.
    pub fn next_gap(&mut self, rng: &mut StdRng) -> Duration {
        let mean = 1.0 / self.rate_per_second;
        let secs = match self.arrivals {
            Arrivals::Constant => mean,
            Arrivals::Poisson | Arrivals::Auto => -unit(rng).ln() * mean,
            Arrivals::Bursty => {
                if self.burst_left > 0 {
                    self.burst_left -= 1;
                    0.0
                } else {
                    // Geometric burst size with mean MEAN_BURST (at least 1).
                    let p = 1.0 / MEAN_BURST;
                    let extra = (unit(rng).ln() / (1.0 - p).ln()).floor();
                    self.burst_left = extra.clamp(0.0, 1000.0) as u32;
                    -unit(rng).ln() * mean * MEAN_BURST
                }
            }
        };
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// The concurrency sweep: `levels[i]` workers active during step i.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steps {
    pub levels: Vec<usize>,
    pub step: Duration,
}

impl Steps {
    /// The step running `elapsed` after the start; `None` once all are over.
    pub fn index_at(&self, elapsed: Duration) -> Option<usize> {
        let step = self.step.as_secs_f64();
        if step <= 0.0 {
            return None;
        }
        let i = (elapsed.as_secs_f64() / step).floor() as usize;
        (i < self.levels.len()).then_some(i)
    }

    pub fn total(&self) -> Duration {
        self.step
            .saturating_mul(u32::try_from(self.levels.len()).unwrap_or(u32::MAX))
    }

    /// Highest level of the sweep (workers to start).
    pub fn max_level(&self) -> usize {
        self.levels.iter().copied().max().unwrap_or(0)
    }

    /// When worker `worker` (0-based) may next send, at or after `elapsed`:
    /// `elapsed` itself if it is active now, else the start of the next step
    /// that includes it, `None` if none does.
    pub fn next_active(&self, worker: usize, elapsed: Duration) -> Option<Duration> {
        let now = self.index_at(elapsed)?;
        (now..self.levels.len())
            .find(|i| self.levels.get(*i).is_some_and(|l| worker < *l))
            .map(|i| {
                if i == now {
                    elapsed
                } else {
                    self.step
                        .saturating_mul(u32::try_from(i).unwrap_or(u32::MAX))
                }
            })
    }
}

/// How many requests may still start, and until when.
#[derive(Debug)]
pub struct Budget {
    max_requests: Option<u64>,
    deadline: Option<Instant>,
    issued: AtomicU64,
}

impl Budget {
    pub fn new(max_requests: Option<u64>, deadline: Option<Instant>) -> Self {
        Budget {
            max_requests,
            deadline,
            issued: AtomicU64::new(0),
        }
    }

    /// The request number of the next request, if one may start at `now`.
    pub fn take(&self, now: Instant) -> Option<u64> {
        if self.expired(now) {
            return None;
        }
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        match self.max_requests {
            Some(max) if n >= max => None,
            _ => Some(n),
        }
    }

    /// The deadline has passed (requests scheduled at `at` would be too late).
    pub fn expired(&self, at: Instant) -> bool {
        self.deadline.is_some_and(|d| at >= d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn gaps(arrivals: Arrivals, n: usize) -> Vec<f64> {
        let mut clock = ArrivalClock::new(arrivals, 10.0);
        let mut rng = StdRng::seed_from_u64(5);
        (0..n)
            .map(|_| clock.next_gap(&mut rng).as_secs_f64())
            .collect()
    }

    fn mean_cv(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn arrivals_keep_the_rate_and_differ_in_shape() {
        let (m, cv) = mean_cv(&gaps(Arrivals::Constant, 100));
        assert!((m - 0.1).abs() < 1e-9 && cv < 1e-6);
        let (m, cv) = mean_cv(&gaps(Arrivals::Poisson, 20_000));
        assert!((m - 0.1).abs() < 0.005, "{m}");
        assert!((cv - 1.0).abs() < 0.05, "{cv}");
        let bursty = gaps(Arrivals::Bursty, 20_000);
        let (m, cv) = mean_cv(&bursty);
        assert!((m - 0.1).abs() < 0.01, "{m}");
        assert!(cv > 1.8, "bursty gaps vary more than Poisson: {cv}");
        let zeros = bursty.iter().filter(|g| **g == 0.0).count();
        assert!(
            zeros > 10_000,
            "most requests arrive inside a burst: {zeros}"
        );
    }

    #[test]
    fn sweep_schedule() {
        let s = Steps {
            levels: vec![1, 4, 2],
            step: Duration::from_secs(10),
        };
        let at = Duration::from_secs;
        assert_eq!(s.total(), at(30));
        assert_eq!(s.max_level(), 4);
        assert_eq!(
            [s.index_at(at(0)), s.index_at(at(15)), s.index_at(at(30))],
            [Some(0), Some(1), None]
        );
        assert_eq!(s.next_active(0, at(3)), Some(at(3)));
        assert_eq!(s.next_active(3, at(3)), Some(at(10)));
        assert_eq!(s.next_active(2, at(12)), Some(at(12)));
        assert_eq!(s.next_active(2, at(21)), None);
        assert_eq!(s.next_active(0, at(40)), None);
    }

    #[test]
    fn budget_counts_and_expires() {
        let t0 = Instant::now();
        let b = Budget::new(Some(2), Some(t0 + Duration::from_secs(5)));
        assert_eq!(b.take(t0), Some(0));
        assert_eq!(b.take(t0), Some(1));
        assert_eq!(b.take(t0), None);
        let b = Budget::new(None, Some(t0 + Duration::from_secs(5)));
        assert_eq!(b.take(t0), Some(0));
        assert_eq!(b.take(t0 + Duration::from_secs(5)), None);
        assert!(Budget::new(None, None)
            .take(t0 + Duration::from_secs(1 << 20))
            .is_some());
    }
}
