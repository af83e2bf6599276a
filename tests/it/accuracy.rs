//! Measurement against ground truth: the simulator's send times and counts,
//! and responses recorded from real engines replayed with their timing.

use crate::support::*;
use base64::Engine;
use std::time::{Duration, Instant};
use tokentap_core::record::{Outcome, TokenSource};
use tokentap_net::client;
use tokentap_sim::Profile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOLERANCE: Duration = Duration::from_millis(1);
/// No timing error at all above this: a plateau (Nagle × delayed ACK,
/// 40 ms), a held or coalesced event, a timestamp taken after a buffer.
const PATHOLOGY: Duration = Duration::from_millis(10);

/// Timing errors of one attempt, in ms: (what, error).
#[derive(Default)]
struct Timing {
    worst_event: Duration,
    worst_gap: Duration,
    worst_ttft: Duration,
    worst_path: Duration,
    gaps: usize,
    requests: usize,
    /// Every timing checked (events, gaps, TTFTs).
    checked: usize,
    over: Vec<String>,
}

impl Timing {
    fn check(&mut self, what: String, err: Duration) -> Duration {
        self.checked += 1;
        if err > TOLERANCE {
            self.over.push(format!("{what}: {:.3} ms", ms(err)));
        }
        err
    }

    /// The accuracy promise: at least 99 % of the timings within 1 ms of
    /// the simulator's, none beyond 10 ms. A shared 2-vCPU host stops the
    /// tap's process for 1–3 ms now and then (one event late, the gaps on
    /// both sides of it off by as much: seen in a clean-clone run); a bias
    /// or a held event would show in far more than 1 % or far above 10 ms.
    fn holds(&self) -> bool {
        let worst = self.worst_event.max(self.worst_gap).max(self.worst_ttft);
        self.over.len() * 100 <= self.checked && worst <= PATHOLOGY
    }
}

/// One measurement pass against a fresh simulator and tap. Correctness
/// (counts, sources, definitions) is asserted outright; timing errors are
/// collected for the caller.
async fn measure_once(attempt: u64) -> Timing {
    let behind = sim(Profile {
        ttft_ms: 80.0,
        itl_ms: 15.0,
        itl_jitter_ms: 10.0,
        output_tokens: 40,
        seed: 3 + attempt,
        ..Profile::default()
    });
    let tap = Tap::start(&format!("http://{}", behind.addr), "");
    let mut t = Timing::default();
    // (usage?, tokens per event, x-sim extras)
    let cases = [
        (true, 1, ""),
        (false, 1, ""),
        (true, 3, ""),
        (false, 3, ""),
        (true, 1, ",keepalive-ms=20,line-ending=crlf"),
        (false, 1, ",split=random,line-ending=cr"),
        (true, 2, ",continuous-usage=true"),
        (true, 1, ",reasoning-tokens=10"),
    ];
    for round in 0..2 {
        for (i, (usage, per_event, extra)) in cases.iter().enumerate() {
            let id = format!("acc-{attempt}-{round}-{i}");
            let opts = format!(
                "tokens-per-event={per_event},seed={}{extra}",
                10 * round + i
            );
            let headers = [
                ("content-type", "application/json"),
                ("x-request-id", id.as_str()),
                ("x-sim", opts.as_str()),
            ];
            let resp = post(tap.addr, &headers, &chat(true, *usage)).await;
            assert!(resp.complete);
            let truth = behind
                .truth
                .wait_for(&id, Duration::from_secs(5))
                .await
                .unwrap();
            let record = tap.records.wait(&id).await;
            let seen = tap.events.of(&id);
            let sends = truth.token_times();
            assert_eq!(seen.len(), sends.len(), "{id}: token events");
            assert_eq!(record.outcome, Outcome::Ok, "{id}");
            t.requests += 1;
            for (k, (ev, send)) in seen.iter().zip(&sends).enumerate() {
                assert_eq!(ev.index as usize, k);
                let err = t.check(format!("{id} token {k} vs its send"), diff(ev.at, *send));
                t.worst_event = t.worst_event.max(err);
                if k > 0 {
                    let sent_gap = *send - sends[k - 1];
                    let err = diff(Instant::now() + ev.gap.unwrap(), Instant::now() + sent_gap);
                    let err = t.check(format!("{id} gap {k}"), err);
                    t.worst_gap = t.worst_gap.max(err);
                    t.gaps += 1;
                }
            }
            // TTFT counts from the tap's receipt of the request; ground truth
            // is the first token's send time on the same clock. The tap's TTFT
            // exceeds the simulator's own by the request's path to the
            // simulator (a connect on a fresh upstream connection), which is
            // real latency at this boundary, not error; it is reported.
            let t0 = seen[0].at - seen[0].since_start;
            assert_eq!(record.ttft, Some(seen[0].since_start));
            let err = t.check(
                format!("{id} TTFT"),
                diff(t0 + record.ttft.unwrap(), sends[0]),
            );
            t.worst_ttft = t.worst_ttft.max(err);
            assert!(
                truth.received >= t0,
                "the simulator got the request after the tap"
            );
            t.worst_path = t.worst_path.max(truth.received - t0);
            assert_eq!(record.gaps.count as usize, sends.len() - 1);
            if extra.contains("reasoning") {
                assert_eq!(record.reasoning_tokens, Some(10));
                let visible = seen.iter().find(|e| e.index == 10).unwrap();
                assert_eq!(
                    record.ttft_visible,
                    Some(visible.since_start),
                    "{id}: first non-reasoning token"
                );
            } else {
                assert_eq!(record.ttft_visible, record.ttft);
            }
            // Token counts.
            if *usage || extra.contains("continuous") {
                assert_eq!(record.output_source, Some(TokenSource::Usage), "{id}");
                assert_eq!(
                    record.output_tokens,
                    Some(u64::from(truth.completion_tokens)),
                    "{id}"
                );
                assert_eq!(
                    record.input_tokens,
                    Some(u64::from(truth.prompt_tokens)),
                    "{id}"
                );
            } else {
                assert_eq!(record.output_source, Some(TokenSource::Events), "{id}");
                assert_eq!(
                    record.output_tokens,
                    Some(sends.len() as u64),
                    "{id}: counted events = events sent"
                );
            }
            let n = record.output_tokens.unwrap();
            let tpot = (record.e2e - record.ttft.unwrap()) / (n as u32 - 1);
            assert_eq!(record.tpot, Some(tpot));
        }
    }
    t
}

