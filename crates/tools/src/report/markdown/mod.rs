//! A report as Markdown: per tap, what was observed (boundary, window,
//! traffic, token source, protocol, clock, sample counts) and the ten tests,
//! each with its figures or why it could not be measured. Percentiles the
//! sample count does not support read "n/a (n = …)".

mod system;

use std::collections::BTreeMap;
use std::fmt::Write;
use tokentap_core::analysis::span_report::{Report, TapReport};
use tokentap_core::analysis::stats::{min_samples, Summary, PERCENTILES};
use tokentap_core::analysis::{Analysis, Test};

/// A number with a sensible number of digits.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("n/a".into(), |v| format!("{}{unit}", num(v)))
}

/// `p50 … · p90 … · p99 n/a (n = 340 < 1000) · mean … (n = 340)`.
pub fn summary(s: &Summary, unit: &str) -> String {
    if s.n == 0 {
        return "no samples".into();
    }
    let mut parts = Vec::new();
    for (name, q) in PERCENTILES {
        match s.get(name) {
            Some(v) => parts.push(format!("{name} {}{unit}", num(v))),
            None if name == "p50" || name == "p99" => {
                parts.push(format!("{name} n/a (n = {} < {})", s.n, min_samples(q)))
            }
            None => {}
        }
    }
    parts.push(format!("mean {}", opt(s.mean, unit)));
    parts.push(format!("max {}", opt(s.max, unit)));
    format!("{} (n = {})", parts.join(" · "), s.n)
}

