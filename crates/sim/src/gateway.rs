//! `tokentap gateway`: a small reference LLM gateway for demos, the compose
//! stack and the attribution tests.
//!
//! For each request it waits a processing delay, calls N input guardrails
//! (`POST /v1/moderations`, with the last user message) in parallel, forwards
//! the request (and its `authorization`, `x-tenant`, `x-request-id`,
//! `traceparent` and `x-sim` headers) to the engine
//! and relays the answer chunk by chunk after a per-chunk delay — or buffers
//! the whole answer and calls an output guardrail before releasing it. It
//! passes `traceparent` on (or strips it, to exercise fingerprint joins) and
//! records what it actually did and when on its own clock: the ground truth
//! that attribution must recover. Engine and guardrail are `host:port`
//! authorities resolved per call, so a compose service name works.

use crate::wire::{self, Request};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_net::client::{self, Flow};
use tokio::io::{AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;

/// How many finished requests the in-memory truth keeps.
const TRUTH_CAP: usize = 10_000;

/// The command line of `tokentap gateway`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// The engine (or the tap in front of it): `http://host:port` or `host:port`.
    #[arg(long)]
    pub engine: String,
    /// The guardrail service (or its tap), called at `/v1/moderations`.
    #[arg(long)]
    pub guardrail: Option<String>,
    /// Input guardrail calls per request, made in parallel.
    #[arg(long, default_value_t = 1)]
    pub input_guards: usize,
    /// Buffer each answer and call the guardrail on it before releasing it.
    #[arg(long)]
    pub output_guardrail: bool,
    /// Processing time before the guardrails and the engine are called.
    #[arg(long, default_value_t = 2)]
    pub processing_ms: u64,
    /// Delay added to every relayed chunk.
    #[arg(long, default_value_t = 0)]
    pub relay_delay_ms: u64,
    /// Do not pass `traceparent` on.
    #[arg(long)]
    pub strip_traceparent: bool,
}

/// What the gateway does; see the module docs.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `host:port` of the engine.
    pub engine: String,
    /// `host:port` of the guardrail.
    pub guard: Option<String>,
    pub input_guards: usize,
    pub output_guard: bool,
    pub processing: Duration,
    pub relay_delay: Duration,
    pub strip_traceparent: bool,
}

impl GatewayConfig {
    pub fn from_args(a: &GatewayArgs) -> GatewayConfig {
        GatewayConfig {
            engine: authority(&a.engine),
            guard: a.guardrail.as_deref().map(authority),
            input_guards: a.input_guards,
            output_guard: a.output_guardrail,
            processing: Duration::from_millis(a.processing_ms),
            relay_delay: Duration::from_millis(a.relay_delay_ms),
            strip_traceparent: a.strip_traceparent,
        }
    }
}

/// `http://host:port/` → `host:port`.
fn authority(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// What the gateway did for one request.
#[derive(Debug, Clone)]
pub struct GatewayTruth {
    /// The request's `x-request-id` (empty when it had none).
    pub request_id: String,
    pub received: Instant,
    /// (start, end) of each input guardrail call.
    pub input_guards: Vec<(Instant, Instant)>,
    /// Just before the engine request was sent.
    pub forwarded: Instant,
    /// (bytes from the engine read, the same bytes handed to the write
    /// on — the clock read just before it —, whether they carried a token).
    pub relays: Vec<(Instant, Instant, bool)>,
    pub output_guard: Option<(Instant, Instant)>,
}

impl GatewayTruth {
    /// Durations from the request's receipt, in ms: when the engine request
    /// left, each input guardrail call, the first token's relay.
    pub fn summary(&self) -> serde_json::Value {
        let ms = |t: Instant| t.saturating_duration_since(self.received).as_secs_f64() * 1e3;
        serde_json::json!({
            "forwarded_ms": ms(self.forwarded),
            "input_guards_ms": self.input_guards.iter().map(|(s, e)| [ms(*s), ms(*e)]).collect::<Vec<_>>(),
            "first_token_relay_ms": self.relays.iter().find(|r| r.2).map(|(recv, sent, _)| sent.saturating_duration_since(*recv).as_secs_f64() * 1e3),
        })
    }
}

type Truths = Arc<Mutex<VecDeque<GatewayTruth>>>;

/// Waits until `deadline`, to well under a millisecond: tokio's timer
/// wakes up to a millisecond late, so it sleeps to 1.5 ms before and
/// yields the rest. The gateway's delays are what tests recover: they must
/// be what it was told, not its timer's rounding.
pub(crate) async fn sleep_until_exactly(deadline: Instant) {
    let early = Duration::from_micros(1500);
    if let Some(wake) = deadline.checked_sub(early) {
        if wake > Instant::now() {
            tokio::time::sleep_until(wake.into()).await;
        }
    }
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

/// A gateway serving on its own thread and runtime until dropped.
pub struct Gateway {
    pub addr: SocketAddr,
    truth: Truths,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Gateway {
    /// Binds `listen` (port 0 picks a free port) and serves in the background.
    pub fn spawn(listen: SocketAddr, cfg: GatewayConfig) -> io::Result<Gateway> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tokentap-gateway")
            .enable_all()
            .build()?;
        let truth: Truths = Arc::default();
        let t = truth.clone();
        let cfg = Arc::new(cfg);
        runtime.spawn(async move {
            let l = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("gateway cannot listen: {e}");
                    return;
                }
            };
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                let (cfg, t) = (cfg.clone(), t.clone());
                tokio::spawn(async move {
                    if let Err(e) = connection(s, cfg, t).await {
                        tracing::debug!("gateway connection: {e}");
                    }
                });
            }
        });
        Ok(Gateway {
            addr,
            truth,
            runtime: Some(runtime),
        })
    }

    /// What the gateway did for the request with this `x-request-id`, once
    /// it has finished it.
    pub fn truth_of(&self, id: &str) -> Option<GatewayTruth> {
        let truth = self.truth.lock().unwrap_or_else(|e| e.into_inner());
        truth.iter().find(|t| t.request_id == id).cloned()
    }

    /// Serves on the calling thread until SIGINT or SIGTERM.
    pub fn run_blocking(args: &GatewayArgs) -> anyhow::Result<()> {
        let gw = Gateway::spawn(args.listen, GatewayConfig::from_args(args))?;
        tracing::info!(addr = %gw.addr, engine = %args.engine, guardrail = ?args.guardrail, "gateway listening");
        tokentap_net::rt::block_until_stopped()?;
        drop(gw);
        Ok(())
    }
}

