//! tokentap's pingora side: everything that touches sockets, runtimes and
//! exporters, around the pure `tokentap_core`.
//!
//! Owns: the validated config (`config`), the tap's thin pingora hooks and
//! per-request context (`proxy`), the client limits' pingora parts
//! (`limits`), the sinks a finished request goes to (`sinks`, `metrics`,
//! `otlp`, `recordlog`), the server (`server`), `/metrics` and friends
//! (`admin`), hot reload (`reload`), the process's descriptor headroom
//! (`fds`), and the threads that close analysis windows and scrape engines
//! (`live_analyses`, `engine_scrape`).
//!
//! Must not touch: what a number means — decoding, timing definitions,
//! analyses and attribution live in `tokentap_core`.

pub mod admin;
pub mod config;
pub mod correlation;
pub mod engine_scrape;
pub mod fds;
mod foreground;
pub mod join;
pub mod limits;
pub mod live_analyses;
pub mod metrics;
pub mod otlp;
pub mod proxy;
pub mod recordlog;
pub mod reload;
pub mod server;
pub mod sinks;

#[cfg(test)]
mod alloc_tests;
