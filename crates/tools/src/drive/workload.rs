//! The methodology's five reference workloads as pure, seeded request
//! generators: what to send (messages, `max_tokens`, tenant), never when or
//! how (that is `load` and `request`).
//!
//! Lengths are in tokens of 4 bytes, as the simulator counts them (JSON bytes
//! of `messages` / 4); the text is pseudo-random ASCII words, so bytes are
//! characters and nothing needs escaping.
//!
//! | workload | input tokens | output tokens | shape |
//! |---|---|---|---|
//! | uniform | 512 ± 10 % | 128 ± 10 % | one user message |
//! | skewed | log-normal, median 300, σ 1.0, 16..16k | log-normal, median 100, σ 0.8, 8..2048 | one user message |
//! | conversation | system (per tenant) + growing history | 32..192 per turn | sessions of 3–8 turns, user turns 30..150 tokens |
//! | code | a shared repository context (4 of 2–4k tokens) + a 20..80-token suffix | 16..64 | system = repository, user = suffix |
//! | long-context | 8k..`max_context` | 64..256 | one user message |
//!
//! A conversation turn resends the whole history: the previous turns' user
//! messages and a synthetic assistant answer as long as the output planned
//! for that turn, so turn k+1's `messages` JSON starts with turn k's minus
//! its closing `]` (what a prefix cache feeds on). A session keeps its tenant.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// A reference workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Narrow lengths: input 512 ± 10 %, output 128 ± 10 %.
    Uniform,
    /// Heavy-tailed (log-normal) lengths; bursty arrivals with --rate.
    Skewed,
    /// Multi-turn sessions resending their growing history.
    Conversation,
    /// Code completion: long shared repository context, short outputs.
    Code,
    /// Inputs from 8k tokens to --max-context.
    LongContext,
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Uniform => "uniform",
            Workload::Skewed => "skewed",
            Workload::Conversation => "conversation",
            Workload::Code => "code",
            Workload::LongContext => "long-context",
        }
    }
}

/// How requests spread over tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TenantSpread {
    /// Every tenant equally likely.
    Uniform,
    /// Tenant i with weight 1/(i+1): a few heavy tenants, a long tail.
    Zipf,
}

/// One chat message (serialised as `{"role":..,"content":..}`, in that order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

/// One request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    /// Tenant index (0-based).
    pub tenant: u32,
    /// Conversation only: the session id and turn (0-based).
    pub session: Option<(u64, u32)>,
}

impl Planned {
    /// The `messages` array as sent.
    pub fn messages_json(&self) -> String {
        serde_json::to_string(&self.messages).unwrap_or_default()
    }

    /// Input tokens as the simulator counts them.
    pub fn input_tokens(&self) -> u32 {
        u32::try_from(self.messages_json().len() / 4).unwrap_or(u32::MAX)
    }
}

/// What every generator of one run shares.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Number of tenants (at least 1).
    pub tenants: u32,
    pub spread: TenantSpread,
    /// Longest input of the long-context workload (tokens).
    pub max_context_tokens: u32,
}

/// A conversation in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    id: u64,
    tenant: u32,
    turns: u32,
    turn: u32,
    history: Vec<Message>,
}

impl Session {
    pub fn finished(&self) -> bool {
        self.turn >= self.turns
    }
}

/// `[{"role":"user","content":""}]`: a one-message array around its content.
const ONE_MESSAGE_OVERHEAD: u32 = 30;
const REPOSITORIES: usize = 4;

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "token", "stream", "latency", "cache", "batch", "queue",
    "kernel", "tensor", "engine", "prompt", "answer", "model", "layer", "weight", "vector",
    "matrix", "river", "mountain", "garden", "window", "paper", "signal", "number", "market",
    "energy", "system", "network", "memory", "planet", "ocean", "forest", "silver", "golden",
    "simple", "quiet", "rapid", "bright", "the", "of", "and", "to", "in", "is", "for", "with",
    "on", "at", "by", "from", "as", "it", "was", "that", "this", "be", "are",
];

