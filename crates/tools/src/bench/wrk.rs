//! S9: non-streaming keep-alive load from Debian's `wrk`, an independent
//! load generator (one thread, 8 and 64 connections, on the driver's core),
//! so the closed-loop yardstick is not only tokentap's own client (S4).
//! Each system's CPU per request comes from its process's schedstat around
//! the run, as in every other cell.
//!
//! The request is the S4 one (`FAST`: 16 tokens at once), set by a Lua
//! script written to the run's directory; the same script's `done` hook
//! prints wrk's own summary as one JSON line, so no figure depends on
//! parsing wrk's human-readable units.

use super::cells::FAST;
use super::stats::{Dist, Idle};
use super::systems::cpu_ns;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The connection counts of the cell.
pub const CONNECTIONS: [u32; 2] = [8, 64];

/// One wrk run against one system.
#[derive(Debug, Clone, Serialize)]
pub struct S9 {
    pub connections: u32,
    pub requests: u64,
    /// Responses that were not 2xx/3xx, and socket errors (connect, read,
    /// write, timeout) as wrk counts them.
    pub non_2xx: u64,
    pub socket_errors: u64,
    pub rps: f64,
    pub latency: Dist,
    pub cpu_us_per_request: Option<f64>,
    pub idle: f64,
}

/// What the script's `done` hook prints (latencies in µs, as wrk keeps
/// them; duration in µs).
#[derive(Debug, Deserialize, PartialEq)]
pub struct Summary {
    pub requests: u64,
    pub duration_us: f64,
    pub status: u64,
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// The marker the JSON line starts with in wrk's output.
const MARK: &str = "tokentap-wrk ";

/// The Lua script: the S4 request, and a `done` hook printing one JSON line.
pub fn script() -> String {
    let p = FAST;
    let body = format!(
        "{{\"model\":\"{}\",\"stream\":false,\"max_tokens\":{},\"messages\":[{{\"role\":\"user\",\"content\":\"benchmark\"}}]}}",
        p.model(),
        p.events
    );
    format!(
        r#"-- written by `tokentap bench` (S9)
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.body = '{body}'
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer sk-bench"
wrk.headers["x-sim"] = "ttft-ms=0,itl-ms=0,output-tokens={tokens},numbered=true"
wrk.headers["x-request-id"] = "s9"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{mark}{{"requests":%d,"duration_us":%d,"status":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%f}}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
"#,
        tokens = p.events,
        mark = MARK,
    )
}

/// The summary line in wrk's standard output, if there is one.
pub fn parse(stdout: &str) -> Option<Summary> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(MARK))
        .and_then(|json| serde_json::from_str(json).ok())
}

/// The `wrk` binary, when installed.
pub fn binary() -> Option<PathBuf> {
    ["/usr/bin/wrk", "/usr/local/bin/wrk"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Runs wrk (one thread) against `addr` for `length`; `None` (and why, on
/// stderr) when it did not run or printed no summary.
pub async fn s9(
    wrk: &Path,
    script: &Path,
    addr: SocketAddr,
    pid: Option<u32>,
    connections: u32,
    length: Duration,
) -> Option<S9> {
    let cpu0 = pid.map(cpu_ns);
    let idle = Idle::start();
    let out = tokio::process::Command::new(wrk)
        .args(["-t1", &format!("-c{connections}")])
        .arg(format!("-d{}s", length.as_secs().max(1)))
        .arg("-s")
        .arg(script)
        .arg(format!("http://{addr}/v1/chat/completions"))
        .kill_on_drop(true)
        .output()
        .await;
    let cpu1 = pid.map(cpu_ns);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: S9: wrk did not run: {e}");
            return None;
        }
    };
    let Some(s) = parse(&String::from_utf8_lossy(&out.stdout)) else {
        eprintln!(
            "bench: S9: no summary from wrk ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    };
    let ok = s.requests.saturating_sub(s.status);
    Some(S9 {
        connections,
        requests: s.requests,
        non_2xx: s.status,
        socket_errors: s.connect + s.read + s.write + s.timeout,
        rps: s.requests as f64 / (s.duration_us / 1e6).max(1e-9),
        latency: Dist {
            n: s.requests,
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            p999: s.p999,
            max: s.max,
        },
        cpu_us_per_request: cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e3 / ok.max(1) as f64),
        idle: idle.share(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_found_among_wrks_own_output() {
        let out = "Running 1s test @ http://127.0.0.1:1/v1/chat/completions\n  1 threads and 8 connections\n\
tokentap-wrk {\"requests\":1200,\"duration_us\":1000512,\"status\":3,\"connect\":0,\"read\":1,\"write\":0,\"timeout\":0,\"p50\":310,\"p90\":420,\"p99\":900,\"p999\":1500,\"max\":2100,\"mean\":330.500000}\n\
Requests/sec:   1199.39\n";
        let s = parse(out).expect("summary");
        assert_eq!(s.requests, 1200);
        assert_eq!(s.status, 3);
        assert_eq!(s.read, 1);
        assert!((s.mean - 330.5).abs() < 1e-9);
        assert_eq!(parse("Requests/sec: 10\n"), None);
    }

    #[test]
    fn the_script_sends_the_s4_request() {
        let s = script();
        assert!(s.contains("wrk.method = \"POST\""));
        assert!(s.contains(&FAST.model()));
        assert!(s.contains(MARK));
    }
}
