//! Tests of `correlate/linker.rs`: untraced agent loops joined by their
//! links and their time, ambiguity never assigned.

use super::*;
use crate::links::{self, Hashes, Links};
use std::sync::Arc;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg() -> LinkerConfig {
    LinkerConfig {
        settle: ms(100),
        max_age: Duration::from_secs(60),
        cap: 1000,
        clocks: Clocks::Shared,
    }
}

fn rec(base: Instant, tap: &str, boundary: Boundary, t0: u64, end: u64, links: Links) -> TapRecord {
    TapRecord {
        request_id: Some(Arc::from(format!("{tap}@{t0}").as_str())),
        links,
        ..TapRecord::sample(tap, boundary, base + ms(t0), ms(end - t0))
    }
}

fn hashes(v: &[u64]) -> Hashes {
    Hashes::from_slice(v)
}

/// One agent request from `at` (ms) on, asking `question`: a search, an
/// LLM call that asks for `lookup(city)`, the tool call, an LLM call with
/// the result; the compound record first.
fn agent(b: Instant, at: u64, question: &str, city: &str) -> Vec<TapRecord> {
    let u = links::user(question);
    let k = links::call("lookup", Some(&serde_json::json!({ "city": city })));
    let r = links::result(&format!("Sunny in {city}"));
    vec![
        rec(
            b,
            "app",
            Boundary::Compound,
            at,
            at + 100,
            Links {
                users: hashes(&[u]),
                ..Links::default()
            },
        ),
        rec(
            b,
            "vectors",
            Boundary::Retrieval,
            at + 2,
            at + 8,
            Links::default(),
        ),
        rec(
            b,
            "gw",
            Boundary::Gateway,
            at + 10,
            at + 30,
            Links {
                users: hashes(&[u]),
                calls_out: hashes(&[k]),
                ..Links::default()
            },
        ),
        rec(
            b,
            "mcp",
            Boundary::Tool,
            at + 35,
            at + 45,
            Links {
                calls_in: hashes(&[k]),
                results_out: hashes(&[r]),
                ..Links::default()
            },
        ),
        rec(
            b,
            "gw",
            Boundary::Gateway,
            at + 50,
            at + 90,
            Links {
                users: hashes(&[u]),
                calls_in: hashes(&[k]),
                results_in: hashes(&[r]),
                ..Links::default()
            },
        ),
    ]
}

/// Feeds records as the correlator would (calls held, compound records
/// waiting, ready at once) and sweeps at `now`.
fn run(l: &mut Linker, records: Vec<TapRecord>, now: Instant) -> Linked {
    let c = cfg();
    for r in records {
        if is_call(&r) {
            l.call(&r, now, &c);
        } else {
            assert!(l.compound(r, now, &c).is_none());
        }
    }
    l.sweep(now, &c, 1000, &|_| false)
}

fn owner_of(out: &Linked) -> std::collections::HashMap<String, String> {
    let mut m = std::collections::HashMap::new();
    for g in &out.groups {
        let c = g[0].request_id.as_deref().unwrap().to_string();
        for r in &g[1..] {
            m.insert(r.request_id.as_deref().unwrap().to_string(), c.clone());
        }
    }
    m
}

#[test]
fn one_request_at_a_time_gets_every_call_it_made() {
    let b = Instant::now();
    let mut l = Linker::default();
    let mut all = agent(b, 0, "weather?", "Paris");
    all.extend(agent(b, 200, "weather?", "Paris"));
    let out = run(&mut l, all, b + ms(1000));
    assert_eq!(out.groups.len(), 2);
    assert!(out.groups.iter().all(|g| g.len() == 5), "4 calls each");
    assert_eq!((out.assigned, out.ambiguous), (8, 0));
    let owner = owner_of(&out);
    assert_eq!(owner["mcp@35"], "app@0");
    assert_eq!(owner["mcp@235"], "app@200");
    assert_eq!(l.held(), (0, 0), "nothing left");
}

