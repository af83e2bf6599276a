//! The correlator's held records and the indexes that keep every step
//! O(log n): groups by key, ordered by their last and first record; loose
//! records ordered by arrival; and a fingerprint index from a fingerprint
//! to the groups and loose records holding it.
//!
//! Owns: the data and its consistency (every record in exactly the
//! indexes it belongs to). Must not touch: when something settles or what
//! is reported (`store`), or what a group means (`resolve`).

use super::{Match, MAX_PER_GROUP};
use crate::correlate::types::{Clocks, JoinKind, TapRecord};
use crate::correlate::CorrelationConfig;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::time::Instant;

/// Records held per fingerprint in the index. Beyond it, a lookup of that
/// fingerprint is ambiguous until the count falls again: many look-alike
/// requests at once cannot be told apart cheaply, and are never guessed.
pub const FP_SLOTS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Trace([u8; 16]),
    Joined(u64),
}

/// Where a record with some fingerprint is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Group(Key),
    Loose(u64),
}

pub struct Group {
    pub records: Vec<TapRecord>,
    /// How each record entered the group.
    pub kinds: Vec<JoinKind>,
    /// Whether each record has a slot in the fingerprint index.
    indexed: Vec<bool>,
    first: Instant,
    last: Instant,
}

pub struct Loose {
    pub record: TapRecord,
    arrived: Instant,
    indexed: bool,
}

#[derive(Default)]
struct FpEntry {
    slots: Vec<Slot>,
    /// Records with this fingerprint held beyond `FP_SLOTS`.
    unindexed: usize,
}

#[derive(Default)]
pub struct State {
    groups: HashMap<Key, Group>,
    by_last: BTreeSet<(Instant, Key)>,
    by_first: BTreeSet<(Instant, Key)>,
    loose: HashMap<u64, Loose>,
    loose_by_arrival: BTreeSet<(Instant, u64)>,
    by_fp: HashMap<u64, FpEntry>,
    next_id: u64,
    held: usize,
}

/// Could loose record `r` be the same request as `c`, held elsewhere?
fn fits(c: &TapRecord, r: &TapRecord, cfg: &CorrelationConfig) -> bool {
    let overlap = match cfg.clocks {
        Clocks::Shared => c.t0 <= r.end() && r.t0 <= c.end(),
        // Wall clocks of different machines: the window is the bound.
        Clocks::PerTap => true,
    };
    r.fingerprint.is_some()
        && c.fingerprint == r.fingerprint
        && c.tap != r.tap
        && c.t0.max(r.t0).saturating_duration_since(c.t0.min(r.t0)) <= cfg.fingerprint_window
        && overlap
}

impl State {
    pub fn held(&self) -> usize {
        self.held
    }

    fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Indexes one record's fingerprint at `slot`; whether it got a slot.
    fn index(&mut self, fp: Option<u64>, slot: Slot) -> bool {
        let Some(fp) = fp else { return false };
        let e = self.by_fp.entry(fp).or_default();
        if e.slots.len() < FP_SLOTS {
            e.slots.push(slot);
            true
        } else {
            e.unindexed += 1;
            false
        }
    }

    fn unindex(&mut self, fp: Option<u64>, slot: Slot, indexed: bool) {
        let Some(fp) = fp else { return };
        let Some(e) = self.by_fp.get_mut(&fp) else {
            return;
        };
        if indexed {
            if let Some(i) = e.slots.iter().position(|s| *s == slot) {
                e.slots.swap_remove(i);
            }
        } else {
            e.unindexed = e.unindexed.saturating_sub(1);
        }
        if e.slots.is_empty() && e.unindexed == 0 {
            self.by_fp.remove(&fp);
        }
    }

    /// Adds a traced record to its trace's group; false when the group is
    /// full (the record is dropped).
    pub fn add_to_trace(&mut self, trace: [u8; 16], record: TapRecord, now: Instant) -> bool {
        let k = Key::Trace(trace);
        if let std::collections::hash_map::Entry::Vacant(v) = self.groups.entry(k) {
            v.insert(Group {
                records: Vec::new(),
                kinds: Vec::new(),
                indexed: Vec::new(),
                first: now,
                last: now,
            });
            self.by_first.insert((now, k));
            self.by_last.insert((now, k));
        }
        self.join_group(k, record, now).is_none()
    }

    /// Adds a record to group `k` (by trace id, or joined by fingerprint
    /// when `k` already holds records of another key). Gives the record
    /// back when the group is full or gone.
    #[must_use]
    pub fn join_group(&mut self, k: Key, record: TapRecord, now: Instant) -> Option<TapRecord> {
        let kind = match k {
            Key::Trace(_) if record.trace.is_some() => JoinKind::Trace,
            _ => JoinKind::Fingerprint,
        };
        let full = self
            .groups
            .get(&k)
            .is_none_or(|g| g.records.len() >= MAX_PER_GROUP);
        if full {
            return Some(record);
        }
        let indexed = self.index(record.fingerprint, Slot::Group(k));
        let Some(g) = self.groups.get_mut(&k) else {
            return Some(record);
        };
        // A record joined by fingerprint completes a group that has
        // settled (or was waiting for it): it does not hold it open again.
        if kind == JoinKind::Trace && now > g.last {
            self.by_last.remove(&(g.last, k));
            g.last = now;
            self.by_last.insert((g.last, k));
        }
        g.records.push(record);
        g.kinds.push(kind);
        g.indexed.push(indexed);
        self.held += 1;
        None
    }

