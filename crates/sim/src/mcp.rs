//! A small MCP server for the demo: the Model Context Protocol's streamable
//! HTTP transport with JSON answers (`POST /mcp`), one tool, `lookup(city)`,
//! answering `Sunny in {city}` after `delay`. Enough for the reference app
//! (`app`) without Python; the tests use the official SDK's server.
//!
//! Answers `initialize` (with an `Mcp-Session-Id`), `tools/list`,
//! `tools/call` and `ping`; a notification gets `202 Accepted`; anything
//! else a JSON-RPC "method not found" error.

use crate::wire::{self, Request};
use serde_json::{json, Value};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The protocol version it speaks.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The server on its own thread and runtime until dropped.
pub struct McpSim {
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl McpSim {
    pub fn spawn(listen: SocketAddr, delay: Duration) -> io::Result<McpSim> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tokentap-mcp")
            .enable_all()
            .build()?;
        runtime.spawn(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    if let Err(e) = connection(s, delay).await {
                        tracing::debug!("mcp connection: {e}");
                    }
                });
            }
        });
        Ok(McpSim {
            addr,
            _runtime: runtime,
        })
    }
}

async fn connection(s: TcpStream, delay: Duration) -> io::Result<()> {
    let _ = s.set_nodelay(true);
    let (mut rd, mut wr) = tokio::io::split(s);
    let mut buf = Vec::new();
    while let Some(req) = wire::read_request(&mut rd, &mut buf).await? {
        let (status, session, body) = answer(&req, delay).await;
        let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
        if !body.is_empty() {
            head.push_str("content-type: application/json\r\n");
        }
        if let Some(s) = session {
            head.push_str(&format!("mcp-session-id: {s}\r\n"));
        }
        head.push_str("\r\n");
        wr.write_all(head.as_bytes()).await?;
        wr.write_all(body.as_bytes()).await?;
        if req.close {
            break;
        }
    }
    Ok(())
}

/// Status line, session id to set, body.
async fn answer(req: &Request, delay: Duration) -> (&'static str, Option<String>, String) {
    if req.method != "POST" {
        return ("405 Method Not Allowed", None, String::new());
    }
    let Ok(msg) = serde_json::from_slice::<Value>(&req.body) else {
        let e = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}});
        return ("400 Bad Request", None, e.to_string());
    };
    let Some(id) = msg.get("id").cloned() else {
        return ("202 Accepted", None, String::new()); // a notification
    };
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    match method {
        "initialize" => (
            "200 OK",
            Some(format!("{:032x}", rand::random::<u128>())),
            ok(json!({"protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "tokentap-sim", "version": env!("CARGO_PKG_VERSION")}})),
        ),
        "ping" => ("200 OK", None, ok(json!({}))),
        "tools/list" => (
            "200 OK",
            None,
            ok(json!({"tools": [{"name": "lookup", "description": "Look up the weather for a city.",
                "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}}]})),
        ),
        "tools/call" => {
            let params = msg.get("params");
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
            let city = params
                .and_then(|p| p.get("arguments"))
                .and_then(|a| a.get("city"))
                .and_then(Value::as_str)
                .unwrap_or("nowhere");
            tokio::time::sleep(delay).await;
            let result = match name {
                Some("lookup") => json!({"content": [{"type": "text", "text": format!("Sunny in {city}")}],
                    "isError": false}),
                _ => json!({"content": [{"type": "text", "text": "unknown tool"}], "isError": true}),
            };
            ("200 OK", None, ok(result))
        }
        _ => (
            "200 OK",
            None,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_core::calls::mcp;

    #[tokio::test]
    async fn it_answers_what_the_app_and_the_tool_tap_read() {
        let post = |body: &str| Request {
            method: "POST".into(),
            path: "/mcp".into(),
            body: body.as_bytes().to_vec(),
            ..Request::default()
        };
        let (status, session, body) = answer(
            &post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#),
            Duration::ZERO,
        )
        .await;
        assert_eq!(status, "200 OK");
        assert_eq!(session.map(|s| s.len()), Some(32));
        assert!(body.contains(PROTOCOL_VERSION));
        let (status, _, body) = answer(
            &post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Duration::ZERO,
        )
        .await;
        assert_eq!((status, body.as_str()), ("202 Accepted", ""));
        let (_, _, body) = answer(
            &post(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{"city":"Paris"}}}"#),
            Duration::ZERO,
        )
        .await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["result"]["content"][0]["text"], "Sunny in Paris");
        // What the tool tap reads of it: a result, not a tool error.
        let raw = serde_json::value::RawValue::from_string(v["result"].to_string()).unwrap();
        let o = mcp::outcome(mcp::McpMethod::ToolsCall, Some(&raw), None, true);
        assert!(o.error.is_ok());
        let (_, _, body) = answer(
            &post(r#"{"jsonrpc":"2.0","id":8,"method":"nope"}"#),
            Duration::ZERO,
        )
        .await;
        assert!(body.contains("-32601"));
    }
}
