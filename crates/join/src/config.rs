//! `join.yaml`: the joiner's config, validated once like a tap config
//! (unknown keys rejected, every error naming its key). The `correlation`,
//! `otlp` and `admin` sections are a tap config's, read by the same code
//! (`tokentap_telemetry::config`).

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokentap_core::correlate::{Clocks, CorrelationConfig};
use tokentap_core::limits::ListenerLimits;
use tokentap_host::auth::BearerToken;
use tokentap_host::tls::TlsFiles;
use tokentap_telemetry::config::file::{AdminFile, CorrelationFile, OtlpFile};
use tokentap_telemetry::config::sections::{admin_limits, correlation, listener_limits, otlp};
use tokentap_telemetry::config::{err, listen_addr, ConfigError};
use tokentap_telemetry::correlation::metrics::NameLimits;
use tokentap_telemetry::otlp::OtlpConfig;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinFile {
    #[serde(default)]
    receiver: ReceiverFile,
    #[serde(default = "admin_default")]
    admin: AdminFile,
    #[serde(default)]
    correlation: CorrelationFile,
    #[serde(default)]
    otlp: Option<OtlpFile>,
    #[serde(default)]
    labels: LabelsFile,
}

fn admin_default() -> AdminFile {
    AdminFile {
        listen: "127.0.0.1:9465".into(),
        ..AdminFile::default()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ReceiverFile {
    /// OTLP/gRPC (what the Collector's loadbalancing exporter speaks).
    grpc_listen: String,
    /// OTLP/HTTP: `POST /v1/traces`, protobuf or JSON, gzip or not.
    http_listen: String,
    /// Largest request body, compressed or inflated.
    max_body_bytes: usize,
    /// Spans read per export; the rest are rejected (partial success).
    max_spans_per_export: usize,
    /// Largest encoded span; a larger one is rejected.
    max_span_bytes: usize,
    /// Open connections per receiver; more are refused.
    max_connections: usize,
    /// A request head (gRPC: the connection preface) must be complete this
    /// long after the connection's or request's first byte.
    request_header_seconds: f64,
    /// A whole request (body included) must be read this long after its
    /// head.
    request_body_seconds: f64,
    /// TLS on both receivers (a certificate chain and its key, PEM).
    tls: Option<TlsFile>,
    /// A bearer token the senders must present (`authorization: Bearer`).
    auth: Option<AuthFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    bearer_token_file: PathBuf,
}

impl Default for ReceiverFile {
    fn default() -> Self {
        let limits = tokentap_core::otlp::Limits::default();
        ReceiverFile {
            grpc_listen: "127.0.0.1:4317".into(),
            http_listen: "127.0.0.1:4318".into(),
            max_body_bytes: 8 << 20,
            max_spans_per_export: limits.max_spans,
            max_span_bytes: limits.max_span_bytes,
            max_connections: 256,
            request_header_seconds: 5.0,
            request_body_seconds: 30.0,
            tls: None,
            auth: None,
        }
    }
}

/// How many distinct names from spans the attribution families take.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LabelsFile {
    max_taps: usize,
    max_hops: usize,
    max_pairs: usize,
    max_compound_taps: usize,
}

impl Default for LabelsFile {
    fn default() -> Self {
        let d = NameLimits::default();
        LabelsFile {
            max_taps: d.max_taps,
            max_hops: d.max_hops,
            max_pairs: d.max_pairs,
            max_compound_taps: d.max_compound_taps,
        }
    }
}

/// The validated joiner config.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    pub grpc_listen: SocketAddr,
    pub http_listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub max_body_bytes: usize,
    /// Work one export may cause.
    pub otlp_limits: tokentap_core::otlp::Limits,
    /// Each receiver's connection cap and head deadline.
    pub receiver_limits: ListenerLimits,
    /// A request's whole read, head to end of body.
    pub body_timeout: Duration,
    pub tls: Option<TlsFiles>,
    pub token: Option<BearerToken>,
    pub admin_limits: ListenerLimits,
    /// Always on, on the taps' own clocks.
    pub correlation: CorrelationConfig,
    pub otlp: Option<OtlpConfig>,
    /// Distinct tap, hop and pair names before `other`.
    pub labels: NameLimits,
}

fn in_range(key: &str, v: usize, lo: usize, hi: usize) -> Result<(), ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(err(key, format!("must be in {lo}..={hi}")))
    }
}

