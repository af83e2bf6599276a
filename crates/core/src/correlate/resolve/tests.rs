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
        input_tokens: None,
        outcome: Outcome::Ok,
        verdict: Verdict::Pass,
        links: Default::default(),
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
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::Shared);
    let pairs: Vec<_> = r.pairs.iter().map(|p| (&*p.outer, &*p.inner)).collect();
    assert_eq!(pairs, vec![("gw", "engine"), ("edge", "gw")]);
    let gw = &r.pairs[0];
    assert!(close(gw.request_path.unwrap(), 0.005));
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
    let r = resolve(&records, |_, _| JoinKind::Fingerprint, 0.9, Clocks::Shared);
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
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::Shared);
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
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::Shared);
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
    let r = resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::Shared);
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

/// The same request seen by taps whose clocks disagree: each record's start
/// moved by its machine's offset (±500 ms), as the joiner sees them.
fn skewed(records: &[TapRecord], offsets_ms: &[i64]) -> Vec<TapRecord> {
    records
        .iter()
        .zip(offsets_ms)
        .map(|(r, off)| {
            let mut r = r.clone();
            let d = ms(off.unsigned_abs());
            r.t0 = if *off >= 0 { r.t0 + d } else { r.t0 - d };
            r
        })
        .collect()
}

#[test]
fn on_the_taps_own_clocks_every_clock_free_figure_is_the_same_whatever_the_offsets() {
    let b = Instant::now() + ms(1000);
    // edge → gw (calls an input guardrail for 12 ms, then the engine) → engine.
    let mut guard = rec(b, "guard", Boundary::Guardrail, 7, None, 19, &[]);
    guard.ttfb = Some(ms(12));
    let records = vec![
        rec(
            b,
            "edge",
            Boundary::Compound,
            0,
            Some(52),
            101,
            &[52, 63, 73],
        ),
        rec(b, "gw", Boundary::Gateway, 5, Some(50), 99, &[50, 61, 71]),
        guard,
        rec(
            b,
            "engine",
            Boundary::Engine,
            20,
            Some(35),
            90,
            &[35, 45, 55],
        ),
    ];
    let one = resolve(&records, |_, _| JoinKind::Trace, 0.9, Clocks::Shared);
    for offsets in [[0, 0, 0, 0], [500, -500, 250, -120], [-500, 500, -500, 500]] {
        let many = resolve(
            &skewed(&records, &offsets),
            |_, _| JoinKind::Trace,
            0.9,
            Clocks::PerTap,
        );
        assert_eq!(many.pairs.len(), one.pairs.len(), "{offsets:?}");
        for (a, p) in one.pairs.iter().zip(&many.pairs) {
            assert_eq!((&a.outer, &a.inner), (&p.outer, &p.inner), "{offsets:?}");
            assert_eq!((a.ttfb, a.ttft, a.e2e), (p.ttfb, p.ttft, p.e2e));
            assert_eq!(a.relay_after_first, p.relay_after_first);
            assert_eq!(a.added_jitter, p.added_jitter);
            assert_eq!(a.token_mismatch, p.token_mismatch);
            // What needs one clock is not given.
            assert!(p.request_path.is_none() && p.relay_delays.is_empty());
        }
        let gw_engine = many.pairs.iter().find(|p| &*p.inner == "engine").unwrap();
        assert_eq!(
            gw_engine
                .relay_after_first
                .iter()
                .map(|d| (d * 1e3).round())
                .collect::<Vec<_>>(),
            vec![1.0, 1.0],
            "the gateway added 1 ms to each later token, on its own clock"
        );
        assert_eq!(many.hops.len(), 1);
        assert_eq!(
            (many.hops[0].phase, many.hops[0].duration),
            (Phase::Input, ms(12))
        );
        assert_eq!(one.hops[0].phase, Phase::Input);
        let exposed: Vec<_> = many.exposure.iter().map(|e| (e.phase, e.exposed)).collect();
        assert_eq!(exposed, vec![(Phase::Input, ms(12))]);
        assert_eq!(one.exposure[0].exposed, ms(12), "one clock agrees");
    }
}

#[test]
fn on_the_taps_own_clocks_a_call_longer_than_the_first_token_wait_is_output() {
    let b = Instant::now();
    let gw = rec(b, "gw", Boundary::Gateway, 0, Some(30), 200, &[30, 40]);
    let engine = rec(b, "engine", Boundary::Engine, 5, Some(30), 150, &[30, 40]);
    // The gateway waited 5 ms for the first token beyond the engine; a
    // 120 ms call cannot have been before it.
    let guard = rec(b, "guard", Boundary::Guardrail, 150, None, 270, &[]);
    let r = resolve(
        &[gw, engine, guard],
        |_, _| JoinKind::Trace,
        0.9,
        Clocks::PerTap,
    );
    assert_eq!(r.hops[0].phase, Phase::Output);
    assert!(r.exposure.is_empty(), "output exposure needs one clock");
}
