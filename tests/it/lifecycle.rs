//! tokentap's life as a process under traffic: a config reload by SIGHUP
//! (valid, then invalid) while 50 streams run, and SIGTERM while 100 streams
//! run — `/readyz` 503 at once, streams that end within the grace complete,
//! the process exits within the bound.

use crate::collector::{counter_total, Collector, Mode};
use crate::process::{spawn, wait_ready, Proc};
use crate::support::*;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_net::client;
use tokentap_sim::Profile;

fn yaml(tap: SocketAddr, admin: SocketAddr, upstream: SocketAddr, server: &str) -> String {
    yaml_with(tap, admin, upstream, server, "", "")
}

/// With `top` YAML before `taps:` and `extra` YAML in the tap's entry.
fn yaml_with(
    tap: SocketAddr,
    admin: SocketAddr,
    upstream: SocketAddr,
    server: &str,
    top: &str,
    extra: &str,
) -> String {
    format!(
        "admin:\n  listen: {admin}\nserver:\n{server}{top}taps:\n  - name: p\n    boundary: engine\n    listen: {tap}\n    upstream: http://{upstream}\n{extra}"
    )
}

async fn start(upstream: SocketAddr, server: &str) -> Proc {
    start_with(upstream, server, "", "").await
}

async fn start_with(upstream: SocketAddr, server: &str, top: &str, extra: &str) -> Proc {
    spawn("life", |tap, admin| {
        yaml_with(tap, admin, upstream, server, top, extra)
    })
    .await
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

/// A process that exports spans and metrics to a test collector and keeps
/// a record log, so that a test can see what it flushed before exit.
struct Exporting {
    p: Proc,
    collector: Collector,
    log: PathBuf,
    _scratch: tempfile::TempDir,
}

async fn start_exporting(upstream: SocketAddr, server: &str) -> Exporting {
    let collector = Collector::start(Mode::Ok);
    let scratch = scratch("life");
    let log = scratch.path().join("records.jsonl");
    let top = format!(
        "otlp:\n  endpoint: http://{}\n  interval_seconds: 60\n  timeout_seconds: 2\n",
        collector.addr
    );
    let extra = format!("    record_log:\n      path: {}\n", log.display());
    let p = start_with(upstream, server, &top, &extra).await;
    Exporting {
        p,
        collector,
        log,
        _scratch: scratch,
    }
}

impl Exporting {
    fn log_lines(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

/// Waits for the process to exit; the time since `from`.
async fn exit_after(p: &mut Proc, from: Instant, limit: Duration) -> (Duration, i32) {
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            return (from.elapsed(), status.code().unwrap_or(-1));
        }
        assert!(from.elapsed() < limit, "no exit within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `/readyz` answers 503: how long after `from`.
async fn not_ready_after(admin: SocketAddr, from: Instant) -> Duration {
    while from.elapsed() < Duration::from_secs(1) {
        if let Ok(r) = client::send(admin, "GET", "/readyz", &[], b"").await {
            if r.status == 503 {
                return from.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("/readyz did not say 503 within 1 s of SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tap_exits_right_after_the_drain_notice() {
    let _g = serial().await;
    let up = sim(Profile::default());
    let mut e = start_exporting(up.addr, "").await;
    stream_once(e.p.tap).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    signal(&e.p, "-TERM");
    let term_at = Instant::now();
    let not_ready = not_ready_after(e.p.admin, term_at).await;
    let (exited, code) = exit_after(&mut e.p, term_at, Duration::from_secs(30)).await;
    println!("idle SIGTERM (1 s notice, 20 s grace): /readyz 503 after {not_ready:?}, exit {code} after {exited:?}");
    assert_eq!(code, 0);
    assert!(
        exited <= Duration::from_secs(2),
        "exit {exited:?} after SIGTERM: not within the notice (1 s) + 1 s"
    );
    assert_eq!(
        e.collector.spans().len(),
        1,
        "the request's span was flushed"
    );
    assert_eq!(
        e.log_lines(),
        1,
        "the request's record-log line was flushed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_100_streams_exits_right_after_the_last_one_ends() {
    let _g = serial().await;
    // Streams of about 3.5 s, the SIGTERM 0.3 s in: they end about 3.2 s
    // after it, well within the 20 s grace.
    let profile = Profile {
        ttft_ms: 50.0,
        itl_ms: 50.0,
        output_tokens: 70,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind,
        tap: _,
    } = twins(profile, "");
    let mut e = start_exporting(behind.addr, "  drain_notice_seconds: 0.5\n").await;
    let mut streams = Vec::new();
    for i in 0..100 {
        let tap = e.p.tap;
        streams.push(tokio::spawn(async move {
            let id = format!("s{i}");
            let r = client::send(
                tap,
                "POST",
                "/v1/chat/completions",
                &[("x-request-id", id.as_str())],
                &chat(true, true),
            )
            .await;
            (id, r, Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&e.p, "-TERM");
    let term_at = Instant::now();
    let not_ready = not_ready_after(e.p.admin, term_at).await;
    let mut bodies = std::collections::HashMap::new();
    let mut last_end = term_at;
    for s in streams {
        let (id, r, ended) = s.await.unwrap();
        let r = r.unwrap_or_else(|err| panic!("{id}: cut within the grace: {err}"));
        assert!(
            r.status == 200 && r.complete,
            "{id}: {} complete {}",
            r.status,
            r.complete
        );
        last_end = last_end.max(ended);
        bodies.insert(id, r.body);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let closed = tokio::net::TcpStream::connect(e.p.tap).await.is_err();
    let (exited, code) = exit_after(&mut e.p, term_at, Duration::from_secs(30)).await;
    let after_last = exited.saturating_sub(last_end - term_at);
    println!(
        "SIGTERM with 100 streams: /readyz 503 after {not_ready:?}, last stream ended {:?} after SIGTERM, exit {code} {after_last:?} after it",
        last_end - term_at
    );
    assert!(closed, "the tap still accepts after the drain notice");
    assert_eq!(code, 0);
    assert!(
        after_last <= Duration::from_secs(1),
        "exit {after_last:?} after the last stream ended"
    );
    // Byte-exact: the same requests, in the order the simulator numbered
    // them, sent to its twin direct, give the same bodies.
    let mut truth = behind.truth.all();
    truth.sort_by_key(|t| t.seq);
    for t in &truth {
        let id = t.request_id.clone().unwrap_or_default();
        let d = client::send(
            direct.addr,
            "POST",
            "/v1/chat/completions",
            &[
                ("x-request-id", id.as_str()),
                ("x-sim", "ttft-ms=0,itl-ms=0"),
            ],
            &chat(true, true),
        )
        .await
        .unwrap();
        assert!(d.body == bodies[&id], "{id}: the body differs from direct");
    }
    assert_eq!(truth.len(), 100);
    assert_eq!(
        e.collector.spans().len(),
        100,
        "every request's span was flushed"
    );
    assert_eq!(
        e.log_lines(),
        100,
        "every request's record-log line was flushed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_grace_is_cut_at_its_end_and_counted() {
    let _g = serial().await;
    let up = sim(Profile {
        ttft_ms: 10.0,
        itl_ms: 100.0,
        output_tokens: 100,
        ..Profile::default()
    });
    let mut e = start_exporting(
        up.addr,
        "  drain_notice_seconds: 0.2\n  grace_period_seconds: 1\n",
    )
    .await;
    // One short request completes before the signal: its span and line
    // must be flushed too.
    client::send(
        e.p.tap,
        "POST",
        "/v1/chat/completions",
        &[("x-sim", "output-tokens=2,itl-ms=1")],
        &chat(true, true),
    )
    .await
    .unwrap();
    let tap = e.p.tap;
    let long = tokio::spawn(async move {
        let r = client::send(tap, "POST", "/v1/chat/completions", &[], &chat(true, true)).await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&e.p, "-TERM");
    let term_at = Instant::now();
    let (r, cut_at) = long.await.unwrap();
    let cut = cut_at - term_at;
    let complete = r.map(|r| r.complete).unwrap_or(false);
    let (exited, code) = exit_after(&mut e.p, term_at, Duration::from_secs(10)).await;
    let cut_total = e
        .collector
        .latest_metrics()
        .iter()
        .find(|m| m.name == "tokentap.shutdown.cut")
        .and_then(counter_total);
    println!("a 10 s stream, 0.2 s notice, 1 s grace: cut {cut:?} after SIGTERM, exit {code} after {exited:?}, tokentap.shutdown.cut = {cut_total:?}");
    assert!(!complete, "the stream longer than the grace was cut");
    assert!(
        cut >= Duration::from_millis(1150) && cut <= Duration::from_millis(2000),
        "cut {cut:?} after SIGTERM, not at the end of notice + grace (1.2 s)"
    );
    assert!(exited <= cut + Duration::from_secs(1), "exit {exited:?}");
    assert_eq!(cut_total, Some(1.0), "the cut stream is counted");
    assert_eq!(
        e.collector.spans().len(),
        1,
        "the completed request's span was flushed"
    );
    assert_eq!(e.log_lines(), 1, "the completed request's line was flushed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_during_the_drain_stops_at_once() {
    let _g = serial().await;
    let up = sim(Profile {
        ttft_ms: 10.0,
        itl_ms: 100.0,
        output_tokens: 100,
        ..Profile::default()
    });
    for second in ["-TERM", "-INT"] {
        let mut p = start(up.addr, "  drain_notice_seconds: 0.2\n").await;
        let tap = p.tap;
        let long = tokio::spawn(async move {
            client::send(tap, "POST", "/v1/chat/completions", &[], &chat(true, true)).await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        signal(&p, "-TERM");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(p.child.try_wait().unwrap().is_none(), "draining a stream");
        signal(&p, second);
        let at = Instant::now();
        let (exited, code) = exit_after(&mut p, at, Duration::from_secs(5)).await;
        println!("SIGTERM, then {second} during the drain: exit {code} after {exited:?}");
        assert!(
            exited <= Duration::from_millis(300),
            "{second}: exit {exited:?}"
        );
        assert_ne!(code, 0);
        let _ = long.await;
    }
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
    let scratch = scratch("access");
    let config = scratch.path().join("tokentap.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["--log-format", "json", "run", "-c"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    wait_ready(admin, "tokentap").await;
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
