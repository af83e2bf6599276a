//! The sweeps, one system at a time: S3 (non-streaming requests arriving
//! at a fixed rate, whatever the system does — open loop, a new connection
//! whenever every open one is busy, so a slow system queues requests
//! instead of slowing the arrivals) and S5 (N concurrent streams at 20 ms
//! pacing, against the simulator's write times, for the stream-concurrency
//! ceiling). `report.rs` turns them into the sweep tables and ceilings.

use super::cells::{one_stream, request, Profile, FAST};
use super::conn::Conn;
use super::stats::{Dist, Hist, Idle};
use super::systems::cpu_ns;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_sim::Simulator;

/// Offered rates of S3 (requests per second); LiteLLM's own below.
pub const S3_RATES: [f64; 6] = [500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0];
pub const S3_RATES_SLOW: [f64; 5] = [25.0, 50.0, 100.0, 200.0, 400.0];

/// S3 stops at the first rate whose error share is above this.
pub const S3_MAX_ERRORS: f64 = 0.001;

/// The driver's p99 lateness beyond which an S3 point is driver-bound.
pub const DRIVER_LATE_US: f64 = 5_000.0;

/// Requests the driver keeps outstanding at most; an arrival beyond it
/// counts as an error (the system is far past its ceiling).
const MAX_OUTSTANDING: usize = 2_048;

#[derive(Debug, Clone, Default, Serialize)]
pub struct S3 {
    pub offered: f64,
    /// Answered requests per second over the cell.
    pub achieved: f64,
    pub requests: u64,
    pub errors: u64,
    /// Send → last byte.
    pub latency: Dist,
    /// Send − due: the driver's own lateness. Its timer fires once per
    /// millisecond, so up to ~1 ms is the schedule's granularity; a p99
    /// above `DRIVER_LATE_US` means the driver's core fell behind.
    pub lateness: Dist,
    /// Connections the driver had to open.
    pub connections: u64,
    pub cpu_us_per_request: Option<f64>,
    pub idle: f64,
}

impl S3 {
    pub fn error_share(&self) -> f64 {
        let all = self.requests + self.errors;
        if all == 0 {
            1.0
        } else {
            self.errors as f64 / all as f64
        }
    }

    /// The driver, not the system, fell behind the schedule.
    pub fn driver_bound(&self) -> bool {
        self.lateness.p99 > DRIVER_LATE_US
    }
}

#[derive(Default)]
struct Tally {
    latency: Hist,
    lateness: Hist,
    ok: u64,
    errors: u64,
}

