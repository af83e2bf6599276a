//! Shared helpers: a simulator + tokentap harness on free loopback ports,
//! record and event collectors, scraping, a raw reader that keeps every
//! socket read, and the serial lock (timing assertions need a quiet machine,
//! so integration tests run one at a time whatever the test runner does).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_core::record::{RequestRecord, TokenEvent};
use tokentap_proxy::config::Config;
use tokentap_proxy::metrics::EventObserver;
use tokentap_proxy::server::{self, Running};
use tokentap_proxy::sinks::{Finished, Hooks, RecordSink};
use tokentap_sim::{Profile, SimArgs, Simulator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Held for the whole test.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// The same, for tests without a runtime.
pub fn serial_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.blocking_lock()
}

/// A child process killed (and reaped) when dropped: a test that fails
/// half-way leaves no process behind holding its ports. Derefs to the
/// `Child`.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// A new directory in the temp dir (`tokentap-{name}-*`), removed with
/// everything in it when dropped: when the test ends, and when it fails.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tokentap-{name}-"))
        .tempdir()
        .unwrap()
}

/// A loopback address nothing listens on now, its port below the
/// kernel's ephemeral range. A port from binding port 0 is an ephemeral
/// one: until the server under test binds it, any outgoing connection of
/// this machine may take it as its local port, and the server then fails
/// with "Address already in use" (seen in `dashboards` under load).
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, span) = (10_000, ephemeral_from.saturating_sub(10_000).max(1));
    // Start where another test process (or a leftover server) is unlikely
    // to be, then walk the range.
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let port = low + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            return l.local_addr().unwrap();
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub fn sim(profile: Profile) -> Simulator {
    Simulator::spawn(&SimArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_cert: None,
        tls_key: None,
        ground_truth: None,
        engine: Default::default(),
        profile,
    })
    .unwrap()
}

/// Two identical simulators fed the same requests send the same bytes:
/// `direct` is reached as is, `behind` through `tap` (whose tap entry gets
/// `extra`, YAML indented 4 spaces). The transparency tests compare them.
pub struct Twins {
    pub direct: Simulator,
    pub behind: Simulator,
    pub tap: Tap,
}

pub fn twins(profile: Profile, extra: &str) -> Twins {
    let direct = sim(profile.clone());
    let behind = sim(profile);
    let tap = Tap::start(&format!("http://{}", behind.addr), extra);
    Twins {
        direct,
        behind,
        tap,
    }
}

/// Every finished request of the server.
#[derive(Default)]
pub struct Records(Mutex<Vec<(String, String, RequestRecord)>>);

impl RecordSink for Records {
    fn name(&self) -> tokentap_core::labels::SinkName {
        tokentap_core::labels::SinkName::Hook
    }

    fn finished(&self, f: &Finished<'_>) {
        self.0.lock().unwrap().push((
            f.tap.tap.to_string(),
            f.model.value.to_string(),
            f.record.clone(),
        ));
    }
}

impl Records {
    pub fn all(&self) -> Vec<RequestRecord> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, r)| r.clone())
            .collect()
    }

    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The record of the request with this `x-request-id` (waits for `logging`).
    pub async fn wait(&self, id: &str) -> RequestRecord {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(r) = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|(_, _, r)| r.request_id.as_deref() == Some(id))
            {
                return r.2.clone();
            }
            assert!(Instant::now() < deadline, "no record for {id}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The record of tap `tap` with this `x-request-id`, if it finished.
    pub fn of(&self, tap: &str, id: &str) -> Option<RequestRecord> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(t, _, r)| t == tap && r.request_id.as_deref() == Some(id))
            .map(|(_, _, r)| r.clone())
    }

    /// Records with this id (to check a request is counted once).
    pub fn with_id(&self, id: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, r)| r.request_id.as_deref() == Some(id))
            .count()
    }
}

/// One observed token event.
#[derive(Debug, Clone)]
pub struct SeenEvent {
    pub request_id: Option<String>,
    pub index: u32,
    pub at: Instant,
    pub since_start: Duration,
    pub gap: Option<Duration>,
}

#[derive(Default)]
pub struct Events(Mutex<Vec<SeenEvent>>);

impl EventObserver for Events {
    fn token_event(&self, _tap: &str, request_id: Option<&str>, ev: &TokenEvent<'_>) {
        self.0.lock().unwrap().push(SeenEvent {
            request_id: request_id.map(str::to_owned),
            index: ev.index,
            at: ev.at,
            since_start: ev.since_start,
            gap: ev.gap,
        });
    }
}

impl Events {
    pub fn of(&self, id: &str) -> Vec<SeenEvent> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.request_id.as_deref() == Some(id))
            .cloned()
            .collect()
    }
}

