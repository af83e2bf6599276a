//! The simulator's connections: accept (TCP, optionally TLS), read requests,
//! route them, and play each response's script in real time while watching
//! the client side, so a client that goes away is noticed at once and
//! recorded in the ground truth.
//!
//! A completion request goes through the engine first: it queues for KV
//! capacity (watching the client meanwhile), then looks up the prefix cache;
//! those numbers are handed to the pure `script::plan`. The permit is held
//! while the script plays and dropped when it ends however it ends; the
//! prompt's blocks are then added to the prefix cache. `status=` faults
//! answer before any of this (an engine rejecting a request never schedules it).

use super::engine::{self, Engine};
use super::profile::{Fault, Profile};
use super::script::{self, Action, Mark, RequestSpec, Scheduling, Script};
use super::truth::{Truth, TruthLog};
use super::wire::{self, Request};
use serde_json::json;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::decode::dialect::Dialect;
use tokentap_core::decode::{request::parse_request, Operation};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// Shared state of one simulator.
pub struct SimState {
    pub profile: Profile,
    pub engine: Engine,
    pub truth: Arc<TruthLog>,
    pub tls: Option<TlsAcceptor>,
    seq: AtomicU64,
}

impl SimState {
    pub fn new(
        profile: Profile,
        engine: Engine,
        truth: Arc<TruthLog>,
        tls: Option<TlsAcceptor>,
    ) -> Self {
        SimState {
            profile,
            engine,
            truth,
            tls,
            seq: AtomicU64::new(0),
        }
    }
}

/// Accepts connections forever. Accept errors (out of file descriptors
/// under a soak) pause briefly instead of stopping the simulator.
pub async fn serve(listener: TcpListener, sim: Arc<SimState>) -> io::Result<()> {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::warn!("simulator accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let sim = sim.clone();
        tokio::spawn(async move {
            let _ = connection(sim, tcp).await;
        });
    }
}

async fn connection(sim: Arc<SimState>, tcp: TcpStream) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    // A second handle on the same socket, used only to make a close an RST.
    let std = tcp.into_std()?;
    let raw = std.try_clone()?;
    let tcp = TcpStream::from_std(std)?;
    match sim.tls.clone() {
        Some(acceptor) => {
            let tls = acceptor.accept(tcp).await?;
            let sni = tls.get_ref().1.server_name().map(str::to_owned);
            requests(&sim, tls, &raw, sni).await
        }
        None => requests(&sim, tcp, &raw, None).await,
    }
}

/// What a response needs of its connection.
struct Conn<'a> {
    raw: &'a std::net::TcpStream,
    sni: Option<&'a str>,
}

enum After {
    KeepAlive,
    /// Close with a FIN.
    Close,
    /// Drop the socket with SO_LINGER 0: the kernel sends an RST.
    Reset,
}

async fn requests<S>(
    sim: &Arc<SimState>,
    stream: S,
    raw: &std::net::TcpStream,
    sni: Option<String>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = Vec::new();
    loop {
        let Some(req) = wire::read_request(&mut rd, &mut buf).await? else {
            return Ok(());
        };
        let received = Instant::now();
        let conn = Conn {
            raw,
            sni: sni.as_deref(),
        };
        let after = respond(sim, &req, received, &mut rd, &mut wr, &mut buf, &conn).await?;
        match after {
            After::Reset => return Ok(()),
            After::Close => {
                let _ = wr.shutdown().await;
                return Ok(());
            }
            After::KeepAlive if req.close => {
                let _ = wr.shutdown().await;
                return Ok(());
            }
            After::KeepAlive => {}
        }
    }
}

async fn write_simple<W: AsyncWrite + Unpin>(
    wr: &mut W,
    status: u16,
    body: &str,
) -> io::Result<()> {
    write_typed(wr, status, "application/json", body).await
}

async fn write_typed<W: AsyncWrite + Unpin>(
    wr: &mut W,
    status: u16,
    content_type: &str,
    body: &str,
) -> io::Result<()> {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nserver: tokentap-sim\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    wr.write_all(head.as_bytes()).await?;
    wr.write_all(body.as_bytes()).await?;
    wr.flush().await
}