async fn connection(s: TcpStream, cfg: Arc<GatewayConfig>, truth: Truths) -> io::Result<()> {
    let (mut rd, mut wr) = tokio::io::split(s);
    let mut buf = Vec::new();
    while let Some(req) = wire::read_request(&mut rd, &mut buf).await? {
        if let Some(id) = req.path.strip_prefix("/truth/") {
            // What the gateway did for request `id` (for tests that run it
            // as a process): durations from its receipt, in ms.
            let body = {
                let truth = truth.lock().unwrap_or_else(|e| e.into_inner());
                truth
                    .iter()
                    .find(|t| t.request_id == id)
                    .map_or_else(|| "null".to_string(), |t| t.summary().to_string())
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            wr.write_all(head.as_bytes()).await?;
            wr.write_all(body.as_bytes()).await?;
            if req.close {
                return Ok(());
            }
            continue;
        }
        if req.path == "/healthz" {
            wr.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await?;
            if req.close {
                return Ok(());
            }
            continue;
        }
        let t = handle(&cfg, &req, &mut wr).await?;
        {
            let mut truth = truth.lock().unwrap_or_else(|e| e.into_inner());
            if truth.len() >= TRUTH_CAP {
                truth.pop_front();
            }
            truth.push_back(t);
        }
        if req.close {
            return Ok(());
        }
    }
    Ok(())
}

/// The first address of `host:port` (a compose service name works).
pub(crate) async fn resolve(authority: &str) -> io::Result<SocketAddr> {
    tokio::net::lookup_host(authority)
        .await?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{authority}: no address")))
}

/// The text of the last user message of a chat request (what an input
/// guardrail reads), or a placeholder.
pub(crate) fn last_user_text(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    v.get("messages")
        .and_then(|m| m.as_array())
        .and_then(|m| {
            m.iter()
                .rev()
                .find(|x| x.get("role").and_then(|r| r.as_str()) == Some("user"))
        })
        .and_then(|m| m.get("content"))
        .and_then(|c| c.as_str())
        .or_else(|| v.get("prompt").and_then(|p| p.as_str()))
        .unwrap_or("user input")
        .to_string()
}

async fn guard_call(
    guard: &str,
    trace: Option<&str>,
    id: &str,
    input: &str,
) -> io::Result<(Instant, Instant)> {
    let addr = resolve(guard).await?;
    let body = serde_json::json!({ "input": input }).to_string();
    let mut h = vec![("content-type", "application/json")];
    if !id.is_empty() {
        h.push(("x-request-id", id));
    }
    if let Some(t) = trace {
        h.push(("traceparent", t));
    }
    let start = Instant::now();
    client::send(addr, "POST", "/v1/moderations", &h, body.as_bytes()).await?;
    Ok((start, Instant::now()))
}

enum Piece {
    Head(u16, String),
    Data(Instant, Vec<u8>),
}

/// One HTTP/1.1 chunk.
pub(crate) fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", bytes.len()).into_bytes();
    c.extend_from_slice(bytes);
    c.extend_from_slice(b"\r\n");
    c
}

