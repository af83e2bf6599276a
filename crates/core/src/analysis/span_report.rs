//! A whole report: every tap's ten tests over a span, plus the windows that
//! draw the throughput–latency curve. Built from samples (a record log, or
//! the live aggregator's history); rendered elsewhere (`crate::report`).
//!
//! Windows are consecutive spans of `settings.window` from the first
//! request's start; a request belongs to the window in which it completed.

use super::cache::PrefixMemory;
use super::sample::Sample;
use super::series::{self, Curve, Point};
use super::settings::AnalysisSettings;
use super::{analyze, point, Analysis, Input, Scope, Test};
use serde::Serialize;
use std::collections::BTreeMap;

/// How times in a report were taken.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Clock {
    pub durations: &'static str,
    pub resolution: &'static str,
    pub wall_clock: &'static str,
}

pub const CLOCK: Clock = Clock {
    durations:
        "monotonic (std::time::Instant, CLOCK_MONOTONIC on Linux), one reading per received chunk",
    resolution: "1 µs (record log and reports)",
    wall_clock: "start_unix_ms from the system clock, for placing requests and windows in time",
};

/// One tap's part of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TapReport {
    /// The ten tests over the whole span (its `tradeoff` is the curve).
    pub analysis: Analysis,
    /// Windows analysed (including empty ones).
    pub windows: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    /// What was analysed (`live` or a file name).
    pub source: String,
    pub clock: Clock,
    pub settings: AnalysisSettings,
    /// Samples read (record-log lines that parsed).
    pub samples: usize,
    /// Lines that were not samples (skipped, counted).
    pub skipped_lines: usize,
    pub taps: Vec<TapReport>,
    /// What the scraped engines reported over the span (live only).
    pub engines: Vec<super::engines::EngineWindow>,
}

/// Builds a report from samples of any taps, in any order.
pub fn build(
    source: &str,
    samples: &[Sample],
    skipped_lines: usize,
    settings: &AnalysisSettings,
    base: std::time::Instant,
) -> Report {
    let mut all: Vec<&Sample> = samples.iter().collect();
    all.sort_by(|a, b| a.start_unix_ms.total_cmp(&b.start_unix_ms));
    let mut taps: BTreeMap<(&str, &str), Vec<&Sample>> = BTreeMap::new();
    for s in &all {
        taps.entry((&s.tap, &s.boundary)).or_default().push(s);
    }
    let reports = taps
        .into_iter()
        .map(|((tap, boundary), mine)| tap_report(tap, boundary, &mine, &all, settings, base))
        .collect();
    Report {
        tool: "tokentap",
        version: env!("CARGO_PKG_VERSION"),
        source: source.to_owned(),
        clock: CLOCK,
        settings: settings.clone(),
        samples: samples.len(),
        skipped_lines,
        taps: reports,
        engines: Vec::new(),
    }
}

fn tap_report(
    tap: &str,
    boundary: &str,
    mine: &[&Sample],
    all: &[&Sample],
    settings: &AnalysisSettings,
    base: std::time::Instant,
) -> TapReport {
    let start = mine
        .iter()
        .map(|s| s.start_unix_ms)
        .fold(f64::INFINITY, f64::min);
    let end = mine
        .iter()
        .map(|s| s.end_unix_ms())
        .fold(f64::NEG_INFINITY, f64::max);
    let scope = Scope {
        start_unix_ms: if start.is_finite() { start } else { 0.0 },
        end_unix_ms: if end.is_finite() { end } else { 0.0 },
    };
    let step = settings.window.as_secs_f64() * 1e3;
    let mut points: Vec<Point> = Vec::new();
    let mut windows = 0;
    let mut memory = PrefixMemory::default();
    if step > 0.0 {
        let mut ws = scope.start_unix_ms;
        while ws < scope.end_unix_ms || windows == 0 {
            let we = ws + step;
            let in_window: Vec<&Sample> = mine
                .iter()
                .copied()
                .filter(|s| {
                    s.end_unix_ms() >= ws && (s.end_unix_ms() < we || we >= scope.end_unix_ms)
                })
                .collect();
            let window_scope = Scope {
                start_unix_ms: ws,
                end_unix_ms: we.min(scope.end_unix_ms.max(ws)),
            };
            let load = super::load::concurrency(mine.iter().copied(), ws, window_scope.end_unix_ms);
            let input = Input {
                tap,
                boundary,
                samples: &in_window,
                all_taps: all,
                scope: window_scope,
                settings,
                base,
            };
            let a = analyze(&input, &mut memory, Some(load));
            // A trailing window shorter than half a window would turn a few
            // requests into a wild rate; its requests count in the totals.
            if window_scope.seconds() * 2.0 >= settings.window.as_secs_f64() {
                points.push(point(&a));
            }
            windows += 1;
            ws = we;
        }
    }
    let input = Input {
        tap,
        boundary,
        samples: mine,
        all_taps: all,
        scope,
        settings,
        base,
    };
    let mut analysis = analyze(&input, &mut PrefixMemory::default(), None);
    finish(&mut analysis, points, settings);
    TapReport { analysis, windows }
}

