//! The benchmark's client side: one keep-alive HTTP/1.1 connection that
//! stamps every socket read right after it returns (before any parsing) and
//! turns a streamed body into events with their arrival read. Token texts
//! are the simulator's numbered tokens (`--numbered`), so lost, repeated or
//! reordered tokens show whatever a proxy does to the framing.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use tokentap_core::chunked::ChunkedScan;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One SSE event as the client saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The read that completed it.
    pub at: Instant,
    pub read: u32,
    /// Token numbers in its `content` (empty for role, usage, `[DONE]`).
    pub tokens: Vec<u32>,
}

/// One request and its response.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub status: u16,
    pub sent: Instant,
    /// The read that completed the response head.
    pub head_at: Instant,
    /// The last read of the body.
    pub end_at: Instant,
    pub events: Vec<Seen>,
    /// Reads that carried body bytes.
    pub body_reads: u32,
    pub body_len: usize,
}

impl Exchange {
    /// Arrival of the first event carrying a token.
    pub fn first_token(&self) -> Option<Instant> {
        self.events
            .iter()
            .find(|e| !e.tokens.is_empty())
            .map(|e| e.at)
    }

    /// Token numbers in arrival order.
    pub fn tokens(&self) -> impl Iterator<Item = u32> + '_ {
        self.events.iter().flat_map(|e| e.tokens.iter().copied())
    }
}

pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// `POST /v1/chat/completions` with a JSON body and extra headers.
pub fn chat_request(model: &str, stream: bool, tokens: u32, headers: &[(&str, String)]) -> Vec<u8> {
    let body = format!(
        "{{\"model\":\"{model}\",\"stream\":{stream},\"max_tokens\":{tokens},\"messages\":[{{\"role\":\"user\",\"content\":\"benchmark\"}}]}}"
    );
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\nauthorization: Bearer sk-bench\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    req.into_bytes()
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Self {
        Conn {
            addr,
            stream: None,
            buf: Vec::with_capacity(64 << 10),
        }
    }

    /// Sends `request` (reconnecting when the last response closed the
    /// connection) and reads the whole response.
    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<Exchange> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr).await?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        let result = self.exchange_on(request).await;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange_on(&mut self, request: &[u8]) -> io::Result<Exchange> {
        let stream = self.stream.as_mut().ok_or_else(|| bad("no connection"))?;
        let sent = Instant::now();
        stream.write_all(request).await?;
        self.buf.clear();
        let mut tmp = vec![0u8; 64 << 10];
        // The head.
        let (status, body_start, framing, close, head_at) = loop {
            let n = stream.read(&mut tmp).await?;
            let at = Instant::now();
            if n == 0 {
                return Err(bad("closed before the response head"));
            }
            self.buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(len) =
                resp.parse(&self.buf).map_err(|e| bad(&e.to_string()))?
            {
                let get = |name: &str| {
                    resp.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
                };
                let framing = if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
                    Framing::Chunked(ChunkedScan::default())
                } else if let Some(n) = get("content-length").and_then(|v| v.trim().parse().ok()) {
                    Framing::Length(n)
                } else {
                    Framing::UntilClose
                };
                let close = get("connection").is_some_and(|v| v.contains("close"));
                break (resp.code.unwrap_or(0), len, framing, close, at);
            }
        };
        let mut body = Body::new(framing);
        let mut ex = Exchange {
            status,
            sent,
            head_at,
            end_at: head_at,
            events: Vec::new(),
            body_reads: 0,
            body_len: 0,
        };
        let first = self.buf.split_off(body_start);
        let mut reads = 0u32;
        let mut feed = |bytes: &[u8], at: Instant, ex: &mut Exchange| -> io::Result<bool> {
            if bytes.is_empty() {
                return Ok(body.done());
            }
            reads += 1;
            ex.body_reads = reads;
            ex.end_at = at;
            body.push(bytes, at, reads, ex)
        };
        let mut done = feed(&first, head_at, &mut ex)?;
        while !done {
            let n = stream.read(&mut tmp).await?;
            let at = Instant::now();
            if n == 0 {
                if matches!(body.framing, Framing::UntilClose) {
                    break;
                }
                return Err(bad("closed mid-body"));
            }
            done = feed(tmp.get(..n).unwrap_or_default(), at, &mut ex)?;
        }
        if close || matches!(body.framing, Framing::UntilClose) {
            self.stream = None;
        }
        Ok(ex)
    }
}

enum Framing {
    Length(usize),
    Chunked(ChunkedScan),
    UntilClose,
}

struct Body {
    framing: Framing,
    got: usize,
    plain: Vec<u8>,
    /// Where the next SSE event starts in `plain`.
    event_start: usize,
}

impl Body {
    fn new(framing: Framing) -> Self {
        Body {
            framing,
            got: 0,
            plain: Vec::new(),
            event_start: 0,
        }
    }

    fn done(&self) -> bool {
        match &self.framing {
            Framing::Length(n) => self.got >= *n,
            Framing::Chunked(d) => d.is_done(),
            Framing::UntilClose => false,
        }
    }

    /// Takes body bytes; records completed events. `true` once complete.
    fn push(
        &mut self,
        bytes: &[u8],
        at: Instant,
        read: u32,
        ex: &mut Exchange,
    ) -> io::Result<bool> {
        self.got += bytes.len();
        match &mut self.framing {
            Framing::Chunked(d) => {
                let plain = &mut self.plain;
                d.feed(bytes, |p| plain.extend_from_slice(p))
                    .map_err(|e| bad(&e.to_string()))?;
            }
            _ => self.plain.extend_from_slice(bytes),
        }
        ex.body_len = self.plain.len();
        while let Some(end) = self
            .plain
            .get(self.event_start..)
            .and_then(|rest| rest.windows(2).position(|w| w == b"\n\n"))
        {
            let event = self
                .plain
                .get(self.event_start..self.event_start + end)
                .unwrap_or_default();
            if event.starts_with(b"data:") || event.windows(6).any(|w| w == b"\ndata:") {
                ex.events.push(Seen {
                    at,
                    read,
                    tokens: tokens_of(event),
                });
            }
            self.event_start += end + 2;
        }
        Ok(self.done())
    }
}

/// The numbers in an event's `"content":"..."`.
fn tokens_of(event: &[u8]) -> Vec<u32> {
    let text = String::from_utf8_lossy(event);
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(i) = rest.find("\"content\":\"") {
        rest = rest.get(i + 11..).unwrap_or_default();
        let end = rest.find('"').unwrap_or(rest.len());
        out.extend(
            rest.get(..end)
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|t| t.parse::<u32>().ok()),
        );
        rest = rest.get(end..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_tokens_are_read_from_content() {
        let e = br#"data: {"choices":[{"delta":{"content":"17 18 "}}]}"#;
        assert_eq!(tokens_of(e), vec![17, 18]);
        assert!(tokens_of(b"data: [DONE]").is_empty());
    }
}
