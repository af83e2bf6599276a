//! Where a JSON string value lies in an event's bytes, and whether a new
//! interior can stand in it as it is: the byte-level checks `Shape` rests
//! on. Owns nothing else; never parses (`space_runs` walks a text the
//! parser already accepted).

use crate::decode::event::{raw_range, Raw};
use std::ops::Range;

/// The length of a string's interior at the start of `rest`, up to its
/// closing quote, if it has only the one-letter escapes (`\n`, `\"`, …);
/// `\u` escapes (surrogates have rules of their own) are left to the parser.
pub(super) fn string_len(rest: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        at += memchr::memchr2(b'"', b'\\', rest.get(at..)?)?;
        match (rest.get(at), rest.get(at + 1)) {
            (Some(b'"'), _) => return Some(at),
            (Some(b'\\'), Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')) => at += 2,
            _ => return None,
        }
    }
}

/// A string's interior may be copied between events as it is: no control
/// character, and valid UTF-8 (quotes and escapes: `string_len`).
pub(super) fn clean(value: &[u8]) -> bool {
    no_control(value) && std::str::from_utf8(value).is_ok()
}

/// No control character (below 0x20) in a string's interior: `clean`
/// without its UTF-8 check, for a text whose UTF-8 the caller checks when
/// it makes the `Raw`.
pub(super) fn no_control(value: &[u8]) -> bool {
    value.iter().all(|&b| b >= 0x20)
}

/// The interior of a raw string value inside `data` (`None` for any other value).
pub(super) fn interior(data: &[u8], raw: Raw<'_>) -> Option<Range<usize>> {
    let r = raw_range(data, raw.get())?;
    let quoted = raw.get().len() >= 2 && raw.get().starts_with('"') && raw.get().ends_with('"');
    quoted.then_some(r.start + 1..r.end - 1)
}

/// The length of the whitespace JSON allows between tokens at the start of `rest`.
pub(super) fn spaces(rest: &[u8]) -> usize {
    rest.iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count()
}

/// The runs of whitespace between the tokens of a valid JSON text (none
/// inside its strings).
pub(super) fn space_runs(json: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let (mut at, mut in_string, mut escaped) = (0, false, false);
    std::iter::from_fn(move || {
        while let Some(&b) = json.get(at) {
            if in_string {
                (in_string, escaped) = match (escaped, b) {
                    (true, _) => (true, false),
                    (false, b'\\') => (true, true),
                    (false, b'"') => (false, false),
                    _ => (true, false),
                };
            } else if b == b'"' {
                in_string = true;
            } else if let n @ 1.. = spaces(json.get(at..).unwrap_or_default()) {
                at += n;
                return Some(at - n..at);
            }
            at += 1;
        }
        None
    })
}
