//! The admission of a listener that is not a tap (the admin endpoints,
//! the joiner's receivers): fixed limits, refusals counted in
//! `tokentap_listener_refused_total{listener,reason}` and open connections
//! in `tokentap_listener_connections{listener}`.

use crate::registry::{Level, Registry};
use std::sync::Arc;
use tokentap_core::labels::{ListenerLabels, ListenerName, ListenerRefusals};
use tokentap_core::limits::{Admission, ListenerLimits, RejectReason};
use tokentap_core::table;

pub struct ListenerAdmission {
    limits: ListenerLimits,
    registry: Arc<Registry>,
    labels: ListenerLabels,
    open: Level,
}

impl ListenerAdmission {
    /// Also creates the listener's series at 0.
    pub fn new(name: ListenerName, limits: ListenerLimits, registry: Arc<Registry>) -> Arc<Self> {
        let labels = ListenerLabels { listener: name };
        for reason in RejectReason::ALL {
            registry.touch(
                &table::LISTENER_REFUSED,
                &ListenerRefusals {
                    listener: labels.clone(),
                    reason,
                },
            );
        }
        let open = registry.level(&table::LISTENER_CONNECTIONS, &labels);
        Arc::new(ListenerAdmission {
            limits,
            registry,
            labels,
            open,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> i64 {
        self.open.get()
    }
}

impl Admission for ListenerAdmission {
    fn limits(&self) -> ListenerLimits {
        self.limits
    }

    fn refused(&self, reason: RejectReason) {
        let labels = ListenerRefusals {
            listener: self.labels.clone(),
            reason,
        };
        self.registry.add(&table::LISTENER_REFUSED, &labels, 1);
        tracing::debug!(
            listener = self.labels.listener.as_str(),
            reason = reason.as_str(),
            "refused"
        );
    }

    fn connections(&self, delta: i64) {
        self.open.add(delta);
    }
}
