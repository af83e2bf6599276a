//! A chunked stream's body goes to the client as the upstream framed it
//! (pingora-proxy 0009, `proxy::raw_body`): chunk extensions, a size line
//! split across reads and trailers arrive byte for byte, and the Meter
//! still sees every event; broken framing ends the stream before the bytes
//! that broke it; bytes past the body's end are not forwarded and keep
//! the upstream connection out of the pool. Against a raw upstream that
//! writes exactly the pieces each test gives it, one write each.

use crate::relay::{client_reads, connect, head_end};
use crate::relay_together::{chunk, read_request, DONE, FIRST, SECOND, SSE_HEAD};
use crate::support::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::chunked::ChunkedScan;
use tokentap_core::record::{ErrorType, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers every request on a connection with `writes`,
/// one write each, 30 ms apart; counts the connections it accepted.
async fn scripted_upstream(writes: Vec<Vec<u8>>) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            s.set_nodelay(true).unwrap();
            let writes = writes.clone();
            tokio::spawn(async move {
                while read_request(&mut s).await {
                    for w in &writes {
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        if s.write_all(w).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// Sends one streamed chat request with request id `id` on `c`.
async fn send(c: &mut TcpStream, id: &str) {
    let body = chat(true, false);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nx-request-id: {id}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(&[head.as_bytes(), &body].concat())
        .await
        .unwrap();
}

/// Where a chunked body that starts at `body[0]` ends, if it does.
fn chunked_end(body: &[u8]) -> Option<usize> {
    let mut scan = ChunkedScan::default();
    let used = scan.feed(body, |_| {}).ok()?;
    scan.is_done().then_some(used)
}

/// The response body bytes of one answer on `c`, read to the end of the
/// chunked body.
async fn answer(c: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    client_reads(
        c,
        &mut seen,
        |b| head_end(b).is_some_and(|h| chunked_end(&b[h..]).is_some()),
        "no whole answer",
    )
    .await;
    let h = head_end(&seen).unwrap();
    let text = String::from_utf8_lossy(&seen[..h]).to_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("transfer-encoding: chunked"), "{text}");
    seen.split_off(h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reaches_the_client_framed_as_the_upstream_framed_it() {
    let _g = serial().await;
    let second = chunk(SECOND);
    let body = vec![
        // A chunk extension (pingora's own relay drops it).
        [
            format!("{:x};n=1\r\n", FIRST.len()).as_bytes(),
            FIRST,
            b"\r\n",
        ]
        .concat(),
        // A size line split across two writes.
        second[..2].to_vec(),
        second[2..].to_vec(),
        // The last event, the last chunk and a trailer together (pingora's
        // own relay drops the trailer).
        [chunk(DONE), b"0\r\nx-served-by: up\r\n\r\n".to_vec()].concat(),
    ];
    let writes = [vec![SSE_HEAD.to_vec()], body.clone()].concat();
    let (up, _) = scripted_upstream(writes).await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let mut c = connect(tap.addr).await;
    send(&mut c, "as-framed").await;
    assert_eq!(
        String::from_utf8_lossy(&answer(&mut c).await),
        String::from_utf8_lossy(&body.concat()),
        "the body as the upstream framed it"
    );
    let r = tap.records.wait("as-framed").await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!((r.token_events, r.done_seen), (2, true), "{r:?}");
    let payload = [FIRST, SECOND, DONE].concat().len() as u64;
    assert_eq!(r.response_body_bytes, payload, "payload bytes measured");
    assert_eq!(tap.events.of("as-framed").len(), 2, "token events observed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_framing_ends_the_stream_before_the_bytes_that_broke_it() {
    let _g = serial().await;
    let writes = vec![
        SSE_HEAD.to_vec(),
        chunk(FIRST),
        // Not a size line.
        b"zz\r\nnot a chunk\r\n".to_vec(),
        chunk(SECOND),
        b"0\r\n\r\n".to_vec(),
    ];
    let (up, _) = scripted_upstream(writes).await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let mut c = connect(tap.addr).await;
    send(&mut c, "broken").await;
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the client's connection was not closed");
    let h = head_end(&seen).expect("a response head");
    assert_eq!(
        String::from_utf8_lossy(&seen[h..]),
        String::from_utf8_lossy(&chunk(FIRST)),
        "what the client got of the body"
    );
    let r = tap.records.wait("broken").await;
    assert_eq!(r.outcome, Outcome::UpstreamTruncated, "{r:?}");
    assert_eq!(r.error_type, Some(ErrorType::InvalidHttp), "{r:?}");
    assert_eq!(r.token_events, 1, "{r:?}");
}

/// Two streamed requests on one client connection, the upstream ending
/// each body with `past` after it in the same write: the upstream
/// connections it took.
async fn two_streams(past: &[u8]) -> usize {
    let writes = vec![
        SSE_HEAD.to_vec(),
        chunk(FIRST),
        [chunk(DONE), b"0\r\n\r\n".to_vec(), past.to_vec()].concat(),
    ];
    let (up, accepted) = scripted_upstream(writes).await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let mut c = connect(tap.addr).await;
    for id in ["two-1", "two-2"] {
        send(&mut c, id).await;
        assert_eq!(
            answer(&mut c).await,
            [chunk(FIRST), chunk(DONE), b"0\r\n\r\n".to_vec()].concat(),
            "{id}: the body to its end and nothing more"
        );
        let r = tap.records.wait(id).await;
        assert_eq!(r.outcome, Outcome::Ok, "{id}: {r:?}");
        assert_eq!(r.token_events, 1, "{id}: {r:?}");
    }
    accepted.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_relayed_as_framed_leaves_its_upstream_connection_pooled() {
    let _g = serial().await;
    assert_eq!(two_streams(b"").await, 1, "upstream connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_past_the_body_are_not_forwarded_and_the_connection_is_not_pooled() {
    let _g = serial().await;
    // The upstream's first connection, with bytes left past the body, is
    // not used again: the second request takes a new one.
    assert_eq!(
        two_streams(b"HTTP/1.1 200 OK\r\n").await,
        2,
        "upstream connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_holds_the_upstream_back() {
    let _g = serial().await;
    // A 256 MiB chunked body in 64 KiB chunks, written as fast as the
    // upstream's socket takes it; `written` counts what it took.
    const PIECE: usize = 64 * 1024;
    const PIECES: usize = 4096;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        if !read_request(&mut s).await {
            return;
        }
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        s.write_all(head).await.unwrap();
        let piece = chunk(&vec![b'x'; PIECE]);
        for _ in 0..PIECES {
            if s.write_all(&piece).await.is_err() {
                return;
            }
            counter.fetch_add(piece.len(), Ordering::SeqCst);
        }
        let _ = s.write_all(b"0\r\n\r\n").await;
    });
    let tap = Tap::start(&format!("http://{up}"), "");
    let mut c = connect(tap.addr).await;
    send(&mut c, "slow-reader").await;
    let mut seen = Vec::new();
    client_reads(&mut c, &mut seen, |b| head_end(b).is_some(), "no head").await;
    // The client reads nothing for a second: what the upstream could write
    // meanwhile is what the sockets' buffers hold (loopback autotuning:
    // tens of MiB at most), not the body.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = written.load(Ordering::SeqCst);
    eprintln!(
        "raw_body: the upstream wrote {} MiB while the client read nothing",
        held >> 20
    );
    assert!(
        held < 96 << 20,
        "the upstream wrote {} MiB of 256 while the client read nothing",
        held >> 20
    );
    // Then it reads on, and gets the whole body, framed as sent.
    let mut scan = ChunkedScan::default();
    let mut payload = 0usize;
    let mut body = seen.split_off(head_end(&seen).unwrap());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        scan.feed(&body, |p| payload += p.len()).unwrap();
        if scan.is_done() {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
            .await
            .expect("the body stalled")
            .unwrap();
        assert!(n > 0, "closed after {payload} payload bytes");
        body = buf[..n].to_vec();
    }
    assert_eq!(payload, PIECE * PIECES);
    let r = tap.records.wait("slow-reader").await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.response_body_bytes, (PIECE * PIECES) as u64, "{r:?}");
}
