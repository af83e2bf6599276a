//! Test 7, prefix cache effectiveness: what the engine says it reused
//! (`cached_tokens` in usage), what that bought, and the reuse
//! *opportunity* tokentap sees itself: how many
//! requests share a 1k / 4k / 16k-character prompt prefix with an earlier
//! one. Opportunity without realised hits means the engine's cache is off,
//! too small, or defeated by routing; realised hits without opportunity
//! mean reuse below 1k characters.
//!
//! What caching bought is *not* mean TTFT of misses minus mean TTFT of hits:
//! hits and misses differ in prompt length (a growing conversation hits
//! with its longest prompts), so that difference measures prompt length.
//! Instead TTFT is fitted on uncached and cached input tokens,
//! TTFT ≈ a + b·uncached + c·cached (least squares over completed
//! requests): c/b is what a cached token costs relative to an uncached
//! one, and (b − c)·cached is what a request's cached tokens saved it. A
//! hit is a request with at least `hit_share` of its prompt cached, not
//! any cached token: engines reuse a chat template's few tokens on nearly
//! every request. Assumptions (docs/analyses.md): prefill is about linear
//! in tokens over the range seen, and queueing is not correlated with
//! prompt length or caching.

pub use super::prefix_memory::PrefixMemory;
use super::sample::Sample;
use super::stats::{fit_plane, Summary};
use crate::decode::fingerprint::PREFIX_CHARS;
use serde::Serialize;

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

/// TTFT ≈ intercept + uncached·(uncached tokens / 1000) + cached·(cached
/// tokens / 1000), least squares over the requests that completed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CacheFit {
    pub intercept_ms: f64,
    /// What 1,000 uncached input tokens add to TTFT (prefill).
    pub uncached_ms_per_1k: f64,
    /// What 1,000 cached input tokens still add to TTFT.
    pub cached_ms_per_1k: f64,
    pub r2: f64,
    pub n: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheReport {
    /// Requests whose usage reports cached tokens (0 included).
    pub requests_reporting: usize,
    /// The share of its prompt a request must find cached to be a hit
    /// (`analysis.cache_hit_share`).
    pub hit_share: f64,
    /// Requests with cached / input ≥ `hit_share`.
    pub hits: usize,
    /// hits / requests_reporting.
    pub hit_ratio: Option<f64>,
    /// Σ cached / Σ input tokens over the requests reporting: the hit
    /// ratio by tokens.
    pub cached_token_ratio: Option<f64>,
    /// TTFT of hits and misses (descriptive only: they differ in prompt
    /// length as much as in caching; the saving comes from `fit`).
    pub ttft_hit_ms: Summary,
    pub ttft_miss_ms: Summary,
    /// TTFT on uncached and cached input tokens.
    pub fit: Option<CacheFit>,
    /// What a cached input token costs relative to an uncached one
    /// (`cached_ms_per_1k / uncached_ms_per_1k`): 0 = free, 1 = no saving.
    pub cached_token_cost_ratio: Option<f64>,
    /// Mean TTFT a hit's cached tokens saved it:
    /// (uncached − cached cost per token) × its cached tokens.
    pub saving_per_hit_ms: Option<f64>,
    /// The same over every request reporting cached tokens.
    pub saving_per_request_ms: Option<f64>,
    pub prefix_reuse: [PrefixReuse; 3],
}

/// Hits by default: at least half the prompt found cached.
pub const DEFAULT_HIT_SHARE: f64 = 0.5;

/// A hit: at least `share` of the input tokens cached (and some).
pub fn is_hit(cached: u64, input: Option<u64>, share: f64) -> bool {
    let n = input.unwrap_or(0).max(cached);
    cached > 0 && cached as f64 >= share * n as f64
}

/// Fewest completed requests the fit is made from.
const MIN_FIT: usize = 8;

