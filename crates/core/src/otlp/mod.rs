//! An OTLP trace export (`ExportTraceServiceRequest`, protobuf or JSON),
//! read with its work bounded: spans are walked to and decoded one at a
//! time — never the whole export into memory — at most
//! `Limits::max_spans` per export (the rest rejected, counted, and told to
//! the sender as a partial success, which OTLP clients do not retry), no
//! span larger than `Limits::max_span_bytes`. What an export costs is its
//! body, one span, and what the callback keeps. The framing of the whole
//! export is checked first: a broken export hands on no span.
//!
//! Owns: the walk (`wire`: protobuf, `json`: OTLP/JSON), the messages it
//! decodes (`messages`: a span's ids, times and attributes; the export
//! response). Must not touch: what a span means (`correlate::span`), the
//! transport (HTTP, gRPC, gzip, body size: the joiner).

pub mod json;
pub mod messages;
pub mod wire;

use prost::Message;

pub use messages::{Attrs, ExportResponse, PartialSuccess, Span};

/// The export's framing is broken: nothing of it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// How an export was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Work one export may cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Spans decoded per export; later ones are rejected.
    pub max_spans: usize,
    /// Largest encoded span; a larger one is rejected.
    pub max_span_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_spans: 65_536,
            max_span_bytes: 64 << 10,
        }
    }
}

/// Why a span of an export was not handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Beyond `max_spans`.
    OverCap,
    /// Larger than `max_span_bytes`.
    TooLarge,
    /// Does not decode as a span.
    Malformed,
}

/// What an export held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Spans in the export.
    pub spans: u64,
    /// Spans decoded and handed on.
    pub decoded: u64,
    pub over_cap: u64,
    pub too_large: u64,
    pub malformed: u64,
}

impl Summary {
    /// Spans not taken: what a partial success reports.
    pub fn rejected(&self) -> u64 {
        self.over_cap + self.too_large + self.malformed
    }
}

/// Reads `body`: checks its framing, then calls `on_span` with each span
/// that decodes within `limits`, in order.
pub fn read(
    body: &[u8],
    encoding: Encoding,
    limits: Limits,
    mut on_span: impl FnMut(Span),
) -> Result<Summary, Malformed> {
    // Pass one: the framing of the whole export, nothing decoded.
    let mut count = 0u64;
    let mut counting = |_: &[u8]| {
        count += 1;
        Ok(())
    };
    match encoding {
        Encoding::Protobuf => wire::spans(body, &mut counting)?,
        Encoding::Json => json::spans(body, &mut counting)?,
    }
    // Pass two: each span in turn.
    let mut s = Summary {
        spans: count,
        ..Summary::default()
    };
    let mut each = |bytes: &[u8]| {
        let seen = s.decoded + s.too_large + s.malformed;
        if seen >= limits.max_spans as u64 {
            s.over_cap += 1;
            return Ok(());
        }
        if bytes.len() > limits.max_span_bytes {
            s.too_large += 1;
            return Ok(());
        }
        let span = match encoding {
            Encoding::Protobuf => Span::decode(bytes).map_err(|_| Malformed),
            Encoding::Json => json::span(bytes),
        };
        match span {
            Ok(span) => {
                s.decoded += 1;
                on_span(span);
            }
            Err(_) => s.malformed += 1,
        }
        Ok(())
    };
    match encoding {
        Encoding::Protobuf => wire::spans(body, &mut each)?,
        Encoding::Json => json::spans(body, &mut each)?,
    }
    Ok(s)
}

/// The response to an accepted export: empty, or a partial success when
/// spans were rejected.
pub fn response(summary: &Summary) -> ExportResponse {
    let rejected = summary.rejected();
    ExportResponse {
        partial_success: (rejected > 0).then(|| PartialSuccess {
            rejected_spans: i64::try_from(rejected).unwrap_or(i64::MAX),
            error_message: rejection_message(summary),
        }),
    }
}

fn rejection_message(s: &Summary) -> String {
    let mut why = Vec::new();
    if s.over_cap > 0 {
        why.push(format!(
            "{} over the receiver's spans-per-export cap",
            s.over_cap
        ));
    }
    if s.too_large > 0 {
        why.push(format!("{} over its span size cap", s.too_large));
    }
    if s.malformed > 0 {
        why.push(format!("{} not decodable as spans", s.malformed));
    }
    format!("spans rejected: {}", why.join(", "))
}

/// The OTLP/JSON form of `response` (`partialSuccess`, its count as a
/// string as proto3's JSON mapping writes 64-bit integers).
pub fn response_json(summary: &Summary) -> String {
    match response(summary).partial_success {
        None => "{}".to_string(),
        Some(p) => serde_json::json!({
            "partialSuccess": {
                "rejectedSpans": p.rejected_spans.to_string(),
                "errorMessage": p.error_message,
            }
        })
        .to_string(),
    }
}

#[cfg(test)]
mod tests;
