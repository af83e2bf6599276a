//! The table's entries about tokentap itself: label overflow, the build,
//! OTLP export, config reloads, client-side refusals and connections, and
//! usage injection.

use super::*;
use crate::labels::*;

metrics! {
    pub const LABEL_OVERFLOW: Metric<Overflow, Counter> = Metric::new(Spec {
        name: "tokentap_label_overflow_total",
        otel_name: "tokentap.label_overflow",
            unit: Unit::Requests,
        help: "Requests whose label value was replaced by `other` (cap reached or value not acceptable as a label).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each request whose model did not get its own label value",
        tests: &[],
    });

    pub const BUILD_INFO: Metric<Build, Gauge> = Metric::new(Spec {
        name: "tokentap_build_info",
        otel_name: "tokentap.build_info",
            unit: Unit::Info,
        help: "Always 1; the version label says which tokentap is running.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "set at start",
        tests: &[],
    });

    pub const OTLP_EXPORTED: Metric<OtlpSignal, Counter> = Metric::new(Spec {
        name: "tokentap_otlp_exported_total",
        otel_name: "tokentap.otlp.exported",
            unit: Unit::Info,
        help: "Spans (traces) and metric data points (metrics) the OTLP collector accepted.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "after each successful OTLP export (Prometheus only: it reports on OTLP itself)",
        tests: &[],
    });

    pub const OTLP_DROPPED: Metric<OtlpSignal, Counter> = Metric::new(Spec {
        name: "tokentap_otlp_dropped_total",
        otel_name: "tokentap.otlp.dropped",
            unit: Unit::Info,
        help: "Spans (traces) and metric data points (metrics) dropped: span queue full, export failed or timed out. Traffic never waits for OTLP.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each span that did not fit the bounded queue; each span or data point of a failed export (Prometheus only)",
        tests: &[],
    });

    pub const CONFIG_RELOADS: Metric<Reload, Counter> = Metric::new(Spec {
        name: "tokentap_config_reloads_total",
        otel_name: "tokentap.config.reloads",
            unit: Unit::Info,
        help: "Config reloads (SIGHUP or a changed watched file) by result: applied (taps swapped), unchanged (valid, nothing live to change), rejected (invalid: the running config stays).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "every reload attempt",
        tests: &[],
    });

    pub const CONFIG_LAST_SUCCESS: Metric<NoLabels, Gauge> = Metric::new(Spec {
        name: "tokentap_config_last_reload_success_timestamp_seconds",
        otel_name: "tokentap.config.last_reload_success",
            unit: Unit::Seconds,
        help: "Unix time of the last successful config load (startup or reload).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "at startup and after every applied or unchanged reload (Prometheus only)",
        tests: &[],
    });

    pub const CONFIG_RESTART_PENDING: Metric<NoLabels, Gauge> = Metric::new(Spec {
        name: "tokentap_config_restart_pending",
        otel_name: "tokentap.config.restart_pending",
            unit: Unit::Info,
        help: "Changed config keys that the last successful reload could not apply live (listen addresses, the set of taps, process-wide sections): a restart applies them.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "after every successful load (Prometheus only)",
        tests: &[],
    });

    pub const USAGE_INJECTION: Metric<Injection, Counter> = Metric::new(Spec {
        name: "tokentap_usage_injection_total",
        otel_name: "tokentap.usage_injection",
            unit: Unit::Requests,
        help: "Usage injection (taps with inject_usage: true), per eligible request (POST, OpenAI chat/completions or completions, Content-Length at most 64 KiB): injected (stream_options.include_usage added, Content-Length corrected), then stripped when the usage-only chunk it caused was cut from the client's stream; left as is: not_streaming, already_requested, not_json, too_large (a body without Content-Length or over 64 KiB); strip_failed when a response event outgrew the stripper's 1 MiB hold (the client then saw the usage chunk).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "when the request body has been read (injected or left), and when the response ends (stripped, strip_failed)",
        tests: &[Test::OutputThroughput],
    });

    pub const REJECTED: Metric<Rejected, Counter> = Metric::new(Spec {
        name: "tokentap_rejected_total",
        otel_name: "tokentap.rejected",
            unit: Unit::Requests,
        help: "Requests and connections tokentap refused before anything reached the upstream: a request head not complete within timeouts.request_header_seconds (connection closed), a head over limits.max_header_bytes / max_headers (431) or max_uri_bytes (414), a connection over limits.max_connections or a request over limits.max_streams (503). Refused requests are not in tokentap_requests_total.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each refusal, when it happens",
        tests: &[Test::Capacity],
    });

    pub const STAMP_FALLBACKS: Metric<StampFallbacks, Counter> = Metric::new(Spec {
        name: "tokentap_receive_stamp_fallbacks_total",
        otel_name: "tokentap.receive_stamp.fallbacks",
            unit: Unit::Requests,
        help: "Upstream reads timed at the read instead of at the kernel's receive stamp, because the stamp contradicted the monotonic clock: it mapped before the request started or more than 10 ms before the piece before it (earlier: the wall clock stepped forward between the stamp and the read), after the read itself (later: stepped back), or over a minute back (too_old). Durations stay positive: such a piece is timed when it was read.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each upstream read (response head or body piece) whose stamp was not used; reads without any stamp are not counted",
        tests: &[Test::Ttft, Test::ItlDistribution],
    });

    pub const SINK_PANICS: Metric<SinkPanicLabels, Counter> = Metric::new(Spec {
        name: "tokentap_sink_panics_total",
        otel_name: "tokentap.sink.panics",
        unit: Unit::Requests,
        help: "Finished requests one of a tap's sinks panicked on: that sink's view of the request is lost (its metrics, access-log line, span, live analyses, record-log line, fleet series or correlator record), every other sink still got it, and the bytes had long been forwarded.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each panic, when a sink's guard catches it",
        tests: &[],
    });

    pub const LISTENER_REFUSED: Metric<ListenerRefusals, Counter> = Metric::new(Spec {
        name: "tokentap_listener_refused_total",
        otel_name: "tokentap.listener.refused",
        unit: Unit::Requests,
        help: "Connections and requests a listener that is not a tap refused: the admin listener and the joiner's OTLP/HTTP and OTLP/gRPC receivers. too_many_connections (over its max_connections), header_timeout (a request head, or gRPC's connection preface, not complete within its request_header_seconds: the connection is closed), body_timeout (an OTLP/HTTP body not read within request_body_seconds: 408), unauthorized (the receiver's bearer token missing or wrong: 401, gRPC UNAUTHENTICATED).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each refusal, when it happens",
        tests: &[],
    });

    pub const LISTENER_CONNECTIONS: Metric<ListenerLabels, Gauge> = Metric::new(Spec {
        name: "tokentap_listener_connections",
        otel_name: "tokentap.listener.connections",
        unit: Unit::Connections,
        help: "Connections open on a listener that is not a tap (admitted under its max_connections).",
        buckets: &[],
        start: "the connection is accepted and admitted",
        end: "the connection closes",
        observed: "always current",
        tests: &[],
    });

    pub const CONNECTIONS_OPEN: Metric<TapLabels, Gauge> = Metric::new(Spec {
        name: "tokentap_client_connections",
        otel_name: "tokentap.client.connections",
            unit: Unit::Connections,
        help: "Client connections currently open on the tap (admitted under limits.max_connections).",
        buckets: &[],
        start: "the connection is accepted and admitted",
        end: "the connection closes",
        observed: "always current",
        tests: &[],
    });

    pub const STALE_UPSTREAM: Metric<TapLabels, Counter> = Metric::new(Spec {
        name: "tokentap_upstream_stale_connections_total",
        otel_name: "tokentap.upstream.stale_connections",
            unit: Unit::Connections,
        help: "Pooled upstream connections the upstream had already closed when a request was about to be written on one (servers that answer Keep-Alive yet close after every stream, such as llama.cpp's llama-server): the request was sent on a new connection instead, none of it having left, so the client sees no error. Once most reused connections of a tap were found closed (two at least), the tap asks its upstream for `Connection: close` and this stops growing.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each time, before the request is sent again",
        tests: &[],
    });

    pub const SHUTDOWN_CUT: Metric<TapLabels, Counter> = Metric::new(Spec {
        name: "tokentap_shutdown_cut_total",
        otel_name: "tokentap.shutdown.cut",
            unit: Unit::Requests,
        help: "Requests still in flight when the shutdown grace (server.grace_period_seconds after SIGTERM and the drain notice) ended: cut by the stop, without a record. The process exits as soon as none is in flight, so this counts only streams longer than the grace.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "once, when the grace ends with requests in flight (exported by the final OTLP flush)",
        tests: &[],
    });
}
