//! The per-request context pingora carries between hooks: the `Meter`, the
//! metrics sink, and the in-flight guard. Also the fail-open wrapper around
//! per-chunk decoding.

use super::tap::Tap;
use crate::metrics::TapSink;
use crate::record::Meter;
use prometheus::IntGauge;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Instant, SystemTime};

pub struct RequestCtx {
    pub meter: Meter,
    pub sink: TapSink,
    /// Set once the record was emitted (guards against a second `logging`).
    pub finished: bool,
    _in_flight: InFlight,
}

/// Decrements the in-flight gauge when the request's context goes away,
/// whatever path it took.
struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RequestCtx {
    pub fn new(tap: &Tap, now: Instant) -> Self {
        tap.in_flight.inc();
        RequestCtx {
            meter: Meter::new(now, SystemTime::now(), tap.config.limits),
            sink: TapSink::new(
                tap.metrics.clone(),
                tap.labels.clone(),
                tap.hooks.observer.clone(),
            ),
            finished: false,
            _in_flight: InFlight(tap.in_flight.clone()),
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
