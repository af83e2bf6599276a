//! Histogram bucket layouts. Every duration family's buckets are dense
//! enough that PromQL's `histogram_quantile` (linear interpolation inside
//! the bucket that holds the percentile) is within 5 % or 1 ms of the exact
//! percentile across the range the family serves, whatever the
//! distribution: inside that range a bucket is at most 1 ms wide (up to
//! 20 ms) or its upper bound is at most 1.05× its lower bound, and both the
//! estimate and the true value lie in the same bucket.
//!
//! A layout is generated at compile time from its range: 1 ms steps from
//! `lo` to 20 ms, then each bound the previous × 1.05 rounded down to three
//! significant digits (so `le` values read `0.0242`, not `0.024255`), with
//! the family's `anchors` (OpenTelemetry's advised boundaries, which are
//! kept) and `hi` inserted where they fall, a few bounds `below` `lo` for
//! sub-millisecond figures, and a coarse `tail` above `hi` (long
//! generations stay visible; their percentiles are not resolved to 5 %).
//! `tests` check the rule and the error over known distributions.
//!
//! Must not touch: which family uses which layout (the table's entries).

/// A duration layout, bounds in microseconds.
pub struct Layout {
    /// Bounds below the resolved range (sub-millisecond figures).
    pub below: &'static [u64],
    /// The resolved range: `lo` ..= `hi`.
    pub lo: u64,
    pub hi: u64,
    /// Bounds kept wherever they fall in the range.
    pub anchors: &'static [u64],
    /// Bounds above `hi`.
    pub tail: &'static [u64],
}

/// Where 1 ms steps end and 5 % steps begin (5 % of 20 ms is 1 ms).
pub const LINEAR_UNTIL: u64 = 20_000;

/// The largest number with three significant digits that is at most `n`.
const fn floor3(n: u64) -> u64 {
    let mut p = 1;
    while n / p >= 1_000 {
        p *= 10;
    }
    n / p * p
}

// The lints against indexing guard the measuring path; these run once, at
// compile time, where an index out of bounds is a build error.
#[allow(clippy::indexing_slicing)]
impl Layout {
    /// The bound after `prev` inside the resolved range.
    const fn next(&self, prev: u64) -> u64 {
        let mut best = if prev < LINEAR_UNTIL {
            prev + 1_000
        } else {
            floor3(prev * 105 / 100)
        };
        if self.hi > prev && self.hi < best {
            best = self.hi;
        }
        let mut i = 0;
        while i < self.anchors.len() {
            let a = self.anchors[i];
            if a > prev && a < best {
                best = a;
            }
            i += 1;
        }
        best
    }

    /// Visits every bound in order; returns how many there are and writes
    /// them (in seconds) into `out` when it is long enough.
    const fn walk(&self, out: &mut [f64]) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.below.len() {
            if n < out.len() {
                out[n] = self.below[i] as f64 / 1e6;
            }
            n += 1;
            i += 1;
        }
        let mut b = self.lo;
        loop {
            if n < out.len() {
                out[n] = b as f64 / 1e6;
            }
            n += 1;
            if b >= self.hi {
                break;
            }
            b = self.next(b);
        }
        i = 0;
        while i < self.tail.len() {
            if n < out.len() {
                out[n] = self.tail[i] as f64 / 1e6;
            }
            n += 1;
            i += 1;
        }
        n
    }

    /// How many bounds the layout has.
    pub const fn len(&self) -> usize {
        self.walk(&mut [])
    }

    /// The bounds, in seconds.
    pub const fn bounds<const N: usize>(&self) -> [f64; N] {
        let mut out = [0.0; N];
        self.walk(&mut out);
        out
    }
}

