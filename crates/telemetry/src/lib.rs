//! What every tokentap program exports, whatever it measures: the tap
//! process and the joiner share it.
//!
//! Owns: the registry of the canonical metric table, typed by kind, in
//! Prometheus and OpenTelemetry (`registry`); the OTLP pipelines — metrics
//! and one span per request (`otlp`); the correlator started with its
//! sweeper thread and its conclusions turned into bounded metric series
//! (`correlation`); and the config sections both programs read (`config`:
//! `otlp`, `correlation`, `admin`, listen addresses, the error that names
//! its key).
//!
//! Must not touch: sockets and listeners (`tokentap_host`), what a number
//! means (`tokentap_core`), a tap's hooks (`tokentap_proxy`).

pub mod config;
pub mod correlation;
pub mod listeners;
pub mod otlp;
pub mod registry;

pub use registry::Registry;
