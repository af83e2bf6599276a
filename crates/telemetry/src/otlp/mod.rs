//! OTLP export over HTTP/protobuf: the canonical metrics (through a
//! `PeriodicReader` on the SDK's own thread) and one span per request per
//! tap (through tokentap's own bounded queue and exporter thread).
//!
//! Never in the way of traffic: recording a metric is an in-memory SDK
//! update; a span is handed over with a non-blocking `try_send` into a
//! bounded queue and dropped (and counted) when the queue is full; exports
//! run on their own threads with a timeout; shutdown is bounded. The HTTP
//! client is reqwest's *blocking* client, which needs no tokio reactor on
//! the SDK's threads (see `../shared/reference/pingora-0.9.md` §3), and the
//! exporters are created and dropped outside pingora's runtimes.
//!
//! Off unless configured: an `otlp:` section in the YAML, or one of
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`. The other standard variables
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_TRACES_EXPORTER=none`,
//! `OTEL_METRICS_EXPORTER=none`, `OTEL_SDK_DISABLED`) apply; YAML wins.

pub mod spans;

use crate::registry::otel::OtelMetrics;
use crate::registry::prom::PromMetrics;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;
use spans::{SpanOptions, SpanPipeline};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::labels::{OtlpSignal, Signal};
use tokentap_core::table;

/// The validated `otlp:` section (plus the environment). Its `Debug` shows
/// header names only: header values are usually collector credentials.
#[derive(Clone, PartialEq)]
pub struct OtlpConfig {
    /// Base URL (`/v1/traces`, `/v1/metrics` are appended); `None`: the
    /// exporter reads `OTEL_EXPORTER_OTLP_*ENDPOINT`.
    pub endpoint: Option<String>,
    pub headers: HashMap<String, String>,
    pub traces: bool,
    pub metrics: bool,
    /// Metric export interval (`None`: `OTEL_METRIC_EXPORT_INTERVAL` or 60 s).
    pub interval: Option<Duration>,
    /// Per export (`None`: `OTEL_EXPORTER_OTLP_TIMEOUT` or 10 s).
    pub timeout: Option<Duration>,
    pub queue_spans: usize,
    pub batch_spans: usize,
    pub shutdown: Duration,
    pub service_name: Option<String>,
    pub span_events: bool,
    pub max_span_events: usize,
    /// Token-event offsets carried as a span attribute (for the joiner).
    pub span_token_offsets: usize,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.headers.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("headers (values redacted)", &names)
            .field("traces", &self.traces)
            .field("metrics", &self.metrics)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("queue_spans", &self.queue_spans)
            .field("batch_spans", &self.batch_spans)
            .field("shutdown", &self.shutdown)
            .field("service_name", &self.service_name)
            .field("span_events", &self.span_events)
            .field("max_span_events", &self.max_span_events)
            .field("span_token_offsets", &self.span_token_offsets)
            .finish()
    }
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            endpoint: None,
            headers: HashMap::new(),
            traces: true,
            metrics: true,
            interval: None,
            timeout: None,
            queue_spans: 2048,
            batch_spans: 512,
            shutdown: Duration::from_secs(5),
            service_name: None,
            span_events: false,
            max_span_events: 128,
            span_token_offsets: 64,
        }
    }
}

impl OtlpConfig {
    /// Applies the environment's on/off switches; `None` when nothing exports.
    pub fn with_env_switches(mut self) -> Option<OtlpConfig> {
        let env_is =
            |k: &str, v: &str| std::env::var(k).is_ok_and(|x| x.trim().eq_ignore_ascii_case(v));
        if env_is("OTEL_SDK_DISABLED", "true") {
            return None;
        }
        if env_is("OTEL_TRACES_EXPORTER", "none") {
            self.traces = false;
        }
        if env_is("OTEL_METRICS_EXPORTER", "none") {
            self.metrics = false;
        }
        (self.traces || self.metrics).then_some(self)
    }

    /// Whether the environment alone asks for OTLP.
    pub fn env_enabled() -> bool {
        [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        ]
        .iter()
        .any(|k| std::env::var(k).is_ok_and(|v| !v.trim().is_empty()))
    }

    fn signal_url(&self, path: &str) -> Option<String> {
        self.endpoint
            .as_ref()
            .map(|e| format!("{}/{path}", e.trim_end_matches('/')))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("OTLP span thread: {0}")]
    Thread(std::io::Error),
}

/// The running OTLP pipelines of a process.
pub struct Otlp {
    meter_provider: Option<SdkMeterProvider>,
    spans: Option<Arc<SpanPipeline>>,
    shutdown: Duration,
}

/// The resource: `service.name` (YAML, else `OTEL_SERVICE_NAME`, else
/// `tokentap`), `OTEL_RESOURCE_ATTRIBUTES`, and tokentap's version.
fn resource(cfg: &OtlpConfig) -> Resource {
    let mut b = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    match (&cfg.service_name, std::env::var("OTEL_SERVICE_NAME")) {
        (Some(name), _) => b = b.with_service_name(name.clone()),
        (None, Ok(_)) => {}
        (None, Err(_)) => b = b.with_service_name("tokentap"),
    }
    b.build()
}

