//! The JSON side (OTLP/JSON: lowerCamelCase keys, ids as hex strings,
//! 64-bit integers as strings or numbers): walks
//! `resourceSpans[].scopeSpans[].spans[]` with serde seeds, handing each
//! span on as its raw JSON text (borrowed, not copied), so no array is
//! ever collected; every other key is skipped unread (`IgnoredAny`).
//! `span` turns one span's text into the protobuf side's `Span`.

use super::messages::{AnyValue, ArrayValue, KeyValue, Span, Value};
use super::Malformed;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// What to do with each span's text. `Err` stops the walk.
type OnSpan<'f> = dyn FnMut(&[u8]) -> Result<(), Malformed> + 'f;

/// Calls `f` with the raw JSON of every span of the export, in order.
pub fn spans(body: &[u8], f: &mut OnSpan<'_>) -> Result<(), Malformed> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut failed = false;
    let walked = Level {
        key: "resourceSpans",
        depth: 0,
        f,
        failed: &mut failed,
    }
    .deserialize(&mut de);
    if walked.is_err() || failed || de.end().is_err() {
        return Err(Malformed);
    }
    Ok(())
}

/// One level of the walk: an object whose `key` is an array of objects of
/// the next level (depth 0: the export, 1: resource spans, 2: scope
/// spans, whose `spans` are handed to `f`).
struct Level<'a, 'f> {
    key: &'static str,
    depth: u8,
    f: &'a mut OnSpan<'f>,
    failed: &'a mut bool,
}

impl<'de> DeserializeSeed<'de> for Level<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Level<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with `{}`", self.key)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if k == self.key {
                map.next_value_seed(Items {
                    depth: self.depth,
                    f: &mut *self.f,
                    failed: &mut *self.failed,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The array under a level's key.
struct Items<'a, 'f> {
    depth: u8,
    f: &'a mut OnSpan<'f>,
    failed: &'a mut bool,
}

impl<'de> DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // `any`: an array, or null for none.
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(()) // null: no items
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.depth {
            0 | 1 => {
                let key = if self.depth == 0 {
                    "scopeSpans"
                } else {
                    "spans"
                };
                while seq
                    .next_element_seed(Level {
                        key,
                        depth: self.depth + 1,
                        f: &mut *self.f,
                        failed: &mut *self.failed,
                    })?
                    .is_some()
                {}
            }
            _ => {
                while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                    if (self.f)(raw.get().as_bytes()).is_err() {
                        *self.failed = true;
                        return Err(serde::de::Error::custom("stopped"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A 64-bit integer as OTLP/JSON writes it: a string or a number.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Int {
    #[default]
    Absent,
    Num(i64),
    Unsigned(u64),
    Text(String),
}

impl Int {
    fn i64(&self) -> Option<i64> {
        match self {
            Int::Absent => None,
            Int::Num(n) => Some(*n),
            Int::Unsigned(n) => i64::try_from(*n).ok(),
            Int::Text(s) => s.parse().ok(),
        }
    }
    fn u64(&self) -> Option<u64> {
        match self {
            Int::Absent => Some(0),
            Int::Num(n) => u64::try_from(*n).ok(),
            Int::Unsigned(n) => Some(*n),
            Int::Text(s) => s.parse().ok(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonSpan {
    #[serde(default)]
    trace_id: String,
    #[serde(default)]
    parent_span_id: String,
    #[serde(default)]
    start_time_unix_nano: Int,
    #[serde(default)]
    end_time_unix_nano: Int,
    #[serde(default)]
    attributes: Vec<JsonKeyValue>,
}

#[derive(Deserialize)]
struct JsonKeyValue {
    key: String,
    #[serde(default)]
    value: Option<JsonAnyValue>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct JsonAnyValue {
    string_value: Option<String>,
    bool_value: Option<bool>,
    int_value: Option<Int>,
    double_value: Option<f64>,
    array_value: Option<JsonArray>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonArray {
    values: Vec<JsonAnyValue>,
}

impl JsonAnyValue {
    fn into_value(self) -> Option<Value> {
        if let Some(s) = self.string_value {
            return Some(Value::StringValue(s));
        }
        if let Some(b) = self.bool_value {
            return Some(Value::BoolValue(b));
        }
        if let Some(i) = self.int_value {
            return i.i64().map(Value::IntValue);
        }
        if let Some(d) = self.double_value {
            return Some(Value::DoubleValue(d));
        }
        self.array_value.map(|a| {
            Value::ArrayValue(ArrayValue {
                values: a
                    .values
                    .into_iter()
                    .map(|v| AnyValue {
                        value: v.into_value(),
                    })
                    .collect(),
            })
        })
    }
}

/// Hex (either case) of `2 * n` digits, or empty.
fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks_exact(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(digits, 16).ok()
        })
        .collect()
}

/// One span's JSON text as the protobuf side's `Span`.
pub fn span(text: &[u8]) -> Result<Span, Malformed> {
    let s: JsonSpan = serde_json::from_slice(text).map_err(|_| Malformed)?;
    Ok(Span {
        trace_id: hex(&s.trace_id).ok_or(Malformed)?,
        parent_span_id: hex(&s.parent_span_id).ok_or(Malformed)?,
        start_time_unix_nano: s.start_time_unix_nano.u64().ok_or(Malformed)?,
        end_time_unix_nano: s.end_time_unix_nano.u64().ok_or(Malformed)?,
        attributes: s
            .attributes
            .into_iter()
            .map(|kv| KeyValue {
                key: kv.key,
                value: Some(AnyValue {
                    value: kv.value.and_then(JsonAnyValue::into_value),
                }),
            })
            .collect(),
    })
}
