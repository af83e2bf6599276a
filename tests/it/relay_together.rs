//! What the upstream sent together reaches the client together, and what
//! it sent apart stays apart (pingora-proxy patch 0003, pingora-core patch
//! 0002): a response head that came with its first event leaves in one
//! segment, as do the last events and the end of a stream that came in one
//! write, and a non-streamed answer larger than pingora's write buffer; a
//! head that came alone is not held back for its first event, nor the
//! first part of a `Content-Length` body for the rest. Against raw
//! upstreams that write exactly what each test needs, counting the client
//! socket's data segments (`tcpi_data_segs_in`).

use crate::relay::{client_reads, connect, content_length, decode_chunked, head_end, read_until};
use crate::support::*;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub(crate) const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
pub(crate) const FIRST: &[u8] =
    b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
pub(crate) const SECOND: &[u8] =
    b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n";
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

pub(crate) fn chunk(data: &[u8]) -> Vec<u8> {
    [format!("{:x}\r\n", data.len()).as_bytes(), data, b"\r\n"].concat()
}

/// How the upstream writes its answer.
#[derive(Clone, Copy, PartialEq)]
enum Writes {
    /// The head with the first event; then the second event, `[DONE]` and
    /// the end, each its own write 100 ms after the last.
    HeadWithFirst,
    /// The head alone; the first event 300 ms later; the rest as above.
    HeadAlone,
    /// The head alone; 100 ms later the first and second events, `[DONE]`
    /// and the end in one write.
    TailTogether,
}

