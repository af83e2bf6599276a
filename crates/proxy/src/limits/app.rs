//! `GuardedApp`: a tap's pingora application (`HttpProxy`) behind the
//! connection-level limits — a cap on open client connections (over it: a
//! `503` or a close, as configured, before a byte is read) and the
//! request-head deadline (`stream::HeadDeadline`). Limits are read from the
//! tap's current settings at each accept, so a reload applies to new
//! connections.

use super::stream::HeadDeadline;
use crate::metrics::InFlight as Gauge;
use crate::proxy::Tap;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::limits::{Reject, RejectReason};
use tokio::io::AsyncWriteExt;

const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n";

pub struct GuardedApp<A> {
    inner: Arc<A>,
    tap: Arc<Tap>,
    open: Arc<AtomicUsize>,
    gauge: Gauge,
}

/// One admitted connection: counted while it lives.
struct Slot {
    open: Arc<AtomicUsize>,
    gauge: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.gauge.add(-1);
    }
}

impl<A> GuardedApp<A> {
    pub fn new(inner: A, tap: Arc<Tap>) -> Self {
        let gauge = tap
            .metrics
            .tap_gauge(&tokentap_core::table::CONNECTIONS_OPEN, &tap.labels);
        GuardedApp {
            inner: Arc::new(inner),
            tap,
            open: Arc::new(AtomicUsize::new(0)),
            gauge,
        }
    }

    fn admit(&self, max: usize) -> Option<Slot> {
        let admitted = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        admitted.then(|| {
            self.gauge.add(1);
            Slot {
                open: self.open.clone(),
                gauge: self.gauge.clone(),
            }
        })
    }
}

#[async_trait]
impl<A> ServerApp for GuardedApp<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let limits = self.tap.settings().config.clients.clone();
        let Some(_slot) = self.admit(limits.max_connections) else {
            self.tap.rejected(RejectReason::TooManyConnections);
            if limits.reject == Reject::Respond {
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    stream.write_all(OVER_CAPACITY).await?;
                    stream.flush().await
                })
                .await;
            }
            return None;
        };
        let tap = self.tap.clone();
        let on_timeout = Arc::new(move || tap.rejected(RejectReason::HeaderTimeout));
        let guarded: Stream =
            Box::new(HeadDeadline::new(stream, limits.header_timeout, on_timeout));
        self.inner.process_new(guarded, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}