/// A running tokentap with one tap (`t`, boundary engine) in front of `upstream`.
pub struct Tap {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub server: Running,
    pub records: Arc<Records>,
    pub events: Arc<Events>,
}

impl Tap {
    /// `extra` is YAML appended to the tap's entry (indented 4 spaces).
    pub fn start(upstream: &str, extra: &str) -> Tap {
        Tap::start_with(upstream, extra, Path::new("."))
    }

    pub fn start_with(upstream: &str, extra: &str, base: &Path) -> Tap {
        Tap::start_top(upstream, extra, "", base)
    }

    /// With `top` YAML (e.g. an `otlp:` section) before `taps:`.
    pub fn start_top(upstream: &str, extra: &str, top: &str, base: &Path) -> Tap {
        for _ in 0..5 {
            let (addr, admin) = (free_addr(), free_addr());
            let yaml = format!(
                "admin:\n  listen: {admin}\n{top}taps:\n  - name: t\n    boundary: engine\n    listen: {addr}\n    upstream: {upstream}\n{extra}"
            );
            let config = Config::from_yaml(&yaml, base).unwrap();
            let records = Arc::new(Records::default());
            let events = Arc::new(Events::default());
            let hooks = Hooks {
                observer: Some(events.clone()),
                records: vec![records.clone()],
                attributions: Vec::new(),
            };
            match server::spawn(&config, hooks) {
                Ok(server) => {
                    return Tap {
                        addr,
                        admin,
                        server,
                        records,
                        events,
                    }
                }
                Err(server::StartError::Host(tokentap_host::HostError::Listen { .. })) => continue, // a port got taken meanwhile
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no free ports");
    }

    pub fn scrape(&self) -> String {
        String::from_utf8(self.server.metrics.prom.encode()).unwrap()
    }

    /// The value of one sample line of the scrape (`name{labels}`), 0 when absent.
    pub fn sample(&self, name_and_labels: &str) -> f64 {
        self.scrape()
            .lines()
            .find_map(|l| {
                l.strip_prefix(name_and_labels)
                    .and_then(|rest| rest.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }

    /// Closes the live analysis window now (taps with `analysis:` on).
    pub fn close_window(&self) -> Arc<tokentap_core::analysis::span_report::Report> {
        self.server
            .analyses
            .as_ref()
            .expect("analyses on")
            .live
            .close_window(crate::analyses::now_ms())
    }

    pub fn in_flight(&self) -> f64 {
        self.sample("tokentap_requests_in_flight{boundary=\"engine\",tap=\"t\"}")
    }
}

/// POSTs to `/v1/chat/completions`.
pub async fn post(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &[u8],
) -> tokentap_net::client::Response {
    tokentap_net::client::send(addr, "POST", "/v1/chat/completions", headers, body)
        .await
        .unwrap()
}

/// A chat request body.
pub fn chat(stream: bool, usage: bool) -> Vec<u8> {
    serde_json::json!({
        "model": "sim-model",
        "stream": stream,
        "stream_options": if usage { serde_json::json!({"include_usage": true}) } else { serde_json::Value::Null },
        "messages": [{"role": "user", "content": "hello there"}],
    })
    .to_string()
    .into_bytes()
}

/// One request of every kind a scrape should show (path, body, `x-sim`):
/// streamed with and without usage, plain, completions, continuous usage,
/// two tokens per event, reasoning, an error status, a malformed event and
/// a reset mid-stream.
pub fn every_kind_of_request() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let cont = serde_json::json!({"model": "m2", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "messages": []}).to_string();
    vec![
        ("/v1/chat/completions", chat(true, true), ""),
        (
            "/v1/chat/completions",
            chat(true, false),
            "tokens-per-event=2",
        ),
        ("/v1/chat/completions", chat(false, false), ""),
        ("/v1/completions", chat(true, true), ""),
        ("/v1/chat/completions", cont.into_bytes(), ""),
        (
            "/v1/chat/completions",
            chat(true, true),
            "reasoning-tokens=5",
        ),
        ("/v1/chat/completions", chat(true, true), "fault=status=503"),
        (
            "/v1/chat/completions",
            chat(true, true),
            "fault=malformed@1",
        ),
        ("/v1/chat/completions", chat(true, true), "fault=reset@2"),
    ]
}

/// Every read of a raw HTTP/1.1 exchange, with its time and bytes.
pub struct RawReads {
    pub reads: Vec<(Instant, Vec<u8>)>,
}

/// Sends `request` (complete bytes) and records every read until EOF.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> RawReads {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(request).await.unwrap();
    let mut reads = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => reads.push((Instant::now(), buf[..n].to_vec())),
        }
        if reads.iter().map(|(_, b)| b.len()).sum::<usize>() > 0
            && reads.last().is_some_and(|(_, b)| b.ends_with(b"0\r\n\r\n"))
        {
            break;
        }
    }
    RawReads { reads }
}

/// The middle value of `xs` (the upper one of an even count).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds, for messages.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// |a - b|.
pub fn diff(a: Instant, b: Instant) -> Duration {
    if a > b {
        a - b
    } else {
        b - a
    }
}

/// Everything the correlator concluded.
#[derive(Default)]
pub struct Attributions {
    resolved: Mutex<Vec<tokentap_core::correlate::Resolution>>,
    counts: Mutex<std::collections::HashMap<&'static str, u64>>,
}

impl tokentap_core::correlate::AttributionSink for Attributions {
    fn resolved(&self, r: &tokentap_core::correlate::Resolution) {
        self.resolved.lock().unwrap().push(r.clone());
    }
    fn counted(&self, result: tokentap_core::correlate::Joined, n: u64) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(result.as_str())
            .or_default() += n;
    }
}

