//! The simulator's knobs. The same struct is the `tokentap sim` command line
//! and, per request, the `x-sim` header (`x-sim: ttft-ms=50,fault=reset@3`
//! applies `--ttft-ms=50 --fault=reset@3` on top of the server's profile),
//! so tests and the demo shape each request without restarting anything.

use clap::{Parser, ValueEnum};
use std::fmt;
use std::str::FromStr;

/// How one simulated response behaves.
#[derive(Debug, Clone, Parser, PartialEq)]
#[command(no_binary_name = true, args_override_self = true)]
pub struct Profile {
    /// Model name reported in responses and `/v1/models`.
    #[arg(long, default_value = "sim-model")]
    pub model: String,
    /// Request admitted → first token event (ms), before the prefill cost.
    #[arg(long, default_value_t = 200.0)]
    pub ttft_ms: f64,
    /// Prefill cost: TTFT grows by this many ms per 1,000 uncached prompt
    /// tokens (prompt tokens minus prefix-cache hits).
    #[arg(long = "prefill-ms-per-1k", default_value_t = 0.0)]
    pub prefill_ms_per_1k: f64,
    /// What a prefix-cache hit still costs: TTFT grows by this many ms per
    /// 1,000 cached prompt tokens (0: a cached token is free).
    #[arg(long = "cached-prefill-ms-per-1k", default_value_t = 0.0)]
    pub cached_prefill_ms_per_1k: f64,
    /// Mean gap between token events (ms).
    #[arg(long, default_value_t = 20.0)]
    pub itl_ms: f64,
    /// Uniform jitter added to each gap, ± this many ms (seeded).
    #[arg(long, default_value_t = 0.0)]
    pub itl_jitter_ms: f64,
    /// Batching slowdown: each gap is itl-ms × (1 + F × (running − 1)),
    /// `running` being the requests generating when this one starts.
    #[arg(long, default_value_t = 0.0)]
    pub batch_slowdown: f64,
    /// Output tokens when the request sets no max_tokens (else the smaller).
    #[arg(long, default_value_t = 64)]
    pub output_tokens: u32,
    /// Tokens carried by each token event.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_event: u32,
    /// The first this-many output tokens are reasoning (`reasoning_content`),
    /// reported in `usage.completion_tokens_details.reasoning_tokens`.
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u32,
    /// Send a role-only first delta right after the headers (chat).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub role_delta: bool,
    /// Send `: keep-alive` comments this often while waiting for the first token (0 = never).
    #[arg(long, default_value_t = 0.0)]
    pub keepalive_ms: f64,
    /// SSE line ending.
    #[arg(long, value_enum, default_value_t = LineEnding::Lf)]
    pub line_ending: LineEnding,
    /// How each event is cut into HTTP chunks.
    #[arg(long, value_enum, default_value_t = Split::None)]
    pub split: Split,
    /// Usage in every token event (vLLM `continuous_usage_stats`); also on
    /// when the request asks for it.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub continuous_usage: bool,
    /// Always send a usage chunk, even when the request did not ask.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub force_usage: bool,
    /// Delay before the response headers (ms).
    #[arg(long, default_value_t = 0.0)]
    pub header_delay_ms: f64,
    /// Fault to inject: none, status=CODE, malformed@K, reset@K, close@K,
    /// eof@K, stall@K:MS, error@K, huge-line:BYTES (K counts token events).
    #[arg(long, default_value = "none")]
    pub fault: Fault,
    /// Token texts are their numbers (`0 `, `1 `, ...) instead of random
    /// words: clients can check order and completeness (the benchmark).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub numbered: bool,
    /// Seed of the jitter and of the generated text (per request: seed + request number).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Default for Profile {
    fn default() -> Self {
        // The defaults above, parsed once (cannot fail: they are literals).
        Profile::try_parse_from(std::iter::empty::<String>()).unwrap_or_else(|_| Profile {
            model: "sim-model".into(),
            ttft_ms: 200.0,
            prefill_ms_per_1k: 0.0,
            cached_prefill_ms_per_1k: 0.0,
            itl_ms: 20.0,
            itl_jitter_ms: 0.0,
            batch_slowdown: 0.0,
            output_tokens: 64,
            tokens_per_event: 1,
            reasoning_tokens: 0,
            role_delta: true,
            keepalive_ms: 0.0,
            line_ending: LineEnding::Lf,
            split: Split::None,
            continuous_usage: false,
            force_usage: false,
            header_delay_ms: 0.0,
            fault: Fault::None,
            numbered: false,
            seed: 1,
        })
    }
}

impl Profile {
    /// Applies a request's `x-sim` header (`key=value,key=value`): the
    /// profile's own arguments followed by the header's are parsed again,
    /// the later occurrence winning. (clap's `update_from` would reset
    /// fields with defaults.)
    pub fn with_overrides(&self, header: &str) -> Result<Profile, String> {
        let extra = header
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|kv| format!("--{kv}"));
        Profile::try_parse_from(self.to_args().into_iter().chain(extra)).map_err(|e| e.to_string())
    }

    /// The arguments that parse back into this profile.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--model={}", self.model),
            format!("--ttft-ms={}", self.ttft_ms),
            format!("--prefill-ms-per-1k={}", self.prefill_ms_per_1k),
            format!(
                "--cached-prefill-ms-per-1k={}",
                self.cached_prefill_ms_per_1k
            ),
            format!("--itl-ms={}", self.itl_ms),
            format!("--itl-jitter-ms={}", self.itl_jitter_ms),
            format!("--batch-slowdown={}", self.batch_slowdown),
            format!("--output-tokens={}", self.output_tokens),
            format!("--tokens-per-event={}", self.tokens_per_event),
            format!("--reasoning-tokens={}", self.reasoning_tokens),
            format!("--role-delta={}", self.role_delta),
            format!("--keepalive-ms={}", self.keepalive_ms),
            format!("--line-ending={}", enum_name(self.line_ending)),
            format!("--split={}", enum_name(self.split)),
            format!("--continuous-usage={}", self.continuous_usage),
            format!("--force-usage={}", self.force_usage),
            format!("--header-delay-ms={}", self.header_delay_ms),
            format!("--fault={}", self.fault),
            format!("--numbered={}", self.numbered),
            format!("--seed={}", self.seed),
        ]
    }
}

