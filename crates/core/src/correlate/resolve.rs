//! From a settled group of records of one request (one trace, or joined by
//! fingerprint) to attribution: which tap encloses which, what each layer
//! added, where the guardrail calls sit and how much of their time the
//! request waited for. Pure: records in, `Resolution` out.
//!
//! Nesting: a tap's *immediate outer* is, among the other non-guardrail
//! records that had started by its own start and had not ended yet, the one
//! of the closest layer (rank compound > gateway > engine; the same rank
//! counts as outer only when it started earlier), latest start first. Each
//! record with an immediate outer forms one pair. Guardrail records are
//! hops: they belong to the enclosing gateway (else compound, else any)
//! record, and are `input` when they started before that layer's inner
//! (engine) request, `output` otherwise.

use super::types::*;
use crate::tap::Boundary;
use std::time::{Duration, Instant};

fn rank(b: Boundary) -> u8 {
    match b {
        Boundary::Compound => 3,
        Boundary::Gateway => 2,
        Boundary::Engine => 1,
        Boundary::Guardrail => 0,
    }
}

/// `a - b` in signed seconds.
pub fn secs(a: Instant, b: Instant) -> f64 {
    if a >= b {
        (a - b).as_secs_f64()
    } else {
        -(b - a).as_secs_f64()
    }
}

fn signed(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() - b.as_secs_f64()
}

fn encloses(outer: &TapRecord, inner: &TapRecord) -> bool {
    !outer.is_guardrail()
        && outer.tap != inner.tap
        && outer.t0 <= inner.t0
        && outer.end() >= inner.t0
        && (rank(outer.boundary) > rank(inner.boundary)
            || (rank(outer.boundary) == rank(inner.boundary) && outer.t0 < inner.t0))
}

/// Index of the immediate outer of `records[i]`.
pub fn immediate_outer(records: &[TapRecord], i: usize) -> Option<usize> {
    let inner = records.get(i)?;
    records
        .iter()
        .enumerate()
        .filter(|(j, r)| *j != i && encloses(r, inner))
        .min_by(|(_, a), (_, b)| {
            rank(a.boundary)
                .cmp(&rank(b.boundary))
                .then(b.t0.cmp(&a.t0))
        })
        .map(|(j, _)| j)
}

/// What the layer between `outer` and `inner` added.
pub fn attribute(
    outer: &TapRecord,
    inner: &TapRecord,
    joined_by: JoinKind,
    buffered_threshold: f64,
) -> PairAttribution {
    let n = outer.events.len().min(inner.events.len());
    let relay_delays: Vec<f64> = (0..n)
        .filter_map(|k| Some(secs(outer.event_at(k)?, inner.event_at(k)?)))
        .collect();
    let added_jitter: Vec<f64> = (1..n)
        .filter_map(|k| {
            let og = secs(outer.event_at(k)?, outer.event_at(k - 1)?);
            let ig = secs(inner.event_at(k)?, inner.event_at(k - 1)?);
            Some((og - ig).abs())
        })
        .collect();
    let buffered_share = match (outer.event_at(0), inner.events.len()) {
        (Some(first_out), total) if total >= 2 => {
            let before = (0..total)
                .filter(|k| inner.event_at(*k).is_some_and(|t| t <= first_out))
                .count();
            Some(before as f64 / total as f64)
        }
        _ => None,
    };
    let token_mismatch = match (outer.output_tokens, inner.output_tokens) {
        (Some(o), Some(i)) if o != i => {
            Some(i64::try_from(o).unwrap_or(i64::MAX) - i64::try_from(i).unwrap_or(i64::MAX))
        }
        _ => None,
    };
    PairAttribution {
        outer: outer.tap.clone(),
        inner: inner.tap.clone(),
        request_id: outer.request_id.clone(),
        inner_request_id: inner.request_id.clone(),
        joined_by,
        request_path: secs(inner.t0, outer.t0),
        ttfb: outer.ttfb.zip(inner.ttfb).map(|(o, i)| signed(o, i)),
        ttft: outer.ttft.zip(inner.ttft).map(|(o, i)| signed(o, i)),
        e2e: signed(outer.e2e, inner.e2e),
        relay_delays,
        added_jitter,
        buffered: buffered_share.is_some_and(|s| s >= buffered_threshold),
        buffered_share,
        token_mismatch,
    }
}

