//! The canonical metric table: every metric tokentap exports, once.
//!
//! Owns: name, type, unit, help, labels, buckets, the OpenTelemetry name, the
//! exact start and end events, when it is observed, and which methodology
//! test it serves. The Prometheus registry (`metrics::prom`),
//! `docs/metrics.md` (generated from `render_markdown`, checked by a test)
//! and, later, OTLP and the dashboard tests all read this table; nothing
//! else names a metric.

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// A floating-point gauge set when an analysis window closes (absent
    /// while its figure is not available).
    WindowGauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::WindowGauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Unit of a metric's values (base units only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Tokens,
    Requests,
    Errors,
    Connections,
    Info,
    Ratio,
    TokensPerSecond,
    RequestsPerSecond,
}

impl Unit {
    /// UCUM-style unit, as OpenTelemetry writes it.
    pub fn otel(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Tokens => "{token}",
            Unit::Requests => "{request}",
            Unit::Errors => "{error}",
            Unit::Connections => "{connection}",
            Unit::Info | Unit::Ratio => "1",
            Unit::TokensPerSecond => "{token}/s",
            Unit::RequestsPerSecond => "{request}/s",
        }
    }
}

/// A label name. Every value of every label is bounded (see `docs/metrics.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Tap,
    Boundary,
    Model,
    Operation,
    Stream,
    Outcome,
    TokenType,
    Source,
    Reason,
    Label,
    Version,
    Outer,
    Inner,
    /// Overhead phase.
    Phase,
    Hop,
    /// Guardrail phase (the same label name, other values).
    GuardPhase,
    Verdict,
    Result,
    Signal,
    Quantile,
    Stat,
    InputKind,
    Tenant,
    Bucket,
    Prefix,
    Cache,
    Figure,
    Engine,
    /// An engine scrape's result (the same label name as `Result`, other values).
    ScrapeResult,
    /// A config reload's result (the same label name, other values).
    ReloadResult,
    /// Why tokentap refused a request or connection (the same label name
    /// as `Reason`, other values).
    RejectReason,
    /// What usage injection did with a request (the same label name as
    /// `Result`, other values).
    InjectResult,
}

