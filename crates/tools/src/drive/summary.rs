//! The run's summary: requests by outcome, client-side TTFT and E2E
//! distributions of the successful requests, tokens, and for a sweep one
//! row per step. Pure: computed from the per-request results.
//!
//! Percentiles are nearest-rank. Following the methodology, p99 is only
//! given with at least 1,000 samples; sample counts are always given.
//! Throughput of a sweep step counts the output tokens of the requests that
//! started in it (an approximation at step edges).

use super::load::LoadModel;
use super::request::{Outcome, RequestResult};
use super::workload::Workload;
use serde::Serialize;
use std::fmt::Write as _;

/// Requests by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    pub ok: u64,
    pub http_error: u64,
    pub stream_error: u64,
    pub truncated: u64,
    pub transport: u64,
    pub timeout: u64,
    pub cancelled: u64,
}

impl Outcomes {
    fn add(&mut self, o: Outcome) {
        let slot = match o {
            Outcome::Ok => &mut self.ok,
            Outcome::HttpError => &mut self.http_error,
            Outcome::StreamError => &mut self.stream_error,
            Outcome::Truncated => &mut self.truncated,
            Outcome::Transport => &mut self.transport,
            Outcome::Timeout => &mut self.timeout,
            Outcome::Cancelled => &mut self.cancelled,
        };
        *slot += 1;
    }
}

/// A distribution of milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    /// Only with at least 1,000 samples.
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Distribution {
    pub fn of(values: &[f64]) -> Self {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let rank = |q: f64| {
            let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            v.get(i).copied()
        };
        Distribution {
            count: n as u64,
            mean: (n > 0).then(|| v.iter().sum::<f64>() / n as f64),
            p50: rank(0.5),
            p90: rank(0.9),
            p99: if n >= 1000 { rank(0.99) } else { None },
            max: v.last().copied(),
        }
    }
}

/// One step of a concurrency sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSummary {
    pub step: usize,
    pub concurrency: usize,
    /// Requests started in this step.
    pub requests: u64,
    pub ok: u64,
    pub ttft_ms: Distribution,
    pub output_tokens_per_second: f64,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct DriveSummary {
    pub workload: Workload,
    pub load: LoadModel,
    pub url: String,
    pub seed: u64,
    pub tenants: u32,
    /// Wall time from the first request's start to the last one's end.
    pub elapsed_seconds: f64,
    pub requests: u64,
    pub outcomes: Outcomes,
    /// Client-side TTFT of the `ok` requests.
    pub ttft_ms: Distribution,
    /// Client-side E2E of the `ok` requests.
    pub e2e_ms: Distribution,
    /// Sums over all requests of what `usage` reported.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    pub output_tokens_per_second: f64,
    pub requests_per_second: f64,
    /// Sweep only.
    pub steps: Vec<StepSummary>,
    /// The error of the first request that failed, if any.
    pub first_error: Option<String>,
    /// Every request, in start order (not in the JSON summary).
    #[serde(skip)]
    pub results: Vec<RequestResult>,
}

/// The run's identity, for the summary.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub workload: Workload,
    pub load: LoadModel,
    pub url: String,
    pub seed: u64,
    pub tenants: u32,
    pub elapsed_seconds: f64,
}

fn is_ok(r: &RequestResult) -> bool {
    r.outcome == Outcome::Ok
}

