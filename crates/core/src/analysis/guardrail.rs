//! Test 10, guardrail overhead, from samples of several taps joined by trace
//! id (the record log of each tap carries it): per guardrail hop, its calls,
//! their duration and verdicts, split into the input phase (the call started
//! before the engine saw the request) and the output phase (after); per
//! request, the total time in guardrail calls; and the overhead of the outer
//! boundary (gateway or compound) over the engine: TTFT and E2E as the
//! outer tap saw them minus as the engine tap saw them.
//!
//! The same attribution as live: each sample becomes the correlator's
//! `TapRecord` and a trace's records go through `correlate::resolve` — on
//! one clock when they come from one record log (one process), on the taps'
//! own clocks when from several (machines: see docs/metrics.md, "One clock
//! or many").

use super::sample::Sample;
use super::stats::Summary;
use crate::correlate::resolve::resolve;
use crate::correlate::{Clocks, JoinKind, Phase, TapRecord};
use crate::record::{Outcome, Verdict};
use crate::tap::Boundary;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HopStats {
    pub hop: String,
    pub calls: usize,
    pub input_phase_calls: usize,
    pub output_phase_calls: usize,
    pub duration_ms: Summary,
    pub verdicts: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuardrailReport {
    /// Requests seen by two or more taps.
    pub joined_requests: usize,
    /// Joined requests with at least one guardrail call.
    pub guarded_requests: usize,
    pub hops: Vec<HopStats>,
    /// Per guarded request: total guardrail time (ms), and by phase.
    pub per_request_ms: Summary,
    pub input_phase_ms: Summary,
    pub output_phase_ms: Summary,
    /// Outer TTFT − engine TTFT, per request seen at both (ms).
    pub ttft_overhead_ms: Summary,
    /// Outer E2E − engine E2E (ms).
    pub e2e_overhead_ms: Summary,
}

fn ms(v: f64) -> Duration {
    Duration::try_from_secs_f64(v / 1e3).unwrap_or_default()
}

/// A sample as the correlator's record, started at `t0`: token events at
/// the TTFT, then after each gap.
pub fn record_of(s: &Sample, t0: Instant) -> Option<TapRecord> {
    let boundary = Boundary::from_label(&s.boundary)?;
    let mut events = Vec::new();
    if let Some(ttft) = s.ttft_ms {
        let mut at = ttft;
        events.push(at);
        for g in &s.gaps_ms {
            at += g;
            events.push(at);
        }
    }
    Some(TapRecord {
        tap: Arc::from(s.tap.as_str()),
        boundary,
        hop: s.hop.as_deref().map(Arc::from),
        trace: None,
        fingerprint: None,
        request_id: s.request_id.as_deref().map(Arc::from),
        t0,
        ttfb: s.ttfb_ms.map(ms),
        ttft: s.ttft_ms.map(ms),
        e2e: ms(s.e2e_ms),
        events: events
            .iter()
            .map(|e| u32::try_from((e * 1e3).round() as u64).unwrap_or(u32::MAX))
            .collect(),
        events_truncated: s.gaps_truncated,
        output_tokens: s.output_tokens,
        input_tokens: s.input_tokens,
        outcome: Outcome::from_label(&s.outcome).unwrap_or(Outcome::Unmeasured),
        verdict: s
            .verdict
            .as_deref()
            .and_then(Verdict::from_label)
            .unwrap_or(Verdict::Unknown),
        links: Default::default(),
    })
}

fn rank(b: Boundary) -> u8 {
    match b {
        Boundary::Compound => 2,
        Boundary::Gateway => 1,
        _ => 0,
    }
}

/// The guardrail report of the joined samples; `base` is any instant (the
/// samples' wall times are laid on the monotonic clock from it).
pub fn analyze(samples: &[&Sample], base: Instant) -> GuardrailReport {
    let mut traces: HashMap<&str, Vec<&Sample>> = HashMap::new();
    for s in samples {
        if let Some(t) = s.trace_id.as_deref() {
            traces.entry(t).or_default().push(s);
        }
    }
    let mut r = GuardrailReport::default();
    let mut hops: BTreeMap<String, (HopStats, Vec<f64>)> = BTreeMap::new();
    let (mut per_req, mut inp, mut outp, mut ttft_o, mut e2e_o) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for group in traces.values().filter(|g| g.len() >= 2) {
        r.joined_requests += 1;
        let first = group
            .iter()
            .map(|s| s.start_unix_ms)
            .fold(f64::INFINITY, f64::min);
        let records: Vec<TapRecord> = group
            .iter()
            .filter_map(|s| record_of(s, base + ms((s.start_unix_ms - first).max(0.0))))
            .collect();
        let one_log = group
            .iter()
            .all(|s| s.origin == group.first().map_or(0, |f| f.origin));
        let clocks = if one_log {
            Clocks::Shared
        } else {
            Clocks::PerTap
        };
        let res = resolve(&records, |_, _| JoinKind::Trace, 0.9, clocks);
        let boundary = |s: &Sample| Boundary::from_label(&s.boundary);
        let outer = group
            .iter()
            .filter(|s| boundary(s).is_some_and(|b| rank(b) > 0))
            .max_by_key(|s| boundary(s).map_or(0, rank));
        let engine = group.iter().find(|s| boundary(s) == Some(Boundary::Engine));
        if let (Some(o), Some(e)) = (outer, engine) {
            if let (Some(ot), Some(et)) = (o.ttft_ms, e.ttft_ms) {
                ttft_o.push(ot - et);
            }
            e2e_o.push(o.e2e_ms - e.e2e_ms);
        }
        let (mut total, mut ti, mut to) = (0.0, 0.0, 0.0);
        for h in &res.hops {
            let name = h.hop.to_string();
            let (stats, durations) = hops.entry(name.clone()).or_insert_with(|| {
                (
                    HopStats {
                        hop: name,
                        calls: 0,
                        input_phase_calls: 0,
                        output_phase_calls: 0,
                        duration_ms: Summary::default(),
                        verdicts: BTreeMap::new(),
                    },
                    Vec::new(),
                )
            });
            let d = h.duration.as_secs_f64() * 1e3;
            stats.calls += 1;
            match h.phase {
                Phase::Input => {
                    stats.input_phase_calls += 1;
                    ti += d;
                }
                Phase::Output => {
                    stats.output_phase_calls += 1;
                    to += d;
                }
                Phase::Unknown => {}
            }
            *stats
                .verdicts
                .entry(h.verdict.as_str().to_owned())
                .or_default() += 1;
            durations.push(d);
            total += d;
        }
        if !res.hops.is_empty() {
            r.guarded_requests += 1;
            per_req.push(total);
            inp.push(ti);
            outp.push(to);
        }
    }
    r.hops = hops
        .into_values()
        .map(|(mut h, d)| {
            h.duration_ms = Summary::of(d);
            h
        })
        .collect();
    r.per_request_ms = Summary::of(per_req);
    r.input_phase_ms = Summary::of(inp);
    r.output_phase_ms = Summary::of(outp);
    r.ttft_overhead_ms = Summary::of(ttft_o);
    r.e2e_overhead_ms = Summary::of(e2e_o);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(
        boundary: &'static str,
        hop: Option<&str>,
        start: f64,
        ttft: Option<f64>,
        e2e: f64,
    ) -> Sample {
        Sample {
            tap: boundary.into(),
            boundary: boundary.into(),
            hop: hop.map(str::to_owned),
            trace_id: Some("t1".into()),
            start_unix_ms: start,
            ttft_ms: ttft,
            e2e_ms: e2e,
            verdict: hop.map(|_| "pass".into()),
            ..Sample::default()
        }
    }

    #[test]
    fn joins_by_trace_and_splits_phases() {
        let v = [
            tap("gateway", None, 0.0, Some(150.0), 500.0),
            tap("guardrail", Some("mod"), 1.0, None, 40.0), // input phase
            tap("engine", None, 45.0, Some(100.0), 420.0),
            tap("guardrail", Some("mod"), 470.0, None, 25.0), // output phase
            Sample {
                trace_id: Some("lonely".into()),
                ..tap("engine", None, 0.0, Some(1.0), 2.0)
            },
        ];
        let refs: Vec<&Sample> = v.iter().collect();
        let r = analyze(&refs, Instant::now());
        assert_eq!(r.joined_requests, 1);
        assert_eq!(r.guarded_requests, 1);
        assert_eq!(r.hops.len(), 1);
        assert_eq!(r.hops[0].calls, 2);
        assert_eq!(r.hops[0].input_phase_calls, 1);
        assert_eq!(r.hops[0].verdicts.get("pass"), Some(&2));
        assert_eq!(r.per_request_ms.mean, Some(65.0));
        assert_eq!(r.input_phase_ms.mean, Some(40.0));
        assert_eq!(r.output_phase_ms.mean, Some(25.0));
        assert_eq!(r.ttft_overhead_ms.mean, Some(50.0));
        assert_eq!(r.e2e_overhead_ms.mean, Some(80.0));
    }

    #[test]
    fn logs_of_several_machines_are_joined_on_their_own_clocks() {
        // The same request, each tap's log from its own machine, the
        // engine's wall clock 500 ms behind: phases from durations alone.
        let mut v = [
            tap("gateway", None, 0.0, Some(150.0), 500.0),
            tap("guardrail", Some("mod"), 1.0, None, 40.0),
            tap("engine", None, 45.0 - 500.0, Some(100.0), 420.0),
            tap("guardrail", Some("mod"), 470.0, None, 95.0),
        ];
        for (i, s) in v.iter_mut().enumerate() {
            s.origin = i as u32;
        }
        let refs: Vec<&Sample> = v.iter().collect();
        let r = analyze(&refs, Instant::now());
        assert_eq!(r.hops[0].calls, 2);
        assert_eq!(
            r.hops[0].input_phase_calls, 1,
            "40 ms fits in the 50 ms TTFT wait"
        );
        assert_eq!(
            r.hops[0].output_phase_calls, 1,
            "95 ms cannot have been before it"
        );
        assert_eq!(r.ttft_overhead_ms.mean, Some(50.0));
    }
}
