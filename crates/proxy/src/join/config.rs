//! `join.yaml`: the joiner's config, validated once like a tap config
//! (unknown keys rejected, every error naming its key). The `correlation`
//! and `otlp` sections are a tap config's, read by the same code.

use crate::config::file::{AdminFile, CorrelationFile, OtlpFile};
use crate::config::sections::{correlation, otlp};
use crate::config::tap::listen_addr;
use crate::config::ConfigError;
use crate::metrics::attribution::NameLimits;
use crate::otlp::OtlpConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use tokentap_core::correlate::{Clocks, CorrelationConfig};

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

/// How many distinct names from spans the attribution families take.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LabelsFile {
    max_taps: usize,
    max_hops: usize,
    max_pairs: usize,
}

impl Default for LabelsFile {
    fn default() -> Self {
        let d = NameLimits::default();
        LabelsFile {
            max_taps: d.max_taps,
            max_hops: d.max_hops,
            max_pairs: d.max_pairs,
        }
    }
}

fn admin_default() -> AdminFile {
    AdminFile {
        listen: "127.0.0.1:9465".into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiverFile {
    /// OTLP/gRPC (what the Collector's loadbalancing exporter speaks).
    #[serde(default = "grpc_default")]
    grpc_listen: String,
    /// OTLP/HTTP: `POST /v1/traces`, protobuf or JSON, gzip or not.
    #[serde(default = "http_default")]
    http_listen: String,
    /// Largest request body, compressed or inflated.
    #[serde(default = "max_body_default")]
    max_body_bytes: usize,
    /// Spans read per export; the rest are rejected (partial success).
    #[serde(default = "max_spans_default")]
    max_spans_per_export: usize,
    /// Largest encoded span; a larger one is rejected.
    #[serde(default = "max_span_bytes_default")]
    max_span_bytes: usize,
}

impl Default for ReceiverFile {
    fn default() -> Self {
        ReceiverFile {
            grpc_listen: grpc_default(),
            http_listen: http_default(),
            max_body_bytes: max_body_default(),
            max_spans_per_export: max_spans_default(),
            max_span_bytes: max_span_bytes_default(),
        }
    }
}

fn grpc_default() -> String {
    "127.0.0.1:4317".into()
}
fn http_default() -> String {
    "127.0.0.1:4318".into()
}
fn max_body_default() -> usize {
    8 << 20
}
fn max_spans_default() -> usize {
    tokentap_core::otlp::Limits::default().max_spans
}
fn max_span_bytes_default() -> usize {
    tokentap_core::otlp::Limits::default().max_span_bytes
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
    /// Always on, on the taps' own clocks.
    pub correlation: CorrelationConfig,
    pub otlp: Option<OtlpConfig>,
    /// Distinct tap, hop and pair names before `other`.
    pub labels: NameLimits,
}

impl JoinConfig {
    pub fn load(path: &Path) -> Result<JoinConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            key: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        JoinConfig::from_yaml(&text)
    }

    pub fn from_yaml(text: &str) -> Result<JoinConfig, ConfigError> {
        let f: JoinFile = serde_yaml_ng::from_str(text).map_err(|e| {
            let msg = e.to_string();
            match msg.split_once(": ") {
                Some((key, rest)) if !key.contains(' ') => ConfigError {
                    key: key.into(),
                    message: rest.into(),
                },
                _ => ConfigError {
                    key: String::new(),
                    message: msg,
                },
            }
        })?;
        if !(1024..=256 << 20).contains(&f.receiver.max_body_bytes) {
            return Err(ConfigError {
                key: "receiver.max_body_bytes".into(),
                message: "must be in 1024..=268435456".into(),
            });
        }
        if !(1..=10_000_000).contains(&f.receiver.max_spans_per_export) {
            return Err(ConfigError {
                key: "receiver.max_spans_per_export".into(),
                message: "must be in 1..=10000000".into(),
            });
        }
        if !(256..=16 << 20).contains(&f.receiver.max_span_bytes) {
            return Err(ConfigError {
                key: "receiver.max_span_bytes".into(),
                message: "must be in 256..=16777216".into(),
            });
        }
        let mut correlation = correlation(&f.correlation, 2)?.ok_or_else(|| ConfigError {
            key: "correlation.enabled".into(),
            message: "the joiner is the correlation: it cannot be off".into(),
        })?;
        correlation.clocks = Clocks::PerTap;
        let l = &f.labels;
        for (key, v) in [
            ("labels.max_taps", l.max_taps),
            ("labels.max_hops", l.max_hops),
            ("labels.max_pairs", l.max_pairs),
        ] {
            if !(1..=10_000).contains(&v) {
                return Err(ConfigError {
                    key: key.into(),
                    message: "must be in 1..=10000".into(),
                });
            }
        }
        Ok(JoinConfig {
            grpc_listen: listen_addr("receiver.grpc_listen", &f.receiver.grpc_listen)?,
            http_listen: listen_addr("receiver.http_listen", &f.receiver.http_listen)?,
            admin_listen: listen_addr("admin.listen", &f.admin.listen)?,
            max_body_bytes: f.receiver.max_body_bytes,
            otlp_limits: tokentap_core::otlp::Limits {
                max_spans: f.receiver.max_spans_per_export,
                max_span_bytes: f.receiver.max_span_bytes,
            },
            correlation,
            otlp: otlp(f.otlp.as_ref())?,
            labels: NameLimits {
                max_taps: l.max_taps,
                max_hops: l.max_hops,
                max_pairs: l.max_pairs,
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
        let e = JoinConfig::from_yaml("receiver:\n  http_listn: 1.2.3.4:1\n").unwrap_err();
        assert!(e.to_string().contains("http_listn"), "{e}");
        let e = JoinConfig::from_yaml("correlation:\n  enabled: false\n").unwrap_err();
        assert_eq!(e.key, "correlation.enabled");
        let e = JoinConfig::from_yaml("correlation:\n  max_traces: 0\n").unwrap_err();
        assert_eq!(e.key, "correlation.max_traces");
    }
}
