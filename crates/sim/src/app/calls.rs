//! The reference app's calls: a Chroma search with a precomputed vector,
//! an OpenAI chat call (streamed; its tool calls and content read from the
//! chunks), an MCP session and its `tools/call` over streamable HTTP (JSON
//! or SSE answers). Each returns when the whole answer was read, with when
//! it ran (`Took`): from its request's first byte written, on a connection
//! already made, to its answer's last byte read.

use serde_json::{json, Value};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use tokentap_net::client::{self, Flow, Response};

/// When a call ran, on the app's clock (its TCP handshake excluded: that
/// is the app's own time, as no service sees it).
pub type Took = (Instant, Instant);

/// Sends on a fresh connection, timed from the first byte written.
async fn timed<F: FnMut(&Response) -> Flow>(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    on_read: F,
) -> io::Result<(Response, Took)> {
    let sock = client::connect(addr).await?;
    let start = Instant::now();
    let r = client::send_on(sock, addr, "POST", path, headers, body, on_read).await?;
    Ok((r, (start, Instant::now())))
}

/// Headers every call carries: the request id and the trace context.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub request_id: String,
    pub traceparent: Option<String>,
}

impl Context {
    fn headers<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut h = vec![("content-type", "application/json")];
        if !self.request_id.is_empty() {
            h.push(("x-request-id", &self.request_id));
        }
        if let Some(t) = &self.traceparent {
            h.push(("traceparent", t));
        }
        h.extend_from_slice(extra);
        h
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn ok(r: Response, what: &str) -> io::Result<Response> {
    if (200..300).contains(&r.status) {
        Ok(r)
    } else {
        Err(bad(format!("{what}: status {}", r.status)))
    }
}

const CHROMA: &str = "/api/v2/tenants/default_tenant/databases/default_database/collections";

/// Creates (or finds) the collection and fills it with five documents and
/// their precomputed 4-dimensional embeddings; returns its id.
pub async fn chroma_setup(addr: SocketAddr, name: &str) -> io::Result<String> {
    let cx = Context::default();
    let body = json!({"name": name, "get_or_create": true}).to_string();
    let r = ok(
        client::send(addr, "POST", CHROMA, &cx.headers(&[]), body.as_bytes()).await?,
        "chroma collection",
    )?;
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| bad(e.to_string()))?;
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("chroma: no collection id"))?
        .to_string();
    let docs = json!({"ids": ["a", "b", "c", "d", "e"],
        "embeddings": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0]],
        "documents": ["Paris is in France", "Rome is in Italy", "Oslo is in Norway",
            "Lima is in Peru", "Nice is in France"]});
    let path = format!("{CHROMA}/{id}/upsert");
    ok(
        client::send(
            addr,
            "POST",
            &path,
            &cx.headers(&[]),
            docs.to_string().as_bytes(),
        )
        .await?,
        "chroma upsert",
    )?;
    Ok(id)
}

/// The nearest `k` documents to `vector`.
pub async fn chroma_query(
    addr: SocketAddr,
    collection: &str,
    vector: [f32; 4],
    k: u32,
    cx: &Context,
) -> io::Result<(Vec<String>, Took)> {
    let body = json!({"query_embeddings": [vector], "n_results": k, "include": ["documents"]});
    let path = format!("{CHROMA}/{collection}/query");
    let body = body.to_string();
    let (r, took) = timed(addr, &path, &cx.headers(&[]), body.as_bytes(), |_| {
        Flow::Continue
    })
    .await?;
    let r = ok(r, "chroma query")?;
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| bad(e.to_string()))?;
    let docs = v
        .pointer("/documents/0")
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok((docs, took))
}

/// What one streamed chat answer held.
#[derive(Debug, Default)]
pub struct ChatAnswer {
    pub content: String,
    /// (id, name, arguments) of each tool call.
    pub tool_calls: Vec<(String, String, String)>,
}

/// The `data:` payloads of an SSE body, `[DONE]` excluded.
fn sse_data(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    body.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
        .map(|d| d.strip_prefix(b" ").unwrap_or(d))
        .map(|d| d.strip_suffix(b"\r").unwrap_or(d))
        .filter(|d| *d != b"[DONE]")
}

