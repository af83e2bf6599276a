//! Where a finished request goes: one trait (`RecordSink`), one list of
//! sinks per tap built when the server is built (`for_tap`), called once
//! per request with the request's own settings snapshot (`Finished`).
//!
//! The sinks: metrics (Prometheus and OTel), the access log, the record
//! hooks a server was built with (tests, the demo), the OTLP span, the
//! live analyses, the record log and the fleet series, the correlator. All
//! run inline at the end of a request, so each must be cheap and never
//! block (the span, record-log and correlator sinks only queue). Each runs
//! under its own guard (`SinkPanics::guard`): a panic in one loses that
//! sink's view of the request, counted in `tokentap_sink_panics_total`,
//! never the others'.
//!
//! (The per-token-event extension point, `EventObserver`, is the metrics'
//! token sink's: `crate::metrics`.)

mod access;
mod analysis;
mod correlator;

pub use access::AccessLog;
pub use analysis::{AnalysisSink, FleetSeries};
pub use correlator::CorrelatorSink;

use crate::config::TapConfig;
use crate::metrics::series::ModelSeries;
use crate::metrics::{EventObserver, Metrics, Offsets};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use tokentap_core::correlate::AttributionSink;
use tokentap_core::labels::{ModelLabel, SinkName, SinkPanicLabels, TapLabels};
use tokentap_core::record::RequestRecord;
use tokentap_telemetry::otlp::spans::SpanPipeline;

/// One finished request, as every sink sees it.
pub struct Finished<'a> {
    pub tap: &'a TapLabels,
    /// The `model` label every metric of this request carries.
    pub model: &'a ModelLabel,
    pub record: &'a RequestRecord,
    /// The series the request's token events went to (resolved at its
    /// response head), so the record need not look them up again; `None`
    /// when the request resolved none.
    pub series: Option<&'a Arc<ModelSeries>>,
    /// Token-event times (µs from the start), when the tap keeps them.
    pub offsets: Option<&'a Offsets>,
    /// The tap's config as it was when the request arrived.
    pub config: &'a TapConfig,
    /// Runs each sink (and each part of one) under its own guard.
    pub panics: &'a SinkPanics,
    /// A sink to panic in (`x-tokentap-fault: sink:<name>`; test builds
    /// only, else always `None`).
    pub fault: Option<SinkName>,
}

/// Receives every finished request of a tap.
pub trait RecordSink: Send + Sync {
    /// What it is, for its guard's counter.
    fn name(&self) -> SinkName;
    /// Whether it runs its parts under guards of their own (each named):
    /// an injected fault then goes to the part it names.
    fn guards_its_parts(&self) -> bool {
        false
    }
    fn finished(&self, f: &Finished<'_>);
}

/// A tap's sink guards: each sink runs under `catch_unwind` of its own.
pub struct SinkPanics {
    metrics: Arc<Metrics>,
    tap: TapLabels,
}

impl SinkPanics {
    /// Also creates the tap's series at 0.
    pub fn new(metrics: Arc<Metrics>, tap: TapLabels) -> Self {
        for sink in SinkName::ALL {
            let labels = SinkPanicLabels {
                tap: tap.clone(),
                sink,
            };
            metrics.touch(&tokentap_core::table::SINK_PANICS, &labels);
        }
        SinkPanics { metrics, tap }
    }

    /// Runs `f`, the `name` sink's part of a request: a panic is counted
    /// and logged, and goes no further.
    pub fn guard(&self, name: SinkName, fault: Option<SinkName>, f: impl FnOnce()) {
        let ran = catch_unwind(AssertUnwindSafe(|| {
            fault_point(name, fault);
            f()
        }));
        if ran.is_err() {
            let labels = SinkPanicLabels {
                tap: self.tap.clone(),
                sink: name,
            };
            self.metrics
                .add(&tokentap_core::table::SINK_PANICS, &labels, 1);
            tracing::error!(tap = %self.tap.tap, sink = name.as_str(), "a sink panicked; its view of this request is lost");
        }
    }
}

/// Panics when a test asked this sink to (`fault-injection` builds only).
#[cfg(feature = "fault-injection")]
#[allow(clippy::panic)]
fn fault_point(name: SinkName, fault: Option<SinkName>) {
    if fault == Some(name) {
        panic!("fault injected in sink {}", name.as_str());
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
fn fault_point(_: SinkName, _: Option<SinkName>) {}

/// The optional listeners a server is built with.
#[derive(Clone, Default)]
pub struct Hooks {
    pub observer: Option<Arc<dyn EventObserver>>,
    /// Called for every finished request of every tap, after the metrics
    /// and the access log.
    pub records: Vec<Arc<dyn RecordSink>>,
    /// Receive the correlator's conclusions (besides the metrics).
    pub attributions: Vec<Arc<dyn AttributionSink>>,
}

/// Request-level metrics in both exports.
pub struct MetricsSink(pub Arc<Metrics>);

impl RecordSink for MetricsSink {
    fn name(&self) -> SinkName {
        SinkName::Metrics
    }

    fn finished(&self, f: &Finished<'_>) {
        self.0.record_in(f.series, f.tap, f.model, f.record);
    }
}

/// One span per request into the bounded OTLP queue.
pub struct SpanSink(pub Arc<SpanPipeline>);

impl RecordSink for SpanSink {
    fn name(&self) -> SinkName {
        SinkName::Span
    }

    fn finished(&self, f: &Finished<'_>) {
        // A tool or retrieval tap's spans are its calls' (`crate::calls`).
        if matches!(
            f.tap.boundary,
            tokentap_core::tap::Boundary::Tool | tokentap_core::tap::Boundary::Retrieval
        ) {
            return;
        }
        let events = f.offsets.map(|o| o.micros.as_slice());
        let hop = match f.tap.boundary {
            tokentap_core::tap::Boundary::Guardrail => f.config.hop.as_deref(),
            _ => None,
        };
        self.0.record(f.tap, hop, &f.model.value, f.record, events);
    }
}

/// What a tap's sinks are built from.
pub struct TapSinks {
    pub metrics: Arc<Metrics>,
    pub hooks: Vec<Arc<dyn RecordSink>>,
    pub spans: Option<Arc<SpanPipeline>>,
    pub analysis: Option<AnalysisSink>,
    pub correlator: Option<CorrelatorSink>,
}

/// The sinks of one tap, in the order they run.
pub fn for_tap(s: TapSinks) -> Vec<Arc<dyn RecordSink>> {
    let mut out: Vec<Arc<dyn RecordSink>> =
        vec![Arc::new(MetricsSink(s.metrics)), Arc::new(AccessLog)];
    out.extend(s.hooks);
    if let Some(p) = s.spans {
        out.push(Arc::new(SpanSink(p)));
    }
    if let Some(a) = s.analysis {
        out.push(Arc::new(a));
    }
    if let Some(c) = s.correlator {
        out.push(Arc::new(c));
    }
    out
}
