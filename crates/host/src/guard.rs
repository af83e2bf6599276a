//! `Guarded`: a pingora application behind its listener's limits — a cap
//! on open connections (over it: a `503` or a close, as the limits say,
//! before a byte is read) and the request-head deadline
//! (`deadline::HeadDeadline`). The limits are read from the listener's
//! `Admission` at each accept, so a tap's reload applies to new
//! connections; refusals and open connections are counted there.

use crate::deadline::HeadDeadline;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::limits::{Admission, Reject, RejectReason};
use tokio::io::AsyncWriteExt;

const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n";

pub struct Guarded<A> {
    inner: Arc<A>,
    admission: Arc<dyn Admission>,
    open: Arc<AtomicUsize>,
}

/// One admitted connection: counted while it lives.
pub struct Slot {
    open: Arc<AtomicUsize>,
    admission: Arc<dyn Admission>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.admission.connections(-1);
    }
}

/// Admits a connection if fewer than `max` are open: the slot that keeps
/// it counted, or `None` (refused, not counted as open).
pub fn admit(open: &Arc<AtomicUsize>, admission: &Arc<dyn Admission>, max: usize) -> Option<Slot> {
    let admitted = open
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok();
    admitted.then(|| {
        admission.connections(1);
        Slot {
            open: open.clone(),
            admission: admission.clone(),
        }
    })
}

impl<A> Guarded<A> {
    pub fn new(inner: A, admission: Arc<dyn Admission>) -> Self {
        Guarded {
            inner: Arc::new(inner),
            admission,
            open: Arc::new(AtomicUsize::new(0)),
        }
    }
}

#[async_trait]
impl<A> ServerApp for Guarded<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let limits = self.admission.limits();
        let Some(_slot) = admit(&self.open, &self.admission, limits.max_connections) else {
            self.admission.refused(RejectReason::TooManyConnections);
            if limits.reject == Reject::Respond {
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    stream.write_all(OVER_CAPACITY).await?;
                    stream.flush().await
                })
                .await;
            }
            return None;
        };
        let admission = self.admission.clone();
        let on_timeout = Arc::new(move || admission.refused(RejectReason::HeaderTimeout));
        let guarded: Stream =
            Box::new(HeadDeadline::new(stream, limits.header_timeout, on_timeout));
        self.inner.process_new(guarded, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}
