//! One finished call into the metric families of `tokentap_core::table`'s
//! `calls` file. Observes only; every definition is the table's.

use crate::metrics::Metrics;
use std::sync::Arc;
use tokentap_core::calls::{
    Call, CallKind, CallProtocol, MessageCount, RetrievalOp, RetrievalSystem,
};
use tokentap_core::correlate::{TapRecord, Verdict};
use tokentap_core::labels::{
    CallLabels, CallOutcome, McpMessages, McpMethodLabels, McpOperation, TapLabels,
};
use tokentap_core::record::Outcome;
use tokentap_core::table;

/// Creates a tool tap's message counters at 0.
pub fn touch(metrics: &Metrics, tap: &TapLabels, protocol: CallProtocol) {
    if protocol != CallProtocol::Tool {
        return;
    }
    for kind in MessageCount::ALL {
        let labels = McpMessages {
            tap: tap.clone(),
            kind,
        };
        metrics.touch(&table::MCP_MESSAGES, &labels);
    }
}

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// Observes one call; `tool` is its bounded tool-name label.
pub fn call(metrics: &Metrics, tap: &TapLabels, tool: &Arc<str>, c: &Call) {
    match &c.kind {
        CallKind::Mcp(m) => {
            let op = McpOperation {
                tap: tap.clone(),
                mcp_method_name: m.method,
                gen_ai_tool_name: tool.clone(),
                error_type: m.error,
            };
            metrics.observe(&table::MCP_OPERATION_DURATION, &op, secs(c.duration));
            let by_method = McpMethodLabels {
                tap: tap.clone(),
                mcp_method_name: m.method,
            };
            if let Some(t) = c.ttfb {
                metrics.observe(&table::MCP_TIME_TO_FIRST_BYTE, &by_method, secs(t));
            }
            if let Some(t) = c.first_event {
                metrics.observe(&table::MCP_TIME_TO_FIRST_EVENT, &by_method, secs(t));
            }
            if m.progress > 0 {
                metrics.add(&table::MCP_PROGRESS, &by_method, u64::from(m.progress));
            }
            metrics.observe(&table::MCP_REQUEST_SIZE, &by_method, c.request_bytes as f64);
            if m.error.is_answered() {
                metrics.observe(
                    &table::MCP_RESPONSE_SIZE,
                    &by_method,
                    c.response_bytes as f64,
                );
            }
        }
        CallKind::Retrieval(r) => {
            let labels = CallLabels {
                tap: tap.clone(),
                system: r.system,
                operation: r.operation,
            };
            if let Some(k) = r.top_k {
                metrics.observe(&table::RETRIEVAL_TOP_K, &labels, k as f64);
            }
            if let Some(n) = r.inputs {
                metrics.observe(&table::RETRIEVAL_INPUTS, &labels, n as f64);
            }
            if let (Some(n), Outcome::Ok) = (r.results, r.outcome) {
                metrics.observe(&table::RETRIEVAL_RESULTS, &labels, n as f64);
            }
            let labels = CallOutcome {
                base: labels,
                outcome: r.outcome,
            };
            metrics.observe(&table::CALL_DURATION, &labels, secs(c.duration));
        }
        CallKind::Http { outcome, .. } => {
            let labels = CallOutcome {
                base: CallLabels {
                    tap: tap.clone(),
                    system: RetrievalSystem::Http,
                    operation: RetrievalOp::Other,
                },
                outcome: *outcome,
            };
            metrics.observe(&table::CALL_DURATION, &labels, secs(c.duration));
        }
    }
}

/// A call as the correlator keeps it: one record of its request's group.
pub fn tap_record(tap: &TapLabels, c: &Call) -> TapRecord {
    let outcome = match &c.kind {
        CallKind::Mcp(m) if m.error.is_ok() => Outcome::Ok,
        CallKind::Mcp(_) => Outcome::UpstreamError,
        CallKind::Retrieval(r) => r.outcome,
        CallKind::Http { outcome, .. } => *outcome,
    };
    TapRecord {
        tap: tap.tap.clone(),
        boundary: tap.boundary,
        hop: None,
        trace: c.trace,
        fingerprint: None,
        request_id: c.request_id.as_deref().map(Arc::from),
        t0: c.t0,
        ttfb: c.ttfb,
        ttft: None,
        e2e: c.duration,
        events: Vec::new(),
        events_truncated: false,
        output_tokens: None,
        input_tokens: None,
        outcome,
        verdict: Verdict::Unknown,
        links: c.links.clone(),
    }
}
