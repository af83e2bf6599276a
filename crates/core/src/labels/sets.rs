//! The label set of every metric family (see `crate::table` for which
//! family takes which). Field names are the label names; each field's type
//! comes from its label kind.

use super::label_set;

label_set! {
    /// A tap's own labels; also the labels of per-tap gauges and counters.
    pub struct TapLabels { tap: Tap, boundary: Boundary }
}

label_set! {
    /// Per-request histograms and token counters.
    pub struct PerModel { ..tap: TapLabels, model: Model, operation: Operation }
}

label_set! {
    /// Time to first byte (streaming or not).
    pub struct PerModelStream { ..base: PerModel, stream: Stream }
}

label_set! {
    /// Every request, by how it ended.
    pub struct PerRequest { ..base: PerModelStream, outcome: Outcome }
}

label_set! {
    /// Token counts per request, by side.
    pub struct TokenUsage { ..base: PerModel, token_type: TokenType }
}

label_set! {
    /// Output tokens, by where the count came from.
    pub struct OutputTokens { ..base: PerModel, source: Source }
}

label_set! {
    /// Requests that could not be measured, by reason.
    pub struct Unmeasured { ..tap: TapLabels, reason: Reason }
}

label_set! {
    /// Refused requests and connections, by reason.
    pub struct Rejected { ..tap: TapLabels, reason: RejectReason }
}

label_set! {
    /// Receive stamps not used, by why.
    pub struct StampFallbacks { ..tap: TapLabels, reason: StampReason }
}

label_set! {
    /// What usage injection did.
    pub struct Injection { ..tap: TapLabels, result: InjectResult }
}

label_set! {
    /// A label value that overflowed into `other`.
    pub struct Overflow { label: Label }
}

label_set! {
    /// The build.
    pub struct Build { version: Version }
}

label_set! {
    /// A joined pair of taps, by interval.
    pub struct Overhead { outer: Outer, inner: Inner, phase: Phase }
}

label_set! {
    /// A joined pair of taps (outer contains inner).
    pub struct Pair { outer: Outer, inner: Inner }
}

label_set! {
    /// A guardrail hop's calls, by phase.
    pub struct GuardHop { hop: Hop, phase: GuardPhase }
}

label_set! {
    /// A guardrail hop's calls, by phase and verdict.
    pub struct GuardVerdict { hop: Hop, phase: GuardPhase, verdict: Verdict }
}

label_set! {
    /// Guardrail time a request's owner tap exposed, by phase.
    pub struct GuardExposed { tap: Tap, phase: GuardPhase }
}

label_set! {
    /// How records were joined.
    pub struct Correlation { result: Result }
}

label_set! {
    /// An OTLP signal.
    pub struct OtlpSignal { signal: Signal }
}

label_set! {
    /// A config reload's result.
    pub struct Reload { result: ReloadResult }
}

label_set! {
    /// No labels (one series).
    pub struct NoLabels {}
}

label_set! {
    /// A window input-token rate.
    pub struct TapInput { ..tap: TapLabels, kind: InputKind }
}

label_set! {
    /// A window statistic.
    pub struct TapStat { ..tap: TapLabels, stat: Stat }
}

label_set! {
    /// A window percentile.
    pub struct TapPercentile { ..tap: TapLabels, percentile: Quantile }
}

label_set! {
    /// A window's sample count of one figure.
    pub struct TapFigure { ..tap: TapLabels, figure: Figure }
}

label_set! {
    /// A window figure per tenant.
    pub struct TapTenant { ..tap: TapLabels, tenant: Tenant }
}

label_set! {
    /// A window figure for hits or misses.
    pub struct TapCache { ..tap: TapLabels, cache: Cache }
}

label_set! {
    /// A window figure per prompt-prefix length.
    pub struct TapPrefix { ..tap: TapLabels, prefix: Prefix }
}

