//! The methodology's ten tests, measured from what the taps saw: pure
//! functions from `Sample`s (one per request per tap) to figures. Live
//! analyses (`live`, closing a window every `window_seconds`) and
//! `tokentap report` (reading a record log) call the same code.
//!
//! Owns: the definitions of every windowed figure (see each module's docs
//! and `docs/analyses.md`), the sample-count rules of percentiles
//! (`stats`), and the report's shape (`Analysis`, `span_report::Report`).
//! Does not own: measuring (`record`), exporting (`live` publishes gauges,
//! `report` renders), or joining taps live (`correlate`).
//!
//! | test | module |
//! |---|---|
//! | 1 time to first token | `Analysis::ttft` (here) |
//! | 2 output token throughput, goodput | `load` |
//! | 3 throughput–latency tradeoff | `series` |
//! | 4 inter-token latency distribution | `itl` |
//! | 5 concurrent request capacity | `load` |
//! | 6 scheduling fairness | `fairness` |
//! | 7 prefix cache effectiveness | `cache` |
//! | 8 memory pressure | `pressure` (+ `engines`) |
//! | 9 long-context scaling | `context` |
//! | 10 guardrail overhead | `guardrail` |

pub mod cache;
pub mod compound;
pub mod context;
pub mod engines;
pub mod fairness;
pub mod guardrail;
pub mod itl;
pub mod live;
pub mod load;
pub mod prefix_memory;
pub mod pressure;
pub mod sample;
pub mod series;
pub mod settings;
pub mod span_report;
pub mod stats;
pub mod tenant;
pub mod workload;

pub use sample::Sample;
pub use settings::{AnalysisSettings, Slo, StallRule, TenantSource};

use serde::Serialize;
use stats::Summary;
use std::collections::BTreeMap;

/// A test's result: its figures, or why it could not be measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Test<T> {
    Measured(T),
    NotMeasured { why: String },
}

impl<T> Test<T> {
    pub fn not(why: impl Into<String>) -> Self {
        Test::NotMeasured { why: why.into() }
    }

    pub fn measured(&self) -> Option<&T> {
        match self {
            Test::Measured(t) => Some(t),
            Test::NotMeasured { .. } => None,
        }
    }

    pub fn why(&self) -> Option<&str> {
        match self {
            Test::Measured(_) => None,
            Test::NotMeasured { why } => Some(why),
        }
    }
}

/// Test 1: TTFT, kept apart from TTFB and time to first event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TtftReport {
    pub streams: usize,
    pub ttft_ms: Summary,
    pub ttft_visible_ms: Summary,
    pub ttfb_ms: Summary,
    pub first_event_ms: Summary,
    pub tpot_ms: Summary,
    pub e2e_ms: Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputReport {
    #[serde(flatten)]
    pub throughput: load::Throughput,
    pub goodput: Option<load::Goodput>,
    /// Why there is no goodput (no SLOs configured).
    pub goodput_note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    pub concurrency: load::Concurrency,
    /// Capacity across windows (the primary figure; needs 2+ windows).
    pub windows: Option<series::WindowCapacity>,
    pub windows_note: Option<String>,
    /// By the in-flight level each request arrived at (detail; the
    /// fallback within one window).
    #[serde(flatten)]
    pub capacity: load::Capacity,
}

impl CapacityReport {
    /// The capacity figure: across windows when there are, else by level.
    pub fn figure(&self) -> Option<f64> {
        self.windows
            .map(|w| w.concurrency)
            .or(self.capacity.capacity.map(f64::from))
    }
}

/// One tap's ten tests over one span of time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub tap: String,
    pub boundary: String,
    pub start_unix_ms: f64,
    pub end_unix_ms: f64,
    pub seconds: f64,
    /// Requests that completed in the span (all operations).
    pub requests: usize,
    /// Of those, chat and completion requests (the ones analysed).
    pub llm_requests: usize,
    pub by_outcome: BTreeMap<String, usize>,
    /// Where output token counts came from (`usage`, `events`, `unknown`).
    pub token_source: BTreeMap<String, usize>,
    /// Streaming protocol of the responses (`sse`, `json`, `none`).
    pub protocol: BTreeMap<String, usize>,
    /// Requests whose measurement failed (counted, not analysed further).
    pub unmeasured: usize,
    /// Requests in flight over the span (time-weighted), whatever completed.
    pub concurrency: load::Concurrency,
    pub workload: workload::Workload,
    pub ttft: Test<TtftReport>,
    pub throughput: Test<ThroughputReport>,
    pub tradeoff: Test<series::Curve>,
    pub itl: Test<itl::ItlReport>,
    pub capacity: Test<CapacityReport>,
    pub fairness: Test<fairness::FairnessReport>,
    pub prefix_cache: Test<cache::CacheReport>,
    pub memory_pressure: Test<pressure::PressureReport>,
    pub long_context: Test<context::ContextReport>,
    pub guardrail: Test<guardrail::GuardrailReport>,
    /// A compound tap's requests broken down into their calls (beside the
    /// ten tests: where the time of the third boundary went).
    pub compound: Test<compound::CompoundReport>,
}

