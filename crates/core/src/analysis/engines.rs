//! What engines say about their own memory, joined to the analysis windows
//! (test 8): KV-cache usage, preemptions and queue length, read from their
//! Prometheus endpoints (vLLM `vllm:*`, SGLang `sglang:*`, TGI `tgi_*`,
//! llama.cpp `llamacpp:*`).
//!
//! The parser reads only the sample lines of the names below (`name`,
//! optional `{labels}`, value) from the text exposition format. It is
//! written here because the crate for the job (`prometheus-parse` 0.2)
//! rejects metric names with colons, which is how vLLM, SGLang and
//! llama.cpp name theirs.

use serde::Serialize;

/// KV-cache usage (0–1) by engine family.
const KV_USAGE: &[(&str, &str)] = &[
    ("vllm", "vllm:kv_cache_usage_perc"),
    ("vllm", "vllm:gpu_cache_usage_perc"),
    ("sglang", "sglang:token_usage"),
    ("llamacpp", "llamacpp:kv_cache_usage_ratio"),
];
/// Cumulative preemption counters.
const PREEMPTIONS: &[(&str, &str)] = &[
    ("vllm", "vllm:num_preemptions_total"),
    ("vllm", "vllm:num_preemptions"),
    ("sglang", "sglang:num_retracted_reqs"),
];
/// Requests waiting for admission.
const QUEUED: &[(&str, &str)] = &[
    ("vllm", "vllm:num_requests_waiting"),
    ("sglang", "sglang:num_queue_reqs"),
    ("tgi", "tgi_queue_size"),
    ("llamacpp", "llamacpp:requests_deferred"),
];

/// What one scrape said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EngineReading {
    pub family: Option<&'static str>,
    /// Highest KV-cache usage across the engine's series (0–1).
    pub kv_usage: Option<f64>,
    /// Sum of the preemption counters.
    pub preemptions_total: Option<f64>,
    /// Sum of waiting requests.
    pub queued: Option<f64>,
}

/// The value of a sample line if it is one of `names`: `(family, value)`.
fn sample(
    line: &str,
    names: &'static [(&'static str, &'static str)],
) -> Option<(&'static str, f64)> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' ', '\t'])?;
    let name = line.get(..name_end)?;
    let (family, _) = names.iter().find(|(_, n)| *n == name)?;
    let rest = line.get(name_end..)?;
    // Skip the label set: a `}` inside a quoted value does not end it.
    let after_labels = if rest.starts_with('{') {
        let mut quoted = false;
        let mut escaped = false;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    end = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        rest.get(end?..)?
    } else {
        rest
    };
    let value = after_labels.split_whitespace().next()?;
    let v = match value {
        "NaN" => return None,
        "+Inf" | "-Inf" => return None,
        v => v.parse::<f64>().ok()?,
    };
    Some((family, v))
}

/// Reads the figures this module knows from a text exposition.
pub fn parse(text: &str) -> EngineReading {
    let mut r = EngineReading::default();
    for line in text.lines() {
        if let Some((fam, v)) = sample(line, KV_USAGE) {
            r.family.get_or_insert(fam);
            r.kv_usage = Some(r.kv_usage.map_or(v, |m: f64| m.max(v)));
        } else if let Some((fam, v)) = sample(line, PREEMPTIONS) {
            r.family.get_or_insert(fam);
            r.preemptions_total = Some(r.preemptions_total.unwrap_or(0.0) + v);
        } else if let Some((fam, v)) = sample(line, QUEUED) {
            r.family.get_or_insert(fam);
            r.queued = Some(r.queued.unwrap_or(0.0) + v);
        }
    }
    r
}

/// One engine over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineWindow {
    pub engine: String,
    pub family: Option<&'static str>,
    pub scrapes_ok: u64,
    pub scrapes_failed: u64,
    pub kv_usage_max: Option<f64>,
    pub kv_usage_mean: Option<f64>,
    /// Increase of the preemption counters over the window.
    pub preemptions: Option<f64>,
    pub queued_max: Option<f64>,
}

