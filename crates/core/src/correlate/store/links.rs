//! The correlator's side of the compound stage (`correlate::linker`):
//! what it hands over on submit and when a group is resolved, the compound
//! requests in flight (`open_compound`), and what a linker sweep reports.
//!
//! Owns: the plumbing between the store and the linker. Must not touch:
//! how calls are chosen (`linker`) or split (`compound`).

use super::{Correlator, Joined};
use crate::correlate::compound::breakdowns;
use crate::correlate::linker::{is_call, LinkResult, LinkerConfig};
use crate::correlate::types::{Resolution, TapRecord};
use crate::tap::Boundary;
use std::sync::{Arc, Weak};
use std::time::Instant;

/// Compound requests examined per hold of the linker.
pub const LINK_BATCH: usize = 16;

/// Holds a compound request open in the correlator while it is in flight
/// (`Correlator::open_compound`): no compound request that ended after it
/// started is examined before it is dropped (it might own their calls).
pub struct OpenCompound {
    correlator: Weak<Correlator>,
    t0: Instant,
}

impl Drop for OpenCompound {
    fn drop(&mut self) {
        if let Some(c) = self.correlator.upgrade() {
            if let Ok(mut open) = c.compounds_open.lock() {
                if let Some(n) = open.get_mut(&self.t0) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        open.remove(&self.t0);
                    }
                }
            }
        }
    }
}

impl Correlator {
    fn linker_config(&self) -> LinkerConfig {
        LinkerConfig {
            settle: self.config.settle,
            max_age: self.config.max_age,
            cap: self.config.max_groups,
            clocks: self.config.clocks,
        }
    }

    /// A compound request started at `t0` (`None` when the compound stage
    /// is off).
    pub fn open_compound(self: &Arc<Self>, t0: Instant) -> Option<OpenCompound> {
        self.linker.as_ref()?;
        let mut open = self.compounds_open.lock().ok()?;
        *open.entry(t0).or_insert(0) += 1;
        Some(OpenCompound {
            correlator: Arc::downgrade(self),
            t0,
        })
    }

    /// Hands the compound stage what it needs of a submitted record; gives
    /// the record back unless the stage took it (an untraced compound
    /// record waits there, not in the store).
    pub(super) fn link_submit(&self, record: TapRecord, now: Instant) -> Option<TapRecord> {
        let Some(linker) = &self.linker else {
            return Some(record);
        };
        let cfg = self.linker_config();
        let Ok(mut l) = linker.lock() else {
            return Some(record);
        };
        if is_call(&record) {
            let evicted = l.call(&record, now, &cfg);
            drop(l);
            self.link_count(LinkResult::Evicted, evicted);
            return Some(record);
        }
        match record.trace {
            Some(t) => {
                l.owned_trace(t.trace_id, record.t0, now, &cfg);
                Some(record)
            }
            None => {
                let full = l.compound(record, now + cfg.settle, &cfg);
                drop(l);
                if full.is_some() {
                    self.count(Joined::Evicted, 1);
                }
                None
            }
        }
    }

    /// A group is being resolved: its traced compound records are settled;
    /// a lone one goes to the compound stage instead (`None`).
    pub(super) fn link_finish(
        &self,
        g: super::index::Group,
        now: Instant,
    ) -> Option<super::index::Group> {
        let Some(linker) = &self.linker else {
            return Some(g);
        };
        let cfg = self.linker_config();
        let Ok(mut l) = linker.lock() else {
            return Some(g);
        };
        for r in g.records.iter().filter(|r| !is_call(r)) {
            if let Some(t) = r.trace {
                l.settled_trace(t.trace_id, r.t0);
            }
        }
        match g.records.as_slice() {
            [only] if only.boundary == Boundary::Compound => {
                let full = l.compound(only.clone(), now, &cfg);
                drop(l);
                if full.is_some() {
                    self.count(Joined::Evicted, 1);
                }
                None
            }
            _ => Some(g),
        }
    }

    /// Examines the compound records whose time has come; reports each
    /// one's breakdown over the calls it was given, and the counts. Holds
    /// the linker for at most `LINK_BATCH` examinations at a time (a
    /// submit waits no longer), and never holds the in-flight table while
    /// examining (a compound request's start never waits for a sweep).
    pub(super) fn link_sweep(&self, now: Instant) {
        let Some(linker) = &self.linker else {
            return;
        };
        let cfg = self.linker_config();
        // A request that opens after this look started after `now`: it
        // cannot hold a call of a request that ended before.
        let first_open = match self.compounds_open.lock() {
            Ok(open) => open.first_key_value().map(|(start, _)| *start),
            Err(_) => return,
        };
        let open_before = |t: Instant| first_open.is_some_and(|start| start <= t);
        loop {
            let out = match linker.lock() {
                Ok(mut l) => l.sweep(now, &cfg, LINK_BATCH, &open_before),
                Err(_) => return,
            };
            let more = out.groups.len() >= LINK_BATCH || out.more_to_forget;
            self.link_report(out);
            if !more {
                return;
            }
        }
    }

    fn link_report(&self, out: crate::correlate::linker::Linked) {
        self.link_count(LinkResult::Assigned, out.assigned);
        self.link_count(LinkResult::Ambiguous, out.ambiguous);
        self.link_count(LinkResult::Evicted, out.evicted);
        for group in out.groups {
            let joined = group.len() > 1;
            self.count(
                if joined {
                    Joined::Links
                } else {
                    Joined::Unjoined
                },
                1,
            );
            let mut compound = breakdowns(&group, self.config.clocks);
            for b in &mut compound {
                b.by_links = true;
            }
            let res = Resolution {
                compound,
                ..Resolution::default()
            };
            if joined && !res.compound.is_empty() {
                for s in &self.sinks {
                    s.resolved(&res);
                }
            }
        }
    }

    fn link_count(&self, result: LinkResult, n: u64) {
        if n > 0 {
            for s in &self.sinks {
                s.linked(result, n);
            }
        }
    }

    /// Compound records waiting and calls held by the compound stage.
    pub fn linker_held(&self) -> (usize, usize) {
        self.linker
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.held()))
            .unwrap_or((0, 0))
    }
}
