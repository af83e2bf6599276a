//! The real engine's harness for it::engine: a llama-server process on a
//! free loopback port, the request bodies, what its answers say (texts,
//! normalised bytes, its own `timings`), and the warm-up that teaches a tap
//! that llama-server closes connections after streams.

use crate::support::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokentap_net::client;

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/engine")
}

/// A running llama-server on a free loopback port.
pub struct Engine {
    child: Child,
    pub addr: std::net::SocketAddr,
}

impl Engine {
    pub fn start() -> Engine {
        let bin = cache_dir().join("bin/llama-server");
        let model = cache_dir().join("tiny.gguf");
        assert!(
            bin.exists() && model.exists(),
            "no llama-server or model in .cache/engine: run `make engine` (scripts/engine.sh)"
        );
        let addr = free_addr();
        let child = Command::new(&bin)
            .arg("-m")
            .arg(&model)
            .args(["--alias", "tiny", "--host", "127.0.0.1", "--port"])
            .arg(addr.port().to_string())
            .args(["-t", "1", "-tb", "1", "-c", "8192", "-np", "1"])
            .args(["--cache-ram", "0", "--no-webui"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("llama-server starts");
        let e = Engine { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if health(addr) {
                return e;
            }
            assert!(Instant::now() < deadline, "llama-server never became ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /health` answers 200 (503 while the model loads).
pub fn health(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200"))
}

/// Text of `n` words from the model's own training vocabulary (varied by
/// `seed`, so distinct prompts share nothing beyond the chat template).
pub fn words(n: usize, seed: u64) -> String {
    const W: [&str; 24] = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "pack", "my", "box",
        "with", "five", "dozen", "liquor", "jugs", "time", "small", "robot", "once", "upon", "a",
        "tokens", "stream",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            W[(x % W.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn chat_body(
    content: &str,
    max_tokens: u32,
    stream: bool,
    usage: bool,
    cache: bool,
) -> Vec<u8> {
    let mut v = serde_json::json!({
        "model": "tiny", "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens, "temperature": 0, "seed": 1, "cache_prompt": cache,
        "stream": stream,
    });
    if usage {
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    serde_json::to_vec(&v).unwrap()
}

/// Every JSON object of an SSE body (or the body itself).
pub fn objects(body: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(body);
    if !text.starts_with("data:") {
        return serde_json::from_slice(body).into_iter().collect();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// The body with what differs between two runs of one request removed:
/// ids, creation times and the engine's own timings.
pub fn normalised(body: &[u8]) -> String {
    let strip = |mut v: serde_json::Value| {
        if let Some(o) = v.as_object_mut() {
            for k in ["id", "created", "timings"] {
                o.remove(k);
            }
        }
        v.to_string()
    };
    let text = String::from_utf8_lossy(body);
    if !text.starts_with("data:") {
        return serde_json::from_slice(body).map(strip).unwrap_or_default();
    }
    text.split("\n\n")
        .map(|event| match event.strip_prefix("data: ") {
            Some(d) => match serde_json::from_str(d) {
                Ok(v) => format!("data: {}", strip(v)),
                Err(_) => event.to_string(),
            },
            None => event.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The generated text of a stream or an answer.
pub fn text_of(body: &[u8]) -> String {
    objects(body)
        .iter()
        .flat_map(|o| o["choices"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| {
            c["delta"]["content"]
                .as_str()
                .or(c["message"]["content"].as_str())
                .or(c["text"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// The engine's `timings` (the last object that has them).
pub fn timings(body: &[u8]) -> serde_json::Value {
    objects(body)
        .into_iter()
        .rev()
        .find_map(|o| o.get("timings").cloned())
        .expect("llama-server reports its timings")
}

pub fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Fails with what the tap recorded when the engine's answer was not a 200.
pub async fn answered(tap: &Tap, id: &str, resp: &client::Response) {
    if resp.status != 200 {
        let r = tap.records.wait(id).await;
        panic!(
            "{id}: status {} ({:?}, {:?}): {}",
            resp.status,
            r.outcome,
            r.error_type,
            String::from_utf8_lossy(&resp.body)
        );
    }
}

pub fn analysed_tap(engine: &Engine) -> Tap {
    Tap::start_top(
        &engine.url(),
        "",
        "analysis:\n  window_seconds: 3600\n",
        std::path::Path::new("."),
    )
}

pub const STALE: &str = "tokentap_upstream_stale_connections_total{boundary=\"engine\",tap=\"t\"}";

/// llama-server answers `Keep-Alive` yet closes the connection a few
/// microseconds after every stream. A client that follows a stream at once
/// can get that closing connection from the tap's pool: the tap finds it
/// closed before writing (sent again on a new one, counted in
/// `tokentap_upstream_stale_connections_total`), or the FIN crosses the
/// request and pingora answers the POST with 502 (it may have been
/// applied). After two of either the tap has learned that this upstream
/// closes after responses and asks for `Connection: close`: no later
/// request can race a closing connection. These back-to-back warm-up
/// streams teach it; at most two of them are 502s, and none of the measured
/// requests after them is.
pub async fn teach(tap: &Tap) -> f64 {
    let mut raced = 0.0;
    for i in 0..2_000 {
        if tap.sample(STALE) + raced >= 2.0 {
            println!(
                "engine: the tap learned after {i} warm-up streams ({} pooled connections found closed, {raced} raced)",
                tap.sample(STALE)
            );
            return tap.sample(STALE);
        }
        let id = format!("warm-{i}");
        let h = [
            ("content-type", "application/json"),
            ("x-request-id", id.as_str()),
        ];
        let body = chat_body("hi", 1, true, false, false);
        let resp = client::send(tap.addr, "POST", "/v1/chat/completions", &h, &body)
            .await
            .unwrap();
        if resp.status == 502 {
            raced += 1.0;
        } else {
            answered(tap, &id, &resp).await;
        }
    }
    panic!("the tap never met a closing pooled connection");
}
