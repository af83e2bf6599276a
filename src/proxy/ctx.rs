//! The per-request context pingora carries between hooks: the `Meter`, the
//! metrics sink, and the in-flight guard. Also the fail-open wrapper around
//! per-chunk decoding.

use super::tap::{Tap, TapSettings};
use crate::config::Boundary;
use crate::decode::request::{self, NotJson, RequestInfo};
use crate::metrics::InFlight as TapInFlight;
use crate::metrics::TapSink;
use crate::record::Meter;
use crate::trace::{TraceMode, TraceParent};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

pub struct RequestCtx {
    /// The tap's settings as they were when the request arrived.
    pub settings: Arc<TapSettings>,
    pub meter: Meter,
    pub sink: TapSink,
    /// Set once the record was emitted (guards against a second `logging`).
    pub finished: bool,
    /// A large request body being parsed on the blocking pool.
    pending_request: Option<tokio::task::JoinHandle<Result<RequestInfo, NotJson>>>,
    /// A `traceparent` this tap created, to add to the upstream request.
    pub inject_trace: Option<TraceParent>,
    _in_flight: InFlight,
}

/// Decrements the in-flight gauge when the request's context goes away,
/// whatever path it took.
struct InFlight(TapInFlight);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.add(-1);
    }
}

impl RequestCtx {
    pub fn new(tap: &Tap, now: Instant) -> Self {
        tap.in_flight.add(1);
        let settings = tap.settings();
        let mut sink = TapSink::new(
            tap.metrics.clone(),
            tap.labels.clone(),
            tap.hooks.observer.clone(),
        );
        sink.keep_offsets(tap.event_cap());
        let meter = Meter::new(now, SystemTime::now(), settings.config.limits)
            .with_fingerprint(tap.correlator.is_some())
            .with_verdict(settings.config.boundary == Boundary::Guardrail);
        RequestCtx {
            meter,
            sink,
            settings,
            finished: false,
            pending_request: None,
            inject_trace: None,
            _in_flight: InFlight(tap.in_flight.clone()),
        }
    }

    /// Reads the request's `traceparent` (or creates one) as the tap's mode
    /// says; a created one is added to the upstream request.
    pub fn trace(&mut self, header: Option<&[u8]>) {
        let mode = self.settings.config.trace;
        let incoming = match mode {
            TraceMode::Off => None,
            _ => header.and_then(TraceParent::parse),
        };
        let trace = match (incoming, mode) {
            (None, TraceMode::Create) => {
                let t = TraceParent::generate();
                self.inject_trace = Some(t);
                Some(t)
            }
            (t, _) => t,
        };
        self.meter.set_trace(trace, self.inject_trace.is_some());
    }

    /// A piece of the request body. A large complete body is parsed on the
    /// blocking pool, so the tap's thread keeps relaying other streams.
    pub fn request_body(&mut self, piece: &[u8], end: bool) {
        if let Some(body) = self.meter.request_body(piece, end) {
            let hashes = self.meter.hashes();
            self.pending_request = Some(tokio::task::spawn_blocking(move || {
                request::parse_request_with(&body, hashes)
            }));
        }
    }

    /// Takes the result of a request parse that ran elsewhere, if any (the
    /// next async hook after the body: response headers, or the end).
    pub async fn collect_request(&mut self) {
        if let Some(handle) = self.pending_request.take() {
            // A panic inside the parse counts as an unreadable body.
            self.meter.set_request(handle.await.unwrap_or(Err(NotJson)));
        }
    }

    /// Feeds one response piece to the decoder. A panic inside decoding is
    /// caught: measurement stops for this request (`decoder_panic`), the
    /// bytes flow on.
    pub fn response_body(&mut self, at: Instant, piece: &[u8]) {
        let (meter, sink) = (&mut self.meter, &mut self.sink);
        let result = catch_unwind(AssertUnwindSafe(|| meter.response_body(at, piece, sink)));
        if result.is_err() {
            self.meter.poison();
        }
    }
}
