//! The Grafana dashboards and the compose stack (issue 9), proven without a
//! Docker engine:
//!
//! - every dashboard parses, has a unique uid, the four variables, the
//!   datasource variable on every panel, and queries only metrics of the
//!   canonical table (`_bucket`/`_sum`/`_count` only on histograms), with
//!   only labels those metrics have;
//! - a real Prometheus (Debian's) scrapes a running tokentap with five taps
//!   (an attribution chain, a guardrail hop, an output guardrail), the
//!   simulator, two reference gateways, the reference compound app with a
//!   real MCP server and a real Chroma behind their taps, and the compose
//!   stack's own traffic script in front, and every panel query returns data through the HTTP
//!   API — a failure lists the dashboard, panel and query;
//! - promtool accepts the Prometheus config and rules (and the rules'
//!   unit tests); the compose file references only files that exist and
//!   `docker-compose config -q` accepts it.

use crate::support::{free_addr, scratch};
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokentap_core::table::{self, Kind, MetricDef};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dashboards() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(repo().join("dashboards"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        for p in v["panels"].as_array().into_iter().flatten() {
            out.push(p);
            walk(p, out);
        }
    }
    let mut out = Vec::new();
    walk(d, &mut out);
    out
}

/// (dashboard, panel title, expr) of every panel target.
fn queries() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (file, d) in dashboards() {
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((
                        file.clone(),
                        p["title"].as_str().unwrap_or("?").to_string(),
                        e.to_string(),
                    ));
                }
            }
        }
    }
    out
}

/// A query as Prometheus gets it: Grafana's variables substituted.
fn substitute(expr: &str) -> String {
    let mut e = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "5m");
    for v in ["tap", "boundary", "model", "hop"] {
        e = e
            .replace(&format!("${{{v}}}"), ".*")
            .replace(&format!("${v}"), ".*");
    }
    e
}

const PROMQL_WORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "histogram_quantile",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "quantile_over_time",
    "time",
    "vector",
    "scalar",
    "abs",
    "clamp",
    "clamp_min",
    "clamp_max",
    "label_replace",
    "label_join",
    "absent",
    "absent_over_time",
    "changes",
    "resets",
    "round",
    "sort",
    "sort_desc",
    "timestamp",
    "inf",
    "nan",
    "label_values",
    "query_result",
    "le",
];

/// PromQL's grouping and matching modifiers, each followed by a label list.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// One metric reference in an expression: its name and selector labels.
#[derive(Debug)]
struct Ref {
    name: String,
    labels: Vec<String>,
}

/// The metric references and the grouping labels (`by (...)` and the like)
/// of a PromQL expression. String literals and range selectors are skipped.
fn parse(expr: &str) -> (Vec<Ref>, Vec<String>) {
    let b: Vec<char> = expr.chars().collect();
    let (mut refs, mut grouping) = (Vec::new(), Vec::new());
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < b.len() {
        let c = b[i];
        if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            while i < b.len() && b[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            let mut j = i;
            while j < b.len() && b[j] == ' ' {
                j += 1;
            }
            let next = b.get(j).copied();
            if GROUPING.contains(&word.as_str()) && next == Some('(') {
                let close = (j..b.len()).find(|k| b[*k] == ')').unwrap_or(b.len());
                let inside: String = b[j + 1..close].iter().collect();
                grouping.extend(
                    inside
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty()),
                );
                i = close + 1;
                continue;
            }
            if PROMQL_WORDS.contains(&word.as_str())
                || GROUPING.contains(&word.as_str())
                || next == Some('(')
            {
                continue;
            }
            let mut labels = Vec::new();
            if next == Some('{') {
                let close = (j..b.len()).find(|k| b[*k] == '}').unwrap_or(b.len());
                let sel: String = b[j + 1..close].iter().collect();
                for m in sel.split(',') {
                    let name: String = m.trim().chars().take_while(|c| ident(*c)).collect();
                    if !name.is_empty() {
                        labels.push(name);
                    }
                }
                i = close + 1;
            }
            refs.push(Ref { name: word, labels });
        } else {
            i += 1;
        }
    }
    (refs, grouping)
}

