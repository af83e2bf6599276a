//! The parts of OTLP's trace messages the joiner reads, as prost
//! messages: a span's ids, times and attributes (everything else a span
//! carries — name, events, links, status — is skipped unread), and the
//! export response with its partial success. Field tags are
//! `opentelemetry/proto/trace/v1/trace.proto`'s and
//! `collector/trace/v1/trace_service.proto`'s.

use crate::correlate::span::Attributes;

/// `opentelemetry.proto.trace.v1.Span`, the fields a join needs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub parent_span_id: Vec<u8>,
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.common.v1.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `opentelemetry.proto.common.v1.AnyValue`, without the key-value list
/// and bytes kinds (skipped: no tokentap attribute has them).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    #[prost(int64, tag = "3")]
    IntValue(i64),
    #[prost(double, tag = "4")]
    DoubleValue(f64),
    #[prost(message, tag = "5")]
    ArrayValue(ArrayValue),
}

/// `opentelemetry.proto.common.v1.ArrayValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArrayValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<AnyValue>,
}

/// `ExportTraceServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<PartialSuccess>,
}

/// `ExportTracePartialSuccess`: spans the server did not take, and why.
/// A client does not retry an export answered with one.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PartialSuccess {
    #[prost(int64, tag = "1")]
    pub rejected_spans: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// A span's attributes, looked up by key (a tokentap span has a few
/// dozen).
pub struct Attrs<'a>(pub &'a [KeyValue]);

impl Attrs<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }
}

impl Attributes for Attrs<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn f64(&self, key: &str) -> Option<f64> {
        match self.get(key)? {
            Value::DoubleValue(v) => Some(*v),
            Value::IntValue(v) => Some(*v as f64),
            _ => None,
        }
    }

    fn i64(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::IntValue(v) => Some(*v),
            _ => None,
        }
    }

    fn i64s(&self, key: &str, cap: usize, out: &mut Vec<u32>) {
        if let Some(Value::ArrayValue(a)) = self.get(key) {
            out.extend(
                a.values
                    .iter()
                    .take(cap)
                    .filter_map(|v| match v.value.as_ref() {
                        Some(Value::IntValue(n)) => u32::try_from(*n).ok(),
                        _ => None,
                    }),
            );
        }
    }
}
