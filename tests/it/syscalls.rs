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

/// An attached `strace -c`: stopped (and its summary file removed) when
/// dropped, also when an assertion fails first.
struct Strace {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Strace {
    fn attach(pid: u32, name: &str) -> Self {
        let out = std::env::temp_dir().join(format!(
            "tokentap-syscalls-{}-{name}.txt",
            std::process::id()
        ));
        let child = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace (scripts/deps.sh installs it)");
        Strace { child, out }
    }

    /// Detaches and returns its summary.
    fn summary(&mut self) -> String {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// Calls and failed calls (e.g. `EAGAIN`) per syscall name from an
/// `strace -c` summary (the errors column is blank when there are none).
fn counts(summary: &str) -> std::collections::BTreeMap<String, (f64, f64)> {
    summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let calls = f.get(3)?.parse::<f64>().ok()?;
            let errors = match f.len() {
                6 => f.get(4)?.parse::<f64>().ok()?,
                _ => 0.0,
            };
            let name = f.last()?;
            (f.len() >= 5 && *name != "total").then(|| (name.to_string(), (calls, errors)))
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
        let mut strace = Strace::attach(proc.child.id(), socket);
        tokio::time::sleep(Duration::from_millis(500)).await; // attached
        for _ in 0..STREAMS {
            let r = post(tap, &headers, &chat(true, true)).await;
            assert!(r.complete, "{socket}: a stream arrives whole");
        }
        let summary = strace.summary();
        drop(strace);
        let calls = counts(&summary);
        let per_event =
            |name: &str| calls.get(name).map_or(0.0, |c| c.0) / (EVENTS * STREAMS) as f64;
        println!(
            "{socket}: per event recvmsg {:.2}, sendto {:.2}, writev {:.2}, epoll_wait {:.2} ({calls:?})",
            per_event("recvmsg"),
            per_event("sendto"),
            per_event("writev"),
            per_event("epoll_wait")
        );
        // At most one stamped read per event (5 ms apart; fewer where a
        // busy host let several arrive before the read), and never one
        // that finds nothing: with the readiness kept after a short read,
        // every read was followed by an EAGAIN one (1.96 per event).
        let reads = per_event("recvmsg");
        let (all, empty) = calls.get("recvmsg").copied().unwrap_or_default();
        assert!(
            (0.25..1.2).contains(&reads),
            "{socket}: {reads:.2} stamped upstream reads per event, want at most one ({summary})"
        );
        assert!(
            empty * 20.0 <= all,
            "{socket}: {empty} of {all} upstream reads found nothing ({summary})"
        );
        // The warm-up's upstream connection serves every stream (pooled
        // also through the timed socket), and taking it from the pool asks
        // the kernel nothing: pingora asked `getpeername` on every reuse
        // (pingora-core 0005; the client's address comes with `accept`).
        let connects = calls.get("connect").map_or(0.0, |c| c.0);
        let peer_names = calls.get("getpeername").map_or(0.0, |c| c.0);
        assert_eq!(
            connects, 0.0,
            "{socket}: new upstream connections ({summary})"
        );
        assert_eq!(peer_names, 0.0, "{socket}: getpeername calls ({summary})");
        drop(proc);
    }
}
