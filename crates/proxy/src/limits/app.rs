//! A tap's `Admission`: its listener's limits read from the tap's current
//! settings at each accept (so a reload applies to new connections), its
//! refusals counted in `tokentap_rejected_total{tap,boundary,reason}`, its
//! open connections in `tokentap_client_connections`. The host's
//! `Guarded` applies them (`tokentap_host::guard`).

use crate::metrics::InFlight as Gauge;
use crate::proxy::Tap;
use std::sync::Arc;
use tokentap_core::limits::{Admission, ListenerLimits, RejectReason};

pub struct TapAdmission {
    tap: Arc<Tap>,
    gauge: Gauge,
}

impl TapAdmission {
    pub fn new(tap: Arc<Tap>) -> Arc<Self> {
        let gauge = tap
            .metrics
            .tap_gauge(&tokentap_core::table::CONNECTIONS_OPEN, &tap.labels);
        Arc::new(TapAdmission { tap, gauge })
    }
}

impl Admission for TapAdmission {
    fn limits(&self) -> ListenerLimits {
        let c = &self.tap.settings().config.clients;
        ListenerLimits {
            max_connections: c.max_connections,
            header_timeout: c.header_timeout,
            reject: c.reject,
        }
    }

    fn refused(&self, why: RejectReason) {
        self.tap.rejected(why);
    }

    fn connections(&self, delta: i64) {
        self.gauge.add(delta);
    }
}
