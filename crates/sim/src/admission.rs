//! KV-capacity admission: which request may start generating, and when.
//!
//! Owns: the tokens of KV in use, the requests running, and the queue of
//! requests waiting for capacity. A request needs a number of tokens (its
//! prompt plus its planned output); it is admitted when that much is free
//! and it is at the head of the queue. Admission is strictly in queue order
//! (head of line: a large request at the head holds back smaller ones
//! behind it), with one exception, the unfair mode: requests of the
//! favoured tenant queue ahead of everyone else (FIFO among themselves).
//! A request needing more than the whole capacity is refused at once.
//! Capacity 0 means unlimited: nothing ever waits, but running requests are
//! still counted (the batch size slows generation down).
//!
//! The capacity comes back when the [`Permit`] is dropped (response done,
//! aborted, or the client gone). A waiter that is dropped leaves the queue.
//! Waiting is a oneshot channel that carries the permit itself, so a permit
//! granted to a waiter that has just gone away is dropped with the channel
//! and released: nothing leaks, nothing polls.
//!
//! Does not own: what a token costs, the prefix cache, timing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The request needs more KV than the whole capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request needs {need} tokens of KV, more than the capacity of {capacity}")]
pub struct TooLarge {
    pub need: u64,
    pub capacity: u64,
}

/// The right to generate; gives its tokens back when dropped.
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    need: u64,
    /// Requests running when this one was admitted, itself included.
    pub running: u32,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.release(self.need);
    }
}

struct Waiter {
    id: u64,
    need: u64,
    tx: oneshot::Sender<Permit>,
}

#[derive(Default)]
struct State {
    used: u64,
    running: u32,
    favoured: VecDeque<Waiter>,
    others: VecDeque<Waiter>,
    next_id: u64,
}

/// The admission controller of one simulator.
#[derive(Debug)]
pub struct Admission {
    /// Tokens of KV; 0 = unlimited.
    capacity: u64,
    favoured_tenant: Option<String>,
    state: Mutex<State>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("used", &self.used)
            .field("running", &self.running)
            .field("queued", &(self.favoured.len() + self.others.len()))
            .finish()
    }
}

/// Removes a waiter from the queue if its future is dropped before admission.
struct Leave<'a> {
    admission: &'a Arc<Admission>,
    id: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let refused = {
            let mut st = self.admission.lock();
            st.favoured.retain(|w| w.id != self.id);
            st.others.retain(|w| w.id != self.id);
            // The head may have changed: whoever is next may fit now.
            self.admission.pump(&mut st)
        };
        drop(refused);
    }
}

