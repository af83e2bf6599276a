//! The closure of a compound request: which of the calls inside its
//! interval the links say are its own (see `linker`'s module docs for the
//! rule). Pure: records in, indexes out.

use crate::correlate::types::TapRecord;
use std::time::Duration;

/// Whether `call` lies inside `c`'s interval (`slack` either side).
pub fn contains(c: &TapRecord, call: &TapRecord, slack: Duration) -> bool {
    call.t0 + slack >= c.t0 && call.end() <= c.end() + slack
}

/// Indexes of `calls` in `c`'s closure, grown from `c`'s user text.
pub fn closure(c: &TapRecord, calls: &[&TapRecord]) -> Vec<usize> {
    let mut inside = vec![false; calls.len()];
    // Tool calls asked for, and results returned, by the calls so far.
    let mut asked: Vec<u64> = Vec::new();
    let mut returned: Vec<u64> = Vec::new();
    loop {
        let mut grew = false;
        for (i, r) in calls.iter().enumerate() {
            if inside.get(i).copied().unwrap_or(true) {
                continue;
            }
            let l = &r.links;
            // A call that carries no link (a search, `tools/list`) has only
            // its time to go by.
            let unlinked = l.users.is_empty() && l.calls_in.is_empty() && l.results_in.is_empty();
            let joins = unlinked
                || l.users.meets(&c.links.users)
                || l.calls_in.iter().any(|h| asked.contains(&h))
                || l.results_in.iter().any(|h| returned.contains(&h));
            if joins {
                if let Some(slot) = inside.get_mut(i) {
                    *slot = true;
                }
                asked.extend(l.calls_out.iter());
                returned.extend(l.results_out.iter());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    inside
        .iter()
        .enumerate()
        .filter_map(|(i, x)| x.then_some(i))
        .collect()
}
