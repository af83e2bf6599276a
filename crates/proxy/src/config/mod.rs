//! Configuration: the YAML file (`file`) and the validated internal `Config`
//! the rest of tokentap uses.
//!
//! Owns: every check a config must pass before anything starts — listen and
//! upstream addresses parsed, upstream host names resolved, TLS CA files read
//! and parsed, timeouts and caps sane, tap names unique — each failure a
//! `ConfigError` naming the key. Does not own: binding ports (a port taken
//! is found at `run`, see `server`).

pub mod analysis;
pub mod file;
pub(crate) mod tap;

use file::FileConfig;
use std::collections::HashSet;
use tokentap_telemetry::otlp::OtlpConfig;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::correlate::CorrelationConfig;
use tokentap_core::decode::sse::SseLimits;
use tokentap_core::limits::{ClientLimits, Reject};
use tokentap_core::record::MeterLimits;
use tokentap_core::trace::TraceMode;

pub use tokentap_telemetry::config::{err, interpolate, ConfigError};

pub use tokentap_core::tap::Boundary;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub admin_listen: SocketAddr,
    /// The admin listener's connection cap and head deadline.
    pub admin_limits: tokentap_core::limits::ListenerLimits,
    pub max_models: usize,
    /// Distinct tool names with their own series (`metrics.max_tools`).
    pub max_tools: usize,
    /// Duration histograms' bounds (`metrics.buckets`).
    pub buckets: tokentap_core::table::Resolution,
    pub threads: usize,
    /// SIGTERM: /readyz 503 for this long before listeners stop accepting.
    pub drain_notice: Duration,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    /// Poll the config file for changes this often (`None`: SIGHUP only).
    pub watch_config: Option<Duration>,
    /// Joining the records of this process's taps (`None`: off).
    pub correlation: Option<CorrelationConfig>,
    /// OTLP export (`None`: off).
    pub otlp: Option<OtlpConfig>,
    /// Windowed analyses and `/report` (`None`: off).
    pub analysis: Option<analysis::AnalysisConfig>,
    pub taps: Vec<TapConfig>,
}

/// One validated tap.
#[derive(Debug, Clone)]
pub struct TapConfig {
    pub name: Arc<str>,
    pub boundary: Boundary,
    /// Guardrail taps: the hop name (label `hop`).
    pub hop: Option<Arc<str>>,
    /// `gen_ai.provider.name` (OTLP).
    pub provider: Option<Arc<str>>,
    pub trace: TraceMode,
    pub listen: SocketAddr,
    pub upstream: Upstream,
    pub h2c: bool,
    pub accept_encoding_identity: bool,
    pub timeouts: Timeouts,
    pub limits: MeterLimits,
    /// What the tap refuses or cuts on the client side.
    pub clients: ClientLimits,
    /// One JSONL line per request (`None`: off).
    pub record_log: Option<analysis::RecordLogConfig>,
    /// Access-log sampling rate (`None`: off).
    pub access_log: Option<f64>,
    /// `false`: pass-through only (no measurement, no record).
    pub measure: bool,
    /// Read every request in this dialect (`None`: by path).
    pub dialect: Option<tokentap_core::decode::dialect::Dialect>,
    /// Usage injection (`inject`).
    pub inject_usage: bool,
    /// The tokenizer for estimates (`None`: no estimates).
    pub estimator: Option<tokentap_core::decode::tokens::Estimator>,
}

/// Where a tap forwards to, resolved.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// As written in the config.
    pub url: String,
    pub host: String,
    pub port: u16,
    /// The address connected to (first result of resolving `host`).
    pub addr: SocketAddr,
    pub tls: Option<UpstreamTls>,
}

