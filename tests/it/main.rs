//! The one integration-test crate (each `tests/*.rs` file would be its own
//! binary linking all of pingora). Modules by promise; helpers in `support`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod accuracy;
mod analyses;
mod attribution;
mod bench;
mod captures;
mod clock;
mod collector;
mod compound;
mod compound_fleet;
mod compound_links;
mod config_cli;
mod dashboards;
mod dialects;
mod engine;
mod failopen;
mod failopen_sinks;
mod failures;
mod fleet_prometheus;
mod forwarding;
mod gateway;
mod inject;
mod join;
mod join_fleet;
mod join_hostile;
mod join_order;
mod lifecycle;
mod limits;
mod listeners;
mod logs;
mod netns;
mod nginx;
mod openai_client;
mod otlp;
mod otlp_send;
mod process;
mod raw_body;
mod reference_scrape;
mod relay;
mod relay_together;
mod report;
mod scrape;
mod sim_demo;
mod smuggling;
mod soak;
mod support;
mod syscalls;
mod tls;
mod tools;
mod tools_hostile;
