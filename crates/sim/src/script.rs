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
/// the uncached prompt tokens.
pub fn ttft(p: &Profile, prompt_tokens: u32, cached_tokens: u32) -> Duration {
    let uncached = f64::from(prompt_tokens.saturating_sub(cached_tokens));
    ms(p.ttft_ms + p.prefill_ms_per_1k * uncached / 1000.0)
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

/// Plans the response to one request.
pub fn plan(p: &Profile, req: &RequestSpec) -> Script {
    let mut b = Builder {
        steps: Vec::new(),
        rng: StdRng::seed_from_u64(p.seed.wrapping_add(req.seq)),
        split: p.split,
        line_ending: p.line_ending,
    };
    let model = req.model.clone().unwrap_or_else(|| p.model.clone());
    let id = format!("sim-{}", req.seq);
    let wait = req.sched.queue_wait;
    let t_head = wait + ms(p.header_delay_ms);
    let n_tokens = output_tokens(p, req.max_tokens);
    let prompt_tokens = req.prompt_tokens;
    let cached_tokens = req.sched.cached_tokens.min(prompt_tokens);
    let gap_ms = mean_gap_ms(p, req.sched.running);

    if let Fault::Status(code) = p.fault {
        let body = json!({"error": {"message": format!("simulated {code}"), "type": "sim_error", "code": code}}).to_string();
        let reason = http::StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        let mut bytes = head(
            code,
            reason,
            &[
                ("content-type", "application/json".into()),
                ("content-length", body.len().to_string()),
            ],
        );
        bytes.extend_from_slice(body.as_bytes());
        b.raw(t_head, bytes, Some(Mark::Body), 0);
        return b.done(prompt_tokens, 0, false);
    }

    // Token event times: first at TTFT (never before the headers), then gaps.
    let per_event = p.tokens_per_event.max(1);
    let n_events = n_tokens.div_ceil(per_event);
    let mut times = Vec::with_capacity(n_events as usize);
    let mut t = (wait + ttft(p, prompt_tokens, cached_tokens)).max(t_head);
    for i in 0..n_events {
        if let Fault::Stall(k, extra) = p.fault {
            if k == i {
                t += Duration::from_millis(extra);
            }
        }
        times.push(t);
        let jitter = if p.itl_jitter_ms > 0.0 {
            b.rng.random_range(-p.itl_jitter_ms..=p.itl_jitter_ms)
        } else {
            0.0
        };
        t += ms(gap_ms + jitter);
    }
    let t_last = times.last().copied().unwrap_or(t_head);
    let reasoning = p.reasoning_tokens.min(n_tokens);
    let usage = |completion: u32| {
        let mut u = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion, "prompt_tokens_details": {"cached_tokens": cached_tokens}});
        if reasoning > 0 {
            if let Some(obj) = u.as_object_mut() {
                obj.insert(
                    "completion_tokens_details".into(),
                    json!({"reasoning_tokens": reasoning.min(completion)}),
                );
            }
        }
        u
    };
    // Tokens `first..first + k`: random words, or their numbers with
    // `--numbered` (so a client can spot lost, repeated or reordered tokens
    // whatever a proxy does to the framing).
    let numbered = p.numbered;
    let text_of = |rng: &mut StdRng, first: u32, k: u32| -> String {
        (first..first + k)
            .map(|i| {
                if numbered {
                    format!("{i} ")
                } else {
                    format!(
                        "{} ",
                        WORDS.get(rng.random_range(0..WORDS.len())).unwrap_or(&"x")
                    )
                }
            })
            .collect()
    };
    if req.operation == Operation::Embeddings {
        let at = (wait + ttft(p, prompt_tokens, cached_tokens)).max(t_head);
        return dialects::embeddings(b, &model, at, prompt_tokens);
    }
    if req.dialect != Dialect::OpenAi {
        let (mut texts, mut tokens, mut sent) = (Vec::new(), Vec::new(), 0u32);
        for _ in &times {
            let k = per_event.min(n_tokens - sent);
            texts.push(text_of(&mut b.rng, sent, k));
            tokens.push(k);
            sent += k;
        }
        let shape = dialects::Shape {
            dialect: req.dialect,
            stream: req.stream,
            model,
            id,
            t_head,
            times,
            texts,
            tokens,
            prompt_tokens,
            cached_tokens,
            chat: req.operation == Operation::Chat,
        };
        return dialects::plan(b, &shape);
    }
    let chat = req.operation == Operation::Chat;
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };

    if !req.stream {
        let text = (0..n_events)
            .map(|e| text_of(&mut b.rng, e * per_event, per_event))
            .collect::<String>();
        let choice = if chat && reasoning > 0 {
            json!({"index": 0, "message": {"role": "assistant", "reasoning_content": "thinking", "content": text}, "finish_reason": "length"})
        } else if chat {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        } else {
            json!({"index": 0, "text": text, "finish_reason": "length"})
        };
        let body = json!({"id": id, "object": if chat {"chat.completion"} else {"text_completion"}, "created": 0, "model": model,
            "choices": [choice], "usage": usage(n_tokens)}).to_string();
        let headers = [
            ("content-type", "application/json".to_string()),
            ("content-length", body.len().to_string()),
        ];
        let mut bytes = head(200, "OK", &headers);
        let split_at = bytes.len();
        bytes.extend_from_slice(body.as_bytes());
        // Non-streaming bodies arrive when generation is done.
        match p.split {
            Split::None => b.raw(t_last, bytes, Some(Mark::Body), n_tokens),
            Split::Random => {
                let mut cuts: Vec<usize> =
                    (0..3).map(|_| b.rng.random_range(1..bytes.len())).collect();
                cuts.push(split_at);
                cuts.sort_unstable();
                cuts.dedup();
                let mut start = 0;
                let last = cuts.len();
                for (i, end) in cuts
                    .into_iter()
                    .chain(std::iter::once(bytes.len()))
                    .enumerate()
                {
                    let piece = bytes.get(start..end).unwrap_or_default().to_vec();
                    start = end;
                    let done = i == last;
                    b.raw(
                        t_last,
                        piece,
                        done.then_some(Mark::Body),
                        if done { n_tokens } else { 0 },
                    );
                }
            }
        }
        return b.done(prompt_tokens, n_tokens, false);
    }

    let headers = [
        ("content-type", "text/event-stream".to_string()),
        ("cache-control", "no-cache".to_string()),
        ("transfer-encoding", "chunked".to_string()),
        ("x-sim-request", req.seq.to_string()),
    ];
    b.raw(t_head, head(200, "OK", &headers), Some(Mark::Headers), 0);
    let chunk = |choice: serde_json::Value, usage: Option<serde_json::Value>| {
        let mut v =
            json!({"id": id, "object": object, "created": 0, "model": model, "choices": [choice]});
        if let (Some(u), Some(obj)) = (usage, v.as_object_mut()) {
            obj.insert("usage".into(), u);
        }
        v.to_string()
    };
    if chat && p.role_delta {
        let data = chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}),
            None,
        );
        b.event(t_head, &data, Mark::Role, 0);
    }
    if let Fault::HugeLine(n) = p.fault {
        let mut left = n;
        let mut first = true;
        while left > 0 {
            let take = left.min(64 * 1024);
            let mut piece = if first {
                b"data: ".to_vec()
            } else {
                Vec::new()
            };
            first = false;
            piece.resize(piece.len() + take, b'x');
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            b.raw(t_head, framed, None, 0);
            left -= take;
        }
        b.raw(t_head, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
        return b.done(prompt_tokens, 0, false);
    }
    if p.keepalive_ms > 0.0 {
        let every = ms(p.keepalive_ms);
        let mut k = t_head + every;
        let first = times.first().copied().unwrap_or(t_head);
        while k < first {
            let eol = b.eol();
            let bytes = format!(": keep-alive{eol}{eol}");
            b.chunked(k, bytes.as_bytes(), Mark::KeepAlive, 0);
            k += every;
        }
    }
    let continuous = p.continuous_usage || req.continuous_usage;
    let mut sent = 0u32;
    for (i, at) in times.iter().copied().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        match p.fault {
            Fault::Reset(k) if k == i => {
                b.steps.push(Step {
                    at,
                    action: Action::Reset,
                    mark: Some(Mark::Reset),
                    tokens: 0,
                });
                return b.done(prompt_tokens, sent, true);
            }
            Fault::Close(k) if k == i => {
                b.steps.push(Step {
                    at,
                    action: Action::Close,
                    mark: Some(Mark::Close),
                    tokens: 0,
                });
                return b.done(prompt_tokens, sent, true);
            }
            Fault::Eof(k) if k == i => {
                b.raw(at, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
                return b.done(prompt_tokens, sent, false);
            }
            Fault::Error(k) if k == i => {
                let err = json!({"error": {"message": "simulated in-stream error", "type": "server_error"}}).to_string();
                b.event(at, &err, Mark::Error, 0);
                b.event(at, "[DONE]", Mark::Done, 0);
                b.raw(at, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
                return b.done(prompt_tokens, sent, false);
            }
            Fault::Malformed(k) if k == i => {
                b.event(
                    at,
                    "{\"choices\":[{\"delta\":{\"content\":\"broken",
                    Mark::Malformed,
                    0,
                );
                continue;
            }
            _ => {}
        }
        let k = per_event.min(n_tokens - sent);
        sent += k;
        let text = text_of(&mut b.rng, sent - k, k);
        let choice = if chat && sent - k < reasoning {
            json!({"index": 0, "delta": {"reasoning_content": text}, "finish_reason": null})
        } else if chat {
            json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
        } else {
            json!({"index": 0, "text": text, "finish_reason": null})
        };
        let data = chunk(choice, continuous.then(|| usage(sent)));
        b.event(at, &data, Mark::Token, k);
    }
    let finish = if chat {
        json!({"index": 0, "delta": {}, "finish_reason": "length"})
    } else {
        json!({"index": 0, "text": "", "finish_reason": "length"})
    };
    let data = chunk(finish, continuous.then(|| usage(sent)));
    b.event(t_last, &data, Mark::Finish, 0);
    if req.include_usage || p.force_usage {
        let data = json!({"id": id, "object": object, "created": 0, "model": model, "choices": [], "usage": usage(sent)}).to_string();
        b.event(t_last, &data, Mark::Usage, 0);
    }
    b.event(t_last, "[DONE]", Mark::Done, 0);
    b.raw(t_last, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
    b.done(prompt_tokens, sent, false)
}

#[cfg(test)]
mod tests;
