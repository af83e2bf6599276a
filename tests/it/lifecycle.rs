//! tokentap's life as a process under traffic: a config reload by SIGHUP
//! (valid, then invalid) while 50 streams run, and SIGTERM while 100 streams
//! run — `/readyz` 503 at once, streams that end within the grace complete,
//! the process exits within the bound.

use crate::support::*;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_net::client;
use tokentap_sim::Profile;

struct Proc {
    child: Child,
    tap: SocketAddr,
    admin: SocketAddr,
    config: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

fn yaml(tap: SocketAddr, admin: SocketAddr, upstream: SocketAddr, server: &str) -> String {
    format!(
        "admin:\n  listen: {admin}\nserver:\n{server}taps:\n  - name: p\n    boundary: engine\n    listen: {tap}\n    upstream: http://{upstream}\n"
    )
}

async fn start(upstream: SocketAddr, server: &str) -> Proc {
    let (tap, admin) = (free_addr(), free_addr());
    let config = std::env::temp_dir().join(format!(
        "tokentap-life-{}-{}.yaml",
        std::process::id(),
        tap.port()
    ));
    std::fs::write(&config, yaml(tap, admin, upstream, server)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["run", "-c"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc {
        child,
        tap,
        admin,
        config,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready(p.admin).await {
        assert!(Instant::now() < deadline, "tokentap did not become ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p
}

async fn ready(admin: SocketAddr) -> bool {
    matches!(client::send(admin, "GET", "/readyz", &[], b"").await, Ok(r) if r.status == 200)
}

fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn scrape_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A streamed chat request: its model and whether it ended as it should.
async fn stream_once(tap: SocketAddr) -> Result<String, String> {
    let r = client::send(tap, "POST", "/v1/chat/completions", &[], &chat(true, true))
        .await
        .map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&r.body).into_owned();
    if r.status != 200 || !r.complete || !body.ends_with("data: [DONE]\n\n") {
        return Err(format!(
            "status {} complete {}: {body:.200}",
            r.status, r.complete
        ));
    }
    let model = body
        .split("\"model\":\"")
        .nth(1)
        .and_then(|m| m.split('"').next())
        .unwrap_or_default()
        .to_owned();
    Ok(model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reload_under_50_streams_applies_a_valid_change_and_rejects_an_invalid_one() {
    let _g = serial().await;
    let profile = |model: &str| Profile {
        model: model.into(),
        ttft_ms: 20.0,
        itl_ms: 10.0,
        output_tokens: 30,
        ..Profile::default()
    };
    let (a, b) = (sim(profile("engine-a")), sim(profile("engine-b")));
    let p = start(a.addr, "  grace_period_seconds: 1\n").await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let served = Arc::new(std::sync::Mutex::new(Vec::<(Instant, String)>::new()));
    let mut clients = Vec::new();
    for _ in 0..50 {
        let (stop, failures, served, tap) = (stop.clone(), failures.clone(), served.clone(), p.tap);
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                match stream_once(tap).await {
                    Ok(m) => served.lock().unwrap().push((started, m)),
                    Err(e) => failures.lock().unwrap().push(e),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // A valid change: the upstream moves to engine B.
    std::fs::write(
        &p.config,
        yaml(p.tap, p.admin, b.addr, "  grace_period_seconds: 1\n"),
    )
    .unwrap();
    signal(&p, "-HUP");
    let applied_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // An invalid one: kept out, B stays.
    std::fs::write(&p.config, "taps: [ { name: p, bogus: 1 } ]\n").unwrap();
    signal(&p, "-HUP");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    let served = served.lock().unwrap().len();
    // Which engine served what, from the simulators' own ground truth.
    let (at_a, at_b) = (a.truth.all(), b.truth.all());
    let late_at_a = at_a
        .iter()
        .filter(|t| t.received > applied_at + Duration::from_millis(200))
        .count();
    assert_eq!(late_at_a, 0, "requests after the reload went to engine B");
    assert!(
        !at_a.is_empty() && at_b.len() > 50,
        "A {} B {}",
        at_a.len(),
        at_b.len()
    );
    assert_eq!(at_a.len() + at_b.len(), served);
    let text = String::from_utf8(
        client::send(p.admin, "GET", "/metrics", &[], b"")
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(
        scrape_value(&text, "tokentap_config_reloads_total{result=\"applied\"}"),
        1.0
    );
    assert_eq!(
        scrape_value(&text, "tokentap_config_reloads_total{result=\"rejected\"}"),
        1.0
    );
    assert_eq!(scrape_value(&text, "tokentap_config_restart_pending"), 0.0);
    println!(
        "reload under 50 streams: {} requests, 0 failed ({} on A, {} on B after the switch)",
        served,
        at_a.len(),
        at_b.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_100_streams_drains_them_and_exits_within_the_bound() {
    let _g = serial().await;
    // Streams of about 1.5 s; the grace is 4 s.
    let up = sim(Profile {
        ttft_ms: 50.0,
        itl_ms: 50.0,
        output_tokens: 30,
        ..Profile::default()
    });
    let p = start(
        up.addr,
        "  drain_notice_seconds: 0.5\n  grace_period_seconds: 4\n  shutdown_timeout_seconds: 2\n",
    )
    .await;
    let done = Arc::new(AtomicUsize::new(0));
    let mut streams = Vec::new();
    for _ in 0..100 {
        let (tap, done) = (p.tap, done.clone());
        streams.push(tokio::spawn(async move {
            let r = stream_once(tap).await;
            done.fetch_add(1, Ordering::Relaxed);
            r
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut p = p;
    signal(&p, "-TERM");
    let term_at = Instant::now();
    // Not ready at once.
    let mut not_ready = None;
    while term_at.elapsed() < Duration::from_secs(1) {
        if let Ok(r) = client::send(p.admin, "GET", "/readyz", &[], b"").await {
            if r.status == 503 {
                not_ready = Some(term_at.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let not_ready = not_ready.expect("/readyz said 503 within 1 s of SIGTERM");
    let mut ok = 0;
    for s in streams {
        match s.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => panic!("a stream within the grace was cut: {e}"),
        }
    }
    // After the notice the listeners are closed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        tokio::net::TcpStream::connect(p.tap).await.is_err(),
        "the tap still accepts after the drain notice"
    );
    let bound = Duration::from_secs_f64(0.5 + 4.0 + 2.0 + 1.0);
    let exited = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break (term_at.elapsed(), status);
        }
        assert!(
            term_at.elapsed() < bound + Duration::from_secs(3),
            "no exit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "SIGTERM with 100 streams: /readyz 503 after {:?}, {ok} of 100 complete, exit after {:?} ({})",
        not_ready, exited.0, exited.1
    );
    assert_eq!(ok, 100);
    assert!(exited.0 <= bound, "exit after {:?}", exited.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_config_file_reloads_when_its_content_changes() {
    let _g = serial().await;
    let quick = Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 3,
        ..Profile::default()
    };
    let (a, b) = (sim(quick.clone()), sim(quick));
    let server = "  watch_config_seconds: 0.2\n";
    let p = start(a.addr, server).await;
    stream_once(p.tap).await.unwrap();
    // Replaced the way a ConfigMap is: a new file renamed over the old one.
    let next = p.config.with_extension("next");
    std::fs::write(&next, yaml(p.tap, p.admin, b.addr, server)).unwrap();
    std::fs::rename(&next, &p.config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.truth.all().is_empty() {
        assert!(Instant::now() < deadline, "the change was never picked up");
        stream_once(p.tap).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = a.truth.all().len();
    for _ in 0..5 {
        stream_once(p.tap).await.unwrap();
    }
    assert_eq!(
        a.truth.all().len(),
        before,
        "once switched, everything goes to B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_is_json_lines_sampled_as_configured() {
    let _g = serial().await;
    let up = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 3,
        ..Profile::default()
    });
    let (all, some, admin) = (free_addr(), free_addr(), free_addr());
    let yaml = format!(
        "admin:\n  listen: {admin}\ntaps:\n  - name: all\n    boundary: engine\n    listen: {all}\n    upstream: http://{u}\n    access_log:\n      sample: 1\n  - name: some\n    boundary: engine\n    listen: {some}\n    upstream: http://{u}\n    access_log:\n      sample: 0.25\n",
        u = up.addr
    );
    let config = std::env::temp_dir().join(format!("tokentap-access-{}.yaml", std::process::id()));
    std::fs::write(&config, yaml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["--log-format", "json", "run", "-c"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready(admin).await {
        assert!(Instant::now() < deadline, "not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..400 {
        let tap = if i < 20 { all } else { some };
        let id = format!("acc-{i}");
        let r = client::send(
            tap,
            "POST",
            "/v1/chat/completions?key=secret",
            &[("x-request-id", &id)],
            &chat(true, true),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let _ = std::fs::remove_file(&config);
    let text = reader.join().unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "tokentap::access")
        .collect();
    let of = |tap: &str| lines.iter().filter(|v| v["tap"] == tap).count();
    assert_eq!(of("all"), 20, "every request of a fully sampled tap");
    let sampled = of("some");
    // 380 requests at 0.25: 95 expected, sd ≈ 8.4.
    assert!(
        (55..=135).contains(&sampled),
        "{sampled} of 380 sampled at 0.25"
    );
    let first = lines.iter().find(|v| v["tap"] == "all").unwrap();
    for k in [
        "boundary",
        "model",
        "status",
        "outcome",
        "ttfb_ms",
        "ttft_ms",
        "e2e_ms",
        "output_tokens",
        "request_id",
    ] {
        assert!(!first[k].is_null(), "{k} in {first}");
    }
    assert_eq!(first["outcome"], "ok");
    assert!(!text.contains("secret"), "the query string is never logged");
    println!("access log: 20 of 20 and {sampled} of 380 at 0.25; {first}");
}