/// The table entry a series name belongs to, and whether it is a
/// histogram's `_bucket`.
fn def_of(name: &str) -> Option<(&'static MetricDef, bool)> {
    if let Some(d) = table::ALL.iter().find(|d| d.name == name) {
        return Some((d, false));
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(d) = table::ALL
                .iter()
                .find(|d| d.name == base && d.kind == Kind::Histogram)
            {
                return Some((d, suffix == "_bucket"));
            }
        }
    }
    None
}

fn check_expr(where_: &str, expr: &str, problems: &mut Vec<String>) {
    let (refs, grouping) = parse(expr);
    if refs.is_empty() {
        problems.push(format!("{where_}: no metric in `{expr}`"));
    }
    let mut all_labels: HashSet<&str> = ["job", "instance"].into_iter().collect();
    for r in &refs {
        if r.name == "up" {
            continue; // Prometheus's own per-target series
        }
        let Some((def, bucket)) = def_of(&r.name) else {
            problems.push(format!(
                "{where_}: `{}` is no metric of the canonical table",
                r.name
            ));
            continue;
        };
        let mut have: HashSet<&str> = def.labels.iter().map(|l| l.as_str()).collect();
        have.extend(["job", "instance"]);
        if bucket {
            have.insert("le");
        }
        for l in &r.labels {
            if !have.contains(l.as_str()) {
                problems.push(format!("{where_}: `{}` has no label `{l}`", r.name));
            }
        }
        all_labels.extend(have);
    }
    for g in &grouping {
        if !all_labels.contains(g.as_str()) {
            problems.push(format!(
                "{where_}: groups by `{g}`, which no metric of the query has"
            ));
        }
    }
}

