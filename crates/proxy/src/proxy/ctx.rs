//! The per-request context pingora carries between hooks: the `Meter`, the
//! metrics sink, and the in-flight guard. Every `Meter` call a hook makes
//! goes through `RequestCtx::guarded`: a panic inside measuring stops
//! measurement for this request (`decoder_panic`, counted `unmeasured`),
//! never the bytes.

use super::arrival::Arrivals;
use super::held::{Held, Release};
use super::tap::{Tap, TapSettings};
use crate::config::Boundary;
use crate::metrics::InFlight as TapInFlight;
use crate::metrics::TapSink;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::tenant::tenant_of;
use tokentap_core::decode::request::{self, NotJson, RequestInfo};
use tokentap_core::record::{Meter, MeterCall, RequestRecord, TransportEnd};

/// How long an injected stall blocks a `Meter` call (test builds only).
#[cfg(feature = "fault-injection")]
pub const STALL: std::time::Duration = std::time::Duration::from_millis(300);
use tokentap_core::trace::{TraceMode, TraceParent};

pub struct RequestCtx {
    /// The tap's settings as they were when the request arrived.
    pub settings: Arc<TapSettings>,
    pub meter: Meter,
    pub sink: TapSink,
    /// Set once the record was emitted (guards against a second `logging`).
    pub finished: bool,
    /// Refused by a client limit: counted, not measured.
    pub rejected: bool,
    /// The tap measures (`measure: true`); else the hooks only forward.
    pub measure: bool,
    /// A large request body being parsed on the blocking pool.
    pending_request: Option<tokio::task::JoinHandle<Result<RequestInfo, NotJson>>>,
    /// A `traceparent` this tap created, to add to the upstream request.
    pub inject_trace: Option<TraceParent>,
    /// Usage injection's state for this request (`inject`).
    pub injection: super::inject::Injection,
    /// A sink to panic in (`x-tokentap-fault: sink:<name>`, test builds).
    pub sink_fault: Option<tokentap_core::labels::SinkName>,
    /// A `Meter` call to stall before it runs (`x-tokentap-fault:
    /// stall:<call>`, test builds): a decoder that takes its time, to show
    /// that the bytes it measures are not held for it.
    #[cfg(feature = "fault-injection")]
    stall: Option<MeterCall>,
    /// Response pieces pingora has yet to write (`held`).
    held: Held,
    /// When the response's pieces arrived (receive stamps, checked).
    arrivals: Arrivals,
    /// The live analyses' in-flight level when this request arrived.
    level: u32,
    /// Keeps this request's trace open in the correlator while it runs
    /// (dropped after `logging` submitted the record).
    open_trace: Option<tokentap_core::correlate::OpenTrace>,
    /// A compound tap's request, in flight: the compound stage examines no
    /// request that ended after it started until it is dropped.
    _open_compound: Option<tokentap_core::correlate::OpenCompound>,
    /// A tool or retrieval tap's calls in this exchange (`calls`).
    pub(super) calls: Option<super::call_hooks::Exchange>,
    _in_flight: InFlight,
}

/// Decrements the in-flight gauge (and the live analyses' count) when the
/// request's context goes away, whatever path it took.
struct InFlight(TapInFlight, Option<Arc<TapLive>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.add(-1);
        if let Some(live) = &self.1 {
            live.end(unix_ms(SystemTime::now()));
        }
    }
}

/// Wall-clock milliseconds (the analyses' time base).
fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or_default()
}

