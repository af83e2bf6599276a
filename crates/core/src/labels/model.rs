//! Bounded label values from untrusted input: the first N distinct values
//! of a label get their own series, the rest are `other`.
//!
//! Owns: the `model` label policy (and the same policy for `tenant`, whose
//! absent value is `none`). A model name comes from an untrusted
//! request body, so it gets its own series only if it is a sane label value
//! (≤ 128 bytes, no control characters) and one of the first `max` distinct
//! values seen; everything else becomes `other` and is counted in
//! `tokentap_label_overflow_total{label="model"}`. An absent model is
//! `unknown`.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

pub const UNKNOWN: &str = "unknown";
pub const OTHER: &str = "other";
const MAX_LABEL_BYTES: usize = 128;

/// The first-N set of model label values, shared by all taps of a process.
#[derive(Debug)]
pub struct ModelLabels {
    max: usize,
    /// foldhash, seeded per process: the set is capped at `max`, so a
    /// flood of chosen names cannot grow it, and SipHash cost a few hundred
    /// instructions per request here.
    seen: RwLock<HashSet<Arc<str>, foldhash::fast::RandomState>>,
    unknown: Arc<str>,
    other: Arc<str>,
}

/// A label value and whether it overflowed into `other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLabel {
    pub value: Arc<str>,
    pub overflowed: bool,
}

impl ModelLabels {
    pub fn new(max: usize) -> Self {
        ModelLabels::with_absent(max, UNKNOWN)
    }

    /// The same policy, with `absent` as the value of a missing input
    /// (`none` for tenants).
    pub fn with_absent(max: usize, absent: &str) -> Self {
        ModelLabels {
            max,
            seen: RwLock::new(HashSet::default()),
            unknown: Arc::from(absent),
            other: Arc::from(OTHER),
        }
    }

    /// The label value for a raw model name.
    pub fn label(&self, raw: Option<&str>) -> ModelLabel {
        let Some(raw) = raw.filter(|m| !m.is_empty()) else {
            return ModelLabel {
                value: self.unknown.clone(),
                overflowed: false,
            };
        };
        if raw.len() > MAX_LABEL_BYTES
            || raw.chars().any(char::is_control)
            || raw == OTHER
            || raw == &*self.unknown
        {
            return self.overflow();
        }
        if let Ok(seen) = self.seen.read() {
            if let Some(v) = seen.get(raw) {
                return ModelLabel {
                    value: v.clone(),
                    overflowed: false,
                };
            }
        }
        let Ok(mut seen) = self.seen.write() else {
            return self.overflow();
        };
        if let Some(v) = seen.get(raw) {
            return ModelLabel {
                value: v.clone(),
                overflowed: false,
            };
        }
        if seen.len() >= self.max {
            return self.overflow();
        }
        let v: Arc<str> = Arc::from(raw);
        seen.insert(v.clone());
        ModelLabel {
            value: v,
            overflowed: false,
        }
    }

    fn overflow(&self) -> ModelLabel {
        ModelLabel {
            value: self.other.clone(),
            overflowed: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_n_then_other() {
        let l = ModelLabels::new(2);
        assert_eq!(&*l.label(None).value, UNKNOWN);
        assert_eq!(&*l.label(Some("")).value, UNKNOWN);
        assert_eq!(&*l.label(Some("a")).value, "a");
        assert_eq!(&*l.label(Some("b")).value, "b");
        let c = l.label(Some("c"));
        assert_eq!((&*c.value, c.overflowed), (OTHER, true));
        assert!(!l.label(Some("a")).overflowed);
    }

    #[test]
    fn hostile_values_never_get_a_series() {
        let l = ModelLabels::new(100);
        assert!(l.label(Some(&"x".repeat(129))).overflowed);
        assert!(l.label(Some("a\nb")).overflowed);
        assert!(l.label(Some("other")).overflowed);
        for i in 0..10_000 {
            l.label(Some(&format!("m{i}")));
        }
        assert_eq!(l.seen.read().map(|s| s.len()).unwrap_or(0), 100);
    }
}
