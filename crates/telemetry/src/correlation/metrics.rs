//! Where the correlator's conclusions become metrics: boundary overhead,
//! relay delay, added jitter, buffering, token mismatches, guardrail calls
//! and exposure, and the correlation counters. Label values are tap and
//! hop names, and fixed enums. In one process the names come from the
//! config; at the joiner they come from spans anyone can send, so every
//! name passes `Names`: at most 128 printable bytes, the first N distinct
//! taps, hops and outer/inner pairs get their own series, the rest are
//! `other`, counted in `tokentap_label_overflow_total`.

use crate::Registry as Metrics;
use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use tokentap_core::correlate::compound::{Breakdown, Part, Window};
use tokentap_core::correlate::linker::LinkResult;
use tokentap_core::correlate::{AttributionSink, Joined, Resolution};
use tokentap_core::labels::{
    CompoundCalls, CompoundLinks, CompoundPart, CompoundTap, CompoundTokens, Correlation,
    GuardExposed, GuardHop, GuardVerdict, LabelName, ModelLabels, Overflow, Overhead,
    OverheadPhase, Pair, TokenType, OTHER,
};
use tokentap_core::table;

/// How many distinct names the attribution families take before `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameLimits {
    pub max_taps: usize,
    pub max_hops: usize,
    pub max_pairs: usize,
    /// Compound tap names of the compound families (~1,000 series each:
    /// parts × windows × buckets), within `max_taps`'s.
    pub max_compound_taps: usize,
}

impl Default for NameLimits {
    fn default() -> Self {
        NameLimits {
            max_taps: 64,
            max_hops: 32,
            max_pairs: 64,
            max_compound_taps: 16,
        }
    }
}

/// The bounded tap, hop and pair names of the attribution families.
struct Names {
    taps: ModelLabels,
    hops: ModelLabels,
    compound: ModelLabels,
    pairs: RwLock<HashSet<(Arc<str>, Arc<str>)>>,
    max_pairs: usize,
    other: Arc<str>,
}

impl Names {
    fn new(l: NameLimits) -> Self {
        Names {
            taps: ModelLabels::new(l.max_taps),
            hops: ModelLabels::new(l.max_hops),
            compound: ModelLabels::new(l.max_compound_taps.min(l.max_taps)),
            pairs: RwLock::new(HashSet::new()),
            max_pairs: l.max_pairs,
            other: Arc::from(OTHER),
        }
    }
}

pub struct CorrelationMetrics {
    metrics: Arc<Metrics>,
    names: Names,
}

impl CorrelationMetrics {
    /// Also creates the `tokentap_correlation_total` series at 0.
    pub fn new(metrics: Arc<Metrics>, limits: NameLimits) -> Self {
        for result in Joined::ALL {
            metrics.touch(&table::CORRELATION, &Correlation { result });
        }
        for label in [LabelName::Tap, LabelName::Hop, LabelName::Pair] {
            metrics.touch(&table::LABEL_OVERFLOW, &Overflow { label });
        }
        CorrelationMetrics {
            metrics,
            names: Names::new(limits),
        }
    }

    fn overflowed(&self, label: LabelName) {
        self.metrics
            .add(&table::LABEL_OVERFLOW, &Overflow { label }, 1);
    }

    fn tap(&self, raw: &str) -> Arc<str> {
        let l = self.names.taps.label(Some(raw));
        if l.overflowed {
            self.overflowed(LabelName::Tap);
        }
        l.value
    }

    fn hop(&self, raw: &str) -> Arc<str> {
        let l = self.names.hops.label(Some(raw));
        if l.overflowed {
            self.overflowed(LabelName::Hop);
        }
        l.value
    }

    /// The bounded `outer`/`inner` values of a pair.
    fn pair(&self, outer: &str, inner: &str) -> (Arc<str>, Arc<str>) {
        let pair = (self.tap(outer), self.tap(inner));
        let known = self
            .names
            .pairs
            .read()
            .map(|p| p.contains(&pair))
            .unwrap_or(false);
        if known {
            return pair;
        }
        if let Ok(mut p) = self.names.pairs.write() {
            if p.contains(&pair) || p.len() < self.names.max_pairs {
                p.insert(pair.clone());
                return pair;
            }
        }
        self.overflowed(LabelName::Pair);
        (self.names.other.clone(), self.names.other.clone())
    }
}

