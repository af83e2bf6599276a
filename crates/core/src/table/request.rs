//! The table's per-request entries: what every request and every token
//! event of one tap adds (TTFT, TTFB, TPOT, ITL, E2E, tokens, outcomes,
//! measurement errors, in flight).

use super::*;
use crate::labels::*;

pub(super) const REQUEST_START: &str = "the tap has the request headers (pingora `new_ctx`)";

/// Most observations of `ITL_PER_TOKEN` per event.
pub const ITL_PER_TOKEN_MAX_OBSERVATIONS: u64 = 16;

metrics! {
    pub const TTFT: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "gen_ai_server_time_to_first_token_seconds",
        otel_name: "gen_ai.server.time_to_first_token",
            unit: Unit::Seconds,
        help: "Time to first token: request headers received by the tap to the first event carrying output (content, reasoning or a tool-call delta).",
        buckets: TTFT_BUCKETS,
        start: REQUEST_START,
        end: "the tap sees the end of the first SSE event with non-empty content, reasoning, refusal, completion text or a tool-call delta (role-only, empty, keep-alive and usage-only events never count)",
        observed: "streaming requests that reached a first token, whatever their outcome",
        tests: &[Test::Ttft, Test::ThroughputLatency, Test::LongContext],
    });

    pub const TTFT_VISIBLE: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "tokentap_time_to_first_visible_token_seconds",
        otel_name: "tokentap.time_to_first_visible_token",
            unit: Unit::Seconds,
        help: "Time to first visible token: like TTFT but reasoning does not count.",
        buckets: TTFT_BUCKETS,
        start: REQUEST_START,
        end: "the tap sees the end of the first event with visible output (content, refusal, completion text or a tool-call delta; not reasoning)",
        observed: "streaming requests that reached visible output",
        tests: &[Test::Ttft],
    });

    pub const TTFB: Metric<PerModelStream, Histogram> = Metric::new(Spec {
        name: "tokentap_time_to_first_byte_seconds",
        otel_name: "tokentap.time_to_first_byte",
            unit: Unit::Seconds,
        help: "Time to first byte: request headers received by the tap to response headers received from the upstream.",
        buckets: TTFT_BUCKETS,
        start: REQUEST_START,
        end: "the upstream's final (non-1xx) response header is parsed (pingora `upstream_response_filter`)",
        observed: "every request that got response headers",
        tests: &[Test::Ttft],
    });

    pub const TIME_TO_FIRST_EVENT: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "tokentap_time_to_first_event_seconds",
        otel_name: "tokentap.time_to_first_event",
            unit: Unit::Seconds,
        help: "Time to first SSE event of any kind (role-only and usage events included, comments excluded).",
        buckets: TTFT_BUCKETS,
        start: REQUEST_START,
        end: "the tap sees the end of the first dispatched SSE event",
        observed: "streaming requests that got an event",
        tests: &[Test::Ttft],
    });

    pub const TPOT: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "gen_ai_server_time_per_output_token_seconds",
        otel_name: "gen_ai.server.time_per_output_token",
            unit: Unit::Seconds,
        help: "Time per output token after the first: (E2E - TTFT) / (output tokens - 1), per request.",
        buckets: TPOT_BUCKETS,
        start: "the first token (TTFT)",
        end: "the last byte of the response (E2E), divided by output tokens - 1",
        observed: "streaming requests with outcome `ok` and at least 2 output tokens",
        tests: &[
            Test::OutputThroughput,
            Test::ThroughputLatency,
            Test::LongContext,
        ],
    });

    pub const REQUEST_DURATION: Metric<PerRequest, Histogram> = Metric::new(Spec {
        name: "gen_ai_server_request_duration_seconds",
        otel_name: "gen_ai.server.request.duration",
            unit: Unit::Seconds,
        help: "End-to-end request duration at the tap: request headers received to last response byte passed on (or the failure).",
        buckets: DURATION_BUCKETS,
        start: REQUEST_START,
        end: "the last response body piece passes the tap (upstream end of stream); for failures, the moment the failure is handled (pingora `logging`)",
        observed: "every request",
        tests: &[Test::ThroughputLatency, Test::Capacity],
    });

    pub const TOKEN_USAGE: Metric<TokenUsage, Histogram> = Metric::new(Spec {
        name: "gen_ai_client_token_usage",
        otel_name: "gen_ai.client.token.usage",
            unit: Unit::Tokens,
        help: "Tokens per request, by type (input from usage; output from usage, else counted events).",
        buckets: TOKEN_BUCKETS,
        start: "—",
        end: "—",
        observed: "requests whose count is known (input: `usage.prompt_tokens`; output: `usage.completion_tokens`, else token-bearing choice deltas of a fully decoded stream)",
        tests: &[Test::OutputThroughput, Test::LongContext],
    });

    pub const ITL: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "tokentap_inter_token_latency_seconds",
        otel_name: "tokentap.inter_token_latency",
            unit: Unit::Seconds,
        help: "Gap between consecutive token-bearing events of a stream; one observation per gap.",
        buckets: ITL_BUCKETS,
        start: "the tap sees the end of a token-bearing event",
        end: "the tap sees the end of the next token-bearing event of the same stream",
        observed: "every gap, recorded as the second event passes (so a stream that later fails keeps the gaps it had)",
        tests: &[Test::ItlDistribution, Test::MemoryPressure],
    });

    pub const ITL_PER_TOKEN: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "tokentap_inter_token_latency_per_token_seconds",
        otel_name: "tokentap.inter_token_latency_per_token",
            unit: Unit::Seconds,
        help: "Per-token inter-token latency when an event's token count is known (continuous usage, or estimate_tokens): the gap before an event divided by the tokens it carries, observed once per token (at most 16 per event). Equals the per-event ITL for engines that send one token per event; lower when an engine sends several (speculative decoding, chunked detokenisation).",
        buckets: ITL_BUCKETS,
        start: "the tap sees the end of a token-bearing event",
        end: "the tap sees the end of the next token-bearing event of the same stream",
        observed: "every gap whose second event's token count is known",
        tests: &[Test::ItlDistribution],
    });

    pub const TOKENS_PER_EVENT: Metric<PerModel, Histogram> = Metric::new(Spec {
        name: "tokentap_tokens_per_event",
        otel_name: "tokentap.tokens_per_event",
            unit: Unit::Tokens,
        help: "Output tokens carried by one token-bearing event, when the stream says (continuous usage) or the tap's tokenizer counted them (estimate_tokens).",
        buckets: TOKENS_PER_EVENT_BUCKETS,
        start: "—",
        end: "—",
        observed: "token-bearing events that carry `usage.completion_tokens` when the previous token event did too (the difference is the event's tokens)",
        tests: &[Test::ItlDistribution],
    });

    pub const REQUESTS: Metric<PerRequest, Counter> = Metric::new(Spec {
        name: "tokentap_requests_total",
        otel_name: "tokentap.requests",
            unit: Unit::Requests,
        help: "Requests that passed the tap, by outcome; each request counted once when it ends.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "every request, once, when it ends (pingora `logging`)",
        tests: &[Test::OutputThroughput, Test::Capacity],
    });

    pub const IN_FLIGHT: Metric<TapLabels, Gauge> = Metric::new(Spec {
        name: "tokentap_requests_in_flight",
        otel_name: "tokentap.requests.in_flight",
            unit: Unit::Requests,
        help: "Requests currently inside the tap (headers received, not yet ended).",
        buckets: &[],
        start: "the tap has the request headers",
        end: "the request ends (any outcome)",
        observed: "always current",
        tests: &[Test::Capacity, Test::MemoryPressure],
    });

    pub const INPUT_TOKENS: Metric<PerModel, Counter> = Metric::new(Spec {
        name: "tokentap_input_tokens_total",
        otel_name: "tokentap.input_tokens",
            unit: Unit::Tokens,
        help: "Input (prompt) tokens, from the upstream's usage.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "requests whose usage reports `prompt_tokens`",
        tests: &[Test::OutputThroughput, Test::LongContext],
    });

    pub const OUTPUT_TOKENS: Metric<OutputTokens, Counter> = Metric::new(Spec {
        name: "tokentap_output_tokens_total",
        otel_name: "tokentap.output_tokens",
            unit: Unit::Tokens,
        help: "Output tokens, by source (usage; estimate: the tap's tokenizer, estimate_tokens, when the stream has no usage; events: counted token-bearing events otherwise).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "requests whose output count is known",
        tests: &[Test::OutputThroughput, Test::ThroughputLatency],
    });

    pub const CACHED_TOKENS: Metric<PerModel, Counter> = Metric::new(Spec {
        name: "tokentap_cached_input_tokens_total",
        otel_name: "tokentap.cached_input_tokens",
            unit: Unit::Tokens,
        help: "Input tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "requests whose usage reports cached tokens",
        tests: &[Test::PrefixCache],
    });

    pub const REASONING_TOKENS: Metric<PerModel, Counter> = Metric::new(Spec {
        name: "tokentap_reasoning_tokens_total",
        otel_name: "tokentap.reasoning_tokens",
            unit: Unit::Tokens,
        help: "Reasoning tokens (usage.completion_tokens_details.reasoning_tokens), part of the output tokens.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "requests whose usage reports reasoning tokens",
        tests: &[Test::OutputThroughput],
    });

    pub const MEASUREMENT_ERRORS: Metric<Unmeasured, Counter> = Metric::new(Spec {
        name: "tokentap_measurement_errors_total",
        otel_name: "tokentap.measurement_errors",
            unit: Unit::Errors,
        help: "Requests tokentap could not fully measure, by reason; their bytes flowed on untouched.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "once per request with a decoding problem (response-side reasons make the outcome `unmeasured`; request-side reasons only make request fields unknown)",
        tests: &[],
    });
}
