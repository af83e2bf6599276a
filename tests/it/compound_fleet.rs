//! The compound system across machines: the reference app, the gateway,
//! the engine (simulator), the MCP server and Chroma each on a machine of
//! its own (a network namespace, `netns`) with a tokentap sidecar in front,
//! every tap its own process sending its spans to one joiner. The joiner's
//! breakdown of each request — from spans alone, joined by trace id where
//! the app passes `traceparent` on and by the links where it does not —
//! must recover what the app measured of each kind of call within 1 ms at
//! p50, as the one-process breakdown does (`it::compound`).

use crate::compound::{ask, ms};
use crate::netns::{Netns, Procs};
use crate::support::*;
use crate::tools::{python, script};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokentap_core::correlate::compound::{Breakdown, Part};
use tokentap_join::config::JoinConfig;
use tokentap_join::Joiner;

/// One tokentap process's config: its taps (YAML entries), its spans to
/// the joiner at `otlp`, its admin endpoint.
fn tap_process(taps: &str, admin: SocketAddr, otlp: SocketAddr) -> String {
    format!(
        "admin:\n  listen: {admin}\notlp:\n  endpoint: http://{otlp}\n  metrics: false\n  interval_seconds: 0.2\n  timeout_seconds: 2\ntaps:\n{taps}"
    )
}

fn wait_ready(addr: SocketAddr, what: &str) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(crate::process::wait_200(
            addr,
            "/readyz",
            Duration::from_secs(30),
            what,
        ));
}

fn truth(app: SocketAddr, id: &str) -> serde_json::Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt
        .block_on(tokentap_net::client::send(
            app,
            "GET",
            &format!("/truth/{id}"),
            &[],
            b"",
        ))
        .unwrap();
    serde_json::from_slice(&r.body).unwrap()
}

fn joined(a: &Attributions, id: &str) -> Breakdown {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(b) = a.compound_of(id) {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "the joiner gave no breakdown of {id}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}.log"))
}