/// Overheads are durations: a negative difference (the layer answered
/// without waiting for the inner side) is observed as 0.
fn non_negative(v: f64) -> f64 {
    v.max(0.0)
}

impl AttributionSink for CorrelationMetrics {
    fn resolved(&self, r: &Resolution) {
        let m = &self.metrics;
        for pair in &r.pairs {
            let (outer, inner) = self.pair(&pair.outer, &pair.inner);
            let phases = [
                (OverheadPhase::RequestPath, pair.request_path),
                (OverheadPhase::Ttfb, pair.ttfb),
                (OverheadPhase::Ttft, pair.ttft),
                (OverheadPhase::E2e, Some(pair.e2e)),
            ];
            for (phase, v) in phases {
                if let Some(v) = v {
                    let labels = Overhead {
                        outer: outer.clone(),
                        inner: inner.clone(),
                        phase,
                    };
                    m.observe(&table::BOUNDARY_OVERHEAD, &labels, non_negative(v));
                }
            }
            let labels = Pair { outer, inner };
            for d in &pair.relay_delays {
                m.observe(&table::RELAY_DELAY, &labels, non_negative(*d));
            }
            for d in &pair.relay_after_first {
                m.observe(&table::RELAY_AFTER_FIRST, &labels, non_negative(*d));
            }
            for j in &pair.added_jitter {
                m.observe(&table::ADDED_JITTER, &labels, *j);
            }
            if let Some(share) = pair.buffered_share {
                m.observe(&table::BUFFERED_SHARE, &labels, share);
            }
            if pair.buffered {
                m.add(&table::STREAM_BUFFERED, &labels, 1);
            }
            if pair.token_mismatch.is_some() {
                m.add(&table::TOKEN_MISMATCH, &labels, 1);
            }
        }
        for h in &r.hops {
            let name = self.hop(&h.hop);
            let hop = GuardHop {
                hop: name.clone(),
                phase: h.phase,
            };
            m.observe(&table::GUARDRAIL_DURATION, &hop, h.duration.as_secs_f64());
            let call = GuardVerdict {
                hop: name,
                phase: h.phase,
                verdict: h.verdict,
            };
            m.add(&table::GUARDRAIL_CALLS, &call, 1);
        }
        for e in &r.exposure {
            let labels = GuardExposed {
                tap: self.tap(&e.owner),
                phase: e.phase,
            };
            m.observe(&table::GUARDRAIL_EXPOSED, &labels, e.exposed.as_secs_f64());
        }
        for b in &r.compound {
            self.compound(b);
        }
    }

    fn counted(&self, result: Joined, n: u64) {
        self.metrics
            .add(&table::CORRELATION, &Correlation { result }, n);
    }

    fn linked(&self, result: LinkResult, n: u64) {
        self.metrics
            .add(&table::COMPOUND_LINKS, &CompoundLinks { result }, n);
    }
}