/// The span an analysis covers (ms since epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scope {
    pub start_unix_ms: f64,
    pub end_unix_ms: f64,
}

impl Scope {
    pub fn seconds(&self) -> f64 {
        ((self.end_unix_ms - self.start_unix_ms) / 1e3).max(0.0)
    }
}

fn count_by<'a>(it: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in it {
        *m.entry(k.to_owned()).or_default() += 1;
    }
    m
}

/// What one analysis looks at.
pub struct Input<'a> {
    pub tap: &'a str,
    pub boundary: &'a str,
    /// This tap's samples that completed in `scope`, in start order.
    pub samples: &'a [&'a Sample],
    /// Every tap's samples of the same span (the cross-tap guardrail join).
    pub all_taps: &'a [&'a Sample],
    pub scope: Scope,
    pub settings: &'a AnalysisSettings,
    /// Any instant: the guardrail join lays the samples' wall times on the
    /// monotonic clock from it (the core reads no clock; its callers do).
    pub base: std::time::Instant,
}

/// Analyses one tap's samples over a span. `memory` carries prompt
/// prefixes seen before; `load` overrides the concurrency computed from the
/// samples' intervals (live windows know it exactly).
pub fn analyze(
    input: &Input<'_>,
    memory: &mut cache::PrefixMemory,
    load: Option<load::Concurrency>,
) -> Analysis {
    let Input {
        tap,
        boundary,
        samples,
        all_taps,
        scope,
        settings,
        base,
    } = *input;
    let secs = scope.seconds();
    let llm: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.operation != "other")
        .collect();
    let unmeasured = llm.iter().filter(|s| s.outcome == "unmeasured").count();
    let measured: Vec<&Sample> = llm
        .iter()
        .copied()
        .filter(|s| s.outcome != "unmeasured")
        .collect();
    let ok: Vec<&Sample> = measured.iter().copied().filter(|s| s.is_ok()).collect();
    let streams: Vec<&Sample> = ok.iter().copied().filter(|s| s.stream).collect();
    let conc = load.unwrap_or_else(|| {
        load::concurrency(
            samples.iter().copied(),
            scope.start_unix_ms,
            scope.end_unix_ms,
        )
    });
    let cache_report = cache::analyze(&measured, memory, settings.cache_hit_share);
    let reuse_1k = cache_report
        .prefix_reuse
        .first()
        .and_then(|p| p.reuse_ratio);
    let no_llm = "no chat or completion requests completed in this span";

    let ttft = if streams.iter().any(|s| s.ttft_ms.is_some()) {
        Test::Measured(TtftReport {
            streams: streams.len(),
            ttft_ms: Summary::of(streams.iter().filter_map(|s| s.ttft_ms)),
            ttft_visible_ms: Summary::of(streams.iter().filter_map(|s| s.ttft_visible_ms)),
            ttfb_ms: Summary::of(ok.iter().filter_map(|s| s.ttfb_ms)),
            first_event_ms: Summary::of(streams.iter().filter_map(|s| s.first_event_ms)),
            tpot_ms: Summary::of(streams.iter().filter_map(|s| s.tpot_ms)),
            e2e_ms: Summary::of(ok.iter().map(|s| s.e2e_ms)),
        })
    } else if llm.is_empty() {
        Test::not(no_llm)
    } else {
        Test::not("no completed streamed response carried a token")
    };

    let throughput = if measured.is_empty() {
        Test::not(no_llm)
    } else {
        let goodput = load::goodput(&measured, &settings.slo, secs);
        Test::Measured(ThroughputReport {
            throughput: load::throughput(&measured, secs),
            goodput_note: goodput
                .is_none()
                .then(|| "no SLOs configured (analysis.slo)".to_string()),
            goodput,
        })
    };

    let itl = if streams.iter().any(|s| !s.gaps_ms.is_empty()) {
        Test::Measured(itl::analyze(&streams, &settings.stall))
    } else {
        Test::not("no streamed response with two or more token events")
    };

    let capacity = if measured.is_empty() {
        Test::not(no_llm)
    } else {
        Test::Measured(CapacityReport {
            concurrency: conc,
            windows: None,
            windows_note: Some("a single span: capacity across windows needs the curve".into()),
            capacity: load::capacity(
                &measured,
                &settings.slo,
                settings.capacity_target,
                settings.capacity_min_requests,
            ),
        })
    };

    let fair = fairness::analyze(
        &measured,
        settings.fairness_min_requests,
        settings.top_tenants,
    );
    let fairness = if fair.tenants_judged >= 2 {
        Test::Measured(fair)
    } else {
        Test::not(format!(
            "{} tenant(s) with {}+ requests; the index needs two (tenant from {})",
            fair.tenants_judged,
            settings.fairness_min_requests,
            match &settings.tenant {
                TenantSource::ApiKey => "the API key hash".to_string(),
                TenantSource::Header(h) => format!("header {h}"),
            }
        ))
    };

    let prefix_cache = if cache_report.requests_reporting > 0
        || cache_report.prefix_reuse.iter().any(|p| p.requests > 0)
    {
        Test::Measured(cache_report)
    } else if measured.is_empty() {
        Test::not(no_llm)
    } else {
        Test::not("no usage with cached tokens and no prompt of 1,000+ characters")
    };

    let memory_pressure = if measured.iter().any(|s| s.in_flight > 0) {
        Test::Measured(pressure::analyze(&measured, conc, &settings.stall))
    } else {
        Test::not(no_llm)
    };

    let ctx = context::analyze(&measured);
    let long_context = if ctx.requests > 0 {
        Test::Measured(ctx)
    } else {
        Test::not("no completed request with both input tokens (usage) and a TTFT")
    };

    let guardrail = if boundary == "gateway" || boundary == "compound" {
        let mine: std::collections::HashSet<&str> = samples
            .iter()
            .filter_map(|s| s.trace_id.as_deref())
            .collect();
        let joined: Vec<&Sample> = all_taps
            .iter()
            .copied()
            .filter(|s| s.trace_id.as_deref().is_some_and(|t| mine.contains(t)))
            .collect();
        let g = guardrail::analyze(&joined, base);
        if g.joined_requests > 0 {
            Test::Measured(g)
        } else {
            Test::not("no request of this tap was also seen by another tap (trace context)")
        }
    } else {
        Test::not(format!(
            "attributed at the outer boundary (a gateway or compound tap), not at a {boundary} tap"
        ))
    };

    let compound = if boundary == "compound" {
        let c = compound::analyze(tap, samples, all_taps, base);
        if c.requests > 0 {
            Test::Measured(c)
        } else {
            Test::not("no request of this tap was joined to a call by its trace (the app passes no `traceparent` on: see the live breakdown, joined by links)")
        }
    } else {
        Test::not(format!(
            "broken down at a compound tap, not at a {boundary} tap"
        ))
    };

    Analysis {
        tap: tap.to_owned(),
        boundary: boundary.to_owned(),
        start_unix_ms: scope.start_unix_ms,
        end_unix_ms: scope.end_unix_ms,
        seconds: secs,
        requests: samples.len(),
        llm_requests: llm.len(),
        by_outcome: count_by(samples.iter().map(|s| &*s.outcome)),
        token_source: count_by(
            llm.iter()
                .map(|s| s.output_source.as_deref().unwrap_or("unknown")),
        ),
        protocol: count_by(llm.iter().map(|s| &*s.protocol)),
        unmeasured,
        concurrency: conc,
        workload: workload::classify(&measured, reuse_1k),
        ttft,
        throughput,
        tradeoff: Test::not("a single span: the curve is drawn across windows"),
        itl,
        capacity,
        fairness,
        prefix_cache,
        memory_pressure,
        long_context,
        guardrail,
        compound,
    }
}

/// The tradeoff point of an analysed window.
pub fn point(a: &Analysis) -> series::Point {
    let ttft = a.ttft.measured();
    let thr = a.throughput.measured();
    series::Point {
        start_unix_ms: a.start_unix_ms,
        seconds: a.seconds,
        requests: a.llm_requests,
        concurrency: a.concurrency,
        output_tokens_per_s: thr.map_or(0.0, |t| t.throughput.output_tokens_per_s),
        ttft_ms: ttft.map(|t| t.ttft_ms.clone()).unwrap_or_default(),
        tpot_ms: ttft.map(|t| t.tpot_ms.clone()).unwrap_or_default(),
        attainment: thr.and_then(|t| t.goodput.as_ref()).map(|g| g.attainment),
        stalls_per_1k_gaps: a.itl.measured().and_then(|i| i.stalls_per_1k_gaps),
    }
}