impl RequestCtx {
    pub fn new(tap: &Tap, now: Instant) -> Self {
        tap.in_flight.add(1);
        let wall = SystemTime::now();
        let live = tap.analysis.live.clone();
        let level = live.as_ref().map_or(0, |l| l.start(unix_ms(wall)));
        let settings = tap.settings();
        let mut sink = TapSink::new(
            tap.metrics.clone(),
            tap.labels.clone(),
            tap.observer.clone(),
        );
        sink.keep_offsets(tap.event_cap());
        let meter = Meter::new(now, wall, settings.config.limits)
            .with_fingerprint(tap.fingerprint)
            .with_links(
                tap.fingerprint
                    .then(|| settings.config.boundary == Boundary::Compound),
            )
            .with_prefixes(tap.analysis.on())
            .with_verdict(settings.config.boundary == Boundary::Guardrail)
            .with_dialect(settings.config.dialect)
            .with_estimator(settings.config.estimator);
        let measure = settings.config.measure;
        let open_compound = tap
            .correlator
            .as_ref()
            .filter(|_| settings.config.boundary == Boundary::Compound)
            .and_then(|c| c.open_compound(now));
        let calls = tap
            .calls
            .as_ref()
            .filter(|_| measure)
            .map(|c| super::call_hooks::Exchange::new(c.clone(), now, wall));
        RequestCtx {
            calls,
            meter,
            sink,
            settings,
            finished: false,
            rejected: false,
            measure,
            pending_request: None,
            inject_trace: None,
            injection: Default::default(),
            sink_fault: None,
            #[cfg(feature = "fault-injection")]
            stall: None,
            held: Held::default(),
            arrivals: Arrivals::new(now),
            level,
            open_trace: None,
            _open_compound: open_compound,
            _in_flight: InFlight(tap.in_flight.clone(), live),
        }
    }