    /// Two loose records of one request (by fingerprint): a new group.
    pub fn new_joined_group(&mut self, a: TapRecord, b: TapRecord, now: Instant) {
        let k = Key::Joined(self.next());
        self.groups.insert(
            k,
            Group {
                records: Vec::with_capacity(2),
                kinds: Vec::with_capacity(2),
                indexed: Vec::with_capacity(2),
                first: now,
                last: now,
            },
        );
        self.by_first.insert((now, k));
        self.by_last.insert((now, k));
        for r in [a, b] {
            // A new group has room for two.
            let _ = self.join_group(k, r, now);
        }
    }

    pub fn add_loose(&mut self, record: TapRecord, now: Instant) {
        let id = self.next();
        let indexed = self.index(record.fingerprint, Slot::Loose(id));
        self.loose_by_arrival.insert((now, id));
        self.loose.insert(
            id,
            Loose {
                record,
                arrived: now,
                indexed,
            },
        );
        self.held += 1;
    }

    pub fn oldest_loose(&self) -> Option<(Instant, u64)> {
        self.loose_by_arrival.first().copied()
    }

    /// Takes the oldest loose record if it arrived at or before `limit`:
    /// `None` when there is none that old.
    pub fn pop_loose_until(&mut self, limit: Instant) -> Option<Option<Loose>> {
        let (arrived, id) = self.oldest_loose()?;
        if arrived > limit {
            return None;
        }
        self.loose_by_arrival.remove(&(arrived, id));
        Some(self.take_loose(id))
    }

    /// Takes the group whose first record is oldest if that record came at
    /// or before `limit`.
    pub fn pop_first_until(&mut self, limit: Instant) -> Option<Option<Group>> {
        let (first, k) = self.by_first.first().copied()?;
        if first > limit {
            return None;
        }
        self.by_first.remove(&(first, k));
        Some(self.take_group(k))
    }

    pub fn take_loose(&mut self, id: u64) -> Option<Loose> {
        let l = self.loose.remove(&id)?;
        self.loose_by_arrival.remove(&(l.arrived, id));
        self.unindex(l.record.fingerprint, Slot::Loose(id), l.indexed);
        self.held = self.held.saturating_sub(1);
        Some(l)
    }

    /// The group after `cursor` in the order of their last record.
    pub fn next_by_last(&self, cursor: Option<(Instant, Key)>) -> Option<(Instant, Key)> {
        match cursor {
            None => self.by_last.first().copied(),
            Some(c) => self
                .by_last
                .range((Bound::Excluded(c), Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    pub fn take_group(&mut self, k: Key) -> Option<Group> {
        let g = self.groups.remove(&k)?;
        self.by_first.remove(&(g.first, k));
        self.by_last.remove(&(g.last, k));
        for (r, indexed) in g.records.iter().zip(&g.indexed) {
            self.unindex(r.fingerprint, Slot::Group(k), *indexed);
        }
        self.held = self.held.saturating_sub(g.records.len());
        Some(g)
    }

    /// Evicts the oldest groups and loose records beyond `max` each;
    /// returns how many records went.
    pub fn enforce_bounds(&mut self, max: usize) -> u64 {
        let mut evicted = 0u64;
        while self.groups.len() > max {
            let Some((_, k)) = self.by_last.pop_first() else {
                break;
            };
            if let Some(g) = self.take_group(k) {
                evicted += g.records.len() as u64;
            }
        }
        while self.loose.len() > max {
            let Some((_, id)) = self.loose_by_arrival.pop_first() else {
                break;
            };
            if self.take_loose(id).is_some() {
                evicted += 1;
            }
        }
        evicted
    }

    /// The one group or loose record that loose record `r` (already taken
    /// out of the index) belongs with; `Many` when more than one fits.
    pub fn candidates(&self, r: &TapRecord, cfg: &CorrelationConfig) -> Match {
        let Some(e) = r.fingerprint.and_then(|fp| self.by_fp.get(&fp)) else {
            return Match::None;
        };
        if e.unindexed > 0 {
            return Match::Many;
        }
        let mut found: Option<Slot> = None;
        for slot in &e.slots {
            if found == Some(*slot) {
                continue;
            }
            let fit = match slot {
                Slot::Group(k) => self.groups.get(k).is_some_and(|g| {
                    // A group that already has this tap's record is another
                    // request.
                    !g.records.iter().any(|c| c.tap == r.tap)
                        && g.records.iter().any(|c| fits(c, r, cfg))
                }),
                Slot::Loose(id) => self.loose.get(id).is_some_and(|l| fits(&l.record, r, cfg)),
            };
            if fit {
                if found.is_some() {
                    return Match::Many;
                }
                found = Some(*slot);
            }
        }
        found.map_or(Match::None, Match::from)
    }

    /// Whether a loose record that has not settled yet could join group
    /// `k`: the group waits for it rather than resolving without it.
    pub fn awaits_loose(&self, k: Key, now: Instant, cfg: &CorrelationConfig) -> bool {
        let Some(g) = self.groups.get(&k) else {
            return false;
        };
        g.records.iter().filter_map(|c| c.fingerprint).any(|fp| {
            self.by_fp.get(&fp).is_some_and(|e| {
                e.slots.iter().any(|s| match s {
                    Slot::Loose(id) => self.loose.get(id).is_some_and(|l| {
                        now.saturating_duration_since(l.arrived) < cfg.settle
                            && !g.records.iter().any(|c| c.tap == l.record.tap)
                            && g.records.iter().any(|c| fits(c, &l.record, cfg))
                    }),
                    Slot::Group(_) => false,
                })
            })
        })
    }
}