/// Declares `pub const $name: &[f64]` from a layout.
macro_rules! duration_buckets {
    ($(#[$m:meta])* $name:ident = $layout:expr) => {
        $(#[$m])*
        pub const $name: &[f64] = {
            const LAYOUT: Layout = $layout;
            const ARRAY: [f64; LAYOUT.len()] = LAYOUT.bounds();
            &ARRAY
        };
    };
}

const MS: u64 = 1_000;
const S: u64 = 1_000_000;

/// OpenTelemetry's advised TTFT boundaries.
const OTEL_TTFT: &[u64] = &[
    MS,
    5 * MS,
    10 * MS,
    20 * MS,
    40 * MS,
    60 * MS,
    80 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    750 * MS,
    S,
    2_500 * MS,
    5 * S,
    7_500 * MS,
    10 * S,
];

/// OpenTelemetry's advised TPOT boundaries.
const OTEL_TPOT: &[u64] = &[
    10 * MS,
    25 * MS,
    50 * MS,
    75 * MS,
    100 * MS,
    150 * MS,
    200 * MS,
    300 * MS,
    400 * MS,
    500 * MS,
    750 * MS,
    S,
    2_500 * MS,
];

/// OpenTelemetry's doubling duration boundaries (0.01 … 81.92 s).
const OTEL_DURATION: &[u64] = &[
    10 * MS,
    20 * MS,
    40 * MS,
    80 * MS,
    160 * MS,
    320 * MS,
    640 * MS,
    1_280 * MS,
    2_560 * MS,
    5_120 * MS,
    10_240 * MS,
    20_480 * MS,
    40_960 * MS,
    81_920 * MS,
];

/// The MCP semantic conventions' advised `mcp.client.operation.duration`
/// boundaries.
const OTEL_MCP: &[u64] = &[
    10 * MS,
    20 * MS,
    50 * MS,
    100 * MS,
    200 * MS,
    500 * MS,
    S,
    2 * S,
    5 * S,
    10 * S,
    30 * S,
    60 * S,
    120 * S,
    300 * S,
];

duration_buckets! {
    /// Calls of a compound system (MCP tools, retrieval): resolved from
    /// 1 ms to 300 s, the MCP conventions' advised boundaries among them.
    CALL_BUCKETS = Layout {
        below: &[],
        lo: MS,
        hi: 300 * S,
        anchors: OTEL_MCP,
        tail: &[],
    }
}

duration_buckets! {
    /// Time to first token, byte or event: resolved from 1 ms to 60 s
    /// (OpenTelemetry's advised boundaries among them), then vLLM's long
    /// tail to 2,560 s.
    TTFT_BUCKETS = Layout {
        below: &[],
        lo: MS,
        hi: 60 * S,
        anchors: OTEL_TTFT,
        tail: &[80 * S, 160 * S, 640 * S, 2_560 * S],
    }
}

duration_buckets! {
    /// Time per output token: resolved from 1 ms to 10 s (OpenTelemetry's
    /// advised boundaries among them), then to 80 s.
    TPOT_BUCKETS = Layout {
        below: &[],
        lo: MS,
        hi: 10 * S,
        anchors: OTEL_TPOT,
        tail: &[20 * S, 40 * S, 80 * S],
    }
}

duration_buckets! {
    /// Whole requests: resolved from 1 ms to 300 s (OpenTelemetry's
    /// doubling boundaries among them), then doubling to 2.9 h for long
    /// generations (vLLM's e2e tail reaches 7,680 s).
    DURATION_BUCKETS = Layout {
        below: &[],
        lo: MS,
        hi: 300 * S,
        anchors: OTEL_DURATION,
        tail: &[655_360 * MS, 1_310_720 * MS, 2_621_440 * MS, 5_242_880 * MS, 10_485_760 * MS],
    }
}

duration_buckets! {
    /// Inter-token gaps: 0.5 ms, then resolved from 1 ms to 10 s (decode
    /// steps, stalls, preemptions), then to 80 s.
    ITL_BUCKETS = Layout {
        below: &[500],
        lo: MS,
        hi: 10 * S,
        anchors: &[],
        tail: &[20 * S, 40 * S, 80 * S],
    }
}

duration_buckets! {
    /// What a layer or a guardrail call adds: 100 µs (a local relay) to
    /// 0.5 ms, resolved from 1 ms to 10 s, then to 5 minutes (a guardrail
    /// that waits for a whole answer).
    OVERHEAD_BUCKETS = Layout {
        below: &[100, 250, 500],
        lo: MS,
        hi: 10 * S,
        anchors: &[],
        tail: &[30 * S, 60 * S, 120 * S, 300 * S],
    }
}

/// Which bucket layouts a process registers: `Fine` (the default: every
/// duration family resolves 5 % or 1 ms, 150–230 bounds each) or
/// `Standard` (OpenTelemetry's advised bounds with vLLM's long tail,
/// 19–26 each: about an eighth of the series, `histogram_quantile` off by
/// up to the width of a bucket — 50 % between 0.25 and 0.5 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resolution {
    #[default]
    Fine,
    Standard,
}

/// The standard layouts, by the fine one they stand for.
const STANDARD: &[(&str, &[f64])] = &[
    (
        "ttft",
        &[
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
        ],
    ),
    (
        "tpot",
        &[
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0,
        ],
    ),
    (
        "duration",
        &[
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
            163.84, 327.68, 655.36, 1310.72, 2621.44, 5242.88, 10485.76,
        ],
    ),
    (
        "itl",
        &[
            0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
            0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
        ],
    ),
    (
        "call",
        &[
            0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
        ],
    ),
    (
        "overhead",
        &[
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
        ],
    ),
];

/// The bounds a family registers at `resolution`: its own, or, for a
/// duration layout at `Standard`, the standard one that stands for it.
pub fn at(buckets: &'static [f64], resolution: Resolution) -> &'static [f64] {
    match (resolution, layout_of(buckets)) {
        (Resolution::Standard, Some((name, _))) => STANDARD
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(buckets, |(_, b)| *b),
        _ => buckets,
    }
}

/// Every duration layout, with what it resolves: `docs/metrics.md` lists
/// them once ("Bucket layouts") and each family names its layout.
pub const LAYOUTS: &[(&str, &[f64], &str)] = &[
    (
        "ttft",
        TTFT_BUCKETS,
        "resolved from 1 ms to 60 s (OpenTelemetry's advised TTFT boundaries among them), then 80, 160, 640 and 2,560 s",
    ),
    (
        "tpot",
        TPOT_BUCKETS,
        "resolved from 1 ms to 10 s (OpenTelemetry's advised TPOT boundaries among them), then 20, 40 and 80 s",
    ),
    (
        "duration",
        DURATION_BUCKETS,
        "resolved from 1 ms to 300 s (OpenTelemetry's doubling duration boundaries among them), then doubling to 10,485.76 s",
    ),
    (
        "itl",
        ITL_BUCKETS,
        "0.5 ms, resolved from 1 ms to 10 s, then 20, 40 and 80 s",
    ),
    (
        "call",
        CALL_BUCKETS,
        "resolved from 1 ms to 300 s (the MCP conventions' advised boundaries among them)",
    ),
    (
        "overhead",
        OVERHEAD_BUCKETS,
        "0.1, 0.25 and 0.5 ms, resolved from 1 ms to 10 s, then 30, 60, 120 and 300 s",
    ),
];

/// The layout a family's buckets are, if they are a duration layout.
pub fn layout_of(buckets: &[f64]) -> Option<(&'static str, &'static str)> {
    LAYOUTS
        .iter()
        .find(|(_, b, _)| *b == buckets)
        .map(|(name, _, what)| (*name, *what))
}

#[cfg(test)]
mod tests;
