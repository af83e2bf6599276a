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

use crate::otlp::OtlpConfig;
use file::{BoundaryFile, CorrelationFile, FileConfig, OtlpFile, TapFile, TraceModeFile};
use std::collections::HashSet;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::correlate::CorrelationConfig;
use tokentap_core::decode::sse::SseLimits;
use tokentap_core::limits::{ClientLimits, Reject};
use tokentap_core::record::MeterLimits;
use tokentap_core::trace::TraceMode;

/// A config problem, with the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Path of the key (`taps[0].upstream`), or empty for the file itself.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

pub use tokentap_core::tap::Boundary;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub admin_listen: SocketAddr,
    pub max_models: usize,
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
    if f.server.threads == 0 {
        return Err(err("server.threads", "must be at least 1"));
    }
    let admin_listen = listen_addr("admin.listen", &f.admin.listen)?;
    let mut names = HashSet::new();
    let mut listens = HashSet::from([admin_listen]);
    let mut taps = Vec::with_capacity(f.taps.len());
    for (i, t) in f.taps.iter().enumerate() {
        let key = format!("taps[{i}]");
        let tap = validate_tap(&key, t, base)?;
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
    let correlation = correlation(&f.correlation, taps.len())?;
    let otlp = otlp(f.otlp.as_ref())?;
    let analysis = analysis::analysis(&f.analysis)?;
    Ok(Config {
        analysis,
        correlation,
        otlp,
        admin_listen,
        max_models: f.metrics.max_models,
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

fn correlation(c: &CorrelationFile, taps: usize) -> Result<Option<CorrelationConfig>, ConfigError> {
    // Values are checked even when off: a typo should not wait for the day
    // correlation is switched on.
    let secs = |k: &str, v: f64, max: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("correlation.{k}"),
                format!("{v} is not a number of seconds in (0, {max}]"),
            ))
        }
    };
    if !(c.buffered_share > 0.0 && c.buffered_share <= 1.0) {
        return Err(err(
            "correlation.buffered_share",
            format!("{} is not in (0, 1]", c.buffered_share),
        ));
    }
    if c.max_traces == 0 || c.max_traces > 10_000_000 {
        return Err(err("correlation.max_traces", "must be in 1..=10000000"));
    }
    if c.max_events > 65_536 {
        return Err(err("correlation.max_events", "must be at most 65536"));
    }
    let cfg = CorrelationConfig {
        settle: secs("settle_seconds", c.settle_seconds, 600.0)?,
        max_age: secs("max_age_seconds", c.max_age_seconds, 86_400.0)?,
        max_groups: c.max_traces,
        fingerprint_window: secs(
            "fingerprint_window_seconds",
            c.fingerprint_window_seconds,
            3600.0,
        )?,
        max_events: c.max_events,
        buffered_share: c.buffered_share,
    };
    Ok(c.enabled.unwrap_or(taps >= 2).then_some(cfg))
}

fn otlp(o: Option<&OtlpFile>) -> Result<Option<OtlpConfig>, ConfigError> {
    let env_timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT").is_ok();
    let mut cfg = OtlpConfig {
        timeout: (!env_timeout).then_some(Duration::from_secs(3)),
        ..OtlpConfig::default()
    };
    let Some(o) = o else {
        return Ok(if OtlpConfig::env_enabled() {
            cfg.with_env_switches()
        } else {
            None
        });
    };
    let secs = |k: &str, v: f64, max: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("otlp.{k}"),
                format!("{v} is not a number of seconds in (0, {max}]"),
            ))
        }
    };
    if let Some(e) = &o.endpoint {
        let uri: http::Uri = e
            .parse()
            .map_err(|x| err("otlp.endpoint", format!("`{e}` is not a URL: {x}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(err(
                "otlp.endpoint",
                format!("`{e}`: expected http(s)://host:port"),
            ));
        }
        cfg.endpoint = Some(e.clone());
    }
    for (k, v) in &o.headers {
        let value = interpolate(v).map_err(|m| err(format!("otlp.headers.{k}"), m))?;
        if http::HeaderName::from_bytes(k.as_bytes()).is_err()
            || http::HeaderValue::from_str(&value).is_err()
        {
            return Err(err(format!("otlp.headers.{k}"), "not a valid HTTP header"));
        }
        cfg.headers.insert(k.clone(), value);
    }
    cfg.traces = o.traces;
    cfg.metrics = o.metrics;
    if let Some(i) = o.interval_seconds {
        cfg.interval = Some(secs("interval_seconds", i, 3600.0)?);
    }
    if let Some(t) = o.timeout_seconds {
        cfg.timeout = Some(secs("timeout_seconds", t, 600.0)?);
    }
    if o.queue_spans == 0 || o.queue_spans > 1_000_000 {
        return Err(err("otlp.queue_spans", "must be in 1..=1000000"));
    }
    if o.batch_spans == 0 || o.batch_spans > o.queue_spans {
        return Err(err("otlp.batch_spans", "must be in 1..=queue_spans"));
    }
    cfg.queue_spans = o.queue_spans;
    cfg.batch_spans = o.batch_spans;
    cfg.shutdown = secs("shutdown_seconds", o.shutdown_seconds, 600.0)?;
    cfg.service_name = o.service_name.clone();
    cfg.span_events = o.span_events;
    if o.max_span_events > 65_536 {
        return Err(err("otlp.max_span_events", "must be at most 65536"));
    }
    cfg.max_span_events = o.max_span_events;
    Ok(cfg.with_env_switches())
}

