//! Bounded label values that no other module owns: each is an enum whose
//! `ALL` and docs come from one list (`label_enum!`). Enums that belong to
//! a domain (outcomes, reasons, verdicts, join results, ...) live with it
//! and are declared the same way.

use crate::names::label_enum;

label_enum! {
    /// `gen_ai.token.type`: which side of a request tokens count.
    pub enum TokenType {
        Input = "input",
        Output = "output",
    }
}

label_enum! {
    /// The label whose values overflowed into `other`.
    pub enum LabelName {
        Model = "model",
        Tenant = "tenant",
        /// A tap name in an attribution family (`tap`, `outer`, `inner`):
        /// from spans at the joiner.
        Tap = "tap",
        /// A guardrail hop name in an attribution family.
        Hop = "hop",
        /// An `outer`/`inner` pair beyond the cap: both become `other`.
        Pair = "pair",
        /// A tool name of an MCP call.
        ToolName = "gen_ai_tool_name",
    }
}

label_enum! {
    /// Which interval a boundary's overhead is the difference of.
    pub enum OverheadPhase {
        /// Request headers at the outer tap to request headers at the inner.
        RequestPath = "request_path",
        Ttfb = "ttfb",
        Ttft = "ttft",
        E2e = "e2e",
    }
}

label_enum! {
    /// An OTLP signal.
    pub enum Signal {
        Traces = "traces",
        Metrics = "metrics",
    }
}

label_enum! {
    /// A percentile of a window's figure.
    pub enum Percentile {
        P50 = "p50",
        P90 = "p90",
        P95 = "p95",
        P99 = "p99",
        P999 = "p999",
    }
}

label_enum! {
    /// A window statistic other than a percentile.
    pub enum Stat {
        Mean = "mean",
        Max = "max",
    }
}

label_enum! {
    /// Which input tokens a rate counts.
    pub enum InputKind {
        All = "all",
        /// Input minus cached tokens.
        Uncached = "uncached",
    }
}

label_enum! {
    /// Input-length bucket of the long-context figures
    /// (`analysis::context::BUCKETS`, in the same order).
    pub enum ContextBucket {
        Under1k = "<1k",
        From1kTo4k = "1k-4k",
        From4kTo16k = "4k-16k",
        From16kTo64k = "16k-64k",
        Over64k = ">64k",
    }
}

label_enum! {
    /// Prompt-prefix length of the prefix-reuse figure (characters).
    pub enum PrefixSize {
        P1k = "1k",
        P4k = "4k",
        P16k = "16k",
    }
}

label_enum! {
    /// Prefix-cache hit or miss.
    pub enum CacheResult {
        Hit = "hit",
        Miss = "miss",
    }
}

label_enum! {
    /// Which figure a window's sample count is of.
    pub enum Figure {
        Requests = "requests",
        Ttft = "ttft",
        Tpot = "tpot",
        Itl = "itl",
    }
}

label_enum! {
    /// An engine scrape's result.
    pub enum ScrapeResult {
        Ok = "ok",
        Error = "error",
    }
}

label_enum! {
    /// A config reload's result.
    pub enum ReloadResult {
        Applied = "applied",
        Unchanged = "unchanged",
        Rejected = "rejected",
    }
}

label_enum! {
    /// What `tokentap join` did with one OTLP trace export.
    pub enum JoinExportResult {
        Ok = "ok",
        /// Does not decode as OTLP (answered 400).
        Malformed = "malformed",
        /// Over `receiver.max_body_bytes`, before or after inflating (413).
        TooLarge = "too_large",
        /// Neither protobuf nor JSON, or not gzip (415).
        Unsupported = "unsupported",
        /// Without the bearer token `receiver.auth` asks for (401, gRPC
        /// UNAUTHENTICATED).
        Unauthorized = "unauthorized",
    }
}

label_enum! {
    /// What `tokentap join` did with one span of an export.
    pub enum JoinSpanResult {
        /// A tap's span: its record went to the correlator.
        Joined = "joined",
        /// Another service's span (no tokentap attributes): ignored.
        Foreign = "foreign",
        /// tokentap's, with a value out of range: ignored.
        Malformed = "malformed",
        /// Not read: over `receiver.max_spans_per_export` or
        /// `max_span_bytes`, or not decodable as a span; the sender is told
        /// in the response's partial success (and does not retry).
        Rejected = "rejected",
    }
}

label_enum! {
    /// Whether a request met every configured SLO.
    pub enum SloResult {
        Met = "met",
        Missed = "missed",
    }
}

label_enum! {
    /// Why a piece's kernel receive stamp was not used and the read time
    /// was (the stamp contradicted the monotonic clock: the wall clock it
    /// is read against stepped between the stamp and the read).
    pub enum StampFallback {
        /// The stamp maps before the request started, or well before the
        /// piece before it: the wall clock stepped forward.
        Earlier = "earlier",
        /// The stamp lies after the read that brought it: the wall clock
        /// stepped back.
        Later = "later",
        /// The stamp is over a minute old.
        TooOld = "too_old",
    }
}

label_enum! {
    /// A listener that is not a tap: the admin endpoints and the joiner's
    /// receivers.
    pub enum ListenerName {
        Admin = "admin",
        OtlpHttp = "otlp_http",
        OtlpGrpc = "otlp_grpc",
    }
}

label_enum! {
    /// Where a tap's finished request goes (`tokentap_proxy::sinks`): each
    /// runs under its own guard, so a panic in one loses only its view.
    pub enum SinkName {
        Metrics = "metrics",
        AccessLog = "access_log",
        /// A record hook the server was built with (tests, the demo).
        Hook = "hook",
        Span = "span",
        /// The live analyses (`/report`, window gauges).
        Analysis = "analysis",
        RecordLog = "record_log",
        /// The mergeable per-tenant and SLO series.
        FleetSeries = "fleet_series",
        Correlator = "correlator",
    }
}
