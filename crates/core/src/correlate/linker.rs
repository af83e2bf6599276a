//! The compound stage: joins a compound request to the calls it made when
//! no trace id does (the application does not pass `traceparent` on), by
//! time and by what links the steps of an agent loop (`crate::links`,
//! hashes only).
//!
//! A call (any record of a tool, retrieval, guardrail, gateway or engine
//! tap) is held in a window ordered by its start. A compound record that no
//! trace joined waits until it has settled and no compound request that
//! started before its end is still in flight (`open_before`); then the
//! calls inside its interval are its candidates, and its *closure* is
//! grown from its own user text: an LLM call whose conversation carries
//! that text, a tool call whose name and arguments an LLM call of the
//! closure asked for, an LLM call that carries a result a tool call of the
//! closure returned, and any call that carries no link at all (a vector
//! search, `tools/list`) — for those, time is the only evidence.
//!
//! A call in the closure of exactly one compound request (among those
//! waiting, each of whose interval holds it) is assigned to it; in more
//! than one it is *ambiguous*: counted, never assigned, and dropped. A
//! call with links that nothing links to stays unassigned.
//!
//! Owns: the window, the compound records waiting, the trace ids whose
//! calls a trace group joins (never taken here). Must not touch: how a
//! group is split (`compound`) or reported (`store`).

use super::types::{Clocks, TapRecord};
use crate::tap::Boundary;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

mod closure;
use closure::{closure, contains};

/// Calls assigned per compound request (the group's other records).
pub const MAX_CALLS: usize = super::store::MAX_PER_GROUP - 1;

/// Across machines (`Clocks::PerTap`) a call's start and end, on its
/// tap's wall clock, may lie this far outside its compound request's.
pub const PER_TAP_SLACK: Duration = Duration::from_millis(2);

/// Candidates examined per compound request (its interval's calls).
pub const MAX_CANDIDATES: usize = 256;

/// Calls forgotten per sweep call (a hold of the lock stays short).
pub const FORGET_BATCH: usize = 4096;

/// Other waiting compound requests overlapping one that are examined as
/// its rivals; with more, its calls are all ambiguous (bounds the work of
/// one examination to `MAX_OVERLAPPING` × `MAX_CANDIDATES` calls).
pub const MAX_OVERLAPPING: usize = 64;

