//! Tests 5 to 10 of a tap's section: what the system did under its load —
//! capacity, fairness, prefix caching, memory pressure, long context,
//! guardrails (tests 1 to 4, the per-request figures, are in `mod.rs`).

use super::*;

pub(super) fn tests(out: &mut String, a: &Analysis) {
    test(
        out,
        "5. Concurrent request capacity",
        &a.capacity,
        |o, v| {
            let _ = writeln!(
                o,
                "- In flight: mean {} (time-weighted), max {}",
                num(v.concurrency.mean),
                v.concurrency.max
            );
            match (&v.windows, &v.windows_note) {
                (Some(w), _) => {
                    let _ = writeln!(
                        o,
                        "- Capacity across {} windows: concurrency {} (attainment {} ≥ {}){}",
                        w.windows,
                        num(w.concurrency),
                        num(w.attainment),
                        num(v.capacity.target),
                        if w.bounded {
                            ""
                        } else {
                            " — a lower bound: the SLOs held in every window"
                        }
                    );
                }
                (None, note) => {
                    let _ = writeln!(
                        o,
                        "- Capacity across windows: not available ({})",
                        note.as_deref().unwrap_or("—")
                    );
                }
            }
            let c = &v.capacity;
            let _ = writeln!(
                o,
                "- By in-flight level at arrival (attainment ≥ {}, levels with ≥ {} requests): {}{}",
                num(c.target),
                c.min_requests,
                c.capacity.map_or("n/a".into(), |c| c.to_string()),
                c.note
                    .as_deref()
                    .map(|n| format!(" — {n}"))
                    .unwrap_or_default()
            );
            if !c.levels.is_empty() {
                let _ = writeln!(o, "\n| in flight at start | requests | met SLOs | attainment |\n|---|---|---|---|");
                for l in &c.levels {
                    let _ = writeln!(
                        o,
                        "| {} | {} | {} | {} |",
                        l.in_flight,
                        l.requests,
                        l.met,
                        num(l.attainment)
                    );
                }
            }
        },
    );
    test(out, "6. Scheduling fairness", &a.fairness, |o, v| {
        let _ = writeln!(
            o,
            "- Jain's index (TTFT service): {} · max/min mean TTFT: {} · Jain (decode rate): {} · tenants judged {} of {}",
            opt(v.jain_ttft, ""),
            opt(v.max_min_ttft_ratio, ""),
            opt(v.jain_decode_rate, ""),
            v.tenants_judged,
            v.tenants_seen
        );
        let _ = writeln!(
            o,
            "\n| tenant | requests | mean TTFT | slowdown | decode tok/s |\n|---|---|---|---|---|"
        );
        for t in &v.tenants {
            let _ = writeln!(
                o,
                "| `{}` | {} | {} | {} | {} |",
                t.tenant,
                t.requests,
                opt(t.ttft_mean_ms, " ms"),
                opt(t.ttft_slowdown, "×"),
                opt(t.decode_tokens_per_s_mean, "")
            );
        }
    });
    test(
        out,
        "7. Prefix cache effectiveness",
        &a.prefix_cache,
        |o, v| {
            let _ = writeln!(
            o,
            "- Realised (usage): cached-token ratio {}, hit ratio {} ({} of {} requests reporting; a hit has ≥ {} of its prompt cached)",
            opt(v.cached_token_ratio, ""),
            opt(v.hit_ratio, ""),
            v.hits,
            v.requests_reporting,
            num(v.hit_share)
        );
            match &v.fit {
                Some(f) => {
                    let _ = writeln!(
                        o,
                        "- TTFT = {} ms + {} ms per 1k uncached + {} ms per 1k cached input tokens (R² {}, n = {})",
                        num(f.intercept_ms),
                        num(f.uncached_ms_per_1k),
                        num(f.cached_ms_per_1k),
                        num(f.r2),
                        f.n
                    );
                }
                None => {
                    let _ = writeln!(o, "- TTFT fit on uncached and cached tokens: not possible (fewer than 8 completed requests, or cached and uncached counts moving together)");
                }
            }
            let _ = writeln!(
                o,
                "- A cached token costs {} of an uncached one; its cached tokens saved a hit {} of TTFT (a request on average {})",
                opt(v.cached_token_cost_ratio, ""),
                opt(v.saving_per_hit_ms, " ms"),
                opt(v.saving_per_request_ms, " ms")
            );
            let _ = writeln!(
                o,
                "- TTFT of hits: {}; of the others: {} (descriptive: they differ in prompt length too)",
                summary(&v.ttft_hit_ms, " ms"),
                summary(&v.ttft_miss_ms, " ms")
            );
            for p in &v.prefix_reuse {
                let _ = writeln!(
                o,
                "- Opportunity, {}-character prefix: {} of {} prompts reuse an earlier one ({})",
                p.chars,
                p.reused,
                p.requests,
                opt(p.reuse_ratio, "")
            );
            }
        },
    );
    test(
        out,
        "8. Behaviour under memory pressure",
        &a.memory_pressure,
        |o, v| {
            let _ = writeln!(
                o,
                "- Tokens in flight (time-weighted): {} · stalls per 1k gaps: {}",
                num(v.concurrency.tokens_in_flight),
                opt(v.stalls_per_1k_gaps, "")
            );
            if let Some(c) = a
                .tradeoff
                .measured()
                .and_then(|c| c.stall_vs_tokens_in_flight)
            {
                let _ = writeln!(
                    o,
                    "- Across windows, stall rate vs tokens in flight: correlation {}",
                    num(c)
                );
            }
            let _ = writeln!(o, "\n| in flight at start | requests | gaps | stalls | per 1k gaps | mean TTFT |\n|---|---|---|---|---|---|");
            for l in &v.by_level {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} |",
                    l.in_flight,
                    l.requests,
                    l.gaps,
                    l.stalls,
                    opt(l.stalls_per_1k_gaps, ""),
                    opt(l.ttft_mean_ms, " ms")
                );
            }
        },
    );
    test(out, "9. Long-context scaling", &a.long_context, |o, v| {
        match &v.ttft_fit {
            Some(f) => {
                let _ = writeln!(
                    o,
                    "- TTFT = {} ms + {} ms per 1k uncached input tokens (R² {}, n = {})",
                    num(f.intercept),
                    num(f.slope),
                    num(f.r2),
                    f.n
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "- TTFT fit: not available (needs 3+ requests of different input lengths)"
                );
            }
        }
        let _ = writeln!(o, "\n| input tokens | requests | TTFT | TPOT p50 | prefill tok/s (mean) |\n|---|---|---|---|---|");
        for b in &v.buckets {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                b.bucket,
                b.requests,
                opt(b.ttft_ms.mean, " ms mean"),
                opt(b.tpot_ms.p50, " ms"),
                opt(b.prefill_tokens_per_s.mean, "")
            );
        }
    });
    test(out, "10. Guardrail overhead", &a.guardrail, |o, v| {
        let _ = writeln!(
            o,
            "- Requests joined across taps: {} · with guardrail calls: {}",
            v.joined_requests, v.guarded_requests
        );
        let _ = writeln!(
            o,
            "- Guardrail time per request: {}",
            summary(&v.per_request_ms, " ms")
        );
        let _ = writeln!(
            o,
            "- Input phase: {} · output phase: {}",
            summary(&v.input_phase_ms, " ms"),
            summary(&v.output_phase_ms, " ms")
        );
        let _ = writeln!(
            o,
            "- Boundary TTFT overhead (outer − engine): {}",
            summary(&v.ttft_overhead_ms, " ms")
        );
        let _ = writeln!(
            o,
            "- Boundary E2E overhead: {}",
            summary(&v.e2e_overhead_ms, " ms")
        );
        for h in &v.hops {
            let _ = writeln!(
                o,
                "- Hop `{}`: {} calls ({} input, {} output), {}; verdicts {}",
                h.hop,
                h.calls,
                h.input_phase_calls,
                h.output_phase_calls,
                summary(&h.duration_ms, " ms"),
                counts(&h.verdicts.iter().map(|(k, v)| (k.clone(), *v)).collect())
            );
        }
    });
    test(
        out,
        "Compound system: where the time went",
        &a.compound,
        compound,
    );
}

