//! The analyses' settings (validated; the config file's `analysis:` section
//! and `tokentap report`'s flags both end up here).

use serde::Serialize;
use std::time::Duration;

/// Service-level objectives a request must meet to count toward goodput.
/// An unset objective is not checked; with none set, goodput, attainment
/// and capacity are not available.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some() || self.e2e_ms.is_some()
    }
}

/// When an inter-token gap is a stall.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StallRule {
    /// A gap beyond this multiple of its request's median gap…
    pub multiple: f64,
    /// …and at least this long (so sub-millisecond medians do not turn
    /// jitter into stalls)…
    pub floor_ms: f64,
    /// …or beyond this, whatever the median.
    pub absolute_ms: f64,
    /// The relative rule needs this many gaps in the request.
    pub min_gaps: usize,
}

impl Default for StallRule {
    fn default() -> Self {
        StallRule {
            multiple: 5.0,
            floor_ms: 10.0,
            absolute_ms: 1_000.0,
            min_gaps: 4,
        }
    }
}

/// Where a request's tenant comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantSource {
    /// A hash of the API key (`Authorization: Bearer`, `x-api-key`,
    /// `api-key`); the key itself is never kept.
    ApiKey,
    /// The value of this request header (capped, printable ASCII).
    Header(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisSettings {
    #[serde(rename = "window_seconds", serialize_with = "seconds")]
    pub window: Duration,
    pub slo: Slo,
    /// Capacity: the highest in-flight level whose SLO attainment stayed at
    /// or above this.
    pub capacity_target: f64,
    /// A level counts toward capacity only with this many requests.
    pub capacity_min_requests: usize,
    pub stall: StallRule,
    pub tenant: TenantSource,
    /// Tenants shown by name; the rest are `other`.
    pub top_tenants: usize,
    /// A tenant enters the fairness index with this many requests.
    pub fairness_min_requests: usize,
    /// Closed windows kept for the throughput–latency curve and capacity.
    pub history_windows: usize,
    /// Samples kept per open window (beyond: counted, not analysed).
    pub max_window_samples: usize,
    /// Prefix cache: a request is a hit with at least this share of its
    /// input tokens cached (0 < share ≤ 1).
    pub cache_hit_share: f64,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for AnalysisSettings {
    fn default() -> Self {
        AnalysisSettings {
            window: Duration::from_secs(60),
            slo: Slo::default(),
            capacity_target: 0.9,
            capacity_min_requests: 10,
            stall: StallRule::default(),
            tenant: TenantSource::ApiKey,
            top_tenants: 10,
            fairness_min_requests: 3,
            history_windows: 60,
            max_window_samples: 100_000,
            cache_hit_share: super::cache::DEFAULT_HIT_SHARE,
        }
    }
}
