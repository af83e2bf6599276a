//! Test 4, the inter-token latency distribution: every gap between
//! token-bearing events pooled across requests (one observation per gap,
//! never a per-request mean), the gap per token when events carry several,
//! tokens per event, stalls and fake streaming.
//!
//! - A **stall** is a gap longer than `multiple` × its request's median gap
//!   (and at least `floor_ms`; the request needs `min_gaps` gaps for a
//!   median), or longer than `absolute_ms` whatever the median.
//! - A **fake stream** is a streamed response with at least
//!   `FAKE_MIN_EVENTS` token events of which at least half arrived in the
//!   last 10 % of its time (request received to last token event), with a
//!   median gap under `FAKE_MAX_MEDIAN_GAP_MS`: generated elsewhere, then
//!   replayed in a burst (or held by a buffering layer). The gap condition
//!   keeps a long prefill followed by a genuine decode (a few ms per token
//!   at the fastest) from looking alike.

use super::sample::Sample;
use super::settings::StallRule;
use super::stats::{quantile_unchecked, Summary};
use serde::Serialize;

/// Token events a stream needs before it is judged real or fake.
pub const FAKE_MIN_EVENTS: u32 = 8;

/// A burst's median gap is below this; a decode's is not.
pub const FAKE_MAX_MEDIAN_GAP_MS: f64 = 1.0;

/// Stall events kept for the report's chart.
pub const MAX_STALL_EVENTS: usize = 2_000;

/// Indices (into `gaps_ms`) of the gaps of one request that are stalls.
pub fn stall_indices(gaps_ms: &[f64], rule: &StallRule) -> Vec<usize> {
    let median = if gaps_ms.len() >= rule.min_gaps.max(1) {
        let mut sorted = gaps_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        quantile_unchecked(&sorted, 0.5)
    } else {
        None
    };
    let relative = median.map(|m| (m * rule.multiple).max(rule.floor_ms));
    gaps_ms
        .iter()
        .enumerate()
        .filter(|(_, g)| **g > rule.absolute_ms || relative.is_some_and(|r| **g > r))
        .map(|(i, _)| i)
        .collect()
}

/// Whether a streamed request looks like fake streaming; `None` when it
/// cannot be judged (not a stream, too few events, gaps not all kept).
pub fn is_fake_stream(s: &Sample) -> Option<bool> {
    if !s.stream || s.token_events < FAKE_MIN_EVENTS || s.gaps_truncated {
        return None;
    }
    let last = s.last_token_ms?;
    let late_from = 0.9 * last;
    let offsets: Vec<f64> = s.token_offsets_ms().collect();
    let late = offsets.iter().filter(|t| **t >= late_from).count();
    let mut gaps = s.gaps_ms.clone();
    gaps.sort_by(f64::total_cmp);
    let median = quantile_unchecked(&gaps, 0.5)?;
    Some(late * 2 >= offsets.len() && !offsets.is_empty() && median < FAKE_MAX_MEDIAN_GAP_MS)
}

/// One detected stall, placed on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StallEvent {
    /// When the gap ended (ms since epoch).
    pub at_unix_ms: f64,
    pub gap_ms: f64,
    /// Requests in flight at the tap when the stalled request started.
    pub in_flight: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ItlReport {
    /// Every gap (ms), pooled across requests.
    pub gap_ms: Summary,
    /// Every gap divided by the tokens its event carried (ms per token).
    pub gap_per_token_ms: Summary,
    /// Tokens per token event, one observation per request.
    pub tokens_per_event: Summary,
    pub requests_with_gaps: usize,
    /// Requests whose gap list was cut (more events than kept).
    pub requests_truncated: usize,
    pub stalls: usize,
    pub requests_with_stalls: usize,
    /// Stalls per 1,000 gaps.
    pub stalls_per_1k_gaps: Option<f64>,
    pub fake_streams: usize,
    /// Streams that could be judged real or fake.
    pub streams_judged: usize,
    /// Stall events (at most `MAX_STALL_EVENTS`), for the stalls-over-time chart.
    pub stall_events: Vec<StallEvent>,
}

