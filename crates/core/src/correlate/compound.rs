//! Where a compound request's time went: from the records of one request
//! group (one trace) that hold a `compound` record, its TTFT and E2E split
//! into LLM calls, tool calls, retrieval calls, guardrail calls and the
//! residual — the application's own time. Pure: records in, breakdowns out.
//!
//! The rule (exposure, as guardrails use it: parallel calls count once).
//! Every instant of the window (t0 → first token, t0 → end) is given to the
//! one part whose calls cover it, by precedence: an engine's LLM call, then
//! a tool call, then retrieval, then a guardrail call, then the part of an
//! LLM call only its gateway saw (routing, the gateway's own work); an
//! instant no call covers is residual. The parts and the residual are
//! integer nanoseconds that add up to the window exactly.
//!
//! An LLM call is an outermost LLM record inside the compound request (a
//! gateway's, or an engine's that no gateway record of the group encloses):
//! its TTFT and E2E are the ones its own tap measured. A loop iteration
//! runs from one LLM call's start to the next one's (the last, to the
//! compound request's end).
//!
//! Instants are compared across taps: in one process they are one
//! monotonic clock; at the joiner they are the spans' wall-clock starts
//! (each duration still measured on its own tap's clock), so a breakdown
//! there is as exact as the machines' clocks agree.

use super::types::{Clocks, TapRecord};
use crate::tap::Boundary;
use std::sync::Arc;
use std::time::{Duration, Instant};

crate::names::label_enum! {
    /// What a slice of a compound request's time was spent on.
    pub enum Part {
        Llm = "llm",
        Tool = "tool",
        Retrieval = "retrieval",
        Guardrail = "guardrail",
        /// No call covered it: the application's own time.
        Residual = "residual",
    }
}

crate::names::label_enum! {
    /// Which of a compound request's figures a breakdown splits.
    pub enum Window {
        Ttft = "ttft",
        E2e = "e2e",
    }
}

/// One window split into parts (indexed as `Part::ALL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts(pub [Duration; 5]);

impl Parts {
    pub fn get(&self, p: Part) -> Duration {
        let i = Part::ALL.iter().position(|x| *x == p).unwrap_or(0);
        self.0.get(i).copied().unwrap_or_default()
    }

    pub fn total(&self) -> Duration {
        self.0.iter().sum()
    }

    fn add(&mut self, p: Part, d: Duration) {
        let i = Part::ALL.iter().position(|x| *x == p).unwrap_or(0);
        if let Some(slot) = self.0.get_mut(i) {
            *slot += d;
        }
    }
}

/// One LLM call of a compound request, as its own (outermost) tap saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    pub tap: Arc<str>,
    /// From the compound request's start to this call's start.
    pub offset: Duration,
    pub ttft: Option<Duration>,
    pub e2e: Duration,
    /// How much of this call lay before the compound's first token.
    pub before_first_token: Duration,
    pub output_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
}

/// Where one compound request's time went.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    pub tap: Arc<str>,
    pub request_id: Option<Arc<str>>,
    /// The compound request's trace (its span's, for a span of its own).
    pub trace: Option<crate::trace::TraceParent>,
    /// When the compound tap had the request headers.
    pub t0: Instant,
    pub ttft: Option<Parts>,
    pub e2e: Parts,
    pub llm_calls: Vec<LlmCall>,
    pub tool_calls: usize,
    pub retrieval_calls: usize,
    pub guardrail_calls: usize,
    /// Loop iterations: one per LLM call.
    pub iterations: Vec<Duration>,
    /// Output tokens over its LLM calls (those that reported them).
    pub output_tokens: Option<u64>,
    /// Input tokens over its LLM calls (each call's whole prompt: an agent
    /// loop sends the conversation again every iteration).
    pub input_tokens: Option<u64>,
    /// Every call counted, in order of start.
    pub members: Vec<Member>,
    /// Its calls were joined by the compound stage's links (`linker`), not
    /// by a trace id.
    pub by_links: bool,
}

/// One call a compound request made, as its tap saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub tap: Arc<str>,
    pub boundary: Boundary,
    /// From the compound request's start to the call's.
    pub offset: Duration,
    pub e2e: Duration,
    /// The call's `x-request-id`, if it carried one.
    pub request_id: Option<Arc<str>>,
}

fn is_llm(b: Boundary) -> bool {
    matches!(b, Boundary::Gateway | Boundary::Engine)
}

/// Precedence of a call's part (higher wins an instant).
fn precedence(r: &TapRecord) -> Option<(u8, Part)> {
    Some(match r.boundary {
        Boundary::Engine => (5, Part::Llm),
        Boundary::Tool => (4, Part::Tool),
        Boundary::Retrieval => (3, Part::Retrieval),
        Boundary::Guardrail => (2, Part::Guardrail),
        Boundary::Gateway => (1, Part::Llm),
        Boundary::Compound => return None,
    })
}

