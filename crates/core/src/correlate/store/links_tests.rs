//! Tests of `store/links.rs`: the correlator hands untraced and lone
//! compound records to the compound stage, waits for compound requests in
//! flight, and reports breakdowns joined by links and the counts.

use super::*;
use crate::links::{self, Hashes, Links};
use crate::tap::Boundary;
use crate::trace::TraceParent;
use std::time::Duration;

#[derive(Default)]
struct Collect {
    resolved: Mutex<Vec<Resolution>>,
    counts: Mutex<HashMap<String, u64>>,
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
            .entry(result.as_str().into())
            .or_default() += n;
    }
    fn linked(&self, result: LinkResult, n: u64) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(format!("link_{}", result.as_str()))
            .or_default() += n;
    }
}

impl Collect {
    fn count(&self, k: &str) -> u64 {
        self.counts.lock().unwrap().get(k).copied().unwrap_or(0)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg() -> CorrelationConfig {
    CorrelationConfig {
        settle: ms(100),
        max_age: Duration::from_secs(60),
        max_groups: 100,
        fingerprint_window: Duration::from_secs(5),
        max_events: 64,
        buffered_share: 0.9,
        clocks: Clocks::Shared,
        compound_links: true,
    }
}

fn rec(b: Instant, tap: &str, boundary: Boundary, t0: u64, end: u64, links: Links) -> TapRecord {
    TapRecord {
        links,
        ..TapRecord::sample(tap, boundary, b + ms(t0), ms(end - t0))
    }
}

/// A compound request 0–100 ms asking "q", a search and an LLM call in it.
fn request(b: Instant) -> Vec<TapRecord> {
    let u = Links {
        users: Hashes::from_slice(&[links::user("q")]),
        ..Links::default()
    };
    vec![
        rec(b, "vectors", Boundary::Retrieval, 5, 15, Links::default()),
        rec(b, "gw", Boundary::Gateway, 20, 80, u.clone()),
        rec(b, "app", Boundary::Compound, 0, 100, u),
    ]
}

#[test]
fn an_untraced_compound_request_gets_its_calls_once_settled() {
    let b = Instant::now();
    let sink = Arc::new(Collect::default());
    let c = Correlator::new(cfg(), vec![sink.clone()]);
    for r in request(b) {
        c.submit(r, b + ms(100));
    }
    c.sweep(b + ms(150));
    assert!(sink.resolved.lock().unwrap().is_empty(), "not settled yet");
    c.sweep(b + ms(250));
    let res = sink.resolved.lock().unwrap().clone();
    let bd: Vec<_> = res.iter().flat_map(|r| r.compound.clone()).collect();
    assert_eq!(bd.len(), 1);
    assert!(bd[0].by_links);
    assert_eq!((bd[0].llm_calls.len(), bd[0].retrieval_calls), (1, 1));
    assert_eq!(bd[0].e2e.total(), ms(100));
    assert!(res.iter().all(|r| r.pairs.is_empty()), "only the breakdown");
    assert_eq!(sink.count("joined_links"), 1);
    assert_eq!(sink.count("link_assigned"), 2);
    assert_eq!(c.linker_held(), (0, 0));
}

#[test]
fn a_lone_traced_compound_record_goes_to_the_compound_stage() {
    let b = Instant::now();
    let sink = Arc::new(Collect::default());
    let c = Correlator::new(cfg(), vec![sink.clone()]);
    let mut all = request(b);
    // The tap created a trace the app did not pass on.
    all[2].trace = Some(TraceParent {
        trace_id: [3; 16],
        parent_id: [1; 8],
        flags: 1,
    });
    for r in all {
        c.submit(r, b + ms(100));
    }
    c.sweep(b + ms(250));
    c.sweep(b + ms(260));
    let res = sink.resolved.lock().unwrap().clone();
    let bd: Vec<_> = res.iter().flat_map(|r| r.compound.clone()).collect();
    assert_eq!(bd.len(), 1, "{res:?}");
    assert_eq!(bd[0].trace.map(|t| t.trace_id), Some([3; 16]));
    assert_eq!(
        sink.count("unjoined"),
        2,
        "the two calls, alone in the store"
    );
}

#[test]
fn a_compound_request_in_flight_holds_the_ones_that_ended_after_it_started() {
    let b = Instant::now();
    let sink = Arc::new(Collect::default());
    let c = Correlator::new(cfg(), vec![sink.clone()]);
    let open = c.open_compound(b + ms(50)).expect("the stage is on");
    for r in request(b) {
        c.submit(r, b + ms(100));
    }
    c.sweep(b + ms(300));
    assert!(
        sink.resolved.lock().unwrap().is_empty(),
        "it might own them"
    );
    drop(open);
    c.sweep(b + ms(300));
    assert_eq!(sink.count("joined_links"), 1);
    // Off: compound records are the store's (alone, unjoined).
    let sink = Arc::new(Collect::default());
    let off = Correlator::new(
        CorrelationConfig {
            compound_links: false,
            ..cfg()
        },
        vec![sink.clone()],
    );
    assert!(off.open_compound(b).is_none());
    for r in request(b) {
        off.submit(r, b + ms(100));
    }
    off.sweep(b + ms(300));
    assert_eq!((sink.count("unjoined"), sink.count("joined_links")), (3, 0));
}
