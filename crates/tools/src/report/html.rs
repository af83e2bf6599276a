//! The report as one self-contained HTML page: the Markdown report rendered
//! by pulldown-cmark, and per tap its charts inline as SVG (TTFT and ITL
//! CDFs, the throughput–latency curve with its knee, TTFT against input
//! length with the fit, TTFT per tenant, TTFT with and without cache hits,
//! stalls over time, a compound tap's stacked breakdown). No script, no external resource.

use super::charts;
use super::markdown;
use pulldown_cmark::{html, Options, Parser};
use tokentap_core::analysis::span_report::{Report, TapReport};
use tokentap_core::analysis::{cache, Sample, Test};

/// The charts each tap section carries, by element id suffix.
pub const CHARTS: [&str; 8] = [
    "ttft-cdf",
    "itl-cdf",
    "tradeoff",
    "ttft-vs-input",
    "fairness",
    "cache-ttft",
    "stalls",
    "compound",
];

fn md_to_html(md: &str) -> String {
    let mut out = String::new();
    html::push_html(&mut out, Parser::new_ext(md, Options::ENABLE_TABLES));
    out
}

fn why<T>(t: &Test<T>) -> String {
    t.why()
        .map_or("no data".into(), |w| format!("not measured: {w}"))
}

fn id_of(tap: &str) -> String {
    tap.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn tap_charts(t: &TapReport, samples: &[&Sample]) -> Vec<(&'static str, String)> {
    let a = &t.analysis;
    let ok_streams: Vec<&&Sample> = samples
        .iter()
        .filter(|s| s.is_ok() && s.stream && s.operation != "other")
        .collect();
    let ttft: Vec<f64> = ok_streams.iter().filter_map(|s| s.ttft_ms).collect();
    let gaps: Vec<f64> = ok_streams
        .iter()
        .flat_map(|s| s.gaps_ms.iter().copied())
        .collect();
    let (mut hit, mut miss) = (Vec::new(), Vec::new());
    let share = a
        .prefix_cache
        .measured()
        .map_or(cache::DEFAULT_HIT_SHARE, |c| c.hit_share);
    for s in samples.iter().filter(|s| s.is_ok()) {
        match (s.cached_tokens, s.ttft_ms) {
            (Some(c), Some(t)) if cache::is_hit(c, s.input_tokens, share) => hit.push(t),
            (Some(_), Some(t)) => miss.push(t),
            _ => {}
        }
    }
    let stall_events = a
        .itl
        .measured()
        .map(|i| i.stall_events.clone())
        .unwrap_or_default();
    vec![
        (
            "ttft-cdf",
            charts::cdf(
                "TTFT distribution",
                "TTFT (ms)",
                &[("TTFT", ttft)],
                &why(&a.ttft),
            ),
        ),
        (
            "itl-cdf",
            charts::cdf(
                "Inter-token gap distribution (every gap)",
                "gap (ms)",
                &[("gaps", gaps)],
                &why(&a.itl),
            ),
        ),
        (
            "tradeoff",
            match a.tradeoff.measured() {
                Some(c) => charts::tradeoff(c),
                None => charts::empty(&why(&a.tradeoff)),
            },
        ),
        (
            "ttft-vs-input",
            match a.long_context.measured() {
                Some(c) => charts::ttft_vs_input(c),
                None => charts::empty(&why(&a.long_context)),
            },
        ),
        (
            "fairness",
            match a.fairness.measured() {
                Some(f) => charts::fairness(f),
                None => charts::empty(&why(&a.fairness)),
            },
        ),
        (
            "cache-ttft",
            charts::cdf(
                "TTFT with and without prefix-cache hits",
                "TTFT (ms)",
                &[("cache hit", hit), ("no hit", miss)],
                "no usage reported cached tokens",
            ),
        ),
        ("stalls", charts::stalls(&stall_events, a.start_unix_ms)),
        (
            "compound",
            match a.compound.measured() {
                Some(c) => super::compound_chart::stacked(c),
                None => charts::empty(&why(&a.compound)),
            },
        ),
    ]
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#f3f3f3}code{background:#f3f3f3;padding:0 .2em}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:1em}
figure{margin:0;border:1px solid #ddd}figcaption{font-size:.9em;padding:.3em;color:#555}";

/// The page. `samples` are the report's samples (for the distributions).
pub fn render(r: &Report, samples: &[Sample]) -> String {
    let mut body = md_to_html(&markdown::header(r));
    for t in &r.taps {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.tap == t.analysis.tap).collect();
        let tap_id = id_of(&t.analysis.tap);
        body.push_str(&md_to_html(&markdown::render_tap(t)));
        body.push_str(&format!(
            "<h3>Charts — tap {}</h3>\n<div class=\"charts\">\n",
            html_escape(&t.analysis.tap)
        ));
        for (name, svg) in tap_charts(t, &mine) {
            body.push_str(&format!(
                "<figure id=\"chart-{tap_id}-{name}\" class=\"chart\">{svg}<figcaption>{name}</figcaption></figure>\n"
            ));
        }
        body.push_str("</div>\n");
    }
    body.push_str(&md_to_html(&markdown::engines(r)));
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tokentap report</title><style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n"
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
