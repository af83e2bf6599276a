//! What the joiner does with one OTLP trace export, whatever carried it
//! (HTTP or gRPC): inflate (gzip, capped), read it with bounded work
//! (`tokentap_core::otlp`: spans walked to and decoded one at a time, at
//! most `receiver.max_spans_per_export`), turn each tokentap span into its
//! `TapRecord` (`correlate::span`) and hand it to the correlator with its
//! own arrival instant; count spans that are not tokentap's, that are
//! malformed, and that were rejected (told to the sender as a partial
//! success). Never panics on input: every failure is a result.

use flate2::read::GzDecoder;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokentap_core::correlate::span::{self, NotJoinable};
use tokentap_core::correlate::Correlator;
use tokentap_core::labels::{JoinExport, JoinExportResult, JoinSpan, JoinSpanResult};
use tokentap_core::otlp::{self, Attrs, Encoding, Limits, Summary};
use tokentap_core::table;
use tokentap_host::auth::BearerToken;
use tokentap_telemetry::Registry as Metrics;

/// Why an export was refused (the status follows from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not protobuf or JSON, or a content encoding other than gzip.
    Unsupported,
    /// Over `max_body_bytes`, before or after inflating.
    TooLarge,
    /// Does not decode as an OTLP trace export.
    Malformed,
    /// No or the wrong bearer token (`receiver.auth`).
    Unauthorized,
}

impl Refused {
    pub fn result(self) -> JoinExportResult {
        match self {
            Refused::Unsupported => JoinExportResult::Unsupported,
            Refused::TooLarge => JoinExportResult::TooLarge,
            Refused::Malformed => JoinExportResult::Malformed,
            Refused::Unauthorized => JoinExportResult::Unauthorized,
        }
    }
}

/// What an accepted export contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The reader's count: spans, decoded, rejected (partial success).
    pub summary: Summary,
    pub joined: u64,
    pub foreign: u64,
    /// tokentap spans with a value out of range.
    pub malformed: u64,
}

pub struct Receiver {
    correlator: Arc<Correlator>,
    metrics: Arc<Metrics>,
    max_body_bytes: usize,
    limits: Limits,
    max_events: usize,
    /// The bearer token senders must present, if any.
    token: Option<BearerToken>,
    /// The joiner's instant and wall time at its start: a span's wall
    /// start becomes an instant on this process's clock (grouping only).
    base: (Instant, SystemTime),
}

fn array<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

impl Receiver {
    pub fn new(
        correlator: Arc<Correlator>,
        metrics: Arc<Metrics>,
        max_body_bytes: usize,
        limits: Limits,
        token: Option<BearerToken>,
    ) -> Self {
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
            limits,
            max_events,
            token,
            base: (Instant::now(), SystemTime::now()),
        }
    }

    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// Whether a request with this `Authorization` value may export (always,
    /// without `receiver.auth`).
    pub fn authorized(&self, authorization: Option<&[u8]>) -> bool {
        self.token.as_ref().is_none_or(|t| t.accepts(authorization))
    }

    /// An HTTP body: inflated if gzip, read, ingested, counted.
    pub fn http(&self, body: &[u8], encoding: Encoding, gzip: bool) -> Result<Accepted, Refused> {
        let result = self.inflate(body, gzip).and_then(|plain| match plain {
            Some(p) => self.ingest(&p, encoding),
            None => self.ingest(body, encoding),
        });
        self.count_export(result)
    }

    /// A gRPC message (tonic framed and inflated it): read, ingested,
    /// counted.
    pub fn grpc(&self, message: &[u8]) -> Result<Accepted, Refused> {
        if message.len() > self.max_body_bytes {
            return self.count_export(Err(Refused::TooLarge));
        }
        let result = self.ingest(message, Encoding::Protobuf);
        self.count_export(result)
    }

    /// Counts an export refused before its body was read; returns why.
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

    /// The inflated body, if it was gzip.
    fn inflate(&self, body: &[u8], gzip: bool) -> Result<Option<Vec<u8>>, Refused> {
        if body.len() > self.max_body_bytes {
            return Err(Refused::TooLarge);
        }
        if !gzip {
            return Ok(None);
        }
        let mut out = Vec::new();
        let cap = u64::try_from(self.max_body_bytes).unwrap_or(u64::MAX) + 1;
        GzDecoder::new(body)
            .take(cap)
            .read_to_end(&mut out)
            .map_err(|_| Refused::Malformed)?;
        if out.len() > self.max_body_bytes {
            return Err(Refused::TooLarge);
        }
        Ok(Some(out))
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

    fn ingest(&self, plain: &[u8], encoding: Encoding) -> Result<Accepted, Refused> {
        let mut a = Accepted::default();
        a.summary = otlp::read(plain, encoding, self.limits, |s| {
            let ids = array::<16>(&s.trace_id).zip(
                array::<8>(&s.parent_span_id).or(s.parent_span_id.is_empty().then_some([0; 8])),
            );
            let record = match ids {
                None => Err(NotJoinable::Malformed),
                Some((trace, parent)) => span::record(
                    &Attrs(&s.attributes),
                    trace,
                    parent,
                    self.instant_of(s.start_time_unix_nano),
                    self.max_events,
                ),
            };
            match record {
                Ok(r) => {
                    // Each span arrives when it is read: a large export's
                    // spans do not all settle in one sweep.
                    self.correlator.submit(r, Instant::now());
                    a.joined += 1;
                }
                Err(NotJoinable::Foreign) => a.foreign += 1,
                Err(NotJoinable::Malformed) => a.malformed += 1,
            }
        })
        .map_err(|_| Refused::Malformed)?;
        for (result, n) in [
            (JoinSpanResult::Joined, a.joined),
            (JoinSpanResult::Foreign, a.foreign),
            (JoinSpanResult::Malformed, a.malformed),
            (JoinSpanResult::Rejected, a.summary.rejected()),
        ] {
            if n > 0 {
                self.metrics
                    .add(&table::JOIN_SPANS, &JoinSpan { result }, n);
            }
        }
        Ok(a)
    }
}
