//! No credential in any log line, whatever `RUST_LOG` says: the cap on
//! pingora's and the HTTP crates' debug and trace logs holds for every
//! module below them (`tokentap::logging`). A tap process runs with the
//! filters that leaked before the cap applied per target, then with every
//! module path of every pingora crate at `trace`, while HTTP/1.1 and h2c
//! clients send every credential header and a prompt canary, and the
//! admin listener is asked with one too.

use crate::support::*;
use bytes::Bytes;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokentap_sim::Profile;

const PROMPT: &str = "CANARY-PROMPT-51c2";
const KEY: &str = "CANARY-KEY-e84b";

/// `crate::module::path` of every source file under `src`.
fn module_paths(krate: &str, src: &Path, out: &mut Vec<String>) {
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let mut path = krate.to_string();
            for part in parts {
                path.push_str("::");
                path.push_str(&part);
            }
            out.push(path);
        }
    }
}

/// Every module path of every pingora crate tokentap builds: the vendored
/// ones and the published ones in cargo's registry.
fn pingora_module_paths() -> Vec<String> {
    let mut out = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("vendor"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    if let Ok(registries) = std::fs::read_dir(cargo_home.join("registry/src")) {
        for reg in registries.flatten() {
            for e in std::fs::read_dir(reg.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("pingora") && name.ends_with("-0.9.1") {
                    dirs.push(e.path());
                }
            }
        }
    }
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(krate) = name.strip_suffix("-0.9.1").or(Some(&name)) else {
            continue;
        };
        if !krate.starts_with("pingora") || !dir.join("src").is_dir() {
            continue;
        }
        module_paths(&krate.replace('-', "_"), &dir.join("src"), &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// Runs a tap process with `filter` as RUST_LOG, sends credentials and a
/// prompt through HTTP/1.1 and h2c and to the admin listener; returns
/// everything it logged.
async fn logs_with(filter: &str) -> String {
    let behind = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 4,
        ..Profile::default()
    });
    let (tap, admin) = (free_addr(), free_addr());
    let scratch = scratch("logs");
    let path = scratch.path().join("tokentap.yaml");
    std::fs::write(
        &path,
        format!(
            "admin:\n  listen: {admin}\ntaps:\n  - name: l\n    boundary: gateway\n    listen: {tap}\n    upstream: http://{}\n    h2c: true\n",
            behind.addr
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["run", "-c"])
        .arg(&path)
        .env("RUST_LOG", filter)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut child = KillOnDrop(child);
    crate::process::wait_ready(admin, "tokentap").await;
    let auth = format!("Bearer {KEY}");
    let cookie = format!("session={KEY}");
    let headers = [
        ("authorization", auth.as_str()),
        ("proxy-authorization", auth.as_str()),
        ("x-api-key", KEY),
        ("api-key", KEY),
        ("x-goog-api-key", KEY),
        ("cookie", cookie.as_str()),
    ];
    let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": PROMPT}]}).to_string();
    let r = tokentap_net::client::send(
        tap,
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let r = tokentap_net::client::send(admin, "GET", "/metrics", &headers, b"")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // h2c, the same headers.
    let tcp = tokio::net::TcpStream::connect(tap).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut h2 = h2.ready().await.unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{tap}/v1/chat/completions"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let (resp, mut send) = h2.send_request(req.body(()).unwrap(), false).unwrap();
    send.send_data(Bytes::from(body), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.into_body();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.unwrap();
        let _ = stream.flow_control().release_capacity(chunk.len());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap();
    let _ = child.0.wait();
    String::from_utf8_lossy(&[out.join().unwrap(), err.join().unwrap()].concat()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_in_any_log_line_whatever_rust_log_says() {
    let _g = serial().await;
    let paths = pingora_module_paths();
    for must in [
        "pingora_proxy::proxy_h1",
        "pingora_core::protocols::http::v1::client",
        "pingora_core::apps::http_app",
    ] {
        assert!(
            paths.iter().any(|p| p == must),
            "{must} in {} paths",
            paths.len()
        );
    }
    let every: String = std::iter::once("trace".to_string())
        .chain(paths.iter().map(|p| format!("{p}=trace")))
        .collect::<Vec<_>>()
        .join(",");
    for filter in [
        // The module-level filters that printed credentials while the cap
        // was one directive per crate (a more specific one won).
        "info,pingora_proxy::proxy_h1=debug",
        "info,pingora_core::protocols::http::v1::client=trace",
        "info,pingora_core::apps::http_app=trace",
        "trace,pingora_proxy=trace,pingora_core=trace,h2=trace,hyper=trace",
        every.as_str(),
    ] {
        let logs = logs_with(filter).await;
        let shown = if filter.len() > 80 {
            format!("every one of {} pingora module paths at trace", paths.len())
        } else {
            filter.to_string()
        };
        assert!(
            logs.contains("tokentap ready") || logs.contains("INFO"),
            "{shown}: logs were written:\n{logs}"
        );
        for canary in [KEY, PROMPT] {
            let leaked: Vec<&str> = logs.lines().filter(|l| l.contains(canary)).collect();
            assert!(
                leaked.is_empty(),
                "{shown}: {canary} in {} lines, e.g. {:?}",
                leaked.len(),
                leaked.first()
            );
        }
        println!("{shown}: {} log lines, no canary", logs.lines().count());
    }
}