/// Every token event, every gap and every TTFT within 1 ms of ground truth.
/// This runs on shared 2-vCPU machines, where the hypervisor or another
/// process occasionally delays one thread by a millisecond; such an attempt
/// is reported and repeated (at most three attempts). A regression in
/// tokentap shifts every event and fails every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_and_gaps_within_1ms_of_the_simulator_at_p99() {
    let _g = serial().await;
    for attempt in 0..3 {
        let t = measure_once(attempt).await;
        println!(
            "accuracy (attempt {}): {} requests, {} gaps; worst |event - send| {:.3} ms, worst gap error {:.3} ms, worst TTFT error {:.3} ms; request path tap->simulator up to {:.3} ms",
            attempt + 1,
            t.requests,
            t.gaps,
            ms(t.worst_event),
            ms(t.worst_gap),
            ms(t.worst_ttft),
            ms(t.worst_path)
        );
        if !t.over.is_empty() {
            println!(
                "  over {:.3} ms ({} of {} timings): {}",
                ms(TOLERANCE),
                t.over.len(),
                t.checked,
                t.over.join("; ")
            );
        }
        if t.holds() {
            return;
        }
    }
    panic!(
        "three attempts each had over 1 % of their timings off by more than {:.3} ms, or one by more than {:.3} ms (see above)",
        ms(TOLERANCE),
        ms(PATHOLOGY)
    );
}

/// (fixture, token events, output tokens, source, first token at ms)
const FIXTURES: &[(&str, u32, u64, TokenSource, Option<f64>)] = &[
    (
        "llama-cpp-python-chat-stream",
        12,
        12,
        TokenSource::Events,
        Some(111.478),
    ),
    (
        "llama-cpp-python-completions-stream",
        12,
        12,
        TokenSource::Events,
        Some(52.319),
    ),
    (
        "llama-server-chat-nostream",
        0,
        12,
        TokenSource::Usage,
        None,
    ),
    (
        "llama-server-chat-stream-nousage",
        12,
        12,
        TokenSource::Events,
        Some(21.066),
    ),
    (
        "llama-server-chat-stream-usage",
        12,
        12,
        TokenSource::Usage,
        Some(83.616),
    ),
    (
        "llama-server-completions-stream",
        12,
        12,
        TokenSource::Usage,
        Some(44.09),
    ),
];

/// Serves one recorded response: every recorded read written at its time.
/// Returns when each was actually written, keyed by its recorded time.
async fn replay_once(
    listener: tokio::net::TcpListener,
    reads: Vec<(f64, Vec<u8>)>,
) -> Vec<(f64, Instant)> {
    let (mut s, _) = listener.accept().await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    // Read the request head and its body (Content-Length).
    loop {
        let n = s.read(&mut buf).await.unwrap();
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                break;
            }
        }
    }
    let received = Instant::now();
    let mut written = Vec::new();
    for (t_ms, bytes) in reads {
        tokio::time::sleep_until((received + Duration::from_secs_f64(t_ms / 1000.0)).into()).await;
        s.write_all(&bytes).await.unwrap();
        written.push((t_ms, Instant::now()));
    }
    written
}

