//! What a streamed event costs in system calls: one read from the upstream
//! and one write to the client, as nginx (`scripts/request-cost.py`).
//! Counted by `strace -c` on a running tap, both upstream sockets (pingora's
//! and the distinct-timeouts one), whose reads take the kernel's receive
//! stamps through `recvmsg`: a read that drained the socket must not be
//! followed by a second one that finds nothing (the readiness tokio clears
//! after a short read; `vendor/README.md`, pingora-core 0004).

use crate::support::*;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokentap_sim::Profile;

const EVENTS: usize = 64;
const STREAMS: usize = 4;

/// Calls per syscall name from an `strace -c` summary.
fn counts(summary: &str) -> std::collections::BTreeMap<String, f64> {
    summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let calls = f.get(3)?.parse::<f64>().ok()?;
            let name = f.last()?;
            (f.len() >= 5 && *name != "total").then(|| (name.to_string(), calls))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_event_costs_one_upstream_read() {
    let _g = serial().await;
    let behind = sim(Profile {
        ttft_ms: 5.0,
        itl_ms: 5.0,
        itl_jitter_ms: 0.0,
        output_tokens: EVENTS as u32,
        ..Profile::default()
    });
    let sockets = [
        ("pingora", ""),
        (
            "timed",
            "    timeouts:\n      first_byte_seconds: 30\n      idle_seconds: 20\n",
        ),
    ];
    for (socket, extra) in sockets {
        let (proc, tap, _admin) = crate::process::run_tokentap(behind.addr, extra).await;
        let headers = [("content-type", "application/json")];
        // Warm: the upstream connection pooled, stamping on.
        assert!(post(tap, &headers, &chat(true, true)).await.complete);
        let out = std::env::temp_dir().join(format!(
            "tokentap-syscalls-{}-{socket}.txt",
            std::process::id()
        ));
        let mut strace = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .args(["-p", &proc.0.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace (scripts/deps.sh installs it)");
        tokio::time::sleep(Duration::from_millis(500)).await; // attached
        for _ in 0..STREAMS {
            let r = post(tap, &headers, &chat(true, true)).await;
            assert!(r.complete, "{socket}: a stream arrives whole");
        }
        let _ = Command::new("kill")
            .args(["-INT", &strace.id().to_string()])
            .status();
        let _ = strace.wait();
        let summary = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        let calls = counts(&summary);
        let per_event =
            |name: &str| calls.get(name).copied().unwrap_or(0.0) / (EVENTS * STREAMS) as f64;
        println!(
            "{socket}: per event recvmsg {:.2}, sendto {:.2}, writev {:.2}, epoll_wait {:.2} ({calls:?})",
            per_event("recvmsg"),
            per_event("sendto"),
            per_event("writev"),
            per_event("epoll_wait")
        );
        // One stamped read per event (5 ms apart, each its own segment),
        // plus a stream's head and end: never a second, empty one.
        let reads = per_event("recvmsg");
        assert!(
            (0.9..1.2).contains(&reads),
            "{socket}: {reads:.2} upstream reads per event, want one ({summary})"
        );
        drop(proc);
    }
}
