//! One span per compound request once its calls settled: where its time
//! went (`tokentap_core::correlate::compound`), as attributes
//! `tokentap.compound.{e2e,ttft}.{llm,tool,retrieval,guardrail,residual}`
//! (seconds), the calls per kind, the loop iterations and the input and
//! output tokens, and how its calls were joined (`tokentap.compound.joined_by`:
//! `trace`, or `links` by the compound stage). Named `compound {tap}`, kind internal, in the request's trace:
//! a child of its parent id (the compound tap's own span when that tap
//! created the trace). A request without a trace gets none: its span could
//! not be found beside it.

use super::{identity, key, SpanPipeline};
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::time::SystemTime;
use tokentap_core::correlate::compound::{Breakdown, Part, Window};

fn int(n: usize) -> Value {
    Value::I64(i64::try_from(n).unwrap_or(i64::MAX))
}

impl SpanPipeline {
    /// Hands one compound breakdown over; never waits. `started_at`: the
    /// wall-clock time of the compound request's `t0`.
    pub fn record_breakdown(&self, b: &Breakdown, started_at: SystemTime) {
        if let Some(span) = self.breakdown_span(b, started_at) {
            self.send(span);
        }
    }

    pub fn breakdown_span(&self, b: &Breakdown, started_at: SystemTime) -> Option<SpanData> {
        let trace = b.trace?;
        let (trace_id, span_id, parent, remote) = identity(Some(trace), false)?;
        let mut attrs = vec![
            KeyValue::new(key::TAP, b.tap.to_string()),
            KeyValue::new(key::BOUNDARY, "compound"),
            KeyValue::new(
                key::COMPOUND_JOINED_BY,
                if b.by_links { "links" } else { "trace" },
            ),
        ];
        if let Some(id) = &b.request_id {
            attrs.push(KeyValue::new(key::REQUEST_ID, id.to_string()));
        }
        for (window, parts) in [(Window::E2e, Some(b.e2e)), (Window::Ttft, b.ttft)] {
            let Some(parts) = parts else { continue };
            for part in Part::ALL {
                attrs.push(KeyValue::new(
                    format!("tokentap.compound.{}.{}", window.as_str(), part.as_str()),
                    parts.get(part).as_secs_f64(),
                ));
            }
        }
        let calls = [
            ("llm", b.llm_calls.len()),
            ("tool", b.tool_calls),
            ("retrieval", b.retrieval_calls),
            ("guardrail", b.guardrail_calls),
        ];
        for (kind, n) in calls {
            attrs.push(KeyValue::new(
                format!("tokentap.compound.calls.{kind}"),
                int(n),
            ));
        }
        attrs.push(KeyValue::new(
            "tokentap.compound.iterations",
            int(b.iterations.len()),
        ));
        let tokens = [
            ("gen_ai.usage.input_tokens", b.input_tokens),
            ("gen_ai.usage.output_tokens", b.output_tokens),
        ];
        for (k, t) in tokens {
            if let Some(t) = t {
                attrs.push(KeyValue::new(
                    k,
                    Value::I64(i64::try_from(t).unwrap_or(i64::MAX)),
                ));
            }
        }
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
            span_kind: SpanKind::Internal,
            name: format!("compound {}", b.tap).into(),
            start_time: started_at,
            end_time: started_at + b.e2e.total(),
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        })
    }
}
