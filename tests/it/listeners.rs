//! Every listener that is not a tap has a tap's limits: 20 connections
//! trickling a request head one byte at a time are cut at the head
//! deadline on the tap process's admin listener, the joiner's admin
//! listener and its OTLP/HTTP and OTLP/gRPC receivers, and counted; a
//! normal request still gets through meanwhile.

use crate::support::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokentap_join::config::JoinConfig;
use tokentap_join::Joiner;
use tokentap_sim::Profile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TRICKLERS: usize = 20;

/// Opens a connection and sends `head` one byte every 100 ms; returns how
/// long the listener let it live (until EOF or an error).
async fn trickle(addr: SocketAddr, head: &'static [u8]) -> Duration {
    let started = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 256];
    // What the server says first (an HTTP/2 server's SETTINGS) is read
    // and ignored; the head's next byte goes every 100 ms, in order.
    let mut next = head.iter().cycle();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while started.elapsed() < Duration::from_secs(30) {
        tokio::select! {
            r = s.read(&mut buf) => {
                if matches!(r, Ok(0) | Err(_)) {
                    return started.elapsed();
                }
            }
            _ = tick.tick() => {
                let b = next.next().copied().unwrap_or(b'x');
                if s.write_all(&[b]).await.is_err() {
                    return started.elapsed();
                }
            }
        }
    }
    started.elapsed()
}

fn refused(scrape: &str, listener: &str, reason: &str) -> f64 {
    let needle =
        format!("tokentap_listener_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_heads_are_cut_at_the_deadline_on_every_listener() {
    let _g = serial().await;
    let behind = sim(Profile::default());
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    let cfg = JoinConfig::from_yaml(
        "receiver:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  request_header_seconds: 2\nadmin:\n  listen: 127.0.0.1:0\n  request_header_seconds: 2\n",
    )
    .unwrap();
    let j = Joiner::start(&cfg, Vec::new()).unwrap();
    const HTTP_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nhost: x\r\n";
    const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let listeners = [
        ("the tap's admin", tap.admin, HTTP_HEAD),
        ("the joiner's admin", j.admin, HTTP_HEAD),
        ("the joiner's OTLP/HTTP", j.http, HTTP_HEAD),
        ("the joiner's OTLP/gRPC", j.grpc, H2_PREFACE),
    ];
    let mut tasks = Vec::new();
    for (name, addr, head) in listeners {
        for _ in 0..TRICKLERS {
            tasks.push((name, tokio::spawn(trickle(addr, head))));
        }
    }
    // Meanwhile a normal scrape of each admin listener is answered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for admin in [tap.admin, j.admin] {
        let r = tokentap_net::client::send(admin, "GET", "/metrics", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }
    let mut lived: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for (name, t) in tasks {
        lived
            .entry(name)
            .or_default()
            .push(t.await.unwrap().as_secs_f64());
    }
    for (name, l) in &lived {
        let max = l.iter().cloned().fold(0.0, f64::max);
        println!(
            "{name}: {} trickling heads cut after {:.2}-{:.2} s (deadline 2 s)",
            l.len(),
            l.iter().cloned().fold(f64::MAX, f64::min),
            max
        );
        assert!(max < 4.0, "{name}: a trickling head lived {max:.1} s");
    }
    let joiner = String::from_utf8(j.registry.encode()).unwrap();
    for listener in ["admin", "otlp_http", "otlp_grpc"] {
        assert_eq!(
            refused(&joiner, listener, "header_timeout"),
            TRICKLERS as f64,
            "{listener}"
        );
    }
    assert_eq!(
        refused(&tap.scrape(), "admin", "header_timeout"),
        TRICKLERS as f64
    );
}
