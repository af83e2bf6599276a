//! A compound system opened up: the reference app (`tokentap app`: a
//! Chroma search, an LLM call that asks for a tool, the MCP tool call, a
//! second LLM call streamed back) behind a compound tap, with a tap in
//! front of every service it calls — a real Chroma, a real MCP server (the
//! official SDK), the reference gateway and the simulator — in one process
//! with the correlator. The app passes `traceparent` on; the breakdown of
//! each request's E2E and TTFT must recover what the app itself measured of
//! each kind of call, and its own time, within 1 ms at p50.

use crate::support::*;
use crate::tools::{chroma, mcp_server, python};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokentap_core::correlate::compound::{Breakdown, Part};
use tokentap_sim::app::{App, AppConfig};
use tokentap_sim::gateway::{Gateway, GatewayConfig};
use tokentap_sim::Profile;

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The LLM side of both stacks: the simulator, and the reference gateway
/// (2 ms of its own) that calls it through an engine tap to be listening
/// at the returned address.
fn llm_chain(strip_traceparent: bool) -> (tokentap_sim::Simulator, Gateway, SocketAddr) {
    let engine = sim(Profile {
        ttft_ms: 20.0,
        itl_ms: 2.0,
        output_tokens: 8,
        ..Profile::default()
    });
    let engine_tap = free_addr();
    let gateway = Gateway::spawn(
        free_addr(),
        GatewayConfig {
            engine: engine_tap.to_string(),
            guard: None,
            input_guards: 0,
            output_guard: false,
            processing: Duration::from_millis(2),
            relay_delay: Duration::ZERO,
            strip_traceparent,
        },
    )
    .unwrap();
    (engine, gateway, engine_tap)
}

/// The app, its services and a tap in front of each, in one process.
pub(crate) struct Stack {
    pub taps: Multi,
    pub collector: crate::collector::Collector,
    pub app: App,
    pub compound: SocketAddr,
    _engine: tokentap_sim::Simulator,
    _gateway: Gateway,
    _mcp: KillOnDrop,
    _chroma: KillOnDrop,
    _dir: tempfile::TempDir,
}

/// `strip_traceparent`: the app passes no trace on; `tap_extra` is added
/// to every tap's config (`"    trace: propagate\n"`: no tap creates one),
/// `{name}` in it replaced by the tap's name.
pub(crate) fn stack(strip_traceparent: bool, tap_extra: &str) -> Stack {
    let dir = scratch("compound");
    let (chroma, chroma_addr) = chroma(dir.path());
    let (mcp, mcp_addr) = mcp_server("streamable-http", &["--json"]);
    let (engine, gateway, eng) = llm_chain(strip_traceparent);
    let [compound, gw, tool, vectors, app_addr] = [(); 5].map(|_| free_addr());
    let extra = |name: &str| tap_extra.replace("{name}", name);
    let taps = [
        tap_yaml("app", "compound", compound, app_addr, &extra("app")),
        tap_yaml("gw", "gateway", gw, gateway.addr, &extra("gw")),
        tap_yaml("engine", "engine", eng, engine.addr, &extra("engine")),
        tap_yaml("mcp", "tool", tool, mcp_addr, &extra("mcp")),
        tap_yaml(
            "vectors",
            "retrieval",
            vectors,
            chroma_addr,
            &extra("vectors"),
        ),
    ]
    .concat();
    let collector = crate::collector::Collector::start(crate::collector::Mode::Ok);
    let top = format!(
        "correlation:\n  settle_seconds: 0.3\notlp:\n  endpoint: http://{}\n  interval_seconds: 0.2\n  timeout_seconds: 1\n",
        collector.addr
    );
    let taps = Multi::start(&taps, &top);
    let app = App::spawn(
        app_addr,
        AppConfig {
            llm: gw.to_string(),
            mcp: tool.to_string(),
            mcp_path: "/mcp".into(),
            retrieval: Some(vectors.to_string()),
            before: Duration::from_millis(5),
            between: Duration::from_millis(7),
            strip_traceparent,
        },
    )
    .unwrap();
    Stack {
        taps,
        collector,
        app,
        compound,
        _engine: engine,
        _gateway: gateway,
        _mcp: mcp,
        _chroma: chroma,
        _dir: dir,
    }
}

pub(crate) fn ask(addr: SocketAddr, id: &str, question: &str) -> Vec<u8> {
    let body = serde_json::json!({"model": "sim-model", "stream": true,
        "messages": [{"role": "user", "content": question}]})
    .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(post(addr, &[("x-request-id", id)], body.as_bytes()));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.complete);
    r.body
}