/// Every recorded response through a tap: body, counts and sources exact
/// on every replay. The first token's time holds the accuracy promise's
/// rule (`Timing::holds`) for one timing: within 1 ms of when the replay
/// wrote it, in one of three replays (a shared 2-vCPU host stops a
/// process for 1–3 ms now and then: seen here once, with the other core
/// busy), and never beyond 10 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_engine_responses_replayed_through_a_tap() {
    let _g = serial().await;
    for fixture in FIXTURES {
        let name = fixture.0;
        let mut over = Vec::new();
        let mut held = false;
        for _ in 0..3 {
            let Some(err) = replay_fixture(fixture).await else {
                held = true; // not a stream: no first token to time
                break;
            };
            assert!(
                err <= PATHOLOGY,
                "{name}: first token {:.3} ms from its recorded read",
                ms(err)
            );
            if err <= TOLERANCE {
                held = true;
                break;
            }
            over.push(format!("{:.3} ms", ms(err)));
        }
        if !over.is_empty() {
            println!(
                "{name}: first token over {:.3} ms: {}",
                ms(TOLERANCE),
                over.join(", ")
            );
        }
        assert!(
            held,
            "{name}: first token more than {:.3} ms from its recorded read in three replays: {}",
            ms(TOLERANCE),
            over.join(", ")
        );
    }
}

/// One replay of a recorded response through a fresh tap; the first
/// token's distance from when the replay wrote it, for a stream.
async fn replay_fixture(
    (name, token_events, output, source, first_ms): &(&str, u32, u64, TokenSource, Option<f64>),
) -> Option<Duration> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded");
    let text = std::fs::read_to_string(dir.join(format!("{name}.jsonl"))).unwrap();
    let mut lines = text.lines();
    let first: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let reads: Vec<(f64, Vec<u8>)> = lines
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let b = base64::engine::general_purpose::STANDARD
                .decode(v["b64"].as_str().unwrap())
                .unwrap();
            (v["t_ms"].as_f64().unwrap(), b)
        })
        .collect();
    let recorded: Vec<u8> = reads.iter().flat_map(|(_, b)| b.clone()).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let replay = tokio::spawn(replay_once(listener, reads));
    let tap = Tap::start(&format!("http://{upstream}"), "");
    let path = first["request_path"].as_str().unwrap();
    let body = first["request_body"].to_string();
    let headers = [("content-type", "application/json"), ("x-request-id", name)];
    let resp = client::send(tap.addr, "POST", path, &headers, body.as_bytes())
        .await
        .unwrap();
    let written = replay.await.unwrap();
    let record = tap.records.wait(name).await;
    // The client got exactly the recorded body.
    let split = recorded.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut expected = Vec::new();
    let mut raw = recorded[split..].to_vec();
    if resp.header("content-length").is_some() {
        expected = raw;
    } else {
        while let Ok(httparse::Status::Complete((c, size))) = httparse::parse_chunk_size(&raw) {
            let size = size as usize;
            if size == 0 {
                break;
            }
            expected.extend_from_slice(&raw[c..c + size]);
            raw.drain(..c + size + 2);
        }
    }
    assert_eq!(resp.body, expected, "{name}: body");
    assert_eq!(record.outcome, Outcome::Ok, "{name}");
    assert_eq!(
        record.token_events, *token_events,
        "{name}: token events (role-only and finish skipped)"
    );
    assert_eq!(record.output_tokens, Some(*output), "{name}");
    assert_eq!(record.output_source, Some(*source), "{name}");
    if let Some(first_ms) = first_ms {
        // TTFT at the tap counts from the tap's receipt; the replay's clock
        // starts when it has the request: compare the first-token instant.
        let ev = &tap.events.of(name)[0];
        let sent = written.iter().find(|(t, _)| t == first_ms).unwrap().1;
        Some(diff(ev.at, sent))
    } else {
        assert_eq!(record.ttft, None);
        None
    }
}