impl JoinConfig {
    pub fn load(path: &Path) -> Result<JoinConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        JoinConfig::from_yaml(&text)
    }

    pub fn from_yaml(text: &str) -> Result<JoinConfig, ConfigError> {
        let f: JoinFile = serde_yaml_ng::from_str(text).map_err(|e| {
            let msg = e.to_string();
            match msg.split_once(": ") {
                Some((key, rest)) if !key.contains(' ') => err(key, rest),
                _ => err("", msg),
            }
        })?;
        let r = &f.receiver;
        in_range("receiver.max_body_bytes", r.max_body_bytes, 1024, 256 << 20)?;
        in_range(
            "receiver.max_spans_per_export",
            r.max_spans_per_export,
            1,
            10_000_000,
        )?;
        in_range("receiver.max_span_bytes", r.max_span_bytes, 256, 16 << 20)?;
        let receiver_limits =
            listener_limits("receiver", r.max_connections, r.request_header_seconds)?;
        let body = r.request_body_seconds;
        if !(body.is_finite() && body > 0.0 && body <= 3600.0) {
            return Err(err(
                "receiver.request_body_seconds",
                format!("{body} is not a number of seconds in (0, 3600]"),
            ));
        }
        let tls = match &r.tls {
            None => None,
            Some(t) => Some(
                TlsFiles::check(&t.cert_file, &t.key_file).map_err(|m| err("receiver.tls", m))?,
            ),
        };
        let token = match &r.auth {
            None => None,
            Some(a) => Some(
                BearerToken::from_file(&a.bearer_token_file)
                    .map_err(|e| err("receiver.auth.bearer_token_file", e.to_string()))?,
            ),
        };
        let mut correlation = correlation(&f.correlation, 2)?.ok_or_else(|| {
            err(
                "correlation.enabled",
                "the joiner is the correlation: it cannot be off",
            )
        })?;
        correlation.clocks = Clocks::PerTap;
        let l = &f.labels;
        for (key, v) in [
            ("labels.max_taps", l.max_taps),
            ("labels.max_hops", l.max_hops),
            ("labels.max_pairs", l.max_pairs),
            ("labels.max_compound_taps", l.max_compound_taps),
        ] {
            in_range(key, v, 1, 10_000)?;
        }
        Ok(JoinConfig {
            grpc_listen: listen_addr("receiver.grpc_listen", &r.grpc_listen)?,
            http_listen: listen_addr("receiver.http_listen", &r.http_listen)?,
            admin_listen: listen_addr("admin.listen", &f.admin.listen)?,
            max_body_bytes: r.max_body_bytes,
            otlp_limits: tokentap_core::otlp::Limits {
                max_spans: r.max_spans_per_export,
                max_span_bytes: r.max_span_bytes,
            },
            receiver_limits,
            body_timeout: Duration::from_secs_f64(body),
            tls,
            token,
            admin_limits: admin_limits(&f.admin)?,
            correlation,
            otlp: otlp(f.otlp.as_ref())?,
            labels: NameLimits {
                max_taps: l.max_taps,
                max_hops: l.max_hops,
                max_pairs: l.max_pairs,
                max_compound_taps: l.max_compound_taps,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_mistakes() {
        let c = JoinConfig::from_yaml("{}").unwrap();
        assert_eq!(c.http_listen.port(), 4318);
        assert_eq!(c.correlation.clocks, Clocks::PerTap);
        assert_eq!(c.receiver_limits.max_connections, 256);
        assert!(c.tls.is_none() && c.token.is_none());
        let e = JoinConfig::from_yaml("receiver:\n  http_listn: 1.2.3.4:1\n").unwrap_err();
        assert!(e.to_string().contains("http_listn"), "{e}");
        let e = JoinConfig::from_yaml("correlation:\n  enabled: false\n").unwrap_err();
        assert_eq!(e.key, "correlation.enabled");
        let e = JoinConfig::from_yaml("correlation:\n  max_traces: 0\n").unwrap_err();
        assert_eq!(e.key, "correlation.max_traces");
        let e = JoinConfig::from_yaml("receiver:\n  max_connections: 0\n").unwrap_err();
        assert_eq!(e.key, "receiver.max_connections");
        let e =
            JoinConfig::from_yaml("receiver:\n  auth:\n    bearer_token_file: /nonexistent/t\n")
                .unwrap_err();
        assert_eq!(e.key, "receiver.auth.bearer_token_file");
        let e = JoinConfig::from_yaml(
            "receiver:\n  tls:\n    cert_file: /nonexistent/c\n    key_file: /nonexistent/k\n",
        )
        .unwrap_err();
        assert_eq!(e.key, "receiver.tls");
    }
}
