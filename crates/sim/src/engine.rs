//! The simulated engine's shared state across requests: KV-capacity
//! admission (`admission`) and the prefix cache (`prefix_cache`), set by
//! engine-level flags ([`EngineArgs`]) that, unlike the per-request
//! `Profile`, cannot be changed by the `x-sim` header.
//!
//! Owns: the engine flags, reading a request's tenant and prompt text, and
//! the locking around the prefix cache. Does not own: timing (`script`) or
//! the connection (`serve`).

use super::admission::{Admission, Permit, TooLarge};
use super::prefix_cache::{self, PrefixCache};
use super::wire::Request;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::{Arc, Mutex};

/// Engine-level knobs of `tokentap sim` (not overridable per request).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct EngineArgs {
    /// Model vLLM-style prefix caching: the raw JSON of `messages` (or
    /// `prompt`) in 256-byte blocks with chained hashes; leading blocks seen
    /// before are reported as cached tokens (64 a block) and cost no prefill.
    #[arg(long)]
    pub prefix_cache: bool,
    /// Prefix-cache capacity in blocks; beyond it the least recently used
    /// blocks are evicted.
    #[arg(long, default_value_t = 100_000)]
    pub prefix_cache_blocks: usize,
    /// A chat template of this many tokens opens every prompt (counted in
    /// its prompt tokens); with `--prefix-cache` it is cached from the
    /// second request on, as llama.cpp and vLLM reuse a template's tokens:
    /// nearly every request then reports a few cached tokens.
    #[arg(long, default_value_t = 0)]
    pub template_tokens: u32,
    /// KV capacity in tokens (0 = unlimited). A request needs its prompt plus
    /// its planned output tokens; it waits in a queue until that much is
    /// free (the wait is part of its TTFT). Larger than the whole capacity: 400.
    #[arg(long, default_value_t = 0)]
    pub kv_capacity_tokens: u64,
    /// Unfair scheduling: requests of this tenant are admitted before all
    /// others. Tenant = `x-tenant` header, else the bearer token, else empty.
    #[arg(long)]
    pub favour_tenant: Option<String>,
}

impl Default for EngineArgs {
    fn default() -> Self {
        EngineArgs {
            prefix_cache: false,
            prefix_cache_blocks: 100_000,
            template_tokens: 0,
            kv_capacity_tokens: 0,
            favour_tenant: None,
        }
    }
}

/// The engine state one simulator shares between its connections.
#[derive(Debug)]
pub struct Engine {
    admission: Arc<Admission>,
    cache: Option<Mutex<PrefixCache>>,
    template_tokens: u32,
    /// A request was served: the template is in the cache.
    template_cached: std::sync::atomic::AtomicBool,
}

impl Engine {
    pub fn new(args: &EngineArgs) -> Self {
        Engine {
            admission: Admission::new(args.kv_capacity_tokens, args.favour_tenant.clone()),
            cache: args
                .prefix_cache
                .then(|| Mutex::new(PrefixCache::new(args.prefix_cache_blocks))),
            template_tokens: args.template_tokens,
            template_cached: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The engine's own metrics in vLLM's names (`GET /metrics`), so the
    /// engine scrape of the memory-pressure analysis has something real to
    /// read: KV-cache usage (0 with unlimited capacity), running and waiting
    /// requests, and a preemption counter (this engine queues, it never
    /// preempts).
    pub fn metrics_text(&self, model: &str) -> String {
        let a = &self.admission;
        let usage = match a.capacity() {
            0 => 0.0,
            c => a.used() as f64 / c as f64,
        };
        let m = model.replace(['"', '\\', '\n'], "_");
        format!(
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
             # TYPE vllm:kv_cache_usage_perc gauge\n\
             vllm:kv_cache_usage_perc{{model_name=\"{m}\"}} {usage}\n\
             # HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{model_name=\"{m}\"}} {}\n\
             # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{model_name=\"{m}\"}} {}\n\
             # HELP vllm:num_preemptions_total Cumulative number of preemptions from the engine.\n\
             # TYPE vllm:num_preemptions_total counter\n\
             vllm:num_preemptions_total{{model_name=\"{m}\"}} 0\n",
            a.running(),
            a.queued()
        )
    }

    /// Waits for KV capacity (see `admission`).
    pub async fn admit(&self, need_tokens: u64, tenant: &str) -> Result<Permit, TooLarge> {
        self.admission.admit(need_tokens, tenant).await
    }

    /// The chat template's tokens, which open every prompt.
    pub fn template_tokens(&self) -> u32 {
        self.template_tokens
    }

    /// Prompt tokens already in the prefix cache (0 when caching is off):
    /// the template once any request was served, then the prompt's leading
    /// blocks seen before.
    pub fn cached_tokens(&self, prompt: &[u8], prompt_tokens: u32) -> u32 {
        let Some(cache) = self.cache.as_ref() else {
            return 0;
        };
        let hits = cache.lock().map_or(0, |mut c| c.lookup(prompt));
        let template = if self
            .template_cached
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.template_tokens
        } else {
            0
        };
        prefix_cache::cached_tokens(hits, prompt_tokens.saturating_sub(template))
            .saturating_add(template)
            .min(prompt_tokens.saturating_sub(1))
    }

    /// Caches the prompt's full blocks (after it was served).
    pub fn remember(&self, prompt: &[u8]) {
        if let Some(mut c) = self.cache.as_ref().and_then(|c| c.lock().ok()) {
            c.insert(prompt);
            self.template_cached
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The tenant of a request: `x-tenant`, else the `Authorization: Bearer`
/// token, else empty.
pub fn tenant_of(req: &Request) -> String {
    if let Some(t) = req.header_str("x-tenant") {
        return t.trim().to_string();
    }
    req.header_str("authorization")
        .map(str::trim)
        .and_then(|v| {
            v.get(..7)
                .filter(|s| s.eq_ignore_ascii_case("bearer "))
                .and_then(|_| v.get(7..))
        })
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

#[derive(Deserialize)]
struct PromptView<'a> {
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt: Option<&'a RawValue>,
}

/// The raw JSON text of `messages` (else `prompt`) as sent: what the prefix
/// cache hashes. Empty when the body has neither.
pub fn prompt_text(body: &[u8]) -> &[u8] {
    serde_json::from_slice::<PromptView<'_>>(body)
        .ok()
        .and_then(|v| v.messages.or(v.prompt))
        .map(|raw| raw.get().as_bytes())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
            ..Request::default()
        }
    }

    #[test]
    fn tenant_from_header_then_bearer() {
        assert_eq!(
            tenant_of(&req(&[("x-tenant", "acme"), ("authorization", "Bearer k")])),
            "acme"
        );
        assert_eq!(
            tenant_of(&req(&[("authorization", "bearer tenant-3-key")])),
            "tenant-3-key"
        );
        assert_eq!(tenant_of(&req(&[("authorization", "Basic xyz")])), "");
        assert_eq!(tenant_of(&req(&[])), "");
    }

    #[test]
    fn prompt_text_is_the_raw_json() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        assert_eq!(prompt_text(body), br#"[{"role":"user","content":"hi"}]"#);
        assert_eq!(prompt_text(br#"{"prompt":"once"}"#), br#""once""#);
        assert_eq!(prompt_text(b"not json"), b"");
    }
}
