//! The table's entries for where a compound request's time went
//! (`crate::correlate::compound`): its TTFT and E2E split into LLM, tool,
//! retrieval and guardrail calls and the residual, its calls per request,
//! its loop iterations and the tokens it spent (input and output).

use super::*;
use crate::labels::*;

const SETTLED: &str = "each request at a `compound` tap with at least one call joined to it — by its trace, or, where no trace id joins them, by the compound stage's links — once its group settled (`correlation.settle_seconds`), in this process (one clock) or at `tokentap join` (the spans' wall-clock starts: as exact as the machines' clocks agree)";

metrics! {
    pub const COMPOUND_PART: Metric<CompoundPart, Histogram> = Metric::new(Spec {
        name: "tokentap_compound_part_seconds",
        otel_name: "tokentap.compound.part",
        unit: Unit::Seconds,
        help: "A compound request's TTFT or E2E, split: each instant goes to the call covering it (an engine's LLM call, else a tool call, else retrieval, else a guardrail call, else the part of an LLM call only its gateway saw: all `llm` but tool, retrieval, guardrail); an instant no call covers is `residual`, the application's own time. Parallel calls count once; per request the parts add up to the figure exactly.",
        buckets: OVERHEAD_BUCKETS,
        start: "the compound tap has the request headers",
        end: "`ttft`: the compound tap's first token; `e2e`: its end of response",
        observed: SETTLED,
        tests: &[Test::Compound, Test::Ttft],
    });

    pub const COMPOUND_CALLS: Metric<CompoundCalls, Histogram> = Metric::new(Spec {
        name: "tokentap_compound_calls",
        otel_name: "tokentap.compound.calls",
        unit: Unit::Calls,
        help: "Calls one compound request made, by kind: LLM calls (each counted once, at its outermost gateway or engine tap), tool calls, retrieval calls, guardrail calls.",
        buckets: COUNT_BUCKETS,
        start: "—",
        end: "—",
        observed: SETTLED,
        tests: &[Test::Compound],
    });

    pub const COMPOUND_ITERATION: Metric<CompoundTap, Histogram> = Metric::new(Spec {
        name: "tokentap_compound_iteration_seconds",
        otel_name: "tokentap.compound.iteration",
        unit: Unit::Seconds,
        help: "One iteration of a compound request's agent loop: from one LLM call's start to the next one's (the last, to the request's end).",
        buckets: DURATION_BUCKETS,
        start: "an LLM call of the request starts at its outermost tap",
        end: "the next one starts (or the compound tap's end of response)",
        observed: "each LLM call of each settled compound request",
        tests: &[Test::Compound],
    });

    pub const COMPOUND_TOKENS: Metric<CompoundTokens, Histogram> = Metric::new(Spec {
        name: "tokentap_compound_tokens",
        otel_name: "tokentap.compound.tokens",
        unit: Unit::Tokens,
        help: "Tokens a compound request spent over all its LLM calls, by side, as each call's outermost tap counted them: input counts each call's whole prompt (an agent loop sends the conversation again every iteration).",
        buckets: TOKEN_BUCKETS,
        start: "—",
        end: "—",
        observed: "each settled compound request, per side, when at least one of its LLM calls counted that side's tokens",
        tests: &[Test::Compound, Test::OutputThroughput],
    });

    pub const COMPOUND_LINKS: Metric<CompoundLinks, Counter> = Metric::new(Spec {
        name: "tokentap_compound_links_total",
        otel_name: "tokentap.compound.links",
        unit: Unit::Calls,
        help: "Calls the compound stage examined for a compound request no trace id joined: `assigned` (in the closure of exactly one compound request in flight around it: the one whose user text its LLM request carries, whose LLM call asked for it, whose tool returned what it carries — or, for a call with no link at all, the only one whose interval holds it), `ambiguous` (in several: never assigned), `evicted` (dropped to keep memory bounded).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each call inside the interval of a compound request examined by the compound stage (`correlation`, where a compound tap is), once",
        tests: &[Test::Compound],
    });
}
