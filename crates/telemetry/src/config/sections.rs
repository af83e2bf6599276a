//! Validation of the process-wide sections: `correlation` and `otlp`
//! (the taps are `tap.rs`, the analyses `analysis.rs`).

use super::file::{AdminFile, CorrelationFile, OtlpFile};
use super::{err, interpolate, ConfigError};
use crate::otlp::OtlpConfig;
use std::time::Duration;
use tokentap_core::correlate::{Clocks, CorrelationConfig};
use tokentap_core::limits::{ListenerLimits, Reject};

/// The admin listener's limits (`admin.max_connections`,
/// `admin.request_header_seconds`).
pub fn admin_limits(a: &AdminFile) -> Result<ListenerLimits, ConfigError> {
    listener_limits("admin", a.max_connections, a.request_header_seconds)
}

/// A listener's limits from its `max_connections` and
/// `request_header_seconds` under `section`.
pub fn listener_limits(
    section: &str,
    max_connections: usize,
    header_seconds: f64,
) -> Result<ListenerLimits, ConfigError> {
    if !(1..=1_000_000).contains(&max_connections) {
        return Err(err(
            format!("{section}.max_connections"),
            "must be in 1..=1000000",
        ));
    }
    if !(header_seconds.is_finite() && header_seconds > 0.0 && header_seconds <= 600.0) {
        return Err(err(
            format!("{section}.request_header_seconds"),
            format!("{header_seconds} is not a number of seconds in (0, 600]"),
        ));
    }
    Ok(ListenerLimits {
        max_connections,
        header_timeout: Duration::from_secs_f64(header_seconds),
        reject: Reject::Respond,
    })
}

pub fn correlation(
    c: &CorrelationFile,
    taps: usize,
) -> Result<Option<CorrelationConfig>, ConfigError> {
    // Values are checked even when off: a typo should not wait for the day
    // correlation is switched on.
    let secs = |k: &str, v: f64, max: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("correlation.{k}"),
                format!("{v} is not a number of seconds in (0, {max}]"),
            ))
        }
    };
    if !(c.buffered_share > 0.0 && c.buffered_share <= 1.0) {
        return Err(err(
            "correlation.buffered_share",
            format!("{} is not in (0, 1]", c.buffered_share),
        ));
    }
    if c.max_traces == 0 || c.max_traces > 10_000_000 {
        return Err(err("correlation.max_traces", "must be in 1..=10000000"));
    }
    if c.max_events > 65_536 {
        return Err(err("correlation.max_events", "must be at most 65536"));
    }
    let cfg = CorrelationConfig {
        settle: secs("settle_seconds", c.settle_seconds, 600.0)?,
        max_age: secs("max_age_seconds", c.max_age_seconds, 86_400.0)?,
        max_groups: c.max_traces,
        fingerprint_window: secs(
            "fingerprint_window_seconds",
            c.fingerprint_window_seconds,
            3600.0,
        )?,
        max_events: c.max_events,
        buffered_share: c.buffered_share,
        clocks: Clocks::Shared,
        // On where a compound tap is (the proxy), or always (the joiner).
        compound_links: true,
    };
    Ok(c.enabled.unwrap_or(taps >= 2).then_some(cfg))
}

pub fn otlp(o: Option<&OtlpFile>) -> Result<Option<OtlpConfig>, ConfigError> {
    let env_timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT").is_ok();
    let mut cfg = OtlpConfig {
        timeout: (!env_timeout).then_some(Duration::from_secs(3)),
        ..OtlpConfig::default()
    };
    let Some(o) = o else {
        return Ok(if OtlpConfig::env_enabled() {
            cfg.with_env_switches()
        } else {
            None
        });
    };
    let secs = |k: &str, v: f64, max: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("otlp.{k}"),
                format!("{v} is not a number of seconds in (0, {max}]"),
            ))
        }
    };
    if let Some(e) = &o.endpoint {
        let uri: http::Uri = e
            .parse()
            .map_err(|x| err("otlp.endpoint", format!("`{e}` is not a URL: {x}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(err(
                "otlp.endpoint",
                format!("`{e}`: expected http(s)://host:port"),
            ));
        }
        cfg.endpoint = Some(e.clone());
    }
    for (k, v) in &o.headers {
        let value = interpolate(v).map_err(|m| err(format!("otlp.headers.{k}"), m))?;
        if http::HeaderName::from_bytes(k.as_bytes()).is_err()
            || http::HeaderValue::from_str(&value).is_err()
        {
            return Err(err(format!("otlp.headers.{k}"), "not a valid HTTP header"));
        }
        cfg.headers.insert(k.clone(), value);
    }
    cfg.traces = o.traces;
    cfg.metrics = o.metrics;
    if let Some(i) = o.interval_seconds {
        cfg.interval = Some(secs("interval_seconds", i, 3600.0)?);
    }
    if let Some(t) = o.timeout_seconds {
        cfg.timeout = Some(secs("timeout_seconds", t, 600.0)?);
    }
    if o.queue_spans == 0 || o.queue_spans > 1_000_000 {
        return Err(err("otlp.queue_spans", "must be in 1..=1000000"));
    }
    if o.batch_spans == 0 || o.batch_spans > o.queue_spans {
        return Err(err("otlp.batch_spans", "must be in 1..=queue_spans"));
    }
    cfg.queue_spans = o.queue_spans;
    cfg.batch_spans = o.batch_spans;
    cfg.shutdown = secs("shutdown_seconds", o.shutdown_seconds, 600.0)?;
    cfg.service_name = o.service_name.clone();
    cfg.span_events = o.span_events;
    if o.max_span_events > 65_536 {
        return Err(err("otlp.max_span_events", "must be at most 65536"));
    }
    cfg.max_span_events = o.max_span_events;
    if o.span_token_offsets > 4096 {
        return Err(err("otlp.span_token_offsets", "must be at most 4096"));
    }
    cfg.span_token_offsets = o.span_token_offsets;
    Ok(cfg.with_env_switches())
}
