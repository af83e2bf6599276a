//! Joined without guessing: the reference app behind a compound tap, every
//! service behind its own tap, and no `traceparent` anywhere (the client
//! sends none, no tap creates one, the app passes none on). The compound
//! stage joins each request to its calls by their links (the user's text
//! in the LLM requests, the tool call the LLM asked for in the MCP request,
//! the tool's result in the next LLM request) and, for the vector search
//! that carries none, by time. Checked against the app's own log of which
//! call it made for which request: at concurrency 1 every call is found;
//! at concurrency 8 with look-alike requests, ambiguous calls are counted
//! and no call is given to a request that did not make it.

use crate::compound::{ask, breakdown, ms, stack, Stack};
use crate::support::*;
use std::time::{Duration, Instant};
use tokentap_core::correlate::compound::{Breakdown, Part};
use tokentap_core::tap::Boundary;
use tokentap_sim::app::AppTruth;

const UNTRACED: &str = "    trace: propagate\n";

/// Every call the breakdown counts lies inside a call of its kind that
/// the app made for this very request (by the app's own clock, which is
/// the taps' clock: one process).
fn only_its_own_calls(id: &str, b: &Breakdown, truth: &AppTruth) {
    for m in &b.members {
        let (start, end) = (b.t0 + m.offset, b.t0 + m.offset + m.e2e);
        let made = match m.boundary {
            Boundary::Gateway | Boundary::Engine => &truth.llm,
            Boundary::Tool => &truth.tool,
            Boundary::Retrieval => &truth.retrieval,
            other => panic!("{id}: a {other:?} call"),
        };
        assert!(
            made.iter().any(|(a, z)| *a <= start && end <= *z),
            "{id}: {m:?} is no call the app made for it"
        );
    }
}

fn links_total(scrape: &str, result: &str) -> f64 {
    prom_totals(
        scrape,
        &format!("tokentap_compound_links_total{{result=\"{result}\"}}"),
    )
    .0
}

#[test]
fn without_any_traceparent_each_request_gets_every_call_it_made_at_concurrency_1() {
    let _g = serial_blocking();
    let s = stack(true, UNTRACED);
    let n = 10;
    let mut errors: Vec<[f64; 3]> = Vec::new();
    for i in 0..n {
        let id = format!("untraced-{i}");
        // Look-alike on purpose: one at a time, time tells them apart.
        ask(s.compound, &id, "Paris");
        let b = breakdown(&s.taps, &id);
        let truth = s.app.truth_of(&id).expect("the app's log");
        let record = s.taps.records.of("app", &id).expect("the compound record");
        assert!(record.trace.is_none(), "no trace anywhere");
        assert!(b.by_links);
        assert_eq!(b.e2e.total(), record.e2e, "{id}: parts + residual = E2E");
        assert_eq!(b.ttft.map(|t| t.total()), record.ttft, "{id}: = TTFT");
        assert_eq!(
            (b.llm_calls.len(), b.tool_calls, b.retrieval_calls),
            (2, 1, 1),
            "{id}: every call found"
        );
        assert_eq!(
            b.members.len(),
            6,
            "2 × (gateway + engine), the tool, the search"
        );
        only_its_own_calls(&id, &b, &truth);
        let sum = |v: &[(Instant, Instant)]| v.iter().map(|(a, e)| ms(*e - *a)).sum::<f64>();
        errors.push([
            ms(b.e2e.get(Part::Retrieval)) - sum(&truth.retrieval),
            ms(b.e2e.get(Part::Tool)) - sum(&truth.tool),
            ms(b.e2e.get(Part::Llm)) - sum(&truth.llm),
        ]);
    }
    for (k, what) in ["retrieval", "tool", "llm"].iter().enumerate() {
        let mut v: Vec<f64> = errors.iter().map(|e| e[k]).collect();
        v.sort_by(f64::total_cmp);
        let p50 = v[v.len() / 2];
        println!("untraced {what}: breakdown - app p50 {p50:+.3} ms");
        assert!(p50.abs() < 1.0, "{what}: p50 error {p50:.3} ms");
    }
    let scrape = s.taps.scrape();
    assert_eq!(links_total(&scrape, "assigned"), (6 * n) as f64);
    assert_eq!(links_total(&scrape, "ambiguous"), 0.0);
    assert_eq!(
        prom_totals(
            &scrape,
            "tokentap_correlation_total{result=\"joined_links\"}"
        )
        .0,
        n as f64
    );
}

/// 8 clients, 3 requests each, started 3 ms apart, asking `question(id)`;
/// once every call was decided: the assigned and ambiguous counts it
/// added, and the requests' ids.
fn burst(s: &Stack, tag: &str, question: fn(&str) -> String) -> (f64, f64, Vec<String>) {
    let (threads, rounds) = (8, 3);
    let before = s.taps.scrape();
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let addr = s.compound;
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(3 * t));
                    (0..rounds)
                        .map(|r| {
                            let id = format!("{tag}-{t}-{r}");
                            ask(addr, &id, &question(&id));
                            id
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let added = |scrape: &str, r: &str| links_total(scrape, r) - links_total(&before, r);
    let total_calls = (ids.len() * 6) as f64;
    let deadline = Instant::now() + Duration::from_secs(15);
    let scrape = loop {
        let scrape = s.taps.scrape();
        if added(&scrape, "assigned") + added(&scrape, "ambiguous") >= total_calls
            || Instant::now() > deadline
        {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (assigned, ambiguous) = (added(&scrape, "assigned"), added(&scrape, "ambiguous"));
    assert_eq!(assigned + ambiguous, total_calls, "every call decided once");
    let mut with_calls = 0;
    for id in &ids {
        let truth = s.app.truth_of(id).expect("the app's log");
        if let Some(b) = s.taps.attributions.compound_of(id) {
            with_calls += 1;
            assert!(b.by_links);
            assert!(b.llm_calls.len() <= 2 && b.tool_calls <= 1 && b.retrieval_calls <= 1);
            only_its_own_calls(id, &b, &truth);
            let record = s.taps.records.of("app", id).expect("the compound record");
            assert_eq!(b.e2e.total(), record.e2e, "{id}: parts + residual = E2E");
        }
    }
    println!(
        "{tag}: concurrency {threads}, {} requests: {assigned} of {total_calls} calls assigned, {ambiguous} ambiguous; {with_calls} requests with calls",
        ids.len()
    );
    (assigned, ambiguous, ids)
}

#[test]
fn at_concurrency_8_look_alikes_are_ambiguous_and_distinct_requests_joined_never_misattributed() {
    let _g = serial_blocking();
    let s = stack(true, UNTRACED);
    // The same question from every client: the links cannot tell them
    // apart, and time only where one request alone holds a call.
    let (_, ambiguous, _) = burst(&s, "alike", |_| "Paris".into());
    assert!(ambiguous > 0.0, "look-alikes in flight together");
    // A question of its own each: its LLM calls carry it, its tool call
    // the arguments its first LLM call asked for. The searches carry
    // nothing: ambiguous while requests overlap.
    let (assigned, _, ids) = burst(&s, "distinct", |id| format!("Weather in {id}?"));
    let llm_and_tool = (ids.len() * 5) as f64;
    assert!(
        assigned >= llm_and_tool,
        "{assigned}: every LLM (gateway and engine) and tool call of {} requests",
        ids.len()
    );
    for id in &ids {
        let b = s.taps.attributions.compound_of(id).expect("joined");
        assert_eq!((b.llm_calls.len(), b.tool_calls), (2, 1), "{id}");
    }
}