crate::names::label_enum! {
    /// What the compound stage concluded about a call (the `result` label).
    pub enum LinkResult {
        /// In one compound request's closure: its call.
        Assigned = "assigned",
        /// In several: counted, never assigned.
        Ambiguous = "ambiguous",
        /// Dropped to keep memory bounded (the window's cap, or a request
        /// with more than `MAX_CALLS` calls).
        Evicted = "evicted",
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkerConfig {
    pub settle: Duration,
    pub max_age: Duration,
    /// Calls held, and compound records waiting, at most.
    pub cap: usize,
    pub clocks: Clocks,
}

struct Held {
    record: TapRecord,
    arrived: Instant,
}

struct Waiting {
    record: TapRecord,
    /// Since when it could be examined (its settle time).
    ready: Instant,
}

/// What a sweep concluded.
#[derive(Default)]
pub struct Linked {
    /// Each examined compound record first, then the calls assigned to it.
    pub groups: Vec<Vec<TapRecord>>,
    pub assigned: u64,
    pub ambiguous: u64,
    pub evicted: u64,
    /// Forgetting stopped at `FORGET_BATCH`: sweep again.
    pub more_to_forget: bool,
}

#[derive(Default)]
pub struct Linker {
    window: BTreeMap<(Instant, u64), Held>,
    waiting: BTreeMap<(Instant, u64), Waiting>,
    /// Trace ids of compound records (a trace joins their calls), with
    /// when each was seen, oldest first.
    owned: HashMap<[u8; 16], Instant>,
    owned_order: VecDeque<(Instant, [u8; 16])>,
    /// Starts of the traced compound records whose groups have not been
    /// resolved yet (one may still come here, alone).
    unsettled: BTreeSet<(Instant, [u8; 16])>,
    next: u64,
}

impl Linker {
    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Holds a call (a copy of a record of any tap but a compound one, its
    /// token-event offsets left out: about 200 bytes).
    /// Gives back how many calls the cap evicted.
    pub fn call(&mut self, record: &TapRecord, now: Instant, cfg: &LinkerConfig) -> u64 {
        let id = self.id();
        // The breakdown needs no token-event offsets: not copied.
        let record = TapRecord {
            events: Vec::new(),
            ..record.clone()
        };
        self.window.insert(
            (record.t0, id),
            Held {
                record,
                arrived: now,
            },
        );
        let mut evicted = 0;
        while self.window.len() > cfg.cap {
            self.window.pop_first();
            evicted += 1;
        }
        evicted
    }

    /// A traced compound record that started at `t0`: the calls that
    /// carry its trace id are its trace group's, never a candidate here;
    /// until `settled_trace`, calls after `t0` are kept (its group may come
    /// here alone).
    pub fn owned_trace(
        &mut self,
        trace_id: [u8; 16],
        t0: Instant,
        now: Instant,
        cfg: &LinkerConfig,
    ) {
        if self.owned.insert(trace_id, now).is_none() {
            self.owned_order.push_back((now, trace_id));
        }
        if self.unsettled.len() < cfg.cap {
            self.unsettled.insert((t0, trace_id));
        }
        while self.owned.len() > cfg.cap {
            match self.owned_order.pop_front() {
                Some((_, t)) => {
                    self.owned.remove(&t);
                }
                None => break,
            }
        }
    }

    /// The group of a traced compound record that started at `t0` was
    /// resolved (with its calls, or handed over alone with `compound`).
    pub fn settled_trace(&mut self, trace_id: [u8; 16], t0: Instant) {
        self.unsettled.remove(&(t0, trace_id));
    }

    /// A compound record no trace joined, to be examined from `ready` on.
    /// Gives it back when the cap is reached (the caller counts it alone).
    pub fn compound(
        &mut self,
        record: TapRecord,
        ready: Instant,
        cfg: &LinkerConfig,
    ) -> Option<TapRecord> {
        if self.waiting.len() >= cfg.cap {
            return Some(record);
        }
        let id = self.id();
        self.waiting.insert((ready, id), Waiting { record, ready });
        None
    }

    /// Compound records and calls held (for tests and a gauge-like view).
    pub fn held(&self) -> (usize, usize) {
        (self.waiting.len(), self.window.len())
    }

    /// Examines every compound record whose time has come (`open_before(t)`:
    /// some compound request in flight started at or before `t`), at most
    /// `batch` of them, and forgets calls no compound request can claim (at
    /// most `FORGET_BATCH`).
    pub fn sweep(
        &mut self,
        now: Instant,
        cfg: &LinkerConfig,
        batch: usize,
        open_before: &dyn Fn(Instant) -> bool,
    ) -> Linked {
        let mut out = Linked::default();
        let due: Vec<(Instant, u64)> = self
            .waiting
            .iter()
            .take_while(|(_, w)| w.ready <= now)
            .filter(|(_, w)| {
                let end = w.record.end();
                // A request still in flight may own its calls too; waiting
                // ends at `max_age` whatever holds it.
                !open_before(end) || w.ready + cfg.max_age <= now
            })
            .map(|(k, _)| *k)
            .take(batch)
            .collect();
        for k in due {
            if let Some(w) = self.waiting.remove(&k) {
                self.examine(w.record, cfg, &mut out);
            }
        }
        out.more_to_forget = self.forget(now, cfg, open_before);
        out
    }

    /// The calls inside `c`'s interval that may be its own, window keys
    /// first.
    fn candidates(&self, c: &TapRecord, cfg: &LinkerConfig) -> Vec<(Instant, u64)> {
        let slack = match cfg.clocks {
            Clocks::Shared => Duration::ZERO,
            Clocks::PerTap => PER_TAP_SLACK,
        };
        let from = c.t0.checked_sub(slack).unwrap_or(c.t0);
        self.window
            .range((from, 0)..=(c.end() + slack, u64::MAX))
            .filter(|(_, h)| contains(c, &h.record, slack))
            .filter(|(_, h)| {
                !h.record
                    .trace
                    .is_some_and(|t| self.owned.contains_key(&t.trace_id))
            })
            .map(|(k, _)| *k)
            .take(MAX_CANDIDATES)
            .collect()
    }

    fn closure_of(&self, c: &TapRecord, cfg: &LinkerConfig) -> HashSet<(Instant, u64)> {
        let keys = self.candidates(c, cfg);
        let records: Vec<&TapRecord> = keys
            .iter()
            .filter_map(|k| self.window.get(k).map(|h| &h.record))
            .collect();
        closure(c, &records)
            .into_iter()
            .filter_map(|i| keys.get(i).copied())
            .collect()
    }

    fn examine(&mut self, c: TapRecord, cfg: &LinkerConfig, out: &mut Linked) {
        let mine = self.closure_of(&c, cfg);
        // The other waiting compound requests whose interval overlaps this
        // one's: a call of `mine` in one of their closures is ambiguous.
        // Beyond `MAX_OVERLAPPING` of them, every call is ambiguous: so
        // many requests in flight together are not told apart cheaply, and
        // never guessed.
        let overlapping: Vec<&Waiting> = self
            .waiting
            .values()
            .filter(|w| w.record.t0 <= c.end() && c.t0 <= w.record.end())
            .take(MAX_OVERLAPPING + 1)
            .collect();
        let crowded = overlapping.len() > MAX_OVERLAPPING;
        let others: Vec<HashSet<(Instant, u64)>> = if crowded {
            Vec::new()
        } else {
            overlapping
                .iter()
                .map(|w| self.closure_of(&w.record, cfg))
                .collect()
        };
        let mut keys: Vec<(Instant, u64)> = mine.into_iter().collect();
        keys.sort();
        let mut group = vec![c];
        for k in keys {
            let Some(h) = self.window.remove(&k) else {
                continue;
            };
            if crowded || others.iter().any(|o| o.contains(&k)) {
                out.ambiguous += 1;
            } else if group.len() > MAX_CALLS {
                out.evicted += 1;
            } else {
                out.assigned += 1;
                group.push(h.record);
            }
        }
        out.groups.push(group);
    }

    /// Drops calls no compound request can still claim: older than
    /// `max_age`, or (one clock, where the requests in flight are known)
    /// settled with no compound request in flight or waiting that started
    /// before them.
    /// At most `FORGET_BATCH` calls at a time; whether more may be due.
    fn forget(
        &mut self,
        now: Instant,
        cfg: &LinkerConfig,
        open_before: &dyn Fn(Instant) -> bool,
    ) -> bool {
        let first_waiting = self
            .waiting
            .values()
            .map(|w| w.record.t0)
            .chain(self.unsettled.first().map(|(t0, _)| *t0))
            .min();
        let mut more = false;
        for i in 0..=FORGET_BATCH {
            let Some((&(t0, _), h)) = self.window.first_key_value() else {
                break;
            };
            if i == FORGET_BATCH {
                more = true;
                break;
            }
            let aged = h.arrived + cfg.max_age <= now;
            let unclaimable = cfg.clocks == Clocks::Shared
                && h.arrived + cfg.settle <= now
                && !open_before(t0)
                && first_waiting.is_none_or(|w| w > t0);
            if !(aged || unclaimable) {
                break;
            }
            self.window.pop_first();
        }
        while let Some(&(seen, t)) = self.owned_order.front() {
            if seen + cfg.max_age > now {
                break;
            }
            self.owned_order.pop_front();
            self.owned.remove(&t);
        }
        // A group evicted before it was resolved never settles.
        let old = now.checked_sub(cfg.max_age);
        while let Some(&(t0, t)) = self.unsettled.first() {
            if old.is_none_or(|o| t0 > o) {
                break;
            }
            self.unsettled.remove(&(t0, t));
        }
        more
    }
}

/// Whether `r` is a call the compound stage may hold (not a compound
/// record itself).
pub fn is_call(r: &TapRecord) -> bool {
    r.boundary != Boundary::Compound
}

#[cfg(test)]
mod tests;
