//! The canonical table's entries for the windowed analyses (`analysis`):
//! gauges set each time a window closes, from the requests that completed in
//! it (see `docs/analyses.md`), plus the engine-scrape and record-log
//! counters. Part of `table::ALL`; kept apart only to keep files small.
//!
//! A window gauge is absent while its figure is not available (too few
//! samples for a percentile, no SLO configured, one tenant...): dashboards
//! see a gap, never a made-up number.

use super::*;
use crate::labels::*;

const WINDOW_START: &str =
    "the window opens (every `analysis.window_seconds`, aligned to the process start)";
const WINDOW_END: &str = "the window closes; the value stays until the next window closes";
const ENGINE_START: &str = "—";

const fn window<L: LabelSet>(
    name: &'static str,
    otel_name: &'static str,
    unit: Unit,
    help: &'static str,
    observed: &'static str,
    tests: &'static [Test],
) -> Metric<L, WindowGauge> {
    Metric::new(Spec {
        name,
        otel_name,
        unit,
        help,
        buckets: &[],
        start: WINDOW_START,
        end: WINDOW_END,
        observed,
        tests,
    })
}

const COMPLETED: &str = "requests (chat and completions) that completed in the window";

metrics! {
    pub const W_REQUEST_RATE: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_requests_per_second",
        "tokentap.window.request_rate",
        Unit::RequestsPerSecond,
        "Chat and completion requests that completed in the last window, per second (all outcomes but unmeasured).",
        COMPLETED,
        &[Test::OutputThroughput],
    );

    pub const W_OUTPUT_RATE: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_output_tokens_per_second",
        "tokentap.window.output_token_rate",
        Unit::TokensPerSecond,
        "Output tokens of the requests that completed in the last window, per second of window.",
        COMPLETED,
        &[Test::OutputThroughput, Test::ThroughputLatency],
    );

    pub const W_INPUT_RATE: Metric<TapInput, WindowGauge> = window(    "tokentap_window_input_tokens_per_second",
        "tokentap.window.input_token_rate",
        Unit::TokensPerSecond,
        "Input tokens (usage) of the requests that completed in the last window, per second: `all`, or `uncached` (input minus cached tokens).",
        COMPLETED,
        &[Test::OutputThroughput, Test::PrefixCache],
    );

    pub const W_GOODPUT_REQUESTS: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_goodput_requests_per_second",
        "tokentap.window.goodput.request_rate",
        Unit::RequestsPerSecond,
        "Requests of the last window that completed and met every configured SLO (TTFT, TPOT, E2E), per second.",
        "windows with requests, when `analysis.slo` sets at least one objective",
        &[Test::OutputThroughput, Test::Capacity],
    );

    pub const W_GOODPUT_TOKENS: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_goodput_output_tokens_per_second",
        "tokentap.window.goodput.output_token_rate",
        Unit::TokensPerSecond,
        "Output tokens of the requests that met every configured SLO, per second of window.",
        "as for the goodput request rate",
        &[Test::OutputThroughput],
    );

    pub const W_ATTAINMENT: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_slo_attainment_ratio",
        "tokentap.window.slo_attainment",
        Unit::Ratio,
        "Share of the last window's requests that met every configured SLO.",
        "as for the goodput request rate",
        &[Test::Capacity, Test::ThroughputLatency],
    );

    pub const W_CONCURRENCY: Metric<TapStat, WindowGauge> = window(
        "tokentap_window_concurrency",
        "tokentap.window.concurrency",
        Unit::Requests,
        "Requests in flight at the tap during the last window: time-weighted `mean` and `max`.",
        "every window (0 when idle)",
        &[
            Test::Capacity,
            Test::ThroughputLatency,
            Test::MemoryPressure,
        ],
    );

    pub const W_TOKENS_IN_FLIGHT: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_tokens_in_flight",
        "tokentap.window.tokens_in_flight",
        Unit::Tokens,
        "Time-weighted mean of input + output tokens held by the requests in flight in the last window (those that completed in it): a proxy for KV-cache occupancy.",
        COMPLETED,
        &[Test::MemoryPressure],
    );

    pub const CAPACITY: Metric<TapLabels, WindowGauge> = window(    "tokentap_capacity_requests",
        "tokentap.capacity",
        Unit::Requests,
        "Concurrent request capacity over the kept windows: the time-weighted concurrency of the busiest window before the first (by concurrency) whose SLO attainment fell below `analysis.capacity_target`; with a single window, the highest in-flight level at arrival whose attainment stayed at or above it.",
        "when SLOs are configured and a window (or a level with `analysis.capacity_min_requests` requests) met the target",
        &[Test::Capacity],
    );

    pub const KNEE: Metric<TapLabels, WindowGauge> = window(    "tokentap_knee_concurrency",
        "tokentap.knee.concurrency",
        Unit::Requests,
        "Knee of the throughput–latency curve over the kept windows: the lowest window concurrency at which TPOT (p99, else p90, else p50) exceeds twice its minimum.",
        "when two or more windows have a TPOT percentile and one exceeds twice the minimum",
        &[Test::ThroughputLatency],
    );

    pub const W_TTFT: Metric<TapPercentile, WindowGauge> = window(    "tokentap_window_ttft_seconds",
        "tokentap.window.ttft",
        Unit::Seconds,
        "TTFT percentiles over the last window's completed streams (exact, from the samples; only quantiles the sample count supports).",
        "completed streamed requests with a first token",
        &[Test::Ttft, Test::ThroughputLatency],
    );

    pub const W_TPOT: Metric<TapPercentile, WindowGauge> = window(
        "tokentap_window_tpot_seconds",
        "tokentap.window.tpot",
        Unit::Seconds,
        "TPOT percentiles over the last window's completed streams with 2+ output tokens.",
        "completed streamed requests with a TPOT",
        &[Test::ThroughputLatency],
    );

    pub const W_ITL: Metric<TapPercentile, WindowGauge> = window(    "tokentap_window_itl_seconds",
        "tokentap.window.itl",
        Unit::Seconds,
        "Inter-token gap percentiles over every gap of the last window's completed streams (one observation per gap).",
        "every gap between token events of completed streams",
        &[Test::ItlDistribution],
    );

    pub const W_SAMPLES: Metric<TapFigure, WindowGauge> = window(
        "tokentap_window_samples",
        "tokentap.window.samples",
        Unit::Info,
        "Sample count behind the last window's figures: `requests`, `ttft`, `tpot`, `itl` (gaps).",
        "every window",
        &[Test::Ttft, Test::ItlDistribution],
    );

    pub const W_STALLS: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_stalls",
        "tokentap.window.stalls",
        Unit::Info,
        "Stalls in the last window: gaps beyond `analysis.stall.multiple` × their request's median gap (and `floor_ms`), or beyond `absolute_ms`.",
        "completed streams of the window",
        &[Test::ItlDistribution, Test::MemoryPressure],
    );

    pub const W_STALL_RATIO: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_stall_ratio",
        "tokentap.window.stall_ratio",
        Unit::Ratio,
        "Stalls per inter-token gap in the last window.",
        "windows with gaps",
        &[Test::ItlDistribution, Test::MemoryPressure],
    );

    pub const W_FAKE_STREAMS: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_fake_streams",
        "tokentap.window.fake_streams",
        Unit::Requests,
        "Streams of the last window with half or more of their token events in the last 10 % of the span from response headers to last token (8+ events).",
        "completed streams with 8+ token events",
        &[Test::ItlDistribution],
    );

    pub const W_JAIN: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_fairness_jain_index",
        "tokentap.window.fairness.jain",
        Unit::Ratio,
        "Jain's index over tenants of normalised service (best tenant's mean TTFT / this tenant's) in the last window: 1 even, 1/n one tenant served.",
        "windows with two or more tenants having `analysis.fairness_min_requests` requests",
        &[Test::Fairness],
    );

    pub const W_MAX_MIN: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_fairness_max_min_ratio",
        "tokentap.window.fairness.max_min",
        Unit::Ratio,
        "Worst tenant's mean TTFT over the best tenant's in the last window.",
        "as for Jain's index",
        &[Test::Fairness],
    );

    pub const W_TENANT_TTFT: Metric<TapTenant, WindowGauge> = window(
        "tokentap_window_tenant_ttft_mean_seconds",
        "tokentap.window.tenant.ttft",
        Unit::Seconds,
        "Mean TTFT per tenant in the last window (top tenants by requests, then `other`).",
        "completed streams, by tenant",
        &[Test::Fairness],
    );

    pub const W_CACHED_RATIO: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_cached_token_ratio",
        "tokentap.window.cached_token_ratio",
        Unit::Ratio,
        "Cached input tokens over input tokens, from usage (`prompt_tokens_details.cached_tokens`, `cache_read_input_tokens`), in the last window.",
        "requests whose usage reports cached tokens",
        &[Test::PrefixCache],
    );

    pub const W_CACHE_HIT_RATIO: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_cache_hit_ratio",
        "tokentap.window.cache_hit_ratio",
        Unit::Ratio,
        "Share of requests with at least `analysis.cache_hit_share` (default 0.5) of their input tokens cached (realised prefix-cache hits) in the last window; a chat template's few cached tokens are no hit.",
        "requests whose usage reports cached tokens",
        &[Test::PrefixCache],
    );

    pub const W_CACHE_TTFT: Metric<TapCache, WindowGauge> = window(
        "tokentap_window_cache_ttft_mean_seconds",
        "tokentap.window.cache.ttft",
        Unit::Seconds,
        "Mean TTFT of hits (`hit`, as for the hit ratio) and of the other requests (`miss`) in the last window. Descriptive only: hits and misses differ in prompt length too; what caching saved is `tokentap_window_cache_ttft_saved_per_hit_seconds`.",
        "completed requests whose usage reports cached tokens",
        &[Test::PrefixCache],
    );

    pub const W_CACHE_SAVED: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_cache_ttft_saved_per_hit_seconds",
        "tokentap.window.cache.ttft_saved_per_hit",
        Unit::Seconds,
        "Mean TTFT a hit's cached tokens saved it in the last window: (b − c) × its cached tokens, from the least-squares fit TTFT ≈ a + b·uncached + c·cached input tokens over the window's completed requests (docs/analyses.md).",
        "windows with 8+ completed requests reporting cached tokens, cached and uncached counts varying apart, and a hit",
        &[Test::PrefixCache],
    );

    pub const W_CACHED_COST: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_cached_token_cost_ratio",
        "tokentap.window.cached_token_cost",
        Unit::Ratio,
        "What a cached input token adds to TTFT relative to an uncached one (c / b of the same fit): 0 = free, 1 = the cache saves nothing.",
        "as for the saving, hits not needed",
        &[Test::PrefixCache],
    );

    pub const W_PREFIX_REUSE: Metric<TapPrefix, WindowGauge> = window(    "tokentap_window_prefix_reuse_ratio",
        "tokentap.window.prefix_reuse",
        Unit::Ratio,
        "Reuse opportunity seen by tokentap: share of the window's prompts at least 1k/4k/16k characters long whose first 1k/4k/16k characters an earlier request had.",
        "requests with a prompt of at least that many characters",
        &[Test::PrefixCache],
    );

    pub const W_CONTEXT_TTFT: Metric<TapBucket, WindowGauge> = window(
        "tokentap_window_context_ttft_mean_seconds",
        "tokentap.window.context.ttft",
        Unit::Seconds,
        "Mean TTFT by input-length bucket in the last window.",
        "completed requests with input tokens (usage) and a TTFT",
        &[Test::LongContext],
    );

    pub const W_CONTEXT_PREFILL: Metric<TapBucket, WindowGauge> = window(    "tokentap_window_context_prefill_tokens_per_second",
        "tokentap.window.context.prefill_rate",
        Unit::TokensPerSecond,
        "Mean effective prefill rate (uncached input tokens / TTFT) by input-length bucket in the last window.",
        "as for the bucketed TTFT",
        &[Test::LongContext],
    );

    pub const W_TTFT_SLOPE: Metric<TapLabels, WindowGauge> = window(    "tokentap_window_ttft_per_1k_input_tokens_seconds",
        "tokentap.window.ttft_slope",
        Unit::Seconds,
        "Slope of a least-squares line of TTFT against uncached input tokens, per 1,000 tokens, in the last window.",
        "windows with 3+ such requests of different input lengths",
        &[Test::LongContext],
    );

    pub const W_TTFT_SLOPE_R2: Metric<TapLabels, WindowGauge> = window(
        "tokentap_window_ttft_fit_r2_ratio",
        "tokentap.window.ttft_fit_r2",
        Unit::Ratio,
        "R² of the TTFT-versus-input line of the last window.",
        "as for the slope",
        &[Test::LongContext],
    );

    pub const ENGINE_KV_USAGE: Metric<Engine, WindowGauge> = window(    "tokentap_engine_kv_cache_usage_ratio",
        "tokentap.engine.kv_cache_usage",
        Unit::Ratio,
        "KV-cache usage an engine reports (`vllm:kv_cache_usage_perc` / `vllm:gpu_cache_usage_perc`, `sglang:token_usage`, `tgi_*`/`llamacpp:*` equivalents), maximum over the last window's scrapes.",
        "engines listed in `analysis.engines`, scraped every `interval_seconds`",
        &[Test::MemoryPressure],
    );

    pub const ENGINE_PREEMPTIONS: Metric<Engine, WindowGauge> = window(    "tokentap_engine_preemptions",
        "tokentap.engine.preemptions",
        Unit::Requests,
        "Preemptions an engine reported during the last window (increase of `vllm:num_preemptions_total` or the engine's equivalent).",
        "as for KV-cache usage, when the engine exports a preemption counter",
        &[Test::MemoryPressure],
    );

    pub const ENGINE_SCRAPES: Metric<EngineScrape, Counter> = Metric::new(Spec {
        name: "tokentap_engine_scrapes_total",
        otel_name: "tokentap.engine.scrapes",
            unit: Unit::Info,
        help: "Scrapes of engine metrics endpoints, by engine and result (`ok`, `error`).",
        buckets: &[],
        start: ENGINE_START,
        end: ENGINE_START,
        observed: "every scrape of an engine in `analysis.engines`",
        tests: &[Test::MemoryPressure],
    });

    pub const WINDOW_SAMPLES_DROPPED: Metric<TapLabels, Counter> = Metric::new(Spec {
        name: "tokentap_window_samples_dropped_total",
        otel_name: "tokentap.window.samples_dropped",
            unit: Unit::Requests,
        help: "Requests left out of a window's analyses because the window already held `analysis.max_window_samples` (they are still counted by every other metric).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each request beyond the cap",
        tests: &[],
    });

    pub const RECORD_LOG_LINES: Metric<TapLabels, Counter> = Metric::new(Spec {
        name: "tokentap_record_log_lines_total",
        otel_name: "tokentap.record_log.lines",
            unit: Unit::Requests,
        help: "Lines written to a tap's record log.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each record written (taps with `record_log`)",
        tests: &[],
    });

    pub const RECORD_LOG_DROPPED: Metric<TapLabels, Counter> = Metric::new(Spec {
        name: "tokentap_record_log_dropped_total",
        otel_name: "tokentap.record_log.dropped",
            unit: Unit::Requests,
        help: "Records not written to the record log: its bounded queue was full or the file could not be written. Traffic never waits for the log.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each record dropped",
        tests: &[],
    });
}