label_set! {
    /// A window figure per input-length bucket.
    pub struct TapBucket { ..tap: TapLabels, bucket: Bucket }
}

label_set! {
    /// An engine's readings.
    pub struct Engine { engine: Engine }
}

label_set! {
    /// An engine's scrapes, by result.
    pub struct EngineScrape { engine: Engine, result: ScrapeResult }
}

impl TapLabels {
    /// The same tap with a model and operation.
    pub fn per_model(
        &self,
        model: &std::sync::Arc<str>,
        operation: crate::decode::Operation,
    ) -> PerModel {
        PerModel {
            tap: self.clone(),
            model: model.clone(),
            operation,
        }
    }
}

label_set! {
    /// The joiner's OTLP exports, by result.
    pub struct JoinExport { result: JoinExportResult }
}

label_set! {
    /// The joiner's spans, by result.
    pub struct JoinSpan { result: JoinSpanResult }
}

label_set! {
    /// A tap's requests by tenant (mergeable across instances).
    pub struct TenantRequests { ..tap: TapLabels, tenant: Tenant }
}

label_set! {
    /// A tap's requests judged against the SLOs.
    pub struct SloJudged { ..tap: TapLabels, result: SloResult }
}

impl PerModel {
    /// These series, streamed or not.
    pub fn stream(&self, stream: bool) -> PerModelStream {
        PerModelStream {
            base: self.clone(),
            stream,
        }
    }

    /// These series' tokens of one side.
    pub fn tokens(&self, token_type: crate::labels::TokenType) -> TokenUsage {
        TokenUsage {
            base: self.clone(),
            token_type,
        }
    }

    /// These series' output tokens, by where the count came from.
    pub fn source(&self, source: crate::record::TokenSource) -> OutputTokens {
        OutputTokens {
            base: self.clone(),
            source,
        }
    }
}

impl PerModelStream {
    /// These series' requests that ended so.
    pub fn outcome(&self, outcome: crate::record::Outcome) -> PerRequest {
        PerRequest {
            base: self.clone(),
            outcome,
        }
    }
}

label_set! {
    /// A listener that is not a tap.
    pub struct ListenerLabels { listener: Listener }
}

label_set! {
    /// A listener's refusals, by reason.
    pub struct ListenerRefusals { ..listener: ListenerLabels, reason: RejectReason }
}

label_set! {
    /// A sink's panics, per tap.
    pub struct SinkPanicLabels { ..tap: TapLabels, sink: Sink }
}

label_set! {
    /// One MCP call, by method, tool and how it ended.
    pub struct McpOperation { ..tap: TapLabels, mcp_method_name: McpMethod, gen_ai_tool_name: ToolName, error_type: ErrorType }
}

label_set! {
    /// MCP calls by method.
    pub struct McpMethodLabels { ..tap: TapLabels, mcp_method_name: McpMethod }
}

label_set! {
    /// MCP messages that are no call, by kind.
    pub struct McpMessages { ..tap: TapLabels, kind: McpMessage }
}

label_set! {
    /// A retrieval or plain tool call, by service and operation.
    pub struct CallLabels { ..tap: TapLabels, system: System, operation: CallOperation }
}

label_set! {
    /// A retrieval or plain tool call, by how it ended.
    pub struct CallOutcome { ..base: CallLabels, outcome: Outcome }
}

label_set! {
    /// A compound request's figure, by part.
    pub struct CompoundPart { tap: Tap, window: Window, part: Part }
}

label_set! {
    /// A compound request's calls of one kind.
    pub struct CompoundCalls { tap: Tap, part: Part }
}

label_set! {
    /// A compound tap (attribution families).
    pub struct CompoundTap { tap: Tap }
}

label_set! {
    /// What the compound stage did with calls.
    pub struct CompoundLinks { result: LinkResult }
}

label_set! {
    /// A compound request's tokens, by side.
    pub struct CompoundTokens { tap: Tap, token_type: TokenType }
}