impl Attributions {
    pub fn count(&self, result: &str) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .get(result)
            .copied()
            .unwrap_or(0)
    }

    pub fn pairs(&self) -> Vec<tokentap_core::correlate::PairAttribution> {
        self.resolved
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.pairs.clone())
            .collect()
    }

    /// The pair (outer, inner) of the request with this id (waits for it).
    pub async fn pair(
        &self,
        outer: &str,
        inner: &str,
        id: &str,
    ) -> tokentap_core::correlate::PairAttribution {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self.pairs().into_iter().find(|p| {
                &*p.outer == outer && &*p.inner == inner && p.request_id.as_deref() == Some(id)
            });
            if let Some(p) = found {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "no {outer}/{inner} pair for {id}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The compound breakdown of the request with this id, once settled.
    pub fn compound_of(&self, id: &str) -> Option<tokentap_core::correlate::compound::Breakdown> {
        self.resolved
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.compound.iter())
            .find(|b| b.request_id.as_deref() == Some(id))
            .cloned()
    }

    pub fn resolution_of(&self, id: &str) -> Option<tokentap_core::correlate::Resolution> {
        self.resolved
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.pairs.iter().any(|p| p.request_id.as_deref() == Some(id)))
            .cloned()
    }
}

/// A tokentap with several taps from a YAML `taps:` list (and optional
/// extra top-level YAML), with every listener collected.
pub struct Multi {
    pub server: Running,
    pub attributions: Arc<Attributions>,
    pub records: Arc<Records>,
}

impl Multi {
    pub fn start(taps: &str, extra: &str) -> Multi {
        let admin = free_addr();
        let yaml = format!("admin:\n  listen: {admin}\n{extra}taps:\n{taps}");
        let config = Config::from_yaml(&yaml, Path::new(".")).unwrap();
        let attributions = Arc::new(Attributions::default());
        let records = Arc::new(Records::default());
        let hooks = Hooks {
            observer: None,
            records: vec![records.clone()],
            attributions: vec![attributions.clone()],
        };
        let server = server::spawn(&config, hooks).unwrap();
        Multi {
            server,
            attributions,
            records,
        }
    }

    pub fn scrape(&self) -> String {
        String::from_utf8(self.server.metrics.prom.encode()).unwrap()
    }
}

/// One tap entry for `Multi::start`.
pub fn tap_yaml(
    name: &str,
    boundary: &str,
    listen: SocketAddr,
    upstream: SocketAddr,
    extra: &str,
) -> String {
    format!("  - name: {name}\n    boundary: {boundary}\n    listen: {listen}\n    upstream: http://{upstream}\n{extra}")
}

/// Prometheus totals of one metric in a scrape: (count or value, sum), and
/// for histograms the cumulative bucket counts by bound.
pub fn prom_totals(scrape: &str, name: &str) -> (f64, f64, Vec<(f64, f64)>) {
    let value = |l: &str| {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut count = 0.0;
    let mut sum = 0.0;
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in scrape.lines().filter(|l| !l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix(&format!("{name}_bucket{{")) {
            let le = rest
                .split("le=\"")
                .nth(1)
                .and_then(|v| v.split('"').next())
                .unwrap_or("+Inf");
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            match buckets.iter_mut().find(|(b, _)| *b == le) {
                Some(slot) => slot.1 += value(line),
                None => buckets.push((le, value(line))),
            }
        } else if line.starts_with(&format!("{name}_count{{")) {
            count += value(line);
        } else if line.starts_with(&format!("{name}_sum{{")) {
            sum += value(line);
        } else if line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")) {
            count += value(line);
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    (count, sum, buckets)
}
