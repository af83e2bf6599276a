//! Real MCP sessions (the official SDK's client and server) and a real
//! Chroma server through `tool` and `retrieval` taps: the client sees the
//! same through the tap as direct, and the tap counts every call by method,
//! tool and outcome, over streamable HTTP (SSE and JSON answers) and the
//! older HTTP+SSE transport; Chroma's searches by top-k and results.

use crate::support::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Python with the compound system's packages: `TOKENTAP_COMPOUND_PYTHON`
/// or the Makefile's `.venv-compound`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKENTAP_COMPOUND_PYTHON") {
        return p.into();
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-compound/bin/python")
}

pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// Waits until something accepts connections on `addr`.
pub fn wait_listening(addr: SocketAddr, what: &str, child: &mut KillOnDrop) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited: {status} (install it with `make deps`)");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A real MCP server (`tests/py/mcp_server.py`).
pub fn mcp_server(transport: &str, flags: &[&str]) -> (KillOnDrop, SocketAddr) {
    let addr = free_addr();
    let mut child = KillOnDrop(
        Command::new(python())
            .arg(script("mcp_server.py"))
            .arg(transport)
            .arg(addr.port().to_string())
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python"),
    );
    wait_listening(addr, "the MCP server", &mut child);
    (child, addr)
}

/// One session of the SDK's client (`tests/py/mcp_client.py`): what it saw.
pub fn mcp_client(transport: &str, url: &str, calls: usize) -> Value {
    let out = Command::new(python())
        .arg(script("mcp_client.py"))
        .arg(transport)
        .arg(url)
        .args(["--calls", &calls.to_string()])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "the MCP client failed (install it with `make deps`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tool_tap(upstream: SocketAddr) -> (Multi, SocketAddr) {
    let listen = free_addr();
    let tap = Multi::start(&tap_yaml("mcp", "tool", listen, upstream, ""), "");
    (tap, listen)
}

