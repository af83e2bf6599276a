//! The hooks' side of a tool or retrieval tap: each hook hands what it saw
//! to the exchange's `CallMeter` (`tokentap_core::calls`) under a guard of
//! its own, after the bytes went on. A panic inside it stops reading calls
//! on this exchange (counted `decoder_panic`), never the request's record
//! and never the bytes.

use super::RequestCtx;
use crate::calls::{CallOut, CallTap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokentap_core::calls::{CallHead, CallLimits, CallMeter};
use tokentap_core::trace::{TraceMode, TraceParent};

/// One exchange's call state.
pub struct Exchange {
    tap: Arc<CallTap>,
    meter: CallMeter,
}

impl Exchange {
    pub fn new(tap: Arc<CallTap>, now: Instant, wall: SystemTime) -> Self {
        // Links join a call to its compound request where no trace id
        // does: hashed when something joins (a correlator, or spans).
        let meter =
            CallMeter::new(tap.protocol, CallLimits::default(), now, wall).with_links(tap.joins());
        Exchange { tap, meter }
    }
}

impl RequestCtx {
    /// Runs `f` on the exchange's `CallMeter`, if this tap reads calls.
    pub(super) fn calls(&mut self, f: impl FnOnce(&mut CallMeter, &mut CallOut<'_>)) {
        let fault = self.sink_fault;
        let Some(x) = self.calls.as_mut() else {
            return;
        };
        let ran = catch_unwind(AssertUnwindSafe(|| {
            let mut out = CallOut { tap: &x.tap, fault };
            f(&mut x.meter, &mut out);
        }));
        if ran.is_err() {
            if let Some(x) = self.calls.take() {
                x.tap.panicked();
            }
        }
    }

    /// The request head, as calls read it: method, path with query,
    /// `traceparent` (unless the tap's tracing is off), `x-request-id`.
    pub fn call_head(
        &mut self,
        method: &str,
        path: &str,
        traceparent: Option<&[u8]>,
        id: Option<&[u8]>,
    ) {
        let trace = match self.settings.config.trace {
            TraceMode::Off => None,
            _ => traceparent.and_then(TraceParent::parse),
        };
        let request_id = id.and_then(|v| std::str::from_utf8(v).ok());
        self.calls(|m, _| {
            m.request_head(&CallHead {
                method,
                path,
                trace,
                request_id,
            })
        });
    }
}