#[test]
fn look_alike_requests_in_flight_together_are_ambiguous_never_swapped() {
    let b = Instant::now();
    let mut l = Linker::default();
    // Same question, 5 ms apart: each call of the first lies inside both.
    let mut all = agent(b, 0, "weather?", "Paris");
    all.extend(agent(b, 5, "weather?", "Paris"));
    let out = run(&mut l, all, b + ms(1000));
    let owner = owner_of(&out);
    assert!(out.ambiguous > 0);
    // The second's last LLM call (55–95) is inside the first (0–100) too,
    // but its tool call (40–50) links it... to both: ambiguous as well.
    for (call, comp) in &owner {
        let at: u64 = call.split('@').nth(1).unwrap().parse().unwrap();
        let c: u64 = comp.split('@').nth(1).unwrap().parse().unwrap();
        let offset = at - c;
        assert!([2, 10, 35, 50].contains(&offset), "{call} given to {comp}");
    }
}

#[test]
fn distinct_requests_overlapping_are_told_apart_by_their_links() {
    let b = Instant::now();
    let mut l = Linker::default();
    let mut all = agent(b, 0, "weather in Paris?", "Paris");
    all.extend(agent(b, 5, "weather in Rome?", "Rome"));
    let out = run(&mut l, all, b + ms(1000));
    let owner = owner_of(&out);
    // Each LLM and tool call to its own request; the searches carry no
    // link and lie inside both the first's is ambiguous.
    for (call, want) in [
        ("gw@10", "app@0"),
        ("mcp@35", "app@0"),
        ("gw@50", "app@0"),
        ("gw@15", "app@5"),
        ("mcp@40", "app@5"),
        ("gw@55", "app@5"),
    ] {
        assert_eq!(owner.get(call).map(String::as_str), Some(want), "{call}");
    }
    assert!(!owner.contains_key("vectors@7"), "inside both");
    assert!(out.ambiguous >= 1);
}

#[test]
fn a_call_whose_links_lead_nowhere_is_not_assigned() {
    let b = Instant::now();
    let mut l = Linker::default();
    let mut all = agent(b, 0, "weather?", "Paris");
    // Another tool call inside, asked for by no LLM call of this request.
    all.push(rec(
        b,
        "mcp",
        Boundary::Tool,
        60,
        65,
        Links {
            calls_in: hashes(&[links::call("other", None)]),
            ..Links::default()
        },
    ));
    let out = run(&mut l, all, b + ms(1000));
    assert!(!owner_of(&out).contains_key("mcp@60"));
    assert_eq!(out.assigned, 4);
}

#[test]
fn a_request_waits_while_an_earlier_one_is_in_flight() {
    let b = Instant::now();
    let c = cfg();
    let mut l = Linker::default();
    for r in agent(b, 0, "q", "Paris") {
        if is_call(&r) {
            l.call(&r, b + ms(100), &c);
        } else {
            assert!(l.compound(r, b + ms(200), &c).is_none());
        }
    }
    let open = |t: Instant| t >= b; // one started at b is still in flight
    let out = l.sweep(b + ms(300), &c, 1000, &open);
    assert!(out.groups.is_empty(), "it could own the calls too");
    assert_eq!(l.held(), (1, 4));
    let out = l.sweep(b + ms(300), &c, 1000, &|_| false);
    assert_eq!(out.assigned, 4);
    // Not before its settle time.
    let mut l = Linker::default();
    assert!(l
        .compound(agent(b, 0, "q", "P").remove(0), b + ms(500), &c)
        .is_none());
    assert!(l.sweep(b + ms(400), &c, 1000, &|_| false).groups.is_empty());
}

