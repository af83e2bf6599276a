//! The `analysis:` section and each tap's `record_log:`, as written and as
//! validated. Analyses are on unless `analysis.enabled: false`; the record
//! log is off unless a tap names a path.

use super::{err, ConfigError};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokentap_core::analysis::{AnalysisSettings, Slo, StallRule, TenantSource};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalysisFile {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "sixty")]
    pub window_seconds: f64,
    #[serde(default)]
    pub slo: SloFile,
    #[serde(default = "point_nine")]
    pub capacity_target: f64,
    #[serde(default = "ten")]
    pub capacity_min_requests: usize,
    #[serde(default)]
    pub stall: StallFile,
    /// `{header: NAME}` or `{api_key: true}` (default).
    #[serde(default)]
    pub tenant: TenantFile,
    #[serde(default = "ten")]
    pub top_tenants: usize,
    /// Tenants with their own series in the mergeable tenant counters (the
    /// first this many distinct ones of the process; then `other`).
    #[serde(default = "twenty")]
    pub max_tenants: usize,
    #[serde(default = "three")]
    pub fairness_min_requests: usize,
    #[serde(default = "sixty_usize")]
    pub history_windows: usize,
    #[serde(default = "twenty_thousand")]
    pub max_window_samples: usize,
    /// Prefix cache: a hit has at least this share of its prompt cached.
    #[serde(default = "half")]
    pub cache_hit_share: f64,
    /// Engine metrics endpoints to scrape (KV-cache usage, preemptions).
    #[serde(default)]
    pub engines: Vec<EngineFile>,
}

fn half() -> f64 {
    tokentap_core::analysis::cache::DEFAULT_HIT_SHARE
}

