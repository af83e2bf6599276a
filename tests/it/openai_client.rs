//! The official `openai` Python client streams and non-streams through a tap
//! and sees exactly what it sees direct; tokentap counts what the client got.
//! The same for the Responses API, the official `anthropic` and `ollama`
//! clients and Hugging Face's TGI client.

use crate::support::*;
use std::path::PathBuf;
use std::process::Command;
use tokentap_core::record::Outcome;
use tokentap_sim::Profile;

/// The Python with `openai` installed: `TOKENTAP_PYTHON`, the Makefile's
/// `.venv`, or `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKENTAP_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

fn run_client(base_url: &str) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/openai_client.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(base_url)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "openai client failed (install it with `make deps`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_python_client_sees_the_same_through_a_tap() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind: _behind,
        tap,
    } = twins(profile, "");
    let (d, t) = {
        let (da, ta) = (direct.addr, tap.addr);
        tokio::task::spawn_blocking(move || {
            (
                run_client(&format!("http://{da}/v1")),
                run_client(&format!("http://{ta}/v1")),
            )
        })
        .await
        .unwrap()
    };
    println!(
        "openai {}: stream {} chunks, {:?}",
        t["openai_version"], t["stream"]["chunks"], t["stream"]["usage"]
    );
    assert_eq!(d, t, "the client saw the same through the tap");
    assert_eq!(t["stream"]["usage"]["completion_tokens"], 24);
    assert_eq!(t["stream"]["finish"], "length");
    assert!(t["stream"]["content"].as_str().unwrap().len() > 24);
    // tokentap measured what the client received.
    let recs = tap.records.all();
    assert_eq!(recs.len(), 3);
    assert!(
        recs.iter().all(|r| r.outcome == Outcome::Ok),
        "outcomes {:?}",
        recs.iter()
            .map(|r| (r.operation.as_str(), r.stream, r.outcome))
            .collect::<Vec<_>>()
    );
    let streamed = recs
        .iter()
        .find(|r| r.stream && r.operation.as_str() == "chat")
        .unwrap();
    assert_eq!(streamed.output_tokens, Some(24));
    assert_eq!(
        streamed.input_tokens,
        t["stream"]["usage"]["prompt_tokens"].as_u64()
    );
    let plain = recs.iter().find(|r| !r.stream).unwrap();
    assert_eq!(
        plain.output_tokens,
        t["plain"]["usage"]["completion_tokens"].as_u64()
    );
}

/// The vendors' own parsers accept the Responses, Anthropic, Ollama and TGI streams (the
/// simulator's, through a tap) and see the same as direct; tokentap reads
/// each in its dialect and counts what the client's usage says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_responses_anthropic_ollama_and_tgi_clients_see_the_same_through_a_tap() {
    let _g = serial().await;
    let profile = Profile {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        ..Profile::default()
    };
    let Twins {
        direct,
        behind,
        tap,
    } = twins(profile, "");
    // TGI generates at `POST /`, which no path names: a tap told its dialect.
    let tgi_tap = Tap::start(&format!("http://{}", behind.addr), "    dialect: tgi\n");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/dialect_clients.py");
    let run = move |base: String, tgi: String| {
        let out = Command::new(python())
            .arg(&script)
            .arg(base)
            .arg(tgi)
            .output()
            .expect("python");
        assert!(
            out.status.success(),
            "dialect clients failed (install them with `make deps`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (da, ta, tg) = (direct.addr, tap.addr, tgi_tap.addr);
    let (d, t) = tokio::task::spawn_blocking(move || {
        (
            run(format!("http://{da}"), format!("http://{da}")),
            run(format!("http://{ta}"), format!("http://{tg}")),
        )
    })
    .await
    .unwrap();
    println!("dialect clients {}: {}", t["versions"], t);
    assert_eq!(d, t, "the clients saw the same through the tap");
    assert_eq!(t["responses"]["stream"]["usage"]["output"], 20);
    assert_eq!(t["messages"]["stream"]["usage"]["output"], 20);
    assert_eq!(t["messages"]["stream"]["stop"], "max_tokens");
    assert_eq!(t["ollama"]["stream"]["usage"]["output"], 20);
    assert_eq!(t["ollama"]["stream"]["done"], true);
    assert_eq!(t["tgi"]["stream"]["usage"]["output"], 20);
    assert_eq!(t["tgi"]["stream"]["finish"], "length");
    let tgi = tgi_tap.records.all();
    assert_eq!(tgi.len(), 2);
    for r in &tgi {
        assert_eq!(r.dialect.as_str(), "tgi", "{r:?}");
        assert_eq!(r.operation.as_str(), "text_completion");
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!(
            r.output_tokens,
            Some(if r.stream { 20 } else { 8 }),
            "{r:?}"
        );
    }
    let tgi_stream = tgi.iter().find(|r| r.stream).unwrap();
    assert_eq!(tgi_stream.token_events, 20);
    assert_eq!(
        tgi_stream.input_tokens,
        t["tgi"]["stream"]["usage"]["input"].as_u64()
    );
    let recs = tap.records.all();
    assert_eq!(recs.len(), 6);
    for r in &recs {
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        let expected = if r.stream { 20 } else { 8 };
        assert_eq!(r.output_tokens, Some(expected), "{r:?}");
    }
    let dialects: Vec<&str> = recs.iter().map(|r| r.dialect.as_str()).collect();
    assert_eq!(dialects.iter().filter(|d| **d == "responses").count(), 2);
    assert_eq!(dialects.iter().filter(|d| **d == "anthropic").count(), 2);
    assert_eq!(dialects.iter().filter(|d| **d == "ollama").count(), 2);
    let anthropic_stream = recs
        .iter()
        .find(|r| r.stream && r.dialect.as_str() == "anthropic")
        .unwrap();
    assert_eq!(
        anthropic_stream.input_tokens,
        t["messages"]["stream"]["usage"]["input"].as_u64()
    );
    assert_eq!(anthropic_stream.token_events, 20);
}