/// The record-log line of `id`, once the tap wrote it.
async fn logged(path: &std::path::Path, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let line = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["request_id"] == id);
        if let Some(line) = line {
            return line;
        }
        assert!(Instant::now() < deadline, "no record-log line for {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// A tap the host stops while an event arrives (here: SIGSTOP for 400 ms,
/// the first token arriving in the middle) reads the event late, but times
/// it when it arrived: the kernel's receive stamp (`proxy::arrival`), not
/// the read. Stamped at the read, its TTFT would be ~200 ms long and the
/// gap after it ~200 ms short. Both upstream sockets: pingora's (one
/// timeout) and tokentap's own (distinct first-byte and idle timeouts).
///
/// The tap's TTFT adds the request's way to the simulator, a fresh
/// connection from a process that has just started: under 1 ms as a rule,
/// but a clean-clone CI run once saw 12 ms (the hypervisor stealing the
/// CPU, as `steal` in `/proc/stat` shows it does). So, as in the accuracy
/// test above, an attempt out of bounds is reported and repeated, three at
/// most; stamping at the read is 200 ms off in every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tap_stopped_while_an_event_arrives_times_it_at_its_arrival() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 300.0,
        itl_ms: 300.0,
        itl_jitter_ms: 0.0,
        output_tokens: 3,
        ..Profile::default()
    });
    let dir = scratch("stopped");
    let sockets = [
        ("pingora", ""),
        (
            "timed",
            "    timeouts:\n      first_byte_seconds: 30\n      idle_seconds: 20\n",
        ),
    ];
    for (socket, timeouts) in sockets {
        let mut misses = Vec::new();
        for attempt in 1..=3 {
            match stopped_once(&behind, dir.path(), socket, timeouts, attempt).await {
                Ok(()) => {
                    misses.clear();
                    break;
                }
                Err(miss) => {
                    println!("{socket} (attempt {attempt}): {miss}");
                    misses.push(miss);
                }
            }
        }
        assert!(misses.is_empty(), "{socket}, three attempts: {misses:?}");
    }
}

/// One stopped-tap run through a fresh tokentap process; `Err` says which
/// timing (or the premise) was out of bounds.
async fn stopped_once(
    behind: &tokentap_sim::Simulator,
    dir: &std::path::Path,
    socket: &str,
    timeouts: &str,
    attempt: u32,
) -> Result<(), String> {
    let log = dir.join(format!("{socket}-{attempt}.jsonl"));
    let extra = format!("    record_log:\n      path: {}\n{timeouts}", log.display());
    let (proc, tap, _admin) = crate::process::run_tokentap(behind.addr, &extra).await;
    let pid = proc.child.id();
    let id = format!("stopped-{socket}-{attempt}");
    let client = {
        let id = id.clone();
        tokio::spawn(async move {
            let headers = [
                ("content-type", "application/json"),
                ("x-request-id", id.as_str()),
            ];
            post(tap, &headers, &chat(true, false)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    signal(pid, "-STOP");
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let resumed = Instant::now();
    signal(pid, "-CONT");
    let resp = client.await.unwrap();
    assert!(resp.complete, "{socket}: the stream arrives whole");
    let truth = behind
        .truth
        .wait_for(&id, Duration::from_secs(5))
        .await
        .unwrap();
    let sends = truth.token_times();
    assert_eq!(sends.len(), 3);
    // The premise: the first token reached the tap while it was stopped.
    if !(stopped < sends[0] && sends[0] + Duration::from_millis(50) < resumed) {
        return Err(
            "the first token was not sent while the tap was stopped (host too slow to stage it)"
                .into(),
        );
    }
    let line = logged(&log, &id).await;
    let ttft = Duration::from_secs_f64(line["ttft_ms"].as_f64().unwrap() / 1e3);
    let gap = Duration::from_secs_f64(line["gaps_ms"][0].as_f64().unwrap() / 1e3);
    let truth_ttft = sends[0] - truth.received;
    let truth_gap = sends[1] - sends[0];
    println!(
        "{socket}: stopped {:.1} ms, first token sent {:.1} ms before the tap resumed; TTFT {:.3} ms (simulator's {:.3} ms), first gap {:.3} ms (sent {:.3} ms)",
        ms(resumed - stopped),
        ms(resumed - sends[0]),
        ms(ttft),
        ms(truth_ttft),
        ms(gap),
        ms(truth_gap)
    );
    // The tap's TTFT adds the request's way to the simulator, never the 50+
    // ms the tap was stopped after the token arrived.
    if !(ttft + Duration::from_millis(1) >= truth_ttft && ttft < truth_ttft + PATHOLOGY) {
        return Err(format!(
            "TTFT {:.3} ms, the simulator's {:.3} ms",
            ms(ttft),
            ms(truth_ttft)
        ));
    }
    if gap.abs_diff(truth_gap) >= PATHOLOGY {
        return Err(format!(
            "first gap {:.3} ms, sent {:.3} ms apart",
            ms(gap),
            ms(truth_gap)
        ));
    }
    Ok(())
}
