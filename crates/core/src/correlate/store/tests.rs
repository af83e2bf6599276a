use super::*;
use crate::record::{Outcome, Verdict};
use crate::tap::Boundary;
use crate::trace::TraceParent;

#[derive(Default)]
struct Collect {
    resolved: Mutex<Vec<Resolution>>,
    counts: Mutex<HashMap<&'static str, u64>>,
}

impl AttributionSink for Collect {
    fn resolved(&self, r: &Resolution) {
        self.resolved.lock().unwrap().push(r.clone());
    }
    fn counted(&self, result: Joined, n: u64) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(result.as_str())
            .or_default() += n;
    }
}

impl Collect {
    fn count(&self, k: &str) -> u64 {
        self.counts.lock().unwrap().get(k).copied().unwrap_or(0)
    }
    fn pairs(&self) -> Vec<(String, String, JoinKind)> {
        self.resolved
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r.pairs
                    .iter()
                    .map(|p| (p.outer.to_string(), p.inner.to_string(), p.joined_by))
            })
            .collect()
    }
}

const CFG: CorrelationConfig = CorrelationConfig {
    settle: Duration::from_millis(100),
    max_age: Duration::from_secs(60),
    max_groups: 100,
    fingerprint_window: Duration::from_secs(5),
    max_events: 64,
    buffered_share: 0.9,
    clocks: Clocks::Shared,
    compound_links: false,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn rec(
    base: Instant,
    tap: &str,
    b: Boundary,
    t0: u64,
    end: u64,
    trace: Option<TraceParent>,
    fp: Option<u64>,
) -> TapRecord {
    TapRecord {
        tap: Arc::from(tap),
        boundary: b,
        hop: None,
        trace,
        fingerprint: fp,
        request_id: None,
        t0: base + ms(t0),
        ttfb: Some(ms(1)),
        ttft: Some(ms(5)),
        e2e: ms(end - t0),
        events: vec![5000, 6000],
        events_truncated: false,
        output_tokens: Some(2),
        input_tokens: None,
        outcome: Outcome::Ok,
        verdict: Verdict::Unknown,
        links: Default::default(),
    }
}

fn setup() -> (Arc<Correlator>, Arc<Collect>, Instant) {
    let sink = Arc::new(Collect::default());
    (
        Correlator::new(CFG, vec![sink.clone()]),
        sink,
        Instant::now(),
    )
}

#[test]
fn trace_groups_resolve_after_they_settle() {
    let (c, sink, b) = setup();
    let t = Some(TraceParent::generate());
    c.submit(
        rec(b, "engine", Boundary::Engine, 10, 90, t, None),
        b + ms(90),
    );
    c.submit(
        rec(b, "gw", Boundary::Gateway, 0, 100, t, None),
        b + ms(100),
    );
    c.sweep(b + ms(150));
    assert!(sink.pairs().is_empty(), "not settled yet");
    c.sweep(b + ms(200));
    assert_eq!(
        sink.pairs(),
        vec![("gw".into(), "engine".into(), JoinKind::Trace)]
    );
    assert_eq!(sink.count("joined_trace"), 2);
    assert_eq!(c.pending(), 0);
}

/// An input guardrail call ends long before the stream it guards: its
/// group waits while a request of the same trace is still in flight
/// anywhere, then joins the stream's records.
#[test]
fn a_group_waits_for_requests_of_its_trace_still_in_flight() {
    let (c, sink, b) = setup();
    let t = TraceParent::generate();
    let gw = c.open(t.trace_id);
    let engine = c.open(t.trace_id);
    let guard = c.open(t.trace_id);
    let mut g = rec(b, "guard", Boundary::Guardrail, 5, 30, Some(t), None);
    g.hop = Some(Arc::from("llama-guard"));
    c.submit(g, b + ms(30));
    drop(guard);
    // Ten settle periods later, the stream is still running.
    c.sweep(b + ms(1_000));
    assert_eq!(sink.count("unjoined"), 0, "settled while in flight");
    assert_eq!(c.pending(), 1);
    c.submit(
        rec(b, "engine", Boundary::Engine, 40, 2_000, Some(t), None),
        b + ms(2_000),
    );
    drop(engine);
    c.submit(
        rec(b, "gw", Boundary::Gateway, 0, 2_010, Some(t), None),
        b + ms(2_010),
    );
    drop(gw);
    c.sweep(b + ms(2_200));
    assert_eq!(sink.count("joined_trace"), 3);
    assert_eq!(sink.count("unjoined"), 0);
    assert_eq!(c.pending(), 0);
    // The max age still bounds a trace that never closes.
    let (c, sink, b) = setup();
    let t = TraceParent::generate();
    let _open = c.open(t.trace_id);
    c.submit(
        rec(b, "guard", Boundary::Guardrail, 0, 10, Some(t), None),
        b + ms(10),
    );
    c.sweep(b + CFG.max_age + ms(20));
    assert_eq!(sink.count("unjoined"), 1);
}

#[test]
fn a_loose_record_joins_its_trace_group_by_fingerprint() {
    let (c, sink, b) = setup();
    let t = Some(TraceParent::generate());
    c.submit(
        rec(b, "engine", Boundary::Engine, 10, 90, None, Some(7)),
        b + ms(90),
    );
    c.submit(
        rec(b, "gw", Boundary::Gateway, 5, 95, t, Some(7)),
        b + ms(95),
    );
    c.submit(
        rec(b, "edge", Boundary::Compound, 0, 100, t, Some(7)),
        b + ms(100),
    );
    c.sweep(b + ms(300));
    let mut pairs = sink.pairs();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![
            ("edge".into(), "gw".into(), JoinKind::Trace),
            ("gw".into(), "engine".into(), JoinKind::Fingerprint)
        ]
    );
    assert_eq!(
        (sink.count("joined_trace"), sink.count("joined_fingerprint")),
        (2, 1)
    );
}