/// Non-streaming requests at `rate` per second for `length`.
pub async fn s3(addr: SocketAddr, pid: Option<u32>, rate: f64, length: Duration) -> S3 {
    let pool: Arc<Mutex<Vec<Conn>>> = Arc::default();
    // Warm one connection (and the proxy's upstream pool).
    let mut warm = Conn::new(addr);
    for i in 0..20 {
        let _ = warm
            .exchange(&request(FAST, false, &format!("s3-warm-{i}")))
            .await;
    }
    lock(&pool).push(warm);
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let outstanding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let opened = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let req: Arc<[u8]> = request(FAST, false, "s3").into();
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let every = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now() + Duration::from_millis(5);
    let end = start + length;
    let mut due = start;
    let mut tasks = tokio::task::JoinSet::new();
    while due < end {
        tokio::time::sleep_until(due.into()).await;
        // Every arrival due by now (the timer wakes once per millisecond).
        let now = Instant::now();
        while due <= now && due < end {
            use std::sync::atomic::Ordering::Relaxed;
            if outstanding.load(Relaxed) >= MAX_OUTSTANDING {
                lock(&tally).errors += 1;
                due += every;
                continue;
            }
            outstanding.fetch_add(1, Relaxed);
            let (pool, tally, outstanding, opened, req) = (
                pool.clone(),
                tally.clone(),
                outstanding.clone(),
                opened.clone(),
                req.clone(),
            );
            let this_due = due;
            tasks.spawn(async move {
                let taken = lock(&pool).pop();
                let mut conn = taken.unwrap_or_else(|| {
                    opened.fetch_add(1, Relaxed);
                    Conn::new(addr)
                });
                let result = conn.exchange(&req).await;
                let mut t = lock(&tally);
                match result {
                    Ok(ex) if ex.status == 200 => {
                        t.latency.add(ex.end_at.saturating_duration_since(ex.sent));
                        t.lateness.add(ex.sent.saturating_duration_since(this_due));
                        t.ok += 1;
                        drop(t);
                        lock(&pool).push(conn);
                    }
                    _ => t.errors += 1,
                }
                outstanding.fetch_sub(1, Relaxed);
            });
            due += every;
        }
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    // Stragglers get a second to finish; what is still out then failed.
    let drain = tokio::time::timeout(Duration::from_secs(1), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    let cut = if drain.is_err() {
        tasks.len() as u64
    } else {
        0
    };
    tasks.abort_all();
    let took = start.elapsed().as_secs_f64();
    let t = lock(&tally);
    S3 {
        offered: rate,
        achieved: t.ok as f64 / took,
        requests: t.ok,
        errors: t.errors + cut,
        latency: t.latency.dist(),
        lateness: t.lateness.dist(),
        connections: opened.load(std::sync::atomic::Ordering::Relaxed),
        cpu_us_per_request: cpu0
            .zip(pid)
            .map(|(c0, p)| cpu_ns(p).saturating_sub(c0) as f64 / 1e3 / t.ok.max(1) as f64),
        idle: idle.share(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Concurrent stream counts of S5; LiteLLM stops at the first it fails.
pub const S5_STREAMS: [u32; 5] = [64, 256, 1_024, 2_048, 4_096];

/// S5's streams: 2 s at 20 ms pacing, started over the first second, so
/// every stream is open at once for about a second.
pub const PACED: Profile = Profile {
    events: 100,
    every_ms: 20,
};

/// A stream stalls when one of its gaps at the client exceeds this many
/// pacing intervals.
pub const STALL_FACTOR: u32 = 10;

#[derive(Debug, Clone, Default, Serialize)]
pub struct S5 {
    pub streams: u32,
    pub completed: u64,
    pub failed: u64,
    pub tokens_lost: u64,
    /// Streams with a client-side gap above `STALL_FACTOR` × the pacing.
    pub stalled: u64,
    /// Token event read − the simulator's write of it.
    pub delay: Dist,
    /// Token events delivered per second while the cell ran.
    pub events_per_s: f64,
    pub cpu_us_per_event: Option<f64>,
    /// The system's CPU time over the cell's wall time (1.0 = its core).
    pub cpu_share: Option<f64>,
    pub idle: f64,
}

impl S5 {
    /// Every event delivered, in time, with no stall.
    pub fn delivered(&self) -> bool {
        self.failed == 0 && self.tokens_lost == 0 && self.stalled == 0 && self.completed > 0
    }
}

/// `n` streams of `PACED`, started evenly over one second.
pub async fn s5(addr: SocketAddr, pid: Option<u32>, sim: Arc<Simulator>, n: u32, tag: &str) -> S5 {
    let p = PACED;
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n as usize);
    for i in 0..n {
        let (sim, id) = (sim.clone(), format!("{tag}-{i}"));
        let at = start + Duration::from_micros(1_000_000 * u64::from(i) / u64::from(n.max(1)));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            one_stream(addr, sim, p, id).await
        }));
    }
    let mut r = S5 {
        streams: n,
        ..S5::default()
    };
    let mut delay = Hist::default();
    let mut events = 0u64;
    let stall = Duration::from_millis(u64::from(p.every_ms) * u64::from(STALL_FACTOR));
    let mut streams = Vec::with_capacity(n as usize);
    for t in tasks {
        streams.push(t.await.ok().flatten());
    }
    let took = start.elapsed();
    let cpu = cpu0.zip(pid).map(|(c0, p)| cpu_ns(p).saturating_sub(c0));
    r.idle = idle.share();
    for s in streams {
        let Some(s) = s.filter(|s| s.ex.status == 200) else {
            r.failed += 1;
            continue;
        };
        r.completed += 1;
        let got = s.ex.tokens().count();
        r.tokens_lost += (p.events as usize).saturating_sub(got) as u64;
        let times: Vec<Instant> =
            s.ex.events
                .iter()
                .filter(|e| !e.tokens.is_empty())
                .map(|e| e.at)
                .collect();
        events += times.len() as u64;
        if times
            .windows(2)
            .any(|w| matches!(w, [a, b] if b.saturating_duration_since(*a) > stall))
        {
            r.stalled += 1;
        }
        if let Some(truth) = s.truth {
            let sent = truth.token_times();
            if sent.len() == times.len() {
                for (at, w) in times.iter().zip(&sent) {
                    delay.add(at.saturating_duration_since(*w));
                }
            }
        }
    }
    r.delay = delay.dist();
    r.events_per_s = events as f64 / took.as_secs_f64();
    r.cpu_us_per_event = cpu.map(|ns| ns as f64 / 1e3 / events.max(1) as f64);
    r.cpu_share = cpu.map(|ns| ns as f64 / took.as_nanos().max(1) as f64);
    r
}