/// Replaces `${VAR}` with the environment's value (secrets stay out of
/// config files); an unset variable is an error.
fn interpolate(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(rest.get(..start).unwrap_or_default());
        let after = rest.get(start + 2..).unwrap_or_default();
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed `${{` in `{s}`"))?;
        let name = after.get(..end).unwrap_or_default();
        let value =
            std::env::var(name).map_err(|_| format!("environment variable `{name}` is not set"))?;
        out.push_str(&value);
        rest = after.get(end + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
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

fn validate_tap(key: &str, t: &TapFile, base: &Path) -> Result<TapConfig, ConfigError> {
    let name = label_name(&format!("{key}.name"), "tap", &t.name)?;
    let boundary = match t.boundary {
        BoundaryFile::Engine => Boundary::Engine,
        BoundaryFile::Gateway => Boundary::Gateway,
        BoundaryFile::Compound => Boundary::Compound,
        BoundaryFile::Guardrail => Boundary::Guardrail,
    };
    let hop = match (boundary, &t.hop) {
        (Boundary::Guardrail, Some(h)) => Some(label_name(&format!("{key}.hop"), "hop", h)?),
        (Boundary::Guardrail, None) => Some(name.clone()),
        (_, Some(_)) => {
            return Err(err(
                format!("{key}.hop"),
                "only taps with boundary `guardrail` have a hop",
            ))
        }
        (_, None) => None,
    };
    let provider = t
        .provider
        .as_deref()
        .map(|p| label_name(&format!("{key}.provider"), "provider", p))
        .transpose()?;
    let trace = match (t.trace, boundary) {
        (Some(TraceModeFile::Propagate), _) => TraceMode::Propagate,
        (Some(TraceModeFile::Create), _) => TraceMode::Create,
        (Some(TraceModeFile::Off), _) => TraceMode::Off,
        (None, Boundary::Compound | Boundary::Gateway) => TraceMode::Create,
        (None, _) => TraceMode::Propagate,
    };
    let listen = listen_addr(&format!("{key}.listen"), &t.listen)?;
    let upstream = upstream(key, t, base)?;
    let secs = |k: &str, v: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= 86_400.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("{key}.timeouts.{k}"),
                format!("{v} is not a number of seconds in (0, 86400]"),
            ))
        }
    };
    let timeouts = Timeouts {
        connect: secs("connect_seconds", t.timeouts.connect_seconds)?,
        first_byte: secs("first_byte_seconds", t.timeouts.first_byte_seconds)?,
        idle: secs("idle_seconds", t.timeouts.idle_seconds)?,
    };
    let cap = |k: &str, v: usize| -> Result<usize, ConfigError> {
        if (1024..=(1 << 30)).contains(&v) {
            Ok(v)
        } else {
            Err(err(
                format!("{key}.limits.{k}"),
                format!("{v} is outside 1024..=1073741824 bytes"),
            ))
        }
    };
    let limits = MeterLimits {
        request_body_bytes: cap("request_copy_bytes", t.limits.request_copy_bytes)?,
        json_body_bytes: cap("json_body_bytes", t.limits.json_body_bytes)?,
        sse: SseLimits {
            max_line_bytes: cap("sse_line_bytes", t.limits.sse_line_bytes)?,
            max_event_bytes: cap("sse_event_bytes", t.limits.sse_event_bytes)?,
        },
    };
    let count = |k: &str, v: usize, max: usize| -> Result<usize, ConfigError> {
        if (1..=max).contains(&v) {
            Ok(v)
        } else {
            Err(err(
                format!("{key}.limits.{k}"),
                format!("{v} is outside 1..={max}"),
            ))
        }
    };
    let clients = ClientLimits {
        header_timeout: secs("request_header_seconds", t.timeouts.request_header_seconds)?,
        keepalive: secs("keepalive_seconds", t.timeouts.keepalive_seconds)?,
        write_timeout: secs("client_write_seconds", t.timeouts.client_write_seconds)?,
        // pingora itself stops at 1 MiB and 256 headers (400).
        max_header_bytes: count("max_header_bytes", t.limits.max_header_bytes, 1 << 20)?,
        max_headers: count("max_headers", t.limits.max_headers, 256)?,
        max_uri_bytes: count("max_uri_bytes", t.limits.max_uri_bytes, 1 << 20)?,
        max_connections: count("max_connections", t.limits.max_connections, 1 << 24)?,
        max_streams: match t.limits.max_streams {
            None => None,
            Some(n) => Some(count("max_streams", n, 1 << 24)?),
        },
        h2_max_streams: count("h2_max_streams", t.limits.h2_max_streams as usize, 1 << 16)? as u32,
        reject: match t.limits.reject {
            file::RejectFile::Respond => Reject::Respond,
            file::RejectFile::Close => Reject::Close,
        },
    };
    Ok(TapConfig {
        name,
        boundary,
        hop,
        provider,
        trace,
        listen,
        upstream,
        h2c: t.h2c,
        accept_encoding_identity: t.accept_encoding_identity,
        timeouts,
        limits,
        clients,
        record_log: analysis::record_log(key, t.record_log.as_ref(), base)?,
        measure: t.measure,
        dialect: t.dialect,
        inject_usage: t.inject_usage,
        estimator: t
            .estimate_tokens
            .map(tokentap_core::decode::tokens::Estimator::new),
        access_log: match &t.access_log {
            None => None,
            Some(a) if a.sample > 0.0 && a.sample <= 1.0 => Some(a.sample),
            Some(a) => {
                return Err(err(
                    format!("{key}.access_log.sample"),
                    format!("{} is not in (0, 1]", a.sample),
                ))
            }
        },
    })
}