#[test]
fn two_matching_groups_are_ambiguous_and_nothing_is_guessed() {
    let (c, sink, b) = setup();
    let (t1, t2) = (Some(TraceParent::generate()), Some(TraceParent::generate()));
    c.submit(rec(b, "gw", Boundary::Gateway, 0, 100, t1, Some(7)), b);
    c.submit(rec(b, "gw", Boundary::Gateway, 2, 100, t2, Some(7)), b);
    c.submit(rec(b, "engine", Boundary::Engine, 10, 90, None, Some(7)), b);
    c.sweep(b + ms(300));
    assert!(sink.pairs().is_empty());
    assert_eq!(sink.count("ambiguous"), 1);
    assert_eq!(sink.count("unjoined"), 2, "each gateway record alone");
}

#[test]
fn identical_requests_that_do_not_overlap_are_not_ambiguous() {
    let (c, sink, b) = setup();
    let (t1, t2) = (Some(TraceParent::generate()), Some(TraceParent::generate()));
    c.submit(rec(b, "gw", Boundary::Gateway, 0, 100, t1, Some(7)), b);
    c.submit(rec(b, "engine", Boundary::Engine, 10, 90, None, Some(7)), b);
    c.submit(rec(b, "gw", Boundary::Gateway, 200, 300, t2, Some(7)), b);
    c.submit(
        rec(b, "engine", Boundary::Engine, 210, 290, None, Some(7)),
        b,
    );
    c.sweep(b + ms(300));
    assert_eq!(sink.pairs().len(), 2);
    assert_eq!(sink.count("ambiguous"), 0);
}

