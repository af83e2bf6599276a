//! The canonical metric table: every metric tokentap exports, once.
//!
//! Owns: name, kind, unit, help, labels, buckets, the OpenTelemetry name,
//! the exact start and end events, when it is observed, and which
//! methodology test it serves. The Prometheus registry and the OpenTelemetry
//! instruments (`tokentap_telemetry`), `docs/metrics.md` (generated from
//! `render_markdown`, checked by a test) and the dashboard tests all read
//! this table; nothing else names a metric.
//!
//! A metric's kind and label set are its type, `Metric<L, K>`: recording a
//! counter where a histogram is expected does not compile. Every metric is
//! defined inside a `metrics!` block, which lists it in its file's
//! `ENTRIES`; `ALL` is every file's entries, so a defined metric is
//! registered, exported and documented without being listed anywhere else.

mod buckets;

pub use crate::names::Label;
pub use attribution::*;
pub use buckets::{
    Resolution, CALL_BUCKETS, DURATION_BUCKETS, ITL_BUCKETS, OVERHEAD_BUCKETS, TPOT_BUCKETS,
    TTFT_BUCKETS,
};
/// Bucket layouts and the resolution switch.
pub mod bucket_layouts {
    pub use super::buckets::{at, layout_of, LAYOUTS};
}
pub use calls::*;
pub use compound::*;
pub use fleet::*;
pub use join::*;
pub use process::*;
pub use request::*;
pub use window::*;

use crate::labels::LabelSet;
use std::marker::PhantomData;

/// The kinds a metric can have, as types (`Metric<L, kind::Counter>`).
pub mod kind {
    /// A monotonic count (`_total`).
    pub struct Counter;
    /// An integer level that goes up and down.
    pub struct Gauge;
    /// A distribution over the family's buckets.
    pub struct Histogram;
    /// A floating-point figure set when an analysis window closes.
    pub struct WindowGauge;
}
pub use kind::{Counter, Gauge, Histogram, WindowGauge};

/// A kind marker's runtime value.
pub trait MetricKind {
    const KIND: Kind;
}
impl MetricKind for kind::Counter {
    const KIND: Kind = Kind::Counter;
}
impl MetricKind for kind::Gauge {
    const KIND: Kind = Kind::Gauge;
}
impl MetricKind for kind::Histogram {
    const KIND: Kind = Kind::Histogram;
}
impl MetricKind for kind::WindowGauge {
    const KIND: Kind = Kind::WindowGauge;
}

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// A floating-point gauge set when an analysis window closes (absent
    /// while its figure is not available).
    WindowGauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::WindowGauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Unit of a metric's values (base units only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Tokens,
    Requests,
    Errors,
    Connections,
    Info,
    Ratio,
    TokensPerSecond,
    RequestsPerSecond,
    Bytes,
    Calls,
    Messages,
    Results,
    Inputs,
}

impl Unit {
    /// UCUM-style unit, as OpenTelemetry writes it.
    pub fn otel(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Tokens => "{token}",
            Unit::Requests => "{request}",
            Unit::Errors => "{error}",
            Unit::Connections => "{connection}",
            Unit::Info | Unit::Ratio => "1",
            Unit::TokensPerSecond => "{token}/s",
            Unit::RequestsPerSecond => "{request}/s",
            Unit::Bytes => "By",
            Unit::Calls => "{call}",
            Unit::Messages => "{message}",
            Unit::Results => "{result}",
            Unit::Inputs => "{input}",
        }
    }
}

/// The ten tests of the IETF LLM serving methodology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    Ttft,
    OutputThroughput,
    ThroughputLatency,
    ItlDistribution,
    Capacity,
    Fairness,
    PrefixCache,
    MemoryPressure,
    LongContext,
    GuardrailOverhead,
    /// Not one of the ten: the compound-system boundary's own calls
    /// (retrieval, tools), which its end-to-end time is made of.
    Compound,
}

impl Test {
    pub fn as_str(self) -> &'static str {
        match self {
            Test::Ttft => "1 TTFT",
            Test::OutputThroughput => "2 output throughput",
            Test::ThroughputLatency => "3 throughput–latency",
            Test::ItlDistribution => "4 ITL distribution",
            Test::Capacity => "5 capacity",
            Test::Fairness => "6 fairness",
            Test::PrefixCache => "7 prefix cache",
            Test::MemoryPressure => "8 memory pressure",
            Test::LongContext => "9 long context",
            Test::GuardrailOverhead => "10 guardrail overhead",
            Test::Compound => "compound-system boundary (retrieval, tools)",
        }
    }
}

