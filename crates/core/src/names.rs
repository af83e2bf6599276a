//! What makes a value a label value, and the label names: the leaf every
//! module that defines a bounded enum uses (`label_enum!`), so that those
//! modules and `labels` (which names their enums as label kinds) do not
//! import each other.
//!
//! Owns: `LabelValue`, `LabelEnum`, `label_enum!`, and `Label`, the label
//! names of the metric table with their OpenTelemetry attribute keys (the
//! values each label takes, and their Rust types, are `crate::labels`).
//! Must not touch: any other module of the crate (it is the leaf).

use std::sync::Arc;

/// One label value as it appears in a series.
pub trait LabelValue {
    fn label_value(&self) -> &str;
}

/// A value type with a closed list of values (an enum): the docs list them.
pub trait LabelEnum: LabelValue + Sized + 'static {
    fn values() -> &'static [Self];
}

impl LabelValue for Arc<str> {
    fn label_value(&self) -> &str {
        self
    }
}

impl LabelValue for &'static str {
    fn label_value(&self) -> &str {
        self
    }
}

impl LabelValue for bool {
    fn label_value(&self) -> &str {
        if *self {
            "true"
        } else {
            "false"
        }
    }
}

/// A bounded enum with its label values, `ALL` (every variant, in order)
/// and `as_str`, from one list: a new variant is in `ALL` and in the docs
/// without anyone remembering to add it.
macro_rules! label_enum {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vm:meta])* $variant:ident = $s:literal ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vm])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; <[&str]>::len(&[$(stringify!($variant)),+])] =
                [$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $s ),+
                }
            }

            /// The value whose label is `s`.
            pub fn from_label(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl $crate::names::LabelValue for $name {
            fn label_value(&self) -> &str {
                self.as_str()
            }
        }

        impl $crate::names::LabelEnum for $name {
            fn values() -> &'static [Self] {
                &Self::ALL
            }
        }
    };
}
pub(crate) use label_enum;

/// A label name. Every value of every label is bounded (see `docs/metrics.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Tap,
    Boundary,
    Model,
    Operation,
    Stream,
    Outcome,
    TokenType,
    Source,
    Reason,
    Label,
    Version,
    Outer,
    Inner,
    /// Overhead phase.
    Phase,
    Hop,
    /// Guardrail phase (the same label name, other values).
    GuardPhase,
    Verdict,
    Result,
    Signal,
    Quantile,
    Stat,
    InputKind,
    Tenant,
    Bucket,
    Prefix,
    Cache,
    Figure,
    Engine,
    /// An engine scrape's result (the same label name as `Result`, other values).
    ScrapeResult,
    /// A config reload's result (the same label name, other values).
    ReloadResult,
    /// Why tokentap refused a request or connection (the same label name
    /// as `Reason`, other values).
    RejectReason,
    /// Why a receive stamp was not used (the same label name as `Reason`,
    /// other values).
    StampReason,
    /// A listener that is not a tap.
    Listener,
    /// Where a finished request goes.
    Sink,
    /// What usage injection did with a request (the same label name as
    /// `Result`, other values).
    InjectResult,
    /// What the joiner did with an OTLP export (the same label name as
    /// `Result`, other values).
    JoinExportResult,
    /// What the joiner did with a span (the same name, other values).
    JoinSpanResult,
    /// Whether a request met the SLOs (the same name, other values).
    SloResult,
    /// An MCP request's method.
    McpMethod,
    /// The tool a `tools/call` named (empty for other methods).
    ToolName,
    /// How an MCP call ended (empty when it succeeded).
    ErrorType,
    /// MCP messages that are no call (the same name as `InputKind`,
    /// other values).
    McpMessage,
    /// The service a retrieval or tool tap's call went to.
    System,
    /// What a retrieval call did (the same name as `Operation`, other
    /// values).
    CallOperation,
    /// Which figure of a compound request is split.
    Window,
    /// What a slice of a compound request's time went to.
    Part,
    /// What the compound stage did with a call (the same name as
    /// `Result`, other values).
    LinkResult,
}

