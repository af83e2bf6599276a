// Patched by tokentap (pingora-core 0008): idle upstream connections kept
// without a task per connection.

//! Idle upstream connections, kept without a task per connection.
//!
//! `pingora_pool::ConnectionPool`, as `TransportConnector` used it, spawns a
//! task for every connection put back: it holds the stream's lock and
//! watches it for the peer's close, unexpected data and the idle timeout,
//! and it must be woken and finished before the next request can take the
//! connection (a `oneshot` send, a poll of that task, the lock handed over,
//! a second poll of the request). For a proxy that reuses one connection per
//! request that is a task spawned and two extra polls per request.
//!
//! Here a connection put back is only stored, newest last, under its peer's
//! reuse hash. Whether it is still usable is asked when it is taken
//! (`test_reusable_stream`: closed, broken or carrying unexpected data means
//! discarded, and the next one is tried). One sweeper task per pool sleeps
//! until the earliest idle deadline and then drops the connections past
//! theirs, and those the peer closed meanwhile; with nothing pooled it
//! sleeps until a connection is put back. A connection the peer closed can
//! so stay open on this side (in CLOSE_WAIT) until it is taken or until its
//! own idle deadline (or until evicted, without one); at most `size`
//! connections are kept, the least recently pooled one evicted first.

use crate::protocols::Stream;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One pooled connection.
struct Idle {
    stream: Stream,
    since: Instant,
    deadline: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    /// Per reuse hash, oldest first.
    by_key: HashMap<u64, VecDeque<Idle>>,
    count: usize,
    /// When the sweeper wakes next (`None`: when notified).
    next_sweep: Option<Instant>,
    sweeper: bool,
}

/// The idle connections of one `TransportConnector`.
pub(crate) struct IdlePool {
    size: usize,
    inner: Mutex<Inner>,
    /// Wakes the sweeper: an earlier deadline, or the pool dropped.
    wake: Arc<Notify>,
}

impl IdlePool {
    pub(crate) fn new(size: usize) -> Self {
        IdlePool {
            size,
            inner: Mutex::new(Inner::default()),
            wake: Arc::new(Notify::new()),
        }
    }

    /// Keeps `stream` for a later request to the same peer. Returns how long
    /// the connection evicted to make room (if any) had been idle.
    pub(crate) fn put(
        self: &Arc<Self>,
        key: u64,
        stream: Stream,
        idle_timeout: Option<Duration>,
    ) -> Option<Duration> {
        if self.size == 0 {
            return None;
        }
        let now = Instant::now();
        let deadline = idle_timeout.and_then(|t| now.checked_add(t));
        let (evicted, start_sweeper, wake) = {
            let mut inner = self.inner.lock();
            let evicted = if inner.count >= self.size {
                inner.pop_oldest()
            } else {
                None
            };
            inner.by_key.entry(key).or_default().push_back(Idle {
                stream,
                since: now,
                deadline,
            });
            inner.count += 1;
            // The sweeper wakes earlier only for an earlier deadline.
            let wake = deadline.is_some_and(|d| inner.next_sweep.is_none_or(|next| d < next));
            if wake {
                inner.next_sweep = deadline;
            }
            let start_sweeper = !inner.sweeper && tokio::runtime::Handle::try_current().is_ok();
            inner.sweeper |= start_sweeper;
            (evicted, start_sweeper, wake)
        };
        if start_sweeper {
            tokio::spawn(sweep(Arc::downgrade(self), self.wake.clone()));
        } else if wake {
            self.wake.notify_one();
        }
        evicted.map(|idle| idle.since.elapsed())
    }

    /// The most recently pooled connection to this peer, not yet tested for
    /// reuse.
    pub(crate) fn take(&self, key: u64) -> Option<Stream> {
        let mut inner = self.inner.lock();
        let queue = inner.by_key.get_mut(&key)?;
        let idle = queue.pop_back()?;
        if queue.is_empty() {
            inner.by_key.remove(&key);
        }
        inner.count -= 1;
        Some(idle.stream)
    }