impl Label {
    /// The OpenTelemetry attribute key of this label (GenAI conventions where
    /// they name one; `tokentap.*` otherwise).
    pub fn otel_key(self) -> &'static str {
        match self {
            Label::Tap => "tokentap.tap",
            Label::Boundary => "tokentap.boundary",
            Label::Model => "gen_ai.request.model",
            Label::Operation => "gen_ai.operation.name",
            Label::Stream => "gen_ai.request.stream",
            Label::Outcome => "tokentap.outcome",
            Label::TokenType => "gen_ai.token.type",
            Label::Source => "tokentap.token.source",
            Label::Reason | Label::RejectReason => "tokentap.reason",
            Label::Label => "tokentap.label",
            Label::Version => "tokentap.version",
            Label::Outer => "tokentap.outer",
            Label::Inner => "tokentap.inner",
            Label::Phase | Label::GuardPhase => "tokentap.phase",
            Label::Hop => "tokentap.hop",
            Label::Verdict => "tokentap.verdict",
            Label::Result => "tokentap.result",
            Label::Signal => "tokentap.signal",
            Label::Quantile => "tokentap.percentile",
            Label::Stat => "tokentap.stat",
            Label::InputKind => "tokentap.input.kind",
            Label::Tenant => "tokentap.tenant",
            Label::Bucket => "tokentap.input.bucket",
            Label::Prefix => "tokentap.prefix",
            Label::Cache => "tokentap.cache",
            Label::Figure => "tokentap.figure",
            Label::Engine => "tokentap.engine",
            Label::ScrapeResult | Label::ReloadResult | Label::InjectResult => "tokentap.result",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Label::Tap => "tap",
            Label::Boundary => "boundary",
            Label::Model => "model",
            Label::Operation => "operation",
            Label::Stream => "stream",
            Label::Outcome => "outcome",
            Label::TokenType => "token_type",
            Label::Source => "source",
            Label::Reason | Label::RejectReason => "reason",
            Label::Label => "label",
            Label::Version => "version",
            Label::Outer => "outer",
            Label::Inner => "inner",
            Label::Phase | Label::GuardPhase => "phase",
            Label::Hop => "hop",
            Label::Verdict => "verdict",
            Label::Result | Label::ScrapeResult | Label::ReloadResult | Label::InjectResult => {
                "result"
            }
            Label::Signal => "signal",
            Label::Quantile => "percentile",
            Label::Stat => "stat",
            Label::InputKind => "kind",
            Label::Tenant => "tenant",
            Label::Bucket => "bucket",
            Label::Prefix => "prefix",
            Label::Cache => "cache",
            Label::Figure => "figure",
            Label::Engine => "engine",
        }
    }

    /// What values the label takes (for the docs).
    pub fn values(self) -> &'static str {
        match self {
            Label::Tap => "tap names from the config",
            Label::Boundary => "`engine`, `gateway`, `compound`, `guardrail`",
            Label::Model => "requested model (else response model); first `metrics.max_models` distinct values (default 50), then `other`; `unknown` when absent",
            Label::Operation => "`chat`, `text_completion`, `embeddings`, `other`",
            Label::Stream => "`true`, `false`",
            Label::Outcome => "`ok`, `client_cancelled`, `upstream_error`, `upstream_truncated`, `http_error`, `unmeasured`",
            Label::TokenType => "`input`, `output`",
            Label::Source => "`usage`, `events`, `estimate`",
            Label::Reason => "`sse_line_too_long`, `sse_event_too_large`, `invalid_json_event`, `json_body_too_large`, `invalid_json_body`, `compressed_body`, `inflate_failed`, `inflated_too_large`, `decoder_panic`, `request_body_too_large`, `request_not_json`",
            Label::Label => "`model`",
            Label::Version => "tokentap's version",
            Label::Outer | Label::Inner => "tap names from the config (the outer and the inner tap of a joined pair)",
            Label::Phase => "`request_path`, `ttfb`, `ttft`, `e2e` (boundary overhead)",
            Label::Hop => "hop names from the config (guardrail taps)",
            Label::GuardPhase => "`input`, `output`, `unknown` (guardrail metrics)",
            Label::Verdict => "`pass`, `flagged`, `error`, `unknown`",
            Label::Result => "`joined_trace`, `joined_fingerprint`, `unjoined`, `ambiguous`, `evicted`",
            Label::Signal => "`traces`, `metrics`",
            Label::Quantile => "`p50`, `p90`, `p95`, `p99`, `p999` (each present only when the window has enough samples: n·(1−q) ≥ 10, so p99 needs 1,000 and p999 10,000; `quantile` is reserved for summaries)",
            Label::Stat => "`mean`, `max`",
            Label::InputKind => "`all`, `uncached`",
            Label::Tenant => "the window's top `analysis.top_tenants` tenants by requests (configured header value, capped at 64 printable characters, or `k-` + 12 hex digits of the API key's hash), then `other`; `none` for requests without one",
            Label::Bucket => "`<1k`, `1k-4k`, `4k-16k`, `16k-64k`, `>64k` (input tokens)",
            Label::Prefix => "`1k`, `4k`, `16k` (prompt characters)",
            Label::Cache => "`hit`, `miss`",
            Label::Figure => "`requests`, `ttft`, `tpot`, `itl`",
            Label::Engine => "engine names from `analysis.engines`",
            Label::ScrapeResult => "`ok`, `error` (engine scrapes)",
            Label::ReloadResult => "`applied`, `unchanged`, `rejected` (config reloads)",
            Label::InjectResult => "`injected`, `stripped`, `not_streaming`, `already_requested`, `not_json`, `too_large`, `strip_failed` (usage injection)",
            Label::RejectReason => "`header_timeout`, `header_too_large`, `too_many_headers`, `uri_too_long`, `too_many_connections`, `too_many_streams` (refusals)",
        }
    }
}

/// The ten tests of the IETF LLM serving methodology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    Ttft,
    OutputThroughput,
    ThroughputLatency,
    ItlDistribution,
    Capacity,
    Fairness,
    PrefixCache,
    MemoryPressure,
    LongContext,
    GuardrailOverhead,
}

impl Test {
    pub fn as_str(self) -> &'static str {
        match self {
            Test::Ttft => "1 TTFT",
            Test::OutputThroughput => "2 output throughput",
            Test::ThroughputLatency => "3 throughput–latency",
            Test::ItlDistribution => "4 ITL distribution",
            Test::Capacity => "5 capacity",
            Test::Fairness => "6 fairness",
            Test::PrefixCache => "7 prefix cache",
            Test::MemoryPressure => "8 memory pressure",
            Test::LongContext => "9 long context",
            Test::GuardrailOverhead => "10 guardrail overhead",
        }
    }
}

/// One metric, fully described.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    pub name: &'static str,
    pub otel_name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub help: &'static str,
    pub labels: &'static [Label],
    pub buckets: &'static [f64],
    /// The event that starts the measured interval (or what is counted).
    pub start: &'static str,
    /// The event that ends it.
    pub end: &'static str,
    /// Which requests or events contribute an observation.
    pub observed: &'static str,
    pub tests: &'static [Test],
}

