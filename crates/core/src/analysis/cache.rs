//! Test 7, prefix cache effectiveness: what the engine says it reused
//! (`cached_tokens` in usage), what that bought (TTFT with and without a
//! cache hit), and the reuse *opportunity* tokentap sees itself: how many
//! requests share a 1k / 4k / 16k-character prompt prefix with an earlier
//! one. Opportunity without realised hits means the engine's cache is off,
//! too small, or defeated by routing; realised hits without opportunity
//! mean reuse below 1k characters.

use super::sample::Sample;
use super::stats::Summary;
use crate::decode::fingerprint::PREFIX_CHARS;
use serde::Serialize;
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PrefixReuse {
    /// Prefix length in characters.
    pub chars: usize,
    /// Requests whose prompt is at least that long.
    pub requests: usize,
    /// Of those, requests whose prefix an earlier request had.
    pub reused: usize,
    pub reuse_ratio: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheReport {
    /// Requests whose usage reports cached tokens (0 included).
    pub requests_reporting: usize,
    /// Requests with cached tokens > 0.
    pub hits: usize,
    /// hits / requests_reporting.
    pub hit_ratio: Option<f64>,
    /// Σ cached / Σ input tokens over the requests reporting.
    pub cached_token_ratio: Option<f64>,
    pub ttft_hit_ms: Summary,
    pub ttft_miss_ms: Summary,
    /// Mean TTFT of misses minus mean TTFT of hits.
    pub ttft_saving_ms: Option<f64>,
    pub prefix_reuse: [PrefixReuse; 3],
}

/// `samples` in start order; `memory` carries prefixes across calls (live
/// windows) or is fresh (a whole record log).
pub fn analyze(samples: &[&Sample], memory: &mut PrefixMemory) -> CacheReport {
    let mut r = CacheReport::default();
    let (mut cached, mut input) = (0u64, 0u64);
    let (mut hit_ttft, mut miss_ttft) = (Vec::new(), Vec::new());
    for (k, slot) in r.prefix_reuse.iter_mut().enumerate() {
        slot.chars = PREFIX_CHARS.get(k).copied().unwrap_or_default();
    }
    for s in samples {
        for (k, slot) in r.prefix_reuse.iter_mut().enumerate() {
            if let Some(Some(h)) = s.prefix.get(k) {
                slot.requests += 1;
                // Keyed by length too: equal hashes of different lengths
                // are different prefixes.
                slot.reused += usize::from(memory.seen(&format!("{k}:{h}")));
            }
        }
        let Some(c) = s.cached_tokens else { continue };
        r.requests_reporting += 1;
        cached += c;
        input += s.input_tokens.unwrap_or(0);
        let ttft = s.ttft_ms.filter(|_| s.is_ok());
        if c > 0 {
            r.hits += 1;
            hit_ttft.extend(ttft);
        } else {
            miss_ttft.extend(ttft);
        }
    }
    for slot in &mut r.prefix_reuse {
        slot.reuse_ratio = (slot.requests > 0).then(|| slot.reused as f64 / slot.requests as f64);
    }
    r.hit_ratio = (r.requests_reporting > 0).then(|| r.hits as f64 / r.requests_reporting as f64);
    r.cached_token_ratio = (input > 0).then(|| cached as f64 / input as f64);
    r.ttft_hit_ms = Summary::of(hit_ttft);
    r.ttft_miss_ms = Summary::of(miss_ttft);
    r.ttft_saving_ms = match (r.ttft_miss_ms.mean, r.ttft_hit_ms.mean) {
        (Some(miss), Some(hit)) => Some(miss - hit),
        _ => None,
    };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(prefix: Option<&str>, cached: Option<u64>, ttft: f64) -> Sample {
        Sample {
            outcome: "ok".into(),
            ttft_ms: Some(ttft),
            input_tokens: Some(1_000),
            cached_tokens: cached,
            prefix: [prefix.map(str::to_owned), None, None],
            ..Sample::default()
        }
    }

    #[test]
    fn realised_hits_and_opportunity() {
        let v = [
            req(Some("aa"), Some(0), 300.0),
            req(Some("aa"), Some(800), 100.0),
            req(Some("bb"), Some(0), 300.0),
            req(Some("aa"), Some(0), 310.0), // opportunity, not realised
            req(None, None, 50.0),
        ];
        let refs: Vec<&Sample> = v.iter().collect();
        let r = analyze(&refs, &mut PrefixMemory::default());
        assert_eq!(r.requests_reporting, 4);
        assert_eq!(r.hits, 1);
        assert_eq!(r.cached_token_ratio, Some(0.2));
        assert_eq!(r.prefix_reuse[0].requests, 4);
        assert_eq!(r.prefix_reuse[0].reused, 2);
        assert_eq!(r.prefix_reuse[0].chars, 1_000);
        let saving = r.ttft_saving_ms.unwrap();
        assert!((saving - (910.0 / 3.0 - 100.0)).abs() < 1e-9);
    }

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
