//! The calls a `tool` or `retrieval` tap sees (MCP requests, vector
//! searches, reranks, plain HTTP tools), from the request's `CallMeter`
//! to the metrics and the spans.
//!
//! Owns: the tap's shared call state (`CallTap`: the pending table of the
//! HTTP+SSE transport, the sinks a call goes to) and `CallOut`, the
//! `CallSink` a request's `CallMeter` writes to. A call is emitted as soon
//! as it completes, which may be on another request than the one that
//! carried it (the older transport answers on the session's stream). Each
//! sink runs under its own guard, as a finished request's do.
//!
//! Must not touch: what is forwarded (the hooks forward; the meter only
//! reads), content (the core hands over names, counts and hashes only).

mod record;

use crate::metrics::Metrics;
use crate::sinks::SinkPanics;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokentap_core::calls::{Call, CallProtocol, CallSink, MessageCount, OnPending, Pending};
use tokentap_core::correlate::Correlator;
use tokentap_core::labels::{McpMessages, SinkName, TapLabels};
use tokentap_core::tap::Boundary;
use tokentap_telemetry::otlp::spans::SpanPipeline;

/// A tool or retrieval tap's call state, shared by its requests.
pub struct CallTap {
    pub protocol: CallProtocol,
    labels: TapLabels,
    metrics: Arc<Metrics>,
    spans: Option<Arc<SpanPipeline>>,
    /// This process's correlator: a call is one record of its request's
    /// group (a compound request's breakdown counts it).
    correlator: Option<Arc<Correlator>>,
    /// MCP calls answered on another exchange (HTTP+SSE transport).
    pending: Mutex<Pending>,
    panics: SinkPanics,
}

impl CallTap {
    /// Whether anything joins this tap's calls to their requests (the
    /// process's correlator, or the spans a joiner reads).
    pub fn joins(&self) -> bool {
        self.correlator.is_some() || self.spans.is_some()
    }

    /// The call state of a tap of `labels.boundary`, if it reads calls.
    pub fn for_tap(
        labels: &TapLabels,
        metrics: &Arc<Metrics>,
        spans: Option<Arc<SpanPipeline>>,
        correlator: Option<Arc<Correlator>>,
    ) -> Option<Arc<CallTap>> {
        let protocol = match labels.boundary {
            Boundary::Tool => CallProtocol::Tool,
            Boundary::Retrieval => CallProtocol::Retrieval,
            _ => return None,
        };
        record::touch(metrics, labels, protocol);
        Some(Arc::new(CallTap {
            protocol,
            labels: labels.clone(),
            metrics: metrics.clone(),
            spans,
            correlator,
            pending: Mutex::new(Pending::default()),
            panics: SinkPanics::new(metrics.clone(), labels.clone()),
        }))
    }

    /// Reading an exchange's calls panicked: counted as `decoder_panic`.
    pub fn panicked(&self) {
        let labels = tokentap_core::labels::Unmeasured {
            tap: self.labels.clone(),
            reason: tokentap_core::record::MeasureError::DecoderPanic,
        };
        self.metrics
            .add(&tokentap_core::table::MEASUREMENT_ERRORS, &labels, 1);
        tracing::error!(tap = %self.labels.tap, "reading calls panicked; this exchange's calls are not measured");
    }

    /// Hands one finished call to every sink, each under its guard.
    fn emit(&self, call: &Call, fault: Option<SinkName>) {
        let tool = self.tool_label(call);
        self.panics.guard(SinkName::Metrics, fault, || {
            record::call(&self.metrics, &self.labels, &tool, call);
        });
        if let Some(spans) = &self.spans {
            self.panics.guard(SinkName::Span, fault, || {
                spans.record_call(&self.labels, &tool, call);
            });
        }
        if let Some(c) = &self.correlator {
            self.panics.guard(SinkName::Correlator, fault, || {
                c.submit(record::tap_record(&self.labels, call), Instant::now());
            });
        }
    }

    /// The bounded `gen_ai_tool_name` value of a call (empty: none).
    fn tool_label(&self, call: &Call) -> Arc<str> {
        match &call.kind {
            tokentap_core::calls::CallKind::Mcp(m) => {
                self.metrics.tool_label(m.tool.as_deref()).value
            }
            _ => Arc::from(""),
        }
    }
}

/// What one request's `CallMeter` writes to.
pub struct CallOut<'a> {
    pub tap: &'a CallTap,
    /// A sink to panic in (test builds: `x-tokentap-fault: sink:<name>`).
    pub fault: Option<SinkName>,
}

impl CallSink for CallOut<'_> {
    fn call(&mut self, call: Call) {
        self.tap.emit(&call, self.fault);
    }

    fn pending(&mut self, f: &mut OnPending<'_>) {
        // Calls completed under the lock are emitted after it.
        let mut done = Vec::new();
        if let Ok(mut table) = self.tap.pending.lock() {
            let mut collect = |c: Call| done.push(c);
            table.expire(Instant::now(), &mut collect);
            f(&mut table, &mut collect);
        }
        for c in &done {
            self.tap.emit(c, self.fault);
        }
    }

    fn message(&mut self, kind: MessageCount, n: u64) {
        if n == 0 {
            return;
        }
        let labels = McpMessages {
            tap: self.tap.labels.clone(),
            kind,
        };
        self.tap
            .metrics
            .add(&tokentap_core::table::MCP_MESSAGES, &labels, n);
    }
}
