//! The simulator's prefix cache, modelled on vLLM's automatic prefix
//! caching: the prompt text (the raw JSON of `messages`, or `prompt`) is cut
//! into 256-byte blocks, and block i's key is a hash of every byte up to the
//! end of block i (a chained hash), so a block only hits when everything
//! before it matched too. A block is 64 tokens (the simulator counts 4 bytes
//! a token); a trailing partial block is never cached.
//!
//! Owns: block keys, lookup (leading blocks already seen) and insertion,
//! and the capacity bound with least-recently-used eviction. Blocks of one
//! prompt are stamped tail first, so under pressure a chain loses its tail
//! before its head (vLLM also frees a sequence's blocks in reverse order).
//!
//! Does not own: when lookups and insertions happen (`serve`: lookup when
//! a request is admitted, insertion after it was served) or what a hit costs
//! (`script::ttft`). Pure: no clock, no locks.

use std::collections::{BTreeMap, HashMap};

/// Bytes of prompt text per block.
pub const BLOCK_BYTES: usize = 256;
/// Tokens per block (the simulator counts a token per 4 bytes).
pub const TOKENS_PER_BLOCK: u32 = 64;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Keys of the full blocks of `text`: key i hashes bytes `0..256 × (i + 1)`.
pub fn block_keys(text: &[u8]) -> Vec<u64> {
    let mut h = FNV_OFFSET;
    text.chunks_exact(BLOCK_BYTES)
        .map(|block| {
            for b in block {
                h ^= u64::from(*b);
                h = h.wrapping_mul(FNV_PRIME);
            }
            h
        })
        .collect()
}

/// Cached tokens reported for `hit_blocks` leading hits: never the whole
/// prompt (an engine always computes at least the last token).
pub fn cached_tokens(hit_blocks: usize, prompt_tokens: u32) -> u32 {
    u32::try_from(hit_blocks)
        .unwrap_or(u32::MAX)
        .saturating_mul(TOKENS_PER_BLOCK)
        .min(prompt_tokens.saturating_sub(1))
}

/// A bounded set of block keys with LRU eviction.
#[derive(Debug, Default)]
pub struct PrefixCache {
    capacity_blocks: usize,
    /// Key → the tick it was last used at.
    used_at: HashMap<u64, u64>,
    /// Tick → key, oldest first (ticks are unique).
    by_age: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    pub fn new(capacity_blocks: usize) -> Self {
        PrefixCache {
            capacity_blocks,
            ..PrefixCache::default()
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.used_at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.used_at.is_empty()
    }

    /// How many leading full blocks of `text` are cached; the hits count as
    /// used now.
    pub fn lookup(&mut self, text: &[u8]) -> usize {
        let keys = block_keys(text);
        let hits = keys
            .iter()
            .take_while(|k| self.used_at.contains_key(k))
            .count();
        self.stamp(keys.get(..hits).unwrap_or_default());
        hits
    }

    /// Caches every full block of `text`, evicting the least recently used
    /// blocks beyond the capacity.
    pub fn insert(&mut self, text: &[u8]) {
        let keys = block_keys(text);
        self.stamp(&keys);
        while self.used_at.len() > self.capacity_blocks {
            let Some((_, key)) = self.by_age.pop_first() else {
                break;
            };
            self.used_at.remove(&key);
        }
    }

    /// Marks `keys` used, the last one first (so heads are the newest).
    fn stamp(&mut self, keys: &[u64]) {
        for key in keys.iter().rev() {
            self.tick += 1;
            if let Some(old) = self.used_at.insert(*key, self.tick) {
                self.by_age.remove(&old);
            }
            self.by_age.insert(self.tick, *key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(seed: u64, n: usize) -> String {
        (0..n)
            .map(|i| format!("w{}x{} ", seed, i * 7 % 13))
            .collect()
    }

    fn messages(turns: &[(&str, String)]) -> String {
        let v: Vec<_> = turns
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        serde_json::to_string(&v).unwrap()
    }

    #[test]
    fn keys_are_chained() {
        let a = vec![b'a'; 3 * BLOCK_BYTES + 10];
        let mut b = a.clone();
        b[5] = b'b';
        let (ka, kb) = (block_keys(&a), block_keys(&b));
        assert_eq!(ka.len(), 3);
        // One differing byte in block 0 changes every later key.
        assert!(ka.iter().zip(&kb).all(|(x, y)| x != y));
        // A longer text with the same start shares the leading keys.
        let mut c = a.clone();
        c.extend_from_slice(&[b'z'; BLOCK_BYTES]);
        assert_eq!(block_keys(&c)[..3], ka[..]);
    }

    #[test]
    fn conversation_turn_two_hits_about_turn_one() {
        let mut cache = PrefixCache::new(100_000);
        let turn1 = messages(&[("system", words(1, 60)), ("user", words(2, 200))]);
        assert_eq!(cache.lookup(turn1.as_bytes()), 0);
        cache.insert(turn1.as_bytes());
        let turn2 = messages(&[
            ("system", words(1, 60)),
            ("user", words(2, 200)),
            ("assistant", words(3, 100)),
            ("user", words(4, 50)),
        ]);
        // Turn 2's JSON starts with turn 1's minus the closing `]`.
        assert!(turn2.starts_with(&turn1[..turn1.len() - 1]));
        let hits = cache.lookup(turn2.as_bytes());
        assert_eq!(hits, (turn1.len() - 1) / BLOCK_BYTES);
        let prompt_tokens = u32::try_from(turn2.len() / 4).unwrap();
        let cached = cached_tokens(hits, prompt_tokens);
        let turn1_tokens = u32::try_from(turn1.len() / 4).unwrap();
        assert!(cached <= turn1_tokens && cached + TOKENS_PER_BLOCK > turn1_tokens);
    }

    #[test]
    fn shared_system_prompt_hits_and_unrelated_misses() {
        let mut cache = PrefixCache::new(100_000);
        let system = words(9, 150);
        let a = messages(&[("system", system.clone()), ("user", words(1, 30))]);
        cache.insert(a.as_bytes());
        let b = messages(&[("system", system.clone()), ("user", words(2, 30))]);
        let shared = messages(&[("system", system)]);
        assert_eq!(cache.lookup(b.as_bytes()), (shared.len() - 1) / BLOCK_BYTES);
        assert!(cache.lookup(b.as_bytes()) > 0);
        let unrelated = messages(&[("user", words(5, 300))]);
        assert_eq!(cache.lookup(unrelated.as_bytes()), 0);
    }

    #[test]
    fn cached_tokens_never_cover_the_whole_prompt() {
        assert_eq!(cached_tokens(4, 256), 255);
        assert_eq!(cached_tokens(4, 300), 256);
        assert_eq!(cached_tokens(0, 0), 0);
        assert_eq!(cached_tokens(1, 1), 0);
    }

    #[test]
    fn capacity_bounds_the_cache_and_evicts_the_oldest() {
        let mut cache = PrefixCache::new(10);
        let old = vec![b'o'; 6 * BLOCK_BYTES];
        let new = vec![b'n'; 6 * BLOCK_BYTES];
        cache.insert(&old);
        cache.insert(&new);
        assert_eq!(cache.len(), 10);
        // The newer prompt is intact; the older lost its tail, kept its head.
        assert_eq!(cache.lookup(&new), 6);
        assert_eq!(cache.lookup(&old), 4);
        // Nothing is stored at capacity 0.
        let mut none = PrefixCache::new(0);
        none.insert(&old);
        assert!(none.is_empty());
        assert_eq!(none.lookup(&old), 0);
    }
}
