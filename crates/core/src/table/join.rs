//! The table's entries about `tokentap join` itself: what it received.
//! (What it concludes is in `attribution`: the same families as a
//! process's own correlator.)

use super::*;
use crate::labels::*;

metrics! {
    pub const JOIN_EXPORTS: Metric<JoinExport, Counter> = Metric::new(Spec {
        name: "tokentap_join_exports_total",
        otel_name: "tokentap.join.exports",
            unit: Unit::Requests,
        help: "OTLP trace exports the joiner received (gRPC or HTTP), by result: ok, malformed (400, or gRPC INVALID_ARGUMENT), too_large (413; receiver.max_body_bytes, before or after inflating), unsupported (415: neither protobuf nor JSON, or a content encoding other than gzip).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each export, when its body has been read",
        tests: &[Test::GuardrailOverhead],
    });

    pub const JOIN_SPANS: Metric<JoinSpan, Counter> = Metric::new(Spec {
        name: "tokentap_join_spans_total",
        otel_name: "tokentap.join.spans",
            unit: Unit::Info,
        help: "Spans in the joiner's accepted exports, by result: joined (a tap's request span, handed to the correlator; see tokentap_correlation_total for what became of it), foreign (another service's span: ignored), malformed (tokentap's, with a value out of range: ignored).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each span of an accepted export",
        tests: &[Test::GuardrailOverhead],
    });
}