/// `[from, to)` split among the calls, by precedence.
fn split(calls: &[&TapRecord], from: Instant, to: Instant) -> Parts {
    let mut cuts: Vec<Instant> = vec![from, to];
    for c in calls {
        for t in [c.t0, c.end()] {
            if t > from && t < to {
                cuts.push(t);
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut parts = Parts::default();
    for w in cuts.windows(2) {
        let (Some(a), Some(b)) = (w.first(), w.get(1)) else {
            continue;
        };
        let part = calls
            .iter()
            .filter(|c| c.t0 <= *a && c.end() >= *b)
            .filter_map(|c| precedence(c))
            .max_by_key(|(p, _)| *p)
            .map_or(Part::Residual, |(_, part)| part);
        parts.add(part, *b - *a);
    }
    parts
}

/// The breakdown of every compound record of a group, over the group's
/// other records inside it. With `Clocks::PerTap` (the joiner) the
/// instants are the spans' wall-clock starts: the split is as exact as the
/// machines' clocks agree (a call that overhangs its request is clipped).
pub fn breakdowns(records: &[TapRecord], _clocks: Clocks) -> Vec<Breakdown> {
    records
        .iter()
        .filter(|c| c.boundary == Boundary::Compound)
        .map(|c| {
            let inside: Vec<&TapRecord> = records
                .iter()
                .filter(|r| r.boundary != Boundary::Compound)
                // Overlapping it: a call that overhangs (clocks of other
                // machines) counts for the part inside.
                .filter(|r| r.t0 <= c.end() && r.end() >= c.t0)
                .collect();
            breakdown(c, &inside)
        })
        .collect()
}

/// The LLM records no other LLM record of `calls` encloses.
fn outermost_llm<'a>(calls: &[&'a TapRecord]) -> Vec<&'a TapRecord> {
    let mut out: Vec<&TapRecord> = calls
        .iter()
        .copied()
        .filter(|r| is_llm(r.boundary))
        .filter(|r| {
            !calls.iter().any(|o| {
                o.boundary == Boundary::Gateway
                    && r.boundary == Boundary::Engine
                    && o.t0 <= r.t0
                    && o.end() >= r.end()
            })
        })
        .collect();
    out.sort_by_key(|r| r.t0);
    out
}

fn breakdown(c: &TapRecord, calls: &[&TapRecord]) -> Breakdown {
    let first_token = c.ttft.map(|t| c.t0 + t);
    let llm = outermost_llm(calls);
    let llm_calls: Vec<LlmCall> = llm
        .iter()
        .map(|r| LlmCall {
            tap: r.tap.clone(),
            offset: r.t0.saturating_duration_since(c.t0),
            ttft: r.ttft,
            e2e: r.e2e,
            before_first_token: first_token.map_or(Duration::ZERO, |f| {
                r.end().min(f).saturating_duration_since(r.t0)
            }),
            output_tokens: r.output_tokens,
            input_tokens: r.input_tokens,
        })
        .collect();
    let starts: Vec<Instant> = llm.iter().map(|r| r.t0).collect();
    let iterations = starts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            starts
                .get(i + 1)
                .copied()
                .unwrap_or(c.end())
                .saturating_duration_since(*s)
        })
        .collect();
    let count = |b: Boundary| calls.iter().filter(|r| r.boundary == b).count();
    let sum = |f: fn(&LlmCall) -> Option<u64>| {
        let v: Vec<u64> = llm_calls.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let (output_tokens, input_tokens) = (sum(|l| l.output_tokens), sum(|l| l.input_tokens));
    let mut members: Vec<Member> = calls
        .iter()
        .map(|r| Member {
            tap: r.tap.clone(),
            boundary: r.boundary,
            offset: r.t0.saturating_duration_since(c.t0),
            e2e: r.e2e,
            request_id: r.request_id.clone(),
        })
        .collect();
    members.sort_by_key(|m| m.offset);
    Breakdown {
        tap: c.tap.clone(),
        request_id: c.request_id.clone(),
        trace: c.trace,
        t0: c.t0,
        ttft: first_token.map(|f| split(calls, c.t0, f)),
        e2e: split(calls, c.t0, c.end()),
        llm_calls,
        tool_calls: count(Boundary::Tool),
        retrieval_calls: count(Boundary::Retrieval),
        guardrail_calls: count(Boundary::Guardrail),
        iterations,
        output_tokens,
        input_tokens,
        members,
        by_links: false,
    }
}

#[cfg(test)]
#[path = "compound_tests.rs"]
mod tests;
