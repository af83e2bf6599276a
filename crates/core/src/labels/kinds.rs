//! Every label's value type and documented values, in one table: the
//! `k::*` kinds that label sets are built from, and `documented`, which
//! writes the "Label values" table of `docs/metrics.md`. A label whose
//! values are an enum is documented from the enum's own list.

use crate::names::Label;

macro_rules! doc_of {
    (enum, $ty:ty) => {
        super::list::<$ty>()
    };
    ($doc:literal, $ty:ty) => {
        String::from($doc)
    };
}

macro_rules! kinds {
    ($( $name:ident : $ty:ty = $doc:tt $(, $note:literal)? ;)*) => {
        /// The label kinds: `k::Tap` is the `tap` label, whose values are
        /// `Arc<str>`; `k::Outcome` the `outcome` label, whose values are
        /// `record::Outcome`.
        pub mod k {
            $(
                #[doc = concat!("The `", stringify!($name), "` label kind.")]
                #[derive(Debug)]
                pub struct $name;
                impl crate::labels::LabelKind for $name {
                    const LABEL: crate::names::Label = crate::names::Label::$name;
                    type Value = $ty;
                }
            )*
        }

        /// The values a label takes, for the docs (an enum's values are
        /// listed from the enum).
        pub fn documented(label: Label) -> String {
            match label {
                $( Label::$name => {
                    #[allow(unused_mut)]
                    let mut s = doc_of!($doc, $ty);
                    $( s.push_str($note); )?
                    s
                } )*
            }
        }
    };
}

kinds! {
    Tap: std::sync::Arc<str> = "tap names from the config (in the guardrail exposure family at `tokentap join`: from spans, bounded as `outer`; in the compound families there: the first `labels.max_compound_taps` of those, default 16, then `other`)";
    Boundary: crate::tap::Boundary = enum;
    Model: std::sync::Arc<str> = "requested model (else response model); first `metrics.max_models` distinct values (default 50), then `other`; `unknown` when absent";
    Operation: crate::decode::Operation = enum;
    Stream: bool = "`true`, `false`";
    Outcome: crate::record::Outcome = enum;
    TokenType: crate::labels::TokenType = enum;
    Source: crate::record::TokenSource = enum;
    Reason: crate::record::MeasureError = enum;
    Label: crate::labels::LabelName = enum;
    Version: &'static str = "tokentap's version";
    Outer: std::sync::Arc<str> = "tap names (the outer and the inner tap of a joined pair): from the config, or at `tokentap join` from the spans: the first `labels.max_taps` distinct names (default 64, at most 128 bytes, printable), then `other`; the first `labels.max_pairs` distinct pairs (default 64), then `other`/`other`";
    Inner: std::sync::Arc<str> = "tap names (the outer and the inner tap of a joined pair): as `outer`";
    Phase: crate::labels::OverheadPhase = enum, " (boundary overhead)";
    Hop: std::sync::Arc<str> = "hop names of guardrail taps: from the config, or at `tokentap join` from the spans: the first `labels.max_hops` distinct names (default 32, at most 128 bytes, printable), then `other`";
    GuardPhase: crate::correlate::Phase = enum, " (guardrail metrics)";
    Verdict: crate::record::Verdict = enum;
    Result: crate::correlate::Joined = enum;
    Signal: crate::labels::Signal = enum;
    Quantile: crate::labels::Percentile = enum, " (each present only when the window has enough samples: n·(1−q) ≥ 10, so p99 needs 1,000 and p999 10,000; `quantile` is reserved for summaries)";
    Stat: crate::labels::Stat = enum;
    InputKind: crate::labels::InputKind = enum;
    Tenant: std::sync::Arc<str> = "the configured header's value (capped at 64 printable characters) or `k-` + 12 hex digits of the API key's hash; window gauges: the window's top `analysis.top_tenants` tenants by requests, then `other`; tenant counters and histograms: the first `analysis.max_tenants` distinct tenants of the process (default 20, so that instances agree), then `other`; `none` for requests without one";
    Bucket: crate::labels::ContextBucket = enum, " (input tokens)";
    Prefix: crate::labels::PrefixSize = enum, " (prompt characters)";
    Cache: crate::labels::CacheResult = enum;
    Figure: crate::labels::Figure = enum;
    Engine: std::sync::Arc<str> = "engine names from `analysis.engines`";
    ScrapeResult: crate::labels::ScrapeResult = enum, " (engine scrapes)";
    ReloadResult: crate::labels::ReloadResult = enum, " (config reloads)";
    RejectReason: crate::limits::RejectReason = enum, " (refusals)";
    StampReason: crate::labels::StampFallback = enum, " (receive stamps not used)";
    Listener: crate::labels::ListenerName = enum;
    Sink: crate::labels::SinkName = enum;
    InjectResult: crate::inject::InjectResult = enum, " (usage injection)";
    JoinExportResult: crate::labels::JoinExportResult = enum, " (`tokentap join`: OTLP exports)";
    JoinSpanResult: crate::labels::JoinSpanResult = enum, " (`tokentap join`: spans)";
    SloResult: crate::labels::SloResult = enum;
    McpMethod: crate::calls::McpMethod = enum, " (MCP calls)";
    ToolName: std::sync::Arc<str> = "the tool a `tools/call` named: the first `metrics.max_tools` distinct names of the process (default 50, at most 128 printable bytes), then `other`; empty for other methods (and then no OpenTelemetry attribute)";
    ErrorType: crate::calls::McpError = enum, " (MCP calls; empty when it succeeded, and then no OpenTelemetry attribute)";
    McpMessage: crate::calls::MessageCount = enum, " (MCP messages that are no call of their own)";
    System: crate::calls::RetrievalSystem = enum, " (retrieval and plain tool calls)";
    CallOperation: crate::calls::RetrievalOp = enum, " (retrieval and plain tool calls)";
    Window: crate::correlate::compound::Window = enum, " (compound breakdown)";
    Part: crate::correlate::compound::Part = enum, " (compound breakdown; calls per request: all but `residual`)";
    LinkResult: crate::correlate::linker::LinkResult = enum, " (the compound stage's calls)";
}
