//! The series of one (tap, model, operation), resolved once and kept.
//!
//! A label lookup costs: Prometheus hashes the label values and takes its
//! lock, OpenTelemetry gets a freshly built attribute list. Done per metric
//! per request that was about a dozen lookups (≈ 0.8 µs of the measuring
//! path's ≈ 2 µs per non-streamed request in `benches/hot_path.rs`, twice
//! that with OTLP metrics on). Here a request looks up its `ModelSeries`
//! once (`SeriesCache::get`); every observation after that is atomics on
//! handles resolved the first time they were needed.
//!
//! A series is created at its first observation, exactly as a lookup
//! would create it, so what `/metrics` and OTLP show does not change; the
//! three per-event histograms are created with the `ModelSeries`, before
//! the first chunk, so the per-chunk path never allocates.
//!
//! Owns: which metric a finished request and a token event feed, with
//! which labels (`ModelSeries::record`, `token_event`), and the bounded
//! map of series. Must not: choose label values (`labels::ModelLabels`
//! does) or hold anything of a request's content.

use super::Metrics;
use super::{Count, Hist};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tokentap_core::decode::Operation;
use tokentap_core::labels::{PerModel, TapLabels, TokenType};
use tokentap_core::record::{Outcome, RequestRecord, TokenSource};
use tokentap_core::table;
use tokentap_core::tap::Boundary;

/// `ModelSeries` kept at most; past it (taps × models × operations is
/// bounded far below this) a request resolves an uncached one: correct,
/// only slower.
pub const MAX_CACHED_SERIES: usize = 4096;

/// One slot per value of a bounded enum (`outcome`, `source`, ...), at
/// the value's index in its `ALL` (declaration order).
type PerValue<T, const N: usize> = [OnceLock<T>; N];

const OUTCOMES: usize = Outcome::ALL.len();
const SOURCES: usize = TokenSource::ALL.len();
const TOKEN_TYPES: usize = TokenType::ALL.len();

/// Every series a request of one (tap, model, operation) can touch.
pub struct ModelSeries {
    labels: PerModel,
    itl: Hist,
    itl_per_token: Hist,
    tokens_per_event: Hist,
    ttft: OnceLock<Hist>,
    ttft_visible: OnceLock<Hist>,
    time_to_first_event: OnceLock<Hist>,
    tpot: OnceLock<Hist>,
    input_tokens: OnceLock<Count>,
    cached_tokens: OnceLock<Count>,
    reasoning_tokens: OnceLock<Count>,
    usage: PerValue<Hist, TOKEN_TYPES>,
    output_tokens: PerValue<Count, SOURCES>,
    /// By `stream` (false, true).
    ttfb: PerValue<Hist, 2>,
    /// `tokentap_requests_total` and the duration histogram, by `stream`
    /// then `outcome`.
    requests: [PerValue<(Count, Hist), OUTCOMES>; 2],
}

impl ModelSeries {
    pub fn new(metrics: &Metrics, tap: &TapLabels, model: &Arc<str>, op: Operation) -> Self {
        let labels = tap.per_model(model, op);
        ModelSeries {
            itl: Hist::new(metrics, &table::ITL, &labels),
            itl_per_token: Hist::new(metrics, &table::ITL_PER_TOKEN, &labels),
            tokens_per_event: Hist::new(metrics, &table::TOKENS_PER_EVENT, &labels),
            labels,
            ttft: OnceLock::new(),
            ttft_visible: OnceLock::new(),
            time_to_first_event: OnceLock::new(),
            tpot: OnceLock::new(),
            input_tokens: OnceLock::new(),
            cached_tokens: OnceLock::new(),
            reasoning_tokens: OnceLock::new(),
            usage: Default::default(),
            output_tokens: Default::default(),
            ttfb: Default::default(),
            requests: Default::default(),
        }
    }

    /// Whether these are the series of `tap`, `model` and `op`.
    pub fn is_for(&self, tap: &TapLabels, model: &str, op: Operation) -> bool {
        let l = &self.labels;
        l.operation == op && l.tap == *tap && *l.model == *model
    }

    /// One token-bearing event: its gap and its token count.
    pub fn token_event(&self, gap: Option<Duration>, tokens: Option<u64>) {
        if let Some(gap) = gap {
            self.itl.observe(gap.as_secs_f64());
        }
        if let Some(n) = tokens {
            self.tokens_per_event.observe(n as f64);
            if let (Some(gap), true) = (gap, n > 0) {
                let per_token = gap.as_secs_f64() / n as f64;
                for _ in 0..n.min(table::ITL_PER_TOKEN_MAX_OBSERVATIONS) {
                    self.itl_per_token.observe(per_token);
                }
            }
        }
    }

