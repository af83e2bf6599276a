//! Running a load model: the closed-loop workers (plain or sweep) and the
//! open-loop dispatcher, each request raced against the stop signal.
//!
//! Owns: who sends what when, and keeping a conversation's turns in order.
//! Does not own: the draws (`workload`, `load`) or one request (`request`).

use super::load::{ArrivalClock, Budget, Steps};
use super::request::{self, Outcome, RequestResult, Shared};
use super::workload::{Generator, Options, Planned, Session, Workload};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

/// What the tasks of one run share.
pub struct Run {
    pub shared: Shared,
    pub budget: Budget,
    pub steps: Option<Steps>,
    pub workload: Workload,
    pub opts: Options,
    pub seed: u64,
}

impl Run {
    fn generator(&self, stream: u64) -> Generator {
        Generator::new(self.workload, self.opts.clone(), self.seed, stream)
    }
}

/// Resolves once `stop` is true (never, if its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Sends one request unless the run is stopped first.
async fn one(
    run: &Run,
    planned: &Planned,
    n: u64,
    step: Option<usize>,
    stop: watch::Receiver<bool>,
) -> RequestResult {
    let start = Instant::now();
    tokio::select! {
        r = request::send(&run.shared, planned, n, step) => r,
        _ = stopped(stop) => request::cancelled(&run.shared, planned, n, step, start),
    }
}

/// The closed loop (and the sweep): `workers` workers until the budget,
/// the sweep or the run ends.
pub async fn closed(
    run: &Arc<Run>,
    workers: usize,
    stop: &watch::Receiver<bool>,
) -> Vec<RequestResult> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let run = run.clone();
        let stop = stop.clone();
        tasks.spawn(async move { worker(&run, w, stop).await });
    }
    let mut results = Vec::new();
    while let Some(r) = tasks.join_next().await {
        results.extend(r.unwrap_or_default());
    }
    results
}

/// One closed-loop worker: its own generator (stream `w`) and session.
async fn worker(run: &Run, w: usize, stop: watch::Receiver<bool>) -> Vec<RequestResult> {
    let mut gen = run.generator(w as u64);
    let mut session: Option<Session> = None;
    let mut out = Vec::new();
    loop {
        if *stop.borrow() {
            break;
        }
        let step = match &run.steps {
            None => None,
            Some(steps) => {
                let elapsed = run.shared.started.elapsed();
                match steps.next_active(w, elapsed) {
                    None => break,
                    Some(at) if at > elapsed => {
                        tokio::select! {
                            _ = tokio::time::sleep_until((run.shared.started + at).into()) => {}
                            _ = stopped(stop.clone()) => break,
                        }
                        continue;
                    }
                    Some(_) => steps.index_at(elapsed),
                }
            }
        };
        let Some(n) = run.budget.take(Instant::now()) else {
            break;
        };
        let planned = gen.next(&mut session);
        let r = one(run, &planned, n, step, stop.clone()).await;
        let cancelled = r.outcome == Outcome::Cancelled;
        out.push(r);
        if cancelled {
            break;
        }
    }
    out
}

/// The open loop: one dispatcher draws arrivals and spawns each request.
/// Conversation turns still go one at a time per session: a session waits
/// in `idle` while its turn is in flight, and an arrival with no idle
/// session starts a new one (so the request rate is kept, not the session rate).
pub async fn open(
    run: &Arc<Run>,
    mut clock: ArrivalClock,
    stop: watch::Receiver<bool>,
) -> Vec<RequestResult> {
    let mut gen = run.generator(0);
    let mut rng = StdRng::seed_from_u64(run.seed ^ 0xa771_7a15);
    let (idle_tx, mut idle_rx) = mpsc::unbounded_channel::<Session>();
    let mut idle: VecDeque<Session> = VecDeque::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut results = Vec::new();
    let mut next = run.shared.started;
    loop {
        next += clock.next_gap(&mut rng);
        if run.budget.expired(next) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = stopped(stop.clone()) => break,
        }
        let Some(n) = run.budget.take(Instant::now()) else {
            break;
        };
        while let Ok(s) = idle_rx.try_recv() {
            idle.push_back(s);
        }
        let mut session = if run.workload == Workload::Conversation {
            idle.pop_front()
        } else {
            None
        };
        let planned = gen.next(&mut session);
        let back = session
            .filter(|s| !s.finished())
            .map(|s| (s, idle_tx.clone()));
        let (run2, stop2) = (run.clone(), stop.clone());
        tasks.spawn(async move {
            let r = one(&run2, &planned, n, None, stop2).await;
            if let Some((s, tx)) = back {
                let _ = tx.send(s);
            }
            r
        });
        while let Some(done) = tasks.try_join_next() {
            results.extend(done.ok());
        }
    }
    while let Some(done) = tasks.join_next().await {
        results.extend(done.ok());
    }
    results
}