/// A sample of the scrape, 0 when absent.
pub fn sample(scrape: &str, name_and_labels: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

fn op(scrape: &str, what: &str, method: &str, tool: &str, error: &str) -> f64 {
    sample(
        scrape,
        &format!("mcp_client_operation_duration_seconds_{what}{{boundary=\"tool\",error_type=\"{error}\",gen_ai_tool_name=\"{tool}\",mcp_method_name=\"{method}\",tap=\"mcp\"}}"),
    )
}

/// Runs one session direct and one through a tool tap; returns the tap's
/// scrape once its calls are counted.
fn session(transport: &str, flags: &[&str], path: &str, calls: usize) -> String {
    let (_server, upstream) = mcp_server(transport, flags);
    let (tap, listen) = tool_tap(upstream);
    let direct = mcp_client(transport, &format!("http://{upstream}{path}"), calls);
    let through = mcp_client(transport, &format!("http://{listen}{path}"), calls);
    println!("{transport} {flags:?}: {through}");
    assert_eq!(direct, through, "the client saw the same through the tap");
    assert_eq!(
        through["lookup"],
        serde_json::json!([false, ["Sunny in Paris"]])
    );
    assert_eq!(through["fail"][0], true);
    // Progress needs a stream: JSON answers carry none.
    let progress = if flags.contains(&"--json") { 0 } else { 2 };
    assert_eq!(through["slow"][2].as_array().map(Vec::len), Some(progress));
    // The session's last calls may still be on their way to the sinks.
    let want = 4.0 + calls as f64;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = tap.scrape();
        let lookups = op(&s, "count", "tools/call", "lookup", "");
        if lookups >= 1.0 + calls as f64 || Instant::now() > deadline {
            let all: f64 = ["lookup", "fail", "slow", "nope"]
                .iter()
                .map(|t| {
                    op(&s, "count", "tools/call", t, "")
                        + op(&s, "count", "tools/call", t, "tool_error")
                })
                .sum();
            assert_eq!(all, want, "every tools/call counted once:\n{s}");
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn check_session(s: &str, sse_answers: bool) {
    assert_eq!(op(s, "count", "initialize", "", ""), 1.0);
    assert_eq!(op(s, "count", "tools/list", "", ""), 1.0);
    assert_eq!(op(s, "count", "tools/call", "fail", "tool_error"), 1.0);
    assert_eq!(op(s, "count", "tools/call", "nope", "tool_error"), 1.0);
    assert_eq!(op(s, "count", "tools/call", "slow", ""), 1.0);
    // lookup sleeps 50 ms in the server: the tap saw at least that.
    let (n, sum) = (
        op(s, "count", "tools/call", "lookup", ""),
        op(s, "sum", "tools/call", "lookup", ""),
    );
    assert!(sum / n >= 0.050, "lookup took {} s on average", sum / n);
    let by_method = "{boundary=\"tool\",mcp_method_name=\"tools/call\",tap=\"mcp\"}";
    assert_eq!(
        sample(
            s,
            &format!("tokentap_mcp_progress_notifications_total{by_method}")
        ),
        if sse_answers { 2.0 } else { 0.0 },
        "slow's two progress notifications (none without a stream)"
    );
    let first_events = sample(
        s,
        &format!("tokentap_mcp_time_to_first_event_seconds_count{by_method}"),
    );
    if sse_answers {
        assert!(
            first_events >= 4.0,
            "{first_events} calls answered over SSE"
        );
    } else {
        assert_eq!(first_events, 0.0, "JSON answers have no events");
    }
    let sizes = sample(
        s,
        &format!("tokentap_mcp_request_size_bytes_count{by_method}"),
    );
    assert!(sizes >= 4.0);
    assert!(
        sample(
            s,
            "tokentap_mcp_messages_total{boundary=\"tool\",kind=\"notification\",tap=\"mcp\"}"
        ) >= 1.0,
        "notifications/initialized"
    );
    assert_eq!(
        sample(
            s,
            "tokentap_mcp_messages_total{boundary=\"tool\",kind=\"unmatched\",tap=\"mcp\"}"
        ),
        0.0
    );
    assert_eq!(
        sample(
            s,
            "tokentap_mcp_messages_total{boundary=\"tool\",kind=\"invalid\",tap=\"mcp\"}"
        ),
        0.0
    );
}

#[test]
fn an_mcp_session_over_streamable_http_with_sse_answers_is_measured_call_by_call() {
    let _g = serial_blocking();
    let s = session("streamable-http", &[], "/mcp", 3);
    check_session(&s, true);
    // Every MCP family is in this scrape, and promtool accepts it.
    crate::scrape::all_present(&s, |d| {
        d.name.starts_with("mcp_") || d.name.starts_with("tokentap_mcp_")
    });
    // Time to the response head of each POST, for every call.
    let by_method = "{boundary=\"tool\",mcp_method_name=\"tools/call\",tap=\"mcp\"}";
    assert_eq!(
        sample(
            &s,
            &format!("tokentap_mcp_time_to_first_byte_seconds_count{by_method}")
        ),
        7.0
    );
}

#[test]
fn an_mcp_session_over_streamable_http_with_json_answers_is_measured() {
    let _g = serial_blocking();
    let s = session("streamable-http", &["--json"], "/mcp", 0);
    check_session(&s, false);
}

#[test]
fn an_mcp_session_over_the_older_http_sse_transport_is_matched_across_connections() {
    let _g = serial_blocking();
    let s = session("sse", &[], "/sse", 2);
    check_session(&s, true);
    // The answers came on the session's stream, not on the POSTs.
    let by_method = "{boundary=\"tool\",mcp_method_name=\"tools/call\",tap=\"mcp\"}";
    assert_eq!(
        sample(
            &s,
            &format!("tokentap_mcp_time_to_first_byte_seconds_count{by_method}")
        ),
        0.0
    );
}

/// A real Chroma server (`chroma run`) on a scratch directory.
pub fn chroma(dir: &std::path::Path) -> (KillOnDrop, SocketAddr) {
    let addr = free_addr();
    let chroma = python().with_file_name("chroma");
    let mut child = KillOnDrop(
        Command::new(chroma)
            .args([
                "run",
                "--host",
                "127.0.0.1",
                "--port",
                &addr.port().to_string(),
                "--path",
            ])
            .arg(dir.join("data"))
            .env("HOME", dir)
            .env("ANONYMIZED_TELEMETRY", "False")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chroma (install it with `make deps`)"),
    );
    wait_listening(addr, "chroma", &mut child);
    (child, addr)
}

pub fn chroma_client(port: u16, queries: usize) -> Value {
    let out = Command::new(python())
        .arg(script("chroma_client.py"))
        .arg(port.to_string())
        .args(["--queries", &queries.to_string()])
        .env("ANONYMIZED_TELEMETRY", "False")
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "the Chroma client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn chroma_searches_through_a_retrieval_tap_are_timed_with_top_k_and_results() {
    let _g = serial_blocking();
    let dir = scratch("chroma");
    let (_server, upstream) = chroma(dir.path());
    let listen = free_addr();
    let tap = Multi::start(&tap_yaml("vectors", "retrieval", listen, upstream, ""), "");
    let direct = chroma_client(upstream.port(), 0);
    // The collection exists now: the second client reuses it (same data).
    let through = chroma_client(listen.port(), 3);
    assert_eq!(direct, through, "the client saw the same through the tap");
    assert_eq!(through["query"][0], serde_json::json!(["a", "e", "b"]));
    let s = tap.scrape();
    crate::scrape::all_present(&s, |d| {
        d.name.starts_with("tokentap_call_") || d.name.starts_with("tokentap_retrieval_")
    });
    let labels = |op: &str| {
        format!("{{boundary=\"retrieval\",operation=\"{op}\",system=\"chroma\",tap=\"vectors\"}}")
    };
    let calls = |op: &str| {
        sample(
            &s,
            &format!("tokentap_call_duration_seconds_count{{boundary=\"retrieval\",operation=\"{op}\",outcome=\"ok\",system=\"chroma\",tap=\"vectors\"}}"),
        )
    };
    assert_eq!(calls("search"), 5.0, "two queries, then three:\n{s}");
    assert_eq!(calls("get"), 1.0);
    assert_eq!(calls("write"), 1.0, "the add");
    // Asked: 3 + 2 + 3×4; returned: 2×3 + 2 + 3×4; inputs: 2 + 1 + 3.
    let search = labels("search");
    assert_eq!(
        sample(&s, &format!("tokentap_retrieval_top_k_sum{search}")),
        17.0
    );
    assert_eq!(
        sample(&s, &format!("tokentap_retrieval_results_sum{search}")),
        20.0
    );
    assert_eq!(
        sample(&s, &format!("tokentap_retrieval_inputs_sum{search}")),
        6.0
    );
    assert_eq!(
        sample(
            &s,
            &format!("tokentap_retrieval_results_sum{}", labels("get"))
        ),
        1.0
    );
}

/// One span per MCP call reaches an OTLP collector, named and attributed
/// as the MCP conventions say, with nothing of the arguments or results.
#[test]
fn mcp_calls_are_exported_as_spans_without_their_content() {
    let _g = serial_blocking();
    let collector = crate::collector::Collector::start(crate::collector::Mode::Ok);
    let (_server, upstream) = mcp_server("streamable-http", &[]);
    let listen = free_addr();
    let top = format!(
        "otlp:\n  endpoint: http://{}\n  interval_seconds: 0.2\n  timeout_seconds: 1\n",
        collector.addr
    );
    let _tap = Multi::start(&tap_yaml("mcp", "tool", listen, upstream, ""), &top);
    let seen = mcp_client("streamable-http", &format!("http://{listen}/mcp"), 0);
    assert_eq!(seen["lookup"][1][0], "Sunny in Paris");
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = collector.spans();
        if spans.iter().any(|s| s.name == "tools/call nope") || Instant::now() > deadline {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "initialize",
        "tools/list",
        "tools/call lookup",
        "tools/call fail",
        "tools/call slow",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let attr = |name: &str, key: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| crate::collector::string_attr(&s.attributes, key))
    };
    assert_eq!(
        attr("tools/call lookup", "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr("tools/call lookup", "gen_ai.tool.name").as_deref(),
        Some("lookup")
    );
    assert_eq!(
        attr("tools/call lookup", "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attr("tools/call lookup", "error.type"),
        None,
        "it succeeded"
    );
    assert_eq!(
        attr("tools/call fail", "error.type").as_deref(),
        Some("tool_error")
    );
    assert_eq!(
        attr("tools/call lookup", "tokentap.call.kind").as_deref(),
        Some("mcp")
    );
    // Neither the argument nor the result left the tap.
    for raw in collector.raw() {
        for canary in [&b"Paris"[..], b"Sunny", b"boom"] {
            assert!(
                !raw.windows(canary.len()).any(|w| w == canary),
                "{:?} exported",
                String::from_utf8_lossy(canary)
            );
        }
    }
}