/// `samples` in start order; `memory` carries prefixes across calls (live
/// windows) or is fresh (a whole record log). A hit has at least
/// `hit_share` of its input tokens cached.
pub fn analyze(samples: &[&Sample], memory: &mut PrefixMemory, hit_share: f64) -> CacheReport {
    let mut r = CacheReport {
        hit_share,
        ..CacheReport::default()
    };
    let (mut cached, mut input) = (0u64, 0u64);
    let (mut hit_ttft, mut miss_ttft) = (Vec::new(), Vec::new());
    // (uncached k-tokens, cached k-tokens, TTFT ms) of completed requests.
    let mut points = Vec::new();
    let mut cached_of_hits = Vec::new();
    let mut cached_of_all = Vec::new();
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
        let n = s.input_tokens.unwrap_or(0).max(c);
        cached += c;
        input += n;
        let hit = is_hit(c, s.input_tokens, hit_share);
        let ttft = s.ttft_ms.filter(|_| s.is_ok());
        if hit {
            r.hits += 1;
            hit_ttft.extend(ttft);
            cached_of_hits.push(c);
        } else {
            miss_ttft.extend(ttft);
        }
        cached_of_all.push(c);
        if let (Some(t), Some(_)) = (ttft, s.input_tokens) {
            points.push(((n - c) as f64 / 1e3, c as f64 / 1e3, t));
        }
    }
    for slot in &mut r.prefix_reuse {
        slot.reuse_ratio = (slot.requests > 0).then(|| slot.reused as f64 / slot.requests as f64);
    }
    r.hit_ratio = (r.requests_reporting > 0).then(|| r.hits as f64 / r.requests_reporting as f64);
    r.cached_token_ratio = (input > 0).then(|| cached as f64 / input as f64);
    r.ttft_hit_ms = Summary::of(hit_ttft);
    r.ttft_miss_ms = Summary::of(miss_ttft);
    r.fit = (points.len() >= MIN_FIT)
        .then(|| fit_plane(&points))
        .flatten()
        .map(|f| CacheFit {
            intercept_ms: f.intercept,
            uncached_ms_per_1k: f.slope_x,
            cached_ms_per_1k: f.slope_z,
            r2: f.r2,
            n: f.n,
        });
    if let Some(f) = r.fit.filter(|f| f.uncached_ms_per_1k > 0.0) {
        r.cached_token_cost_ratio = Some(f.cached_ms_per_1k / f.uncached_ms_per_1k);
        let per_token = (f.uncached_ms_per_1k - f.cached_ms_per_1k) / 1e3;
        let mean_saving = |v: &[u64]| {
            (!v.is_empty()).then(|| per_token * v.iter().sum::<u64>() as f64 / v.len() as f64)
        };
        r.saving_per_hit_ms = mean_saving(&cached_of_hits);
        r.saving_per_request_ms = mean_saving(&cached_of_all);
    }
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
        let r = analyze(&refs, &mut PrefixMemory::default(), DEFAULT_HIT_SHARE);
        assert_eq!(r.requests_reporting, 4);
        assert_eq!(r.hits, 1);
        assert_eq!(r.cached_token_ratio, Some(0.2));
        assert_eq!(r.prefix_reuse[0].requests, 4);
        assert_eq!(r.prefix_reuse[0].reused, 2);
        assert_eq!(r.prefix_reuse[0].chars, 1_000);
        assert_eq!(r.fit, None, "too few requests to fit");
    }

    /// TTFT = 10 ms + 20 ms per 1k uncached + 2 ms per 1k cached tokens;
    /// every request has a 16-token template cached; hits are the long
    /// second turns of conversations, misses short fresh prompts and first
    /// turns.
    fn confounded() -> Vec<Sample> {
        let ttft = |input: u64, cached: u64| {
            10.0 + 20.0 * (input - cached) as f64 / 1e3 + 2.0 * cached as f64 / 1e3
        };
        let mut v = Vec::new();
        for i in 0..12u64 {
            let fresh = 300 + 100 * i;
            let first = 1_500 + 80 * i;
            let second = first + 400 + 50 * (i % 3);
            for (input, cached) in [(fresh, 16), (first, 16), (second, first)] {
                v.push(Sample {
                    outcome: "ok".into(),
                    ttft_ms: Some(ttft(input, cached)),
                    input_tokens: Some(input),
                    cached_tokens: Some(cached),
                    ..Sample::default()
                });
            }
        }
        v
    }

    #[test]
    fn the_fit_recovers_what_cached_tokens_save_where_the_mean_difference_fails() {
        let v = confounded();
        let refs: Vec<&Sample> = v.iter().collect();
        let r = analyze(&refs, &mut PrefixMemory::default(), DEFAULT_HIT_SHARE);
        // A hit is most of the prompt cached, not the template's 16 tokens.
        assert_eq!((r.requests_reporting, r.hits), (36, 12));
        let f = r.fit.unwrap();
        assert!((f.uncached_ms_per_1k - 20.0).abs() < 1e-6, "{f:?}");
        assert!((f.cached_ms_per_1k - 2.0).abs() < 1e-6, "{f:?}");
        assert!((r.cached_token_cost_ratio.unwrap() - 0.1).abs() < 1e-6);
        // Each hit saved 18 ms per 1k of its cached tokens.
        let truth: f64 = v
            .iter()
            .filter_map(|s| s.cached_tokens.filter(|c| *c > 100))
            .map(|c| 18.0 * c as f64 / 1e3)
            .sum::<f64>()
            / 12.0;
        let saving = r.saving_per_hit_ms.unwrap();
        assert!((saving - truth).abs() < 1e-6, "{saving} vs {truth}");
        // The comparison of means is off by far more than 10 %.
        let naive = r.ttft_miss_ms.mean.unwrap() - r.ttft_hit_ms.mean.unwrap();
        assert!((naive - truth).abs() > 0.5 * truth, "{naive} vs {truth}");
        // With any cached token a hit, 35 of 36 would be "hits".
        let r = analyze(&refs, &mut PrefixMemory::default(), 1e-9);
        assert_eq!(r.hits, 36);
    }
}