    /// Drops what is past its deadline or no longer reusable, and notes
    /// when to look again.
    fn sweep_at(&self, now: Instant, unexpected_data: &AtomicU64) {
        let mut dropped = Vec::new();
        let mut inner = self.inner.lock();
        let mut next: Option<Instant> = None;
        let mut count = 0;
        inner.by_key.retain(|_, queue| {
            let mut kept = VecDeque::with_capacity(queue.len());
            for mut idle in queue.drain(..) {
                let expired = idle.deadline.is_some_and(|d| d <= now);
                if expired || !super::test_reusable_stream(&mut idle.stream, unexpected_data) {
                    dropped.push(idle);
                } else {
                    next = match (next, idle.deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    kept.push_back(idle);
                }
            }
            count += kept.len();
            *queue = kept;
            !queue.is_empty()
        });
        inner.count = count;
        inner.next_sweep = next;
        drop(inner);
        drop(dropped); // closes them, outside the lock
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().count
    }
}

impl Inner {
    /// The connection pooled longest ago, across peers.
    fn pop_oldest(&mut self) -> Option<Idle> {
        let key = self
            .by_key
            .iter()
            .filter_map(|(k, q)| q.front().map(|i| (*k, i.since)))
            .min_by_key(|(_, since)| *since)
            .map(|(k, _)| k)?;
        let queue = self.by_key.get_mut(&key)?;
        let idle = queue.pop_front();
        if queue.is_empty() {
            self.by_key.remove(&key);
        }
        self.count -= usize::from(idle.is_some());
        idle
    }
}

impl Drop for IdlePool {
    fn drop(&mut self) {
        // The sweeper holds only a weak reference: let it see the end.
        self.wake.notify_one();
    }
}

/// The pool's one sweeper task; ends when the pool is dropped.
async fn sweep(pool: Weak<IdlePool>, wake: Arc<Notify>) {
    // Unexpected data the sweeper finds closes the connection uncounted, as
    // pingora's per-connection watcher did; the connector's counter counts
    // what `test_reusable_stream` finds when a connection is put back or
    // taken.
    let unexpected = AtomicU64::new(0);
    loop {
        // A notification sent while this reads `next_sweep` is kept as a
        // permit by `Notify`: not lost.
        let Some(next) = pool.upgrade().map(|p| p.inner.lock().next_sweep) else {
            return;
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                }
            }
            None => wake.notified().await,
        }
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.sweep_at(Instant::now(), &unexpected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let stream: Stream = Box::new(crate::protocols::l4::stream::Stream::from(client));
        (stream, server)
    }

    #[tokio::test]
    async fn takes_the_newest_of_its_peer_and_none_of_another() {
        let pool = Arc::new(IdlePool::new(8));
        let (a, _sa) = pair().await;
        let (b, _sb) = pair().await;
        let (a_id, b_id) = (a.id(), b.id());
        pool.put(1, a, None);
        pool.put(1, b, None);
        assert!(pool.take(2).is_none());
        assert_eq!(pool.take(1).map(|s| s.id()), Some(b_id));
        assert_eq!(pool.take(1).map(|s| s.id()), Some(a_id));
        assert!(pool.take(1).is_none());
        assert_eq!(pool.len(), 0);
    }

    #[tokio::test]
    async fn a_full_pool_evicts_the_one_pooled_longest_ago() {
        let pool = Arc::new(IdlePool::new(2));
        let (a, _sa) = pair().await;
        let (b, _sb) = pair().await;
        let (c, _sc) = pair().await;
        let (b_id, c_id) = (b.id(), c.id());
        assert!(pool.put(1, a, None).is_none());
        assert!(pool.put(2, b, None).is_none());
        assert!(pool.put(3, c, None).is_some());
        assert_eq!(pool.len(), 2);
        assert!(pool.take(1).is_none());
        assert_eq!(pool.take(2).map(|s| s.id()), Some(b_id));
        assert_eq!(pool.take(3).map(|s| s.id()), Some(c_id));
    }

    #[tokio::test]
    async fn the_sweeper_closes_a_connection_at_its_idle_deadline() {
        let pool = Arc::new(IdlePool::new(8));
        let (a, mut server) = pair().await;
        pool.put(1, a, Some(Duration::from_millis(50)));
        let (b, _sb) = pair().await;
        pool.put(2, b, None);
        // The server side sees the close (end of stream) once swept.
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(&mut server, &mut buf),
        )
        .await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        assert_eq!(pool.len(), 1);
        assert!(pool.take(1).is_none());
    }

    #[tokio::test]
    async fn the_sweeper_drops_a_connection_its_peer_closed() {
        let pool = Arc::new(IdlePool::new(8));
        let (a, server) = pair().await;
        let (b, _sb) = pair().await;
        pool.put(1, a, None);
        pool.put(2, b, Some(Duration::from_millis(50)));
        drop(server);
        // Swept at the other connection's deadline: both are gone.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(pool.len(), 0);
    }

    #[tokio::test]
    async fn unexpected_data_is_not_reused() {
        let pool = Arc::new(IdlePool::new(8));
        let (a, mut server) = pair().await;
        pool.put(1, a, None);
        server.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut s = pool.take(1).unwrap();
        let count = AtomicU64::new(0);
        assert!(!super::super::test_reusable_stream(&mut s, &count));
        assert_eq!(count.into_inner(), 1);
    }
}