/// OpenTelemetry's advised TTFT boundaries, extended with vLLM's long tail.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// OpenTelemetry's advised TPOT boundaries, extended with vLLM's long tail.
pub const TPOT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// OpenTelemetry's doubling duration boundaries (0.01 … 81.92 s), extended by
/// doubling to 2.9 h for long generations (vLLM's e2e tail reaches 7680 s).
pub const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84,
    327.68, 655.36, 1310.72, 2621.44, 5242.88, 10485.76,
];
/// OpenTelemetry's advised token-usage boundaries.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// Inter-token gaps: fine below 100 ms where decode steps live, then the
/// vLLM tail so stalls and preemptions stay visible.
pub const ITL_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
];
/// Overhead a layer adds: 100 µs (a local relay) to minutes (a guardrail
/// that waits for a whole answer).
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
pub const SHARE_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0];
pub const TOKENS_PER_EVENT_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0, 128.0,
];

use Label as L;
const PER_MODEL: &[Label] = &[L::Tap, L::Boundary, L::Model, L::Operation];
const PER_MODEL_STREAM: &[Label] = &[L::Tap, L::Boundary, L::Model, L::Operation, L::Stream];
const REQUEST_START: &str = "the tap has the request headers (pingora `new_ctx`)";

pub const TTFT: MetricDef = MetricDef {
    name: "gen_ai_server_time_to_first_token_seconds",
    otel_name: "gen_ai.server.time_to_first_token",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time to first token: request headers received by the tap to the first event carrying output (content, reasoning or a tool-call delta).",
    labels: PER_MODEL,
    buckets: TTFT_BUCKETS,
    start: REQUEST_START,
    end: "the tap sees the end of the first SSE event with non-empty content, reasoning, refusal, completion text or a tool-call delta (role-only, empty, keep-alive and usage-only events never count)",
    observed: "streaming requests that reached a first token, whatever their outcome",
    tests: &[Test::Ttft, Test::ThroughputLatency, Test::LongContext],
};

pub const TTFT_VISIBLE: MetricDef = MetricDef {
    name: "tokentap_time_to_first_visible_token_seconds",
    otel_name: "tokentap.time_to_first_visible_token",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time to first visible token: like TTFT but reasoning does not count.",
    labels: PER_MODEL,
    buckets: TTFT_BUCKETS,
    start: REQUEST_START,
    end: "the tap sees the end of the first event with visible output (content, refusal, completion text or a tool-call delta; not reasoning)",
    observed: "streaming requests that reached visible output",
    tests: &[Test::Ttft],
};

pub const TTFB: MetricDef = MetricDef {
    name: "tokentap_time_to_first_byte_seconds",
    otel_name: "tokentap.time_to_first_byte",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time to first byte: request headers received by the tap to response headers received from the upstream.",
    labels: PER_MODEL_STREAM,
    buckets: TTFT_BUCKETS,
    start: REQUEST_START,
    end: "the upstream's final (non-1xx) response header is parsed (pingora `upstream_response_filter`)",
    observed: "every request that got response headers",
    tests: &[Test::Ttft],
};

pub const TIME_TO_FIRST_EVENT: MetricDef = MetricDef {
    name: "tokentap_time_to_first_event_seconds",
    otel_name: "tokentap.time_to_first_event",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time to first SSE event of any kind (role-only and usage events included, comments excluded).",
    labels: PER_MODEL,
    buckets: TTFT_BUCKETS,
    start: REQUEST_START,
    end: "the tap sees the end of the first dispatched SSE event",
    observed: "streaming requests that got an event",
    tests: &[Test::Ttft],
};

pub const TPOT: MetricDef = MetricDef {
    name: "gen_ai_server_time_per_output_token_seconds",
    otel_name: "gen_ai.server.time_per_output_token",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time per output token after the first: (E2E - TTFT) / (output tokens - 1), per request.",
    labels: PER_MODEL,
    buckets: TPOT_BUCKETS,
    start: "the first token (TTFT)",
    end: "the last byte of the response (E2E), divided by output tokens - 1",
    observed: "streaming requests with outcome `ok` and at least 2 output tokens",
    tests: &[
        Test::OutputThroughput,
        Test::ThroughputLatency,
        Test::LongContext,
    ],
};

pub const REQUEST_DURATION: MetricDef = MetricDef {
    name: "gen_ai_server_request_duration_seconds",
    otel_name: "gen_ai.server.request.duration",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "End-to-end request duration at the tap: request headers received to last response byte passed on (or the failure).",
    labels: &[L::Tap, L::Boundary, L::Model, L::Operation, L::Stream, L::Outcome],
    buckets: DURATION_BUCKETS,
    start: REQUEST_START,
    end: "the last response body piece passes the tap (upstream end of stream); for failures, the moment the failure is handled (pingora `logging`)",
    observed: "every request",
    tests: &[Test::ThroughputLatency, Test::Capacity],
};

