//! Test 10, guardrail overhead, from samples of several taps joined by trace
//! id (the record log of each tap carries it): per guardrail hop, its calls,
//! their duration and verdicts, split into the input phase (the call started
//! before the engine saw the request) and the output phase (after); per
//! request, the total time in guardrail calls; and the overhead of the outer
//! boundary (gateway or compound) over the engine: TTFT and E2E as the
//! outer tap saw them minus as the engine tap saw them.
//!
//! Live, the correlator (`crate::correlate`) attributes overhead per request
//! as records arrive; this is the same question answered from samples, so a
//! record log can be reported on later.

use super::sample::Sample;
use super::stats::Summary;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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

fn is_outer(b: &str) -> bool {
    b == "gateway" || b == "compound"
}

pub fn analyze(samples: &[&Sample]) -> GuardrailReport {
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
        let first = |pred: &dyn Fn(&str) -> bool| {
            group
                .iter()
                .filter(|s| pred(&s.boundary))
                .min_by(|a, b| a.start_unix_ms.total_cmp(&b.start_unix_ms))
                .copied()
        };
        let engine = first(&|b| b == "engine");
        let outer = first(&is_outer);
        if let (Some(o), Some(e)) = (outer, engine) {
            if let (Some(ot), Some(et)) = (o.ttft_ms, e.ttft_ms) {
                ttft_o.push(ot - et);
            }
            e2e_o.push(o.e2e_ms - e.e2e_ms);
        }
        // Input phase: the call started before the engine saw the request
        // (or, with no engine tap, before the outer tap's first token).
        let split_at = engine
            .map(|e| e.start_unix_ms)
            .or_else(|| outer.map(|o| o.start_unix_ms + o.ttft_ms.unwrap_or(o.e2e_ms)));
        let (mut total, mut ti, mut to, mut any) = (0.0, 0.0, 0.0, false);
        for g in group.iter().filter(|s| s.boundary == "guardrail") {
            any = true;
            let input = split_at.is_none_or(|t| g.start_unix_ms < t);
            let name = g.hop.clone().unwrap_or_else(|| g.tap.clone());
            let (h, durations) = hops.entry(name.clone()).or_insert_with(|| {
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
            h.calls += 1;
            if input {
                h.input_phase_calls += 1;
                ti += g.e2e_ms;
            } else {
                h.output_phase_calls += 1;
                to += g.e2e_ms;
            }
            *h.verdicts
                .entry(g.verdict.clone().unwrap_or_else(|| "unknown".into()))
                .or_default() += 1;
            durations.push(g.e2e_ms);
            total += g.e2e_ms;
        }
        if any {
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

    fn tap(boundary: &str, hop: Option<&str>, start: f64, ttft: Option<f64>, e2e: f64) -> Sample {
        Sample {
            tap: boundary.into(),
            boundary: boundary.into(),
            hop: hop.map(str::to_owned),
            trace_id: Some("t1".into()),
            start_unix_ms: start,
            ttft_ms: ttft,
            e2e_ms: e2e,
            verdict: hop.map(|_| "pass".to_owned()),
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
        let r = analyze(&refs);
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
}
