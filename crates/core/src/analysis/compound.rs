//! Where a compound tap's requests spent their time, for the report
//! (`/report`, `tokentap report`): each request's TTFT and E2E split into
//! LLM, tool, retrieval and guardrail calls and the residual, by the live
//! breakdown's own rule (`correlate::compound`), from the samples of every
//! tap joined by trace id. Shown stacked: the request at each percentile of
//! the figure (its parts add up to it exactly), and the mean of every part;
//! beside it, how many calls of each kind a request made.
//!
//! Requests joined by links only (no trace id: `correlate::linker`) are not
//! in a record log's samples as a group; their breakdown is live (metrics
//! and spans), and the report says how many compound requests it could not
//! break down.

use super::guardrail::record_of;
use super::sample::Sample;
use super::stats::Summary;
use crate::correlate::compound::{breakdowns, Breakdown, Part, Parts};
use crate::correlate::{Clocks, TapRecord};
use crate::tap::Boundary;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// One row of a stacked breakdown: a figure and its parts (ms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackRow {
    /// `p50`, `p90`, `p99` (the request at that rank) or `mean`.
    pub at: String,
    pub total_ms: f64,
    /// By `Part` label, in `Part::ALL` order.
    pub parts_ms: BTreeMap<String, f64>,
}

/// A window (TTFT or E2E) of every request broken down, stacked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stack {
    /// Requests broken down.
    pub n: usize,
    pub rows: Vec<StackRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompoundReport {
    /// Compound requests with at least one call joined (by trace id).
    pub requests: usize,
    /// Compound requests of the span with no call joined by trace id.
    pub not_broken_down: usize,
    pub e2e: Stack,
    pub ttft: Stack,
    /// Calls per request, by kind (`llm`, `tool`, `retrieval`,
    /// `guardrail`): how many requests made each number of calls.
    pub calls_per_request: BTreeMap<String, BTreeMap<usize, usize>>,
    /// Each agent-loop iteration (ms).
    pub iteration_ms: Summary,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Ranks shown, with the requests each needs to mean something (no p99
/// from 20 requests).
const RANKS: [(&str, f64, usize); 3] = [("p50", 0.5, 1), ("p90", 0.9, 10), ("p99", 0.99, 100)];

fn stack(parts: &[Parts]) -> Stack {
    let row = |at: &str, p: &Parts| StackRow {
        at: at.into(),
        total_ms: ms(p.total()),
        parts_ms: Part::ALL
            .iter()
            .map(|k| (k.as_str().to_owned(), ms(p.get(*k))))
            .collect(),
    };
    let mut sorted: Vec<&Parts> = parts.iter().collect();
    sorted.sort_by_key(|p| p.total());
    let n = sorted.len();
    let mut rows: Vec<StackRow> = RANKS
        .iter()
        .filter(|(_, _, need)| n >= *need)
        .filter_map(|(at, q, _)| {
            // Nearest rank: the request whose figure is that percentile.
            let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            sorted.get(i).map(|p| row(at, p))
        })
        .collect();
    if n > 0 {
        let mut mean = Parts::default();
        for (slot, k) in mean.0.iter_mut().zip(Part::ALL) {
            let sum: Duration = parts.iter().map(|p| p.get(k)).sum();
            *slot = sum / u32::try_from(n).unwrap_or(u32::MAX);
        }
        rows.push(row("mean", &mean));
    }
    Stack { n, rows }
}

/// The compound report of the compound tap `tap`'s samples (`mine`), over
/// every tap's samples (`all`) joined by trace id. `base` lays wall times
/// on the monotonic clock.
pub fn analyze(tap: &str, mine: &[&Sample], all: &[&Sample], base: Instant) -> CompoundReport {
    let mut by_trace: HashMap<&str, Vec<&Sample>> = HashMap::new();
    for s in all {
        if let Some(t) = s.trace_id.as_deref() {
            by_trace.entry(t).or_default().push(s);
        }
    }
    let mut r = CompoundReport::default();
    let (mut e2e, mut ttft, mut iterations) = (Vec::new(), Vec::new(), Vec::new());
    for c in mine {
        let Some(b) = broken_down(tap, c, &by_trace, base) else {
            r.not_broken_down += 1;
            continue;
        };
        r.requests += 1;
        e2e.push(b.e2e);
        ttft.extend(b.ttft);
        iterations.extend(b.iterations.iter().map(|d| ms(*d)));
        for (kind, n) in [
            ("llm", b.llm_calls.len()),
            ("tool", b.tool_calls),
            ("retrieval", b.retrieval_calls),
            ("guardrail", b.guardrail_calls),
        ] {
            *r.calls_per_request
                .entry(kind.into())
                .or_default()
                .entry(n)
                .or_default() += 1;
        }
    }
    r.e2e = stack(&e2e);
    r.ttft = stack(&ttft);
    r.iteration_ms = Summary::of(iterations);
    r
}

/// The breakdown of one compound sample, if its trace joined it to calls.
fn broken_down(
    tap: &str,
    c: &Sample,
    by_trace: &HashMap<&str, Vec<&Sample>>,
    base: Instant,
) -> Option<Breakdown> {
    let group = by_trace.get(c.trace_id.as_deref()?)?;
    let first = group
        .iter()
        .map(|s| s.start_unix_ms)
        .fold(f64::INFINITY, f64::min);
    let at = |s: &Sample| {
        base + Duration::try_from_secs_f64((s.start_unix_ms - first).max(0.0) / 1e3)
            .unwrap_or_default()
    };
    let me = record_of(c, at(c))?;
    let mut records: Vec<TapRecord> = vec![me.clone()];
    records.extend(
        group
            .iter()
            .filter(|s| s.boundary != Boundary::Compound.as_str())
            .filter_map(|s| record_of(s, at(s))),
    );
    let one_log = group.iter().all(|s| s.origin == c.origin);
    let clocks = if one_log {
        Clocks::Shared
    } else {
        Clocks::PerTap
    };
    breakdowns(&records, clocks)
        .into_iter()
        .find(|b| &*b.tap == tap && b.t0 == me.t0)
        .filter(|b| !b.members.is_empty())
}

#[cfg(test)]
#[path = "compound_tests.rs"]
mod tests;