pub const TOKEN_USAGE: MetricDef = MetricDef {
    name: "gen_ai_client_token_usage",
    otel_name: "gen_ai.client.token.usage",
    kind: Kind::Histogram,
    unit: Unit::Tokens,
    help: "Tokens per request, by type (input from usage; output from usage, else counted events).",
    labels: &[L::Tap, L::Boundary, L::Model, L::Operation, L::TokenType],
    buckets: TOKEN_BUCKETS,
    start: "—",
    end: "—",
    observed: "requests whose count is known (input: `usage.prompt_tokens`; output: `usage.completion_tokens`, else token-bearing choice deltas of a fully decoded stream)",
    tests: &[Test::OutputThroughput, Test::LongContext],
};

pub const ITL: MetricDef = MetricDef {
    name: "tokentap_inter_token_latency_seconds",
    otel_name: "tokentap.inter_token_latency",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Gap between consecutive token-bearing events of a stream; one observation per gap.",
    labels: PER_MODEL,
    buckets: ITL_BUCKETS,
    start: "the tap sees the end of a token-bearing event",
    end: "the tap sees the end of the next token-bearing event of the same stream",
    observed: "every gap, recorded as the second event passes (so a stream that later fails keeps the gaps it had)",
    tests: &[Test::ItlDistribution, Test::MemoryPressure],
};

pub const ITL_PER_TOKEN: MetricDef = MetricDef {
    name: "tokentap_inter_token_latency_per_token_seconds",
    otel_name: "tokentap.inter_token_latency_per_token",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Per-token inter-token latency when an event's token count is known (continuous usage, or estimate_tokens): the gap before an event divided by the tokens it carries, observed once per token (at most 16 per event). Equals the per-event ITL for engines that send one token per event; lower when an engine sends several (speculative decoding, chunked detokenisation).",
    labels: PER_MODEL,
    buckets: ITL_BUCKETS,
    start: "the tap sees the end of a token-bearing event",
    end: "the tap sees the end of the next token-bearing event of the same stream",
    observed: "every gap whose second event's token count is known",
    tests: &[Test::ItlDistribution],
};

/// Most observations of `ITL_PER_TOKEN` per event.
pub const ITL_PER_TOKEN_MAX_OBSERVATIONS: u64 = 16;

pub const TOKENS_PER_EVENT: MetricDef = MetricDef {
    name: "tokentap_tokens_per_event",
    otel_name: "tokentap.tokens_per_event",
    kind: Kind::Histogram,
    unit: Unit::Tokens,
    help: "Output tokens carried by one token-bearing event, when the stream says (continuous usage) or the tap's tokenizer counted them (estimate_tokens).",
    labels: PER_MODEL,
    buckets: TOKENS_PER_EVENT_BUCKETS,
    start: "—",
    end: "—",
    observed: "token-bearing events that carry `usage.completion_tokens` when the previous token event did too (the difference is the event's tokens)",
    tests: &[Test::ItlDistribution],
};

pub const REQUESTS: MetricDef = MetricDef {
    name: "tokentap_requests_total",
    otel_name: "tokentap.requests",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Requests that passed the tap, by outcome; each request counted once when it ends.",
    labels: &[
        L::Tap,
        L::Boundary,
        L::Model,
        L::Operation,
        L::Stream,
        L::Outcome,
    ],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "every request, once, when it ends (pingora `logging`)",
    tests: &[Test::OutputThroughput, Test::Capacity],
};

pub const IN_FLIGHT: MetricDef = MetricDef {
    name: "tokentap_requests_in_flight",
    otel_name: "tokentap.requests.in_flight",
    kind: Kind::Gauge,
    unit: Unit::Requests,
    help: "Requests currently inside the tap (headers received, not yet ended).",
    labels: &[L::Tap, L::Boundary],
    buckets: &[],
    start: "the tap has the request headers",
    end: "the request ends (any outcome)",
    observed: "always current",
    tests: &[Test::Capacity, Test::MemoryPressure],
};

pub const INPUT_TOKENS: MetricDef = MetricDef {
    name: "tokentap_input_tokens_total",
    otel_name: "tokentap.input_tokens",
    kind: Kind::Counter,
    unit: Unit::Tokens,
    help: "Input (prompt) tokens, from the upstream's usage.",
    labels: PER_MODEL,
    buckets: &[],
    start: "—",
    end: "—",
    observed: "requests whose usage reports `prompt_tokens`",
    tests: &[Test::OutputThroughput, Test::LongContext],
};

pub const OUTPUT_TOKENS: MetricDef = MetricDef {
    name: "tokentap_output_tokens_total",
    otel_name: "tokentap.output_tokens",
    kind: Kind::Counter,
    unit: Unit::Tokens,
    help: "Output tokens, by source (usage; estimate: the tap's tokenizer, estimate_tokens, when the stream has no usage; events: counted token-bearing events otherwise).",
    labels: &[L::Tap, L::Boundary, L::Model, L::Operation, L::Source],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "requests whose output count is known",
    tests: &[Test::OutputThroughput, Test::ThroughputLatency],
};