#[test]
fn a_compound_system_on_five_machines_is_broken_down_by_the_joiner_within_1ms() {
    let _g = serial_blocking();
    let net = Netns::new(&["app", "gw", "eng", "mcp", "vec"]);
    let (app, gw, eng, mcp, vec) = (0, 1, 2, 3, 4);
    // The joiner, in this process, on the bridge.
    let yaml = format!(
        "receiver:\n  grpc_listen: {}\n  http_listen: {}\nadmin:\n  listen: {}\ncorrelation:\n  settle_seconds: 1.0\n",
        net.root_sock(14317),
        net.root_sock(14318),
        net.root_sock(19465)
    );
    let got = std::sync::Arc::new(Attributions::default());
    let joiner = Joiner::start(&JoinConfig::from_yaml(&yaml).unwrap(), vec![got.clone()]).unwrap();
    let otlp = net.root_sock(14318);

    let scratch = scratch("compound-fleet");
    let dir = scratch.path();
    let bin = env!("CARGO_BIN_EXE_tokentap");
    let local = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let write = |name: &str, text: String| {
        let p = dir.join(format!("{name}.yaml"));
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let run_taps = |h: usize, name: &str, taps: String| {
        let cfg = write(name, tap_process(&taps, net.sock(h, 9464), otlp));
        net.spawn_logged(h, bin, &["run", "-c", &cfg], &log(dir, name))
    };
    let s = |a: SocketAddr| a.to_string();
    let chroma = python().with_file_name("chroma");
    let data = dir.join("chroma");
    let home = format!("HOME={}", dir.display());
    let mut procs = Procs(vec![
        // The services, each on its machine's loopback.
        net.spawn_logged(
            eng,
            bin,
            &[
                "sim",
                "--listen",
                &s(local(8000)),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "2",
                "--output-tokens",
                "8",
            ],
            &log(dir, "sim"),
        ),
        net.spawn_logged(
            gw,
            bin,
            &[
                "gateway",
                "--listen",
                &s(local(8000)),
                "--engine",
                &format!("http://{}", net.sock(eng, 8080)),
                "--input-guards",
                "0",
                "--processing-ms",
                "2",
            ],
            &log(dir, "gateway"),
        ),
        net.spawn_logged(
            mcp,
            python().to_str().unwrap(),
            &[
                script("mcp_server.py").to_str().unwrap(),
                "streamable-http",
                "8000",
                "--json",
                "--allow-host",
                &s(net.sock(mcp, 8080)),
            ],
            &log(dir, "mcp"),
        ),
        net.spawn_logged(
            vec,
            "env",
            &[
                &home,
                "ANONYMIZED_TELEMETRY=False",
                chroma.to_str().unwrap(),
                "run",
                "--host",
                "127.0.0.1",
                "--port",
                "8000",
                "--path",
                data.to_str().unwrap(),
            ],
            &log(dir, "chroma"),
        ),
        // A sidecar in front of each.
        run_taps(
            eng,
            "engine",
            tap_yaml("engine", "engine", net.sock(eng, 8080), local(8000), ""),
        ),
        run_taps(
            gw,
            "gw",
            tap_yaml("gw", "gateway", net.sock(gw, 8080), local(8000), ""),
        ),
        run_taps(
            mcp,
            "mcp",
            tap_yaml("mcp", "tool", net.sock(mcp, 8080), local(8000), ""),
        ),
        run_taps(
            vec,
            "vectors",
            tap_yaml("vectors", "retrieval", net.sock(vec, 8080), local(8000), ""),
        ),
    ]);
    for (h, what) in [(eng, "engine"), (gw, "gw"), (mcp, "mcp"), (vec, "vectors")] {
        wait_ready(net.sock(h, 9464), what);
    }
    for (h, port) in [(eng, 8000), (gw, 8000), (mcp, 8000), (vec, 8000)] {
        net.wait_local_port(h, port, 60);
    }
    // Two instances of the app on its machine: one passes `traceparent`
    // on, one does not; a compound tap in front of each (the second
    // creates no trace: nothing carries one).
    let apps = [net.sock(app, 3100), net.sock(app, 3101)];
    for (i, strip) in [(0, false), (1, true)] {
        let listen = s(apps[i]);
        let (llm, tool, vectors) = (
            s(net.sock(gw, 8080)),
            s(net.sock(mcp, 8080)),
            s(net.sock(vec, 8080)),
        );
        let mut args = vec![
            "app",
            "--listen",
            &listen,
            "--llm",
            &llm,
            "--mcp",
            &tool,
            "--retrieval",
            &vectors,
            "--before-ms",
            "5",
            "--between-ms",
            "7",
        ];
        if strip {
            args.push("--strip-traceparent");
        }
        procs
            .0
            .push(net.spawn_logged(app, bin, &args, &log(dir, &format!("app{i}"))));
    }
    let taps = [
        tap_yaml("app", "compound", net.sock(app, 8080), apps[0], ""),
        tap_yaml(
            "app-untraced",
            "compound",
            net.sock(app, 8081),
            apps[1],
            "    trace: propagate\n",
        ),
    ]
    .concat();
    procs.0.push(run_taps(app, "app", taps));
    wait_ready(net.sock(app, 9464), "app");

    let n = 10;
    for (front, app_addr, tag) in [
        (net.sock(app, 8080), apps[0], "fleet-traced"),
        (net.sock(app, 8081), apps[1], "fleet-untraced"),
    ] {
        // The app's first request also opens its connections: not measured.
        let deadline = Instant::now() + Duration::from_secs(60);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        loop {
            let body = serde_json::json!({"model": "sim-model", "stream": true,
                "messages": [{"role": "user", "content": "warm"}]})
            .to_string();
            let r = rt.block_on(post(
                front,
                &[("x-request-id", &format!("{tag}-warm"))],
                body.as_bytes(),
            ));
            if r.status == 200 {
                break;
            }
            if Instant::now() > deadline {
                for name in [
                    "app0", "app1", "app", "gw", "mcp", "vectors", "chroma", "gateway",
                ] {
                    let text = std::fs::read_to_string(log(dir, name)).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    eprintln!(
                        "--- {name}.log (last lines, newest first)\n{}",
                        tail.join("\n")
                    );
                }
                panic!("the app never answered {tag} (status {})", r.status);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut errors: Vec<[f64; 4]> = Vec::new();
        for i in 0..n {
            let id = format!("{tag}-{i}");
            ask(front, &id, "Paris");
            let b = joined(&got, &id);
            let t = truth(app_addr, &id);
            let f = |k: &str| t[k].as_f64().unwrap();
            assert_eq!(b.by_links, tag.ends_with("untraced"), "{id}");
            assert_eq!(
                (b.llm_calls.len(), b.tool_calls, b.retrieval_calls),
                (2, 1, 1),
                "{id}"
            );
            let ttft = b.ttft.expect("the compound tap saw a first token").total();
            assert!(ttft < b.e2e.total(), "{id}");
            assert!(
                (ms(b.e2e.total()) - f("total_ms")).abs() < 2.0,
                "{id}: E2E {} ms at the tap, {} ms in the app",
                ms(b.e2e.total()),
                f("total_ms")
            );
            errors.push([
                ms(b.e2e.get(Part::Retrieval)) - f("retrieval_ms"),
                ms(b.e2e.get(Part::Tool)) - f("tool_ms"),
                ms(b.e2e.get(Part::Llm)) - f("llm_ms"),
                ms(b.e2e.get(Part::Residual)) - f("own_ms"),
            ]);
        }
        for (k, what) in ["retrieval", "tool", "llm", "residual"].iter().enumerate() {
            let mut v: Vec<f64> = errors.iter().map(|e| e[k]).collect();
            v.sort_by(f64::total_cmp);
            let p50 = v[v.len() / 2];
            println!(
                "{tag} {what}: joiner's breakdown - app p50 {p50:+.3} ms (min {:+.3}, max {:+.3})",
                v[0],
                v[v.len() - 1]
            );
            // Each call within 1 ms (the two LLM calls: 1 ms each). The
            // app counts the hop to each tap and back as call time (~0.4
            // ms a call across these veths), which the residual holds: it
            // may exceed the app's own time by that much per call.
            let bound = match *what {
                "residual" => 1.0 + 0.75 * 4.0,
                "llm" => 2.0,
                _ => 1.0,
            };
            assert!(p50.abs() < bound, "{tag} {what}: p50 error {p50:.3} ms");
        }
    }
    drop(procs);
    drop(joiner);
}
