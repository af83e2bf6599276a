//! tokentap: a transparent measuring reverse proxy for LLM serving.
//!
//! Each listener (a *tap*) forwards every byte between clients and an
//! upstream (engine, gateway, compound system or guardrail) unchanged, and
//! measures what passes: time to first token, inter-token latency, TPOT,
//! tokens, outcomes. See `ARCHITECTURE.md` for the codemap.
//!
//! Pure modules (`decode`, `record`) know nothing of sockets or pingora; the
//! `proxy` hooks only timestamp and delegate to them.

pub mod admin;
pub mod analysis;
pub mod bench;
pub mod cli;
pub mod client;
pub mod config;
pub mod correlate;
pub mod decode;
pub mod demo;
pub mod drive;
pub mod engines;
#[doc(hidden)]
pub mod fuzzing;
pub mod inject;
pub mod limits;
pub mod metrics;
pub mod observe;
pub mod proxy;
pub mod record;
pub mod recordlog;
pub mod reload;
pub mod report;
pub mod rt;
pub mod server;
pub mod sim;
pub mod trace;
pub mod windows;

#[cfg(test)]
mod alloc_tests;
pub mod otlp;