pub const CACHED_TOKENS: MetricDef = MetricDef {
    name: "tokentap_cached_input_tokens_total",
    otel_name: "tokentap.cached_input_tokens",
    kind: Kind::Counter,
    unit: Unit::Tokens,
    help: "Input tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens).",
    labels: PER_MODEL,
    buckets: &[],
    start: "—",
    end: "—",
    observed: "requests whose usage reports cached tokens",
    tests: &[Test::PrefixCache],
};

pub const REASONING_TOKENS: MetricDef = MetricDef {
    name: "tokentap_reasoning_tokens_total",
    otel_name: "tokentap.reasoning_tokens",
    kind: Kind::Counter,
    unit: Unit::Tokens,
    help: "Reasoning tokens (usage.completion_tokens_details.reasoning_tokens), part of the output tokens.",
    labels: PER_MODEL,
    buckets: &[],
    start: "—",
    end: "—",
    observed: "requests whose usage reports reasoning tokens",
    tests: &[Test::OutputThroughput],
};

pub const MEASUREMENT_ERRORS: MetricDef = MetricDef {
    name: "tokentap_measurement_errors_total",
    otel_name: "tokentap.measurement_errors",
    kind: Kind::Counter,
    unit: Unit::Errors,
    help: "Requests tokentap could not fully measure, by reason; their bytes flowed on untouched.",
    labels: &[L::Tap, L::Boundary, L::Reason],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "once per request with a decoding problem (response-side reasons make the outcome `unmeasured`; request-side reasons only make request fields unknown)",
    tests: &[],
};

pub const LABEL_OVERFLOW: MetricDef = MetricDef {
    name: "tokentap_label_overflow_total",
    otel_name: "tokentap.label_overflow",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Requests whose label value was replaced by `other` (cap reached or value not acceptable as a label).",
    labels: &[L::Label],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "each request whose model did not get its own label value",
    tests: &[],
};

pub const BUILD_INFO: MetricDef = MetricDef {
    name: "tokentap_build_info",
    otel_name: "tokentap.build_info",
    kind: Kind::Gauge,
    unit: Unit::Info,
    help: "Always 1; the version label says which tokentap is running.",
    labels: &[L::Version],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "set at start",
    tests: &[],
};

const PAIR: &[Label] = &[L::Outer, L::Inner];
const JOINED: &str = "each joined pair of taps (outer encloses inner), reported once the request's records have settled (`correlation.settle_seconds`)";

pub const BOUNDARY_OVERHEAD: MetricDef = MetricDef {
    name: "tokentap_boundary_overhead_seconds",
    otel_name: "tokentap.boundary.overhead",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Time a layer adds to one request: the outer tap's figure minus the inner tap's, by phase.",
    labels: &[L::Outer, L::Inner, L::Phase],
    buckets: OVERHEAD_BUCKETS,
    start: "`request_path`: the outer tap has the request headers; `ttfb`/`ttft`/`e2e`: the inner tap's TTFB/TTFT/E2E",
    end: "`request_path`: the inner tap has them; otherwise the outer tap's TTFB/TTFT/E2E (each from its own request receipt)",
    observed: "each joined pair (ttfb/ttft when both taps have one); a negative difference (the layer answered without waiting for the inner side) is observed as 0",
    tests: &[Test::GuardrailOverhead, Test::Ttft],
};

pub const RELAY_DELAY: MetricDef = MetricDef {
    name: "tokentap_relay_delay_seconds",
    otel_name: "tokentap.relay.delay",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Per token-bearing event: when the outer tap saw the k-th event minus when the inner tap saw the k-th.",
    labels: PAIR,
    buckets: OVERHEAD_BUCKETS,
    start: "the inner tap sees token event k",
    end: "the outer tap sees token event k",
    observed: "every k both taps saw (up to `correlation.max_events` per request), for each joined pair; negative as 0",
    tests: &[Test::GuardrailOverhead, Test::ItlDistribution],
};

pub const ADDED_JITTER: MetricDef = MetricDef {
    name: "tokentap_added_itl_jitter_seconds",
    otel_name: "tokentap.itl.added_jitter",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Inter-token jitter a layer adds: |gap k at the outer tap - gap k at the inner tap|.",
    labels: PAIR,
    buckets: OVERHEAD_BUCKETS,
    start: "token event k-1 (at each tap)",
    end: "token event k (at each tap)",
    observed: "every gap both taps saw, for each joined pair",
    tests: &[Test::ItlDistribution, Test::GuardrailOverhead],
};

