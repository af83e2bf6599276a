//! One span per request per tap, following the OpenTelemetry GenAI span
//! conventions, and the bounded pipeline that exports them.
//!
//! Identity: the span's trace is the request's `traceparent` trace. When the
//! request brought one, the span's parent is its parent id (so taps on
//! different machines build one trace) and an unsampled parent means no
//! span; when this tap created it, the span is the root and its id is the
//! created parent id, so inner taps' spans nest under it. Without any trace
//! context the span starts a trace of its own.
//!
//! Name: `{operation} {model}` with the bounded model label (the raw model
//! name, untrusted, is an attribute). Kind: server (the tap receives the
//! request). Content (prompts, completions) is never an attribute.
//!
//! Pipeline: `record` builds the span and `try_send`s it into a bounded
//! queue (full → dropped and counted); a dedicated thread batches and
//! exports through the blocking OTLP/HTTP exporter, counting what the
//! collector accepted and what failed.

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;
use rand::Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_core::correlate::span::{self as span_keys, key};
use tokentap_core::labels::TapLabels;
use tokentap_core::record::{Outcome, RequestRecord};
use tokentap_core::trace::TraceParent;

mod call;
mod compound;

/// How often a partial batch is exported.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// How soon the exporter thread sees a shutdown.
const STOP_CHECK: Duration = Duration::from_millis(20);

pub struct SpanOptions {
    pub queue: usize,
    pub batch: usize,
    /// One span event per token-bearing event, up to this many.
    pub events: Option<usize>,
    /// The first token events' offsets carried as one attribute.
    pub offsets: usize,
    pub providers: HashMap<Arc<str>, Arc<str>>,
    pub exported: Option<IntCounter>,
    pub dropped: Option<IntCounter>,
}

pub struct SpanPipeline {
    tx: SyncSender<SpanData>,
    stop: Arc<AtomicBool>,
    done: Mutex<Option<mpsc::Receiver<()>>>,
    events: Option<usize>,
    offsets: usize,
    providers: HashMap<Arc<str>, Arc<str>>,
    dropped: Option<IntCounter>,
    scope: InstrumentationScope,
}

fn inc(c: &Option<IntCounter>, n: usize) {
    if let Some(c) = c {
        c.inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }
}

impl SpanPipeline {
    pub fn start<E>(
        mut exporter: E,
        resource: Resource,
        o: SpanOptions,
    ) -> std::io::Result<Arc<SpanPipeline>>
    where
        E: SpanExporter + 'static,
    {
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::sync_channel(o.queue.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel();
        let (s, batch, exported, dropped) =
            (stop.clone(), o.batch.max(1), o.exported, o.dropped.clone());
        std::thread::Builder::new()
            .name("tokentap-otlp-spans".into())
            .spawn(move || {
                run(exporter, rx, &s, batch, &exported, &dropped);
                let _ = done_tx.send(());
            })?;
        Ok(Arc::new(SpanPipeline {
            tx,
            stop,
            done: Mutex::new(Some(done_rx)),
            events: o.events,
            offsets: o.offsets,
            providers: o.providers,
            dropped: o.dropped,
            scope: InstrumentationScope::builder("tokentap")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        }))
    }

    /// Hands one finished request over; never waits.
    pub fn record(
        &self,
        tap: &TapLabels,
        hop: Option<&str>,
        model_label: &str,
        r: &RequestRecord,
        offsets: Option<&[u32]>,
    ) {
        if let Some(span) = self.span(tap, hop, model_label, r, offsets) {
            self.send(span);
        }
    }

    /// Queues a span; a full queue drops it, counted.
    fn send(&self, span: SpanData) {
        match self.tx.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => inc(&self.dropped, 1),
        }
    }

