//! What the joiner does with one OTLP trace export, whatever carried it
//! (HTTP or gRPC): decode (protobuf or JSON, gzip or not, capped), turn
//! each tokentap span into its `TapRecord` (`correlate::span`), hand it to
//! the correlator; count spans that are not tokentap's and exports that
//! cannot be read. Never panics on input: every failure is a result.

use crate::metrics::Metrics;
use flate2::read::GzDecoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokentap_core::correlate::span::{self, Attributes, NotJoinable};
use tokentap_core::correlate::Correlator;
use tokentap_core::labels::{JoinExport, JoinExportResult, JoinSpan, JoinSpanResult};
use tokentap_core::table;

/// How an export was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Why an export was refused (the HTTP status follows from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not protobuf or JSON, or a content encoding other than gzip.
    Unsupported,
    /// Over `max_body_bytes`, before or after inflating.
    TooLarge,
    /// Does not decode as an OTLP trace export.
    Malformed,
}

impl Refused {
    pub fn result(self) -> JoinExportResult {
        match self {
            Refused::Unsupported => JoinExportResult::Unsupported,
            Refused::TooLarge => JoinExportResult::TooLarge,
            Refused::Malformed => JoinExportResult::Malformed,
        }
    }
}

/// What an accepted export contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    pub joined: u64,
    pub foreign: u64,
    pub malformed: u64,
}

pub struct Receiver {
    correlator: Arc<Correlator>,
    metrics: Arc<Metrics>,
    max_body_bytes: usize,
    max_events: usize,
    /// The joiner's instant and wall time at its start: a span's wall
    /// start becomes an instant on this process's clock (grouping only).
    base: (Instant, SystemTime),
}

/// The span attributes, looked up by key (a span has a few dozen).
struct Attrs<'a>(&'a [KeyValue]);

impl Attrs<'_> {
    fn get(&self, key: &str) -> Option<&any_value::Value> {
        self.0
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v: &AnyValue| v.value.as_ref())
    }
}

impl Attributes for Attrs<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            any_value::Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn f64(&self, key: &str) -> Option<f64> {
        match self.get(key)? {
            any_value::Value::DoubleValue(v) => Some(*v),
            any_value::Value::IntValue(v) => Some(*v as f64),
            _ => None,
        }
    }

    fn i64(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            any_value::Value::IntValue(v) => Some(*v),
            _ => None,
        }
    }

    fn i64s(&self, key: &str, cap: usize, out: &mut Vec<u32>) {
        if let Some(any_value::Value::ArrayValue(a)) = self.get(key) {
            out.extend(
                a.values
                    .iter()
                    .take(cap)
                    .filter_map(|v| match v.value.as_ref() {
                        Some(any_value::Value::IntValue(n)) => u32::try_from(*n).ok(),
                        _ => None,
                    }),
            );
        }
    }
}

fn array<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

impl Receiver {
    pub fn new(correlator: Arc<Correlator>, metrics: Arc<Metrics>, max_body_bytes: usize) -> Self {
        let max_events = correlator.config().max_events;
        for result in JoinExportResult::ALL {
            metrics.touch(&table::JOIN_EXPORTS, &JoinExport { result });
        }
        for result in JoinSpanResult::ALL {
            metrics.touch(&table::JOIN_SPANS, &JoinSpan { result });
        }
        Receiver {
            correlator,
            metrics,
            max_body_bytes,
            max_events,
            base: (Instant::now(), SystemTime::now()),
        }
    }

    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// An HTTP body: inflated if gzip, decoded, ingested.
    pub fn http(&self, body: &[u8], encoding: Encoding, gzip: bool) -> Result<Accepted, Refused> {
        let result = self
            .decode(body, encoding, gzip)
            .map(|req| self.ingest(&req));
        self.count_export(result)
    }

    /// A decoded export (gRPC: tonic decoded and inflated it).
    pub fn export(&self, req: &ExportTraceServiceRequest) -> Accepted {
        let accepted = self.ingest(req);
        let _ = self.count_export(Ok(accepted));
        accepted
    }

    /// Counts an export refused before its body was decoded; returns why.
    pub fn refused(&self, why: Refused) -> Refused {
        let result = why.result();
        self.metrics
            .add(&table::JOIN_EXPORTS, &JoinExport { result }, 1);
        why
    }

    fn count_export(&self, r: Result<Accepted, Refused>) -> Result<Accepted, Refused> {
        let result = match &r {
            Ok(_) => JoinExportResult::Ok,
            Err(why) => why.result(),
        };
        self.metrics
            .add(&table::JOIN_EXPORTS, &JoinExport { result }, 1);
        r
    }

    fn decode(
        &self,
        body: &[u8],
        encoding: Encoding,
        gzip: bool,
    ) -> Result<ExportTraceServiceRequest, Refused> {
        if body.len() > self.max_body_bytes {
            return Err(Refused::TooLarge);
        }
        let inflated;
        let plain = if gzip {
            let mut out = Vec::new();
            let cap = u64::try_from(self.max_body_bytes).unwrap_or(u64::MAX) + 1;
            GzDecoder::new(body)
                .take(cap)
                .read_to_end(&mut out)
                .map_err(|_| Refused::Malformed)?;
            if out.len() > self.max_body_bytes {
                return Err(Refused::TooLarge);
            }
            inflated = out;
            &inflated[..]
        } else {
            body
        };
        match encoding {
            Encoding::Protobuf => {
                ExportTraceServiceRequest::decode(plain).map_err(|_| Refused::Malformed)
            }
            Encoding::Json => serde_json::from_slice(plain).map_err(|_| Refused::Malformed),
        }
    }

    /// The span's wall start on this process's clock.
    fn instant_of(&self, start_unix_nano: u64) -> Instant {
        let (base, base_wall) = self.base;
        let start = UNIX_EPOCH + Duration::from_nanos(start_unix_nano);
        match start.duration_since(base_wall) {
            Ok(after) => base + after,
            Err(e) => base.checked_sub(e.duration()).unwrap_or(base),
        }
    }

    fn ingest(&self, req: &ExportTraceServiceRequest) -> Accepted {
        let mut a = Accepted::default();
        let now = Instant::now();
        for span in req
            .resource_spans
            .iter()
            .flat_map(|rs| rs.scope_spans.iter())
            .flat_map(|ss| ss.spans.iter())
        {
            let ids = array::<16>(&span.trace_id).zip(
                array::<8>(&span.parent_span_id)
                    .or(span.parent_span_id.is_empty().then_some([0; 8])),
            );
            let record = match ids {
                None => Err(NotJoinable::Malformed),
                Some((trace, parent)) => span::record(
                    &Attrs(&span.attributes),
                    trace,
                    parent,
                    self.instant_of(span.start_time_unix_nano),
                    self.max_events,
                ),
            };
            match record {
                Ok(r) => {
                    self.correlator.submit(r, now);
                    a.joined += 1;
                }
                Err(NotJoinable::Foreign) => a.foreign += 1,
                Err(NotJoinable::Malformed) => a.malformed += 1,
            }
        }
        for (result, n) in [
            (JoinSpanResult::Joined, a.joined),
            (JoinSpanResult::Foreign, a.foreign),
            (JoinSpanResult::Malformed, a.malformed),
        ] {
            if n > 0 {
                self.metrics
                    .add(&table::JOIN_SPANS, &JoinSpan { result }, n);
            }
        }
        a
    }
}