#[test]
fn calls_of_a_traced_compound_request_are_never_candidates() {
    let b = Instant::now();
    let c = cfg();
    let mut l = Linker::default();
    let mut all = agent(b, 0, "q", "Paris");
    let t = crate::trace::TraceParent {
        trace_id: [7; 16],
        parent_id: [1; 8],
        flags: 1,
    };
    for r in all.iter_mut().skip(1) {
        r.trace = Some(t);
    }
    l.owned_trace([7; 16], b + ms(20), b, &c);
    let out = run(&mut l, all, b + ms(1000));
    assert_eq!(out.groups.len(), 1);
    assert_eq!(out.assigned, 0);
}

#[test]
fn calls_nobody_can_claim_are_forgotten_and_the_window_is_capped() {
    let b = Instant::now();
    let c = cfg();
    let mut l = Linker::default();
    for r in agent(b, 0, "q", "Paris").into_iter().skip(1) {
        l.call(&r, b + ms(100), &c);
    }
    // A traced compound request not yet resolved keeps them.
    l.owned_trace([9; 16], b, b, &c);
    l.sweep(b + ms(300), &c, 1000, &|_| false);
    assert_eq!(l.held(), (0, 4));
    l.settled_trace([9; 16], b);
    // In flight, started before them: kept; then forgotten.
    l.sweep(b + ms(300), &c, 1000, &|t| t >= b);
    assert_eq!(l.held(), (0, 4));
    l.sweep(b + ms(300), &c, 1000, &|_| false);
    assert_eq!(l.held(), (0, 0));
    // The cap.
    let small = LinkerConfig { cap: 2, ..c };
    let evicted: u64 = agent(b, 0, "q", "Paris")
        .iter()
        .skip(1)
        .map(|r| l.call(r, b, &small))
        .sum();
    assert_eq!((evicted, l.held().1), (2, 2));
}

#[test]
fn across_machines_a_call_may_overhang_by_the_slack_only() {
    let b = Instant::now() + ms(10);
    let c = LinkerConfig {
        clocks: Clocks::PerTap,
        ..cfg()
    };
    let mut l = Linker::default();
    let mut all = agent(b, 0, "q", "Paris");
    // The search starts 1 ms "before" the request on its machine's clock;
    // the tool call ends 5 ms after it.
    all[1] = rec(
        b - ms(1),
        "vectors",
        Boundary::Retrieval,
        0,
        6,
        Links::default(),
    );
    all[3].e2e = ms(70);
    for r in all {
        if is_call(&r) {
            l.call(&r, b, &c);
        } else {
            assert!(l.compound(r, b, &c).is_none());
        }
    }
    let out = l.sweep(b + ms(1000), &c, 1000, &|_| false);
    let owner = owner_of(&out);
    assert!(owner.contains_key("vectors@0"), "{owner:?}");
    assert!(!owner.contains_key("mcp@35"), "{owner:?}");
}

#[test]
fn more_rivals_than_can_be_examined_make_every_call_ambiguous() {
    let b = Instant::now();
    let c = cfg();
    let mut l = Linker::default();
    // 70 requests in flight together, each with its own question: the
    // links would tell them apart, but a request has more than
    // `MAX_OVERLAPPING` rivals to check, so nothing is guessed.
    let n = MAX_OVERLAPPING as u64 + 6;
    for i in 0..n {
        for r in agent(b, i, &format!("q{i}"), &format!("c{i}")) {
            if is_call(&r) {
                l.call(&r, b, &c);
            } else {
                assert!(l.compound(r, b, &c).is_none());
            }
        }
    }
    let out = l.sweep(b + ms(1000), &c, 1, &|_| false);
    assert_eq!(out.groups.len(), 1);
    assert_eq!(out.assigned, 0);
    assert!(out.ambiguous >= 3, "its LLM and tool calls");
    // With few rivals the same links assign.
    let mut l = Linker::default();
    for i in 0..3 {
        for r in agent(b, i, &format!("q{i}"), &format!("c{i}")) {
            if is_call(&r) {
                l.call(&r, b, &c);
            } else {
                assert!(l.compound(r, b, &c).is_none());
            }
        }
    }
    assert!(l.sweep(b + ms(1000), &c, 1, &|_| false).assigned >= 3);
}
