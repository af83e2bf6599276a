//! The correlator: collects the records of every tap in this process, groups
//! them by trace id, lets each group settle (no new record for `settle`, and
//! no request of that trace still in flight at any tap — an input guardrail
//! call ends long before the stream it guards), then resolves it and
//! reports the result.
//!
//! Records without a trace id wait as *loose* records until they settle;
//! then a loose record joins the one group (trace group or other loose
//! record) holding a record of another tap with the same fingerprint whose
//! start lies within `fingerprint_window` and whose interval overlaps its
//! own. More than one such group is *ambiguous*: counted and left unjoined,
//! never guessed. Memory is bounded: at most `max_groups` groups and as many
//! loose records (the oldest are evicted and counted), at most
//! `MAX_PER_GROUP` records per group.

use super::resolve::resolve;
use super::types::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Records kept per group (a request crossing more taps is unusual).
pub const MAX_PER_GROUP: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorrelationConfig {
    /// A group is resolved once no record joined it for this long ...
    pub settle: Duration,
    /// ... or once its first record is this old (a long-lived trace id,
    /// such as an agent session, never keeps a group open).
    pub max_age: Duration,
    pub max_groups: usize,
    /// Largest start difference for a fingerprint join.
    pub fingerprint_window: Duration,
    /// Token-event offsets kept per record (for relay delay and jitter).
    pub max_events: usize,
    /// Share of the inner stream that passed before the outer's first token
    /// from which a layer counts as buffering.
    pub buffered_share: f64,
    /// Whether the records' instants share one clock (one process) or
    /// each tap has its own (the joiner): what can be attributed depends
    /// on it (see `resolve`).
    pub clocks: Clocks,
}

crate::labels::label_enum! {
    /// What happened to a record, once (the `result` label).
    pub enum Joined {
        /// In a group of two or more, by trace id.
        Trace = "joined_trace",
        /// In a group of two or more, added by fingerprint.
        Fingerprint = "joined_fingerprint",
        /// Alone: no other tap saw the same request.
        Unjoined = "unjoined",
        /// Several groups matched its fingerprint: left alone.
        Ambiguous = "ambiguous",
        /// Dropped to keep memory bounded.
        Evicted = "evicted",
    }
}

/// Receives what the correlator concluded. Called from the sweeper thread.
pub trait AttributionSink: Send + Sync {
    fn resolved(&self, resolution: &Resolution);
    fn counted(&self, result: Joined, n: u64);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Trace([u8; 16]),
    Joined(u64),
}

struct Group {
    records: Vec<TapRecord>,
    /// How each record entered the group.
    kinds: Vec<JoinKind>,
    first: Instant,
    last: Instant,
}

struct Loose {
    record: TapRecord,
    arrived: Instant,
}

#[derive(Default)]
struct State {
    groups: HashMap<Key, Group>,
    loose: Vec<Loose>,
    next_key: u64,
    /// Requests in flight per trace id, at every tap (at most one entry per
    /// request in flight: bounded by the taps' own limits).
    open: HashMap<[u8; 16], u32>,
}

/// Holds a trace open in the correlator while its request is in flight
/// (`Correlator::open`); closes it when dropped, however the request ended.
pub struct OpenTrace {
    correlator: Weak<Correlator>,
    trace_id: [u8; 16],
}

impl Drop for OpenTrace {
    fn drop(&mut self) {
        if let Some(c) = self.correlator.upgrade() {
            if let Ok(mut st) = c.state.lock() {
                if let Some(n) = st.open.get_mut(&self.trace_id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        st.open.remove(&self.trace_id);
                    }
                }
            }
        }
    }
}

pub struct Correlator {
    config: CorrelationConfig,
    state: Mutex<State>,
    sinks: Vec<Arc<dyn AttributionSink>>,
}

impl Correlator {
    pub fn new(config: CorrelationConfig, sinks: Vec<Arc<dyn AttributionSink>>) -> Arc<Self> {
        Arc::new(Correlator {
            config,
            state: Mutex::new(State::default()),
            sinks,
        })
    }

    pub fn config(&self) -> &CorrelationConfig {
        &self.config
    }

    fn count(&self, result: Joined, n: u64) {
        if n > 0 {
            for s in &self.sinks {
                s.counted(result, n);
            }
        }
    }

    /// A request of this trace started at some tap: its group does not
    /// settle before the returned guard is dropped (or `max_age` passes).
    pub fn open(self: &Arc<Self>, trace_id: [u8; 16]) -> OpenTrace {
        if let Ok(mut st) = self.state.lock() {
            *st.open.entry(trace_id).or_insert(0) += 1;
        }
        OpenTrace {
            correlator: Arc::downgrade(self),
            trace_id,
        }
    }

    /// Adds a finished request's record.
    pub fn submit(&self, record: TapRecord, now: Instant) {
        let mut evicted = 0u64;
        if let Ok(mut st) = self.state.lock() {
            match record.trace {
                Some(t) => {
                    let g = st
                        .groups
                        .entry(Key::Trace(t.trace_id))
                        .or_insert_with(|| Group {
                            records: Vec::new(),
                            kinds: Vec::new(),
                            first: now,
                            last: now,
                        });
                    if g.records.len() < MAX_PER_GROUP {
                        g.records.push(record);
                        g.kinds.push(JoinKind::Trace);
                        g.last = now;
                    } else {
                        evicted += 1;
                    }
                }
                None => st.loose.push(Loose {
                    record,
                    arrived: now,
                }),
            }
            evicted += self.enforce_bounds(&mut st);
        }
        self.count(Joined::Evicted, evicted);
    }