    /// Builds the span; `None` when the incoming trace is not sampled.
    pub fn span(
        &self,
        tap: &TapLabels,
        hop: Option<&str>,
        model_label: &str,
        r: &RequestRecord,
        offsets: Option<&[u32]>,
    ) -> Option<SpanData> {
        let (trace_id, span_id, parent, remote) = identity(r.trace, r.trace_created)?;
        let op = r.operation.as_str();
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", op),
            KeyValue::new("gen_ai.request.stream", r.stream),
            KeyValue::new(key::TAP, tap.tap.to_string()),
            KeyValue::new(key::BOUNDARY, tap.boundary.as_str()),
            KeyValue::new(key::OUTCOME, r.outcome.as_str()),
            KeyValue::new(
                key::TRACE_SOURCE,
                match (r.trace, r.trace_created) {
                    (Some(_), true) => "created",
                    (Some(_), false) => "header",
                    (None, _) => "none",
                },
            ),
        ];
        let mut push = |k: &'static str, v: Option<Value>| {
            if let Some(v) = v {
                attrs.push(KeyValue::new(k, v));
            }
        };
        let secs = |d: Option<Duration>| d.map(|d| Value::F64(d.as_secs_f64()));
        let int = |n: Option<u64>| n.map(|n| Value::I64(i64::try_from(n).unwrap_or(i64::MAX)));
        push(
            "gen_ai.provider.name",
            self.providers
                .get(&tap.tap)
                .map(|p| Value::String(p.to_string().into())),
        );
        push(
            "gen_ai.request.model",
            r.request.model.clone().map(|m| Value::String(m.into())),
        );
        push(
            "gen_ai.response.model",
            r.response_model.clone().map(|m| Value::String(m.into())),
        );
        push("gen_ai.request.max_tokens", int(r.request.max_tokens));
        push("gen_ai.usage.input_tokens", int(r.input_tokens));
        push("gen_ai.usage.output_tokens", int(r.output_tokens));
        push("gen_ai.usage.cache_read.input_tokens", int(r.cached_tokens));
        push(
            "gen_ai.usage.reasoning.output_tokens",
            int(r.reasoning_tokens),
        );
        push(
            "gen_ai.response.finish_reasons",
            r.finish_reason
                .map(|f| Value::Array(Array::String(vec![StringValue::from(f.as_str())]))),
        );
        push(key::FIRST_EVENT, secs(r.time_to_first_event));
        push(
            "http.response.status_code",
            r.status.map(|s| Value::I64(i64::from(s))),
        );
        push(key::TTFB, secs(r.ttfb));
        push(key::TTFT, secs(r.ttft));
        push(key::LAST_TOKEN, secs(r.last_token));
        push("tokentap.tpot", secs(r.tpot));
        push("tokentap.itl.max", secs(r.gaps.max));
        push(key::E2E, Some(Value::F64(r.e2e.as_secs_f64())));
        let label = |s: &'static str| Some(Value::String(s.into()));
        push(
            key::OUTPUT_SOURCE,
            r.output_source.and_then(|s| label(s.as_str())),
        );
        push(
            key::INPUT_SOURCE,
            r.input_source.and_then(|s| label(s.as_str())),
        );
        if let Some(source) = r.dialect_source {
            push(key::DIALECT, label(r.dialect.as_str()));
            push(key::DIALECT_SOURCE, label(source.as_str()));
        }
        push(
            key::REQUEST_ID,
            r.request_id.clone().map(|s| Value::String(s.into())),
        );
        // What `tokentap join` needs to join and attribute elsewhere.
        push(key::HOP, hop.map(|h| Value::String(h.to_string().into())));
        push(
            key::FINGERPRINT,
            r.request
                .fingerprint
                .map(|f| Value::String(span_keys::fingerprint_hex(f).into())),
        );
        push(key::VERDICT, r.verdict.and_then(|v| label(v.as_str())));
        push(key::EVENTS, int(Some(u64::from(r.token_events))));
        if let (Some(offsets), n @ 1..) = (offsets, self.offsets) {
            let us: Vec<i64> = offsets.iter().take(n).map(|u| i64::from(*u)).collect();
            attrs.push(KeyValue::new(
                key::EVENT_OFFSETS,
                Value::Array(Array::I64(us)),
            ));
        }
        link_attributes(&r.request.links, &mut attrs);
        let failed = matches!(
            r.outcome,
            Outcome::UpstreamError | Outcome::UpstreamTruncated | Outcome::HttpError
        );
        if r.outcome != Outcome::Ok {
            let error = r.error_type.map_or(r.outcome.as_str(), |e| e.as_str());
            attrs.push(KeyValue::new("error.type", error));
        }
        let mut events = SpanEvents::default();
        if let (Some(cap), Some(offsets)) = (self.events, offsets) {
            for (k, us) in offsets.iter().enumerate().take(cap) {
                let at = r.started_at + Duration::from_micros(u64::from(*us));
                let index = KeyValue::new(
                    "tokentap.token_event.index",
                    i64::try_from(k).unwrap_or(i64::MAX),
                );
                events
                    .events
                    .push(Event::new("gen_ai.token_event", at, vec![index], 0));
            }
            // Offsets are kept up to the cap: the record knows how many there were.
            let emitted = u32::try_from(events.events.len()).unwrap_or(u32::MAX);
            events.dropped_count = r.token_events.saturating_sub(emitted);
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
            span_kind: SpanKind::Server,
            name: format!("{op} {model_label}").into(),
            start_time: r.started_at,
            end_time: r.started_at + r.e2e,
            attributes: attrs,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: if failed {
                Status::error(r.outcome.as_str())
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        })
    }

    /// Stops the exporter thread after it exported what is queued, waiting
    /// until `deadline` at most.
    pub fn shutdown(&self, deadline: Instant) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        let done = self.done.lock().ok().and_then(|mut d| d.take());
        done.is_some_and(|d| {
            d.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .is_ok()
        })
    }
}