const CODE_WORDS: &[&str] = &[
    "fn", "let", "mut", "return", "if", "else", "match", "impl", "struct", "self", "Some", "None",
    "Ok", "Err", "len", "iter", "map", "into", "from", "new", "buf", "idx", "count", "{", "}", "(",
    ")", ";", "=", "+", "->", "&", "::", ".", ",", "<", ">", "[", "]",
];

/// ASCII text of exactly `bytes` bytes (words from `vocab` joined by spaces).
fn text(rng: &mut StdRng, vocab: &[&str], bytes: u32) -> String {
    let want = usize::try_from(bytes).unwrap_or(usize::MAX);
    let mut s = String::with_capacity(want + 16);
    while s.len() < want {
        let w = vocab
            .get(rng.random_range(0..vocab.len().max(1)))
            .unwrap_or(&"x");
        s.push_str(w);
        s.push(' ');
    }
    s.truncate(want);
    s
}

/// A log-normal draw with this median and σ (Box–Muller).
fn log_normal(rng: &mut StdRng, median: f64, sigma: f64) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    median * (sigma * z).exp()
}

fn clamp_u32(v: f64, lo: u32, hi: u32) -> u32 {
    // `as` saturates for floats; the clamp keeps it in range either way.
    (v.round() as u32).clamp(lo, hi.max(lo))
}

/// Tenant index for a draw.
fn pick_tenant(rng: &mut StdRng, opts: &Options) -> u32 {
    let n = opts.tenants.max(1);
    match opts.spread {
        TenantSpread::Uniform => rng.random_range(0..n),
        TenantSpread::Zipf => {
            let total: f64 = (1..=n).map(|i| 1.0 / f64::from(i)).sum();
            let mut x = rng.random::<f64>() * total;
            for i in 0..n {
                x -= 1.0 / f64::from(i + 1);
                if x < 0.0 {
                    return i;
                }
            }
            n - 1
        }
    }
}

/// The shared repositories of the code workload: a function of the seed only,
/// so every generator of a run (every worker) has the same ones.
fn repositories(seed: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_c0de);
    (0..REPOSITORIES)
        .map(|i| {
            let tokens: u32 = rng.random_range(2000..=4000);
            format!(
                "// repository r{i}: {}",
                text(&mut rng, CODE_WORDS, tokens * 4)
            )
        })
        .collect()
}

/// A per-tenant system prompt (~150 tokens), shared by that tenant's sessions.
fn system_prompt(seed: u64, tenant: u32) -> String {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5157_e111 ^ (u64::from(tenant) << 20));
    format!("You are assistant {tenant}. {}", text(&mut rng, WORDS, 600))
}

/// Generates one stream of requests. Each worker (closed loop) or the
/// dispatcher (open loop) owns one; `stream` makes their draws differ.
#[derive(Debug, Clone)]
pub struct Generator {
    workload: Workload,
    opts: Options,
    seed: u64,
    stream: u64,
    rng: StdRng,
    repos: Vec<String>,
    sessions: u64,
}

