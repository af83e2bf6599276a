//! tokentap: a transparent measuring reverse proxy for LLM serving.
//!
//! Each listener (a *tap*) forwards every byte between clients and an
//! upstream (engine, gateway, compound system or guardrail) unchanged, and
//! measures what passes: time to first token, inter-token latency, TPOT,
//! tokens, outcomes. See `ARCHITECTURE.md` for the crate map.
//!
//! This root package is the binary's own part: the command line (`cli`),
//! logging and its credential cap (`logging`) and the demo (`demo`). What it runs lives in the workspace's crates:
//! `tokentap_core` (pure measuring), `tokentap_proxy` (pingora, sinks,
//! server), `tokentap_sim` (simulated engine and gateway), `tokentap_tools`
//! (drive, bench, report) and `tokentap_net` (the shared client).

pub mod cli;
pub mod demo;
pub mod logging;