/// An SSE upstream writing as `how` says; `first_sent` is set just before
/// the first event is written.
async fn sse_upstream(how: Writes, first_sent: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let first_sent = first_sent.clone();
            tokio::spawn(async move {
                if !read_request(&mut s).await {
                    return;
                }
                let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
                match how {
                    Writes::HeadWithFirst => {
                        first_sent.store(true, Ordering::SeqCst);
                        let _ = s.write_all(&[SSE_HEAD, &chunk(FIRST)].concat()).await;
                    }
                    Writes::HeadAlone => {
                        let _ = s.write_all(SSE_HEAD).await;
                        pause(300).await;
                        first_sent.store(true, Ordering::SeqCst);
                        let _ = s.write_all(&chunk(FIRST)).await;
                    }
                    Writes::TailTogether => {
                        let _ = s.write_all(SSE_HEAD).await;
                        pause(100).await;
                        first_sent.store(true, Ordering::SeqCst);
                        let tail = [
                            chunk(FIRST),
                            chunk(SECOND),
                            chunk(DONE),
                            b"0\r\n\r\n".to_vec(),
                        ];
                        let _ = s.write_all(&tail.concat()).await;
                    }
                }
                if how != Writes::TailTogether {
                    for piece in [chunk(SECOND), chunk(DONE), b"0\r\n\r\n".to_vec()] {
                        pause(100).await;
                        let _ = s.write_all(&piece).await;
                    }
                }
                let mut rest = [0u8; 1024];
                while matches!(s.read(&mut rest).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// Reads one request with a Content-Length body; false if the client left
/// (or went quiet for 5 s: `read_until`).
pub(crate) async fn read_request(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    read_until(s, &mut buf, |b| {
        head_end(b).is_some_and(|h| {
            b.len() >= h + content_length(&String::from_utf8_lossy(&b[..h]).to_lowercase())
        })
    })
    .await
}

fn segments_in(c: &TcpStream) -> u32 {
    pingora::protocols::l4::ext::get_tcp_info(c.as_raw_fd())
        .unwrap()
        .tcpi_data_segs_in
}

/// What the client saw of one streamed request through a tap.
struct Seen {
    /// Data segments when the head was in, and when the first event was.
    at_head: u32,
    at_first: u32,
    /// Data segments at the end of the stream.
    at_end: u32,
    /// The upstream had sent its first event when the client had the head.
    first_sent_at_head: bool,
    bytes: Vec<u8>,
}

async fn stream_through(how: Writes) -> Seen {
    let first_sent = Arc::new(AtomicBool::new(false));
    let up = sse_upstream(how, first_sent.clone()).await;
    let tap = Tap::start(&format!("http://{up}"), "");
    let body = chat(true, false);
    let mut c = connect(tap.addr).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(&[head.as_bytes(), &body].concat())
        .await
        .unwrap();
    let mut bytes = Vec::new();
    let has = |what: &'static [u8]| move |b: &[u8]| b.windows(what.len()).any(|w| w == what);
    client_reads(
        &mut c,
        &mut bytes,
        |b| head_end(b).is_some(),
        "no response head",
    )
    .await;
    let first_sent_at_head = first_sent.load(Ordering::SeqCst);
    let at_head = segments_in(&c);
    client_reads(&mut c, &mut bytes, has(FIRST), "no first event").await;
    let at_first = segments_in(&c);
    client_reads(
        &mut c,
        &mut bytes,
        |b| b.ends_with(b"0\r\n\r\n"),
        "no end of the stream",
    )
    .await;
    Seen {
        at_head,
        at_first,
        at_end: segments_in(&c),
        first_sent_at_head,
        bytes,
    }
}

fn body_of(seen: &Seen) -> Vec<u8> {
    let text = String::from_utf8_lossy(&seen.bytes);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    decode_chunked(&seen.bytes[head_end(&seen.bytes).unwrap()..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_head_that_came_with_its_first_event_reaches_the_client_in_one_segment() {
    let _g = serial().await;
    let seen = stream_through(Writes::HeadWithFirst).await;
    assert_eq!(
        body_of(&seen),
        [FIRST, SECOND, DONE].concat(),
        "the body, byte for byte"
    );
    // Head and first event in one segment (one write for what came
    // together); published pingora flushes the head alone: two.
    assert_eq!(
        seen.at_first, 1,
        "segments with the head and the first event"
    );
    // What came apart stays apart: the second event, [DONE], the end.
    assert_eq!(seen.at_end, 4, "segments of the whole stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_head_without_its_first_event_is_not_held_back() {
    let _g = serial().await;
    let seen = stream_through(Writes::HeadAlone).await;
    // The client had the whole head before the upstream sent any event:
    // the head was not kept waiting for one.
    assert!(
        !seen.first_sent_at_head,
        "the head waited for the first event"
    );
    assert_eq!(seen.at_head, 1);
    assert_eq!(body_of(&seen), [FIRST, SECOND, DONE].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_the_end_that_came_in_one_write_reach_the_client_in_one_segment() {
    let _g = serial().await;
    let seen = stream_through(Writes::TailTogether).await;
    assert_eq!(
        body_of(&seen),
        [FIRST, SECOND, DONE].concat(),
        "the body, byte for byte"
    );
    // The head alone, then the three events and the terminator that came in
    // one upstream write as one segment; written piece by piece (one send
    // each, as the direct relay did before), four.
    assert_eq!(
        (seen.at_head, seen.at_end),
        (1, 2),
        "segments at the head and at the end"
    );
}

/// A JSON answer of `len` bytes (`{"pad":"xxx…"}`).
fn json_body(len: usize) -> Vec<u8> {
    let pad = "x".repeat(len - 10);
    format!("{{\"pad\":\"{pad}\"}}").into_bytes()
}

/// A non-streamed upstream: the head with `Content-Length` and the first
/// `first` bytes of a `len`-byte JSON body in one write, the rest
/// `pause_ms` later (when any is left); `rest_sent` is set just before.
async fn json_upstream(
    len: usize,
    first: usize,
    pause_ms: u64,
    rest_sent: Arc<AtomicBool>,
) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let rest_sent = rest_sent.clone();
            tokio::spawn(async move {
                if !read_request(&mut s).await {
                    return;
                }
                let body = json_body(len);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
                );
                let (now, later) = body.split_at(first);
                let _ = s.write_all(&[head.as_bytes(), now].concat()).await;
                if !later.is_empty() {
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    rest_sent.store(true, Ordering::SeqCst);
                    let _ = s.write_all(later).await;
                }
                let mut rest = [0u8; 1024];
                while matches!(s.read(&mut rest).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// A non-streamed request through a tap in front of `up`: the client's
/// bytes once it has the first `until` body bytes, whether the upstream
/// had sent the rest by then, and the data segments it took.
async fn json_through(
    up: SocketAddr,
    until: usize,
    rest_sent: &AtomicBool,
) -> (Vec<u8>, bool, u32) {
    let tap = Tap::start(&format!("http://{up}"), "");
    let body = chat(false, false);
    let mut c = connect(tap.addr).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(&[head.as_bytes(), &body].concat())
        .await
        .unwrap();
    let mut bytes = Vec::new();
    client_reads(
        &mut c,
        &mut bytes,
        |b| head_end(b).is_some_and(|h| b.len() >= h + until),
        "not the body's first bytes",
    )
    .await;
    (bytes, rest_sent.load(Ordering::SeqCst), segments_in(&c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streamed_answer_larger_than_the_write_buffer_reaches_the_client_in_one_segment() {
    let _g = serial().await;
    let rest_sent = Arc::new(AtomicBool::new(false));
    // Head and a 6,000-byte body in one upstream write: more than
    // pingora's 1,460-byte write buffer holds.
    let up = json_upstream(6_000, 6_000, 0, rest_sent.clone()).await;
    let (bytes, _, segments) = json_through(up, 6_000, &rest_sent).await;
    assert_eq!(
        &bytes[head_end(&bytes).unwrap()..],
        &json_body(6_000)[..],
        "the body, byte for byte"
    );
    // One write for the batch; published pingora writes the head, then
    // the body: two.
    assert_eq!(segments, 1, "segments of the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_part_of_a_content_length_body_is_not_held_for_the_rest() {
    let _g = serial().await;
    let rest_sent = Arc::new(AtomicBool::new(false));
    // The head and the first 100 bytes of a 1,000-byte body; the rest
    // 300 ms later.
    let up = json_upstream(1_000, 100, 300, rest_sent.clone()).await;
    let (bytes, rest_was_sent, _) = json_through(up, 100, &rest_sent).await;
    // Published pingora keeps a head with `Content-Length` and the body
    // before its end in its write buffer until the body is complete.
    assert!(
        !rest_was_sent,
        "the client saw the first part only after the upstream sent the rest"
    );
    assert_eq!(
        &bytes[head_end(&bytes).unwrap()..][..100],
        &json_body(1_000)[..100]
    );
}