#[test]
fn loose_records_join_each_other() {
    let (c, sink, b) = setup();
    c.submit(rec(b, "engine", Boundary::Engine, 10, 90, None, Some(9)), b);
    c.submit(rec(b, "gw", Boundary::Gateway, 0, 100, None, Some(9)), b);
    c.submit(rec(b, "gw", Boundary::Gateway, 0, 100, None, Some(10)), b);
    c.sweep(b + ms(150));
    c.sweep(b + ms(300));
    assert_eq!(
        sink.pairs(),
        vec![("gw".into(), "engine".into(), JoinKind::Fingerprint)]
    );
    assert_eq!(sink.count("joined_fingerprint"), 2);
    assert_eq!(sink.count("unjoined"), 1);
}

#[test]
fn memory_is_bounded_and_evictions_counted() {
    let sink = Arc::new(Collect::default());
    let c = Correlator::new(
        CorrelationConfig {
            max_groups: 3,
            ..CFG
        },
        vec![sink.clone()],
    );
    let b = Instant::now();
    for i in 0..10 {
        c.submit(
            rec(
                b,
                "gw",
                Boundary::Gateway,
                i,
                100,
                Some(TraceParent::generate()),
                None,
            ),
            b + ms(i),
        );
        c.submit(
            rec(b, "engine", Boundary::Engine, i, 100, None, None),
            b + ms(i),
        );
    }
    assert_eq!(c.pending(), 6);
    assert_eq!(sink.count("evicted"), 14);
}

#[test]
fn a_group_that_keeps_growing_is_resolved_at_its_max_age() {
    let (c, sink, b) = setup();
    let t = Some(TraceParent::generate());
    // A record every 50 ms never lets the group settle (100 ms) ...
    for i in 0..30u64 {
        c.submit(
            rec(
                b,
                &format!("t{i}"),
                Boundary::Gateway,
                i * 50,
                i * 50 + 10,
                t,
                None,
            ),
            b + ms(i * 50),
        );
        c.sweep(b + ms(i * 50 + 1));
    }
    assert_eq!(c.pending(), 30);
    // ... until its first record is older than max_age.
    c.sweep(b + Duration::from_secs(61));
    assert_eq!(c.pending(), 0);
    assert_eq!(sink.count("joined_trace"), 30);
}

/// The taps of one request flush their spans on their own timers: the
/// untraced inner record may arrive after its traced outer one has
/// settled. Either order, any gap under `settle`, gives the same join.
#[test]
fn joins_do_not_depend_on_the_order_records_arrive_in() {
    for (outer_at, inner_at) in [(0, 90), (90, 0), (0, 0), (0, 99), (99, 0)] {
        let (c, sink, b) = setup();
        let t = Some(TraceParent::generate());
        let mut subs = vec![
            (
                outer_at,
                rec(b, "edge", Boundary::Compound, 0, 50, t, Some(3)),
            ),
            (
                inner_at,
                rec(b, "engine", Boundary::Engine, 10, 40, None, Some(3)),
            ),
        ];
        subs.sort_by_key(|(at, _)| *at);
        // A sweep every 10 ms, as the sweeper thread would.
        let mut now = 0;
        for (at, r) in subs {
            while now + 10 <= at {
                now += 10;
                c.sweep(b + ms(50 + now));
            }
            c.submit(r, b + ms(50 + at));
        }
        while now < 400 {
            now += 10;
            c.sweep(b + ms(50 + now));
        }
        assert_eq!(
            sink.pairs(),
            vec![("edge".into(), "engine".into(), JoinKind::Fingerprint)],
            "outer at +{outer_at} ms, inner at +{inner_at} ms"
        );
        assert_eq!(sink.count("unjoined"), 0);
        assert_eq!(c.pending(), 0);
    }
}

/// A guardrail call that joins nothing (no trace id, no fingerprint
/// match) is still a call: reported with phase `unknown`.
#[test]
fn a_loose_guardrail_call_that_joins_nothing_is_counted_as_unknown() {
    let (c, sink, b) = setup();
    let mut g = rec(b, "guard", Boundary::Guardrail, 0, 40, None, None);
    g.hop = Some(Arc::from("llama-guard"));
    c.submit(g, b + ms(40));
    c.sweep(b + ms(200));
    let resolved = sink.resolved.lock().unwrap();
    let hops: Vec<_> = resolved.iter().flat_map(|r| r.hops.clone()).collect();
    assert_eq!(hops.len(), 1);
    assert_eq!(
        (&*hops[0].hop, hops[0].phase, hops[0].duration),
        ("llama-guard", Phase::Unknown, ms(40))
    );
    assert_eq!(sink.count("unjoined"), 1);
}

