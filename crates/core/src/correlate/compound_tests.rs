//! Tests of `correlate/compound.rs`: an agent request's time split exactly.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A record from `t0` to `end` ms after `base` (TTFT at `ttft` ms).
fn rec(
    base: Instant,
    tap: &str,
    boundary: Boundary,
    t0: u64,
    ttft: Option<u64>,
    end: u64,
) -> TapRecord {
    TapRecord {
        ttft: ttft.map(|t| ms(t - t0)),
        output_tokens: Some(10),
        input_tokens: Some(100),
        ..TapRecord::sample(tap, boundary, base + ms(t0), ms(end - t0))
    }
}

/// retrieval 5–25, LLM 1 at the gateway 30–80 (engine 32–78, a guardrail
/// 30–40 before it), tool 85–135, LLM 2 at the gateway 140–300 (engine
/// 141–299, first token 200); the compound answer's first token at 205,
/// its end at 310.
fn agent(b: Instant) -> Vec<TapRecord> {
    vec![
        rec(b, "app", Boundary::Compound, 0, Some(205), 310),
        rec(b, "vectors", Boundary::Retrieval, 5, None, 25),
        rec(b, "gw", Boundary::Gateway, 30, Some(79), 80),
        rec(b, "guard", Boundary::Guardrail, 30, None, 40),
        rec(b, "engine", Boundary::Engine, 41, Some(70), 78),
        rec(b, "mcp", Boundary::Tool, 85, None, 135),
        rec(b, "gw", Boundary::Gateway, 140, Some(200), 300),
        rec(b, "engine", Boundary::Engine, 141, Some(199), 299),
    ]
}

#[test]
fn an_agent_request_is_split_into_its_calls_and_the_rest_exactly() {
    let b = Instant::now();
    let out = breakdowns(&agent(b), Clocks::Shared);
    assert_eq!(out.len(), 1);
    let d = &out[0];
    let e2e = d.e2e;
    // LLM: engine 41–78 and 141–299, gateway-only 40–41, 78–80, 140–141, 299–300.
    assert_eq!(e2e.get(Part::Llm), ms(37 + 158 + 1 + 2 + 1 + 1));
    assert_eq!(e2e.get(Part::Guardrail), ms(10));
    assert_eq!(e2e.get(Part::Tool), ms(50));
    assert_eq!(e2e.get(Part::Retrieval), ms(20));
    assert_eq!(e2e.get(Part::Residual), ms(5 + 5 + 5 + 5 + 10));
    assert_eq!(e2e.total(), ms(310), "parts plus residual are the E2E");
    let ttft = d.ttft.unwrap();
    assert_eq!(ttft.total(), ms(205));
    // The second engine call up to 205 (it ran on to 299).
    assert_eq!(ttft.get(Part::Llm), ms(37 + 64 + 1 + 2 + 1));
    assert_eq!(ttft.get(Part::Residual), ms(5 + 5 + 5 + 5));
    // Two LLM calls at their outermost tap, one loop iteration each.
    assert_eq!(d.llm_calls.len(), 2);
    assert_eq!(d.llm_calls[0].tap.as_ref(), "gw");
    assert_eq!(d.llm_calls[1].ttft, Some(ms(60)));
    assert_eq!(d.llm_calls[1].before_first_token, ms(65));
    assert_eq!(d.iterations, vec![ms(110), ms(170)]);
    assert_eq!(
        (d.tool_calls, d.retrieval_calls, d.guardrail_calls),
        (1, 1, 1)
    );
    assert_eq!(d.output_tokens, Some(20));
    assert_eq!(d.input_tokens, Some(200));
}

#[test]
fn parallel_calls_count_once_and_an_engine_without_a_gateway_is_its_own_call() {
    let b = Instant::now();
    let records = vec![
        rec(b, "app", Boundary::Compound, 0, None, 100),
        rec(b, "mcp-a", Boundary::Tool, 10, None, 50),
        rec(b, "mcp-b", Boundary::Tool, 20, None, 60),
        rec(b, "engine", Boundary::Engine, 55, Some(70), 90),
    ];
    let d = &breakdowns(&records, Clocks::Shared)[0];
    assert_eq!(
        d.e2e.get(Part::Tool),
        ms(45),
        "10–55: the engine wins 55–60"
    );
    assert_eq!(d.e2e.get(Part::Llm), ms(35));
    assert_eq!(d.e2e.get(Part::Residual), ms(20));
    assert_eq!(d.ttft, None, "no first token at the compound tap");
    assert_eq!(d.llm_calls.len(), 1);
    assert_eq!(d.tool_calls, 2);
}

#[test]
fn calls_outside_the_request_give_nothing_and_an_overhang_is_clipped() {
    let b = Instant::now();
    let mut records = vec![
        rec(b, "app", Boundary::Compound, 100, None, 200),
        rec(b, "mcp", Boundary::Tool, 10, None, 50),
    ];
    let d = &breakdowns(&records, Clocks::Shared)[0];
    assert_eq!(d.e2e.get(Part::Residual), ms(100));
    assert_eq!(d.tool_calls, 0);
    // Across machines (wall-clock starts), a call 2 ms "early" counts for
    // what lies inside its request.
    records.push(rec(b, "vectors", Boundary::Retrieval, 98, None, 110));
    let d = &breakdowns(&records, Clocks::PerTap)[0];
    assert_eq!(d.e2e.get(Part::Retrieval), ms(10));
    assert_eq!(d.e2e.total(), ms(100));
    assert_eq!((d.retrieval_calls, d.members.len()), (1, 1));
}