    fn enforce_bounds(&self, st: &mut State) -> u64 {
        let mut evicted = 0;
        while st.groups.len() > self.config.max_groups {
            let oldest = st
                .groups
                .iter()
                .min_by_key(|(_, g)| g.last)
                .map(|(k, _)| *k);
            match oldest.and_then(|k| st.groups.remove(&k)) {
                Some(g) => evicted += g.records.len() as u64,
                None => break,
            }
        }
        let excess = st.loose.len().saturating_sub(self.config.max_groups);
        if excess > 0 {
            st.loose.drain(..excess);
            evicted += excess as u64;
        }
        evicted
    }

    /// Joins settled loose records by fingerprint, then resolves and reports
    /// every settled group.
    pub fn sweep(&self, now: Instant) {
        let settled = |t: Instant| now.saturating_duration_since(t) >= self.config.settle;
        let mut done: Vec<Group> = Vec::new();
        let (mut unjoined, mut ambiguous) = (0u64, 0u64);
        if let Ok(mut st) = self.state.lock() {
            let mut i = 0;
            while i < st.loose.len() {
                let Some(l) = st.loose.get(i) else { break };
                if !settled(l.arrived) {
                    i += 1;
                    continue;
                }
                let l = st.loose.remove(i);
                match self.candidates(&st, &l.record) {
                    Match::None => {
                        unjoined += 1;
                    }
                    Match::Many => ambiguous += 1,
                    Match::Group(k) => {
                        if let Some(g) = st.groups.get_mut(&k) {
                            g.records.push(l.record);
                            g.kinds.push(JoinKind::Fingerprint);
                        }
                    }
                    Match::Loose(j) => {
                        if j < st.loose.len() {
                            let other = st.loose.remove(j);
                            let key = Key::Joined(st.next_key);
                            st.next_key += 1;
                            st.groups.insert(
                                key,
                                Group {
                                    records: vec![other.record, l.record],
                                    kinds: vec![JoinKind::Fingerprint, JoinKind::Fingerprint],
                                    first: now,
                                    last: now,
                                },
                            );
                            i = 0; // indices shifted
                        }
                    }
                }
            }
            let old = |t: Instant| now.saturating_duration_since(t) >= self.config.max_age;
            let in_flight = |k: &Key| matches!(k, Key::Trace(t) if st.open.contains_key(t));
            let ready: Vec<Key> = st
                .groups
                .iter()
                .filter(|(k, g)| (settled(g.last) && !in_flight(k)) || old(g.first))
                .map(|(k, _)| *k)
                .collect();
            for k in ready {
                if let Some(g) = st.groups.remove(&k) {
                    done.push(g);
                }
            }
        }
        self.count(Joined::Unjoined, unjoined);
        self.count(Joined::Ambiguous, ambiguous);
        for g in done {
            self.finish(g);
        }
    }

    fn finish(&self, g: Group) {
        if g.records.len() < 2 {
            self.count(Joined::Unjoined, g.records.len() as u64);
            // A lone guardrail call still counts as a call (phase unknown).
            let res = resolve(
                &g.records,
                |_, _| JoinKind::Trace,
                self.config.buffered_share,
                self.config.clocks,
            );
            if !res.hops.is_empty() {
                for s in &self.sinks {
                    s.resolved(&res);
                }
            }
            return;
        }
        let by_fp = g
            .kinds
            .iter()
            .filter(|k| **k == JoinKind::Fingerprint)
            .count() as u64;
        self.count(Joined::Fingerprint, by_fp);
        self.count(Joined::Trace, g.records.len() as u64 - by_fp);
        let kinds = &g.kinds;
        let how = |a: usize, b: usize| {
            if kinds.get(a) == Some(&JoinKind::Trace) && kinds.get(b) == Some(&JoinKind::Trace) {
                JoinKind::Trace
            } else {
                JoinKind::Fingerprint
            }
        };
        let res = resolve(
            &g.records,
            how,
            self.config.buffered_share,
            self.config.clocks,
        );
        for s in &self.sinks {
            s.resolved(&res);
        }
    }

    fn candidates(&self, st: &State, r: &TapRecord) -> Match {
        let Some(fp) = r.fingerprint else {
            return Match::None;
        };
        let overlap = |c: &TapRecord| match self.config.clocks {
            Clocks::Shared => c.t0 <= r.end() && r.t0 <= c.end(),
            // Wall clocks of different machines: the window is the bound.
            Clocks::PerTap => true,
        };
        let fits = |c: &TapRecord| {
            c.fingerprint == Some(fp)
                && c.tap != r.tap
                && c.t0.max(r.t0).saturating_duration_since(c.t0.min(r.t0))
                    <= self.config.fingerprint_window
                && overlap(c)
        };
        let mut found: Option<Match> = None;
        for (k, g) in &st.groups {
            // A group that already has this tap's record is another request.
            if g.records.iter().any(|c| c.tap == r.tap) {
                continue;
            }
            if g.records.iter().any(fits) {
                if found.is_some() {
                    return Match::Many;
                }
                found = Some(Match::Group(*k));
            }
        }
        for (j, l) in st.loose.iter().enumerate() {
            if fits(&l.record) {
                if found.is_some() {
                    return Match::Many;
                }
                found = Some(Match::Loose(j));
            }
        }
        found.unwrap_or(Match::None)
    }

    /// Records waiting (for tests and a gauge-like view).
    pub fn pending(&self) -> usize {
        self.state
            .lock()
            .map(|st| st.loose.len() + st.groups.values().map(|g| g.records.len()).sum::<usize>())
            .unwrap_or(0)
    }
}

enum Match {
    None,
    Many,
    Group(Key),
    Loose(usize),
}

#[cfg(test)]
mod tests;
