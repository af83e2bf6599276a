//! The table's mergeable per-tap series that fleet-wide figures are
//! computed from (`deploy/prometheus/fleet-rules.yml`): unlike the window
//! gauges, which are one instance's figures, counters and histograms sum
//! across instances. Recorded when the tap samples requests (analyses on).

use super::*;
use crate::labels::*;

metrics! {
    pub const TENANT_REQUESTS: Metric<TenantRequests, Counter> = Metric::new(Spec {
        name: "tokentap_tenant_requests_total",
        otel_name: "tokentap.tenant.requests",
            unit: Unit::Requests,
        help: "LLM requests (chat, completions, embeddings) by tenant, every outcome but unmeasured: the per-tenant service counts fleet fairness is computed from.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each LLM request, once, when it ends (taps with analyses on)",
        tests: &[Test::Fairness],
    });

    pub const TENANT_TTFT: Metric<TenantRequests, Histogram> = Metric::new(Spec {
        name: "tokentap_tenant_time_to_first_token_seconds",
        otel_name: "tokentap.tenant.time_to_first_token",
            unit: Unit::Seconds,
        help: "TTFT by tenant, of streamed LLM requests that completed (outcome ok): as the in-process fairness index reads it, mergeable across instances.",
        buckets: TTFT_BUCKETS,
        start: REQUEST_START,
        end: "the tap sees the first token-bearing event (as gen_ai_server_time_to_first_token_seconds)",
        observed: "each streamed LLM request with outcome ok and a first token (taps with analyses on)",
        tests: &[Test::Fairness, Test::Ttft],
    });

    pub const SLO_REQUESTS: Metric<SloJudged, Counter> = Metric::new(Spec {
        name: "tokentap_slo_requests_total",
        otel_name: "tokentap.slo.requests",
            unit: Unit::Requests,
        help: "LLM requests judged against analysis.slo: met (completed, and every configured objective — TTFT, TPOT, E2E — met) or missed; the goodput and capacity of a fleet are computed from these.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each LLM request but unmeasured, once, when it ends (taps with analyses on and at least one objective configured)",
        tests: &[Test::OutputThroughput, Test::Capacity, Test::ThroughputLatency],
    });
}