/// The ITL analysis of a set of requests.
pub fn analyze(samples: &[&Sample], rule: &StallRule) -> ItlReport {
    let mut gaps = Vec::new();
    let mut per_token = Vec::new();
    let mut tpe = Vec::new();
    let mut r = ItlReport::default();
    for s in samples {
        if s.gaps_ms.is_empty() {
            continue;
        }
        r.requests_with_gaps += 1;
        r.requests_truncated += usize::from(s.gaps_truncated);
        let k = s.tokens_per_event().filter(|k| *k >= 1.0).unwrap_or(1.0);
        tpe.extend(s.tokens_per_event());
        gaps.extend_from_slice(&s.gaps_ms);
        per_token.extend(s.gaps_ms.iter().map(|g| g / k));
        let stalls = stall_indices(&s.gaps_ms, rule);
        if !stalls.is_empty() {
            r.requests_with_stalls += 1;
            r.stalls += stalls.len();
            let ends: Vec<f64> = s.token_offsets_ms().skip(1).collect();
            for i in stalls {
                if r.stall_events.len() >= MAX_STALL_EVENTS {
                    break;
                }
                if let (Some(gap), Some(end)) = (s.gaps_ms.get(i), ends.get(i)) {
                    r.stall_events.push(StallEvent {
                        at_unix_ms: s.start_unix_ms + end,
                        gap_ms: *gap,
                        in_flight: s.in_flight,
                    });
                }
            }
        }
    }
    for s in samples {
        if let Some(fake) = is_fake_stream(s) {
            r.streams_judged += 1;
            r.fake_streams += usize::from(fake);
        }
    }
    r.stalls_per_1k_gaps = (!gaps.is_empty()).then(|| r.stalls as f64 * 1000.0 / gaps.len() as f64);
    r.gap_ms = Summary::of(gaps);
    r.gap_per_token_ms = Summary::of(per_token);
    r.tokens_per_event = Summary::of(tpe);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(ttfb: f64, ttft: f64, gaps: Vec<f64>) -> Sample {
        let last = ttft + gaps.iter().sum::<f64>();
        Sample {
            stream: true,
            ttfb_ms: Some(ttfb),
            ttft_ms: Some(ttft),
            last_token_ms: Some(last),
            token_events: u32::try_from(gaps.len() + 1).unwrap(),
            output_tokens: Some(gaps.len() as u64 + 1),
            gaps_ms: gaps,
            ..Sample::default()
        }
    }

    #[test]
    fn stalls_relative_to_the_median_and_absolute() {
        let rule = StallRule::default();
        let mut gaps = vec![20.0; 30];
        gaps[7] = 150.0; // > 5 × 20
        gaps[20] = 90.0; // < 100: not a stall
        assert_eq!(stall_indices(&gaps, &rule), vec![7]);
        // Too few gaps for a median: only the absolute rule applies.
        assert_eq!(stall_indices(&[20.0, 500.0], &rule), Vec::<usize>::new());
        assert_eq!(stall_indices(&[20.0, 1500.0], &rule), vec![1]);
        // A tiny median does not turn jitter into stalls (floor).
        assert!(stall_indices(&[0.1, 0.1, 0.1, 0.1, 2.0], &rule).is_empty());
    }

    #[test]
    fn fake_streaming_is_a_burst_at_the_end() {
        let real = stream(1.0, 200.0, vec![20.0; 40]);
        assert_eq!(is_fake_stream(&real), Some(false));
        let fake = stream(1.0, 2000.0, vec![0.05; 40]);
        assert_eq!(is_fake_stream(&fake), Some(true));
        // Headers only with the burst (a buffering layer): still fake.
        let held = stream(2000.0, 2000.0, vec![0.01; 40]);
        assert_eq!(is_fake_stream(&held), Some(true));
        // A long prefill, then a genuine fast decode: not fake.
        let prefill = stream(1.0, 10_000.0, vec![3.0; 40]);
        assert_eq!(is_fake_stream(&prefill), Some(false));
        let short = stream(1.0, 2000.0, vec![0.05; 3]);
        assert_eq!(is_fake_stream(&short), None);
    }

    #[test]
    fn pooled_gaps_and_per_token_gaps() {
        let mut a = stream(1.0, 100.0, vec![10.0; 30]);
        a.output_tokens = Some(62); // 2 tokens per event
        let b = stream(1.0, 100.0, vec![30.0; 30]);
        let r = analyze(&[&a, &b], &StallRule::default());
        assert_eq!(r.gap_ms.n, 60);
        assert_eq!(r.gap_ms.mean, Some(20.0));
        assert_eq!(
            r.gap_per_token_ms.mean,
            Some((5.0 * 30.0 + 30.0 * 30.0) / 60.0)
        );
        assert_eq!(r.tokens_per_event.n, 2);
        assert_eq!(r.stalls, 0);
        assert_eq!(r.streams_judged, 2);
    }

    #[test]
    fn stall_events_are_placed_in_time() {
        let mut gaps = vec![20.0; 10];
        gaps[4] = 400.0;
        let mut s = stream(1.0, 100.0, gaps);
        s.start_unix_ms = 1_000.0;
        let r = analyze(&[&s], &StallRule::default());
        assert_eq!(r.stalls, 1);
        let e = r.stall_events[0];
        assert_eq!(e.gap_ms, 400.0);
        // Token 0 at 100, 4 gaps of 20, then the 400 ms gap ends at 580.
        assert!((e.at_unix_ms - 1_580.0).abs() < 1e-9);
    }
}