impl CorrelationMetrics {
    /// One compound request's breakdown.
    fn compound(&self, b: &Breakdown) {
        let m = &self.metrics;
        let tap = {
            let l = self.names.compound.label(Some(&self.tap(&b.tap)));
            if l.overflowed {
                self.overflowed(LabelName::Tap);
            }
            l.value
        };
        let windows = [(Window::Ttft, b.ttft), (Window::E2e, Some(b.e2e))];
        for (window, parts) in windows {
            let Some(parts) = parts else { continue };
            for part in Part::ALL {
                let labels = CompoundPart {
                    tap: tap.clone(),
                    window,
                    part,
                };
                m.observe(
                    &table::COMPOUND_PART,
                    &labels,
                    parts.get(part).as_secs_f64(),
                );
            }
        }
        let counts = [
            (Part::Llm, b.llm_calls.len()),
            (Part::Tool, b.tool_calls),
            (Part::Retrieval, b.retrieval_calls),
            (Part::Guardrail, b.guardrail_calls),
        ];
        for (part, n) in counts {
            let labels = CompoundCalls {
                tap: tap.clone(),
                part,
            };
            m.observe(&table::COMPOUND_CALLS, &labels, n as f64);
        }
        let labels = CompoundTap { tap: tap.clone() };
        for i in &b.iterations {
            m.observe(&table::COMPOUND_ITERATION, &labels, i.as_secs_f64());
        }
        let sides = [
            (TokenType::Input, b.input_tokens),
            (TokenType::Output, b.output_tokens),
        ];
        for (token_type, n) in sides {
            if let Some(n) = n {
                let labels = CompoundTokens {
                    tap: tap.clone(),
                    token_type,
                };
                m.observe(&table::COMPOUND_TOKENS, &labels, n as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokentap_core::correlate::{HopCall, JoinKind, PairAttribution, Phase};
    use tokentap_core::record::Verdict;

    fn pair(outer: &str, inner: &str) -> PairAttribution {
        PairAttribution {
            outer: Arc::from(outer),
            inner: Arc::from(inner),
            request_id: None,
            inner_request_id: None,
            joined_by: JoinKind::Trace,
            request_path: None,
            ttfb: Some(0.001),
            ttft: Some(0.002),
            e2e: 0.003,
            relay_delays: Vec::new(),
            relay_after_first: vec![0.001],
            added_jitter: vec![0.001],
            buffered_share: None,
            buffered: false,
            token_mismatch: None,
        }
    }

    /// 10,000 distinct tap and hop names from spans: the series stay
    /// within the caps, the rest is `other`, and every overflow counted.
    #[test]
    fn names_from_spans_are_bounded() {
        let m = Arc::new(Metrics::new().unwrap());
        let limits = NameLimits {
            max_taps: 100,
            max_hops: 4,
            max_pairs: 6,
            max_compound_taps: 10,
        };
        let c = CorrelationMetrics::new(m.clone(), limits);
        let long = "x".repeat(65_536);
        for i in 0..10_000 {
            let outer = if i == 0 {
                long.clone()
            } else {
                format!("o{i}")
            };
            let r = Resolution {
                pairs: vec![pair(&outer, &format!("i{i}"))],
                hops: vec![HopCall {
                    hop: Arc::from(format!("h{i}")),
                    request_id: None,
                    owner: None,
                    phase: Phase::Unknown,
                    duration: Duration::from_millis(5),
                    verdict: Verdict::Unknown,
                }],
                exposure: Vec::new(),
                compound: vec![Breakdown {
                    tap: Arc::from(format!("app{i}")),
                    request_id: None,
                    trace: None,
                    t0: std::time::Instant::now(),
                    ttft: None,
                    e2e: Default::default(),
                    llm_calls: Vec::new(),
                    tool_calls: 1,
                    retrieval_calls: 0,
                    guardrail_calls: 0,
                    iterations: Vec::new(),
                    output_tokens: None,
                    input_tokens: None,
                    members: Vec::new(),
                    by_links: false,
                }],
            };
            c.resolved(&r);
        }
        let scrape = String::from_utf8(m.prom.encode()).unwrap();
        let values = |label: &str| -> HashSet<String> {
            scrape
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let rest = l.split_once(&format!("{label}=\""))?.1;
                    Some(rest.split('"').next()?.to_owned())
                })
                .collect()
        };
        assert!(values("outer").len() <= 6 + 1, "{:?}", values("outer"));
        assert!(values("hop").len() <= 4 + 1);
        let compound_taps: HashSet<String> = scrape
            .lines()
            .filter(|l| l.starts_with("tokentap_compound_calls_count"))
            .filter_map(|l| Some(l.split_once("tap=\"")?.1.split('"').next()?.to_owned()))
            .collect();
        assert!(compound_taps.len() <= 10 + 1, "{compound_taps:?}");
        assert!(compound_taps.contains("other"));
        let pairs: HashSet<String> = scrape
            .lines()
            .filter(|l| l.starts_with("tokentap_boundary_overhead_seconds_count"))
            .map(|l| l.split(",phase").next().unwrap_or_default().to_owned())
            .collect();
        assert!(pairs.len() <= 6 + 1, "{pairs:?}");
        assert!(!scrape.contains(&long[..200]));
        assert!(scrape.contains(r#"outer="other""#));
        let overflow = |label: &str| {
            scrape
                .lines()
                .find(|l| {
                    l.starts_with("tokentap_label_overflow_total")
                        && l.contains(&format!("label=\"{label}\""))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        assert!(overflow("tap") > 0.0);
        assert_eq!(overflow("hop"), 10_000.0 - 4.0);
        assert!(overflow("pair") > 0.0);
    }
}
