//! The correlator: collects the records of every tap (of this process, or
//! of the fleet's spans at the joiner), groups them by trace id, lets each
//! group settle (no new record for `settle`, and no request of that trace
//! still in flight at any tap — an input guardrail call ends long before
//! the stream it guards), then resolves it and reports the result.
//!
//! Records without a trace id wait as *loose* records until they settle;
//! then a loose record joins the one group (trace group or other loose
//! record) holding a record of another tap with the same fingerprint whose
//! start lies within `fingerprint_window` and whose interval overlaps its
//! own. More than one such group is *ambiguous*: counted and left unjoined,
//! never guessed. A loose guardrail call that joins nothing is still
//! reported, as a call of phase `unknown`.
//!
//! Arrival order does not decide a join: a settled group that a loose
//! record still settling could join waits for that record's own settle
//! time (the taps of one request flush their spans on their own timers, so
//! the untraced inner record often reaches the joiner after its traced
//! outer one). Spans that arrive further apart than `settle` are not
//! joined.
//!
//! Cost per record does not grow with what is held (`index`): groups and
//! loose records are ordered by age in B-trees (eviction and the settle
//! sweep take from the front), fingerprint candidates come from a
//! fingerprint index, and one sweep holds the lock for at most
//! `SWEEP_BATCH` records at a time, so a flood never blocks `submit` for
//! long. Memory is bounded: at most `max_groups` groups and as many loose
//! records (the oldest are evicted and counted), at most `MAX_PER_GROUP`
//! records per group.
//!
//! With `compound_links` on, a compound record no trace id joined (and one
//! alone in its trace group) goes to the compound stage (`links`, over
//! `correlate::linker`), which every call record is also copied to; the
//! compound requests in flight are held open there (`open_compound`).

use super::linker::{LinkResult, Linker};
use super::resolve::resolve;
use super::types::*;
use index::{Key, Slot, State};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

mod index;
mod links;
pub use links::OpenCompound;

/// Records kept per group (a request crossing more taps is unusual).
pub const MAX_PER_GROUP: usize = 32;

/// Records a sweep settles, joins or resolves per hold of the lock.
pub const SWEEP_BATCH: usize = 256;

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
    /// Run the compound stage (`linker`): join compound requests no trace
    /// id joined to their calls by links and time.
    pub compound_links: bool,
}

crate::names::label_enum! {
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
        /// A compound request no trace id joined, given calls by the
        /// compound stage (`linker`).
        Links = "joined_links",
    }
}

/// Receives what the correlator concluded. Called from the sweeper thread.
pub trait AttributionSink: Send + Sync {
    fn resolved(&self, resolution: &Resolution);
    fn counted(&self, result: Joined, n: u64);
    /// What the compound stage concluded about `n` calls.
    fn linked(&self, _result: LinkResult, _n: u64) {}
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
            if let Ok(mut open) = c.open.lock() {
                if let Some(n) = open.get_mut(&self.trace_id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        open.remove(&self.trace_id);
                    }
                }
            }
        }
    }
}

pub struct Correlator {
    config: CorrelationConfig,
    state: Mutex<State>,
    /// Requests in flight per trace id, at every tap (at most one entry per
    /// request in flight: bounded by the taps' own limits). Apart from
    /// `state`, so opening and closing a request never waits for a sweep.
    open: Mutex<HashMap<[u8; 16], u32>>,
    sinks: Vec<Arc<dyn AttributionSink>>,
    /// The compound stage, when `compound_links` is on.
    linker: Option<Mutex<Linker>>,
    /// Starts of the compound requests in flight (`open_compound`).
    compounds_open: Mutex<BTreeMap<Instant, u32>>,
}

/// What one hold of the lock in a sweep produced, reported after it.
#[derive(Default)]
struct Batch {
    done: Vec<index::Group>,
    /// Loose records that joined nothing: reported alone (a guardrail call
    /// still counts, phase `unknown`).
    alone: Vec<(TapRecord, Joined)>,
    /// Entries examined (processed or skipped) in this hold.
    work: usize,
}

