//! The process's logging: the user's filter (`RUST_LOG`, else `--log`),
//! text or JSON lines on stderr, and the credential cap.
//!
//! The cap: pingora, h2, hyper, tonic, reqwest and the like print request
//! and response heads at `debug` and `trace` (pingora's `Sending header to
//! upstream {:?}` holds the Authorization, x-api-key and Cookie values).
//! Every event whose target is one of those crates, or any module below
//! one (`pingora_proxy::proxy_h1`), and every crate whose name begins with
//! `pingora`, is dropped above `warn`, whatever the filter asks for: the
//! cap is a second filter on the layer (`allowed`), not a directive a more
//! specific one could override. tokentap's own logs never carry a header
//! value, a prompt or a completion (`it::logs` tries every module path of
//! the crates below with a credential and prompt canary).
//!
//! Must not touch: what is logged (the callers).

use crate::cli::LogFormat;
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Crates (and everything below them) whose debug and trace logs print
/// request heads. Any crate named `pingora*` is capped too.
pub const CAPPED: &[&str] = &[
    "h2",
    "h3",
    "hyper",
    "hyper_util",
    "http_body_util",
    "reqwest",
    "tonic",
    "tower",
    "tower_http",
    "rustls",
    "tokio_rustls",
    "opentelemetry_otlp",
    "opentelemetry_http",
];

/// Whether events of `target` are capped at `warn`.
pub fn capped(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    krate.starts_with("pingora") || CAPPED.contains(&krate)
}

/// The cap: an event passes unless its target is capped and it is more
/// verbose than `warn`.
pub fn allowed(meta: &Metadata<'_>) -> bool {
    *meta.level() <= Level::WARN || !capped(meta.target())
}

/// The user's filter; an invalid one falls back to `info` (said on stderr).
fn user_filter(spec: &str) -> EnvFilter {
    EnvFilter::try_new(spec).unwrap_or_else(|e| {
        eprintln!("tokentap: log filter {spec:?} is invalid ({e}): using info");
        EnvFilter::new("info")
    })
}

/// Installs the subscriber (and the `log` bridge pingora reports through).
pub fn init(spec: &str, format: LogFormat) {
    let filter = user_filter(spec).and(filter_fn(allowed));
    let layer = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        // One JSON object per line: the access log's fields become keys.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_below_a_capped_crate_is_capped() {
        for target in [
            "pingora",
            "pingora_proxy",
            "pingora_proxy::proxy_h1",
            "pingora_core::protocols::http::v1::server",
            "pingora_some_future_crate::deep::module",
            "h2::proto::streams",
            "hyper_util::client::legacy::pool",
            "tonic::transport::server",
        ] {
            assert!(capped(target), "{target}");
        }
        for target in ["tokentap", "tokentap_proxy::proxy", "h2o", "towerish"] {
            assert!(!capped(target), "{target}");
        }
    }
}