/// The link hashes a record carries, as span attributes (for the joiner's
/// compound stage; hashes only, never the text).
pub(crate) fn link_attributes(l: &tokentap_core::links::Links, attrs: &mut Vec<KeyValue>) {
    for (k, h) in [
        (key::LINKS_USERS, &l.users),
        (key::LINKS_CALLS_OUT, &l.calls_out),
        (key::LINKS_CALLS_IN, &l.calls_in),
        (key::LINKS_RESULTS_IN, &l.results_in),
        (key::LINKS_RESULTS_OUT, &l.results_out),
    ] {
        if let Some(text) = span_keys::hashes_text(h) {
            attrs.push(KeyValue::new(k, text));
        }
    }
}

/// A span's trace id, own id, parent id and whether the parent is remote,
/// from the request's trace context (see the module docs); `None` when
/// the incoming trace is not sampled.
fn identity(trace: Option<TraceParent>, created: bool) -> Option<(TraceId, SpanId, SpanId, bool)> {
    let mut rng = rand::rng();
    let mut random_span = || {
        let mut b = [0u8; 8];
        while b == [0; 8] {
            rng.fill(&mut b);
        }
        SpanId::from_bytes(b)
    };
    Some(match (trace, created) {
        (Some(t), _) if t.flags & 1 == 0 => return None,
        (Some(t), true) => (
            TraceId::from_bytes(t.trace_id),
            SpanId::from_bytes(t.parent_id),
            SpanId::INVALID,
            false,
        ),
        (Some(t), false) => (
            TraceId::from_bytes(t.trace_id),
            random_span(),
            SpanId::from_bytes(t.parent_id),
            true,
        ),
        (None, _) => {
            let mut b = [0u8; 16];
            while b == [0; 16] {
                rand::rng().fill(&mut b);
            }
            (
                TraceId::from_bytes(b),
                random_span(),
                SpanId::INVALID,
                false,
            )
        }
    })
}

fn export<E: SpanExporter>(
    exporter: &E,
    buf: &mut Vec<SpanData>,
    exported: &Option<IntCounter>,
    dropped: &Option<IntCounter>,
) {
    if buf.is_empty() {
        return;
    }
    let batch = std::mem::take(buf);
    let n = batch.len();
    match futures_executor::block_on(exporter.export(batch)) {
        Ok(()) => inc(exported, n),
        Err(_) => inc(dropped, n),
    }
}

fn run<E: SpanExporter>(
    mut exporter: E,
    rx: Receiver<SpanData>,
    stop: &AtomicBool,
    batch: usize,
    exported: &Option<IntCounter>,
    dropped: &Option<IntCounter>,
) {
    let mut buf = Vec::with_capacity(batch);
    let mut flushed = Instant::now();
    loop {
        // Short waits, so a shutdown is seen at once; an export at most
        // every FLUSH_EVERY (or when a batch is full).
        let wait = if stop.load(Ordering::SeqCst) {
            Duration::ZERO
        } else {
            STOP_CHECK
        };
        match rx.recv_timeout(wait) {
            Ok(span) => {
                buf.push(span);
                if buf.len() >= batch {
                    export(&exporter, &mut buf, exported, dropped);
                    flushed = Instant::now();
                }
            }
            Err(RecvTimeoutError::Timeout) if stop.load(Ordering::SeqCst) => break,
            Err(RecvTimeoutError::Timeout) if flushed.elapsed() >= FLUSH_EVERY => {
                export(&exporter, &mut buf, exported, dropped);
                flushed = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    export(&exporter, &mut buf, exported, dropped);
    let _ = exporter.shutdown();
}
