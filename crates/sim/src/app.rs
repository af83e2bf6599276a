//! `tokentap app`: a small reference compound system — a RAG agent — for
//! the demo, the compose stack and the compound-attribution tests.
//!
//! It serves an OpenAI-compatible `POST /v1/chat/completions` (streamed).
//! For each request: its own work (`before`), a vector search (Chroma, a
//! precomputed query vector), an LLM call offering the `lookup` tool (the
//! simulator answers with a call), the MCP tool call, its own work again
//! (`between`), and a second LLM call whose stream it relays to the client
//! as it arrives. It passes `x-request-id` and `traceparent` on (or strips
//! the latter, to exercise joins without traces) and records what it did
//! and when on its own clock: the ground truth the breakdown must recover
//! (`truth_of`, or `GET /truth/{id}` for a process).

mod calls;

use crate::gateway::{chunk, last_user_text, resolve, sleep_until_exactly};
use crate::wire::{self, Request};
pub use calls::Context;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;

const TRUTH_CAP: usize = 10_000;

/// The command line of `tokentap app`.
#[derive(Debug, Clone, clap::Args)]
pub struct AppArgs {
    #[arg(long, default_value = "127.0.0.1:3100")]
    pub listen: SocketAddr,
    /// The LLM (a gateway, an engine, or the tap in front of one): `host:port`.
    #[arg(long)]
    pub llm: String,
    /// The MCP server (or its tap): `host:port`, served at `--mcp-path`.
    #[arg(long)]
    pub mcp: String,
    #[arg(long, default_value = "/mcp")]
    pub mcp_path: String,
    /// Chroma (or its tap): `host:port`; without it, no retrieval.
    #[arg(long)]
    pub retrieval: Option<String>,
    /// The app's own work before anything else, per request.
    #[arg(long, default_value_t = 5)]
    pub before_ms: u64,
    /// The app's own work between the tool's result and the second LLM call.
    #[arg(long, default_value_t = 5)]
    pub between_ms: u64,
    /// Do not pass `traceparent` on.
    #[arg(long)]
    pub strip_traceparent: bool,
}

/// Where the app's calls go and what it does between them.
#[derive(Debug, Clone)]
pub struct AppConfig {
    pub llm: String,
    pub mcp: String,
    pub mcp_path: String,
    pub retrieval: Option<String>,
    pub before: Duration,
    pub between: Duration,
    pub strip_traceparent: bool,
}

impl AppConfig {
    pub fn from_args(a: &AppArgs) -> AppConfig {
        AppConfig {
            llm: a.llm.clone(),
            mcp: a.mcp.clone(),
            mcp_path: a.mcp_path.clone(),
            retrieval: a.retrieval.clone(),
            before: Duration::from_millis(a.before_ms),
            between: Duration::from_millis(a.between_ms),
            strip_traceparent: a.strip_traceparent,
        }
    }
}

/// What the app did for one request, on its own clock.
#[derive(Debug, Clone)]
pub struct AppTruth {
    pub request_id: String,
    pub received: Instant,
    /// (start, end) of each call, as the app made it.
    pub retrieval: Vec<(Instant, Instant)>,
    pub llm: Vec<(Instant, Instant)>,
    pub tool: Vec<(Instant, Instant)>,
    /// The first relayed piece of the answer was handed to the socket.
    pub first_sent: Option<Instant>,
    pub end: Instant,
}

impl AppTruth {
    /// Durations in ms: each kind of call summed, and the app's own time
    /// (from its receipt to its end, outside every call).
    pub fn summary(&self) -> Value {
        let sum = |v: &[(Instant, Instant)]| {
            v.iter()
                .map(|(s, e)| e.saturating_duration_since(*s).as_secs_f64() * 1e3)
                .sum::<f64>()
        };
        let calls = sum(&self.retrieval) + sum(&self.llm) + sum(&self.tool);
        let total = self
            .end
            .saturating_duration_since(self.received)
            .as_secs_f64()
            * 1e3;
        json!({"retrieval_ms": sum(&self.retrieval), "llm_ms": sum(&self.llm),
            "tool_ms": sum(&self.tool), "own_ms": total - calls, "total_ms": total,
            "llm_calls": self.llm.len(), "tool_calls": self.tool.len()})
    }
}

type Truths = Arc<Mutex<VecDeque<AppTruth>>>;

/// What the app set up once: the MCP session, the Chroma collection.
struct Setup {
    cfg: AppConfig,
    session: Option<String>,
    collection: Option<String>,
}