    /// Reads the request's tenant (when analyses are on) and hands it, with
    /// the in-flight level, to the meter.
    pub fn load_context<'a>(&mut self, tap: &Tap, get: impl Fn(&str) -> Option<&'a [u8]>) {
        if let Some(source) = &tap.analysis.tenant {
            self.meter
                .set_load_context(tenant_of(source, get), self.level);
        }
    }

    /// Reads the request's `traceparent` (or creates one) as the tap's mode
    /// says; a created one is added to the upstream request.
    pub fn trace(&mut self, tap: &Tap, header: Option<&[u8]>) {
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
        if let (Some(c), Some(t)) = (&tap.correlator, trace) {
            self.open_trace = Some(c.open(t.trace_id));
        }
        self.meter.set_trace(trace, self.inject_trace.is_some());
    }

    /// Runs the `Meter` call `call` under the fail-open guard: if it
    /// panics, the request stops being measured (`decoder_panic`) and
    /// `None` is returned; the hooks forward the bytes whatever happens
    /// here.
    fn guarded<T>(
        &mut self,
        call: MeterCall,
        f: impl FnOnce(&mut Meter, &mut TapSink) -> T,
    ) -> Option<T> {
        #[cfg(feature = "fault-injection")]
        if self.stall == Some(call) {
            std::thread::sleep(STALL);
        }
        #[cfg(not(feature = "fault-injection"))]
        let _ = call;
        let (meter, sink) = (&mut self.meter, &mut self.sink);
        match catch_unwind(AssertUnwindSafe(|| f(meter, sink))) {
            Ok(v) => Some(v),
            Err(_) => {
                self.meter.poison();
                None
            }
        }
    }

    /// Makes the named sink panic on this request (`x-tokentap-fault:
    /// sink:record_log`), or the named `Meter` call (`x-tokentap-fault: response_body`)
    /// or block for [`STALL`] each time it runs
    /// (`x-tokentap-fault: stall:response_body`); test builds only: the
    /// guard's promises, shown end to end.
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&mut self, header: Option<&[u8]>) {
        let Some(value) = header.and_then(|h| std::str::from_utf8(h).ok()) else {
            return;
        };
        if let Some(sink) = value.strip_prefix("sink:") {
            self.sink_fault = tokentap_core::labels::SinkName::from_label(sink);
            return;
        }
        match value.strip_prefix("stall:") {
            Some(name) => MeterCall::from_label(name).map(|c| self.stall = Some(c)),
            None => MeterCall::from_label(value).map(|c| self.meter.inject_fault(c)),
        };
    }

    /// The request line and headers.
    pub fn request_head(&mut self, path: &str, id: Option<&[u8]>, content_length: Option<u64>) {
        self.guarded(MeterCall::RequestHead, |m, _| {
            m.request_head(path, id, content_length)
        });
    }

    /// A piece of the request body. A large complete body is parsed on the
    /// blocking pool, so the tap's thread keeps relaying other streams.
    pub fn request_body(&mut self, piece: &[u8], end: bool) {
        self.calls(|m, out| m.request_body(piece, end, out));
        let Some(Some(body)) =
            self.guarded(MeterCall::RequestBody, |m, _| m.request_body(piece, end))
        else {
            return;
        };
        let hashes = self.meter.hashes();
        self.pending_request = Some(tokio::task::spawn_blocking(move || {
            request::parse_request_with(&body, hashes)
        }));
    }

    /// Takes the result of a request parse that ran elsewhere, if any (the
    /// next async hook after the body: response headers, or the end).
    pub async fn collect_request(&mut self) {
        if let Some(handle) = self.pending_request.take() {
            // A panic inside the parse counts as an unreadable body.
            let parsed = handle.await.unwrap_or(Err(NotJson));
            self.guarded(MeterCall::RequestBody, |m, _| m.set_request(parsed));
        }
    }

    /// The upstream's final response header.
    pub fn response_head(&mut self, at: Instant, status: u16, h: &http::HeaderMap) {
        use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
        let get = |name| super::headers::get(h, name);
        let content_length = super::headers::content_length(h);
        self.calls(|m, out| {
            m.response_head(at, status, get(&CONTENT_TYPE), get(&CONTENT_ENCODING), out)
        });
        self.guarded(MeterCall::ResponseHead, |m, sink| {
            // A request whose dialect its response will name resolves its
            // labels at its first token event, with the operation known.
            if m.operation().is_llm() {
                sink.prepare(m.requested_model(), m.operation());
            }
            m.response_head(
                at,
                status,
                get(&CONTENT_TYPE),
                get(&CONTENT_ENCODING),
                content_length,
            );
        });
    }

    /// A response piece pingora is about to write (its body filter, the
    /// end with it when `end`): held until written, then measured
    /// (`measure_written`), so decoding never delays it.
    /// When the bytes of the read that just returned arrived: its kernel
    /// receive stamp `rx`, unless that contradicts the monotonic clock (a
    /// stepped wall clock: counted), else now.
    pub fn arrival(&mut self, rx: Option<SystemTime>) -> Instant {
        let (at, fallback) = self.arrivals.at(rx, Instant::now(), SystemTime::now());
        if let Some(why) = fallback {
            self.sink.stamp_fallback(why);
        }
        at
    }

    pub fn response_piece(&mut self, at: Instant, piece: Option<&bytes::Bytes>, end: bool) {
        if let Some(piece) = piece.filter(|p| !p.is_empty()) {
            if let Some((at, over)) = self.held.hold(at, piece.clone()) {
                self.response_body(at, &over);
            }
        }
        if end {
            self.held.end(at);
        }
    }

    /// Measures what `response_piece` held: pingora wrote it
    /// (`ProxyHttp::response_tasks_written`), or the request ended (`logging`).
    pub fn measure_written(&mut self) {
        while let Some(next) = self.held.release() {
            match next {
                Release::Piece(at, piece) => self.response_body(at, &piece),
                Release::End(at) => self.response_end(at),
            }
        }
    }

    /// Feeds one response piece to the decoder.
    pub fn response_body(&mut self, at: Instant, piece: &[u8]) {
        self.calls(|m, out| m.response_body(at, piece, out));
        self.guarded(MeterCall::ResponseBody, |m, sink| {
            m.response_body(at, piece, sink)
        });
    }

    /// The upstream body ended.
    pub fn response_end(&mut self, at: Instant) {
        self.calls(|m, out| m.response_end(at, out));
        self.guarded(MeterCall::ResponseEnd, |m, _| m.response_end(at));
    }

    /// Closes the record. If that panics, the record is the one the Meter
    /// can give without decoding anything (`unmeasured`, `decoder_panic`).
    pub fn finish(&mut self, at: Instant, end: TransportEnd) -> RequestRecord {
        self.calls(|m, out| m.finish(at, end, out));
        match self.guarded(MeterCall::Finish, |m, _| m.finish(at, end)) {
            Some(r) => r,
            None => self.meter.unmeasured_record(at),
        }
    }
}