async fn respond<S>(
    sim: &Arc<SimState>,
    req: &Request,
    received: Instant,
    rd: &mut ReadHalf<S>,
    wr: &mut WriteHalf<S>,
    buf: &mut Vec<u8>,
    conn: &Conn<'_>,
) -> io::Result<After>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let path = req.path.split('?').next().unwrap_or_default();
    // TGI also generates at `POST /` (what Hugging Face's clients call).
    let (operation, dialect) = if path == "/" && req.method == "POST" {
        (Operation::TextCompletion, Dialect::Tgi)
    } else {
        tokentap_core::decode::dialect::route(path)
    };
    match (req.method.as_str(), operation) {
        ("GET", _) if path == "/v1/models" => {
            let body = json!({"object": "list", "data": [{"id": sim.profile.model, "object": "model", "owned_by": "tokentap-sim"}]});
            write_simple(wr, 200, &body.to_string()).await?;
            return Ok(After::KeepAlive);
        }
        ("GET", _) if path == "/metrics" => {
            let body = sim.engine.metrics_text(&sim.profile.model);
            write_typed(wr, 200, "text/plain; version=0.0.4", &body).await?;
            return Ok(After::KeepAlive);
        }
        ("GET", _) if path == "/health" => {
            write_simple(wr, 200, "{\"status\":\"ok\"}").await?;
            return Ok(After::KeepAlive);
        }
        (
            "POST",
            Operation::Chat
            | Operation::TextCompletion
            | Operation::Embeddings
            | Operation::GenerateContent,
        ) => {}
        ("POST", _) if path.ends_with("/moderations") => {
            return moderation(sim, req, received, rd, wr, buf).await;
        }
        _ => {
            write_simple(wr, 404, "{\"error\":{\"message\":\"not found\"}}").await?;
            return Ok(After::KeepAlive);
        }
    }
    let profile = match req.header_str("x-sim") {
        Some(h) => match sim.profile.with_overrides(h) {
            Ok(p) => p,
            Err(e) => {
                let body = json!({"error": {"message": format!("bad x-sim header: {e}")}});
                write_simple(wr, 400, &body.to_string()).await?;
                return Ok(After::KeepAlive);
            }
        },
        None => sim.profile.clone(),
    };
    let Ok(info) = parse_request(&req.body, false) else {
        write_simple(wr, 400, "{\"error\":{\"message\":\"body is not JSON\"}}").await?;
        return Ok(After::KeepAlive);
    };
    let continuous = serde_json::from_slice::<serde_json::Value>(&req.body)
        .ok()
        .and_then(|v| {
            v.pointer("/stream_options/continuous_usage_stats")
                .and_then(|c| c.as_bool())
        })
        .unwrap_or(false);
    let seq = sim.seq.fetch_add(1, Ordering::Relaxed);
    // Ollama streams unless told not to; TGI streams on its stream path.
    let stream_default = dialect == Dialect::Ollama
        || path.ends_with("/generate_stream")
        || path.ends_with(":streamGenerateContent");
    let mut spec = RequestSpec {
        operation,
        dialect,
        stream: info.stream.unwrap_or(stream_default) && operation != Operation::Embeddings,
        include_usage: info.include_usage.unwrap_or(false),
        continuous_usage: continuous,
        max_tokens: info.max_tokens,
        prompt_tokens: u32::try_from(info.prompt_bytes.unwrap_or(0) / 4)
            .unwrap_or(u32::MAX)
            .max(1)
            .saturating_add(sim.engine.template_tokens()),
        model: info.model.clone(),
        seq,
        sched: Scheduling::default(),
        tool_call: crate::script::tools::wants_tool_call(&req.body, dialect),
    };
    let mut truth = Truth::new(
        seq,
        req.header_str("x-request-id").map(str::to_owned),
        req.path.clone(),
        received,
    );
    truth.stream = spec.stream;
    truth.fault = profile.fault.to_string();
    truth.sni = conn.sni.map(str::to_owned);
    truth.accept_encoding = req.header_str("accept-encoding").map(str::to_owned);
    let tenant = engine::tenant_of(req);
    truth.tenant = tenant.clone();
    truth.prompt_tokens = spec.prompt_tokens;
    let prompt = engine::prompt_text(&req.body);
    let permit = if matches!(profile.fault, Fault::Status(_)) {
        None
    } else {
        let need = u64::from(spec.prompt_tokens)
            + u64::from(script::output_tokens(&profile, spec.max_tokens));
        let admitted = tokio::select! {
            r = sim.engine.admit(need, &tenant) => r,
            at = peer_gone(rd, buf) => {
                truth.queue_wait_ms = ms_since(received, at);
                truth.peer_closed_at(at);
                sim.truth.push(truth);
                return Ok(After::Close);
            }
        };
        match admitted {
            Ok(p) => Some(p),
            Err(e) => {
                let body = json!({"error": {"message": e.to_string(),
                    "type": "invalid_request_error", "code": "context_length_exceeded"}});
                write_simple(wr, 400, &body.to_string()).await?;
                truth.rejected = true;
                truth.mark(Mark::Body, Instant::now(), 0);
                truth.complete = true;
                sim.truth.push(truth);
                return Ok(After::KeepAlive);
            }
        }
    };
    if let Some(permit) = &permit {
        let admitted_at = Instant::now();
        spec.sched = Scheduling {
            cached_tokens: sim.engine.cached_tokens(prompt, spec.prompt_tokens),
            running: permit.running,
            queue_wait: admitted_at.saturating_duration_since(received),
        };
        truth.queue_wait_ms = ms_since(received, admitted_at);
        truth.running = permit.running;
        truth.cached_tokens = spec.sched.cached_tokens;
    }
    let plan = script::plan(&profile, &spec);
    truth.completion_tokens = plan.completion_tokens;
    let after = play(&plan, received, rd, wr, buf, conn.raw, &mut truth).await;
    if permit.is_some() {
        sim.engine.remember(prompt);
    }
    // Capacity comes back only now, however the response ended.
    drop(permit);
    sim.truth.push(truth);
    Ok(after)
}

