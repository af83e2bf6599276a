//! A wall clock that steps. A tap times each streamed piece at the
//! kernel's receive stamp, a wall-clock time mapped onto the monotonic
//! clock by its age against the wall clock read after the read. Here the
//! tap process's wall clock (libfaketime, `LD_PRELOAD`; the kernel's
//! stamps and the monotonic clock are untouched) steps forward by a second
//! mid-stream, back, and back by another second: the stamps that contradict
//! the monotonic clock are replaced by read times and counted, and TTFT
//! and the inter-token gaps come out as with a steady clock — never 0,
//! never negative.

use crate::support::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokentap_sim::Profile;

/// libfaketime's preload library, where Debian's `faketime` puts it.
fn libfaketime() -> PathBuf {
    for dir in [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
        "/usr/lib/faketime",
    ] {
        let p = Path::new(dir).join("libfaketime.so.1");
        if p.exists() {
            return p;
        }
    }
    panic!("libfaketime is not installed (scripts/deps.sh installs Debian's faketime)");
}

fn sample(scrape: &str, prefix: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One streamed request through a tap whose wall clock follows `steps`
/// (offsets written to libfaketime's file at the given times after the
/// request starts); TTFT (s), mean inter-token gap (s), gaps of 1 ms or
/// less, and the fallbacks by reason.
async fn run(steps: &[(u64, &str)]) -> (f64, f64, f64, Vec<(String, f64)>) {
    let behind = sim(Profile {
        ttft_ms: 100.0,
        itl_ms: 50.0,
        output_tokens: 40,
        ..Profile::default()
    });
    let (tap, admin) = (free_addr(), free_addr());
    let scratch = scratch("clock");
    let offset = scratch.path().join("offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let cfg = scratch.path().join("tokentap.yaml");
    std::fs::write(
        &cfg,
        format!(
            "admin:\n  listen: {admin}\ntaps:\n  - name: c\n    boundary: engine\n    listen: {tap}\n    upstream: http://{}\n",
            behind.addr
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["run", "-c"])
        .arg(&cfg)
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    crate::process::wait_ready(admin, "the tap").await;
    // Warm: the first stream of a fresh process may miss its first stamps
    // (the kernel turns stamping on asynchronously).
    let warm = post(
        tap,
        &[("content-type", "application/json")],
        &chat(true, true),
    )
    .await;
    assert!(warm.complete);
    let base = tokentap_net::client::send(admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    let base = String::from_utf8_lossy(&base.body).into_owned();
    let stepper = {
        let steps: Vec<(u64, String)> = steps.iter().map(|(t, s)| (*t, s.to_string())).collect();
        let offset = offset.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            for (at, value) in steps {
                let wait = Duration::from_millis(at).saturating_sub(started.elapsed());
                tokio::time::sleep(wait).await;
                let mut f = std::fs::File::create(&offset).unwrap();
                writeln!(f, "{value}").unwrap();
            }
        })
    };
    let r = post(
        tap,
        &[("content-type", "application/json")],
        &chat(true, true),
    )
    .await;
    assert!(r.complete);
    stepper.await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = tokentap_net::client::send(admin, "GET", "/metrics", &[], b"")
        .await
        .unwrap();
    let after = String::from_utf8_lossy(&after.body).into_owned();
    let delta = |p: &str| sample(&after, p) - sample(&base, p);
    let ttft = delta("gen_ai_server_time_to_first_token_seconds_sum");
    let itl = delta("tokentap_inter_token_latency_seconds_sum")
        / delta("tokentap_inter_token_latency_seconds_count");
    let small = sample(&after, "tokentap_inter_token_latency_seconds_bucket{boundary=\"engine\",model=\"sim-model\",operation=\"chat\",tap=\"c\",le=\"0.001\"}")
        - sample(&base, "tokentap_inter_token_latency_seconds_bucket{boundary=\"engine\",model=\"sim-model\",operation=\"chat\",tap=\"c\",le=\"0.001\"}");
    let fallbacks = ["earlier", "later", "too_old"]
        .iter()
        .map(|r| {
            (
                r.to_string(),
                delta(&format!(
                    "tokentap_receive_stamp_fallbacks_total{{boundary=\"engine\",reason=\"{r}\",tap=\"c\"}}"
                )),
            )
        })
        .collect();
    (ttft, itl, small, fallbacks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_stepped_mid_stream_leaves_ttft_and_gaps_as_with_a_steady_one() {
    let _g = serial().await;
    let (steady_ttft, steady_itl, steady_small, steady_fb) = run(&[]).await;
    // Forward a second 50 ms into the request (before its first token,
    // 100 ms), back to true at 0.8 s, a second behind at 1.3 s (the stream
    // lasts ~2.1 s).
    let (ttft, itl, small, fb) = run(&[(50, "+1s"), (800, "+0"), (1300, "-1s")]).await;
    println!(
        "steady clock: TTFT {:.2} ms, mean gap {:.2} ms, fallbacks {steady_fb:?}; stepped +1 s, back, -1 s mid-stream: TTFT {:.2} ms, mean gap {:.2} ms, fallbacks {fb:?}",
        steady_ttft * 1e3,
        steady_itl * 1e3,
        ttft * 1e3,
        itl * 1e3
    );
    assert!(steady_fb.iter().all(|(_, n)| *n == 0.0), "{steady_fb:?}");
    let count = |r: &str| fb.iter().find(|(k, _)| k == r).map_or(0.0, |(_, n)| *n);
    assert!(count("earlier") >= 3.0, "the forward step is seen: {fb:?}");
    assert!(count("later") >= 3.0, "the backward step is seen: {fb:?}");
    assert!(
        (ttft - steady_ttft).abs() < 0.003,
        "TTFT {ttft} vs {steady_ttft}"
    );
    assert!(
        (itl - steady_itl).abs() < 0.001,
        "mean gap {itl} vs {steady_itl}"
    );
    assert_eq!(small, steady_small, "no gap became 0");
    assert!(ttft > 0.09 && itl > 0.045);
}
