//! The demo's live table, computed from the Prometheus registry exactly as a
//! dashboard would: deltas of cumulative histogram buckets between two
//! snapshots, quantiles interpolated like PromQL's `histogram_quantile`.

use prometheus::proto::MetricFamily;
use prometheus::Registry;
use std::collections::HashMap;
use std::time::Instant;
use tokentap_core::table;

/// Cumulative bucket counts of one histogram, summed over its series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist {
    pub bounds: Vec<f64>,
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

impl Hist {
    fn delta(&self, earlier: &Hist) -> Hist {
        let minus = |a: u64, b: Option<&u64>| a.saturating_sub(b.copied().unwrap_or(0));
        Hist {
            bounds: self.bounds.clone(),
            cumulative: self
                .cumulative
                .iter()
                .enumerate()
                .map(|(i, c)| minus(*c, earlier.cumulative.get(i)))
                .collect(),
            count: self.count.saturating_sub(earlier.count),
            sum: self.sum - earlier.sum,
        }
    }

    /// PromQL-style quantile: linear interpolation inside the bucket.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let mut prev_bound = 0.0;
        let mut prev_count = 0u64;
        for (bound, &c) in self.bounds.iter().zip(&self.cumulative) {
            if c as f64 >= rank {
                let in_bucket = (c - prev_count) as f64;
                let frac = if in_bucket > 0.0 {
                    (rank - prev_count as f64) / in_bucket
                } else {
                    0.0
                };
                return Some(prev_bound + (bound - prev_bound) * frac);
            }
            prev_bound = *bound;
            prev_count = c;
        }
        // In the +Inf bucket: the highest finite bound, as PromQL does.
        self.bounds.last().copied()
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// Everything the table needs at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    hists: HashMap<&'static str, Hist>,
    values: HashMap<&'static str, f64>,
}

fn family<'a>(fams: &'a [MetricFamily], name: &str) -> Option<&'a MetricFamily> {
    fams.iter().find(|f| f.name() == name)
}

fn matches_tap(m: &prometheus::proto::Metric, tap: &str) -> bool {
    m.get_label()
        .iter()
        .any(|l| l.name() == "tap" && l.value() == tap)
}

impl Snapshot {
    pub fn take(registry: &Registry, tap: &str) -> Snapshot {
        let fams = registry.gather();
        let mut hists = HashMap::new();
        for def in [&table::TTFT.def, &table::ITL.def, &table::TPOT.def] {
            let mut h = Hist {
                bounds: def.buckets.to_vec(),
                cumulative: vec![0; def.buckets.len()],
                ..Hist::default()
            };
            for m in family(&fams, def.name)
                .map(|f| f.get_metric())
                .unwrap_or_default()
            {
                if !matches_tap(m, tap) {
                    continue;
                }
                let ph = m.get_histogram();
                h.count += ph.get_sample_count();
                h.sum += ph.get_sample_sum();
                for (slot, b) in h.cumulative.iter_mut().zip(ph.get_bucket()) {
                    *slot += b.cumulative_count();
                }
            }
            hists.insert(def.name, h);
        }
        let mut values = HashMap::new();
        for def in [
            &table::REQUESTS.def,
            &table::OUTPUT_TOKENS.def,
            &table::IN_FLIGHT.def,
        ] {
            let mut v = 0.0;
            for m in family(&fams, def.name)
                .map(|f| f.get_metric())
                .unwrap_or_default()
            {
                if matches_tap(m, tap) {
                    v += m.get_counter().get_value() + m.get_gauge().get_value();
                }
            }
            values.insert(def.name, v);
        }
        let mut errors = 0.0;
        for m in family(&fams, table::REQUESTS.name)
            .map(|f| f.get_metric())
            .unwrap_or_default()
        {
            let ok = m
                .get_label()
                .iter()
                .any(|l| l.name() == "outcome" && l.value() == "ok");
            if matches_tap(m, tap) && !ok {
                errors += m.get_counter().get_value();
            }
        }
        values.insert("errors", errors);
        Snapshot {
            at: Instant::now(),
            hists,
            values,
        }
    }

    fn hist(&self, name: &str) -> Hist {
        self.hists.get(name).cloned().unwrap_or_default()
    }

    fn value(&self, name: &str) -> f64 {
        self.values.get(name).copied().unwrap_or(0.0)
    }
}

/// One line of the table: what happened between two snapshots.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seconds: f64,
    pub requests: f64,
    pub not_ok: f64,
    pub ttft: (Option<f64>, Option<f64>),
    pub itl: (Option<f64>, Option<f64>),
    pub tpot: Option<f64>,
    pub output_tokens_per_s: f64,
    pub in_flight: f64,
}

pub fn row(prev: &Snapshot, cur: &Snapshot) -> Row {
    let seconds = cur
        .at
        .saturating_duration_since(prev.at)
        .as_secs_f64()
        .max(1e-9);
    let d = |name: &str| cur.hist(name).delta(&prev.hist(name));
    let (ttft, itl, tpot) = (d(table::TTFT.name), d(table::ITL.name), d(table::TPOT.name));
    Row {
        seconds,
        requests: cur.value(table::REQUESTS.name) - prev.value(table::REQUESTS.name),
        not_ok: cur.value("errors") - prev.value("errors"),
        ttft: (ttft.quantile(0.5), ttft.quantile(0.99)),
        itl: (itl.quantile(0.5), itl.quantile(0.99)),
        tpot: tpot.mean(),
        output_tokens_per_s: (cur.value(table::OUTPUT_TOKENS.name)
            - prev.value(table::OUTPUT_TOKENS.name))
            / seconds,
        in_flight: cur.value(table::IN_FLIGHT.name),
    }
}

pub const HEADER: &str =
    "  requests  not-ok  TTFT p50   TTFT p99   ITL p50   ITL p99   TPOT mean  out tok/s  in flight";

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{:.1} ms", s * 1000.0))
}

pub fn render(r: &Row) -> String {
    format!(
        "  {:>8}  {:>6}  {:>9}  {:>9}  {:>8}  {:>8}  {:>9}  {:>9.0}  {:>9}",
        r.requests,
        r.not_ok,
        ms(r.ttft.0),
        ms(r.ttft.1),
        ms(r.itl.0),
        ms(r.itl.1),
        ms(r.tpot),
        r.output_tokens_per_s,
        r.in_flight
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_like_promql() {
        let h = Hist {
            bounds: vec![0.1, 0.2, 0.4],
            cumulative: vec![0, 50, 100],
            count: 100,
            sum: 25.0,
        };
        assert_eq!(h.quantile(0.5), Some(0.2));
        assert!((h.quantile(0.25).unwrap() - 0.15).abs() < 1e-9);
        assert!((h.quantile(0.99).unwrap() - 0.396).abs() < 1e-9);
        assert_eq!(h.mean(), Some(0.25));
        assert_eq!(Hist::default().quantile(0.5), None);
    }
}