pub(crate) fn breakdown(taps: &Multi, id: &str) -> Breakdown {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(b) = taps.attributions.compound_of(id) {
            return b;
        }
        assert!(Instant::now() < deadline, "no breakdown for {id}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_agent_requests_time_is_split_into_its_calls_each_kind_within_1ms_of_the_apps_log() {
    let _g = serial_blocking();
    let logs = scratch("compound-logs");
    let s = stack(
        false,
        &format!(
            "    record_log:\n      path: {}/{{name}}.jsonl\n",
            logs.path().display()
        ),
    );
    let n = 12;
    let mut errors: Vec<[f64; 4]> = Vec::new();
    for i in 0..n {
        let id = format!("ask-{i}");
        let body = ask(s.compound, &id, "Paris");
        assert!(
            String::from_utf8_lossy(&body).contains("[DONE]"),
            "the second LLM call's stream reached the client"
        );
        let b = breakdown(&s.taps, &id);
        let truth = s.app.truth_of(&id).expect("the app's own log");
        let record = s.taps.records.of("app", &id).expect("the compound record");
        // Exact: the parts and the residual are the compound tap's figures.
        assert_eq!(b.e2e.total(), record.e2e, "{id}: parts + residual = E2E");
        assert_eq!(Some(b.ttft.unwrap().total()), record.ttft, "{id}: = TTFT");
        // What each call kind took, as the app measured it and as split.
        assert_eq!(
            (b.llm_calls.len(), b.tool_calls, b.retrieval_calls),
            (2, 1, 1)
        );
        assert_eq!(b.iterations.len(), 2);
        let sum = |v: &[(Instant, Instant)]| v.iter().map(|(a, e)| ms(*e - *a)).sum::<f64>();
        let (llm, tool, retrieval) = (sum(&truth.llm), sum(&truth.tool), sum(&truth.retrieval));
        let own = ms(truth.end - truth.received) - llm - tool - retrieval;
        errors.push([
            ms(b.e2e.get(Part::Retrieval)) - retrieval,
            ms(b.e2e.get(Part::Tool)) - tool,
            ms(b.e2e.get(Part::Llm)) - llm,
            ms(b.e2e.get(Part::Residual)) - own,
        ]);
        println!(
            "{id}: e2e {:.2} ms = llm {:.2} + tool {:.2} + retrieval {:.2} + residual {:.2} (app: llm {llm:.2}, tool {tool:.2}, retrieval {retrieval:.2}, own {own:.2}); ttft {:.2}",
            ms(record.e2e),
            ms(b.e2e.get(Part::Llm)),
            ms(b.e2e.get(Part::Tool)),
            ms(b.e2e.get(Part::Retrieval)),
            ms(b.e2e.get(Part::Residual)),
            ms(record.ttft.unwrap()),
        );
    }
    let p50s: Vec<(&str, f64)> = ["retrieval", "tool", "llm", "residual"]
        .iter()
        .enumerate()
        .map(|(k, what)| {
            let mut v: Vec<f64> = errors.iter().map(|e| e[k]).collect();
            v.sort_by(f64::total_cmp);
            let p50 = v[v.len() / 2];
            println!(
                "{what}: breakdown - app p50 {p50:+.3} ms, min {:+.3}, max {:+.3}",
                v[0],
                v[v.len() - 1]
            );
            (*what, p50)
        })
        .collect();
    // Each kind of call within 1 ms at p50. The residual also holds the hop
    // from the app to each service's tap and back (its socket write to the
    // tap's t0, the tap's last byte to the app's read: ~0.4 ms a call on
    // this machine), which the app counts as call time: it may exceed the
    // app's own time by that much per call, never more.
    let calls_per_request = 4.0;
    for (what, p50) in p50s {
        let bound = if what == "residual" {
            1.0 + 0.5 * calls_per_request
        } else {
            1.0
        };
        assert!(
            p50.abs() < bound,
            "{what}: p50 error {p50:.3} ms (bound {bound} ms)"
        );
    }
    // Each request's breakdown is a span in its trace, its parts adding up.
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans: Vec<_> = s
            .collector
            .spans()
            .into_iter()
            .filter(|sp| sp.name == "compound app")
            .collect();
        if spans.len() >= n || Instant::now() > deadline {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(spans.len(), n, "one breakdown span per request");
    for sp in &spans {
        let num = |k: &str| {
            sp.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::DoubleValue(d),
                    ) => Some(*d),
                    _ => None,
                })
                .unwrap_or(f64::NAN)
        };
        let parts: f64 = ["llm", "tool", "retrieval", "guardrail", "residual"]
            .iter()
            .map(|p| num(&format!("tokentap.compound.e2e.{p}")))
            .sum();
        let span_ns = sp.end_time_unix_nano - sp.start_time_unix_nano;
        assert!(
            (parts * 1e9 - span_ns as f64).abs() < 1e3,
            "{parts} s vs {span_ns} ns"
        );
        assert!(num("tokentap.compound.e2e.tool") > 0.05);
    }
    let scrape = s.taps.scrape();
    // (`tokentap_compound_links_total` counts untraced joins only:
    // `compound_links`.)
    crate::scrape::all_present(&scrape, |d| {
        d.name.starts_with("tokentap_compound_") && d.name != "tokentap_compound_links_total"
    });
    let (count, sum, _) = prom_totals(&scrape, "tokentap_compound_part_seconds");
    assert!(count >= (n * 10) as f64, "{count} part observations");
    assert!(sum > 0.0);
    assert!(scrape.contains("tokentap_compound_calls_count{part=\"tool\",tap=\"app\"}"));
    report_of_the_logs(logs.path(), n);
}