impl Correlator {
    pub fn new(config: CorrelationConfig, sinks: Vec<Arc<dyn AttributionSink>>) -> Arc<Self> {
        Arc::new(Correlator {
            config,
            state: Mutex::new(State::default()),
            open: Mutex::new(HashMap::new()),
            sinks,
            linker: config.compound_links.then(|| Mutex::new(Linker::default())),
            compounds_open: Mutex::new(BTreeMap::new()),
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
        if let Ok(mut open) = self.open.lock() {
            *open.entry(trace_id).or_insert(0) += 1;
        }
        OpenTrace {
            correlator: Arc::downgrade(self),
            trace_id,
        }
    }

    /// Adds a finished request's record, which arrived at `now`. O(log n)
    /// in the records held.
    pub fn submit(&self, record: TapRecord, now: Instant) {
        let Some(record) = self.link_submit(record, now) else {
            return;
        };
        let evicted = match self.state.lock() {
            Ok(mut st) => {
                let mut evicted = match record.trace {
                    Some(t) => u64::from(!st.add_to_trace(t.trace_id, record, now)),
                    None => {
                        st.add_loose(record, now);
                        0
                    }
                };
                evicted += st.enforce_bounds(self.config.max_groups);
                evicted
            }
            Err(_) => 1,
        };
        self.count(Joined::Evicted, evicted);
    }

    /// Joins settled loose records by fingerprint, then resolves and reports
    /// every settled group. Holds the lock for at most `SWEEP_BATCH`
    /// entries at a time; reports between holds.
    pub fn sweep(&self, now: Instant) {
        // Where the scan of settled groups stopped in the previous hold:
        // entries before it were skipped (in flight, or waiting for a
        // loose record) and are not examined again in this sweep.
        let mut cursor: Option<(Instant, Key)> = None;
        loop {
            let batch = match self.state.lock() {
                Ok(mut st) => self.sweep_some(&mut st, now, &mut cursor),
                Err(_) => return,
            };
            let more = batch.work >= SWEEP_BATCH;
            self.report(batch, now);
            if !more {
                break;
            }
        }
        self.link_sweep(now);
    }

    fn sweep_some(
        &self,
        st: &mut State,
        now: Instant,
        cursor: &mut Option<(Instant, Key)>,
    ) -> Batch {
        let mut b = Batch::default();
        let Some(settled) = now.checked_sub(self.config.settle) else {
            return b;
        };
        // 1. Loose records whose own settle time has come, oldest first.
        while b.work < SWEEP_BATCH {
            let Some(l) = st.pop_loose_until(settled) else {
                break;
            };
            b.work += 1;
            let Some(l) = l else { continue };
            match st.candidates(&l.record, &self.config) {
                Match::None => b.alone.push((l.record, Joined::Unjoined)),
                Match::Many => b.alone.push((l.record, Joined::Ambiguous)),
                Match::Group(k) => {
                    if let Some(r) = st.join_group(k, l.record, now) {
                        b.alone.push((r, Joined::Evicted));
                    }
                }
                Match::Loose(j) => match st.take_loose(j) {
                    Some(other) => st.new_joined_group(other.record, l.record, now),
                    None => b.alone.push((l.record, Joined::Unjoined)),
                },
            }
        }
        // 2. Groups at their max age, whatever else holds them.
        if let Some(aged) = now.checked_sub(self.config.max_age) {
            while b.work < SWEEP_BATCH {
                let Some(g) = st.pop_first_until(aged) else {
                    break;
                };
                b.work += 1;
                b.done.extend(g);
            }
        }
        // 3. Settled groups, unless in flight or waiting for a loose record.
        let open = self.open.lock().ok();
        while b.work < SWEEP_BATCH {
            let Some((last, k)) = st.next_by_last(*cursor) else {
                break;
            };
            if last > settled {
                break;
            }
            b.work += 1;
            let in_flight = match (k, &open) {
                (Key::Trace(t), Some(open)) => open.contains_key(&t),
                _ => false,
            };
            if in_flight || st.awaits_loose(k, now, &self.config) {
                *cursor = Some((last, k));
                continue;
            }
            match st.take_group(k) {
                Some(g) => b.done.push(g),
                None => *cursor = Some((last, k)),
            }
        }
        b
    }

    fn report(&self, b: Batch, now: Instant) {
        let (mut unjoined, mut ambiguous, mut evicted) = (0u64, 0u64, 0u64);
        for (record, why) in b.alone {
            match why {
                Joined::Ambiguous => ambiguous += 1,
                Joined::Evicted => evicted += 1,
                _ => unjoined += 1,
            }
            if record.is_guardrail() {
                self.emit(&[record], &[JoinKind::Trace]);
            }
        }
        self.count(Joined::Unjoined, unjoined);
        self.count(Joined::Ambiguous, ambiguous);
        self.count(Joined::Evicted, evicted);
        for g in b.done {
            self.finish(g, now);
        }
    }

    fn finish(&self, g: index::Group, now: Instant) {
        let Some(g) = self.link_finish(g, now) else {
            return;
        };
        if g.records.len() < 2 {
            self.count(Joined::Unjoined, g.records.len() as u64);
            // A lone guardrail call still counts as a call (phase unknown).
            if g.records.iter().any(TapRecord::is_guardrail) {
                self.emit(&g.records, &g.kinds);
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
        self.emit(&g.records, &g.kinds);
    }

    pub(super) fn emit(&self, records: &[TapRecord], kinds: &[JoinKind]) {
        let how = |a: usize, b: usize| {
            if kinds.get(a) == Some(&JoinKind::Trace) && kinds.get(b) == Some(&JoinKind::Trace) {
                JoinKind::Trace
            } else {
                JoinKind::Fingerprint
            }
        };
        let res = resolve(records, how, self.config.buffered_share, self.config.clocks);
        if res.pairs.is_empty()
            && res.hops.is_empty()
            && res.exposure.is_empty()
            && res.compound.is_empty()
        {
            return;
        }
        for s in &self.sinks {
            s.resolved(&res);
        }
    }

    /// Records waiting (for tests and a gauge-like view).
    pub fn pending(&self) -> usize {
        self.state.lock().map(|st| st.held()).unwrap_or(0)
    }
}

/// Where a loose record's fingerprint leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    None,
    Many,
    Group(Key),
    Loose(u64),
}

impl From<Slot> for Match {
    fn from(s: Slot) -> Match {
        match s {
            Slot::Group(k) => Match::Group(k),
            Slot::Loose(id) => Match::Loose(id),
        }
    }
}

#[cfg(test)]
mod links_tests;
#[cfg(test)]
mod tests;
