//! The traffic a report describes: input/output length distributions,
//! arrival pattern, and which of the methodology's five reference workloads
//! it resembles (uniform, skewed, conversation, code completion, long
//! context). Passive measurement cannot know the load model a client used,
//! so the report states what it observed instead.
//!
//! Rules, first match wins: median input ≥ 8,000 tokens → long context;
//! median output ≤ 64 with median input ≥ 1,000 and ≥ 50 % of requests
//! sharing a 1k-character prefix with an earlier one → code completion;
//! ≥ 50 % of chat requests carrying 3+ messages (resent history) →
//! conversation; a coefficient of variation ≥ 0.8 of input or output
//! lengths, or ≥ 1.5 of inter-arrival times → skewed; else uniform.

use super::sample::Sample;
use super::stats::{mean, Summary};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// `uniform`, `skewed`, `conversation`, `code_completion`,
    /// `long_context`; `none` without requests.
    pub resembles: &'static str,
    /// The figures the rule used.
    pub why: String,
    pub input_tokens: Summary,
    pub output_tokens: Summary,
    pub input_cv: Option<f64>,
    pub output_cv: Option<f64>,
    /// Coefficient of variation of the gaps between request arrivals
    /// (about 1 for Poisson arrivals, above for bursts).
    pub arrival_cv: Option<f64>,
    /// Share of chat requests with 3 or more messages.
    pub multi_turn_share: Option<f64>,
}

fn cv(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values.iter().copied())?;
    let var = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64;
    (m > 0.0).then(|| var.sqrt() / m)
}

/// Classifies `samples` (LLM requests); `prefix_reuse_1k` is the share of
/// requests reusing a 1k-character prefix (from the cache analysis).
pub fn classify(samples: &[&Sample], prefix_reuse_1k: Option<f64>) -> Workload {
    let inputs: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.input_tokens)
        .map(|v| v as f64)
        .collect();
    let outputs: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.output_tokens)
        .map(|v| v as f64)
        .collect();
    let mut starts: Vec<f64> = samples.iter().map(|s| s.start_unix_ms).collect();
    starts.sort_by(f64::total_cmp);
    let arrivals: Vec<f64> = starts
        .windows(2)
        .filter_map(|w| match w {
            [a, b] => Some(b - a),
            _ => None,
        })
        .collect();
    let chats: Vec<u32> = samples.iter().filter_map(|s| s.messages).collect();
    let multi_turn_share = (!chats.is_empty())
        .then(|| chats.iter().filter(|m| **m >= 3).count() as f64 / chats.len() as f64);
    let input = Summary::of(inputs.iter().copied());
    let output = Summary::of(outputs.iter().copied());
    let med = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        super::stats::quantile_unchecked(&s, 0.5)
    };
    let (in_med, out_med) = (med(&inputs), med(&outputs));
    let (input_cv, output_cv, arrival_cv) = (cv(&inputs), cv(&outputs), cv(&arrivals));
    let reuse = prefix_reuse_1k.unwrap_or(0.0);
    let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    let (resembles, why) = if samples.is_empty() {
        ("none", "no chat or completion requests".to_string())
    } else if in_med.is_some_and(|m| m >= 8_000.0) {
        (
            "long_context",
            format!("median input {} tokens ≥ 8000", f(in_med)),
        )
    } else if out_med.is_some_and(|m| m <= 64.0)
        && in_med.is_some_and(|m| m >= 1_000.0)
        && reuse >= 0.5
    {
        (
            "code_completion",
            format!(
                "median output {} ≤ 64, median input {} ≥ 1000, 1k-prefix reuse {reuse:.2} ≥ 0.5",
                f(out_med),
                f(in_med)
            ),
        )
    } else if multi_turn_share.is_some_and(|s| s >= 0.5) {
        (
            "conversation",
            format!(
                "{} of chat requests resend 3+ messages",
                f(multi_turn_share)
            ),
        )
    } else if input_cv.is_some_and(|c| c >= 0.8)
        || output_cv.is_some_and(|c| c >= 0.8)
        || arrival_cv.is_some_and(|c| c >= 1.5)
    {
        (
            "skewed",
            format!(
                "length CV input {} / output {}, arrival CV {}",
                f(input_cv),
                f(output_cv),
                f(arrival_cv)
            ),
        )
    } else {
        (
            "uniform",
            format!(
                "length CV input {} / output {} < 0.8, arrival CV {} < 1.5",
                f(input_cv),
                f(output_cv),
                f(arrival_cv)
            ),
        )
    };
    Workload {
        resembles,
        why,
        input_tokens: input,
        output_tokens: output,
        input_cv,
        output_cv,
        arrival_cv,
        multi_turn_share,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t: f64, input: u64, output: u64, messages: u32) -> Sample {
        Sample {
            start_unix_ms: t,
            input_tokens: Some(input),
            output_tokens: Some(output),
            messages: Some(messages),
            ..Sample::default()
        }
    }

    fn classify_of(v: &[Sample], reuse: f64) -> &'static str {
        let refs: Vec<&Sample> = v.iter().collect();
        classify(&refs, Some(reuse)).resembles
    }

    #[test]
    fn the_five_shapes() {
        let uniform: Vec<Sample> = (0..50u32)
            .map(|i| req(f64::from(i) * 100.0, 500 + u64::from(i % 5), 128, 1))
            .collect();
        assert_eq!(classify_of(&uniform, 0.0), "uniform");
        let skewed: Vec<Sample> = (0..50u32)
            .map(|i| {
                req(
                    f64::from(i) * 100.0,
                    if i % 10 == 0 { 20_000 } else { 200 },
                    100,
                    1,
                )
            })
            .collect();
        assert_eq!(classify_of(&skewed, 0.0), "skewed");
        let conv: Vec<Sample> = (0..50u32)
            .map(|i| req(f64::from(i) * 100.0, 600, 150, 1 + 2 * (i % 5)))
            .collect();
        assert_eq!(classify_of(&conv, 0.6), "conversation");
        let code: Vec<Sample> = (0..50u32)
            .map(|i| req(f64::from(i) * 100.0, 3_000, 32, 1))
            .collect();
        assert_eq!(classify_of(&code, 0.9), "code_completion");
        let long: Vec<Sample> = (0..50u32)
            .map(|i| req(f64::from(i) * 100.0, 20_000, 200, 1))
            .collect();
        assert_eq!(classify_of(&long, 0.0), "long_context");
    }
}
