//! Criterion: the request body as a tap with the analyses on reads it
//! (model, stream flag, message count, the fingerprint and the
//! prompt-prefix hashes), in ns per request: the S9 request and a 20-turn
//! conversation (~42 KB). `cargo bench -p tokentap-proxy --bench request_body`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use tokentap_core::decode::request::{parse_request_with, Hashes};

/// The S4/S9 request (as in `hot_path`).
const REQ: &[u8] = br#"{"model":"sim-16x0","stream":false,"max_tokens":16,"messages":[{"role":"user","content":"benchmark"}]}"#;

/// A conversation of `turns` user/assistant pairs, ~`chars` characters each.
fn conversation(turns: usize, chars: usize) -> Vec<u8> {
    let text = "lorem ipsum dolor sit amet ".repeat(chars / 27 + 1);
    let messages: Vec<String> = (0..turns * 2)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            format!(r#"{{"role":"{role}","content":"{i}: {text}"}}"#)
        })
        .collect();
    format!(
        r#"{{"model":"m","stream":true,"max_tokens":64,"messages":[{}]}}"#,
        messages.join(",")
    )
    .into_bytes()
}

fn request_body(c: &mut Criterion) {
    let hashes = Hashes {
        fingerprint: true,
        prefixes: true,
        estimate: None,
        // What a tap that joins (a correlator or spans) computes too.
        links: true,
        app_links: false,
    };
    let long = conversation(20, 1_000);
    let mut g = c.benchmark_group("request body");
    g.throughput(Throughput::Elements(1));
    for (name, body) in [("S9 request", REQ), ("20-turn conversation", &long[..])] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(parse_request_with(black_box(body), hashes)))
        });
    }
    g.finish();
}

criterion_group!(benches, request_body);
criterion_main!(benches);
