//! The cells, one system at a time (`mod.rs` interleaves the systems in
//! rounds): S1 non-streaming latency (open loop at a fixed rate, latency
//! from each request's scheduled start, so a stall counts against every
//! request it delays — no coordinated omission), S2 streaming TTFT and
//! per-event delay against the simulator's send times (same process, same
//! clock), and S8 memory under 1,000 streams. The CPU each system used comes
//! from `/proc/PID/task/*/schedstat` around the cell.

use super::conn::{chat_request, Conn, Exchange};
use super::stats::{Dist, Hist, Idle};
use super::systems::{cpu_ns, rss_kib};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_sim::Simulator;

/// One streaming profile of the simulator.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Profile {
    pub events: u32,
    pub every_ms: u32,
}

impl Profile {
    pub fn name(self) -> String {
        format!("{} × {} ms", self.events, self.every_ms)
    }

    /// The model name (LiteLLM maps it to these simulator settings) and
    /// the `x-sim` header every other system forwards.
    pub fn model(self) -> String {
        format!("sim-{}x{}", self.events, self.every_ms)
    }

    fn x_sim(self) -> String {
        format!(
            "ttft-ms=0,itl-ms={},output-tokens={},numbered=true",
            self.every_ms, self.events
        )
    }
}

/// The memory cell's streams: 3 s at 20 ms pacing.
pub const MEMORY: Profile = Profile {
    events: 150,
    every_ms: 20,
};

/// The model and header of the non-streaming cell: 16 tokens at once.
pub const FAST: Profile = Profile {
    events: 16,
    every_ms: 0,
};

pub fn request(p: Profile, stream: bool, id: &str) -> Vec<u8> {
    chat_request(
        &p.model(),
        stream,
        p.events,
        &[("x-sim", p.x_sim()), ("x-request-id", id.to_string())],
    )
}