/// One metric, fully described (the table's untyped view: the registry,
/// the docs and the tests walk these).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    pub name: &'static str,
    pub otel_name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub help: &'static str,
    /// From the family's label set (`Metric<L>`), never written by hand.
    pub labels: &'static [Label],
    pub buckets: &'static [f64],
    /// The event that starts the measured interval (or what is counted).
    pub start: &'static str,
    /// The event that ends it.
    pub end: &'static str,
    /// Which requests or events contribute an observation.
    pub observed: &'static str,
    pub tests: &'static [Test],
}

/// A table entry as written: everything but the labels and the kind, which
/// come from the metric's type.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub otel_name: &'static str,
    pub unit: Unit,
    pub help: &'static str,
    pub buckets: &'static [f64],
    pub start: &'static str,
    pub end: &'static str,
    pub observed: &'static str,
    pub tests: &'static [Test],
}

/// A metric family of kind `K` whose series are labelled by `L`: what call
/// sites name. Recording takes an `L`, so the label values always match
/// the family, and only the kind's own operation accepts it.
pub struct Metric<L, K> {
    pub def: MetricDef,
    typed: PhantomData<Typed<L, K>>,
}

/// What a `Metric` carries only as a type: its label set and kind.
type Typed<L, K> = (fn(&L), K);

impl<L: LabelSet, K: MetricKind> Metric<L, K> {
    pub const fn new(spec: Spec) -> Self {
        Metric {
            def: MetricDef {
                name: spec.name,
                otel_name: spec.otel_name,
                kind: K::KIND,
                unit: spec.unit,
                help: spec.help,
                labels: L::LABELS,
                buckets: spec.buckets,
                start: spec.start,
                end: spec.end,
                observed: spec.observed,
                tests: spec.tests,
            },
            typed: PhantomData,
        }
    }
}

impl<L, K> std::ops::Deref for Metric<L, K> {
    type Target = MetricDef;
    fn deref(&self) -> &MetricDef {
        &self.def
    }
}

/// OpenTelemetry's advised token-usage boundaries.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
pub const SHARE_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0];
/// Sizes of a call's request or response, 64 B to 64 MiB by powers of 4.
pub const BYTES_BUCKETS: &[f64] = &[
    64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];
/// Counts of results, documents or vectors of one call.
pub const COUNT_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0,
];
pub const TOKENS_PER_EVENT_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0, 128.0,
];