async fn handle(
    cfg: &GatewayConfig,
    req: &Request,
    wr: &mut WriteHalf<TcpStream>,
) -> io::Result<GatewayTruth> {
    let received = Instant::now();
    let id = req
        .header_str("x-request-id")
        .unwrap_or_default()
        .to_string();
    let trace = if cfg.strip_traceparent {
        None
    } else {
        req.header_str("traceparent").map(str::to_owned)
    };
    sleep_until_exactly(received + cfg.processing).await;
    let mut input_guards = Vec::new();
    if let Some(g) = &cfg.guard {
        let input = last_user_text(&req.body);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..cfg.input_guards {
            let (g, trace, id, input) = (g.clone(), trace.clone(), id.clone(), input.clone());
            set.spawn(async move { guard_call(&g, trace.as_deref(), &id, &input).await });
        }
        while let Some(iv) = set.join_next().await {
            input_guards.push(iv.map_err(io::Error::other)??);
        }
    }
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    if !id.is_empty() {
        headers.push(("x-request-id", &id));
    }
    if let Some(t) = &trace {
        headers.push(("traceparent", t));
    }
    for name in ["x-sim", "authorization", "x-tenant"] {
        if let Some(v) = req.header_str(name) {
            headers.push((name, v));
        }
    }
    let engine_addr = resolve(&cfg.engine).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Piece>();
    let forwarded = Instant::now();
    let mut seen = 0usize;
    let mut head_sent = false;
    let engine = client::send_with(
        engine_addr,
        "POST",
        &req.path,
        &headers,
        &req.body,
        move |r| {
            if !head_sent && r.status != 0 {
                let ct = r
                    .header("content-type")
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                let _ = tx.send(Piece::Head(r.status, ct));
                head_sent = true;
            }
            if let Some(new) = r.body.get(seen..).filter(|b| !b.is_empty()) {
                let _ = tx.send(Piece::Data(Instant::now(), new.to_vec()));
                seen = r.body.len();
            }
            Flow::Continue
        },
    );
    let buffered = cfg.output_guard;
    let relay_delay = cfg.relay_delay;
    let mut relays = Vec::new();
    let writer = async {
        let mut held = Vec::new();
        while let Some(p) = rx.recv().await {
            match p {
                Piece::Head(status, ct) => {
                    let head = format!("HTTP/1.1 {status} OK\r\ncontent-type: {ct}\r\ntransfer-encoding: chunked\r\n\r\n");
                    if buffered {
                        held.push(head.into_bytes());
                    } else {
                        wr.write_all(head.as_bytes()).await?;
                    }
                }
                Piece::Data(_, bytes) if buffered => held.push(chunk(&bytes)),
                Piece::Data(at, bytes) => {
                    sleep_until_exactly(at + relay_delay).await;
                    // Sent when handed to the kernel (before the write: the
                    // write wakes the reader, which may run first).
                    let sent = Instant::now();
                    wr.write_all(&chunk(&bytes)).await?;
                    let token = bytes.windows(11).any(|w| w == b"\"content\":\"")
                        && !bytes.windows(12).any(|w| w == b"\"content\":\"\"");
                    relays.push((at, sent, token));
                }
            }
        }
        Ok::<_, io::Error>(held)
    };
    let (result, held) = tokio::join!(engine, writer);
    let mut held = held?;
    result?;
    let mut output_guard = None;
    if buffered {
        if let Some(g) = &cfg.guard {
            output_guard = Some(guard_call(g, trace.as_deref(), &id, "model output").await?);
        }
        held.push(b"0\r\n\r\n".to_vec());
        wr.write_all(&held.concat()).await?;
    } else {
        wr.write_all(b"0\r\n\r\n").await?;
    }
    Ok(GatewayTruth {
        request_id: id,
        received,
        input_guards,
        forwarded,
        relays,
        output_guard,
    })
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn guardrails_read_the_last_user_message() {
        let body = br#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"flag-me please"}]}"#;
        assert_eq!(super::last_user_text(body), "flag-me please");
        assert_eq!(super::last_user_text(br#"{"prompt":"p"}"#), "p");
        assert_eq!(super::last_user_text(b"nope"), "user input");
    }

    #[test]
    fn authorities() {
        assert_eq!(authority("http://gw:8081"), "gw:8081");
        assert_eq!(authority("http://gw:8081/v1"), "gw:8081");
        assert_eq!(authority("127.0.0.1:9"), "127.0.0.1:9");
    }
}
