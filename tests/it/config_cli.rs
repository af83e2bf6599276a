//! The command line and config files: every example validates, mistakes are
//! clear errors naming the key with a non-zero exit, a taken port is found
//! at `run`, and every subcommand has `--help`.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tokentap_proxy::config::Config;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_config_file_validates() {
    let _g = serial_blocking();
    let mut n = 0;
    for entry in std::fs::read_dir(repo("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        // The compose stack's config names compose services as hosts; it::
        // dashboards validates it with them on loopback.
        if path.file_name().is_some_and(|f| f == "compose.yaml") {
            continue;
        }
        Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = bin().arg("validate").arg("-c").arg(&path).output().unwrap();
        assert!(out.status.success(), "{}: {}", path.display(), text(&out));
        n += 1;
    }
    assert!(n >= 3, "config/ holds the examples");
}

fn write_temp(name: &str, yaml: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tokentap-{}-{name}.yaml", std::process::id()));
    std::fs::write(&p, yaml).unwrap();
    p
}

#[test]
fn mistakes_are_clear_errors_with_a_nonzero_exit() {
    let _g = serial_blocking();
    let minimal = std::fs::read_to_string(repo("config/minimal.yaml")).unwrap();
    let cases = [
        (
            "unknown-key",
            minimal.replace("upstream:", "upsteam:"),
            "taps[0]: unknown field `upsteam`",
        ),
        (
            "unresolvable",
            minimal.replace("127.0.0.1:8000", "no-such-host.invalid:8000"),
            "taps[0].upstream: cannot resolve host `no-such-host.invalid`",
        ),
        (
            "boundary",
            minimal.replace("boundary: engine ", "boundary: edge "),
            "taps[0].boundary: unknown variant `edge`",
        ),
        (
            "address",
            minimal.replace("listen: 127.0.0.1:8080", "listen: 127.0.0.1"),
            "taps[0].listen",
        ),
    ];
    for (name, yaml, needle) in cases {
        let path = write_temp(name, &yaml);
        let out = bin().arg("validate").arg("-c").arg(&path).output().unwrap();
        assert!(!out.status.success(), "{name} must fail");
        assert!(text(&out).contains(needle), "{name}: {}", text(&out));
        assert!(!text(&out).contains("panicked"), "{name}");
        std::fs::remove_file(path).ok();
    }
    let out = bin()
        .arg("validate")
        .arg("-c")
        .arg("/no/such/file.yaml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("cannot read"));
}

#[test]
fn a_taken_port_is_a_clear_error_at_run() {
    let _g = serial_blocking();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let yaml = format!(
        "admin:\n  listen: {}\ntaps:\n  - name: e\n    boundary: engine\n    listen: 127.0.0.1:{port}\n    upstream: http://127.0.0.1:9\n",
        free_addr()
    );
    let path = write_temp("taken", &yaml);
    let mut child = bin()
        .arg("run")
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("run did not exit on a taken port");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains(&format!(
            "taps[0].listen: cannot listen on 127.0.0.1:{port}"
        )),
        "{}",
        text(&out)
    );
    std::fs::remove_file(path).ok();
}

#[test]
fn every_subcommand_has_help() {
    let _g = serial_blocking();
    for sub in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["validate", "--help"],
        vec!["sim", "--help"],
        vec!["demo", "--help"],
        vec!["drive", "--help"],
        vec!["bench", "--help"],
    ] {
        let out = bin().args(&sub).output().unwrap();
        assert!(out.status.success(), "{sub:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{sub:?}"
        );
    }
    let out = bin().args(["sim", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--fault",
        "--prefill-ms-per-1k",
        "--batch-slowdown",
        "--prefix-cache",
        "--kv-capacity-tokens",
        "--favour-tenant",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
    let out = bin().args(["drive", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--workload",
        "--concurrency-steps",
        "--rate",
        "--summary-json",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
}