/// `tokentap report` over the taps' record logs: the compound tap's
/// requests broken down, stacked, with their calls per request, in the
/// JSON, the Markdown and the HTML chart.
fn report_of_the_logs(dir: &std::path::Path, n: usize) {
    let app_log = dir.join("app.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&app_log).map_or(0, |t| t.lines().count()) < n {
        assert!(
            Instant::now() < deadline,
            "the record logs were not written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs: Vec<std::path::PathBuf> = ["app", "gw", "engine", "mcp", "vectors"]
        .iter()
        .map(|t| dir.join(format!("{t}.jsonl")))
        .collect();
    let out = dir.join("report");
    let status = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("report")
        .args(&logs)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let app = report["taps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["analysis"]["tap"] == "app")
        .expect("the compound tap's section");
    let c = &app["analysis"]["compound"];
    assert_eq!(c["status"], "measured", "{c}");
    assert_eq!(c["requests"], n, "{c}");
    assert_eq!(c["calls_per_request"]["llm"]["2"], n);
    assert_eq!(c["calls_per_request"]["tool"]["1"], n);
    for row in c["e2e"]["rows"].as_array().unwrap() {
        let parts: f64 = row["parts_ms"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!(
            (parts - row["total_ms"].as_f64().unwrap()).abs() < 1e-6,
            "{row}"
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let at = md
        .find("### Compound system: where the time went")
        .expect("the compound section");
    println!("{}", &md[at..]);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("id=\"chart-app-compound\""));
}

/// The same question through an agent built on the OpenAI Agents SDK
/// (`tests/py/agent_app.py`: an OpenAI-compatible model behind the
/// reference gateway, the official MCP server's tools), which passes
/// `traceparent` on as headers: every request is broken down, its two LLM
/// calls and its MCP calls found, the parts adding up to its figures.
#[test]
fn an_agent_built_on_the_openai_agents_sdk_is_broken_down() {
    let _g = serial_blocking();
    let (_mcp, mcp_addr) = mcp_server("streamable-http", &[]);
    let (engine, gateway, eng) = llm_chain(false);
    let [compound, gw, tool, agent] = [(); 4].map(|_| free_addr());
    let taps = [
        tap_yaml("agent", "compound", compound, agent, ""),
        tap_yaml("gw", "gateway", gw, gateway.addr, ""),
        tap_yaml("engine", "engine", eng, engine.addr, ""),
        tap_yaml("mcp", "tool", tool, mcp_addr, ""),
    ]
    .concat();
    let taps = Multi::start(&taps, "correlation:\n  settle_seconds: 0.3\n");
    let mut app = KillOnDrop(
        Command::new(python())
            .arg(crate::tools::script("agent_app.py"))
            .arg(agent.port().to_string())
            .arg(format!("http://{gw}/v1"))
            .arg(format!("http://{tool}/mcp"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python"),
    );
    crate::tools::wait_listening(agent, "the agent app", &mut app);
    for i in 0..5 {
        let id = format!("agent-{i}");
        let body = String::from_utf8(ask(compound, &id, "Paris")).unwrap();
        assert!(
            body.contains("[DONE]") && body.contains("\"content\""),
            "{body}"
        );
        let b = breakdown(&taps, &id);
        let record = taps.records.of("agent", &id).expect("the compound record");
        assert_eq!(b.e2e.total(), record.e2e, "{id}: parts + residual = E2E");
        assert_eq!(b.ttft.map(|t| t.total()), record.ttft, "{id}: = TTFT");
        assert_eq!(b.llm_calls.len(), 2, "{id}: the tool call, then the answer");
        // initialize, tools/list and tools/call at least, each a call.
        assert!(b.tool_calls >= 3, "{id}: {} MCP calls", b.tool_calls);
        assert!(
            b.e2e.get(Part::Tool) >= Duration::from_millis(50),
            "lookup sleeps 50 ms"
        );
        assert!(b.e2e.get(Part::Residual) > Duration::ZERO);
        println!(
            "{id}: e2e {:.2} ms = llm {:.2} + tool {:.2} ({} MCP calls) + residual {:.2}; ttft {:.2}",
            ms(record.e2e),
            ms(b.e2e.get(Part::Llm)),
            ms(b.e2e.get(Part::Tool)),
            b.tool_calls,
            ms(b.e2e.get(Part::Residual)),
            ms(record.ttft.unwrap_or_default()),
        );
    }
}
