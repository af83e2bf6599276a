//! The benchmark's smoke variant (`tokentap bench --smoke`): direct and
//! tokentap, one short round, failing on pathologies only — and a negative
//! control showing the streaming cell does see merged events and a delay
//! plateau when a relay introduces them.

use crate::support::*;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokentap::bench::cells::{self, Profile};
use tokentap::sim::{Profile as SimProfile, SimArgs, Simulator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[test]
fn bench_smoke_finds_no_pathology_through_tokentap() {
    let _g = serial_blocking();
    let out = std::env::temp_dir().join(format!("tokentap-bench-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["bench", "--smoke", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&run.stdout);
    println!("{md}");
    assert!(
        run.status.success(),
        "{md}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(md.contains("No pathology"), "{md}");
    // Every streaming row was matched against the simulator and complete.
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::fs::read_dir(&out)
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path().join("results.json"))
                .find(|p| p.exists())
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    for cell in results["s2"].as_array().unwrap() {
        for row in cell[1].as_array().unwrap() {
            for round in row[1].as_array().unwrap() {
                assert!(round["streams"].as_u64().unwrap() > 0, "{row}");
                assert_eq!(round["matched"], round["streams"], "{row}");
                assert_eq!(round["tokens_lost"], 0, "{row}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// A relay that holds every upstream read for `hold` and writes two reads
/// at once (a coalescing proxy with a Nagle-like stall).
async fn bad_relay(upstream: SocketAddr, hold: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut up = TcpStream::connect(upstream).await.unwrap();
                let (mut cr, mut cw) = client.split();
                let (mut ur, mut uw) = up.split();
                let to_up = async {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 || uw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let to_client = async {
                    let mut buf = [0u8; 65536];
                    let mut held = Vec::new();
                    loop {
                        match tokio::time::timeout(hold, ur.read(&mut buf)).await {
                            Ok(Ok(0)) | Ok(Err(_)) => break,
                            Ok(Ok(n)) => held.extend_from_slice(&buf[..n]),
                            Err(_) => {}
                        }
                        if !held.is_empty() {
                            tokio::time::sleep(hold).await;
                            if cw.write_all(&held).await.is_err() {
                                break;
                            }
                            held.clear();
                        }
                    }
                    let _ = cw.write_all(&held).await;
                };
                tokio::join!(to_up, to_client);
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streaming_cell_sees_merged_events_and_a_plateau_when_they_happen() {
    let _g = serial().await;
    let sim = Arc::new(
        Simulator::spawn(&SimArgs {
            profile: SimProfile {
                ttft_ms: 0.0,
                itl_ms: 0.0,
                numbered: true,
                ..SimProfile::default()
            },
            ..SimArgs::default()
        })
        .unwrap(),
    );
    let p = Profile {
        events: 24,
        every_ms: 10,
    };
    let clean = cells::s2(sim.addr, None, sim.clone(), p, 1, 2, "neg-direct").await;
    let relay = bad_relay(sim.addr, Duration::from_millis(45)).await;
    let bad = cells::s2(relay, None, sim.clone(), p, 1, 2, "neg-relay").await;
    println!(
        "negative control: direct {:.2} events/read, delay p50 {:.0} µs; bad relay {:.2} events/read, delay p50 {:.0} µs",
        clean.events_per_read, clean.event_delay.p50, bad.events_per_read, bad.event_delay.p50
    );
    assert_eq!(clean.tokens_lost + clean.tokens_misordered, 0);
    assert!(clean.events_per_read < 1.01, "{clean:?}");
    assert!(bad.events_per_read > 1.5, "{bad:?}");
    assert!(bad.event_delay.p50 > 40_000.0, "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_loop_cell_counts_every_answered_request() {
    let _g = serial().await;
    let sim = Simulator::spawn(&SimArgs {
        profile: SimProfile {
            ttft_ms: 0.0,
            itl_ms: 0.0,
            numbered: true,
            ..SimProfile::default()
        },
        ..SimArgs::default()
    })
    .unwrap();
    let r = cells::s4(sim.addr, None, 4, Duration::from_millis(500)).await;
    let served = sim.truth.all().len() as u64;
    println!(
        "closed loop c=4 for 0.5 s: {} requests, {:.0}/s",
        r.requests, r.rps
    );
    assert_eq!(r.errors, 0);
    assert!(r.requests > 100, "{r:?}");
    // Every answered request was served (plus the 4 warm-ups).
    assert_eq!(served, r.requests + 4);
    assert!(r.latency.n == r.requests);
}
