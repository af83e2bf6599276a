//! One span per call at a `tool` or `retrieval` tap: an MCP request under
//! the OpenTelemetry MCP span conventions (name `{mcp.method.name}
//! {gen_ai.tool.name}`, `mcp.method.name`, `gen_ai.tool.name`,
//! `gen_ai.operation.name = execute_tool` for `tools/call`, `error.type`,
//! `rpc.response.status_code`), a retrieval call as `{operation}
//! {system}` with what it asked and returned (counts), a plain HTTP tool
//! call as `tool_call {tap}`. Kind: client (the tap stands on the caller's
//! side of the service). Never arguments, results, queries or documents.
//!
//! Identity: as a request's span with an incoming trace (the call's
//! `traceparent`, from the HTTP header or MCP's `params._meta`): a child
//! of its parent, or a trace of its own without one.

use super::{identity, key, SpanPipeline};
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::time::Duration;
use tokentap_core::calls::{Call, CallKind, McpMethod};
use tokentap_core::labels::TapLabels;
use tokentap_core::record::Outcome;

fn int(n: u64) -> Value {
    Value::I64(i64::try_from(n).unwrap_or(i64::MAX))
}

fn secs(d: Duration) -> Value {
    Value::F64(d.as_secs_f64())
}

impl SpanPipeline {
    /// Hands one finished call over; never waits. `tool` is the bounded
    /// tool-name label (the span's name uses it; the attribute carries the
    /// name the request gave, printable and at most 128 bytes).
    pub fn record_call(&self, tap: &TapLabels, tool: &str, c: &Call) {
        if let Some(span) = self.call_span(tap, tool, c) {
            self.send(span);
        }
    }

    /// Builds a call's span; `None` when its trace is not sampled.
    pub fn call_span(&self, tap: &TapLabels, tool: &str, c: &Call) -> Option<SpanData> {
        let (trace_id, span_id, parent, remote) = identity(c.trace, false)?;
        let mut attrs = vec![
            KeyValue::new(key::TAP, tap.tap.to_string()),
            KeyValue::new(key::BOUNDARY, tap.boundary.as_str()),
            KeyValue::new(key::E2E, secs(c.duration)),
            KeyValue::new("http.request.body.size", int(c.request_bytes)),
            KeyValue::new("http.response.body.size", int(c.response_bytes)),
        ];
        if let Some(t) = c.ttfb {
            attrs.push(KeyValue::new(key::TTFB, secs(t)));
        }
        if let Some(t) = c.first_event {
            attrs.push(KeyValue::new("tokentap.first_event", secs(t)));
        }
        if let Some(id) = &c.request_id {
            attrs.push(KeyValue::new(key::REQUEST_ID, id.clone()));
        }
        super::link_attributes(&c.links, &mut attrs);
        let (name, failed) = match &c.kind {
            CallKind::Mcp(m) => {
                attrs.push(KeyValue::new(key::CALL_KIND, "mcp"));
                attrs.push(KeyValue::new("mcp.method.name", m.method.as_str()));
                attrs.push(KeyValue::new(
                    "tokentap.mcp.transport",
                    m.transport.as_str(),
                ));
                attrs.push(KeyValue::new("network.transport", "tcp"));
                attrs.push(KeyValue::new("network.protocol.name", "http"));
                if m.method == McpMethod::ToolsCall {
                    attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                }
                if let Some(t) = &m.tool {
                    attrs.push(KeyValue::new("gen_ai.tool.name", t.clone()));
                }
                if let Some(code) = m.code {
                    attrs.push(KeyValue::new("rpc.response.status_code", code.to_string()));
                }
                if !m.error.is_ok() {
                    attrs.push(KeyValue::new("error.type", m.error.as_str()));
                }
                if m.progress > 0 {
                    attrs.push(KeyValue::new(
                        "tokentap.mcp.progress_notifications",
                        int(u64::from(m.progress)),
                    ));
                }
                if m.batch {
                    attrs.push(KeyValue::new("tokentap.mcp.batch", true));
                }
                let name = if tool.is_empty() {
                    m.method.as_str().to_string()
                } else {
                    format!("{} {tool}", m.method.as_str())
                };
                (name, !m.error.is_ok())
            }
            CallKind::Retrieval(r) => {
                attrs.push(KeyValue::new(key::CALL_KIND, "retrieval"));
                attrs.push(KeyValue::new("tokentap.call.system", r.system.as_str()));
                attrs.push(KeyValue::new(
                    "tokentap.call.operation",
                    r.operation.as_str(),
                ));
                attrs.push(KeyValue::new(key::OUTCOME, r.outcome.as_str()));
                let counts = [
                    ("tokentap.retrieval.top_k", r.top_k),
                    ("tokentap.retrieval.inputs", r.inputs),
                    ("tokentap.retrieval.results", r.results),
                ];
                for (k, v) in counts {
                    if let Some(v) = v {
                        attrs.push(KeyValue::new(k, int(v)));
                    }
                }
                if let Some(s) = r.status {
                    attrs.push(KeyValue::new("http.response.status_code", i64::from(s)));
                }
                if r.outcome != Outcome::Ok {
                    attrs.push(KeyValue::new("error.type", r.outcome.as_str()));
                }
                let name = format!("{} {}", r.operation.as_str(), r.system.as_str());
                (name, r.outcome != Outcome::Ok)
            }
            CallKind::Http { status, outcome } => {
                attrs.push(KeyValue::new(key::CALL_KIND, "http"));
                attrs.push(KeyValue::new(key::OUTCOME, outcome.as_str()));
                if let Some(s) = status {
                    attrs.push(KeyValue::new("http.response.status_code", i64::from(*s)));
                }
                if *outcome != Outcome::Ok {
                    attrs.push(KeyValue::new("error.type", outcome.as_str()));
                }
                (format!("tool_call {}", tap.tap), *outcome != Outcome::Ok)
            }
        };
        Some(SpanData {
            span_context: SpanContext::new(
                trace_id,
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: remote,
            span_kind: SpanKind::Client,
            name: name.into(),
            start_time: c.started_at,
            end_time: c.started_at + c.duration,
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if failed {
                Status::error("call failed")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        })
    }
}
