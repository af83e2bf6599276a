//! HTTP/1.1 request smuggling and framing vectors against a strict echo
//! upstream that records every request it parses: each vector is rejected
//! (4xx or a closed connection) or forwarded normalised — the upstream
//! never sees the request hidden inside another one.

use crate::support::*;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Paths the upstream parsed, in order.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

/// A strict HTTP/1.1 upstream: httparse for the head, Content-Length or
/// chunked for the body (anything else: it closes), 200 with a small JSON
/// body, keep-alive.
async fn echo_upstream() -> (SocketAddr, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = l.accept().await else {
                return;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let _ = serve(sock, &s).await;
            });
        }
    });
    (addr, seen)
}

async fn serve(mut sock: TcpStream, seen: &Seen) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        // One head.
        let (path, cl, chunked, consumed) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let get = |name: &str| {
                        req.headers
                            .iter()
                            .filter(|h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| String::from_utf8_lossy(h.value).to_string())
                            .collect::<Vec<_>>()
                    };
                    let cl = get("content-length");
                    let te = get("transfer-encoding");
                    if cl.len() > 1 || (!cl.is_empty() && !te.is_empty()) {
                        return Ok(()); // ambiguous framing: close
                    }
                    let chunked = te.iter().any(|t| t.eq_ignore_ascii_case("chunked"));
                    let cl = cl
                        .first()
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    break (req.path.unwrap_or_default().to_string(), cl, chunked, n);
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Ok(()),
            }
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        buf.drain(..consumed);
        // The body.
        if chunked {
            loop {
                let Some(pos) = buf.windows(2).position(|w| w == b"\r\n") else {
                    let n = sock.read(&mut tmp).await?;
                    if n == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    continue;
                };
                let size = std::str::from_utf8(&buf[..pos]).ok().and_then(|s| {
                    usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok()
                });
                let Some(size) = size else { return Ok(()) };
                while buf.len() < pos + 2 + size + 2 {
                    let n = sock.read(&mut tmp).await?;
                    if n == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                buf.drain(..pos + 2 + size + 2);
                if size == 0 {
                    break;
                }
            }
        } else {
            while buf.len() < cl {
                let n = sock.read(&mut tmp).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            buf.drain(..cl);
        }
        seen.0.lock().unwrap().push(path);
        let body = b"{\"ok\":true}";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        sock.write_all(head.as_bytes()).await?;
        sock.write_all(body).await?;
    }
}

/// Sends raw bytes to the tap; returns what came back before it closed or
/// went quiet.
async fn raw(tap: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(tap).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_millis(300), s.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&tmp[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_vectors_are_rejected_or_normalised_never_desynchronised() {
    let _g = serial().await;
    let (up, seen) = echo_upstream().await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let vectors: Vec<(&str, String)> = vec![
        (
            "CL+TE",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        (
            "TE+CL",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        (
            "duplicate CL",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 38\r\n\r\n{SMUGGLED}"),
        ),
        (
            "invalid CL",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0x26\r\n\r\n{SMUGGLED}"),
        ),
        (
            "TE chunked, identity",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        (
            "TE obfuscated",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        (
            "obs-fold",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nX-Fold: a\r\n b\r\n\r\n{SMUGGLED}"),
        ),
        (
            "bare LF",
            format!("POST /a HTTP/1.1\nHost: a\nContent-Length: 0\n\n{SMUGGLED}"),
        ),
        (
            "bad chunk size",
            format!("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{SMUGGLED}0\r\n\r\n"),
        ),
        (
            "HTTP/1.0 body without CL",
            format!("POST /a HTTP/1.0\r\nHost: a\r\n\r\n{SMUGGLED}"),
        ),
        (
            "Upgrade answered 200",
            format!("GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n{SMUGGLED}"),
        ),
    ];
    let mut report = Vec::new();
    for (name, bytes) in &vectors {
        seen.0.lock().unwrap().clear();
        let before = tap.records.count();
        let answer = raw(tap.addr, bytes.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let proxied = tap.records.count() - before;
        let paths = seen.0.lock().unwrap().clone();
        let status = answer.lines().next().unwrap_or("(closed)").to_string();
        report.push(format!(
            "{name}: {status}; tokentap handled {proxied}, the upstream parsed {paths:?}"
        ));
        // Desynchronised = the upstream parsed a request tokentap did not
        // see as one (bytes forwarded as a body, read as a request).
        assert!(
            !paths.iter().any(|p| p == "/smuggled"),
            "{name}: the hidden request reached the upstream: {report:#?}"
        );
        assert!(
            paths.len() <= proxied,
            "{name}: the upstream parsed more requests than tokentap handled: {report:#?}"
        );
    }
    // Pipelining is off (pingora's default): bytes read past the end of a
    // request close the connection after its answer, so a pipelined second
    // request is never forwarded — clients retry it on a new connection.
    seen.0.lock().unwrap().clear();
    let answer = raw(
        tap.addr,
        b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await;
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 1, "{answer}");
    assert_eq!(*seen.0.lock().unwrap(), vec!["/one"]);
    // Two sequential keep-alive requests on one connection still work.
    seen.0.lock().unwrap().clear();
    let mut s = TcpStream::connect(tap.addr).await.unwrap();
    for path in ["/first", "/second"] {
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut tmp = [0u8; 1024];
        while !got.ends_with(b"{\"ok\":true}") {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut tmp))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed after {path}");
            got.extend_from_slice(&tmp[..n]);
        }
    }
    assert_eq!(*seen.0.lock().unwrap(), vec!["/first", "/second"]);
    println!(
        "smuggling vectors ({}):\n  {}",
        vectors.len(),
        report.join("\n  ")
    );
}