/// Accumulates one engine's readings until its window closes.
#[derive(Debug, Clone, Default)]
pub struct EngineAcc {
    ok: u64,
    failed: u64,
    family: Option<&'static str>,
    kv: Vec<f64>,
    queued_max: Option<f64>,
    /// The counter at the end of the previous window (or first reading).
    preempt_base: Option<f64>,
    preempt_last: Option<f64>,
}

impl EngineAcc {
    pub fn reading(&mut self, r: &EngineReading) {
        self.ok += 1;
        self.family = self.family.or(r.family);
        self.kv.extend(r.kv_usage);
        if let Some(q) = r.queued {
            self.queued_max = Some(self.queued_max.map_or(q, |m| m.max(q)));
        }
        if let Some(p) = r.preemptions_total {
            if self.preempt_base.is_none() {
                self.preempt_base = Some(p);
            }
            self.preempt_last = Some(p);
        }
    }

    pub fn failed(&mut self) {
        self.failed += 1;
    }

    /// Closes the window; the counter baseline carries over.
    pub fn take(&mut self, engine: &str) -> EngineWindow {
        let preemptions = match (self.preempt_base, self.preempt_last) {
            // A counter that went down was reset (engine restart).
            (Some(a), Some(b)) if b >= a => Some(b - a),
            (Some(_), Some(b)) => Some(b),
            _ => None,
        };
        let w = EngineWindow {
            engine: engine.to_owned(),
            family: self.family,
            scrapes_ok: self.ok,
            scrapes_failed: self.failed,
            kv_usage_max: self.kv.iter().copied().reduce(f64::max),
            kv_usage_mean: super::stats::mean(self.kv.iter().copied()),
            preemptions,
            queued_max: self.queued_max,
        };
        *self = EngineAcc {
            family: self.family,
            preempt_base: self.preempt_last,
            preempt_last: self.preempt_last,
            ..EngineAcc::default()
        };
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="we}ird"} 0.5
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="m"} 8.0
"#;

    #[test]
    fn reads_vllm() {
        let r = parse(VLLM);
        assert_eq!(r.family, Some("vllm"));
        assert_eq!(r.kv_usage, Some(0.5));
        assert_eq!(r.preemptions_total, Some(7.0));
        assert_eq!(r.queued, Some(3.0));
    }

    #[test]
    fn reads_sglang_llamacpp_tgi() {
        let r = parse("sglang:token_usage{model_name=\"x\"} 0.25\nsglang:num_queue_reqs 2\n");
        assert_eq!(
            (r.family, r.kv_usage, r.queued),
            (Some("sglang"), Some(0.25), Some(2.0))
        );
        let r = parse("llamacpp:kv_cache_usage_ratio 0.9\n");
        assert_eq!(r.kv_usage, Some(0.9));
        let r = parse("tgi_queue_size 4\n");
        assert_eq!((r.family, r.queued), (Some("tgi"), Some(4.0)));
        assert_eq!(parse("something_else 1\n"), EngineReading::default());
    }

    #[test]
    fn windows_count_preemptions_as_increase() {
        let mut acc = EngineAcc::default();
        for p in [10.0, 12.0, 15.0] {
            acc.reading(&EngineReading {
                preemptions_total: Some(p),
                kv_usage: Some(p / 100.0),
                ..EngineReading::default()
            });
        }
        acc.failed();
        let w = acc.take("e");
        assert_eq!(w.preemptions, Some(5.0));
        assert_eq!(w.kv_usage_max, Some(0.15));
        assert_eq!((w.scrapes_ok, w.scrapes_failed), (3, 1));
        acc.reading(&EngineReading {
            preemptions_total: Some(18.0),
            ..EngineReading::default()
        });
        assert_eq!(acc.take("e").preemptions, Some(3.0));
    }
}
