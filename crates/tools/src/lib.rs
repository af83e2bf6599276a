//! The tools around the proxy: `drive` (reference workloads against any
//! OpenAI-compatible endpoint, client-side timings), `bench` (tokentap side
//! by side with nginx, HAProxy and LiteLLM, BENCHMARKS.md) and `report`
//! (a record log → markdown and HTML with charts).
//!
//! Must not touch: the proxy's internals — the tools see tokentap as its
//! users do (a process, its record log, its scrape), plus the pure
//! analyses of `tokentap_core`.

pub mod bench;
pub mod drive;
pub mod report;

use std::time::Duration;

/// `90`, `90s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (s.get(..i).unwrap_or_default(), 1.0),
        Some((i, 'm')) => (s.get(..i).unwrap_or_default(), 60.0),
        Some((i, 'h')) => (s.get(..i).unwrap_or_default(), 3600.0),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 90s, 5m)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{s}` is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}