#[test]
fn dashboards_are_valid_and_query_only_canonical_metrics() {
    let all = dashboards();
    assert!(all.len() >= 3, "overview, boundaries and methodology");
    let mut problems = Vec::new();
    let mut uids = HashSet::new();
    for (file, d) in &all {
        let uid = d["uid"].as_str().unwrap_or_default();
        assert!(!uid.is_empty(), "{file}: no uid");
        assert!(uids.insert(uid.to_string()), "{file}: uid {uid} used twice");
        assert!(
            d.get("__inputs").is_none(),
            "{file}: an 'export for sharing' file"
        );
        let vars: BTreeSet<&str> = d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for v in ["datasource", "tap", "boundary", "model"] {
            assert!(vars.contains(v), "{file}: no `{v}` variable ({vars:?})");
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if let Some(q) = v["query"]["query"].as_str().or(v["query"].as_str()) {
                if let Some(inner) = q.strip_prefix("label_values(") {
                    // label_values(selector, label): the label must be one
                    // of the selector's metric.
                    let inner = inner.trim_end_matches(')');
                    let (sel, label) = inner.rsplit_once(',').unwrap_or((inner, ""));
                    let with_label = format!("sum by ({}) ({sel})", label.trim());
                    check_expr(
                        &format!("{file} variable {}", v["name"]),
                        &with_label,
                        &mut problems,
                    );
                }
            }
        }
        for p in panels(d) {
            if p["type"] == "row" {
                continue;
            }
            let title = p["title"].as_str().unwrap_or("?");
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "{file} / {title}: panel datasource"
            );
            for t in p["targets"].as_array().into_iter().flatten() {
                let e = t["expr"].as_str().unwrap_or_default();
                check_expr(&format!("{file} / {title}"), &substitute(e), &mut problems);
            }
        }
    }
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/rules.yml")).unwrap();
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rules).unwrap();
    for g in rules["groups"].as_sequence().into_iter().flatten() {
        for r in g["rules"].as_sequence().into_iter().flatten() {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            check_expr(
                &format!("rule {name}"),
                r["expr"].as_str().unwrap_or_default(),
                &mut problems,
            );
        }
    }
    println!(
        "dashboards: {} files, {} queries checked",
        all.len(),
        queries().len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_query_parser_finds_metrics_labels_and_groupings() {
    let (refs, grouping) = parse(
        r#"histogram_quantile(0.99, sum by (le, tap) (rate(gen_ai_server_time_to_first_token_seconds_bucket{tap=~".*", model!="x{y}"}[1m])))"#,
    );
    assert_eq!(refs.len(), 1);
    assert_eq!(
        refs[0].name,
        "gen_ai_server_time_to_first_token_seconds_bucket"
    );
    assert_eq!(refs[0].labels, ["tap", "model"]);
    assert_eq!(grouping, ["le", "tap"]);
    let mut problems = Vec::new();
    check_expr(
        "t",
        r#"sum(rate(tokentap_requests_total{colour="x"}[1m]))"#,
        &mut problems,
    );
    check_expr("t", "tokentap_no_such_metric", &mut problems);
    check_expr(
        "t",
        "rate(tokentap_requests_total_bucket[1m])",
        &mut problems,
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("promtool: `make deps` installs it (Debian package prometheus)");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_prometheus_config_and_rules() {
    promtool(&["check", "config", "deploy/prometheus/prometheus.yml"]);
    promtool(&["check", "rules", "deploy/prometheus/rules.yml"]);
    promtool(&["test", "rules", "deploy/prometheus/rules_test.yml"]);
    promtool(&["check", "rules", "deploy/prometheus/fleet-rules.yml"]);
    promtool(&["test", "rules", "deploy/prometheus/fleet-rules_test.yml"]);
}

#[test]
fn the_compose_file_is_valid_and_references_only_files_that_exist() {
    let text = std::fs::read_to_string(repo().join("docker-compose.yml")).unwrap();
    let c: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let services = c["services"].as_mapping().expect("services");
    let mut checked = 0;
    for (name, s) in services {
        let name = name.as_str().unwrap_or("?");
        if let Some(image) = s["image"].as_str() {
            let tag = image.rsplit_once(':').map(|x| x.1).unwrap_or("");
            assert!(
                !tag.is_empty() && tag != "latest",
                "{name}: image {image} is not pinned"
            );
        }
        if let Some(ctx) = s["build"]["context"].as_str().or(s["build"].as_str()) {
            assert!(
                repo().join(ctx).join("Dockerfile").is_file(),
                "{name}: no Dockerfile in {ctx}"
            );
            checked += 1;
        }
        for v in s["volumes"].as_sequence().into_iter().flatten() {
            let src = v.as_str().map(|v| v.split(':').next().unwrap_or(""));
            if let Some(src) = src.filter(|s| s.starts_with("./")) {
                assert!(
                    repo().join(src).exists(),
                    "{name}: volume {src} does not exist"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 4,
        "the compose file should mount configs and build the image"
    );
    let out = Command::new("docker-compose")
        .args(["-f", "docker-compose.yml", "config", "-q"])
        .current_dir(repo())
        .output()
        .expect("docker-compose: `make deps` installs it (Debian package docker-compose)");
    assert!(
        out.status.success(),
        "docker-compose config -q:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The tokentap config the stack runs is a valid config (host names are
    // compose services; validated here with them on loopback).
    let cfg = std::fs::read_to_string(repo().join("config/compose.yaml")).unwrap();
    let mut local = cfg.clone();
    for host in [
        "gateway-guarded",
        "gateway",
        "engine",
        "guard",
        "otel-collector",
        "app",
        "mcp",
        "chroma",
    ] {
        local = local.replace(&format!("//{host}:"), "//127.0.0.1:");
    }
    tokentap_proxy::config::Config::from_yaml(&local, Path::new("."))
        .unwrap_or_else(|e| panic!("config/compose.yaml: {e}"));
}

/// Child processes killed (with their process groups) when dropped.
#[derive(Default)]
pub struct Procs(Vec<Child>);

impl Procs {
    pub fn spawn(&mut self, cmd: &mut Command) {
        self.spawn_with_stderr(cmd, Stdio::null());
    }

    /// Like `spawn`, its standard error written to `log` (for
    /// `wait_listening_or_show`).
    pub fn spawn_logged(&mut self, cmd: &mut Command, log: &std::path::Path) {
        let file = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        self.spawn_with_stderr(cmd, file.into());
    }

    fn spawn_with_stderr(&mut self, cmd: &mut Command, stderr: Stdio) {
        use std::os::unix::process::CommandExt;
        let child = cmd
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        self.0.push(child);
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn wait_listening(addr: SocketAddr, what: &str) {
    wait_for(addr, what, None);
}

/// `wait_listening`, failing with the end of the process's log.
pub fn wait_listening_or_show(addr: SocketAddr, what: &str, log: &std::path::Path) {
    wait_for(addr, what, Some(log));
}

fn wait_for(addr: SocketAddr, what: &str, log: Option<&std::path::Path>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            let Some(log) = log else {
                panic!("{what} did not listen on {addr}");
            };
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{what} did not listen on {addr}; its log ends:\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Debian's Prometheus on `prom`, with `dir/prometheus.yml` as its config
/// and `dir/data` as its storage, once it listens.
pub fn start_prometheus(procs: &mut Procs, dir: &std::path::Path, prom: SocketAddr) {
    procs.spawn(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom}")),
    );
    wait_listening(prom, "prometheus");
}

/// `GET path` on Prometheus's HTTP API → the JSON answer.
pub async fn prom_get(prom: SocketAddr, path_and_query: &str) -> Value {
    let r = tokentap_net::client::send(prom, "GET", path_and_query, &[], b"")
        .await
        .unwrap();
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_data_from_a_real_prometheus() {
    let _g = crate::support::serial().await;
    let bin = env!("CARGO_BIN_EXE_tokentap");
    let scratch = scratch("dash");
    let dir = scratch.path();
    let collector = crate::collector::Collector::start(crate::collector::Mode::Ok);
    let [sim, guard_sim, gw, gw2, edge, gw_tap, gw_out, engine, guard, admin, prom] =
        std::array::from_fn::<SocketAddr, 11, _>(|_| free_addr());
    // The compound row: the reference app (passing no trace on: its calls
    // are joined by links) behind a compound tap, a real MCP server and a
    // real Chroma behind a tool and a retrieval tap.
    let [app, app_tap, mcp_tap, vectors_tap] =
        std::array::from_fn::<SocketAddr, 4, _>(|_| free_addr());
    let (_mcp, mcp) = crate::tools::mcp_server("streamable-http", &["--json"]);
    let (_chroma, chroma) = crate::tools::chroma(dir);
    let mut procs = Procs::default();
    procs.spawn(Command::new(bin).args([
        "sim",
        "--listen",
        &sim.to_string(),
        "--ttft-ms",
        "50",
        "--itl-ms",
        "15",
        "--itl-jitter-ms",
        "3",
        "--prefill-ms-per-1k",
        "4",
        "--cached-prefill-ms-per-1k",
        "0.4",
        "--prefix-cache",
        "--template-tokens",
        "16",
        "--batch-slowdown",
        "0.4",
        "--kv-capacity-tokens",
        "60000",
        "--continuous-usage",
        "true",
        "--favour-tenant",
        "tenant-0-key",
        "--output-tokens",
        "32",
    ]));
    procs.spawn(Command::new(bin).args([
        "sim",
        "--listen",
        &guard_sim.to_string(),
        "--ttft-ms",
        "25",
        "--model",
        "guard",
    ]));
    let http = |a: SocketAddr| format!("http://{a}");
    procs.spawn(Command::new(bin).args([
        "gateway",
        "--listen",
        &gw.to_string(),
        "--engine",
        &http(engine),
        "--guardrail",
        &http(guard),
    ]));
    procs.spawn(Command::new(bin).args([
        "gateway",
        "--listen",
        &gw2.to_string(),
        "--engine",
        &http(engine),
        "--guardrail",
        &http(guard),
        "--output-guardrail",
    ]));
    // config/compose.yaml's shape on loopback ports, with the default
    // correlation settle time (input guardrail calls must still join).
    let config = format!(
        "admin:\n  listen: {admin}\notlp:\n  endpoint: http://{otlp}\n  interval_seconds: 5\nanalysis:\n  window_seconds: 15\n  slo:\n    ttft_ms: 1000\n    tpot_ms: 50\n  engines:\n    - name: engine\n      url: http://{sim}/metrics\n      interval_seconds: 2\ntaps:\n  - {{name: edge, boundary: compound, listen: \"{edge}\", upstream: \"http://{gw_tap}\"}}\n  - {{name: gw, boundary: gateway, listen: \"{gw_tap}\", upstream: \"http://{gw}\"}}\n  - {{name: gw-outguard, boundary: gateway, listen: \"{gw_out}\", upstream: \"http://{gw2}\"}}\n  - {{name: engine, boundary: engine, listen: \"{engine}\", upstream: \"http://{sim}\"}}\n  - {{name: guard, boundary: guardrail, hop: moderation, listen: \"{guard}\", upstream: \"http://{guard_sim}\"}}\n  - {{name: app, boundary: compound, listen: \"{app_tap}\", upstream: \"http://{app}\"}}\n  - {{name: mcp, boundary: tool, listen: \"{mcp_tap}\", upstream: \"http://{mcp}\"}}\n  - {{name: vectors, boundary: retrieval, listen: \"{vectors_tap}\", upstream: \"http://{chroma}\"}}\n",
        otlp = collector.addr
    );
    let cfg_path = dir.join("tokentap.yaml");
    std::fs::write(&cfg_path, config).unwrap();
    for (a, what) in [
        (sim, "sim"),
        (guard_sim, "guard sim"),
        (gw, "gateway"),
        (gw2, "gateway"),
    ] {
        wait_listening(a, what);
    }
    let log = dir.join("tokentap.log");
    procs.spawn_logged(
        Command::new(bin)
            .args(["run", "--log", "warn", "-c"])
            .arg(&cfg_path),
        &log,
    );
    wait_listening_or_show(admin, "tokentap", &log);
    procs.spawn(Command::new(bin).args([
        "app",
        "--listen",
        &app.to_string(),
        "--llm",
        &gw_tap.to_string(),
        "--mcp",
        &mcp_tap.to_string(),
        "--retrieval",
        &vectors_tap.to_string(),
        "--strip-traceparent",
    ]));
    wait_listening(app, "the reference app");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: tokentap\n    static_configs:\n      - targets: [\"{admin}\"]\n"
        ),
    )
    .unwrap();
    start_prometheus(&mut procs, dir, prom);
    // The compose stack's own traffic script.
    procs.spawn(
        Command::new("sh")
            .arg(repo().join("deploy/driver.sh"))
            .env("TARGET", http(edge))
            .env("GUARDED_TARGET", http(gw_out))
            .env("APP_TARGET", http(app_tap))
            .env("TOKENTAP", bin),
    );
    let all = queries();
    let started = Instant::now();
    let mut empty: Vec<&(String, String, String)>;
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        empty = Vec::new();
        for q in &all {
            let v = prom_get(
                prom,
                &format!("/api/v1/query?query={}", enc(&substitute(&q.2))),
            )
            .await;
            let n = v["data"]["result"].as_array().map_or(0, Vec::len);
            if v["status"] != "success" || n == 0 {
                empty.push(q);
            }
        }
        println!(
            "dashboards: after {:.0} s, {} of {} panel queries return data",
            started.elapsed().as_secs_f64(),
            all.len() - empty.len(),
            all.len()
        );
        if empty.is_empty() || started.elapsed() > Duration::from_secs(150) {
            break;
        }
    }
    let list: Vec<String> = empty
        .iter()
        .map(|(d, p, e)| format!("{d} / {p}: {e}"))
        .collect();
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}",
        list.join("\n")
    );
    // Input guardrail calls joined the requests they guard (default settle
    // time, streams longer than it).
    let joined = prom_get(
        prom,
        &format!(
            "/api/v1/query?query={}",
            enc("sum(tokentap_guardrail_calls_total{phase=\"input\"})")
        ),
    )
    .await;
    let unknown = prom_get(
        prom,
        &format!(
            "/api/v1/query?query={}",
            enc("sum(tokentap_guardrail_calls_total{phase=\"unknown\"}) or vector(0)")
        ),
    )
    .await;
    let value = |v: &Value| -> f64 {
        v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0)
    };
    println!(
        "guardrail calls: {} joined as input, {} unknown",
        value(&joined),
        value(&unknown)
    );
    assert!(value(&joined) > 10.0 * value(&unknown).max(1.0) || value(&unknown) == 0.0);
    drop(procs);
}
