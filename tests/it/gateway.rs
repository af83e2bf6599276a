//! A small LLM gateway for the attribution tests: for each request it waits
//! a processing delay, calls N input guardrails in parallel, forwards to the
//! engine and relays the stream chunk by chunk after a per-chunk delay — or
//! buffers the whole answer and calls an output guardrail first. It can strip
//! `traceparent`. It records what it actually did and when (its own clock
//! is the test's clock), which is the ground truth attribution must recover.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap::client::{self, Flow};
use tokentap::sim::wire::{self, Request};
use tokio::io::{AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub engine: SocketAddr,
    pub guard: Option<SocketAddr>,
    pub input_guards: usize,
    pub output_guard: bool,
    pub processing: Duration,
    pub relay_delay: Duration,
    pub strip_traceparent: bool,
}

/// What the gateway did for one request.
#[derive(Debug, Clone)]
pub struct GatewayTruth {
    pub request_id: String,
    pub received: Instant,
    pub input_guards: Vec<(Instant, Instant)>,
    /// Just before the engine request was sent.
    pub forwarded: Instant,
    /// (bytes from the engine read, the same bytes written on, whether they
    /// carried a token).
    pub relays: Vec<(Instant, Instant, bool)>,
    pub output_guard: Option<(Instant, Instant)>,
}

pub struct TestGateway {
    pub addr: SocketAddr,
    truth: Arc<Mutex<Vec<GatewayTruth>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl TestGateway {
    pub fn spawn(cfg: GatewayConfig) -> TestGateway {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let truth = Arc::new(Mutex::new(Vec::new()));
        let t = truth.clone();
        let cfg = Arc::new(cfg);
        runtime.spawn(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                s.set_nodelay(true).unwrap();
                let (cfg, t) = (cfg.clone(), t.clone());
                tokio::spawn(async move {
                    let _ = connection(s, cfg, t).await;
                });
            }
        });
        TestGateway {
            addr,
            truth,
            runtime: Some(runtime),
        }
    }

    pub async fn truth(&self, id: &str) -> GatewayTruth {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(t) = self
                .truth
                .lock()
                .unwrap()
                .iter()
                .find(|t| t.request_id == id)
            {
                return t.clone();
            }
            assert!(Instant::now() < deadline, "gateway never finished {id}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn connection(
    s: TcpStream,
    cfg: Arc<GatewayConfig>,
    truth: Arc<Mutex<Vec<GatewayTruth>>>,
) -> std::io::Result<()> {
    let (mut rd, mut wr) = tokio::io::split(s);
    let mut buf = Vec::new();
    while let Some(req) = wire::read_request(&mut rd, &mut buf).await? {
        let t = handle(&cfg, &req, &mut wr).await?;
        truth.lock().unwrap().push(t);
        if req.close {
            return Ok(());
        }
    }
    Ok(())
}

async fn guard_call(
    guard: SocketAddr,
    trace: Option<&str>,
    id: &str,
    input: &str,
) -> (Instant, Instant) {
    let body = serde_json::json!({"input": input}).to_string();
    let mut h = vec![("content-type", "application/json"), ("x-request-id", id)];
    if let Some(t) = trace {
        h.push(("traceparent", t));
    }
    let start = Instant::now();
    client::send(guard, "POST", "/v1/moderations", &h, body.as_bytes())
        .await
        .unwrap();
    (start, Instant::now())
}

enum Piece {
    Head(u16, String),
    Data(Instant, Vec<u8>),
}

async fn handle(
    cfg: &GatewayConfig,
    req: &Request,
    wr: &mut WriteHalf<TcpStream>,
) -> std::io::Result<GatewayTruth> {
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
    tokio::time::sleep(cfg.processing).await;
    let mut input_guards = Vec::new();
    if let Some(g) = cfg.guard {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..cfg.input_guards {
            let (trace, id) = (trace.clone(), id.clone());
            set.spawn(async move { guard_call(g, trace.as_deref(), &id, "user input").await });
        }
        while let Some(iv) = set.join_next().await {
            input_guards.push(iv.unwrap());
        }
    }
    let mut headers: Vec<(&str, &str)> =
        vec![("content-type", "application/json"), ("x-request-id", &id)];
    if let Some(t) = &trace {
        headers.push(("traceparent", t));
    }
    if let Some(x) = req.header_str("x-sim") {
        headers.push(("x-sim", x));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Piece>();
    let forwarded = Instant::now();
    let mut seen = 0usize;
    let mut head_sent = false;
    let engine = client::send_with(
        cfg.engine,
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
            if r.body.len() > seen {
                let _ = tx.send(Piece::Data(Instant::now(), r.body[seen..].to_vec()));
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
                Piece::Data(at, bytes) if buffered => {
                    let _ = at;
                    held.push(format!("{:x}\r\n", bytes.len()).into_bytes());
                    held.push(bytes);
                    held.push(b"\r\n".to_vec());
                }
                Piece::Data(at, bytes) => {
                    tokio::time::sleep_until((at + relay_delay).into()).await;
                    let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
                    chunk.extend_from_slice(&bytes);
                    chunk.extend_from_slice(b"\r\n");
                    wr.write_all(&chunk).await?;
                    let token = bytes.windows(11).any(|w| w == b"\"content\":\"")
                        && !bytes.windows(12).any(|w| w == b"\"content\":\"\"");
                    relays.push((at, Instant::now(), token));
                }
            }
        }
        Ok::<_, std::io::Error>(held)
    };
    let (result, held) = tokio::join!(engine, writer);
    let mut held = held?;
    result.unwrap();
    let mut output_guard = None;
    if buffered {
        if let Some(g) = cfg.guard {
            output_guard = Some(guard_call(g, trace.as_deref(), &id, "model output").await);
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
