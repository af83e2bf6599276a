//! What reading a body's JSON costs before tokentap does anything with it:
//! serde_json skipping a body (`IgnoredAny`, the least any reader pays)
//! against tokentap's own readers of the same bytes (the request's
//! `parse_request_with`, the OpenAI classification of an answer).
//!
//! Not a product: run under callgrind, the difference of two counts per
//! iteration is a reader's instructions per body (BENCHMARKS.md, "After J"):
//!
//!     json_cost MODE BODY ITERATIONS
//!     MODE: none | skip | request | classify
//!     BODY: a file, or @s9-request / @s9-answer (the bench's S9 request
//!           and `tokentap sim`'s answer to it, as on the wire)
//!
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!         target/release/examples/json_cost skip @s9-answer 1000
//!
//! `none` reads the body and loops without parsing: subtract its count.

use serde::de::IgnoredAny;
use std::hint::black_box;
use tokentap_core::decode::openai::classify_json;
use tokentap_core::decode::request::{parse_request_with, Hashes};

/// The S9 request (`scripts/request-cost.py`, the bench's wrk cell).
const S9_REQUEST: &[u8] = br#"{"model":"sim-16x0","stream":false,"max_tokens":16,"messages":[{"role":"user","content":"benchmark"}]}"#;

/// `tokentap sim`'s answer to it (`x-sim: output-tokens=16,numbered=true`).
const S9_ANSWER: &[u8] = br#"{"choices":[{"finish_reason":"length","index":0,"message":{"content":"0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 ","role":"assistant"}}],"created":0,"id":"sim-0","model":"sim-16x0","object":"chat.completion","usage":{"completion_tokens":16,"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":25}}"#;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        std::io::Error::other(
            "usage: json_cost none|skip|request|classify FILE|@s9-request|@s9-answer N",
        )
    };
    let (Some(mode), Some(file), Some(n)) = (args.first(), args.get(1), args.get(2)) else {
        return Err(usage());
    };
    let body = match file.as_str() {
        "@s9-request" => S9_REQUEST.to_vec(),
        "@s9-answer" => S9_ANSWER.to_vec(),
        path => std::fs::read(path)?,
    };
    let n: usize = n.parse().map_err(|_| usage())?;
    let mut read = 0usize;
    for _ in 0..n {
        let b = black_box(&body[..]);
        read += match mode.as_str() {
            "none" => 1,
            "skip" => usize::from(serde_json::from_slice::<IgnoredAny>(b).is_ok()),
            "request" => usize::from(parse_request_with(b, Hashes::default()).is_ok()),
            "classify" => usize::from(classify_json(b).is_ok()),
            _ => return Err(usage()),
        };
    }
    println!("{read} of {n} read");
    Ok(())
}