/// Length of the union of intervals, minus its overlap with `minus`.
pub fn exposed(
    mut intervals: Vec<(Instant, Instant)>,
    minus: Option<(Instant, Instant)>,
) -> Duration {
    intervals.sort_by_key(|(s, _)| *s);
    let mut merged: Vec<(Instant, Instant)> = Vec::new();
    for (s, e) in intervals {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
        .into_iter()
        .map(|(s, e)| {
            let len = e.saturating_duration_since(s);
            let overlap = minus.map_or(Duration::ZERO, |(a, b)| {
                b.min(e).saturating_duration_since(a.max(s))
            });
            len.saturating_sub(overlap)
        })
        .sum()
}

/// Resolves one settled group. `joined_by(i, j)` says how records i and j
/// were joined.
pub fn resolve<F>(records: &[TapRecord], joined_by: F, buffered_threshold: f64) -> Resolution
where
    F: Fn(usize, usize) -> JoinKind,
{
    let mut res = Resolution::default();
    let outers: Vec<Option<usize>> = (0..records.len())
        .map(|i| {
            if records.get(i).is_some_and(TapRecord::is_guardrail) {
                None
            } else {
                immediate_outer(records, i)
            }
        })
        .collect();
    for (i, o) in outers.iter().enumerate() {
        if let (Some(o), Some(inner)) = (o, records.get(i)) {
            if let Some(outer) = records.get(*o) {
                res.pairs.push(attribute(
                    outer,
                    inner,
                    joined_by(*o, i),
                    buffered_threshold,
                ));
            }
        }
    }
    // Guardrail hops: owner, phase, exposure.
    let mut by_owner: Vec<(usize, Phase, (Instant, Instant))> = Vec::new();
    for h in records.iter().filter(|r| r.is_guardrail()) {
        let owner = records
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_guardrail() && c.t0 <= h.t0 && c.end() >= h.t0)
            .max_by_key(|(_, c)| {
                let pref = match c.boundary {
                    Boundary::Gateway => 3,
                    Boundary::Compound => 2,
                    _ => 1,
                };
                (pref, c.t0)
            })
            .map(|(j, _)| j);
        let phase = match owner.and_then(|o| records.get(o).map(|c| (o, c))) {
            None => Phase::Unknown,
            Some((o, c)) => {
                let first_inner = outers
                    .iter()
                    .enumerate()
                    .filter(|(_, out)| **out == Some(o))
                    .filter_map(|(i, _)| records.get(i))
                    .min_by_key(|r| r.t0);
                let before = match first_inner {
                    Some(inner) => h.t0 < inner.t0,
                    None => h.end() <= c.t0 + c.ttfb.unwrap_or(c.e2e),
                };
                if before {
                    Phase::Input
                } else {
                    Phase::Output
                }
            }
        };
        if let (Some(o), Phase::Input | Phase::Output) = (owner, phase) {
            by_owner.push((o, phase, (h.t0, h.end())));
        }
        res.hops.push(HopCall {
            hop: h.hop.clone().unwrap_or_else(|| h.tap.clone()),
            request_id: owner
                .and_then(|o| records.get(o))
                .and_then(|c| c.request_id.clone())
                .or_else(|| h.request_id.clone()),
            owner: owner.and_then(|o| records.get(o)).map(|c| c.tap.clone()),
            phase,
            duration: h.e2e,
            verdict: h.verdict,
        });
    }
    let mut owners: Vec<usize> = by_owner.iter().map(|(o, _, _)| *o).collect();
    owners.sort_unstable();
    owners.dedup();
    for o in owners {
        let Some(owner) = records.get(o) else {
            continue;
        };
        let engine = outers
            .iter()
            .enumerate()
            .filter(|(_, out)| **out == Some(o))
            .filter_map(|(i, _)| records.get(i))
            .min_by_key(|r| r.t0)
            .map(|r| (r.t0, r.end()));
        for phase in [Phase::Input, Phase::Output] {
            let intervals: Vec<_> = by_owner
                .iter()
                .filter(|(w, p, _)| *w == o && *p == phase)
                .map(|(_, _, iv)| *iv)
                .collect();
            if intervals.is_empty() {
                continue;
            }
            res.exposure.push(Exposure {
                owner: owner.tap.clone(),
                request_id: owner.request_id.clone(),
                phase,
                calls: intervals.len(),
                exposed: exposed(intervals, engine),
            });
        }
    }
    res
}

#[cfg(test)]
mod tests;