pub const STREAM_BUFFERED: MetricDef = MetricDef {
    name: "tokentap_stream_buffered_total",
    otel_name: "tokentap.stream.buffered",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Streams a layer buffered: the outer tap's first token came after most of the inner stream (share >= correlation.buffered_share, default 0.9).",
    labels: PAIR,
    buckets: &[],
    start: "—",
    end: "—",
    observed: JOINED,
    tests: &[Test::GuardrailOverhead, Test::Ttft],
};

pub const BUFFERED_SHARE: MetricDef = MetricDef {
    name: "tokentap_stream_buffered_ratio",
    otel_name: "tokentap.stream.buffered_ratio",
    kind: Kind::Histogram,
    unit: Unit::Info,
    help: "Share of the inner stream's token events that had passed the inner tap before the outer tap saw its first token.",
    labels: PAIR,
    buckets: SHARE_BUCKETS,
    start: "—",
    end: "—",
    observed: "each joined pair whose inner stream had at least 2 token events and whose outer tap saw a token",
    tests: &[Test::GuardrailOverhead],
};

pub const TOKEN_MISMATCH: MetricDef = MetricDef {
    name: "tokentap_token_count_mismatch_total",
    otel_name: "tokentap.token_count.mismatch",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Joined pairs whose output token counts differ between the outer and the inner tap.",
    labels: PAIR,
    buckets: &[],
    start: "—",
    end: "—",
    observed: JOINED,
    tests: &[Test::OutputThroughput],
};

pub const GUARDRAIL_DURATION: MetricDef = MetricDef {
    name: "tokentap_guardrail_duration_seconds",
    otel_name: "tokentap.guardrail.duration",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Duration of one guardrail call at its tap (request received to last byte), by hop and phase.",
    labels: &[L::Hop, L::GuardPhase],
    buckets: TTFT_BUCKETS,
    start: "the guardrail tap has the request headers",
    end: "its response's last byte passes",
    observed: "every guardrail call, once its request settled: `input` when it started before the calling layer's inner (engine) request, `output` otherwise, `unknown` when it joined no request",
    tests: &[Test::GuardrailOverhead],
};

