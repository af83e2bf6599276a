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
        Boundary::Guardrail | Boundary::Tool | Boundary::Retrieval => 0,
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

fn encloses(outer: &TapRecord, inner: &TapRecord, clocks: Clocks) -> bool {
    let layered = !outer.boundary.is_service() && outer.tap != inner.tap;
    match clocks {
        Clocks::Shared => {
            layered
                && outer.t0 <= inner.t0
                && outer.end() >= inner.t0
                && (rank(outer.boundary) > rank(inner.boundary)
                    || (rank(outer.boundary) == rank(inner.boundary) && outer.t0 < inner.t0))
        }
        // No common clock: only the layers' order says who encloses whom.
        Clocks::PerTap => layered && rank(outer.boundary) > rank(inner.boundary),
    }
}

/// Index of the immediate outer of `records[i]`.
pub fn immediate_outer(records: &[TapRecord], i: usize, clocks: Clocks) -> Option<usize> {
    let inner = records.get(i)?;
    records
        .iter()
        .enumerate()
        .filter(|(j, r)| *j != i && encloses(r, inner, clocks))
        .min_by(|(_, a), (_, b)| {
            rank(a.boundary)
                .cmp(&rank(b.boundary))
                .then(b.t0.cmp(&a.t0))
        })
        .map(|(j, _)| j)
}

/// Microseconds → seconds, from a tap's own start.
fn us(v: u32) -> f64 {
    f64::from(v) / 1e6
}

/// What the layer between `outer` and `inner` added. With `Clocks::PerTap`
/// only differences of durations each measured at one tap are given: the
/// request path and the absolute relay delays need one clock.
pub fn attribute(
    outer: &TapRecord,
    inner: &TapRecord,
    joined_by: JoinKind,
    buffered_threshold: f64,
    clocks: Clocks,
) -> PairAttribution {
    let n = outer.events.len().min(inner.events.len());
    let shared = clocks == Clocks::Shared;
    let relay_delays: Vec<f64> = if shared {
        (0..n)
            .filter_map(|k| Some(secs(outer.event_at(k)?, inner.event_at(k)?)))
            .collect()
    } else {
        Vec::new()
    };
    let since_first =
        |r: &TapRecord, k: usize| Some(us(*r.events.get(k)?) - us(*r.events.first()?));
    let relay_after_first: Vec<f64> = (1..n)
        .filter_map(|k| Some(since_first(outer, k)? - since_first(inner, k)?))
        .collect();
    let added_jitter: Vec<f64> = (1..n)
        .filter_map(|k| {
            let og = us(*outer.events.get(k)?) - us(*outer.events.get(k - 1)?);
            let ig = us(*inner.events.get(k)?) - us(*inner.events.get(k - 1)?);
            Some((og - ig).abs())
        })
        .collect();
    // The inner events that had passed when the outer's first token did:
    // on one clock, exactly; on two, as if the request reached the inner
    // tap at once (an upper bound, off by the request path).
    let buffered_share = match (outer.events.first(), inner.events.len()) {
        (Some(first_out), total) if total >= 2 => {
            let before = (0..total)
                .filter(|k| match shared {
                    true => inner
                        .event_at(*k)
                        .zip(outer.event_at(0))
                        .is_some_and(|(t, first)| t <= first),
                    false => inner.events.get(*k).is_some_and(|t| t <= first_out),
                })
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
        request_path: shared.then(|| secs(inner.t0, outer.t0)),
        ttfb: outer.ttfb.zip(inner.ttfb).map(|(o, i)| signed(o, i)),
        ttft: outer.ttft.zip(inner.ttft).map(|(o, i)| signed(o, i)),
        e2e: signed(outer.e2e, inner.e2e),
        relay_delays,
        relay_after_first,
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
pub fn resolve<F>(
    records: &[TapRecord],
    joined_by: F,
    buffered_threshold: f64,
    clocks: Clocks,
) -> Resolution
where
    F: Fn(usize, usize) -> JoinKind,
{
    let mut res = Resolution::default();
    let outers: Vec<Option<usize>> = (0..records.len())
        .map(|i| {
            if records.get(i).is_some_and(|r| r.boundary.is_service()) {
                None
            } else {
                immediate_outer(records, i, clocks)
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
                    clocks,
                ));
            }
        }
    }
    let (hops, exposure) = guardrails(records, &outers, clocks);
    res.hops = hops;
    res.exposure = exposure;
    res.compound = super::compound::breakdowns(records, clocks);
    res
}

/// The non-guardrail record whose layer made guardrail call `h`: a gateway,
/// else a compound system, else any (on one clock: among those in flight
/// when the call started).
fn owner_of(records: &[TapRecord], h: &TapRecord, clocks: Clocks) -> Option<usize> {
    records
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            !c.boundary.is_service()
                && (clocks == Clocks::PerTap || (c.t0 <= h.t0 && c.end() >= h.t0))
        })
        .max_by_key(|(_, c)| {
            let pref = match c.boundary {
                Boundary::Gateway => 3,
                Boundary::Compound => 2,
                _ => 1,
            };
            (pref, c.t0)
        })
        .map(|(j, _)| j)
}

