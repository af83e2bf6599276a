//! The tap process: taps on pingora around the pure `tokentap_core`.
//!
//! Owns: the validated config (`config`), the tap's thin pingora hooks and
//! per-request context (`proxy`), a tap's client limits and admission
//! (`limits`), the sinks a finished request goes to (`sinks`, `metrics`,
//! `recordlog`), the server built on the shared host (`server`,
//! `foreground`), hot reload (`reload`), the process's descriptor headroom
//! (`fds`), and the threads that close analysis windows and scrape engines
//! (`live_analyses`, `engine_scrape`).
//!
//! Must not touch: what a number means — decoding, timing definitions,
//! analyses and attribution live in `tokentap_core`; the registry, OTLP and
//! the correlator's metrics are `tokentap_telemetry`'s; hosting a listener
//! and the admin endpoints are `tokentap_host`'s; the joiner is
//! `tokentap_join`.

pub mod calls;
pub mod config;
pub mod engine_scrape;
pub mod fds;
pub mod foreground;
pub mod limits;
pub mod live_analyses;
pub mod metrics;
pub mod proxy;
pub mod recordlog;
pub mod reload;
pub mod server;
pub mod sinks;

#[cfg(test)]
mod alloc_tests;
