//! The config file as written: serde structs that mirror the YAML, with
//! explicit defaults and unknown keys rejected (`deny_unknown_fields`, so a
//! typo fails loudly with its path). Nothing here is validated beyond types;
//! `config::validate` turns a `FileConfig` into the internal `Config`. These
//! structs never reach the proxy.

use serde::Deserialize;
use std::path::PathBuf;
pub use tokentap_telemetry::config::file::{
    AdminFile, CorrelationFile, OtlpFile, DEFAULT_ADMIN_LISTEN,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub admin: AdminFile,
    #[serde(default)]
    pub metrics: MetricsFile,
    #[serde(default)]
    pub server: ServerFile,
    #[serde(default)]
    pub correlation: CorrelationFile,
    /// OTLP export (off when absent, unless OTEL_EXPORTER_OTLP_* asks).
    #[serde(default)]
    pub otlp: Option<OtlpFile>,
    /// Windowed analyses (on by default).
    #[serde(default)]
    pub analysis: super::analysis::AnalysisFile,
    pub taps: Vec<TapFile>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TraceModeFile {
    Propagate,
    Create,
    Off,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsFile {
    /// Distinct `model` label values before `other`.
    #[serde(default = "default_max_models")]
    pub max_models: usize,
    /// Distinct `gen_ai_tool_name` label values (MCP tools) before `other`.
    #[serde(default = "default_max_models")]
    pub max_tools: usize,
    /// Duration histograms' bounds: `fine` (every family resolves 5 % or
    /// 1 ms) or `standard` (OpenTelemetry's advised bounds, an eighth of
    /// the series).
    #[serde(default)]
    pub buckets: BucketsFile,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum BucketsFile {
    #[default]
    Fine,
    Standard,
}

impl Default for MetricsFile {
    fn default() -> Self {
        MetricsFile {
            max_models: default_max_models(),
            max_tools: default_max_models(),
            buckets: BucketsFile::Fine,
        }
    }
}

fn default_max_models() -> usize {
    50
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    /// Worker threads of each tap's runtime.
    #[serde(default = "one")]
    pub threads: usize,
    /// SIGTERM: /readyz answers 503 at once; listeners keep accepting this
    /// long so load balancers see it, then stop.
    #[serde(default = "one_f")]
    pub drain_notice_seconds: f64,
    /// Then the listeners close and the process exits as soon as nothing
    /// is in flight, at the latest this long after (streams open then are
    /// cut and counted).
    #[serde(default = "twenty")]
    pub grace_period_seconds: u64,
    /// Then: how long the record logs and OTLP get to flush.
    #[serde(default = "five")]
    pub shutdown_timeout_seconds: u64,
    /// Re-read the config file when its content changes, checking this often
    /// (0: only on SIGHUP).
    #[serde(default)]
    pub watch_config_seconds: f64,
}

impl Default for ServerFile {
    fn default() -> Self {
        ServerFile {
            threads: one(),
            drain_notice_seconds: one_f(),
            grace_period_seconds: twenty(),
            shutdown_timeout_seconds: five(),
            watch_config_seconds: 0.0,
        }
    }
}

fn one_f() -> f64 {
    1.0
}
fn twenty() -> u64 {
    20
}

fn one() -> usize {
    1
}
fn five() -> u64 {
    5
}
fn ten_thousand() -> usize {
    10_000
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BoundaryFile {
    Engine,
    Gateway,
    Compound,
    Guardrail,
    /// MCP servers and plain HTTP tools.
    Tool,
    /// Vector search, rerank, embeddings.
    Retrieval,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapFile {
    pub name: String,
    pub boundary: BoundaryFile,
    /// `ip:port` or `host:port` to listen on.
    pub listen: String,
    /// `http://host:port` or `https://host:port`.
    pub upstream: String,
    /// W3C `traceparent`: `propagate` (read it), `create` (also add one when
    /// missing), `off`. Default: `create` on compound and gateway taps,
    /// `propagate` on the others.
    #[serde(default)]
    pub trace: Option<TraceModeFile>,
    /// Guardrail taps: the hop's name (label `hop`); default the tap name.
    #[serde(default)]
    pub hop: Option<String>,
    /// `gen_ai.provider.name` for OTLP (e.g. `openai`, `vllm`); unset: omitted.
    #[serde(default)]
    pub provider: Option<String>,
    /// Accept HTTP/2 without TLS (prior knowledge) from clients.
    #[serde(default = "yes")]
    pub h2c: bool,
    /// Ask the upstream for `Accept-Encoding: identity` so bodies can be read.
    #[serde(default = "yes")]
    pub accept_encoding_identity: bool,
    #[serde(default)]
    pub tls: TlsFile,
    #[serde(default)]
    pub timeouts: TimeoutsFile,
    #[serde(default)]
    pub limits: LimitsFile,
    /// One JSONL line per request (off unless set).
    #[serde(default)]
    pub record_log: Option<super::analysis::RecordLogFile>,
    /// An access-log event per request (target `tokentap::access`), off
    /// unless set.
    #[serde(default)]
    pub access_log: Option<AccessLogFile>,
    /// `false`: a plain pass-through proxy (limits still apply, nothing is
    /// measured or exported) — the baseline that isolates measurement cost.
    #[serde(default = "yes")]
    pub measure: bool,
    /// The API dialect of every request, whatever its path (default: by
    /// path; see `decode::dialect`).
    #[serde(default)]
    pub dialect: Option<tokentap_core::decode::dialect::Dialect>,
    /// Add `stream_options.include_usage` to streaming OpenAI requests that
    /// lack it and cut the usage chunk it causes from the client's stream.
    #[serde(default)]
    pub inject_usage: bool,
    /// Count tokens with this tiktoken encoding where no usage reports them.
    #[serde(default)]
    pub estimate_tokens: Option<tokentap_core::decode::tokens::Tokenizer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogFile {
    /// Share of requests logged (0–1], chosen at random.
    #[serde(default = "one_f")]
    pub sample: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// PEM file of CA certificates trusted for this upstream (instead of the
    /// system roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Server name to send and verify (default: the upstream host).
    #[serde(default)]
    pub sni: Option<String>,
    /// Verify the upstream's certificate and host name.
    #[serde(default = "yes")]
    pub verify: bool,
}

impl Default for TlsFile {
    fn default() -> Self {
        TlsFile {
            ca_file: None,
            sni: None,
            verify: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsFile {
    /// TCP connect (and TLS handshake) to the upstream.
    #[serde(default = "default_connect")]
    pub connect_seconds: f64,
    /// Request sent → first response byte (prefill of a long prompt, a
    /// whole non-streaming generation).
    #[serde(default = "default_long")]
    pub first_byte_seconds: f64,
    /// Longest silence between two reads of a response once it started.
    #[serde(default = "default_long")]
    pub idle_seconds: f64,
    /// Client side: a request head must be complete this long after its
    /// first byte (after the accept for a connection's first request).
    #[serde(default = "default_header")]
    pub request_header_seconds: f64,
    /// Client side: an idle keep-alive connection is closed after this long.
    #[serde(default = "default_keepalive")]
    pub keepalive_seconds: f64,
    /// Client side: one write to a client that stopped reading may block
    /// this long before the stream is cut.
    #[serde(default = "default_keepalive")]
    pub client_write_seconds: f64,
}

impl Default for TimeoutsFile {
    fn default() -> Self {
        TimeoutsFile {
            connect_seconds: default_connect(),
            first_byte_seconds: default_long(),
            idle_seconds: default_long(),
            request_header_seconds: default_header(),
            keepalive_seconds: default_keepalive(),
            client_write_seconds: default_keepalive(),
        }
    }
}

fn default_connect() -> f64 {
    5.0
}
fn default_long() -> f64 {
    600.0
}
fn default_header() -> f64 {
    10.0
}
fn default_keepalive() -> f64 {
    60.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Private copy of a request body kept to read model/stream/limits.
    #[serde(default = "mib4")]
    pub request_copy_bytes: usize,
    /// Private copy of a non-streaming JSON response kept to read usage.
    #[serde(default = "mib16")]
    pub json_body_bytes: usize,
    /// Longest SSE line tokentap decodes.
    #[serde(default = "mib1")]
    pub sse_line_bytes: usize,
    /// Largest SSE event data tokentap decodes.
    #[serde(default = "mib1")]
    pub sse_event_bytes: usize,
    /// Request line plus headers; larger heads get 431.
    #[serde(default = "kib64")]
    pub max_header_bytes: usize,
    /// Header fields per request; more get 431.
    #[serde(default = "hundred")]
    pub max_headers: usize,
    /// Request target length; longer gets 414.
    #[serde(default = "kib16")]
    pub max_uri_bytes: usize,
    /// Open client connections; more are refused (see `reject`).
    #[serde(default = "ten_thousand")]
    pub max_connections: usize,
    /// Requests in flight; more get 503 (unset: no cap).
    #[serde(default)]
    pub max_streams: Option<usize>,
    /// HTTP/2 concurrent streams per client connection.
    #[serde(default = "h2_streams")]
    pub h2_max_streams: u32,
    /// A connection over `max_connections`: `respond` (503, Retry-After: 1)
    /// or `close`.
    #[serde(default)]
    pub reject: RejectFile,
}

#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RejectFile {
    #[default]
    Respond,
    Close,
}

impl Default for LimitsFile {
    fn default() -> Self {
        LimitsFile {
            request_copy_bytes: mib4(),
            json_body_bytes: mib16(),
            sse_line_bytes: mib1(),
            sse_event_bytes: mib1(),
            max_header_bytes: kib64(),
            max_headers: hundred(),
            max_uri_bytes: kib16(),
            max_connections: ten_thousand(),
            max_streams: None,
            h2_max_streams: h2_streams(),
            reject: RejectFile::Respond,
        }
    }
}

fn kib16() -> usize {
    16 << 10
}
fn kib64() -> usize {
    64 << 10
}
fn hundred() -> usize {
    100
}
fn h2_streams() -> u32 {
    128
}
fn mib1() -> usize {
    1 << 20
}
fn mib4() -> usize {
    4 << 20
}
fn mib16() -> usize {
    16 << 20
}
