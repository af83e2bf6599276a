//! The benchmark's smoke variant (`tokentap bench --smoke`): direct and
//! tokentap, one short round, failing on pathologies only — and a negative
//! control showing the streaming cell does see merged events and a delay
//! plateau when a relay introduces them; the sweeps (S3, S5) and the
//! accuracy cell (S6) on small loads.

use crate::support::*;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokentap_sim::{Profile as SimProfile, SimArgs, Simulator};
use tokentap_tools::bench::cells::{self, Profile};
use tokentap_tools::bench::{accuracy, sweep, systems};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[test]
fn bench_smoke_finds_no_pathology_through_tokentap() {
    let _g = serial_blocking();
    let scratch = scratch("bench");
    let out = scratch.path();
    let run = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["bench", "--smoke", "--out"])
        .arg(out)
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
            std::fs::read_dir(out)
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
    let sim = numbered_sim();
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
    let sim = numbered_sim();
    let r = cells::s4(sim.addr, None, 4, Duration::from_millis(500)).await;
    // The simulator notes a request just after its last byte: wait for
    // the last ones (one was counted a moment before it, in one CI run).
    let served = sim
        .truth
        .wait_for_len(r.requests as usize + 4, Duration::from_secs(2))
        .await as u64;
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

fn numbered_sim() -> Arc<Simulator> {
    Arc::new(
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
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_sweep_sends_at_the_offered_rate_and_the_stream_cell_counts_every_event() {
    let _g = serial().await;
    let sim = numbered_sim();
    let r = sweep::s3(sim.addr, None, 400.0, Duration::from_secs(1)).await;
    println!(
        "S3 400/s for 1 s: {} answered, {:.0}/s, {} connections, lateness p99 {:.0} µs",
        r.requests, r.achieved, r.connections, r.lateness.p99
    );
    assert_eq!(r.errors, 0, "{r:?}");
    // Open loop: the count is the schedule's (400 ± the last tick), not
    // the server's pace.
    assert!((390..=401).contains(&r.requests), "{r:?}");
    assert_eq!(r.latency.n, r.requests);
    // The 20 warm-ups and every answered request, once all are noted.
    let before = sim
        .truth
        .wait_for_len(r.requests as usize + 20, Duration::from_secs(2))
        .await;
    let s = sweep::s5(sim.addr, None, sim.clone(), 32, "it-s5").await;
    println!(
        "S5 32 streams: {} completed, delay p99 {:.0} µs, {:.0} events/s",
        s.completed, s.delay.p99, s.events_per_s
    );
    assert!(s.delivered(), "{s:?}");
    assert_eq!(s.completed, 32);
    // Every token event matched the simulator's write of it.
    assert_eq!(s.delay.n, 32 * u64::from(sweep::PACED.events));
    let after = sim
        .truth
        .wait_for_len(before + 32, Duration::from_secs(2))
        .await;
    assert_eq!(after - before, 32);
}

/// S6 on a real tokentap with its record log: every stream recorded with
/// the simulator's event count; and the hostile variant is really hostile
/// (HAProxy's default buffering merges events at the client) while
/// tokentap's gaps stay on the simulator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accuracy_cell_matches_the_record_log_and_sees_a_coalescing_middlebox() {
    let _g = serial().await;
    let sim = numbered_sim();
    let scratch = scratch("it-s6");
    let dir = scratch.path();
    let log = dir.join("records.jsonl");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tokentap"));
    let tap = systems::start_recording_tokentap(sim.addr, dir, bin, false, &log).unwrap();
    let hap = systems::start_haproxy_defaults(tap.addr, dir, false)
        .expect("haproxy is installed by scripts/deps.sh");
    let mix = [(
        Profile {
            events: 30,
            every_ms: 10,
        },
        6,
        Duration::from_millis(10),
    )];
    let direct = accuracy::traffic(tap.addr, &sim, &mix, "it-s6-direct").await;
    let hostile = accuracy::traffic(hap.addr, &sim, &mix, "it-s6-hostile").await;
    let samples = accuracy::read_log(&log, 12, Duration::from_secs(10)).await;
    let a = accuracy::compare("direct", &direct, &samples);
    let b = accuracy::compare("hostile", &hostile, &samples);
    println!(
        "S6: direct: ITL error tap p50/p99 {:.0}/{:.0} µs, client {:.2} events/read; hostile: tap p50/p99 {:.0}/{:.0} µs, client ITL p50 {:.0} µs vs truth {:.0} µs, {:.2} events/read",
        a.itl_error_tap.p50,
        a.itl_error_tap.p99,
        a.client_events_per_read,
        b.itl_error_tap.p50,
        b.itl_error_tap.p99,
        b.itl_p50_client,
        b.itl_p50_truth,
        b.client_events_per_read
    );
    for r in [&a, &b] {
        assert_eq!((r.streams, r.failed), (6, 0), "{r:?}");
        assert_eq!(r.recorded, 6, "{r:?}");
        assert_eq!(r.counts_equal, 6, "{r:?}");
        assert_eq!(r.itl_error_tap.n, 6 * 29, "{r:?}");
    }
    assert!(a.client_events_per_read < 1.01, "{a:?}");
    // The middlebox merges events at the client ...
    assert!(b.client_events_per_read > 1.5, "{b:?}");
    // ... while tokentap's median gap stays the simulator's (a generous
    // guard: a tap fooled by the merging would see ~0).
    assert!((b.itl_p50_tap - b.itl_p50_truth).abs() < 2_000.0, "{b:?}");
}
