//! The access log (target `tokentap::access`), sampled at the rate of the
//! request's own settings (`access_log`): bounded names, times, counts and
//! ids — never content, headers or the query string.

use super::{Finished, RecordSink};
use std::time::Duration;

pub struct AccessLog;

impl RecordSink for AccessLog {
    fn name(&self) -> tokentap_core::labels::SinkName {
        tokentap_core::labels::SinkName::AccessLog
    }

    fn finished(&self, f: &Finished<'_>) {
        let Some(rate) = f.config.access_log else {
            return;
        };
        if rate < 1.0 && rand::random::<f64>() >= rate {
            return;
        }
        let (tap, r) = (f.tap, f.record);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        tracing::info!(
            target: "tokentap::access",
            tap = &*tap.tap,
            boundary = tap.boundary.as_str(),
            operation = r.operation.as_str(),
            dialect = r.dialect_source.map(|_| r.dialect.as_str()),
            dialect_source = r.dialect_source.map(|s| s.as_str()),
            model = &*f.model.value,
            stream = r.stream,
            status = r.status,
            outcome = r.outcome.as_str(),
            error_type = r.error_type.map(|e| e.as_str()),
            ttfb_ms = ms(r.ttfb),
            ttft_ms = ms(r.ttft),
            e2e_ms = r.e2e.as_secs_f64() * 1e3,
            input_tokens = r.input_tokens,
            output_tokens = r.output_tokens,
            trace_id = r.trace.map(|t| t.trace_id_hex()),
            request_id = r.request_id.as_deref(),
            "request"
        );
    }
}