/// Defines metrics, each `pub const NAME: Metric<L, K> = ...;`, and the
/// module's `ENTRIES`: every one of them, in order. The table's files are
/// made of these blocks; exported so a test elsewhere can define one.
#[macro_export]
macro_rules! metrics {
    ($( $(#[$m:meta])* pub const $name:ident : $ty:ty = $value:expr ; )*) => {
        $( $(#[$m])* pub const $name: $ty = $value; )*

        /// Every metric this module defines, in order (to its parent).
        pub(super) const ENTRIES: &[&$crate::table::MetricDef] = &[$( &$name.def ),*];
    };
}
pub use metrics;

/// Declares the table's files and `ALL`: their entries, in this order.
macro_rules! files {
    ($($file:ident),* $(,)?) => {
        $( mod $file; )*

        const COUNT: usize = 0 $( + $file::ENTRIES.len() )*;

        /// Every metric, in documentation order.
        // The lints against indexing guard the measuring path; `ALL` is
        // built at compile time, where an index out of bounds is a build
        // error.
        #[allow(clippy::indexing_slicing)]
        pub const ALL: &[&MetricDef] = &{
            let files: &[&[&MetricDef]] = &[$( $file::ENTRIES ),*];
            let mut all: [&MetricDef; COUNT] = [&BUILD_INFO.def; COUNT];
            let (mut n, mut f) = (0, 0);
            while f < files.len() {
                let mut i = 0;
                while i < files[f].len() {
                    all[n] = files[f][i];
                    n += 1;
                    i += 1;
                }
                f += 1;
            }
            all
        };
    };
}

files!(
    request,
    process,
    attribution,
    join,
    fleet,
    window,
    calls,
    compound
);

const BUCKETS_DOC: &str = "### Bucket layouts\n\n\
Every duration histogram resolves the range it serves so that PromQL's \
`histogram_quantile` is within 5 % or 1 ms of the exact percentile, whatever \
the distribution: inside that range each bucket is at most 1 ms wide (up to \
20 ms) or its upper bound is at most 1.05× its lower bound, and the estimate \
(linear interpolation inside the bucket) and the true percentile lie in the \
same bucket. Bounds are the previous × 1.05 rounded down to three significant \
digits; OpenTelemetry's advised boundaries are kept among them. Above the \
range a few coarse bounds keep long tails visible, not resolved. The price is \
series: 150–230 bucket series per histogram series (a family's series count \
is its label combinations × (bounds + 3)); `metrics.buckets: standard` \
registers OpenTelemetry's advised bounds with vLLM's long tail instead \
(19–26 per family, about an eighth of the series, each estimate within the \
width of its bucket). \
`tokentap_core::table::buckets::tests` checks the rule and the error over \
known distributions (point masses, narrow and wide normals, log-normal, \
uniform, bimodal) at centres across each range.\n\n";

/// Renders the metric reference section of `docs/metrics.md`.
pub fn render_markdown() -> String {
    let mut out = String::new();
    for m in ALL {
        let labels: Vec<_> = m
            .labels
            .iter()
            .map(|l| format!("`{}`", l.as_str()))
            .collect();
        let tests: Vec<_> = m.tests.iter().map(|t| t.as_str()).collect();
        out.push_str(&format!("### `{}`\n\n{}\n\n", m.name, m.help));
        out.push_str("| | |\n|---|---|\n");
        out.push_str(&format!("| type | {} |\n", m.kind.as_str()));
        out.push_str(&format!("| unit | {} |\n", m.unit.otel()));
        out.push_str(&format!("| labels | {} |\n", labels.join(", ")));
        if m.start != "—" {
            out.push_str(&format!("| start | {} |\n", m.start));
            out.push_str(&format!("| end | {} |\n", m.end));
        }
        out.push_str(&format!("| observed | {} |\n", m.observed));
        match buckets::layout_of(m.buckets) {
            Some((name, what)) => out.push_str(&format!(
                "| buckets | {} bounds, layout `{name}`: {what} (see [Bucket layouts](#bucket-layouts)) |\n",
                m.buckets.len()
            )),
            None if !m.buckets.is_empty() => {
                let b: Vec<_> = m.buckets.iter().map(|b| b.to_string()).collect();
                out.push_str(&format!("| buckets | {} |\n", b.join(", ")));
            }
            None => {}
        }
        out.push_str(&format!("| OpenTelemetry name | `{}` |\n", m.otel_name));
        let tests = if tests.is_empty() {
            "— (health of the measurement)".to_string()
        } else {
            tests.join(", ")
        };
        out.push_str(&format!("| methodology test | {tests} |\n\n"));
    }
    out.push_str(BUCKETS_DOC);
    for (name, bounds, what) in buckets::LAYOUTS {
        let b: Vec<_> = bounds.iter().map(|b| b.to_string()).collect();
        out.push_str(&format!(
            "#### `{name}`\n\n{what}; {} bounds:\n\n{}\n\n",
            bounds.len(),
            b.join(", ")
        ));
    }
    out.push_str(
        "### Label values\n\n| label | values | OpenTelemetry attribute |\n|---|---|---|\n",
    );
    // Every label some metric has, in the order the metrics first use it.
    let mut labels: Vec<Label> = Vec::new();
    for l in ALL.iter().flat_map(|m| m.labels) {
        if !labels.contains(l) {
            labels.push(*l);
        }
    }
    for l in labels {
        out.push_str(&format!(
            "| `{}` | {} | `{}` |\n",
            l.as_str(),
            crate::labels::documented(l),
            l.otel_key()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let mut names = std::collections::HashSet::new();
        for m in ALL {
            assert!(names.insert(m.name), "duplicate {}", m.name);
            assert!(m
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            if m.unit == Unit::Seconds {
                assert!(m.name.ends_with("_seconds"), "{}", m.name);
            }
            if m.unit == Unit::Ratio {
                assert!(
                    m.name.ends_with("_ratio") || m.name.ends_with("_index"),
                    "{}",
                    m.name
                );
            }
            assert_eq!(
                m.kind == Kind::Histogram,
                !m.buckets.is_empty(),
                "{}",
                m.name
            );
            assert!(
                m.buckets.windows(2).all(|w| w[0] < w[1]),
                "{} buckets increase",
                m.name
            );
        }
    }
}
