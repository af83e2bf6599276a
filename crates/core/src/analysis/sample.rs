//! `Sample`: one request as one tap saw it, in the form the analyses read —
//! and, serialised, one line of the record log (JSONL). Live analyses and
//! `tokentap report` share this type, so a report from a record log computes
//! exactly what `/report` computed live.
//!
//! Times are milliseconds (µs precision) from the tap having the request
//! headers; `start_unix_ms` places that moment on the wall clock. A sample
//! never holds content or credentials: sizes, counts, times, bounded names,
//! hashes (tenant, prompt prefixes) and the trace id.
//!
//! Label-like fields are strings so that a record log written by a newer
//! tokentap (new outcome names, say) still reads.

use crate::record::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

/// A label-like field: the name of one of tokentap's enums when made by
/// this process (no allocation per request), any string when read from a
/// record log.
pub type Label = Cow<'static, str>;

/// The record-log schema version (`v` of each line).
pub const SCHEMA_VERSION: u32 = 1;

/// Inter-token gaps kept per request (beyond: `gaps_truncated`).
pub const MAX_GAPS: usize = 16_384;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub v: u32,
    /// Which record log (process) the sample came from: samples of one
    /// process share one clock (`tokentap report` numbers its files; live: 0).
    #[serde(skip)]
    pub origin: u32,
    pub tap: String,
    pub boundary: Label,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<String>,
    /// Wall-clock time of the request headers at the tap (ms since epoch).
    pub start_unix_ms: f64,
    pub operation: Label,
    pub stream: bool,
    /// `sse`, `json` or `none`.
    pub protocol: Label,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    pub outcome: Label,
    #[serde(default)]
    pub error_type: Option<Label>,
    #[serde(default)]
    pub measure_error: Option<Label>,
    #[serde(default)]
    pub finish_reason: Option<Label>,
    #[serde(default)]
    pub ttfb_ms: Option<f64>,
    #[serde(default)]
    pub first_event_ms: Option<f64>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub ttft_visible_ms: Option<f64>,
    #[serde(default)]
    pub last_token_ms: Option<f64>,
    pub e2e_ms: f64,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    pub events: u32,
    pub token_events: u32,
    #[serde(default)]
    pub comments: u32,
    /// Each gap between consecutive token-bearing events, in order (ms).
    #[serde(default)]
    pub gaps_ms: Vec<f64>,
    /// More gaps happened than `MAX_GAPS` (or than the tap kept).
    #[serde(default)]
    pub gaps_truncated: bool,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// `usage`, `events` or `estimate`.
    #[serde(default)]
    pub output_source: Option<Label>,
    /// `usage` or `estimate` (absent: no input count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_source: Option<Label>,
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_bytes: Option<u64>,
    /// Messages in a chat request.
    #[serde(default)]
    pub messages: Option<u32>,
    /// Requests in flight at this tap when this one started (itself included).
    #[serde(default)]
    pub in_flight: u32,
    #[serde(default)]
    pub tenant: Option<String>,
    /// Prompt-prefix fingerprints (1k / 4k / 16k characters), hex.
    #[serde(default)]
    pub prefix: [Option<String>; 3],
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The client's `x-request-id` (printable, at most 128 bytes).
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub verdict: Option<Label>,
    /// The API dialect (`openai`, `responses`, `anthropic`, `ollama`,
    /// `tgi`, `gemini`); absent in lines written before dialects existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<Label>,
    /// How the dialect was chosen: `path`, `content` (the response named
    /// it) or `config`; absent for what is no LLM call and in older lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect_source: Option<Label>,
    /// The engine's own prefill and decode times, when it reports them
    /// (Ollama's `prompt_eval_duration`, `eval_duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_prefill_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_decode_ms: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    // Rounded to the microsecond: the clock's useful resolution here.
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl Sample {
    /// The sample of a finished request. `offsets_us` are the token events'
    /// times from the start (µs), as the tap kept them; `truncated` when it
    /// kept fewer than there were.
    pub fn from_record(
        tap: &str,
        boundary: &'static str,
        hop: Option<&str>,
        r: &RequestRecord,
        offsets_us: &[u32],
        truncated: bool,
    ) -> Sample {
        let gaps_ms: Vec<f64> = offsets_us
            .windows(2)
            .take(MAX_GAPS)
            .filter_map(|w| match w {
                [a, b] => Some(f64::from(b.saturating_sub(*a)) / 1e3),
                _ => None,
            })
            .collect();
        let kept_all = offsets_us.len() >= r.token_events as usize;
        Sample {
            origin: 0,
            v: SCHEMA_VERSION,
            tap: tap.to_owned(),
            boundary: Cow::Borrowed(boundary),
            hop: hop.map(str::to_owned),
            start_unix_ms: r
                .started_at
                .duration_since(UNIX_EPOCH)
                .map(ms)
                .unwrap_or_default(),
            operation: Cow::Borrowed(r.operation.as_str()),
            stream: r.stream,
            protocol: Cow::Borrowed(r.body_kind.as_str()),
            model: r.model().map(str::to_owned),
            status: r.status,
            outcome: Cow::Borrowed(r.outcome.as_str()),
            error_type: r.error_type.map(|e| Cow::Borrowed(e.as_str())),
            measure_error: r.measure_error.map(|e| Cow::Borrowed(e.as_str())),
            finish_reason: r.finish_reason.map(|f| Cow::Borrowed(f.as_str())),
            ttfb_ms: r.ttfb.map(ms),
            first_event_ms: r.time_to_first_event.map(ms),
            ttft_ms: r.ttft.map(ms),
            ttft_visible_ms: r.ttft_visible.map(ms),
            last_token_ms: r.last_token.map(ms),
            e2e_ms: ms(r.e2e),
            tpot_ms: r.tpot.map(ms),
            events: r.events,
            token_events: r.token_events,
            comments: r.comments,
            gaps_truncated: truncated || !kept_all || gaps_ms.len() >= MAX_GAPS,
            gaps_ms,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            output_source: r.output_source.map(|s| Cow::Borrowed(s.as_str())),
            input_source: r.input_source.map(|s| Cow::Borrowed(s.as_str())),
            cached_tokens: r.cached_tokens,
            reasoning_tokens: r.reasoning_tokens,
            max_tokens: r.request.max_tokens,
            prompt_bytes: r.request.prompt_bytes,
            messages: r.request.messages,
            in_flight: r.in_flight,
            tenant: r.tenant.clone(),
            prefix: r.request.prefixes.map(|h| h.map(|h| format!("{h:016x}"))),
            trace_id: r.trace.map(|t| t.trace_id_hex()),
            request_id: r.request_id.clone(),
            verdict: r.verdict.map(|v| Cow::Borrowed(v.as_str())),
            dialect: Some(Cow::Borrowed(r.dialect.as_str())),
            dialect_source: r.dialect_source.map(|s| Cow::Borrowed(s.as_str())),
            engine_prefill_ms: r
                .engine_timing
                .and_then(|e| e.prefill_ns)
                .map(|ns| ms(Duration::from_nanos(ns))),
            engine_decode_ms: r
                .engine_timing
                .and_then(|e| e.decode_ns)
                .map(|ns| ms(Duration::from_nanos(ns))),
        }
    }

    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok.as_str()
    }

    /// Completion time on the wall clock (ms since epoch).
    pub fn end_unix_ms(&self) -> f64 {
        self.start_unix_ms + self.e2e_ms
    }

    /// Output tokens per token-bearing event, when both are known.
    pub fn tokens_per_event(&self) -> Option<f64> {
        let out = self.output_tokens?;
        (self.token_events > 0).then(|| out as f64 / f64::from(self.token_events))
    }

    /// Input tokens the engine had to prefill (input minus cached; cached
    /// counts as 0 when not reported).
    pub fn uncached_input_tokens(&self) -> Option<u64> {
        self.input_tokens
            .map(|i| i.saturating_sub(self.cached_tokens.unwrap_or(0)))
    }

    /// Offsets (ms from the start) of the token events the sample kept.
    pub fn token_offsets_ms(&self) -> impl Iterator<Item = f64> + '_ {
        let first = self.ttft_ms;
        first.into_iter().chain(
            self.gaps_ms
                .iter()
                .scan(first.unwrap_or_default(), |t, g| {
                    *t += g;
                    Some(*t)
                })
                .filter(move |_| first.is_some()),
        )
    }
}
