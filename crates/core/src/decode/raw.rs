//! A JSON value as it lies in the bytes it was read from (`Raw`): borrowed,
//! still escaped, never kept; and the two questions asked of one: where it
//! lies in those bytes, and what string it spells. Owns no parsing beyond
//! `raw_str`'s; `EventSummary` (in `event`) carries these.

use serde_json::value::RawValue;

/// A JSON value as it lies in an event's bytes, still escaped (`text` and
/// `model` are quoted strings): borrowed, never kept. Made from a value
/// serde_json parsed, or by `shape` from bytes it checked itself, so that a
/// repeated event's text is not parsed a second time. Its `Debug` prints
/// only its length: a text is completion output.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The JSON text.
    pub fn get(self) -> &'a str {
        self.0
    }

    /// `json` must be one valid JSON value (the caller checked it).
    pub(crate) fn checked(json: &'a str) -> Self {
        Raw(json)
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Raw(raw.get())
    }
}

impl std::fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Raw({} bytes)", self.0.len())
    }
}

/// Where `raw`, borrowed from `data` by the parser, lies in it (`None` if
/// it is not a part of `data`).
pub fn raw_range(data: &[u8], raw: &str) -> Option<std::ops::Range<usize>> {
    let part = raw.as_bytes();
    let start = (part.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= data.len()).then_some(start..end)
}

/// Reads a quoted JSON string without allocating when it has no escapes;
/// escaped strings are decoded (rare for model names).
pub fn raw_str(raw: Raw<'_>) -> Option<std::borrow::Cow<'_, str>> {
    serde_json::from_str::<std::borrow::Cow<'_, str>>(raw.get()).ok()
}
