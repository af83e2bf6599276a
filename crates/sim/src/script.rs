//! What the simulator will send for one request, and when: a pure function
//! of the profile, the request and a seed. The server only sleeps until each
//! step's time and writes its bytes, so the script is the ground truth's
//! plan and tests can check it without sockets.
//!
//! The engine's state (queue wait, prefix-cache hits, requests running) is
//! decided by `serve` through `engine` before planning and comes in as
//! numbers ([`Scheduling`]), so planning stays pure: the queue wait shifts
//! every step (headers included), uncached prompt tokens add prefill time to
//! the first token, and the batch size stretches every gap.

use super::profile::{Fault, LineEnding, Profile, Split};
use tokentap_core::decode::dialect::Dialect;
use tokentap_core::decode::Operation;

mod dialects;
mod plan;
pub mod tools;
pub use plan::plan;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::time::Duration;

/// What the simulator understood of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    pub operation: Operation,
    /// The API the request spoke (its answer is written in it).
    pub dialect: Dialect,
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub max_tokens: Option<u64>,
    pub prompt_tokens: u32,
    pub model: Option<String>,
    /// Sequence number of the request at this simulator.
    pub seq: u64,
    /// What the engine decided when it admitted the request.
    pub sched: Scheduling,
    /// Answer with this tool call (`tools::wants_tool_call`).
    pub tool_call: Option<tools::ToolCall>,
}

/// The engine-derived numbers of one request, fixed when it is admitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scheduling {
    /// Prompt tokens served from the prefix cache (no prefill cost; reported
    /// in `usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: u32,
    /// Requests generating at the simulator when this one started, itself
    /// included (0 and 1 both mean alone).
    pub running: u32,
    /// Time spent queued for KV capacity: every step is shifted by it.
    pub queue_wait: Duration,
}

/// Output tokens the response will carry (the request's `max_tokens`
/// capped by the profile's `output_tokens`, at least one).
pub fn output_tokens(p: &Profile, max_tokens: Option<u64>) -> u32 {
    max_tokens
        .map_or(p.output_tokens, |m| {
            u32::try_from(m).unwrap_or(u32::MAX).min(p.output_tokens)
        })
        .max(1)
}

/// Request admitted → first token: the base TTFT plus the prefill cost of
/// the uncached prompt tokens and what the cached ones still cost.
pub fn ttft(p: &Profile, prompt_tokens: u32, cached_tokens: u32) -> Duration {
    let cached = cached_tokens.min(prompt_tokens);
    let uncached = f64::from(prompt_tokens - cached);
    ms(p.ttft_ms
        + p.prefill_ms_per_1k * uncached / 1000.0
        + p.cached_prefill_ms_per_1k * f64::from(cached) / 1000.0)
}

/// The mean inter-token gap when `running` requests share the engine.
pub fn mean_gap_ms(p: &Profile, running: u32) -> f64 {
    p.itl_ms * (1.0 + p.batch_slowdown * f64::from(running.saturating_sub(1)))
}

/// The kind of each thing written (kept in the ground truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    Headers,
    Role,
    KeepAlive,
    Token,
    Malformed,
    Error,
    Finish,
    Usage,
    Done,
    Body,
    End,
    Reset,
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes (already HTTP-framed) in one `write`.
    Write(Vec<u8>),
    /// Reset the connection (RST).
    Reset,
    /// Close the connection (FIN) without finishing the response.
    Close,
}

/// One step: at `at` after the request was received, do `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub action: Action,
    /// Set on the last step of a logical event (the one the truth records).
    pub mark: Option<Mark>,
    /// Output tokens this event carries.
    pub tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub steps: Vec<Step>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// The connection cannot be reused after this response.
    pub closes: bool,
}

const WORDS: &[&str] = &[
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "token",
    "stream",
    "latency",
    "é",
    "naïve",
    "\"quoted\"",
    "new\nline",
    "tab\t",
    "back\\slash",
    "42",
    "∑",
    "🙂",
    "and",
    "of",
    "to",
];

struct Builder {
    steps: Vec<Step>,
    rng: StdRng,
    split: Split,
    line_ending: LineEnding,
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64((v.max(0.0)) / 1000.0)
}

impl Builder {
    fn done(self, prompt_tokens: u32, completion_tokens: u32, closes: bool) -> Script {
        Script {
            steps: self.steps,
            prompt_tokens,
            completion_tokens,
            closes,
        }
    }

    fn eol(&mut self) -> &'static str {
        match self.line_ending {
            LineEnding::Lf => "\n",
            LineEnding::Crlf => "\r\n",
            LineEnding::Cr => "\r",
            LineEnding::Mixed => match self.rng.random_range(0..3) {
                0 => "\n",
                1 => "\r\n",
                _ => "\r",
            },
        }
    }

    fn raw(&mut self, at: Duration, bytes: Vec<u8>, mark: Option<Mark>, tokens: u32) {
        self.steps.push(Step {
            at,
            action: Action::Write(bytes),
            mark,
            tokens,
        });
    }

    /// One HTTP chunk (or, with `split=random`, 1–3 chunks cut anywhere).
    fn chunked(&mut self, at: Duration, data: &[u8], mark: Mark, tokens: u32) {
        let pieces = match self.split {
            Split::None => 1,
            Split::Random => self.rng.random_range(1..=3usize).min(data.len().max(1)),
        };
        let mut cuts: Vec<usize> = (1..pieces)
            .map(|_| self.rng.random_range(1..data.len().max(2)))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut start = 0;
        let n = cuts.len();
        for (i, end) in cuts
            .into_iter()
            .chain(std::iter::once(data.len()))
            .enumerate()
        {
            let piece = data.get(start..end).unwrap_or_default();
            start = end;
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(piece);
            framed.extend_from_slice(b"\r\n");
            let last = i == n;
            self.raw(
                at,
                framed,
                last.then_some(mark),
                if last { tokens } else { 0 },
            );
        }
    }

    fn event(&mut self, at: Duration, data: &str, mark: Mark, tokens: u32) {
        let eol = self.eol();
        let bytes = format!("data: {data}{eol}{eol}");
        self.chunked(at, bytes.as_bytes(), mark, tokens);
    }
}

fn head(status: u16, reason: &str, headers: &[(&str, String)]) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {status} {reason}\r\nserver: tokentap-sim\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

#[cfg(test)]
mod tests;
