//! The bounded memory of prompt prefixes the prefix-cache analysis checks
//! reuse against (live: across windows; offline: over a record log).

use std::collections::HashSet;

/// Remembers recently seen prompt prefixes, bounded: two generations of at
/// most `cap / 2` entries each; when the young one fills, the old one is
/// dropped. A prefix seen within roughly the last `cap / 2` distinct
/// prefixes is remembered.
#[derive(Debug, Clone)]
pub struct PrefixMemory {
    young: HashSet<String>,
    old: HashSet<String>,
    half: usize,
}

impl PrefixMemory {
    pub fn new(cap: usize) -> Self {
        PrefixMemory {
            young: HashSet::new(),
            old: HashSet::new(),
            half: (cap / 2).max(1),
        }
    }

    /// Whether `key` was seen before; remembers it either way.
    pub fn seen(&mut self, key: &str) -> bool {
        if self.young.contains(key) {
            return true;
        }
        let before = self.old.contains(key);
        if self.young.len() >= self.half {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key.to_owned());
        before
    }
}

impl Default for PrefixMemory {
    fn default() -> Self {
        PrefixMemory::new(200_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_bounded_and_forgets_old_prefixes() {
        let mut m = PrefixMemory::new(4);
        assert!(!m.seen("a"));
        assert!(m.seen("a"));
        for k in ["b", "c", "d", "e"] {
            m.seen(k);
        }
        assert!(m.young.len() + m.old.len() <= 4);
        assert!(!m.seen("a"), "forgotten after two generations");
    }
}