impl Admission {
    pub fn new(capacity_tokens: u64, favoured_tenant: Option<String>) -> Arc<Self> {
        Arc::new(Admission {
            capacity: capacity_tokens,
            favoured_tenant,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counters torn
        // (every update is a single statement), so a poisoned lock is used as is.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tokens of KV in all (0 = unlimited).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens of KV in use.
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    /// Requests admitted and not yet released.
    pub fn running(&self) -> u32 {
        self.lock().running
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        let st = self.lock();
        st.favoured.len() + st.others.len()
    }

    /// Waits until `need` tokens are free and every request queued before
    /// this one was admitted. Cancel-safe: dropping the future leaves the queue.
    pub async fn admit(self: &Arc<Self>, need: u64, tenant: &str) -> Result<Permit, TooLarge> {
        if self.capacity > 0 && need > self.capacity {
            return Err(TooLarge {
                need,
                capacity: self.capacity,
            });
        }
        let (tx, rx) = oneshot::channel();
        let favoured = self.favoured_tenant.as_deref() == Some(tenant);
        let (id, refused) = {
            let mut st = self.lock();
            let id = st.next_id;
            st.next_id += 1;
            let w = Waiter { id, need, tx };
            if favoured {
                st.favoured.push_back(w);
            } else {
                st.others.push_back(w);
            }
            (id, self.pump(&mut st))
        };
        drop(refused);
        let leave = Leave {
            admission: self,
            id,
        };
        // The sender is only dropped by granting (the permit travels in the
        // channel) or by `Leave`, which this future owns: `Err` cannot happen
        // while we wait, but is answered like a refusal rather than a panic.
        let permit = rx.await.map_err(|_| TooLarge {
            need,
            capacity: self.capacity,
        });
        drop(leave);
        permit
    }

    /// Admits queued requests in order while the head fits. Permits whose
    /// waiter is gone are returned, to be dropped (released) after the lock.
    fn pump(self: &Arc<Self>, st: &mut State) -> Vec<Permit> {
        let mut refused = Vec::new();
        loop {
            let queue = if st.favoured.is_empty() {
                &mut st.others
            } else {
                &mut st.favoured
            };
            let fits = match queue.front() {
                Some(w) => self.capacity == 0 || st.used + w.need <= self.capacity,
                None => false,
            };
            if !fits {
                return refused;
            }
            let Some(w) = queue.pop_front() else {
                return refused;
            };
            st.used += w.need;
            st.running += 1;
            let permit = Permit {
                admission: self.clone(),
                need: w.need,
                running: st.running,
            };
            if let Err(p) = w.tx.send(permit) {
                refused.push(p);
            }
        }
    }

    fn release(self: &Arc<Self>, need: u64) {
        let refused = {
            let mut st = self.lock();
            st.used = st.used.saturating_sub(need);
            st.running = st.running.saturating_sub(1);
            self.pump(&mut st)
        };
        drop(refused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    /// Starts a waiter that reports its label when admitted and holds its
    /// permit until told to drop it (by closing `hold`).
    fn waiter(
        adm: &Arc<Admission>,
        label: &'static str,
        need: u64,
        tenant: &'static str,
        admitted: mpsc::UnboundedSender<&'static str>,
    ) -> (tokio::task::JoinHandle<()>, oneshot::Sender<()>) {
        let adm = adm.clone();
        let (hold_tx, hold_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let permit = adm.admit(need, tenant).await.unwrap();
            admitted.send(label).unwrap();
            let _ = hold_rx.await;
            drop(permit);
        });
        (task, hold_tx)
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<&'static str>) -> Vec<&'static str> {
        let mut v = Vec::new();
        while let Ok(x) = rx.try_recv() {
            v.push(x);
        }
        v
    }

    #[tokio::test]
    async fn fifo_head_of_line() {
        let adm = Admission::new(100, None);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_a, hold_a) = waiter(&adm, "a", 60, "", tx.clone());
        settle().await;
        let (_b, hold_b) = waiter(&adm, "b", 50, "", tx.clone());
        settle().await;
        // c would fit (60 + 30 ≤ 100) but b is ahead of it.
        let (_c, _hold_c) = waiter(&adm, "c", 30, "", tx.clone());
        settle().await;
        assert_eq!(drain(&mut rx), vec!["a"]);
        assert_eq!((adm.used(), adm.running(), adm.queued()), (60, 1, 2));
        drop(hold_a);
        settle().await;
        assert_eq!(drain(&mut rx), vec!["b", "c"]);
        assert_eq!((adm.used(), adm.running(), adm.queued()), (80, 2, 0));
        drop(hold_b);
        settle().await;
        assert_eq!(adm.used(), 30);
    }

    #[tokio::test]
    async fn favoured_tenant_goes_first() {
        let adm = Admission::new(100, Some("vip".into()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_a, hold_a) = waiter(&adm, "a", 100, "t1", tx.clone());
        settle().await;
        let (_b, _hb) = waiter(&adm, "b", 100, "t1", tx.clone());
        settle().await;
        let (_v1, hold_v1) = waiter(&adm, "v1", 100, "vip", tx.clone());
        settle().await;
        let (_v2, hold_v2) = waiter(&adm, "v2", 100, "vip", tx.clone());
        settle().await;
        assert_eq!(drain(&mut rx), vec!["a"]);
        drop(hold_a);
        settle().await;
        assert_eq!(drain(&mut rx), vec!["v1"]);
        drop(hold_v1);
        settle().await;
        assert_eq!(drain(&mut rx), vec!["v2"]);
        drop(hold_v2);
        settle().await;
        assert_eq!(drain(&mut rx), vec!["b"]);
    }

    #[tokio::test]
    async fn oversize_is_refused_at_once() {
        let adm = Admission::new(100, None);
        let err = adm.admit(101, "").await.unwrap_err();
        assert_eq!(
            err,
            TooLarge {
                need: 101,
                capacity: 100
            }
        );
        assert_eq!((adm.used(), adm.queued()), (0, 0));
        // Unlimited: anything goes, and running requests are counted.
        let free = Admission::new(0, None);
        let p1 = free.admit(1 << 40, "").await.unwrap();
        let p2 = free.admit(1 << 40, "").await.unwrap();
        assert_eq!((p1.running, p2.running, free.running()), (1, 2, 2));
        drop(p1);
        assert_eq!(free.running(), 1);
    }

    #[tokio::test]
    async fn release_on_drop_and_cancelled_waiters_leave() {
        let adm = Admission::new(100, None);
        let held = adm.admit(80, "").await.unwrap();
        // A waiter that gives up (its client went away) leaves the queue and
        // does not hold back the one behind it.
        let gone = tokio::time::timeout(Duration::from_millis(10), adm.admit(50, "")).await;
        assert!(gone.is_err());
        assert_eq!(adm.queued(), 0);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_c, _hold_c) = waiter(&adm, "c", 20, "", tx.clone());
        settle().await;
        assert_eq!(drain(&mut rx), vec!["c"]);
        drop(held);
        assert_eq!((adm.used(), adm.running()), (20, 1));
        // A permit granted to a waiter that vanished before taking it is
        // released with the channel.
        let adm = Admission::new(10, None);
        let first = adm.admit(10, "").await.unwrap();
        let adm2 = adm.clone();
        let task = tokio::spawn(async move { adm2.admit(10, "").await.map(|_| ()) });
        settle().await;
        assert_eq!(adm.queued(), 1);
        task.abort();
        drop(first);
        settle().await;
        assert_eq!((adm.used(), adm.running(), adm.queued()), (0, 0, 0));
    }
}