/// More look-alike records at once than the fingerprint index keeps: a
/// lookup of that fingerprint is ambiguous, never a guess.
#[test]
fn too_many_look_alikes_are_ambiguous() {
    let (c, sink, b) = setup();
    for i in 0..(index::FP_SLOTS as u64 + 1) {
        c.submit(
            rec(
                b,
                "gw",
                Boundary::Gateway,
                i,
                1_000,
                Some(TraceParent::generate()),
                Some(5),
            ),
            b,
        );
    }
    c.submit(
        rec(b, "engine", Boundary::Engine, 10, 900, None, Some(5)),
        b,
    );
    c.sweep(b + ms(150));
    assert_eq!(sink.count("ambiguous"), 1);
    assert!(sink.pairs().is_empty());
}

/// A sweep with more to do than one batch still does all of it, and the
/// records held fall back to 0.
#[test]
fn a_sweep_larger_than_its_batch_finishes() {
    let sink = Arc::new(Collect::default());
    let c = Correlator::new(
        CorrelationConfig {
            max_groups: 10_000,
            ..CFG
        },
        vec![sink.clone()],
    );
    let b = Instant::now();
    let n = SWEEP_BATCH as u64 * 3 + 7;
    for i in 0..n {
        let t = Some(TraceParent::generate());
        c.submit(rec(b, "gw", Boundary::Gateway, 0, 100, t, Some(i)), b);
        c.submit(rec(b, "engine", Boundary::Engine, 10, 90, None, Some(i)), b);
    }
    c.sweep(b + ms(150));
    assert_eq!(c.pending(), 0);
    assert_eq!(sink.pairs().len() as u64, n);
    assert_eq!(sink.count("joined_fingerprint"), n);
}

/// Per-record cost at the cap, with 1,000 and 100,000 held: a generous
/// guard against the store going quadratic again (each new record used to
/// scan every group to evict one: 100x the cost at 100x the records).
/// The figures are `crates/join/benches/store.rs`'s.
#[test]
fn the_cost_per_record_does_not_grow_with_what_is_held() {
    let per_record = |held: usize, traced: bool| {
        let sink = Arc::new(Collect::default());
        let c = Correlator::new(
            CorrelationConfig {
                max_groups: held,
                settle: Duration::from_secs(3600),
                ..CFG
            },
            vec![sink],
        );
        let b = Instant::now();
        let rec_at = |i: u64| {
            let t = traced.then(TraceParent::generate);
            rec(b, "gw", Boundary::Gateway, 0, 100, t, Some(i))
        };
        for i in 0..held as u64 {
            c.submit(rec_at(i), b + ms(i / 1000));
        }
        let n = 20_000u64;
        let started = Instant::now();
        for i in 0..n {
            c.submit(rec_at(held as u64 + i), b + ms(1_000 + i));
            if i.is_multiple_of(1000) {
                c.sweep(b + ms(2_000 + i));
            }
        }
        started.elapsed().as_secs_f64() / n as f64
    };
    for traced in [true, false] {
        let small = per_record(1_000, traced);
        let large = per_record(100_000, traced);
        eprintln!(
            "per record at the cap ({}): {:.2} µs with 1,000 held, {:.2} µs with 100,000",
            if traced { "traced" } else { "loose" },
            small * 1e6,
            large * 1e6
        );
        assert!(
            large < 10.0 * small + 5e-6,
            "{traced}: {:.2} µs vs {:.2} µs",
            large * 1e6,
            small * 1e6
        );
    }
}