/// The stacked breakdown of a compound tap's TTFT and E2E and its calls per
/// request.
fn compound(o: &mut String, v: &tokentap_core::analysis::compound::CompoundReport) {
    let _ = writeln!(
        o,
        "- Requests broken down: {} · not joined to any call by trace: {}",
        v.requests, v.not_broken_down
    );
    for (title, stack) in [("E2E", &v.e2e), ("TTFT", &v.ttft)] {
        let _ = writeln!(
            o,
            "\n{title}, stacked ({} requests; `p50`/`p90`/`p99`: the request at that rank, its parts adding up to it; `mean`: every part's mean):\n\n| at | {title} | llm | tool | retrieval | guardrail | residual |\n|---|---|---|---|---|---|---|",
            stack.n
        );
        for r in &stack.rows {
            let part = |k: &str| num(r.parts_ms.get(k).copied().unwrap_or_default());
            let _ = writeln!(
                o,
                "| {} | {} ms | {} | {} | {} | {} | {} |",
                r.at,
                num(r.total_ms),
                part("llm"),
                part("tool"),
                part("retrieval"),
                part("guardrail"),
                part("residual")
            );
        }
    }
    let _ = writeln!(o, "\nCalls per request (calls: requests):\n");
    for (kind, dist) in &v.calls_per_request {
        let list: Vec<String> = dist.iter().map(|(n, r)| format!("{n}: {r}")).collect();
        let _ = writeln!(o, "- {kind}: {}", list.join(" · "));
    }
    let _ = writeln!(
        o,
        "- Loop iteration (one LLM call's start to the next): {}\n",
        summary(&v.iteration_ms, " ms")
    );
}
