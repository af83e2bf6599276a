//! The simulator's side of HTTP/1.1: reading one request (head parsed by
//! httparse, body by `Content-Length` or chunked) from a connection that may
//! carry several. Responses are written as prepared bytes by `serve`; the
//! framing of those bytes is planned in `script`.

use std::io;
use tokentap_core::chunked::ChunkedScan;
use tokio::io::{AsyncRead, AsyncReadExt};

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 256 * 1024 * 1024;
const MAX_HEADERS: usize = 128;

/// One request as the simulator needs it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// The client asked to close after this request.
    pub close: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads more bytes into `buf`; `Ok(false)` at end of stream.
async fn fill<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut tmp = [0u8; 16 * 1024];
    let n = rd.read(&mut tmp).await?;
    buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
    Ok(n > 0)
}

/// Reads the next request. `Ok(None)` when the peer closed between requests.
/// Bytes after the request stay in `buf` for the next call.
pub async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Request>> {
    let (head_len, mut req, body_mode) = loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(buf).map_err(|e| invalid(e.to_string()))? {
            httparse::Status::Complete(n) => {
                let mut req = Request {
                    method: parsed.method.unwrap_or_default().to_string(),
                    path: parsed.path.unwrap_or_default().to_string(),
                    ..Request::default()
                };
                for h in parsed.headers.iter() {
                    req.headers
                        .push((h.name.to_ascii_lowercase(), h.value.to_vec()));
                }
                let conn = req
                    .header_str("connection")
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                req.close = conn.contains("close")
                    || parsed.version == Some(0) && !conn.contains("keep-alive");
                let chunked = req
                    .header_str("transfer-encoding")
                    .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
                let mode = if chunked {
                    BodyMode::Chunked
                } else {
                    let len = req
                        .header_str("content-length")
                        .map(|v| v.trim().parse::<usize>());
                    match len {
                        None => BodyMode::Length(0),
                        Some(Ok(n)) if n <= MAX_BODY => BodyMode::Length(n),
                        Some(_) => return Err(invalid("bad content-length")),
                    }
                };
                break (n, req, mode);
            }
            httparse::Status::Partial => {
                if buf.len() > MAX_HEAD {
                    return Err(invalid("request head too large"));
                }
                if !fill(rd, buf).await? {
                    return if buf.is_empty() {
                        Ok(None)
                    } else {
                        Err(invalid("eof in request head"))
                    };
                }
            }
        }
    };
    buf.drain(..head_len);
    req.body = match body_mode {
        BodyMode::Length(n) => {
            while buf.len() < n {
                if !fill(rd, buf).await? {
                    return Err(invalid("eof in request body"));
                }
            }
            buf.drain(..n).collect()
        }
        BodyMode::Chunked => read_chunked(rd, buf).await?,
    };
    Ok(Some(req))
}

enum BodyMode {
    Length(usize),
    Chunked,
}

async fn read_chunked<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let mut scan = ChunkedScan::default();
    let mut body = Vec::new();
    loop {
        let used = scan
            .feed(buf, |p| body.extend_from_slice(p))
            .map_err(|e| invalid(e.to_string()))?;
        // What follows the body stays in `buf`: the next request's.
        buf.drain(..used);
        if body.len() > MAX_BODY {
            return Err(invalid("request body too large"));
        }
        if scan.is_done() {
            return Ok(body);
        }
        if !fill(rd, buf).await? {
            return Err(invalid("eof in chunked body"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_chunked_body_ends_where_its_framing_does_and_the_next_request_follows() {
        let mut rd = pieces(&[
            b"POST /a HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            b"lo\r\n6;x=y\r\n world\r\n0\r\nX: 1\r\n\r\nPOST /b HTTP/1.1\r\ncontent-length: 2\r\n\r\nok",
        ]);
        let mut buf = Vec::new();
        let a = read_request(&mut rd, &mut buf).await.unwrap().unwrap();
        assert_eq!(
            (a.path.as_str(), a.body.as_slice()),
            ("/a", &b"hello world"[..])
        );
        let b = read_request(&mut rd, &mut buf).await.unwrap().unwrap();
        assert_eq!((b.path.as_str(), b.body.as_slice()), ("/b", &b"ok"[..]));
        assert!(read_request(&mut rd, &mut buf).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn bad_or_cut_chunked_framing_is_an_error() {
        for body in [&b"5\r\nhelloXX0\r\n\r\n"[..], b"\r\n", b"5\r\nhel"] {
            let head = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
            let mut rd = pieces(&[head, body]);
            let mut buf = Vec::new();
            assert!(read_request(&mut rd, &mut buf).await.is_err(), "{body:?}");
        }
    }

    /// A reader that returns `pieces` one read each, then end of stream.
    fn pieces(pieces: &[&[u8]]) -> impl AsyncRead + Unpin {
        Pieces(pieces.iter().rev().map(|p| p.to_vec()).collect())
    }

    struct Pieces(Vec<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if let Some(p) = self.0.pop() {
                out.put_slice(&p);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }
}