pub const GUARDRAIL_CALLS: MetricDef = MetricDef {
    name: "tokentap_guardrail_calls_total",
    otel_name: "tokentap.guardrail.calls",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Guardrail calls by hop, phase and verdict (pass/flagged from moderation `flagged` or a guard model's `safe`/`unsafe`; error for failed calls).",
    labels: &[L::Hop, L::GuardPhase, L::Verdict],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "every guardrail call, as for the duration",
    tests: &[Test::GuardrailOverhead],
};

pub const GUARDRAIL_EXPOSED: MetricDef = MetricDef {
    name: "tokentap_guardrail_exposed_seconds",
    otel_name: "tokentap.guardrail.exposed",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    help: "Guardrail time a request waited for, per phase: the union of its calls (parallel calls count once) minus what overlapped the engine request.",
    labels: &[L::Tap, L::GuardPhase],
    buckets: OVERHEAD_BUCKETS,
    start: "—",
    end: "—",
    observed: "each request (labelled with the tap of the layer that called the guardrails) with at least one call in that phase",
    tests: &[Test::GuardrailOverhead],
};

pub const CORRELATION: MetricDef = MetricDef {
    name: "tokentap_correlation_total",
    otel_name: "tokentap.correlation",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Records of this process's taps by how they were joined: by trace id, by fingerprint, not at all, ambiguous (left alone), evicted.",
    labels: &[L::Result],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "every record once it settled (or was evicted), when correlation is on",
    tests: &[Test::GuardrailOverhead],
};

pub const OTLP_EXPORTED: MetricDef = MetricDef {
    name: "tokentap_otlp_exported_total",
    otel_name: "tokentap.otlp.exported",
    kind: Kind::Counter,
    unit: Unit::Info,
    help: "Spans (traces) and metric data points (metrics) the OTLP collector accepted.",
    labels: &[L::Signal],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "after each successful OTLP export (Prometheus only: it reports on OTLP itself)",
    tests: &[],
};

pub const OTLP_DROPPED: MetricDef = MetricDef {
    name: "tokentap_otlp_dropped_total",
    otel_name: "tokentap.otlp.dropped",
    kind: Kind::Counter,
    unit: Unit::Info,
    help: "Spans (traces) and metric data points (metrics) dropped: span queue full, export failed or timed out. Traffic never waits for OTLP.",
    labels: &[L::Signal],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "each span that did not fit the bounded queue; each span or data point of a failed export (Prometheus only)",
    tests: &[],
};

/// Every metric, in documentation order.
pub const ALL: &[&MetricDef] = &[
    &TTFT,
    &TTFT_VISIBLE,
    &TTFB,
    &TIME_TO_FIRST_EVENT,
    &TPOT,
    &REQUEST_DURATION,
    &TOKEN_USAGE,
    &ITL,
    &ITL_PER_TOKEN,
    &TOKENS_PER_EVENT,
    &REQUESTS,
    &IN_FLIGHT,
    &INPUT_TOKENS,
    &OUTPUT_TOKENS,
    &CACHED_TOKENS,
    &REASONING_TOKENS,
    &MEASUREMENT_ERRORS,
    &LABEL_OVERFLOW,
    &BUILD_INFO,
    &BOUNDARY_OVERHEAD,
    &RELAY_DELAY,
    &ADDED_JITTER,
    &STREAM_BUFFERED,
    &BUFFERED_SHARE,
    &TOKEN_MISMATCH,
    &GUARDRAIL_DURATION,
    &GUARDRAIL_CALLS,
    &GUARDRAIL_EXPOSED,
    &CORRELATION,
    &OTLP_EXPORTED,
    &OTLP_DROPPED,
    &W_REQUEST_RATE,
    &W_OUTPUT_RATE,
    &W_INPUT_RATE,
    &W_GOODPUT_REQUESTS,
    &W_GOODPUT_TOKENS,
    &W_ATTAINMENT,
    &W_CONCURRENCY,
    &W_TOKENS_IN_FLIGHT,
    &CAPACITY,
    &KNEE,
    &W_TTFT,
    &W_TPOT,
    &W_ITL,
    &W_SAMPLES,
    &W_STALLS,
    &W_STALL_RATIO,
    &W_FAKE_STREAMS,
    &W_JAIN,
    &W_MAX_MIN,
    &W_TENANT_TTFT,
    &W_CACHED_RATIO,
    &W_CACHE_HIT_RATIO,
    &W_CACHE_TTFT,
    &W_PREFIX_REUSE,
    &W_CONTEXT_TTFT,
    &W_CONTEXT_PREFILL,
    &W_TTFT_SLOPE,
    &W_TTFT_SLOPE_R2,
    &ENGINE_KV_USAGE,
    &ENGINE_PREEMPTIONS,
    &ENGINE_SCRAPES,
    &WINDOW_SAMPLES_DROPPED,
    &RECORD_LOG_LINES,
    &RECORD_LOG_DROPPED,
    &CONFIG_RELOADS,
    &CONFIG_LAST_SUCCESS,
    &CONFIG_RESTART_PENDING,
    &REJECTED,
    &CONNECTIONS_OPEN,
    &USAGE_INJECTION,
];

pub const CONFIG_RELOADS: MetricDef = MetricDef {
    name: "tokentap_config_reloads_total",
    otel_name: "tokentap.config.reloads",
    kind: Kind::Counter,
    unit: Unit::Info,
    help: "Config reloads (SIGHUP or a changed watched file) by result: applied (taps swapped), unchanged (valid, nothing live to change), rejected (invalid: the running config stays).",
    labels: &[L::ReloadResult],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "every reload attempt",
    tests: &[],
};

pub const CONFIG_LAST_SUCCESS: MetricDef = MetricDef {
    name: "tokentap_config_last_reload_success_timestamp_seconds",
    otel_name: "tokentap.config.last_reload_success",
    kind: Kind::Gauge,
    unit: Unit::Seconds,
    help: "Unix time of the last successful config load (startup or reload).",
    labels: &[],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "at startup and after every applied or unchanged reload (Prometheus only)",
    tests: &[],
};

pub const CONFIG_RESTART_PENDING: MetricDef = MetricDef {
    name: "tokentap_config_restart_pending",
    otel_name: "tokentap.config.restart_pending",
    kind: Kind::Gauge,
    unit: Unit::Info,
    help: "Changed config keys that the last successful reload could not apply live (listen addresses, the set of taps, process-wide sections): a restart applies them.",
    labels: &[],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "after every successful load (Prometheus only)",
    tests: &[],
};

mod window;
pub use window::*;

/// Renders the metric reference section of `docs/metrics.md`.
pub fn render_markdown() -> String {
    let mut out = String::new();
    for m in ALL {
        let labels: Vec<_> = m
            .labels
            .iter()
            .map(|l| format!("`{}`", l.as_str()))
            .collect();
        let tests: Vec<_> = m.tests.iter().map(|t| t.as_str()).collect();
        out.push_str(&format!("### `{}`\n\n{}\n\n", m.name, m.help));
        out.push_str("| | |\n|---|---|\n");
        out.push_str(&format!("| type | {} |\n", m.kind.as_str()));
        out.push_str(&format!("| unit | {} |\n", m.unit.otel()));
        out.push_str(&format!("| labels | {} |\n", labels.join(", ")));
        if m.start != "—" {
            out.push_str(&format!("| start | {} |\n", m.start));
            out.push_str(&format!("| end | {} |\n", m.end));
        }
        out.push_str(&format!("| observed | {} |\n", m.observed));
        if !m.buckets.is_empty() {
            let b: Vec<_> = m.buckets.iter().map(|b| b.to_string()).collect();
            out.push_str(&format!("| buckets | {} |\n", b.join(", ")));
        }
        out.push_str(&format!("| OpenTelemetry name | `{}` |\n", m.otel_name));
        let tests = if tests.is_empty() {
            "— (health of the measurement)".to_string()
        } else {
            tests.join(", ")
        };
        out.push_str(&format!("| methodology test | {tests} |\n\n"));
    }
    out.push_str(
        "### Label values\n\n| label | values | OpenTelemetry attribute |\n|---|---|---|\n",
    );
    for l in [
        Label::Tap,
        Label::Boundary,
        Label::Model,
        Label::Operation,
        Label::Stream,
        Label::Outcome,
        Label::TokenType,
        Label::Source,
        Label::Reason,
        Label::Label,
        Label::Version,
        Label::Outer,
        Label::Inner,
        Label::Phase,
        Label::Hop,
        Label::GuardPhase,
        Label::Verdict,
        Label::Result,
        Label::Signal,
        Label::Quantile,
        Label::Stat,
        Label::InputKind,
        Label::Tenant,
        Label::Bucket,
        Label::Prefix,
        Label::Cache,
        Label::Figure,
        Label::Engine,
        Label::ScrapeResult,
        Label::ReloadResult,
    ] {
        out.push_str(&format!(
            "| `{}` | {} | `{}` |\n",
            l.as_str(),
            l.values(),
            l.otel_key()
        ));
    }
    out
}

pub const USAGE_INJECTION: MetricDef = MetricDef {
    name: "tokentap_usage_injection_total",
    otel_name: "tokentap.usage_injection",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Usage injection (taps with inject_usage: true), per eligible request (POST, OpenAI chat/completions or completions, Content-Length at most 64 KiB): injected (stream_options.include_usage added, Content-Length corrected), then stripped when the usage-only chunk it caused was cut from the client's stream; left as is: not_streaming, already_requested, not_json, too_large (a body without Content-Length or over 64 KiB); strip_failed when a response event outgrew the stripper's 1 MiB hold (the client then saw the usage chunk).",
    labels: &[L::Tap, L::Boundary, L::InjectResult],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "when the request body has been read (injected or left), and when the response ends (stripped, strip_failed)",
    tests: &[Test::OutputThroughput],
};

pub const REJECTED: MetricDef = MetricDef {
    name: "tokentap_rejected_total",
    otel_name: "tokentap.rejected",
    kind: Kind::Counter,
    unit: Unit::Requests,
    help: "Requests and connections tokentap refused before anything reached the upstream: a request head not complete within timeouts.request_header_seconds (connection closed), a head over limits.max_header_bytes / max_headers (431) or max_uri_bytes (414), a connection over limits.max_connections or a request over limits.max_streams (503). Refused requests are not in tokentap_requests_total.",
    labels: &[L::Tap, L::Boundary, L::RejectReason],
    buckets: &[],
    start: "—",
    end: "—",
    observed: "each refusal, when it happens",
    tests: &[Test::Capacity],
};

pub const CONNECTIONS_OPEN: MetricDef = MetricDef {
    name: "tokentap_client_connections",
    otel_name: "tokentap.client.connections",
    kind: Kind::Gauge,
    unit: Unit::Connections,
    help: "Client connections currently open on the tap (admitted under limits.max_connections).",
    labels: &[L::Tap, L::Boundary],
    buckets: &[],
    start: "the connection is accepted and admitted",
    end: "the connection closes",
    observed: "always current",
    tests: &[],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let mut names = std::collections::HashSet::new();
        for m in ALL {
            assert!(names.insert(m.name), "duplicate {}", m.name);
            assert!(m
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            if m.unit == Unit::Seconds {
                assert!(m.name.ends_with("_seconds"), "{}", m.name);
            }
            if m.unit == Unit::Ratio {
                assert!(
                    m.name.ends_with("_ratio") || m.name.ends_with("_index"),
                    "{}",
                    m.name
                );
            }
            assert_eq!(
                m.kind == Kind::Histogram,
                !m.buckets.is_empty(),
                "{}",
                m.name
            );
            assert!(
                m.buckets.windows(2).all(|w| w[0] < w[1]),
                "{} buckets increase",
                m.name
            );
        }
    }

    #[test]
    fn otel_advised_buckets_are_kept() {
        let otel_ttft = [
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0,
        ];
        assert_eq!(&TTFT_BUCKETS[..otel_ttft.len()], &otel_ttft);
        assert_eq!(TTFT_BUCKETS.last(), Some(&2560.0));
        let otel_tpot = [
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
        ];
        assert_eq!(&TPOT_BUCKETS[..otel_tpot.len()], &otel_tpot);
        assert_eq!(DURATION_BUCKETS[13], 81.92);
    }
}