    /// Everything observed once per request, at its end.
    pub fn record(&self, metrics: &Metrics, r: &RequestRecord) {
        let l = &self.labels;
        let stream = usize::from(r.stream);
        let per_stream = self.requests.get(stream);
        if let Some(cell) = per_stream.and_then(|s| s.get(r.outcome as usize)) {
            let (requests, duration) = cell.get_or_init(|| {
                let labels = l.stream(r.stream).outcome(r.outcome);
                (
                    Count::new(metrics, &table::REQUESTS, &labels),
                    Hist::new(metrics, &table::REQUEST_DURATION, &labels),
                )
            });
            requests.add(1);
            duration.observe(r.e2e.as_secs_f64());
        }
        if let (Some(ttfb), Some(cell)) = (r.ttfb, self.ttfb.get(stream)) {
            let labels = || l.stream(r.stream);
            cell.get_or_init(|| Hist::new(metrics, &table::TTFB, &labels()))
                .observe(ttfb.as_secs_f64());
        }
        if r.stream {
            for (cell, m, v) in [
                (&self.ttft, &table::TTFT, r.ttft),
                (&self.ttft_visible, &table::TTFT_VISIBLE, r.ttft_visible),
                (
                    &self.time_to_first_event,
                    &table::TIME_TO_FIRST_EVENT,
                    r.time_to_first_event,
                ),
                (&self.tpot, &table::TPOT, r.tpot),
            ] {
                if let Some(v) = v {
                    cell.get_or_init(|| Hist::new(metrics, m, l))
                        .observe(v.as_secs_f64());
                }
            }
        }
        if let Some(n) = r.input_tokens {
            self.usage(metrics, TokenType::Input, n);
            self.input_tokens
                .get_or_init(|| Count::new(metrics, &table::INPUT_TOKENS, l))
                .add(n);
        }
        if let (Some(n), Some(source)) = (r.output_tokens, r.output_source) {
            self.usage(metrics, TokenType::Output, n);
            if let Some(cell) = self.output_tokens.get(source as usize) {
                let labels = || l.source(source);
                cell.get_or_init(|| Count::new(metrics, &table::OUTPUT_TOKENS, &labels()))
                    .add(n);
            }
        }
        for (cell, m, v) in [
            (&self.cached_tokens, &table::CACHED_TOKENS, r.cached_tokens),
            (
                &self.reasoning_tokens,
                &table::REASONING_TOKENS,
                r.reasoning_tokens,
            ),
        ] {
            if let Some(n) = v {
                cell.get_or_init(|| Count::new(metrics, m, l)).add(n);
            }
        }
    }

    fn usage(&self, metrics: &Metrics, token_type: TokenType, n: u64) {
        let Some(cell) = self.usage.get(token_type as usize) else {
            return;
        };
        let l = &self.labels;
        let labels = || l.tokens(token_type);
        cell.get_or_init(|| Hist::new(metrics, &table::TOKEN_USAGE, &labels()))
            .observe(n as f64);
    }
}

type Key = (Arc<str>, Boundary, Arc<str>, Operation);

/// The `ModelSeries` of every (tap, model, operation) seen, up to
/// `MAX_CACHED_SERIES`.
pub struct SeriesCache {
    map: RwLock<HashMap<Key, Arc<ModelSeries>, foldhash::fast::RandomState>>,
    max: usize,
}

impl Default for SeriesCache {
    fn default() -> Self {
        SeriesCache::with_max(MAX_CACHED_SERIES)
    }
}

impl SeriesCache {
    /// A cache that keeps at most `max` series.
    pub fn with_max(max: usize) -> Self {
        SeriesCache {
            map: RwLock::default(),
            max,
        }
    }

    /// The series of `tap`, `model` (a label value, already bounded) and `op`.
    pub fn get(
        &self,
        metrics: &Metrics,
        tap: &TapLabels,
        model: &Arc<str>,
        op: Operation,
    ) -> Arc<ModelSeries> {
        let key: Key = (tap.tap.clone(), tap.boundary, model.clone(), op);
        if let Some(s) = self.map.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return s.clone();
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(&key) {
            return s.clone();
        }
        let series = Arc::new(ModelSeries::new(metrics, tap, model, op));
        if map.len() < self.max {
            map.insert(key, series.clone());
        }
        series
    }

    /// How many are kept (tests).
    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "series_tests.rs"]
mod tests;