/// The LiteLLM model list for these profiles.
pub fn litellm_models(profiles: &[Profile], upstream: SocketAddr) -> String {
    profiles
        .iter()
        .map(|p| {
            format!(
                "  - model_name: {m}\n    litellm_params:\n      model: openai/{m}\n      api_base: http://{upstream}/v1\n      api_key: sk-bench\n      extra_headers: {{\"x-sim\": \"{x}\"}}\n",
                m = p.model(),
                x = p.x_sim()
            )
        })
        .collect()
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct S1 {
    /// Scheduled start → last byte.
    pub latency: Dist,
    pub requests: u64,
    pub errors: u64,
    pub cpu_us_per_request: Option<f64>,
    pub idle: f64,
}

/// Non-streaming requests at `rate` per second on one keep-alive
/// connection for `length`.
pub async fn s1(addr: SocketAddr, pid: Option<u32>, rate: f64, length: Duration, round: u32) -> S1 {
    let mut conn = Conn::new(addr);
    for i in 0..50 {
        let _ = conn
            .exchange(&request(FAST, false, &format!("warm-{round}-{i}")))
            .await;
    }
    let req = request(FAST, false, "s1");
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let mut h = Hist::default();
    let (mut ok, mut errors) = (0u64, 0u64);
    let start = Instant::now() + Duration::from_millis(5);
    let every = Duration::from_secs_f64(1.0 / rate);
    let mut due = start;
    let mut prev_end = start;
    // A system slower than the rate falls behind: stop at 1.5 × the length.
    while due < start + length && Instant::now() < start + length.mul_f64(1.5) {
        tokio::time::sleep_until(due.into()).await;
        match conn.exchange(&req).await {
            Ok(ex) if ex.status == 200 => {
                // Held up by the previous request: latency counts from when
                // it was due (no coordinated omission). On time: from the
                // send (the driver's timer wakes up to 1 ms late; that is
                // not the system's).
                let from = if due < prev_end { due } else { ex.sent };
                h.add(ex.end_at.saturating_duration_since(from));
                prev_end = ex.end_at;
                ok += 1;
            }
            _ => errors += 1,
        }
        due += every;
    }
    S1 {
        latency: h.dist(),
        requests: ok,
        errors,
        cpu_us_per_request: cpu0
            .zip(pid)
            .map(|(c0, p)| cpu_ns(p).saturating_sub(c0) as f64 / 1e3 / ok.max(1) as f64),
        idle: idle.share(),
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct S2 {
    pub streams: u64,
    pub failed: u64,
    /// Request sent → first token read, client side.
    pub ttft: Dist,
    /// Token event read − the simulator's write of it.
    pub event_delay: Dist,
    /// |client gap − simulator gap|, per event after the first.
    pub gap_distortion: Dist,
    /// Token events per client read that carried any (1.00 = none merged).
    pub events_per_read: f64,
    pub tokens_lost: u64,
    /// Tokens repeated or out of order.
    pub tokens_misordered: u64,
    /// Streams whose events could be matched to the simulator's record.
    pub matched: u64,
    pub cpu_us_per_event: Option<f64>,
    pub idle: f64,
}

pub struct Stream {
    pub ex: Exchange,
    pub truth: Option<tokentap_sim::truth::Truth>,
}

/// One stream of profile `p` on a new connection, with the simulator's
/// record of it.
pub async fn one_stream(
    addr: SocketAddr,
    sim: Arc<Simulator>,
    p: Profile,
    id: String,
) -> Option<Stream> {
    let mut conn = Conn::new(addr);
    let ex = conn.exchange(&request(p, true, &id)).await.ok()?;
    let truth = sim.truth.wait_for(&id, Duration::from_secs(2)).await;
    Some(Stream { ex, truth })
}

/// `concurrency` clients each running `per_client` streams of profile `p`.
pub async fn s2(
    addr: SocketAddr,
    pid: Option<u32>,
    sim: Arc<Simulator>,
    p: Profile,
    concurrency: u32,
    per_client: u32,
    tag: &str,
) -> S2 {
    // Warm the path (and the proxy's upstream pool).
    let _ = one_stream(
        addr,
        sim.clone(),
        Profile {
            events: 2,
            every_ms: 1,
        },
        format!("{tag}-warm"),
    )
    .await;
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let mut clients = Vec::new();
    for c in 0..concurrency {
        let (sim, tag) = (sim.clone(), tag.to_string());
        clients.push(tokio::spawn(async move {
            // Stagger the clients over one gap.
            tokio::time::sleep(Duration::from_micros(
                u64::from(p.every_ms) * 1000 * u64::from(c) / u64::from(concurrency.max(1)),
            ))
            .await;
            let mut out = Vec::new();
            for k in 0..per_client {
                out.push(one_stream(addr, sim.clone(), p, format!("{tag}-{c}-{k}")).await);
            }
            out
        }));
    }
    let mut streams = Vec::new();
    for c in clients {
        streams.extend(c.await.unwrap_or_default());
    }
    let cpu = cpu0.zip(pid).map(|(c0, p)| cpu_ns(p).saturating_sub(c0));
    let mut r = S2 {
        idle: idle.share(),
        ..S2::default()
    };
    let (mut ttft, mut delay, mut distortion) = (Hist::default(), Hist::default(), Hist::default());
    let (mut token_events, mut token_reads) = (0u64, 0u64);
    for s in streams {
        let Some(s) = s else {
            r.failed += 1;
            continue;
        };
        if s.ex.status != 200 {
            r.failed += 1;
            continue;
        }
        r.streams += 1;
        if let Some(first) = s.ex.first_token() {
            ttft.add(first.saturating_duration_since(s.ex.sent));
        }
        // Order and completeness from the numbered tokens.
        let got: Vec<u32> = s.ex.tokens().collect();
        let expected = p.events as usize;
        r.tokens_lost += expected.saturating_sub(got.len()) as u64;
        r.tokens_misordered += got
            .iter()
            .enumerate()
            .filter(|(i, t)| **t as usize != *i)
            .count() as u64;
        let events: Vec<_> =
            s.ex.events
                .iter()
                .filter(|e| !e.tokens.is_empty())
                .collect();
        token_events += events.len() as u64;
        let mut reads: Vec<u32> = events.iter().map(|e| e.read).collect();
        reads.dedup();
        token_reads += reads.len() as u64;
        // Against the simulator's write times (one token per event).
        let Some(truth) = s.truth else { continue };
        let sent = truth.token_times();
        if sent.len() != events.len() {
            continue;
        }
        r.matched += 1;
        let mut prev: Option<(Instant, Instant)> = None;
        for (e, w) in events.iter().zip(&sent) {
            delay.add_signed_ns(signed(e.at, *w));
            if let Some((pe, pw)) = prev {
                let client_gap = signed(e.at, pe);
                let sim_gap = signed(*w, pw);
                distortion.add_signed_ns((client_gap - sim_gap).abs());
            }
            prev = Some((e.at, *w));
        }
    }
    r.ttft = ttft.dist();
    r.event_delay = delay.dist();
    r.gap_distortion = distortion.dist();
    r.events_per_read = if token_reads == 0 {
        f64::NAN
    } else {
        token_events as f64 / token_reads as f64
    };
    r.cpu_us_per_event = cpu.map(|ns| ns as f64 / 1e3 / token_events.max(1) as f64);
    r
}

fn signed(a: Instant, b: Instant) -> i128 {
    if a >= b {
        a.duration_since(b).as_nanos() as i128
    } else {
        -(b.duration_since(a).as_nanos() as i128)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct S8 {
    pub streams: u64,
    pub failed: u64,
    pub idle_kib: u64,
    /// Median of the samples taken while every stream was open.
    pub plateau_kib: u64,
    pub peak_kib: u64,
    /// Two seconds after the last stream ended.
    pub after_kib: u64,
}

/// A fresh process's memory: idle, with `streams` open at 20 ms pacing,
/// after.
pub async fn s8(addr: SocketAddr, pid: u32, streams: u32) -> S8 {
    let p = MEMORY;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut r = S8 {
        idle_kib: rss_kib(pid),
        ..S8::default()
    };
    let mut tasks = Vec::new();
    for i in 0..streams {
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(u64::from(i) * 1000)).await;
            let mut conn = Conn::new(addr);
            conn.exchange(&request(p, true, &format!("mem-{i}")))
                .await
                .is_ok_and(|ex| ex.status == 200 && ex.tokens().count() == p.events as usize)
        }));
    }
    // All open from ~1 s (staggered starts) until ~3 s.
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_millis(2800) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let kib = rss_kib(pid);
        r.peak_kib = r.peak_kib.max(kib);
        if start.elapsed() > Duration::from_millis(1200) {
            samples.push(kib);
        }
    }
    for t in tasks {
        match t.await {
            Ok(true) => r.streams += 1,
            _ => r.failed += 1,
        }
    }
    samples.sort_unstable();
    r.plateau_kib = samples.get(samples.len() / 2).copied().unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.after_kib = rss_kib(pid);
    r
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct S4 {
    pub concurrency: u32,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    /// Send → last byte (closed loop: each connection waits for its answer).
    pub latency: Dist,
    pub cpu_us_per_request: Option<f64>,
    pub idle: f64,
}

/// Closed loop: `concurrency` keep-alive connections, each sending its next
/// non-streaming request as soon as the last one is answered, for `length`.
pub async fn s4(addr: SocketAddr, pid: Option<u32>, concurrency: u32, length: Duration) -> S4 {
    // Open the connections (and warm the proxy's upstream pool) first.
    let mut conns = Vec::new();
    for c in 0..concurrency {
        let mut conn = Conn::new(addr);
        let _ = conn
            .exchange(&request(FAST, false, &format!("s4-warm-{c}")))
            .await;
        conns.push(conn);
    }
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let start = Instant::now();
    let end = start + length;
    let mut tasks = Vec::new();
    for mut conn in conns {
        tasks.push(tokio::spawn(async move {
            let req = request(FAST, false, "s4");
            let (mut h, mut ok, mut errors) = (Hist::default(), 0u64, 0u64);
            while Instant::now() < end {
                match conn.exchange(&req).await {
                    Ok(ex) if ex.status == 200 => {
                        h.add(ex.end_at.saturating_duration_since(ex.sent));
                        ok += 1;
                    }
                    _ => errors += 1,
                }
            }
            (h, ok, errors)
        }));
    }
    let mut all = Hist::default();
    let (mut ok, mut errors) = (0u64, 0u64);
    for t in tasks {
        if let Ok((h, o, e)) = t.await {
            all.merge(&h);
            ok += o;
            errors += e;
        }
    }
    let took = start.elapsed().as_secs_f64();
    S4 {
        concurrency,
        requests: ok,
        errors,
        rps: ok as f64 / took,
        latency: all.dist(),
        cpu_us_per_request: cpu0
            .zip(pid)
            .map(|(c0, p)| cpu_ns(p).saturating_sub(c0) as f64 / 1e3 / ok.max(1) as f64),
        idle: idle.share(),
    }
}