pub fn summarize(info: RunInfo, mut results: Vec<RequestResult>) -> DriveSummary {
    results.sort_by(|a, b| a.start_seconds.total_cmp(&b.start_seconds));
    let mut outcomes = Outcomes::default();
    for r in &results {
        outcomes.add(r.outcome);
    }
    let ttft: Vec<f64> = results
        .iter()
        .filter(|r| is_ok(r))
        .filter_map(|r| r.ttft_ms)
        .collect();
    let e2e: Vec<f64> = results
        .iter()
        .filter(|r| is_ok(r))
        .map(|r| r.e2e_ms)
        .collect();
    let completion: u64 = results.iter().map(|r| r.completion_tokens).sum();
    let per_second = |x: f64| {
        if info.elapsed_seconds > 0.0 {
            x / info.elapsed_seconds
        } else {
            0.0
        }
    };
    let steps = match &info.load {
        LoadModel::Sweep {
            concurrency_steps,
            step_seconds,
        } => concurrency_steps
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let in_step: Vec<&RequestResult> =
                    results.iter().filter(|r| r.step == Some(i)).collect();
                let ttft: Vec<f64> = in_step
                    .iter()
                    .filter(|r| is_ok(r))
                    .filter_map(|r| r.ttft_ms)
                    .collect();
                let tokens: u64 = in_step.iter().map(|r| r.completion_tokens).sum();
                StepSummary {
                    step: i,
                    concurrency: *c,
                    requests: in_step.len() as u64,
                    ok: in_step.iter().filter(|r| is_ok(r)).count() as u64,
                    ttft_ms: Distribution::of(&ttft),
                    output_tokens_per_second: if *step_seconds > 0.0 {
                        tokens as f64 / step_seconds
                    } else {
                        0.0
                    },
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    DriveSummary {
        workload: info.workload,
        url: info.url,
        seed: info.seed,
        tenants: info.tenants,
        elapsed_seconds: info.elapsed_seconds,
        requests: results.len() as u64,
        outcomes,
        ttft_ms: Distribution::of(&ttft),
        e2e_ms: Distribution::of(&e2e),
        prompt_tokens: results.iter().filter_map(|r| r.prompt_tokens).sum(),
        cached_tokens: results.iter().filter_map(|r| r.cached_tokens).sum(),
        completion_tokens: completion,
        output_tokens_per_second: per_second(completion as f64),
        requests_per_second: per_second(results.len() as f64),
        steps,
        first_error: results.iter().find_map(|r| r.error.clone()),
        load: info.load,
        results,
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// The human summary printed by `tokentap drive`.
pub fn render(s: &DriveSummary) -> String {
    let o = &s.outcomes;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tokentap drive: {} workload, {}, {} tenant(s), seed {}, {}",
        s.workload.as_str(),
        s.load,
        s.tenants,
        s.seed,
        s.url
    );
    let _ = writeln!(
        out,
        "  requests   {} in {:.1} s ({:.2}/s): ok {}, http_error {}, stream_error {}, truncated {}, transport {}, timeout {}, cancelled {}",
        s.requests, s.elapsed_seconds, s.requests_per_second, o.ok, o.http_error, o.stream_error,
        o.truncated, o.transport, o.timeout, o.cancelled
    );
    let _ = writeln!(
        out,
        "  TTFT ms    p50 {}  p90 {}  p99 {}  max {}  (client side, ok requests, n={})",
        ms(s.ttft_ms.p50),
        ms(s.ttft_ms.p90),
        ms(s.ttft_ms.p99),
        ms(s.ttft_ms.max),
        s.ttft_ms.count
    );
    let _ = writeln!(
        out,
        "  E2E ms     p50 {}  p90 {}  p99 {}  max {}",
        ms(s.e2e_ms.p50),
        ms(s.e2e_ms.p90),
        ms(s.e2e_ms.p99),
        ms(s.e2e_ms.max)
    );
    let _ = writeln!(
        out,
        "  tokens     prompt {} (cached {}), completion {}; {:.1} output tokens/s",
        s.prompt_tokens, s.cached_tokens, s.completion_tokens, s.output_tokens_per_second
    );
    if let Some(e) = &s.first_error {
        let _ = writeln!(out, "  first error: {e}");
    }
    if !s.steps.is_empty() {
        let _ = writeln!(
            out,
            "  step  concurrency  requests  ok  ttft_p50_ms  ttft_p90_ms  output_tok/s"
        );
        for st in &s.steps {
            let _ = writeln!(
                out,
                "  {:>4}  {:>11}  {:>8}  {:>2}  {:>11}  {:>11}  {:>12.1}",
                st.step,
                st.concurrency,
                st.requests,
                st.ok,
                ms(st.ttft_ms.p50),
                ms(st.ttft_ms.p90),
                st.output_tokens_per_second
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: Outcome, ttft: f64, step: usize, start: f64) -> RequestResult {
        RequestResult {
            id: String::new(),
            tenant: 0,
            session: None,
            step: Some(step),
            start_seconds: start,
            planned_input_tokens: 10,
            planned_output_tokens: 5,
            outcome,
            status: 200,
            ttft_ms: Some(ttft),
            e2e_ms: ttft + 10.0,
            token_events: 5,
            prompt_tokens: Some(10),
            completion_tokens: 5,
            cached_tokens: Some(2),
            error: (outcome != Outcome::Ok).then(|| "HTTP 503".into()),
        }
    }

    #[test]
    fn percentiles_follow_the_sample_count_rule() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let d = Distribution::of(&v);
        assert_eq!(
            (d.count, d.p50, d.p90, d.p99),
            (100, Some(50.0), Some(90.0), None)
        );
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(Distribution::of(&v).p99, Some(990.0));
        assert_eq!(Distribution::of(&[]), Distribution::default());
    }

    #[test]
    fn summary_counts_outcomes_tokens_and_steps() {
        let info = RunInfo {
            workload: Workload::Uniform,
            load: LoadModel::Sweep {
                concurrency_steps: vec![1, 2],
                step_seconds: 2.0,
            },
            url: "http://x".into(),
            seed: 1,
            tenants: 1,
            elapsed_seconds: 4.0,
        };
        let rs = vec![
            result(Outcome::Ok, 10.0, 0, 0.5),
            result(Outcome::Ok, 30.0, 1, 2.5),
            result(Outcome::HttpError, 99.0, 1, 2.0),
        ];
        let s = summarize(info, rs);
        assert_eq!(
            (s.outcomes.ok, s.outcomes.http_error, s.requests),
            (2, 1, 3)
        );
        assert_eq!(s.ttft_ms.count, 2);
        assert_eq!(
            (s.prompt_tokens, s.cached_tokens, s.completion_tokens),
            (30, 6, 15)
        );
        assert_eq!(s.steps.len(), 2);
        assert_eq!((s.steps[1].requests, s.steps[1].ok), (2, 1));
        assert_eq!(s.steps[1].output_tokens_per_second, 5.0);
        assert_eq!(s.results[1].outcome, Outcome::HttpError, "sorted by start");
        let text = render(&s);
        assert!(text.contains("ok 2, http_error 1"), "{text}");
        assert!(text.contains("first error: HTTP 503"), "{text}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["load"]["sweep"]["concurrency_steps"][1], 2);
        assert!(json.get("results").is_none());
    }
}