/// TLS toward an `https://` upstream.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    pub sni: String,
    pub verify: bool,
    /// DER certificates from `tls.ca_file` (else the system roots apply).
    pub ca_der: Option<Arc<Vec<Vec<u8>>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub idle: Duration,
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        Config::from_yaml(&text, base)
    }

    /// Parses and validates YAML; relative paths in it are taken from `base`.
    pub fn from_yaml(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let file: FileConfig = serde_yaml_ng::from_str(text).map_err(|e| {
            // serde_yaml_ng says "path: message at line L column C".
            let msg = e.to_string();
            match msg.split_once(": ") {
                Some((key, rest)) if !key.contains(' ') => err(key, rest),
                _ => err("", msg),
            }
        })?;
        validate(file, base)
    }
}

fn validate(f: FileConfig, base: &Path) -> Result<Config, ConfigError> {
    if f.taps.is_empty() {
        return Err(err("taps", "at least one tap is required"));
    }
    if f.metrics.max_models == 0 {
        return Err(err("metrics.max_models", "must be at least 1"));
    }
    if f.metrics.max_tools == 0 {
        return Err(err("metrics.max_tools", "must be at least 1"));
    }
    if f.server.threads == 0 {
        return Err(err("server.threads", "must be at least 1"));
    }
    let admin_listen = tokentap_telemetry::config::listen_addr("admin.listen", &f.admin.listen)?;
    let mut names = HashSet::new();
    let mut listens = HashSet::from([admin_listen]);
    let mut taps = Vec::with_capacity(f.taps.len());
    for (i, t) in f.taps.iter().enumerate() {
        let key = format!("taps[{i}]");
        let tap = tap::validate_tap(&key, t, base)?;
        if !names.insert(tap.name.clone()) {
            return Err(err(
                format!("{key}.name"),
                format!("duplicate tap name `{}`", tap.name),
            ));
        }
        if !listens.insert(tap.listen) {
            return Err(err(
                format!("{key}.listen"),
                format!("{} is already used by another listener", tap.listen),
            ));
        }
        taps.push(tap);
    }
    let correlation =
        tokentap_telemetry::config::sections::correlation(&f.correlation, taps.len())?;
    let otlp = tokentap_telemetry::config::sections::otlp(f.otlp.as_ref())?;
    let analysis = analysis::analysis(&f.analysis)?;
    Ok(Config {
        analysis,
        correlation,
        otlp,
        admin_listen,
        admin_limits: tokentap_telemetry::config::sections::admin_limits(&f.admin)?,
        max_models: f.metrics.max_models,
        max_tools: f.metrics.max_tools,
        buckets: match f.metrics.buckets {
            file::BucketsFile::Fine => tokentap_core::table::Resolution::Fine,
            file::BucketsFile::Standard => tokentap_core::table::Resolution::Standard,
        },
        threads: f.server.threads,
        drain_notice: secs_in(
            "server.drain_notice_seconds",
            f.server.drain_notice_seconds,
            0.0,
            300.0,
        )?,
        watch_config: match f.server.watch_config_seconds {
            0.0 => None,
            v => Some(secs_in("server.watch_config_seconds", v, 0.1, 3600.0)?),
        },
        grace_period: Duration::from_secs(f.server.grace_period_seconds),
        shutdown_timeout: Duration::from_secs(f.server.shutdown_timeout_seconds),
        taps,
    })
}

/// Seconds within `[min, max]`.
fn secs_in(key: &str, v: f64, min: f64, max: f64) -> Result<Duration, ConfigError> {
    if v.is_finite() && v >= min && v <= max {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(err(
            key,
            format!("{v} is not a number of seconds in [{min}, {max}]"),
        ))
    }
}

/// Tap and hop names become label values: short, plain.
fn label_name(key: &str, what: &str, s: &str) -> Result<Arc<str>, ConfigError> {
    let name = s.trim();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(err(
            key,
            format!("`{s}` is not a {what} name (1-64 characters: letters, digits, `-`, `_`, `.`)"),
        ));
    }
    Ok(Arc::from(name))
}

#[cfg(test)]
mod tests;