/// Where a guardrail call sits in the request of its owner `o`: before the
/// owner's inner (engine) request, or during or after it.
///
/// On one clock, by start times. On the taps' own clocks, by what the
/// call did to the owner's first token: an input call delays it, so it
/// fits into the owner's TTFT minus its inner's (durations only); a
/// longer call is an output call. Without TTFTs (not streamed): unknown.
fn phase_of(
    records: &[TapRecord],
    outers: &[Option<usize>],
    h: &TapRecord,
    o: usize,
    clocks: Clocks,
) -> Phase {
    let Some(c) = records.get(o) else {
        return Phase::Unknown;
    };
    let first_inner = outers
        .iter()
        .enumerate()
        .filter(|(_, out)| **out == Some(o))
        .filter_map(|(i, _)| records.get(i))
        .min_by_key(|r| r.t0);
    let before = match clocks {
        Clocks::Shared => match first_inner {
            Some(inner) => h.t0 < inner.t0,
            None => h.end() <= c.t0 + c.ttfb.unwrap_or(c.e2e),
        },
        Clocks::PerTap => {
            let held = match first_inner {
                Some(inner) => c.ttft.zip(inner.ttft).map(|(o, i)| o.saturating_sub(i)),
                None => c.ttft,
            };
            match held {
                Some(held) => h.e2e <= held + PHASE_SLACK,
                None => return Phase::Unknown,
            }
        }
    };
    if before {
        Phase::Input
    } else {
        Phase::Output
    }
}

/// Tolerance of the clock-free phase rule (timer and scheduling noise of
/// the taps that measured both durations).
const PHASE_SLACK: Duration = Duration::from_millis(1);

/// Every guardrail call with its owner and phase, and per owner and phase
/// the guardrail time the request was exposed to.
fn guardrails(
    records: &[TapRecord],
    outers: &[Option<usize>],
    clocks: Clocks,
) -> (Vec<HopCall>, Vec<Exposure>) {
    let mut hops = Vec::new();
    let mut by_owner: Vec<(usize, Phase, &TapRecord)> = Vec::new();
    for h in records.iter().filter(|r| r.is_guardrail()) {
        let owner = owner_of(records, h, clocks);
        let phase = owner.map_or(Phase::Unknown, |o| phase_of(records, outers, h, o, clocks));
        if let (Some(o), Phase::Input | Phase::Output) = (owner, phase) {
            by_owner.push((o, phase, h));
        }
        hops.push(HopCall {
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
    let mut exposure = Vec::new();
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
            let calls: Vec<&TapRecord> = by_owner
                .iter()
                .filter(|(w, p, _)| *w == o && *p == phase)
                .map(|(_, _, h)| *h)
                .collect();
            let exposed = match (clocks, calls.as_slice()) {
                (_, []) => continue,
                (Clocks::Shared, _) => {
                    exposed(calls.iter().map(|h| (h.t0, h.end())).collect(), engine)
                }
                // One input call on its own clock: it ran before the
                // engine request, all of it exposed. Parallel calls and
                // output calls need one clock to overlap.
                (Clocks::PerTap, [h]) if phase == Phase::Input => h.e2e,
                (Clocks::PerTap, _) => continue,
            };
            exposure.push(Exposure {
                owner: owner.tap.clone(),
                request_id: owner.request_id.clone(),
                phase,
                calls: calls.len(),
                exposed,
            });
        }
    }
    (hops, exposure)
}

#[cfg(test)]
mod tests;
