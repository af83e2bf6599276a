//! Live analyses: each tap's requests of the current window, closed every
//! `window` into the ten tests, kept as a history for the throughput–latency
//! curve and capacity, published as Prometheus gauges (`on_window`) and as
//! the JSON of `/report`.
//!
//! Per request the proxy calls `TapLive::start` (when the request arrives:
//! returns its in-flight level), `end` (when it is gone) and `push` (its
//! sample); each is a short critical section, none runs per chunk. The
//! in-flight count is integrated over time here, so a window's concurrency
//! is exact even for streams that outlive it. Time comes in as an argument
//! (ms since epoch) so tests drive windows without sleeping.

use super::cache::PrefixMemory;
use super::engines::EngineWindow;
use super::load::{self, Concurrency, Level};
use super::series::Point;
use super::span_report::{self, Report, TapReport, CLOCK};
use super::{analyze, point, AnalysisSettings, Input, Sample, Scope};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Locks, recovering from a poisoned lock (a panic elsewhere must not stop
/// the analyses).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The open window of one tap.
struct Open {
    samples: Vec<Sample>,
    dropped: u64,
    in_flight: u32,
    last_ms: f64,
    area: f64,
    max: u32,
    started_ms: f64,
}

impl Open {
    fn advance(&mut self, now_ms: f64) {
        let t = now_ms.max(self.last_ms);
        self.area += f64::from(self.in_flight) * (t - self.last_ms);
        self.last_ms = t;
    }
}

/// One tap's live state.
pub struct TapLive {
    pub tap: String,
    pub boundary: &'static str,
    max_samples: usize,
    open: Mutex<Open>,
}

impl TapLive {
    /// A request arrived: returns the in-flight level, itself included.
    pub fn start(&self, now_ms: f64) -> u32 {
        let mut o = lock(&self.open);
        o.advance(now_ms);
        o.in_flight = o.in_flight.saturating_add(1);
        o.max = o.max.max(o.in_flight);
        o.in_flight
    }

    /// A request is gone (whatever its outcome).
    pub fn end(&self, now_ms: f64) {
        let mut o = lock(&self.open);
        o.advance(now_ms);
        o.in_flight = o.in_flight.saturating_sub(1);
    }

    /// A finished request's sample; `false` when the window is full.
    pub fn push(&self, sample: Sample) -> bool {
        let mut o = lock(&self.open);
        if o.samples.len() >= self.max_samples {
            o.dropped += 1;
            return false;
        }
        o.samples.push(sample);
        true
    }

    /// Closes the open window at `now_ms` and opens the next.
    fn take(&self, now_ms: f64) -> (Vec<Sample>, Concurrency, u64, f64) {
        let mut o = lock(&self.open);
        o.advance(now_ms);
        let span = now_ms - o.started_ms;
        let conc = Concurrency {
            mean: if span > 0.0 { o.area / span } else { 0.0 },
            max: o.max,
            tokens_in_flight: 0.0,
        };
        let started = o.started_ms;
        let samples = std::mem::take(&mut o.samples);
        let dropped = std::mem::take(&mut o.dropped);
        o.area = 0.0;
        o.max = o.in_flight;
        o.started_ms = now_ms;
        (samples, conc, dropped, started)
    }
}

/// What a tap keeps across windows.
#[derive(Default)]
struct History {
    points: VecDeque<Point>,
    levels: VecDeque<Vec<Level>>,
    memory: PrefixMemory,
}

/// Called with every closed window (the Prometheus gauges).
pub trait WindowSink: Send + Sync {
    fn window(&self, tap: &TapReport, dropped: u64);
    fn engines(&self, engines: &[EngineWindow]);
}

/// Where engine readings come from (the scraper), asked at each close.
pub trait EngineSource: Send + Sync {
    fn take_window(&self) -> Vec<EngineWindow>;
}

pub struct Live {
    pub settings: AnalysisSettings,
    taps: Vec<Arc<TapLive>>,
    history: Mutex<Vec<History>>,
    latest: arc_swap::ArcSwapOption<Report>,
    sinks: Vec<Arc<dyn WindowSink>>,
    engines: Option<Arc<dyn EngineSource>>,
    /// Any instant, for analyses that need the monotonic clock's type.
    base: std::time::Instant,
}

impl Live {
    /// `taps`: name and boundary of each tap; `now_ms` opens the first
    /// window (and `base` is the same moment on the monotonic clock).
    pub fn new(
        settings: AnalysisSettings,
        taps: &[(String, &'static str)],
        (now_ms, base): (f64, std::time::Instant),
        sinks: Vec<Arc<dyn WindowSink>>,
        engines: Option<Arc<dyn EngineSource>>,
    ) -> Live {
        let max_samples = settings.max_window_samples;
        Live {
            taps: taps
                .iter()
                .map(|(tap, boundary)| {
                    Arc::new(TapLive {
                        tap: tap.clone(),
                        boundary,
                        max_samples,
                        open: Mutex::new(Open {
                            samples: Vec::new(),
                            dropped: 0,
                            in_flight: 0,
                            last_ms: now_ms,
                            area: 0.0,
                            max: 0,
                            started_ms: now_ms,
                        }),
                    })
                })
                .collect(),
            history: Mutex::new(taps.iter().map(|_| History::default()).collect()),
            latest: arc_swap::ArcSwapOption::empty(),
            settings,
            sinks,
            engines,
            base,
        }
    }

    pub fn tap(&self, name: &str) -> Option<Arc<TapLive>> {
        self.taps.iter().find(|t| t.tap == name).cloned()
    }

    /// The report of the last closed window (`None` before the first).
    pub fn latest(&self) -> Option<Arc<Report>> {
        self.latest.load_full()
    }

    /// Closes every tap's window at `now_ms`: analyses, history, gauges,
    /// `/report`.
    pub fn close_window(&self, now_ms: f64) -> Arc<Report> {
        let taken: Vec<_> = self.taps.iter().map(|t| t.take(now_ms)).collect();
        let all: Vec<&Sample> = taken.iter().flat_map(|t| t.0.iter()).collect();
        let engines = self
            .engines
            .as_ref()
            .map(|e| e.take_window())
            .unwrap_or_default();
        let s = &self.settings;
        let mut history = lock(&self.history);
        let mut reports = Vec::with_capacity(self.taps.len());
        let mut total = 0;
        for ((tap, (samples, mut conc, dropped, started)), hist) in
            self.taps.iter().zip(&taken).zip(history.iter_mut())
        {
            total += samples.len();
            let mut mine: Vec<&Sample> = samples.iter().collect();
            mine.sort_by(|a, b| a.start_unix_ms.total_cmp(&b.start_unix_ms));
            conc.tokens_in_flight =
                load::concurrency(mine.iter().copied(), *started, now_ms).tokens_in_flight;
            let input = Input {
                tap: &tap.tap,
                boundary: tap.boundary,
                samples: &mine,
                all_taps: &all,
                scope: Scope {
                    start_unix_ms: *started,
                    end_unix_ms: now_ms,
                },
                settings: s,
                base: self.base,
            };
            let mut analysis = analyze(&input, &mut hist.memory, Some(conc));
            hist.points.push_back(point(&analysis));
            hist.levels.push_back(load::levels(&mine, &s.slo));
            while hist.points.len() > s.history_windows {
                hist.points.pop_front();
                hist.levels.pop_front();
            }
            span_report::finish(&mut analysis, hist.points.iter().cloned().collect(), s);
            if let super::Test::Measured(c) = &mut analysis.capacity {
                let merged = load::merge_levels(hist.levels.iter().flatten());
                c.capacity = load::capacity_of_levels(
                    merged,
                    &s.slo,
                    s.capacity_target,
                    s.capacity_min_requests,
                );
            }
            let tr = TapReport {
                analysis,
                windows: hist.points.len(),
            };
            for sink in &self.sinks {
                sink.window(&tr, *dropped);
            }
            reports.push(tr);
        }
        drop(history);
        for sink in &self.sinks {
            sink.engines(&engines);
        }
        let report = Arc::new(Report {
            tool: "tokentap",
            version: env!("CARGO_PKG_VERSION"),
            source: "live".into(),
            clock: CLOCK,
            settings: s.clone(),
            samples: total,
            skipped_lines: 0,
            taps: reports,
            engines,
        });
        self.latest.store(Some(report.clone()));
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample(start: f64, e2e: f64, in_flight: u32) -> Sample {
        Sample {
            v: 1,
            tap: "t".into(),
            boundary: "engine".into(),
            operation: "chat".into(),
            outcome: "ok".into(),
            stream: true,
            start_unix_ms: start,
            e2e_ms: e2e,
            ttft_ms: Some(10.0),
            output_tokens: Some(5),
            in_flight,
            ..Sample::default()
        }
    }

    #[test]
    fn windows_concurrency_history_and_latest() {
        let settings = AnalysisSettings {
            window: Duration::from_secs(1),
            history_windows: 2,
            max_window_samples: 3,
            ..AnalysisSettings::default()
        };
        let live = Live::new(
            settings,
            &[("t".into(), "engine")],
            (0.0, std::time::Instant::now()),
            vec![],
            None,
        );
        let t = live.tap("t").unwrap();
        assert!(live.latest().is_none());
        // Two requests overlapping for the second half of the window.
        assert_eq!(t.start(0.0), 1);
        assert_eq!(t.start(500.0), 2);
        t.end(1_000.0);
        for i in 0..4 {
            t.push(sample(0.0, 1_000.0, 1 + (i % 2)));
        }
        let r = live.close_window(1_000.0);
        let a = &r.taps[0].analysis;
        let c = a.capacity.measured().unwrap();
        assert!((c.concurrency.mean - 1.5).abs() < 1e-9);
        assert_eq!(c.concurrency.max, 2);
        assert_eq!(a.llm_requests, 3, "the fourth sample was over the cap");
        // The second window starts with one request still in flight.
        t.end(1_500.0);
        let r = live.close_window(2_000.0);
        let a = &r.taps[0].analysis;
        assert!(
            a.capacity.measured().is_none(),
            "no requests completed in window 2"
        );
        assert!(
            (a.concurrency.mean - 0.5).abs() < 1e-9,
            "one in flight for half of it"
        );
        for _ in 0..3 {
            live.close_window(3_000.0);
        }
        assert_eq!(r.taps[0].windows, 2);
        assert!(live.latest().is_some());
    }
}
