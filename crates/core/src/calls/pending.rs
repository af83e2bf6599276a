//! The tap-wide table of MCP calls whose answers arrive on another HTTP
//! exchange: the 2024-11-05 HTTP+SSE transport POSTs a request (answered
//! `202 Accepted`) and the answer comes as an event of the session's SSE
//! stream, matched by session and JSON-RPC id.
//!
//! Bounded: at most `max` calls (the oldest is evicted and counted when a
//! new one comes), each at most `timeout` old (then it is emitted as a call
//! that ended in `timeout`). Keys are hashes: the session id (a bearer of
//! the session) is never kept.

use super::exchange::Started;
use super::jsonrpc::Id;
use super::{Call, McpError};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Default bound of a tap's table.
pub const DEFAULT_MAX: usize = 4_096;
/// Default time a call waits for its answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

type Key = (u64, Id);

/// The table.
#[derive(Debug)]
pub struct Pending {
    max: usize,
    timeout: Duration,
    calls: HashMap<Key, (u64, Started)>,
    /// Insertion order (sequence → key): eviction and expiry from the front.
    order: BTreeMap<u64, Key>,
    /// (session, progress token) → the call it reports on.
    progress: HashMap<(u64, u64), Id>,
    seq: u64,
}

impl Default for Pending {
    fn default() -> Self {
        Pending::new(DEFAULT_MAX, DEFAULT_TIMEOUT)
    }
}

impl Pending {
    pub fn new(max: usize, timeout: Duration) -> Self {
        Pending {
            max: max.max(1),
            timeout,
            calls: HashMap::new(),
            order: BTreeMap::new(),
            progress: HashMap::new(),
            seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Adds a call of session `session`; returns how many were evicted to
    /// make room (emitted as `evicted` counts by the caller).
    pub fn insert(&mut self, session: u64, id: Id, call: Started) -> u64 {
        let mut evicted = 0;
        if let Some((seq, old)) = self.calls.remove(&(session, id)) {
            // A reused id: the older call will get no answer of its own.
            self.order.remove(&seq);
            self.forget_progress(session, &old);
            evicted += 1;
        }
        while self.calls.len() >= self.max {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, old)) = self.calls.remove(&key) {
                self.forget_progress(key.0, &old);
                evicted += 1;
            }
        }
        self.seq += 1;
        if let Some(t) = call.progress_token {
            self.progress.insert((session, t), id);
        }
        self.order.insert(self.seq, (session, id));
        self.calls.insert((session, id), (self.seq, call));
        evicted
    }

    fn forget_progress(&mut self, session: u64, call: &Started) {
        if let Some(t) = call.progress_token {
            self.progress.remove(&(session, t));
        }
    }

    /// Takes the call an answer of session `session` names.
    pub fn take(&mut self, session: u64, id: Id) -> Option<Started> {
        let (seq, call) = self.calls.remove(&(session, id))?;
        self.order.remove(&seq);
        self.forget_progress(session, &call);
        Some(call)
    }

    /// Takes every call of a session (its stream ended: nothing will
    /// answer them). O(n) in the table, once per stream.
    pub fn take_session(&mut self, session: u64) -> Vec<Started> {
        let keys: Vec<(u64, Key)> = self
            .order
            .iter()
            .filter(|(_, k)| k.0 == session)
            .map(|(s, k)| (*s, *k))
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for (seq, key) in keys {
            self.order.remove(&seq);
            if let Some((_, c)) = self.calls.remove(&key) {
                self.forget_progress(session, &c);
                out.push(c);
            }
        }
        out
    }

    /// A progress notification of session `session` at `at`.
    pub fn progress(&mut self, session: u64, token: u64, at: Instant) -> bool {
        let Some(id) = self.progress.get(&(session, token)).copied() else {
            return false;
        };
        match self.calls.get_mut(&(session, id)) {
            Some((_, c)) => {
                c.progressed(at);
                true
            }
            None => false,
        }
    }

    /// Emits every call older than the timeout as ended in `timeout`.
    pub fn expire(&mut self, now: Instant, emit: &mut dyn FnMut(Call)) {
        while let Some((&seq, &key)) = self.order.first_key_value() {
            let Some((_, c)) = self.calls.get(&key) else {
                self.order.remove(&seq);
                continue;
            };
            if now.saturating_duration_since(c.t0) < self.timeout {
                return;
            }
            self.order.remove(&seq);
            if let Some((_, c)) = self.calls.remove(&key) {
                self.forget_progress(key.0, &c);
                let at = c.t0 + self.timeout;
                emit(c.fail(at, McpError::Timeout));
            }
        }
    }
}