/// The app serving on its own thread and runtime until dropped.
pub struct App {
    pub addr: SocketAddr,
    truth: Truths,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for App {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl App {
    /// Opens the MCP session, prepares the collection, binds `listen` and
    /// serves in the background.
    pub fn spawn(listen: SocketAddr, cfg: AppConfig) -> io::Result<App> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tokentap-app")
            .enable_all()
            .build()?;
        let setup = runtime.block_on(async {
            let session = calls::mcp_session(resolve(&cfg.mcp).await?, &cfg.mcp_path).await?;
            let collection = match &cfg.retrieval {
                Some(r) => Some(calls::chroma_setup(resolve(r).await?, "tokentap-app").await?),
                None => None,
            };
            Ok::<_, io::Error>(Setup {
                cfg,
                session,
                collection,
            })
        })?;
        let setup = Arc::new(setup);
        let truth: Truths = Arc::default();
        let t = truth.clone();
        runtime.spawn(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                let (setup, t) = (setup.clone(), t.clone());
                tokio::spawn(async move {
                    if let Err(e) = connection(s, setup, t).await {
                        tracing::debug!("app connection: {e}");
                    }
                });
            }
        });
        Ok(App {
            addr,
            truth,
            runtime: Some(runtime),
        })
    }

    /// What the app did for the request with this `x-request-id`.
    pub fn truth_of(&self, id: &str) -> Option<AppTruth> {
        let truth = self.truth.lock().unwrap_or_else(|e| e.into_inner());
        truth.iter().find(|t| t.request_id == id).cloned()
    }

    /// Serves on the calling thread until SIGINT or SIGTERM.
    pub fn run_blocking(args: &AppArgs) -> anyhow::Result<()> {
        let app = App::spawn(args.listen, AppConfig::from_args(args))?;
        tracing::info!(addr = %app.addr, llm = %args.llm, mcp = %args.mcp, retrieval = ?args.retrieval, "app listening");
        tokentap_net::rt::block_until_stopped()?;
        drop(app);
        Ok(())
    }
}

async fn connection(s: TcpStream, setup: Arc<Setup>, truth: Truths) -> io::Result<()> {
    let (mut rd, mut wr) = tokio::io::split(s);
    let mut buf = Vec::new();
    while let Some(req) = wire::read_request(&mut rd, &mut buf).await? {
        if let Some(id) = req.path.strip_prefix("/truth/") {
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
        } else {
            let t = handle(&setup, &req, &mut wr).await?;
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

/// The `lookup` tool as the LLM is offered it.
fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "lookup",
        "description": "Look up the weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

async fn handle(
    setup: &Setup,
    req: &Request,
    wr: &mut WriteHalf<TcpStream>,
) -> io::Result<AppTruth> {
    let received = Instant::now();
    let cfg = &setup.cfg;
    let cx = Context {
        request_id: req
            .header_str("x-request-id")
            .unwrap_or_default()
            .to_string(),
        traceparent: if cfg.strip_traceparent {
            None
        } else {
            req.header_str("traceparent").map(str::to_owned)
        },
    };
    let q = last_user_text(&req.body);
    sleep_until_exactly(received + cfg.before).await;
    let mut t = AppTruth {
        request_id: cx.request_id.clone(),
        received,
        retrieval: Vec::new(),
        llm: Vec::new(),
        tool: Vec::new(),
        first_sent: None,
        end: received,
    };
    let mut context = Vec::new();
    if let (Some(r), Some(col)) = (&cfg.retrieval, &setup.collection) {
        let addr = resolve(r).await?;
        let (docs, took) = calls::chroma_query(addr, col, [1.0, 0.1, 0.0, 0.0], 3, &cx).await?;
        context = docs;
        t.retrieval.push(took);
    }
    let llm = resolve(&cfg.llm).await?;
    let mut messages = vec![
        json!({"role": "system", "content": format!("Context: {}", context.join("; "))}),
        json!({"role": "user", "content": q}),
    ];
    let first = json!({"model": "sim-model", "messages": messages, "tools": tools(), "stream": true,
        "stream_options": {"include_usage": true}});
    let (answer, took) = calls::chat(llm, &first, &cx, |_| {}).await?;
    t.llm.push(took);
    let mcp = resolve(&cfg.mcp).await?;
    let mut results = Vec::new();
    for (id, name, args) in &answer.tool_calls {
        let (text, took) = calls::mcp_call(
            mcp,
            &cfg.mcp_path,
            setup.session.as_deref(),
            name,
            args,
            &cx,
        )
        .await?;
        t.tool.push(took);
        results.push((id.clone(), name.clone(), args.clone(), text));
    }
    sleep_until_exactly(Instant::now() + cfg.between).await;
    for (id, name, args, text) in &results {
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
            "type": "function", "function": {"name": name, "arguments": args}}]}),
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
    }
    let second = json!({"model": "sim-model", "messages": messages, "tools": tools(), "stream": true,
        "stream_options": {"include_usage": true}});
    wr.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let call = calls::chat(llm, &second, &cx, move |piece| {
        let _ = tx.send(piece.to_vec());
    });
    let relay = async {
        let mut first_sent = None;
        while let Some(piece) = rx.recv().await {
            first_sent.get_or_insert_with(Instant::now);
            wr.write_all(&chunk(&piece)).await?;
        }
        Ok::<_, io::Error>(first_sent)
    };
    let (answer, first_sent) = tokio::join!(call, relay);
    t.llm.push(answer?.1);
    t.first_sent = first_sent?;
    wr.write_all(b"0\r\n\r\n").await?;
    t.end = Instant::now();
    Ok(t)
}