/// Completes a span's analysis with what needs its windows: the tradeoff
/// curve and the capacity across windows.
pub fn finish(analysis: &mut super::Analysis, points: Vec<Point>, settings: &AnalysisSettings) {
    analysis.tradeoff = tradeoff(points, settings.capacity_target);
    if let (Test::Measured(c), Some(curve)) = (&mut analysis.capacity, analysis.tradeoff.measured())
    {
        c.windows = curve.capacity;
        c.windows_note = curve.capacity_note.clone();
    }
}

/// The tradeoff test from window points.
pub fn tradeoff(points: Vec<Point>, target: f64) -> Test<Curve> {
    let curve = series::curve(points, target);
    if curve.points.len() >= 2 {
        Test::Measured(curve)
    } else {
        Test::not(format!(
            "{} window(s) with requests; the curve needs two or more (a longer record or a shorter window)",
            curve.points.len()
        ))
    }
}

/// Reads a record log (JSONL): the samples, and how many lines were not
/// samples (blank lines are not counted).
pub fn read_jsonl(text: &str) -> (Vec<Sample>, usize) {
    let mut samples = Vec::new();
    let mut skipped = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match serde_json::from_str::<Sample>(line) {
            Ok(s) => samples.push(s),
            Err(_) => skipped += 1,
        }
    }
    (samples, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(tap: &str, start: f64, ttft: f64, e2e: f64) -> Sample {
        Sample {
            v: 1,
            tap: tap.into(),
            boundary: "engine".into(),
            operation: "chat".into(),
            outcome: "ok".into(),
            stream: true,
            protocol: "sse".into(),
            start_unix_ms: start,
            ttft_ms: Some(ttft),
            e2e_ms: e2e,
            token_events: 3,
            gaps_ms: vec![10.0, 10.0],
            output_tokens: Some(3),
            input_tokens: Some(100),
            in_flight: 1,
            ..Sample::default()
        }
    }

    #[test]
    fn windows_and_taps() {
        let settings = AnalysisSettings {
            window: Duration::from_secs(1),
            ..AnalysisSettings::default()
        };
        let mut v: Vec<Sample> = (0..30)
            .map(|i| req("a", f64::from(i) * 100.0, 20.0, 50.0))
            .collect();
        v.push(req("b", 0.0, 20.0, 50.0));
        let r = build("test", &v, 2, &settings, std::time::Instant::now());
        assert_eq!(r.taps.len(), 2);
        assert_eq!(r.skipped_lines, 2);
        let a = &r.taps[0];
        assert_eq!(a.analysis.tap, "a");
        assert_eq!(a.windows, 3);
        let curve = a.analysis.tradeoff.measured().unwrap();
        assert_eq!(curve.points.len(), 3);
        assert_eq!(curve.points.iter().map(|p| p.requests).sum::<usize>(), 30);
        assert!(r.taps[1].analysis.tradeoff.why().is_some());
    }

    #[test]
    fn jsonl_round_trip_and_bad_lines() {
        let s = req("a", 1.0, 2.0, 3.0);
        let text = format!(
            "{}\n\nnot json\n{}\n",
            serde_json::to_string(&s).unwrap(),
            serde_json::to_string(&s).unwrap()
        );
        let (v, skipped) = read_jsonl(&text);
        assert_eq!(v, vec![s.clone(), s]);
        assert_eq!(skipped, 1);
    }
}