/// A streamed chat call; `on_chunk` gets every body piece as it is read.
pub async fn chat(
    addr: SocketAddr,
    body: &Value,
    cx: &Context,
    mut on_chunk: impl FnMut(&[u8]),
) -> io::Result<(ChatAnswer, Took)> {
    let mut seen = 0usize;
    let (r, took) = timed(
        addr,
        "/v1/chat/completions",
        &cx.headers(&[]),
        body.to_string().as_bytes(),
        |r| {
            if let Some(new) = r.body.get(seen..).filter(|b| !b.is_empty()) {
                on_chunk(new);
                seen = r.body.len();
            }
            Flow::Continue
        },
    )
    .await?;
    let r = ok(r, "chat")?;
    let mut a = ChatAnswer::default();
    for data in sse_data(&r.body) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            continue;
        };
        let Some(delta) = v.pointer("/choices/0/delta") else {
            continue;
        };
        if let Some(c) = delta.get("content").and_then(Value::as_str) {
            a.content.push_str(c);
        }
        for t in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = t.get("function");
            let piece = f
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match t.get("id").and_then(Value::as_str) {
                Some(id) => a.tool_calls.push((
                    id.to_string(),
                    f.and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    piece.to_string(),
                )),
                None => {
                    if let Some(last) = a.tool_calls.last_mut() {
                        last.2.push_str(piece);
                    }
                }
            }
        }
    }
    Ok((a, took))
}

const MCP_ACCEPT: (&str, &str) = ("accept", "application/json, text/event-stream");
const MCP_VERSION: &str = "2025-06-18";

/// The JSON-RPC response with `id` in a JSON or SSE answer.
fn rpc_result(r: &Response, id: u64) -> io::Result<Value> {
    let sse = r
        .header("content-type")
        .is_some_and(|c| c.starts_with(b"text/event-stream"));
    let messages: Vec<Value> = if sse {
        sse_data(&r.body)
            .filter_map(|d| serde_json::from_slice(d).ok())
            .collect()
    } else {
        vec![serde_json::from_slice(&r.body).map_err(|e| bad(e.to_string()))?]
    };
    messages
        .into_iter()
        .find(|m| m.get("id").and_then(Value::as_u64) == Some(id))
        .ok_or_else(|| bad("mcp: no answer"))
}

/// An MCP session over streamable HTTP (`initialize`, then
/// `notifications/initialized`): its `Mcp-Session-Id`, if the server gave one.
pub async fn mcp_session(addr: SocketAddr, path: &str) -> io::Result<Option<String>> {
    let cx = Context::default();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": MCP_VERSION, "capabilities": {},
        "clientInfo": {"name": "tokentap-app", "version": "1"}}});
    let r = ok(
        client::send(
            addr,
            "POST",
            path,
            &cx.headers(&[MCP_ACCEPT]),
            init.to_string().as_bytes(),
        )
        .await?,
        "mcp initialize",
    )?;
    rpc_result(&r, 0)?;
    let session = r
        .header("mcp-session-id")
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let mut h = cx.headers(&[MCP_ACCEPT, ("mcp-protocol-version", MCP_VERSION)]);
    if let Some(s) = &session {
        h.push(("mcp-session-id", s));
    }
    client::send(addr, "POST", path, &h, note.as_bytes()).await?;
    Ok(session)
}

/// `tools/call`: the text of the tool's result.
pub async fn mcp_call(
    addr: SocketAddr,
    path: &str,
    session: Option<&str>,
    name: &str,
    arguments: &str,
    cx: &Context,
) -> io::Result<(String, Took)> {
    // Ids are unique within the session the app's requests share: a
    // server matches each answer to its request by id.
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let args: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": args}})
    .to_string();
    let mut h = cx.headers(&[MCP_ACCEPT, ("mcp-protocol-version", MCP_VERSION)]);
    if let Some(s) = session {
        h.push(("mcp-session-id", s));
    }
    let (r, took) = timed(addr, path, &h, body.as_bytes(), |_| Flow::Continue).await?;
    let r = ok(r, "mcp tools/call")?;
    let v = rpc_result(&r, id)?;
    let text = v
        .pointer("/result/content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    Ok((text, took))
}