fn ms_since(start: Instant, at: Instant) -> f64 {
    at.saturating_duration_since(start).as_secs_f64() * 1000.0
}

/// Resolves when the client closes (or resets) the connection. Bytes it
/// sends meanwhile are kept in `buf`.
async fn peer_gone<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> Instant {
    let mut tmp = [0u8; 4096];
    loop {
        match rd.read(&mut tmp).await {
            Ok(0) | Err(_) => return Instant::now(),
            Ok(n) => buf.extend_from_slice(tmp.get(..n).unwrap_or_default()),
        }
    }
}

/// An OpenAI-style moderation answer after `ttft_ms` (a guardrail service
/// for tests and demos): `flagged` when the input contains `flag-me`.
async fn moderation<S>(
    sim: &Arc<SimState>,
    req: &Request,
    received: Instant,
    rd: &mut ReadHalf<S>,
    wr: &mut WriteHalf<S>,
    buf: &mut Vec<u8>,
) -> io::Result<After>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let profile = req
        .header_str("x-sim")
        .and_then(|h| sim.profile.with_overrides(h).ok())
        .unwrap_or_else(|| sim.profile.clone());
    let seq = sim.seq.fetch_add(1, Ordering::Relaxed);
    let mut truth = Truth::new(
        seq,
        req.header_str("x-request-id").map(str::to_owned),
        req.path.clone(),
        received,
    );
    let flagged = req.body.windows(7).any(|w| w == b"flag-me");
    let deadline = received + Duration::from_secs_f64(profile.ttft_ms.max(0.0) / 1000.0);
    if let Err(at) = wait_until(rd, buf, deadline).await {
        truth.peer_closed_at(at);
        sim.truth.push(truth);
        return Ok(After::Close);
    }
    let body = json!({"id": format!("modr-{seq}"), "model": "sim-moderation",
        "results": [{"flagged": flagged, "categories": {}, "category_scores": {}}]});
    write_simple(wr, 200, &body.to_string()).await?;
    truth.mark(Mark::Body, Instant::now(), 0);
    truth.complete = true;
    sim.truth.push(truth);
    Ok(After::KeepAlive)
}

/// Sleeps until `deadline` while watching the client: `Err(t)` when it
/// closed (or reset) at `t`. Bytes it sends meanwhile are kept in `buf`.
async fn wait_until<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), Instant> {
    // Due already: no timer (tokio's wheel would round up to its next 1 ms
    // tick, which a zero-delay profile must not see).
    if Instant::now() >= deadline {
        return Ok(());
    }
    let mut tmp = [0u8; 4096];
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(deadline.into()) => return Ok(()),
            r = rd.read(&mut tmp) => match r {
                Ok(0) | Err(_) => return Err(Instant::now()),
                Ok(n) => buf.extend_from_slice(tmp.get(..n).unwrap_or_default()),
            },
        }
    }
}

async fn play<S>(
    plan: &Script,
    received: Instant,
    rd: &mut ReadHalf<S>,
    wr: &mut WriteHalf<S>,
    buf: &mut Vec<u8>,
    raw: &std::net::TcpStream,
    truth: &mut Truth,
) -> After
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    for step in &plan.steps {
        if let Err(at) = wait_until(rd, buf, received + step.at).await {
            truth.peer_closed_at(at);
            return After::Close;
        }
        match &step.action {
            Action::Write(bytes) => {
                // Sent when handed to the kernel: taken before the write,
                // as the write wakes the reader and the scheduler may run
                // it (and others) before this task takes a clock reading.
                let sent = Instant::now();
                if wr.write_all(bytes).await.is_err() || wr.flush().await.is_err() {
                    truth.peer_closed_at(Instant::now());
                    return After::Close;
                }
                if let Some(mark) = step.mark {
                    truth.mark(mark, sent, step.tokens);
                }
            }
            Action::Reset => {
                let _ = socket2::SockRef::from(raw).set_linger(Some(Duration::ZERO));
                truth.mark(Mark::Reset, Instant::now(), 0);
                return After::Reset;
            }
            Action::Close => {
                truth.mark(Mark::Close, Instant::now(), 0);
                return After::Close;
            }
        }
    }
    truth.complete = true;
    if plan.closes {
        After::Close
    } else {
        After::KeepAlive
    }
}