impl Generator {
    pub fn new(workload: Workload, opts: Options, seed: u64, stream: u64) -> Self {
        let repos = if workload == Workload::Code {
            repositories(seed)
        } else {
            Vec::new()
        };
        Generator {
            workload,
            opts,
            seed,
            stream,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream),
            repos,
            sessions: 0,
        }
    }

    /// The next request. Conversation continues the session in `session`
    /// (starting a new one there when it is empty or finished); the other
    /// workloads ignore it.
    pub fn next(&mut self, session: &mut Option<Session>) -> Planned {
        let rng = &mut self.rng;
        let tenant = pick_tenant(rng, &self.opts);
        let single = |rng: &mut StdRng, input: u32, output: u32| {
            let content = input
                .saturating_mul(4)
                .saturating_sub(ONE_MESSAGE_OVERHEAD)
                .max(4);
            (
                vec![Message {
                    role: "user",
                    content: text(rng, WORDS, content),
                }],
                output,
            )
        };
        let (messages, max_tokens) = match self.workload {
            Workload::Uniform => {
                let i = rng.random_range(461..=563);
                let o = rng.random_range(115..=141);
                single(rng, i, o)
            }
            Workload::Skewed => {
                let cap = 16_384.min(self.opts.max_context_tokens.max(16));
                let i = clamp_u32(log_normal(rng, 300.0, 1.0), 16, cap);
                let o = clamp_u32(log_normal(rng, 100.0, 0.8), 8, 2048);
                single(rng, i, o)
            }
            Workload::LongContext => {
                let hi = self.opts.max_context_tokens.max(16);
                let i = rng.random_range(8192.min(hi)..=hi);
                let o = rng.random_range(64..=256);
                single(rng, i, o)
            }
            Workload::Code => {
                let repo = self
                    .repos
                    .get(rng.random_range(0..self.repos.len().max(1)))
                    .cloned()
                    .unwrap_or_default();
                let suffix = rng.random_range(20..=80u32) * 4;
                let o = rng.random_range(16..=64);
                let messages = vec![
                    Message {
                        role: "system",
                        content: repo,
                    },
                    Message {
                        role: "user",
                        content: text(rng, CODE_WORDS, suffix),
                    },
                ];
                (messages, o)
            }
            Workload::Conversation => return self.turn(session, tenant),
        };
        Planned {
            messages,
            max_tokens,
            tenant,
            session: None,
        }
    }

    fn turn(&mut self, slot: &mut Option<Session>, tenant: u32) -> Planned {
        if slot.as_ref().is_none_or(Session::finished) {
            let id = (self.stream << 32) | self.sessions;
            self.sessions += 1;
            *slot = Some(Session {
                id,
                tenant,
                turns: self.rng.random_range(3..=8),
                turn: 0,
                history: vec![Message {
                    role: "system",
                    content: system_prompt(self.seed, tenant),
                }],
            });
        }
        let rng = &mut self.rng;
        let user = rng.random_range(30..=150u32) * 4;
        let output = rng.random_range(32..=192u32);
        let answer = text(rng, WORDS, output * 4);
        let user = text(rng, WORDS, user);
        let Some(s) = slot.as_mut() else {
            // Just filled above.
            return Planned {
                messages: Vec::new(),
                max_tokens: output,
                tenant,
                session: None,
            };
        };
        s.history.push(Message {
            role: "user",
            content: user,
        });
        let planned = Planned {
            messages: s.history.clone(),
            max_tokens: output,
            tenant: s.tenant,
            session: Some((s.id, s.turn)),
        };
        s.history.push(Message {
            role: "assistant",
            content: answer,
        });
        s.turn += 1;
        planned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            tenants: 4,
            spread: TenantSpread::Uniform,
            max_context_tokens: 32_768,
        }
    }

    fn draw(w: Workload, n: usize) -> Vec<Planned> {
        let mut g = Generator::new(w, opts(), 7, 0);
        let mut slot = None;
        (0..n).map(|_| g.next(&mut slot)).collect()
    }

    fn quantile(mut v: Vec<u32>, q: f64) -> u32 {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize]
    }

    #[test]
    fn uniform_lengths_stay_within_ten_percent() {
        for p in draw(Workload::Uniform, 500) {
            let i = p.input_tokens();
            assert!((461..=563).contains(&i), "{i}");
            assert!((115..=141).contains(&p.max_tokens));
            assert!(p.messages_json().is_ascii());
        }
    }

    #[test]
    fn skewed_lengths_are_heavy_tailed_around_their_medians() {
        let ps = draw(Workload::Skewed, 4000);
        let input: Vec<u32> = ps.iter().map(Planned::input_tokens).collect();
        let output: Vec<u32> = ps.iter().map(|p| p.max_tokens).collect();
        let (i50, i99) = (quantile(input.clone(), 0.5), quantile(input.clone(), 0.99));
        assert!((255..=345).contains(&i50), "median input {i50}");
        assert!(i99 > 5 * i50, "p99 {i99} vs median {i50}");
        assert!(input.iter().all(|i| (16..=16_384).contains(i)));
        let o50 = quantile(output.clone(), 0.5);
        assert!((85..=115).contains(&o50), "median output {o50}");
        assert!(output.iter().all(|o| (8..=2048).contains(o)));
    }

    #[test]
    fn long_context_spans_8k_to_the_limit() {
        let ps = draw(Workload::LongContext, 300);
        let input: Vec<u32> = ps.iter().map(Planned::input_tokens).collect();
        assert!(input.iter().all(|i| (8192..=32_768).contains(i)));
        assert!(quantile(input.clone(), 0.9) > 25_000);
        assert!(ps.iter().all(|p| (64..=256).contains(&p.max_tokens)));
    }

    #[test]
    fn conversation_turns_extend_the_previous_prefix() {
        let ps = draw(Workload::Conversation, 60);
        let mut sessions = 0;
        for pair in ps.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let ((sa, ta), (sb, tb)) = (a.session.unwrap(), b.session.unwrap());
            if sa == sb {
                assert_eq!(tb, ta + 1);
                assert_eq!(a.tenant, b.tenant, "a session keeps its tenant");
                let (ja, jb) = (a.messages_json(), b.messages_json());
                assert!(jb.starts_with(&ja[..ja.len() - 1]));
                // The assistant answer between them is as long as the planned output.
                let answer = &b.messages[b.messages.len() - 2];
                assert_eq!(answer.role, "assistant");
                assert_eq!(answer.content.len() as u32, a.max_tokens * 4);
            } else {
                assert_eq!(tb, 0);
                assert!((3..=8).contains(&(ta + 1)), "sessions last 3-8 turns");
                sessions += 1;
            }
        }
        assert!(sessions >= 5);
        assert!(ps.iter().all(|p| (32..=192).contains(&p.max_tokens)));
    }

    #[test]
    fn code_requests_share_repository_contexts_across_workers() {
        let mut a = Generator::new(Workload::Code, opts(), 3, 0);
        let mut b = Generator::new(Workload::Code, opts(), 3, 1);
        let mut none = None;
        let contexts: Vec<String> = (0..40)
            .flat_map(|_| [a.next(&mut none), b.next(&mut none)])
            .map(|p| {
                assert!((16..=64).contains(&p.max_tokens));
                assert_eq!(p.messages[0].role, "system");
                let ctx = p.messages[0].content.len() / 4;
                assert!((2000..=4010).contains(&ctx), "{ctx}");
                let suffix = p.messages[1].content.len() / 4;
                assert!((20..=80).contains(&suffix));
                p.messages[0].content.clone()
            })
            .collect();
        let mut distinct = contexts.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() <= REPOSITORIES && distinct.len() >= 2);
        // Requests are distinct even when their context is shared.
        let mut full: Vec<String> = (0..20).map(|_| a.next(&mut none).messages_json()).collect();
        full.sort();
        full.dedup();
        assert_eq!(full.len(), 20);
    }

    #[test]
    fn seeded_and_tenants_spread() {
        assert_eq!(draw(Workload::Skewed, 20), draw(Workload::Skewed, 20));
        let mut g = Generator::new(
            Workload::Uniform,
            Options {
                tenants: 8,
                spread: TenantSpread::Zipf,
                ..opts()
            },
            1,
            0,
        );
        let mut counts = [0u32; 8];
        for _ in 0..4000 {
            counts[g.next(&mut None).tenant as usize] += 1;
        }
        // Weight 1/(i+1): tenant 0 about 8x tenant 7.
        assert!(counts[0] > 5 * counts[7], "{counts:?}");
        assert!(counts.iter().all(|c| *c > 0));
    }
}