fn enum_name<E: ValueEnum>(e: E) -> String {
    e.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LineEnding {
    Lf,
    Crlf,
    Cr,
    /// A random one per event.
    Mixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Split {
    /// One HTTP chunk per event.
    None,
    /// Each event cut into 1–3 HTTP chunks at random points, written back to back.
    Random,
}

/// An injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Answer with this status and an OpenAI-style error body.
    Status(u16),
    /// Token event K carries broken JSON.
    Malformed(u32),
    /// Reset the connection (RST) after K token events.
    Reset(u32),
    /// Close the connection (FIN, no chunked terminator) after K token events.
    Close(u32),
    /// End the body cleanly after K token events, without finish or `[DONE]`.
    Eof(u32),
    /// Pause this long (ms) before token event K.
    Stall(u32, u64),
    /// Token event K is replaced by an error event, then `[DONE]`.
    Error(u32),
    /// After the headers, one SSE line of this many bytes with no newline, then a clean end.
    HugeLine(usize),
}

impl FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("bad fault `{s}`");
        let num = |v: &str| v.parse::<u32>().map_err(|_| bad());
        if s == "none" {
            return Ok(Fault::None);
        }
        if let Some(code) = s.strip_prefix("status=") {
            let code: u16 = code.parse().map_err(|_| bad())?;
            return if (400..600).contains(&code) {
                Ok(Fault::Status(code))
            } else {
                Err(bad())
            };
        }
        if let Some(n) = s.strip_prefix("huge-line:") {
            return n.parse().map(Fault::HugeLine).map_err(|_| bad());
        }
        let (kind, arg) = s.split_once('@').ok_or_else(bad)?;
        match kind {
            "malformed" => Ok(Fault::Malformed(num(arg)?)),
            "reset" => Ok(Fault::Reset(num(arg)?)),
            "close" => Ok(Fault::Close(num(arg)?)),
            "eof" => Ok(Fault::Eof(num(arg)?)),
            "error" => Ok(Fault::Error(num(arg)?)),
            "stall" => {
                let (k, ms) = arg.split_once(':').ok_or_else(bad)?;
                Ok(Fault::Stall(num(k)?, ms.parse().map_err(|_| bad())?))
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => write!(f, "none"),
            Fault::Status(c) => write!(f, "status={c}"),
            Fault::Malformed(k) => write!(f, "malformed@{k}"),
            Fault::Reset(k) => write!(f, "reset@{k}"),
            Fault::Close(k) => write!(f, "close@{k}"),
            Fault::Eof(k) => write!(f, "eof@{k}"),
            Fault::Stall(k, ms) => write!(f, "stall@{k}:{ms}"),
            Fault::Error(k) => write!(f, "error@{k}"),
            Fault::HugeLine(n) => write!(f, "huge-line:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_round_trip() {
        for s in [
            "none",
            "status=503",
            "malformed@2",
            "reset@5",
            "close@1",
            "eof@3",
            "stall@4:1500",
            "error@0",
            "huge-line:10485760",
        ] {
            assert_eq!(s.parse::<Fault>().map(|f| f.to_string()), Ok(s.to_string()));
        }
        assert!("status=200".parse::<Fault>().is_err());
        assert!("reset".parse::<Fault>().is_err());
    }

    #[test]
    fn header_overrides_apply_on_top() {
        let base = Profile {
            ttft_ms: 10.0,
            ..Profile::default()
        };
        let p = base
            .with_overrides(
                "itl-ms=5, fault=reset@3,line-ending=crlf,role-delta=false,prefill-ms-per-1k=40,batch-slowdown=0.5",
            )
            .unwrap();
        assert_eq!(p.prefill_ms_per_1k, 40.0);
        assert_eq!(p.batch_slowdown, 0.5);
        assert_eq!(p.ttft_ms, 10.0);
        assert_eq!(p.itl_ms, 5.0);
        assert_eq!(p.fault, Fault::Reset(3));
        assert_eq!(p.line_ending, LineEnding::Crlf);
        assert!(!p.role_delta);
        assert!(base.with_overrides("no-such=1").is_err());
        // Every field survives the round trip through its arguments.
        let odd = Profile {
            model: "m x".into(),
            ttft_ms: 1.5,
            prefill_ms_per_1k: 12.5,
            cached_prefill_ms_per_1k: 1.25,
            itl_ms: 2.5,
            itl_jitter_ms: 0.5,
            batch_slowdown: 0.25,
            output_tokens: 3,
            tokens_per_event: 2,
            reasoning_tokens: 4,
            role_delta: false,
            keepalive_ms: 7.0,
            line_ending: LineEnding::Mixed,
            split: Split::Random,
            continuous_usage: true,
            force_usage: true,
            header_delay_ms: 9.0,
            fault: Fault::Stall(2, 30),
            numbered: true,
            seed: 77,
        };
        assert_eq!(odd.with_overrides(""), Ok(odd.clone()));
        assert_eq!(Profile::default().output_tokens, 64);
    }
}
