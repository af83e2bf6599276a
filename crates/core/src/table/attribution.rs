//! The table's entries for what the correlator concludes once the records
//! of one request at several taps are joined: boundary overhead, relay
//! delay, added jitter, buffering, token mismatches, guardrail calls and
//! exposure, and the join counters.

use super::*;
use crate::labels::*;

const JOINED: &str = "each joined pair of taps (outer encloses inner), reported once the request's records have settled (`correlation.settle_seconds`)";

metrics! {
    pub const BOUNDARY_OVERHEAD: Metric<Overhead, Histogram> = Metric::new(Spec {
        name: "tokentap_boundary_overhead_seconds",
        otel_name: "tokentap.boundary.overhead",
            unit: Unit::Seconds,
        help: "Time a layer adds to one request: the outer tap's figure minus the inner tap's, by phase.",
        buckets: OVERHEAD_BUCKETS,
        start: "`request_path`: the outer tap has the request headers; `ttfb`/`ttft`/`e2e`: the inner tap's TTFB/TTFT/E2E",
        end: "`request_path`: the inner tap has them; otherwise the outer tap's TTFB/TTFT/E2E (each from its own request receipt)",
        observed: "each joined pair (ttfb/ttft when both taps have one); a negative difference (the layer answered without waiting for the inner side) is observed as 0. `tokentap join` (taps on different machines, each on its own clock) observes ttfb, ttft and e2e, not request_path (a difference of two taps' start times needs one clock)",
        tests: &[Test::GuardrailOverhead, Test::Ttft],
    });

    pub const RELAY_DELAY: Metric<Pair, Histogram> = Metric::new(Spec {
        name: "tokentap_relay_delay_seconds",
        otel_name: "tokentap.relay.delay",
            unit: Unit::Seconds,
        help: "Per token-bearing event: when the outer tap saw the k-th event minus when the inner tap saw the k-th.",
        buckets: OVERHEAD_BUCKETS,
        start: "the inner tap sees token event k",
        end: "the outer tap sees token event k",
        observed: "every k both taps saw (up to `correlation.max_events` per request), for each joined pair of one process (not in `tokentap join`: it needs one clock); negative as 0",
        tests: &[Test::GuardrailOverhead, Test::ItlDistribution],
    });

    pub const RELAY_AFTER_FIRST: Metric<Pair, Histogram> = Metric::new(Spec {
        name: "tokentap_relay_delay_after_first_token_seconds",
        otel_name: "tokentap.relay.delay_after_first_token",
            unit: Unit::Seconds,
        help: "Per token-bearing event after the first: how much later, after its own first token event, the outer tap saw the k-th event than the inner tap did after its first. Each side is a duration on one tap's clock, so this holds across machines (tokentap join); tokentap_relay_delay_seconds needs one clock.",
        buckets: OVERHEAD_BUCKETS,
        start: "the inner tap: its first token event to its k-th",
        end: "the outer tap: its first token event to its k-th (the difference is observed)",
        observed: "every k ≥ 1 both taps saw (up to `correlation.max_events` per request), for each joined pair, in a process and in `tokentap join`; negative as 0",
        tests: &[Test::GuardrailOverhead, Test::ItlDistribution],
    });

    pub const ADDED_JITTER: Metric<Pair, Histogram> = Metric::new(Spec {
        name: "tokentap_added_itl_jitter_seconds",
        otel_name: "tokentap.itl.added_jitter",
            unit: Unit::Seconds,
        help: "Inter-token jitter a layer adds: |gap k at the outer tap - gap k at the inner tap|.",
        buckets: OVERHEAD_BUCKETS,
        start: "token event k-1 (at each tap)",
        end: "token event k (at each tap)",
        observed: "every gap both taps saw, for each joined pair",
        tests: &[Test::ItlDistribution, Test::GuardrailOverhead],
    });

    pub const STREAM_BUFFERED: Metric<Pair, Counter> = Metric::new(Spec {
        name: "tokentap_stream_buffered_total",
        otel_name: "tokentap.stream.buffered",
            unit: Unit::Requests,
        help: "Streams a layer buffered: the outer tap's first token came after most of the inner stream (share >= correlation.buffered_share, default 0.9).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: JOINED,
        tests: &[Test::GuardrailOverhead, Test::Ttft],
    });

    pub const BUFFERED_SHARE: Metric<Pair, Histogram> = Metric::new(Spec {
        name: "tokentap_stream_buffered_ratio",
        otel_name: "tokentap.stream.buffered_ratio",
            unit: Unit::Info,
        help: "Share of the inner stream's token events that had passed the inner tap before the outer tap saw its first token.",
        buckets: SHARE_BUCKETS,
        start: "—",
        end: "—",
        observed: "each joined pair whose inner stream had at least 2 token events and whose outer tap saw a token",
        tests: &[Test::GuardrailOverhead],
    });

    pub const TOKEN_MISMATCH: Metric<Pair, Counter> = Metric::new(Spec {
        name: "tokentap_token_count_mismatch_total",
        otel_name: "tokentap.token_count.mismatch",
            unit: Unit::Requests,
        help: "Joined pairs whose output token counts differ between the outer and the inner tap.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: JOINED,
        tests: &[Test::OutputThroughput],
    });

    pub const GUARDRAIL_DURATION: Metric<GuardHop, Histogram> = Metric::new(Spec {
        name: "tokentap_guardrail_duration_seconds",
        otel_name: "tokentap.guardrail.duration",
            unit: Unit::Seconds,
        help: "Duration of one guardrail call at its tap (request received to last byte), by hop and phase.",
        buckets: TTFT_BUCKETS,
        start: "the guardrail tap has the request headers",
        end: "its response's last byte passes",
        observed: "every guardrail call, once its request settled: `input` when it started before the calling layer's inner (engine) request, `output` otherwise, `unknown` when it joined no request",
        tests: &[Test::GuardrailOverhead],
    });

    pub const GUARDRAIL_CALLS: Metric<GuardVerdict, Counter> = Metric::new(Spec {
        name: "tokentap_guardrail_calls_total",
        otel_name: "tokentap.guardrail.calls",
            unit: Unit::Requests,
        help: "Guardrail calls by hop, phase and verdict (pass/flagged from moderation `flagged` or a guard model's `safe`/`unsafe`; error for failed calls).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "every guardrail call, as for the duration",
        tests: &[Test::GuardrailOverhead],
    });

    pub const GUARDRAIL_EXPOSED: Metric<GuardExposed, Histogram> = Metric::new(Spec {
        name: "tokentap_guardrail_exposed_seconds",
        otel_name: "tokentap.guardrail.exposed",
            unit: Unit::Seconds,
        help: "Guardrail time a request waited for, per phase: the union of its calls (parallel calls count once) minus what overlapped the engine request.",
        buckets: OVERHEAD_BUCKETS,
        start: "—",
        end: "—",
        observed: "each request (labelled with the tap of the layer that called the guardrails) with at least one call in that phase. `tokentap join` observes it only for a single input call (its whole duration: it ran before the engine request); overlapping calls and output calls need one clock",
        tests: &[Test::GuardrailOverhead],
    });

    pub const CORRELATION: Metric<Correlation, Counter> = Metric::new(Spec {
        name: "tokentap_correlation_total",
        otel_name: "tokentap.correlation",
            unit: Unit::Requests,
        help: "Records of this process's taps by how they were joined: by trace id, by fingerprint, not at all, ambiguous (left alone), evicted.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "every record once it settled (or was evicted), when correlation is on",
        tests: &[Test::GuardrailOverhead],
    });
}