impl Label {
    /// The OpenTelemetry attribute key of this label (GenAI conventions where
    /// they name one; `tokentap.*` otherwise).
    pub fn otel_key(self) -> &'static str {
        match self {
            Label::Tap => "tokentap.tap",
            Label::Boundary => "tokentap.boundary",
            Label::Model => "gen_ai.request.model",
            Label::Operation => "gen_ai.operation.name",
            Label::Stream => "gen_ai.request.stream",
            Label::Outcome => "tokentap.outcome",
            Label::TokenType => "gen_ai.token.type",
            Label::Source => "tokentap.token.source",
            Label::Reason | Label::RejectReason | Label::StampReason => "tokentap.reason",
            Label::Listener => "tokentap.listener",
            Label::Sink => "tokentap.sink",
            Label::Label => "tokentap.label",
            Label::Version => "tokentap.version",
            Label::Outer => "tokentap.outer",
            Label::Inner => "tokentap.inner",
            Label::Phase | Label::GuardPhase => "tokentap.phase",
            Label::Hop => "tokentap.hop",
            Label::Verdict => "tokentap.verdict",
            Label::Result => "tokentap.result",
            Label::Signal => "tokentap.signal",
            Label::Quantile => "tokentap.percentile",
            Label::Stat => "tokentap.stat",
            Label::InputKind => "tokentap.input.kind",
            Label::Tenant => "tokentap.tenant",
            Label::Bucket => "tokentap.input.bucket",
            Label::Prefix => "tokentap.prefix",
            Label::Cache => "tokentap.cache",
            Label::Figure => "tokentap.figure",
            Label::Engine => "tokentap.engine",
            Label::ScrapeResult
            | Label::ReloadResult
            | Label::InjectResult
            | Label::JoinExportResult
            | Label::JoinSpanResult
            | Label::SloResult
            | Label::LinkResult => "tokentap.result",
            Label::McpMethod => "mcp.method.name",
            Label::ToolName => "gen_ai.tool.name",
            Label::ErrorType => "error.type",
            Label::McpMessage => "tokentap.mcp.message",
            Label::System => "tokentap.call.system",
            Label::CallOperation => "tokentap.call.operation",
            Label::Window => "tokentap.window",
            Label::Part => "tokentap.part",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Label::Tap => "tap",
            Label::Boundary => "boundary",
            Label::Model => "model",
            Label::Operation => "operation",
            Label::Stream => "stream",
            Label::Outcome => "outcome",
            Label::TokenType => "token_type",
            Label::Source => "source",
            Label::Reason | Label::RejectReason | Label::StampReason => "reason",
            Label::Listener => "listener",
            Label::Sink => "sink",
            Label::Label => "label",
            Label::Version => "version",
            Label::Outer => "outer",
            Label::Inner => "inner",
            Label::Phase | Label::GuardPhase => "phase",
            Label::Hop => "hop",
            Label::Verdict => "verdict",
            Label::Result
            | Label::ScrapeResult
            | Label::ReloadResult
            | Label::InjectResult
            | Label::JoinExportResult
            | Label::JoinSpanResult
            | Label::SloResult
            | Label::LinkResult => "result",
            Label::Signal => "signal",
            Label::Quantile => "percentile",
            Label::Stat => "stat",
            Label::InputKind => "kind",
            Label::Tenant => "tenant",
            Label::Bucket => "bucket",
            Label::Prefix => "prefix",
            Label::Cache => "cache",
            Label::Figure => "figure",
            Label::Engine => "engine",
            Label::McpMethod => "mcp_method_name",
            Label::ToolName => "gen_ai_tool_name",
            Label::ErrorType => "error_type",
            Label::McpMessage => "kind",
            Label::System => "system",
            Label::CallOperation => "operation",
            Label::Window => "window",
            Label::Part => "part",
        }
    }
}