fn counts(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn test<T>(out: &mut String, title: &str, t: &Test<T>, body: impl FnOnce(&mut String, &T)) {
    let _ = writeln!(out, "\n### {title}\n");
    match t {
        Test::Measured(v) => body(out, v),
        Test::NotMeasured { why } => {
            let _ = writeln!(out, "Not measured: {why}.");
        }
    }
}

/// The whole report.
pub fn render(r: &Report) -> String {
    let mut out = header(r);
    for t in &r.taps {
        out.push_str(&render_tap(t));
    }
    out.push_str(&engines(r));
    out
}

/// Title, source, clock and settings.
pub fn header(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# tokentap report\n");
    let _ = writeln!(
        out,
        "Source: `{}` · {} samples{} · tokentap {}\n",
        r.source,
        r.samples,
        if r.skipped_lines > 0 {
            format!(" ({} lines skipped: not samples)", r.skipped_lines)
        } else {
            String::new()
        },
        r.version
    );
    let _ = writeln!(
        out,
        "Clock: durations {}; resolution {}; {}.\n",
        r.clock.durations, r.clock.resolution, r.clock.wall_clock
    );
    let s = &r.settings;
    let slo = |v: Option<f64>| v.map_or("unset".into(), |v| format!("{} ms", num(v)));
    let _ = writeln!(
        out,
        "Settings: window {} s · SLOs TTFT {}, TPOT {}, E2E {} · capacity target {} · stall > {}× median (≥ {} ms) or > {} ms · cache hit ≥ {} of the prompt cached.",
        num(s.window.as_secs_f64()),
        slo(s.slo.ttft_ms),
        slo(s.slo.tpot_ms),
        slo(s.slo.e2e_ms),
        num(s.capacity_target),
        num(s.stall.multiple),
        num(s.stall.floor_ms),
        num(s.stall.absolute_ms),
        num(s.cache_hit_share),
    );
    out
}

/// The engines' own figures (live reports).
pub fn engines(r: &Report) -> String {
    let mut out = String::new();
    if !r.engines.is_empty() {
        let _ = writeln!(out, "\n## Engines (scraped)\n");
        for e in &r.engines {
            let _ = writeln!(
                out,
                "- `{}` ({}): KV-cache usage max {} mean {}, preemptions {}, queue max {}; scrapes ok {} failed {}",
                e.engine,
                e.family.unwrap_or("unknown family"),
                opt(e.kv_usage_max, ""),
                opt(e.kv_usage_mean, ""),
                opt(e.preemptions, ""),
                opt(e.queued_max, ""),
                e.scrapes_ok,
                e.scrapes_failed
            );
        }
    }
    out
}

/// One tap's section.
pub fn render_tap(t: &TapReport) -> String {
    let mut out = String::new();
    tap(&mut out, t);
    out
}

fn tap(out: &mut String, t: &TapReport) {
    let a = &t.analysis;
    let _ = writeln!(out, "\n## Tap `{}` — {} boundary\n", a.tap, a.boundary);
    observed(out, a, t.windows);
    test(out, "1. Time to first token", &a.ttft, |o, v| {
        let _ = writeln!(o, "- TTFT: {}", summary(&v.ttft_ms, " ms"));
        let _ = writeln!(
            o,
            "- TTFT, visible output: {}",
            summary(&v.ttft_visible_ms, " ms")
        );
        let _ = writeln!(
            o,
            "- TTFB (response headers): {}",
            summary(&v.ttfb_ms, " ms")
        );
        let _ = writeln!(
            o,
            "- Time to first event: {}",
            summary(&v.first_event_ms, " ms")
        );
        let _ = writeln!(o, "- E2E: {}", summary(&v.e2e_ms, " ms"));
        let _ = writeln!(o, "- Streams: {}", v.streams);
    });
    test(out, "2. Output token throughput", &a.throughput, |o, v| {
        let th = &v.throughput;
        let _ = writeln!(
            o,
            "- Over {} s: {} requests/s, {} output tokens/s, {} input tokens/s ({} uncached)",
            num(th.seconds),
            num(th.requests_per_s),
            num(th.output_tokens_per_s),
            num(th.input_tokens_per_s),
            num(th.uncached_input_tokens_per_s)
        );
        let _ = writeln!(
            o,
            "- Decode rate per request: {}",
            summary(&th.decode_tokens_per_s, " tok/s")
        );
        match (&v.goodput, &v.goodput_note) {
            (Some(g), _) => {
                let _ = writeln!(
                    o,
                    "- Goodput: {} of {} requests met every SLO (attainment {}): {} requests/s, {} output tokens/s",
                    g.met,
                    g.requests,
                    num(g.attainment),
                    num(g.requests_per_s),
                    num(g.output_tokens_per_s)
                );
            }
            (None, note) => {
                let _ = writeln!(
                    o,
                    "- Goodput: not available ({})",
                    note.as_deref().unwrap_or("no requests")
                );
            }
        }
    });
    test(
        out,
        "3. Throughput–latency tradeoff",
        &a.tradeoff,
        |o, c| {
            let _ = writeln!(o, "| window start | concurrency (mean) | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | attainment | requests |");
            let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
            for p in &c.points {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    num(
                        (p.start_unix_ms - c.points.first().map_or(0.0, |f| f.start_unix_ms)) / 1e3
                    ) + " s",
                    num(p.concurrency.mean),
                    num(p.output_tokens_per_s),
                    opt(p.ttft_ms.p50, " ms"),
                    opt(p.ttft_ms.p99, " ms"),
                    opt(p.tpot_ms.p50, " ms"),
                    opt(p.tpot_ms.p99, " ms"),
                    opt(p.attainment, ""),
                    p.requests
                );
            }
            match (&c.knee, &c.knee_note) {
                (Some(k), _) => {
                    let _ = writeln!(
                        o,
                        "\nKnee: concurrency {} ({} TPOT {} ms > 2 × minimum {} ms).",
                        num(k.concurrency),
                        k.quantile,
                        num(k.tpot_ms),
                        num(k.min_tpot_ms)
                    );
                }
                (None, note) => {
                    let _ = writeln!(o, "\nKnee: not found ({}).", note.as_deref().unwrap_or("—"));
                }
            }
        },
    );
    test(
        out,
        "4. Inter-token latency distribution",
        &a.itl,
        |o, v| {
            let _ = writeln!(o, "- Every gap: {}", summary(&v.gap_ms, " ms"));
            let _ = writeln!(
                o,
                "- Gap per token: {}",
                summary(&v.gap_per_token_ms, " ms")
            );
            let _ = writeln!(
                o,
                "- Tokens per event: {}",
                summary(&v.tokens_per_event, "")
            );
            let _ = writeln!(
                o,
                "- Stalls: {} in {} requests ({} per 1k gaps)",
                v.stalls,
                v.requests_with_stalls,
                opt(v.stalls_per_1k_gaps, "")
            );
            let _ = writeln!(
                o,
                "- Fake streaming: {} of {} streams judged",
                v.fake_streams, v.streams_judged
            );
            if v.requests_truncated > 0 {
                let _ = writeln!(
                    o,
                    "- {} requests had more gaps than kept (cut at 16,384)",
                    v.requests_truncated
                );
            }
        },
    );
    system::tests(out, a);
}

fn observed(out: &mut String, a: &Analysis, windows: usize) {
    let _ = writeln!(out, "### Observed\n");
    let _ = writeln!(
        out,
        "- Span: {} s from {} (unix ms), {} windows",
        num(a.seconds),
        num(a.start_unix_ms),
        windows
    );
    let _ = writeln!(
        out,
        "- Requests: {} ({} chat/completions; {} unmeasured) — outcomes: {}",
        a.requests,
        a.llm_requests,
        a.unmeasured,
        counts(&a.by_outcome)
    );
    let rate = a.throughput.measured().map(|t| t.throughput.requests_per_s);
    let _ = writeln!(
        out,
        "- Arrival rate {} requests/s · concurrency mean {} max {} (load model: observed passively, not chosen)",
        opt(rate, ""),
        num(a.concurrency.mean),
        a.concurrency.max
    );
    let w = &a.workload;
    let _ = writeln!(out, "- Input tokens: {}", summary(&w.input_tokens, ""));
    let _ = writeln!(out, "- Output tokens: {}", summary(&w.output_tokens, ""));
    let _ = writeln!(
        out,
        "- Resembles the **{}** reference workload: {}",
        w.resembles, w.why
    );
    let _ = writeln!(out, "- Token source: {}", counts(&a.token_source));
    let _ = writeln!(out, "- Streaming protocol: {}", counts(&a.protocol));
}
