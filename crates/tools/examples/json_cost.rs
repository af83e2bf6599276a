//! What reading a body's JSON costs before tokentap does anything with it:
//! serde_json skipping a body (`IgnoredAny`, the least any reader pays)
//! against tokentap's own readers of the same bytes (the request's
//! `parse_request_with`, the OpenAI classification of an answer).
//!
//! Not a product: run under callgrind, the difference of two counts per
//! iteration is a reader's instructions per body (BENCHMARKS.md, "After J"):
//!
//!     json_cost MODE FILE ITERATIONS
//!     MODE: none | skip | request | classify
//!
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!         target/release/examples/json_cost skip body.json 1000
//!
//! `none` reads the file and loops without parsing: subtract its count.

use serde::de::IgnoredAny;
use std::hint::black_box;
use tokentap_core::decode::openai::classify_json;
use tokentap_core::decode::request::{parse_request_with, Hashes};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || std::io::Error::other("usage: json_cost none|skip|request|classify FILE N");
    let (Some(mode), Some(file), Some(n)) = (args.first(), args.get(1), args.get(2)) else {
        return Err(usage());
    };
    let body = std::fs::read(file)?;
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