fn counter(
    prom: &PromMetrics,
    m: &table::Metric<OtlpSignal, table::kind::Counter>,
    signal: Signal,
) -> Option<IntCounter> {
    prom.counter(m, &OtlpSignal { signal })
}

impl Otlp {
    /// Starts the pipelines; returns the OTel instruments to record into
    /// (when metrics are on). `providers`: `gen_ai.provider.name` per tap.
    pub fn start(
        cfg: &OtlpConfig,
        prom: &PromMetrics,
        providers: HashMap<Arc<str>, Arc<str>>,
        resolution: tokentap_core::table::Resolution,
    ) -> Result<(Otlp, Option<OtelMetrics>), OtlpError> {
        let resource = resource(cfg);
        let mut otlp = Otlp {
            meter_provider: None,
            spans: None,
            shutdown: cfg.shutdown,
        };
        let mut instruments = None;
        if cfg.metrics {
            let mut b = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_temporality(Temporality::Cumulative)
                .with_headers(cfg.headers.clone());
            if let Some(url) = cfg.signal_url("v1/metrics") {
                b = b.with_endpoint(url);
            }
            if let Some(t) = cfg.timeout {
                b = b.with_timeout(t);
            }
            let exporter = Counting {
                inner: b.build()?,
                exported: counter(prom, &table::OTLP_EXPORTED, Signal::Metrics),
                dropped: counter(prom, &table::OTLP_DROPPED, Signal::Metrics),
            };
            let mut reader = PeriodicReader::builder(exporter);
            if let Some(i) = cfg.interval {
                reader = reader.with_interval(i);
            }
            let provider = SdkMeterProvider::builder()
                .with_reader(reader.build())
                .with_resource(resource.clone())
                .build();
            let meter = provider.meter("tokentap");
            instruments = Some(OtelMetrics::new(&meter, providers.clone(), resolution));
            otlp.meter_provider = Some(provider);
        }
        if cfg.traces {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_headers(cfg.headers.clone());
            if let Some(url) = cfg.signal_url("v1/traces") {
                b = b.with_endpoint(url);
            }
            if let Some(t) = cfg.timeout {
                b = b.with_timeout(t);
            }
            let options = SpanOptions {
                queue: cfg.queue_spans,
                batch: cfg.batch_spans,
                events: cfg.span_events.then_some(cfg.max_span_events),
                offsets: cfg.span_token_offsets,
                providers,
                exported: counter(prom, &table::OTLP_EXPORTED, Signal::Traces),
                dropped: counter(prom, &table::OTLP_DROPPED, Signal::Traces),
            };
            otlp.spans = Some(
                SpanPipeline::start(b.build()?, resource, options).map_err(OtlpError::Thread)?,
            );
        }
        Ok((otlp, instruments))
    }

    /// Where the proxy hands finished requests for spans.
    pub fn spans(&self) -> Option<Arc<SpanPipeline>> {
        self.spans.clone()
    }

    /// Flushes and stops both pipelines, waiting at most the configured
    /// bound; returns whether everything finished in time. The providers are
    /// dropped on a thread of their own, never inside a tokio runtime.
    pub fn shutdown(self) -> bool {
        let bound = self.shutdown;
        self.shutdown_within(bound)
    }

    /// The same, within at most `bound` (and the pipeline's own bound).
    pub fn shutdown_within(self, bound: Duration) -> bool {
        let deadline = Instant::now() + self.shutdown.min(bound);
        let Otlp {
            meter_provider,
            spans,
            shutdown,
        } = self;
        let shutdown = shutdown.min(bound);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("tokentap-otlp-shutdown".into())
            .spawn(move || {
                if let Some(s) = spans {
                    s.shutdown(deadline);
                }
                if let Some(p) = meter_provider {
                    let _ = p.shutdown_with_timeout(shutdown);
                    drop(p);
                }
                let _ = tx.send(());
            });
        spawned.is_ok()
            && rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .is_ok()
    }
}

/// Counts what a metric export carried: exported on success, dropped on
/// failure (the SDK itself only logs it).
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    exported: Option<IntCounter>,
    dropped: Option<IntCounter>,
}

fn points(metrics: &ResourceMetrics) -> u64 {
    fn n<T>(d: &MetricData<T>) -> usize {
        match d {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(e) => e.data_points().count(),
        }
    }
    let total: usize = metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            AggregatedMetrics::F64(d) => n(d),
            AggregatedMetrics::U64(d) => n(d),
            AggregatedMetrics::I64(d) => n(d),
        })
        .sum();
    u64::try_from(total).unwrap_or(u64::MAX)
}

impl<E: PushMetricExporter> PushMetricExporter for Counting<E> {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let n = points(metrics);
        async move {
            let result = self.inner.export(metrics).await;
            let counter = if result.is_ok() {
                &self.exported
            } else {
                &self.dropped
            };
            if let Some(c) = counter {
                c.inc_by(n);
            }
            result
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