/// `ip:port`, or `host:port` resolved now.
fn listen_addr(key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| {
        err(
            key,
            format!("`{s}` is not an address (expected ip:port or host:port)"),
        )
    })?;
    let port: u16 = port
        .parse()
        .map_err(|_| err(key, format!("`{s}`: `{port}` is not a port number")))?;
    resolve(host, port).map_err(|m| err(key, m))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host `{host}`: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("host `{host}` resolved to no address"))
}

fn upstream(key: &str, t: &TapFile, base: &Path) -> Result<Upstream, ConfigError> {
    let ukey = format!("{key}.upstream");
    // Never echoed: it would print the credential.
    if t.upstream.split("://").nth(1).is_some_and(|rest| {
        rest.split(['/', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('@'))
    }) {
        return Err(err(
            &ukey,
            "credentials in the URL (`user:password@`) are not supported: tokentap forwards each client's own headers",
        ));
    }
    let uri: http::Uri = t
        .upstream
        .parse()
        .map_err(|e| err(&ukey, format!("`{}` is not a URL: {e}", t.upstream)))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(err(
                &ukey,
                format!("`{}`: the scheme must be http:// or https://", t.upstream),
            ))
        }
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| err(&ukey, format!("`{}` has no host", t.upstream)))?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(err(
            &ukey,
            format!(
                "`{}`: only scheme://host:port is supported (requests keep their own path)",
                t.upstream
            ),
        ));
    }
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let addr = resolve(host, port).map_err(|m| err(&ukey, m))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let tls = if https {
        let ca_der = match &t.tls.ca_file {
            None => None,
            Some(p) => Some(Arc::new(read_ca(
                &format!("{key}.tls.ca_file"),
                &base.join(p),
            )?)),
        };
        Some(UpstreamTls {
            sni: t.tls.sni.clone().unwrap_or_else(|| host.clone()),
            verify: t.tls.verify,
            ca_der,
        })
    } else {
        if t.tls.ca_file.is_some() || t.tls.sni.is_some() {
            return Err(err(
                format!("{key}.tls"),
                "TLS settings need an https:// upstream",
            ));
        }
        None
    };
    Ok(Upstream {
        url: t.upstream.clone(),
        host,
        port,
        addr,
        tls,
    })
}

/// Reads a PEM bundle; every certificate must parse (pingora would panic on
/// one that does not, so it is refused here).
fn read_ca(key: &str, path: &PathBuf) -> Result<Vec<Vec<u8>>, ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let iter = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(key, format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for c in iter {
        let c = c.map_err(|e| err(key, format!("{}: bad PEM: {e}", path.display())))?;
        x509_parser::parse_x509_certificate(c.as_ref())
            .map_err(|e| err(key, format!("{}: bad certificate: {e}", path.display())))?;
        out.push(c.as_ref().to_vec());
    }
    if out.is_empty() {
        return Err(err(
            key,
            format!("{}: no certificate found", path.display()),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
