//! The process-wide sections of a config file as written (the tap
//! process's and the joiner's): `otlp`, `correlation` and `admin`. serde
//! structs mirroring the YAML, with explicit defaults and unknown keys
//! rejected; validated by `super::sections`.

use serde::Deserialize;

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpFile {
    /// Base URL of the collector's OTLP/HTTP receiver (`/v1/traces` and
    /// `/v1/metrics` are appended). Default: OTEL_EXPORTER_OTLP_ENDPOINT, else
    /// http://localhost:4318.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Extra request headers (`${VAR}` is replaced from the environment).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default = "yes")]
    pub traces: bool,
    #[serde(default = "yes")]
    pub metrics: bool,
    /// Metric export interval. Default: OTEL_METRIC_EXPORT_INTERVAL, else 60 s.
    #[serde(default)]
    pub interval_seconds: Option<f64>,
    /// Per export. Default: OTEL_EXPORTER_OTLP_TIMEOUT, else 3 s.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Spans waiting for export at most; beyond, spans are dropped (counted).
    #[serde(default = "queue_default")]
    pub queue_spans: usize,
    #[serde(default = "batch_default")]
    pub batch_spans: usize,
    /// Longest flush at shutdown.
    #[serde(default = "five_f")]
    pub shutdown_seconds: f64,
    /// `service.name` (default: OTEL_SERVICE_NAME, else tokentap).
    #[serde(default)]
    pub service_name: Option<String>,
    /// One span event per token-bearing event.
    #[serde(default)]
    pub span_events: bool,
    #[serde(default = "span_events_default")]
    pub max_span_events: usize,
    /// The first token events' times carried in each span (an int array,
    /// µs from the request start) for `tokentap join`'s relay delay and
    /// added jitter; 0: none.
    #[serde(default = "span_token_offsets_default")]
    pub span_token_offsets: usize,
}

fn span_token_offsets_default() -> usize {
    64
}

fn queue_default() -> usize {
    2048
}
fn batch_default() -> usize {
    512
}
fn span_events_default() -> usize {
    128
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrelationFile {
    /// Join records of the taps of this process (default: on with 2+ taps).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// A request's records are joined once none arrived for this long ...
    #[serde(default = "two_f")]
    pub settle_seconds: f64,
    /// ... or once the first is this old (long-lived trace ids).
    #[serde(default = "three_hundred_f")]
    pub max_age_seconds: f64,
    /// Requests (trace groups) held at once; the oldest are evicted.
    #[serde(default = "ten_thousand")]
    pub max_traces: usize,
    /// Fallback join by request fingerprint within this start difference.
    #[serde(default = "five_f")]
    pub fingerprint_window_seconds: f64,
    /// Token-event times kept per request for relay delay and jitter.
    #[serde(default = "events_default")]
    pub max_events: usize,
    /// A layer buffers when at least this share of the inner stream passed
    /// before the outer tap saw its first token.
    #[serde(default = "buffered_default")]
    pub buffered_share: f64,
}

impl Default for CorrelationFile {
    fn default() -> Self {
        CorrelationFile {
            enabled: None,
            settle_seconds: two_f(),
            max_age_seconds: three_hundred_f(),
            max_traces: ten_thousand(),
            fingerprint_window_seconds: five_f(),
            max_events: events_default(),
            buffered_share: buffered_default(),
        }
    }
}

fn two_f() -> f64 {
    2.0
}
fn five_f() -> f64 {
    5.0
}
fn three_hundred_f() -> f64 {
    300.0
}
fn ten_thousand() -> usize {
    10_000
}
fn events_default() -> usize {
    2048
}
fn buffered_default() -> f64 {
    0.9
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    /// `/metrics`, `/healthz`, `/readyz`. Loopback by default.
    #[serde(default = "default_admin_listen")]
    pub listen: String,
    /// Open connections at most (scrapers and probes); more are refused.
    #[serde(default = "admin_connections")]
    pub max_connections: usize,
    /// A request head must be complete this long after its first byte.
    #[serde(default = "two_f")]
    pub request_header_seconds: f64,
}

impl Default for AdminFile {
    fn default() -> Self {
        AdminFile {
            listen: default_admin_listen(),
            max_connections: admin_connections(),
            request_header_seconds: two_f(),
        }
    }
}

fn admin_connections() -> usize {
    64
}

pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

fn default_admin_listen() -> String {
    DEFAULT_ADMIN_LISTEN.to_string()
}
