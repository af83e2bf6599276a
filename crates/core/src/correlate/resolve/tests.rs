use super::*;
use crate::record::{Outcome, Verdict};
use std::sync::Arc;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A record starting `t0` ms after `base`; `events` are absolute ms too.
fn rec(
    base: Instant,
    tap: &str,
    boundary: Boundary,
    t0: u64,
    ttft: Option<u64>,
    end: u64,
    events: &[u64],
) -> TapRecord {
    TapRecord {
        tap: Arc::from(tap),
        boundary,
        hop: (boundary == Boundary::Guardrail).then(|| Arc::from(tap)),
        trace: None,
        fingerprint: None,
        request_id: Some(Arc::from("r")),
        t0: base + ms(t0),
        ttfb: Some(ms(1)),
        ttft: ttft.map(|t| ms(t - t0)),
        e2e: ms(end - t0),
        events: events.iter().map(|e| ((e - t0) * 1000) as u32).collect(),
        events_truncated: false,
        output_tokens: Some(events.len() as u64),
        outcome: Outcome::Ok,
        verdict: Verdict::Pass,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_chain_pairs_adjacent_layers_only() {
    let b = Instant::now();
    let records = vec![
        rec(
            b,
            "engine",
            Boundary::Engine,
            10,
            Some(35),
            90,
            &[35, 45, 55],
        ),
        rec(
            b,
            "edge",
            Boundary::Compound,
            0,
            Some(50),
            100,
            &[50, 60, 70],
        ),
        rec(b, "gw", Boundary::Gateway, 5, Some(40), 95, &[40, 50, 60]),
    ];
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9);
    let pairs: Vec<_> = r.pairs.iter().map(|p| (&*p.outer, &*p.inner)).collect();
    assert_eq!(pairs, vec![("gw", "engine"), ("edge", "gw")]);
    let gw = &r.pairs[0];
    assert!(close(gw.request_path, 0.005));
    assert!(
        close(gw.ttft.unwrap(), 0.035 - 0.025),
        "outer TTFT 35 ms, inner 25 ms"
    );
    assert!(gw.relay_delays.iter().all(|d| close(*d, 0.005)));
    assert_eq!(gw.added_jitter.len(), 2);
    assert!(gw.added_jitter.iter().all(|j| close(*j, 0.0)));
    assert_eq!(gw.buffered_share, Some(1.0 / 3.0));
    assert!(!gw.buffered);
    assert_eq!(gw.token_mismatch, None);
}

#[test]
fn a_layer_that_waits_for_the_whole_answer_is_flagged() {
    let b = Instant::now();
    let records = vec![
        rec(
            b,
            "engine",
            Boundary::Engine,
            10,
            Some(20),
            60,
            &[20, 30, 40, 50],
        ),
        rec(
            b,
            "gw",
            Boundary::Gateway,
            0,
            Some(70),
            75,
            &[70, 71, 72, 73],
        ),
    ];
    let r = resolve(&records, |_, _| JoinKind::Fingerprint, 0.9);
    let p = &r.pairs[0];
    assert_eq!(p.joined_by, JoinKind::Fingerprint);
    assert_eq!(p.buffered_share, Some(1.0));
    assert!(p.buffered);
    assert!(close(p.added_jitter[0], 0.009), "1 ms gap vs 10 ms gap");
}

#[test]
fn same_boundary_nests_by_start_and_strangers_do_not_pair() {
    let b = Instant::now();
    let records = vec![
        rec(b, "outer", Boundary::Gateway, 0, Some(30), 100, &[30]),
        rec(b, "inner", Boundary::Gateway, 5, Some(25), 90, &[25]),
        rec(b, "later", Boundary::Engine, 200, Some(210), 220, &[210]),
    ];
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9);
    let pairs: Vec<_> = r.pairs.iter().map(|p| (&*p.outer, &*p.inner)).collect();
    assert_eq!(
        pairs,
        vec![("outer", "inner")],
        "a record that started after the others ended has no outer"
    );
}

#[test]
fn guardrail_hops_get_owner_phase_and_exposure_with_parallel_calls_once() {
    let b = Instant::now();
    let records = vec![
        rec(b, "gw", Boundary::Gateway, 0, Some(60), 200, &[60]),
        rec(b, "engine", Boundary::Engine, 50, Some(55), 150, &[55]),
        // Two input guardrails in parallel: 5..45 and 10..40 → 40 ms exposed.
        rec(b, "guard-a", Boundary::Guardrail, 5, None, 45, &[]),
        rec(b, "guard-b", Boundary::Guardrail, 10, None, 40, &[]),
        // Output: one during the stream (100..160), one after (150..180):
        // union 100..180, engine until 150 → 30 ms exposed.
        rec(b, "guard-c", Boundary::Guardrail, 100, None, 160, &[]),
        rec(b, "guard-d", Boundary::Guardrail, 150, None, 180, &[]),
    ];
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9);
    let phases: Vec<_> = r
        .hops
        .iter()
        .map(|h| (&*h.hop, h.phase, h.owner.as_deref()))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("guard-a", Phase::Input, Some("gw")),
            ("guard-b", Phase::Input, Some("gw")),
            ("guard-c", Phase::Output, Some("gw")),
            ("guard-d", Phase::Output, Some("gw")),
        ]
    );
    assert_eq!(r.hops[0].duration, ms(40));
    let exp: Vec<_> = r
        .exposure
        .iter()
        .map(|e| (e.phase, e.exposed, e.calls))
        .collect();
    assert_eq!(
        exp,
        vec![(Phase::Input, ms(40), 2), (Phase::Output, ms(30), 2)]
    );
    assert_eq!(r.pairs.len(), 1, "hops are not pairs");
}

#[test]
fn a_hop_outside_any_request_is_unknown() {
    let b = Instant::now();
    let records = vec![rec(b, "guard", Boundary::Guardrail, 5, None, 10, &[])];
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9);
    assert_eq!(r.hops[0].phase, Phase::Unknown);
    assert!(r.exposure.is_empty());
}

#[test]
fn exposed_time_is_a_union_minus_overlap() {
    let b = Instant::now();
    let iv = |s, e| (b + ms(s), b + ms(e));
    assert_eq!(
        exposed(vec![iv(0, 10), iv(5, 20), iv(30, 40)], None),
        ms(30)
    );
    assert_eq!(
        exposed(vec![iv(0, 10), iv(5, 20), iv(30, 40)], Some(iv(8, 35))),
        ms(13)
    );
    assert_eq!(exposed(vec![], None), Duration::ZERO);
}
