//! The table's entries for the calls a compound system makes that are not
//! LLM calls, read at `tool` and `retrieval` taps (`crate::calls`): MCP
//! calls under the OpenTelemetry MCP conventions' name where one exists,
//! retrieval and plain HTTP tool calls under `tokentap_*`.

use super::*;
use crate::labels::*;

const MCP_CALL: &str = "each MCP request (JSON-RPC with an `id`) a `tool` tap saw answered, failed or abandoned: one per request of a batch (its first 64; the rest are counted in `tokentap_mcp_messages_total{kind=\"untracked\"}`), whether the answer came as JSON, on the POST's SSE stream or on the session's SSE stream (HTTP+SSE transport)";
const T0: &str = "the tap has the head of the HTTP request that carried the MCP request";

metrics! {
    pub const MCP_OPERATION_DURATION: Metric<McpOperation, Histogram> = Metric::new(Spec {
        name: "mcp_client_operation_duration_seconds",
        otel_name: "mcp.client.operation.duration",
        unit: Unit::Seconds,
        help: "Duration of one MCP request as the tool tap in front of the server saw it: from its HTTP request to its answer (the OpenTelemetry MCP conventions' client operation duration, measured on the wire).",
        buckets: CALL_BUCKETS,
        start: T0,
        end: "the tap has the whole answer: the end of the JSON body, or of the SSE event that carries the JSON-RPC response (on the POST's stream or on the session's stream); for a call that got none, the end of the exchange that should have carried it (`error_type` says why: `transport_error`, `http_error`, `cancelled`, `no_response`, `timeout` after 300 s on the HTTP+SSE transport)",
        observed: MCP_CALL,
        tests: &[Test::Compound],
    });

    pub const MCP_TIME_TO_FIRST_BYTE: Metric<McpMethodLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_mcp_time_to_first_byte_seconds",
        otel_name: "tokentap.mcp.time_to_first_byte",
        unit: Unit::Seconds,
        help: "Time from an MCP request to the server's response head on the same HTTP exchange.",
        buckets: CALL_BUCKETS,
        start: T0,
        end: "the tap has the response head of that HTTP request",
        observed: "each MCP call whose answer came on the exchange that carried it (streamable HTTP); not on the HTTP+SSE transport, where the POST's `202` says nothing of the answer",
        tests: &[Test::Compound],
    });

    pub const MCP_TIME_TO_FIRST_EVENT: Metric<McpMethodLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_mcp_time_to_first_event_seconds",
        otel_name: "tokentap.mcp.time_to_first_event",
        unit: Unit::Seconds,
        help: "Time from an MCP request to the first SSE event about it: a progress notification or the answer itself.",
        buckets: CALL_BUCKETS,
        start: T0,
        end: "the tap has the first SSE event that is the call's answer or a `notifications/progress` with the call's progress token",
        observed: "each MCP call answered over SSE (a POST's stream, or the session's stream)",
        tests: &[Test::Compound],
    });

    pub const MCP_PROGRESS: Metric<McpMethodLabels, Counter> = Metric::new(Spec {
        name: "tokentap_mcp_progress_notifications_total",
        otel_name: "tokentap.mcp.progress_notifications",
        unit: Unit::Messages,
        help: "`notifications/progress` messages the server sent about MCP calls.",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "when a call ends, the progress notifications that carried its progress token",
        tests: &[Test::Compound],
    });

    pub const MCP_REQUEST_SIZE: Metric<McpMethodLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_mcp_request_size_bytes",
        otel_name: "tokentap.mcp.request.size",
        unit: Unit::Bytes,
        help: "Body bytes of the HTTP request that carried an MCP request (the whole batch, for a request in one).",
        buckets: BYTES_BUCKETS,
        start: "—",
        end: "—",
        observed: MCP_CALL,
        tests: &[Test::Compound],
    });

    pub const MCP_RESPONSE_SIZE: Metric<McpMethodLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_mcp_response_size_bytes",
        otel_name: "tokentap.mcp.response.size",
        unit: Unit::Bytes,
        help: "Bytes of an MCP call's answer: the JSON body, or the SSE event that carried it (on a shared stream, that event only).",
        buckets: BYTES_BUCKETS,
        start: "—",
        end: "—",
        observed: "each MCP call that got an answer",
        tests: &[Test::Compound],
    });

    pub const MCP_MESSAGES: Metric<McpMessages, Counter> = Metric::new(Spec {
        name: "tokentap_mcp_messages_total",
        otel_name: "tokentap.mcp.messages",
        unit: Unit::Messages,
        help: "MCP messages a tool tap forwarded that are no call of its own (notifications, the server's requests and the client's answers to them), or that it could not place (an answer to no request it holds, JSON that is no JSON-RPC, requests past a batch's first 64, calls dropped from the full pending table).",
        buckets: &[],
        start: "—",
        end: "—",
        observed: "each such message, when the tap reads it; every message is forwarded unchanged",
        tests: &[],
    });

    pub const CALL_DURATION: Metric<CallOutcome, Histogram> = Metric::new(Spec {
        name: "tokentap_call_duration_seconds",
        otel_name: "tokentap.call.duration",
        unit: Unit::Seconds,
        help: "Duration of one retrieval call (vector search, rerank, embeddings) or plain HTTP tool call, by service, operation and outcome.",
        buckets: CALL_BUCKETS,
        start: "the tap has the request head",
        end: "the tap has the whole response (or the exchange ended without one)",
        observed: "each HTTP exchange at a `retrieval` tap, and each exchange at a `tool` tap that carries no MCP (`system=\"http\"`, `operation=\"other\"`)",
        tests: &[Test::Compound],
    });

    pub const RETRIEVAL_TOP_K: Metric<CallLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_retrieval_top_k",
        otel_name: "tokentap.retrieval.top_k",
        unit: Unit::Results,
        help: "Results a retrieval call asked for per query (`n_results`, `limit`, `top_k`, `topK`, `top_n`, `k`, `size`), as sent or the API's documented default.",
        buckets: COUNT_BUCKETS,
        start: "—",
        end: "—",
        observed: "each search or rerank call whose request could be read",
        tests: &[Test::Compound],
    });

    pub const RETRIEVAL_RESULTS: Metric<CallLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_retrieval_results",
        otel_name: "tokentap.retrieval.results",
        unit: Unit::Results,
        help: "Results a retrieval call returned, over all its queries (hits, documents, reranked items, embeddings).",
        buckets: COUNT_BUCKETS,
        start: "—",
        end: "—",
        observed: "each successful call whose answer could be read (JSON up to the tap's cap)",
        tests: &[Test::Compound],
    });

    pub const RETRIEVAL_INPUTS: Metric<CallLabels, Histogram> = Metric::new(Spec {
        name: "tokentap_retrieval_inputs",
        otel_name: "tokentap.retrieval.inputs",
        unit: Unit::Inputs,
        help: "Inputs of one retrieval call: query vectors or texts of a search, documents of a rerank, texts of an embeddings call.",
        buckets: COUNT_BUCKETS,
        start: "—",
        end: "—",
        observed: "each call whose request could be read",
        tests: &[Test::Compound],
    });
}
