//! A minimal HTTP/1.1 client that timestamps every socket read.
//!
//! Used by the demo's traffic generator, the integration tests and (later)
//! the benchmark driver: they need what a general-purpose client hides —
//! when each read returned and how many bytes it carried (to see coalescing
//! and delay), the raw body bytes (to compare byte for byte), and whether the
//! body ended cleanly (chunked terminator or full Content-Length) or was
//! truncated. The head is parsed by httparse, a chunked body scanned by
//! `tokentap_core::chunked`. One request per connection; cancel by dropping
//! the future or from the `on_read` callback.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use tokentap_core::chunked::ChunkedScan;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One socket read after the request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub at: Instant,
    pub len: usize,
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    pub sent_at: Instant,
    pub head_at: Option<Instant>,
    /// Every read that carried bytes (head included).
    pub reads: Vec<Read>,
    /// The body ended as its framing says (not cut short).
    pub complete: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// What `on_read` tells the client to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Close the connection now (a client cancelling).
    Stop,
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Builds the request bytes (always `Connection: close`).
pub fn request_bytes(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Sends one request and reads the whole response.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    send_with(addr, method, path, headers, body, |_| Flow::Continue).await
}

/// Like `send`, calling `on_read` with the response so far after every read
/// (the one that completes the body included).
pub async fn send_with<F>(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    on_read: F,
) -> io::Result<Response>
where
    F: FnMut(&Response) -> Flow,
{
    let sock = connect(addr).await?;
    send_on(sock, addr, method, path, headers, body, on_read).await
}

/// A connection to `addr` (no delay), for `send_on`: a caller that times
/// a request without its TCP handshake connects first.
pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let sock = TcpStream::connect(addr).await?;
    sock.set_nodelay(true)?;
    Ok(sock)
}

/// `send_with` on a connection made by `connect`.
pub async fn send_on<F>(
    mut sock: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    mut on_read: F,
) -> io::Result<Response>
where
    F: FnMut(&Response) -> Flow,
{
    sock.write_all(&request_bytes(
        method,
        path,
        &addr.to_string(),
        headers,
        body,
    ))
    .await?;
    let mut r = Response {
        status: 0,
        headers: Vec::new(),
        body: Vec::new(),
        sent_at: Instant::now(),
        head_at: None,
        reads: Vec::new(),
        complete: false,
    };
    let mut raw: Vec<u8> = Vec::new();
    let mut framing: Option<Framing> = None;
    let mut tmp = vec![0u8; 64 * 1024];
    loop {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        let at = Instant::now();
        if n == 0 {
            // EOF (or reset): complete only for a close-delimited body.
            if matches!(framing, Some(Framing::Close)) {
                r.complete = true;
            }
            if framing.is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the response head",
                ));
            }
            return Ok(r);
        }
        r.reads.push(Read { at, len: n });
        raw.extend_from_slice(tmp.get(..n).unwrap_or_default());
        if framing.is_none() {
            let mut hs = [httparse::EMPTY_HEADER; 128];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&raw).map_err(|e| invalid(&e.to_string()))? {
                httparse::Status::Partial => continue,
                httparse::Status::Complete(len) => {
                    r.status = resp.code.unwrap_or(0);
                    r.head_at = Some(at);
                    r.headers = resp
                        .headers
                        .iter()
                        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                        .collect();
                    raw.drain(..len);
                    framing = Some(Framing::of(&r));
                }
            }
        }
        let done = match &mut framing {
            Some(Framing::Length(n)) => {
                let take = raw.len().min(n.saturating_sub(r.body.len()));
                r.body.extend(raw.drain(..take));
                r.body.len() >= *n
            }
            Some(Framing::Chunked(scan)) => {
                let used = scan
                    .feed(&raw, |p| r.body.extend_from_slice(p))
                    .map_err(|e| invalid(&e.to_string()))?;
                raw.drain(..used);
                scan.is_done()
            }
            Some(Framing::Close) => {
                r.body.append(&mut raw);
                false
            }
            None => false,
        };
        r.complete = done;
        // Every read is reported, the last one included.
        if on_read(&r) == Flow::Stop || done {
            return Ok(r);
        }
    }
}

#[derive(Debug)]
enum Framing {
    Length(usize),
    Chunked(ChunkedScan),
    Close,
}

impl Framing {
    fn of(r: &Response) -> Framing {
        let te = r
            .header("transfer-encoding")
            .map(|v| v.to_ascii_lowercase());
        if te.is_some_and(|te| te.windows(7).any(|w| w == b"chunked")) {
            return Framing::Chunked(ChunkedScan::default());
        }
        if r.status == 204 || r.status == 304 {
            return Framing::Length(0);
        }
        match r
            .header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse().ok())
        {
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    }
}