impl Default for AnalysisFile {
    fn default() -> Self {
        AnalysisFile {
            enabled: true,
            window_seconds: sixty(),
            slo: SloFile::default(),
            capacity_target: point_nine(),
            capacity_min_requests: ten(),
            stall: StallFile::default(),
            tenant: TenantFile::default(),
            top_tenants: ten(),
            max_tenants: twenty(),
            fairness_min_requests: three(),
            history_windows: sixty_usize(),
            max_window_samples: twenty_thousand(),
            cache_hit_share: half(),
            engines: Vec::new(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloFile {
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    #[serde(default)]
    pub e2e_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallFile {
    #[serde(default = "five")]
    pub multiple: f64,
    #[serde(default = "ten_f")]
    pub floor_ms: f64,
    #[serde(default = "thousand")]
    pub absolute_ms: f64,
    #[serde(default = "four")]
    pub min_gaps: usize,
}

impl Default for StallFile {
    fn default() -> Self {
        StallFile {
            multiple: five(),
            floor_ms: ten_f(),
            absolute_ms: thousand(),
            min_gaps: four(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFile {
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub api_key: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineFile {
    pub name: String,
    /// The engine's Prometheus endpoint, `http://host:port/metrics`.
    pub url: String,
    #[serde(default = "five")]
    pub interval_seconds: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordLogFile {
    pub path: PathBuf,
    /// Rotate when the file exceeds this size.
    #[serde(default = "hundred_mib")]
    pub max_bytes: u64,
    /// Rotated files kept (`path.1` … `path.N`).
    #[serde(default = "three")]
    pub keep: usize,
}

fn yes() -> bool {
    true
}
fn sixty() -> f64 {
    60.0
}
fn sixty_usize() -> usize {
    60
}
fn point_nine() -> f64 {
    0.9
}
fn three() -> usize {
    3
}
fn four() -> usize {
    4
}
fn twenty() -> usize {
    20
}
fn ten() -> usize {
    10
}
fn five() -> f64 {
    5.0
}
fn ten_f() -> f64 {
    10.0
}
fn thousand() -> f64 {
    1000.0
}
fn twenty_thousand() -> usize {
    20_000
}
fn hundred_mib() -> u64 {
    100 << 20
}

/// One engine endpoint to scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    pub name: String,
    pub url: String,
    pub host: String,
    pub port: u16,
    /// `host:port` resolved when the config loaded.
    pub addr: std::net::SocketAddr,
    pub path: String,
    pub interval: Duration,
}

/// Validated analyses.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisConfig {
    pub settings: AnalysisSettings,
    pub engines: Vec<EngineConfig>,
    /// Distinct tenants with their own series in the tenant counters.
    pub max_tenants: usize,
}

/// A validated record log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLogConfig {
    pub path: PathBuf,
    pub max_bytes: u64,
    pub keep: usize,
}

fn positive_ms(key: &str, v: Option<f64>) -> Result<Option<f64>, ConfigError> {
    match v {
        Some(ms) if !(ms.is_finite() && ms > 0.0) => Err(err(
            key,
            format!("{ms} is not a positive number of milliseconds"),
        )),
        v => Ok(v),
    }
}

pub fn analysis(a: &AnalysisFile) -> Result<Option<AnalysisConfig>, ConfigError> {
    if !(a.window_seconds.is_finite() && a.window_seconds >= 0.1 && a.window_seconds <= 86_400.0) {
        return Err(err(
            "analysis.window_seconds",
            format!("{} is not in [0.1, 86400]", a.window_seconds),
        ));
    }
    if !(a.capacity_target > 0.0 && a.capacity_target <= 1.0) {
        return Err(err("analysis.capacity_target", "must be in (0, 1]"));
    }
    let s = &a.stall;
    if !(s.multiple.is_finite() && s.multiple > 1.0) {
        return Err(err("analysis.stall.multiple", "must be above 1"));
    }
    positive_ms("analysis.stall.floor_ms", Some(s.floor_ms))?;
    positive_ms("analysis.stall.absolute_ms", Some(s.absolute_ms))?;
    let tenant = match (&a.tenant.header, a.tenant.api_key) {
        (Some(_), Some(true)) => {
            return Err(err(
                "analysis.tenant",
                "set either `header` or `api_key`, not both",
            ))
        }
        (Some(h), _) if http::HeaderName::from_bytes(h.as_bytes()).is_err() => {
            return Err(err(
                "analysis.tenant.header",
                format!("`{h}` is not a header name"),
            ))
        }
        (Some(h), _) => TenantSource::Header(h.to_ascii_lowercase()),
        (None, _) => TenantSource::ApiKey,
    };
    if a.history_windows == 0 || a.history_windows > 10_000 {
        return Err(err("analysis.history_windows", "must be in 1..=10000"));
    }
    if a.max_window_samples == 0 || a.max_window_samples > 10_000_000 {
        return Err(err(
            "analysis.max_window_samples",
            "must be in 1..=10000000",
        ));
    }
    if !(a.cache_hit_share > 0.0 && a.cache_hit_share <= 1.0) {
        return Err(err("analysis.cache_hit_share", "must be in (0, 1]"));
    }
    if a.top_tenants == 0 || a.top_tenants > 1_000 {
        return Err(err("analysis.top_tenants", "must be in 1..=1000"));
    }
    if a.max_tenants == 0 || a.max_tenants > 1_000 {
        return Err(err("analysis.max_tenants", "must be in 1..=1000"));
    }
    let mut engines = Vec::new();
    for (i, e) in a.engines.iter().enumerate() {
        engines.push(engine(&format!("analysis.engines[{i}]"), e)?);
    }
    let settings = AnalysisSettings {
        window: Duration::from_secs_f64(a.window_seconds),
        slo: Slo {
            ttft_ms: positive_ms("analysis.slo.ttft_ms", a.slo.ttft_ms)?,
            tpot_ms: positive_ms("analysis.slo.tpot_ms", a.slo.tpot_ms)?,
            e2e_ms: positive_ms("analysis.slo.e2e_ms", a.slo.e2e_ms)?,
        },
        capacity_target: a.capacity_target,
        capacity_min_requests: a.capacity_min_requests.max(1),
        stall: StallRule {
            multiple: s.multiple,
            floor_ms: s.floor_ms,
            absolute_ms: s.absolute_ms,
            min_gaps: s.min_gaps,
        },
        tenant,
        top_tenants: a.top_tenants,
        fairness_min_requests: a.fairness_min_requests.max(1),
        history_windows: a.history_windows,
        max_window_samples: a.max_window_samples,
        cache_hit_share: a.cache_hit_share,
    };
    Ok(a.enabled.then_some(AnalysisConfig {
        settings,
        engines,
        max_tenants: a.max_tenants,
    }))
}

fn engine(key: &str, e: &EngineFile) -> Result<EngineConfig, ConfigError> {
    let uri: http::Uri = e
        .url
        .parse()
        .map_err(|_| err(format!("{key}.url"), format!("`{}` is not a URL", e.url)))?;
    if uri.scheme_str() != Some("http") {
        return Err(err(
            format!("{key}.url"),
            "only http:// endpoints are scraped (put the engine's metrics port on a private network)",
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| err(format!("{key}.url"), "no host"))?
        .to_owned();
    if !(e.interval_seconds.is_finite()
        && e.interval_seconds >= 0.1
        && e.interval_seconds <= 3600.0)
    {
        return Err(err(
            format!("{key}.interval_seconds"),
            "must be in [0.1, 3600]",
        ));
    }
    if e.name.is_empty() || e.name.len() > 64 {
        return Err(err(format!("{key}.name"), "must be 1 to 64 characters"));
    }
    let port = uri.port_u16().unwrap_or(80);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| err(format!("{key}.url"), format!("cannot resolve `{host}`")))?;
    Ok(EngineConfig {
        name: e.name.clone(),
        url: e.url.clone(),
        host,
        port,
        addr,
        path: uri
            .path_and_query()
            .map_or("/metrics".to_owned(), |p| p.as_str().to_owned()),
        interval: Duration::from_secs_f64(e.interval_seconds),
    })
}

pub fn record_log(
    key: &str,
    r: Option<&RecordLogFile>,
    base: &Path,
) -> Result<Option<RecordLogConfig>, ConfigError> {
    let Some(r) = r else { return Ok(None) };
    if r.max_bytes < 4096 {
        return Err(err(
            format!("{key}.record_log.max_bytes"),
            "must be at least 4096",
        ));
    }
    if r.keep > 100 {
        return Err(err(format!("{key}.record_log.keep"), "must be at most 100"));
    }
    let path = if r.path.is_absolute() {
        r.path.clone()
    } else {
        base.join(&r.path)
    };
    Ok(Some(RecordLogConfig {
        path,
        max_bytes: r.max_bytes,
        keep: r.keep,
    }))
}
