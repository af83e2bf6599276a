//! Ground truth: what the simulator actually sent and when, per request.
//!
//! Kept in memory (bounded, newest kept) for in-process tests, and appended
//! as one JSON line per request to a file when `--ground-truth FILE` is set.
//! Times are instants taken right after each `write` returned (the bytes are
//! in the kernel), and in the file milliseconds since the request was
//! received plus the wall-clock receive time.

use super::script::Mark;
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Serialize)]
pub struct TruthEvent {
    pub mark: Mark,
    /// For a write, the moment it was handed to the kernel (the clock read
    /// just before the write).
    #[serde(skip)]
    pub at: Instant,
    /// Milliseconds since the request was received.
    pub t_ms: f64,
    pub tokens: u32,
}

/// One request as the simulator served it.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    pub seq: u64,
    /// The client's `x-request-id`, if any.
    pub request_id: Option<String>,
    pub path: String,
    pub stream: bool,
    pub fault: String,
    /// TLS server name the client sent, if TLS.
    pub sni: Option<String>,
    /// The request's `Accept-Encoding`, as it arrived.
    pub accept_encoding: Option<String>,
    #[serde(skip)]
    pub received: Instant,
    pub received_unix_ns: u128,
    pub events: Vec<TruthEvent>,
    /// When the simulator saw the client go away before it finished.
    #[serde(skip)]
    pub peer_closed: Option<Instant>,
    pub peer_closed_ms: Option<f64>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens served from the prefix cache (as reported in usage).
    pub cached_tokens: u32,
    /// The request's tenant: `x-tenant`, else the bearer token, else empty.
    pub tenant: String,
    /// Time queued for KV capacity before admission (part of the TTFT).
    pub queue_wait_ms: f64,
    /// Requests generating when this one was admitted, itself included
    /// (0: never admitted).
    pub running: u32,
    /// Refused with a 400: it needs more KV than the whole capacity.
    pub rejected: bool,
    /// The planned response was written completely.
    pub complete: bool,
}

impl Truth {
    pub fn new(seq: u64, request_id: Option<String>, path: String, received: Instant) -> Self {
        Truth {
            seq,
            request_id,
            path,
            stream: false,
            fault: "none".into(),
            sni: None,
            accept_encoding: None,
            received,
            received_unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            events: Vec::new(),
            peer_closed: None,
            peer_closed_ms: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            tenant: String::new(),
            queue_wait_ms: 0.0,
            running: 0,
            rejected: false,
            complete: false,
        }
    }

    pub fn mark(&mut self, mark: Mark, at: Instant, tokens: u32) {
        let t_ms = at.saturating_duration_since(self.received).as_secs_f64() * 1000.0;
        self.events.push(TruthEvent {
            mark,
            at,
            t_ms,
            tokens,
        });
    }

    pub fn peer_closed_at(&mut self, at: Instant) {
        self.peer_closed = Some(at);
        self.peer_closed_ms =
            Some(at.saturating_duration_since(self.received).as_secs_f64() * 1000.0);
    }

    /// Send times of the token events.
    pub fn token_times(&self) -> Vec<Instant> {
        self.events
            .iter()
            .filter(|e| e.mark == Mark::Token)
            .map(|e| e.at)
            .collect()
    }

    /// Time from receipt to the first token event.
    pub fn ttft(&self) -> Option<Duration> {
        self.token_times()
            .first()
            .map(|t| t.saturating_duration_since(self.received))
    }
}

/// The log of served requests.
pub struct TruthLog {
    mem: Mutex<VecDeque<Truth>>,
    cap: usize,
    file: Option<Mutex<BufWriter<File>>>,
    /// Truths pushed so far: what the waits below wake on.
    pushed: tokio::sync::watch::Sender<u64>,
}

impl TruthLog {
    pub fn new(cap: usize, path: Option<&Path>) -> std::io::Result<Self> {
        let file = match path {
            Some(p) => Some(Mutex::new(BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ))),
            None => None,
        };
        Ok(TruthLog {
            mem: Mutex::new(VecDeque::new()),
            cap,
            file,
            pushed: tokio::sync::watch::Sender::new(0),
        })
    }

    pub fn push(&self, t: Truth) {
        if let Some(f) = &self.file {
            if let (Ok(mut f), Ok(line)) = (f.lock(), serde_json::to_string(&t)) {
                let _ = writeln!(f, "{line}");
                let _ = f.flush();
            }
        }
        if let Ok(mut m) = self.mem.lock() {
            if m.len() >= self.cap {
                m.pop_front();
            }
            m.push_back(t);
        }
        self.pushed.send_modify(|n| *n += 1);
    }

    /// All requests still held, oldest first.
    pub fn all(&self) -> Vec<Truth> {
        self.mem
            .lock()
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The request with this `x-request-id`, once it has been served.
    pub fn find(&self, request_id: &str) -> Option<Truth> {
        self.mem
            .lock()
            .ok()?
            .iter()
            .rev()
            .find(|t| t.request_id.as_deref() == Some(request_id))
            .cloned()
    }

    /// How many requests are held, once at least `n` are or `limit` has
    /// passed, for tests: a request's truth is pushed just after its last
    /// byte is written, so a client can have it a moment before.
    pub async fn wait_for_len(&self, n: usize, limit: Duration) -> usize {
        let held = |s: &Self| s.mem.lock().map(|m| m.len()).unwrap_or(0);
        self.wait_until(limit, |s| Some(held(s)).filter(|l| *l >= n))
            .await
            .unwrap_or_else(|| held(self))
    }

    /// The request with this `x-request-id` once it has been served, or
    /// `None` after `limit`; for tests.
    pub async fn wait_for(&self, request_id: &str, limit: Duration) -> Option<Truth> {
        self.wait_until(limit, |s| s.find(request_id)).await
    }

    /// `ready`'s answer once it has one (asked again after every push), or
    /// `None` after `limit`.
    async fn wait_until<T>(
        &self,
        limit: Duration,
        ready: impl Fn(&Self) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut pushes = self.pushed.subscribe();
        loop {
            // Marked seen before asking: a push after the question wakes
            // the wait below.
            pushes.borrow_and_update();
            if let Some(t) = ready(self) {
                return Some(t);
            }
            match tokio::time::timeout_at(deadline, pushes.changed()).await {
                Ok(Ok(())) => {}
                // Past the deadline (the sender lives in `self`: never dropped).
                _ => return ready(self),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn truth(id: &str) -> Truth {
        Truth::new(0, Some(id.to_owned()), "/".into(), Instant::now())
    }

    #[tokio::test]
    async fn a_wait_ends_at_the_push_it_waits_for_or_at_its_limit() {
        let log = Arc::new(TruthLog::new(8, None).unwrap());
        let pusher = {
            let log = log.clone();
            tokio::spawn(async move {
                for id in ["a", "b"] {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    log.push(truth(id));
                }
            })
        };
        let t0 = Instant::now();
        let b = log.wait_for("b", Duration::from_secs(10)).await;
        assert_eq!(b.and_then(|t| t.request_id).as_deref(), Some("b"));
        // Woken by the push, not by the limit.
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert_eq!(log.wait_for_len(2, Duration::from_secs(10)).await, 2);
        pusher.await.unwrap();
        let t0 = Instant::now();
        assert!(log.wait_for("c", Duration::from_millis(50)).await.is_none());
        assert_eq!(log.wait_for_len(3, Duration::from_millis(50)).await, 2);
        assert!(t0.elapsed() >= Duration::from_millis(100));
    }
}
