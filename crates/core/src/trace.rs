//! W3C Trace Context (`traceparent`), as much as a tap needs: read it, make
//! one, write it. Pure and strict: a malformed header is treated as absent
//! (and forwarded untouched), never repaired.
//!
//! Format (version 00): `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`;
//! all-zero ids are invalid. Later versions are read by their first four
//! fields, as the spec asks.

use rand::Rng;
use std::fmt;

/// The parsed `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

/// What a tap does with `traceparent` (per tap, `trace:` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    /// Read and record an incoming one; never add one.
    Propagate,
    /// Like propagate, and add one (sampled) to requests that have none.
    Create,
    /// Neither read nor write.
    Off,
}

impl TraceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceMode::Propagate => "propagate",
            TraceMode::Create => "create",
            TraceMode::Off => "off",
        }
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None, // the spec allows lowercase only
    }
}

fn decode_hex<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = match pair {
            [h, l] => (hex_val(*h)?, hex_val(*l)?),
            _ => return None,
        };
        *o = hi << 4 | lo;
    }
    Some(out)
}

impl TraceParent {
    /// Parses a header value; `None` when it is not a valid traceparent.
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let value = value.trim_ascii();
        let mut parts = value.split(|b| *b == b'-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let parent = parts.next()?;
        let flags = parts.next()?;
        let [v] = decode_hex::<1>(version)?;
        if v == 0xff || (v == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id = decode_hex::<16>(trace)?;
        let parent_id = decode_hex::<8>(parent)?;
        let [flags] = decode_hex::<1>(flags)?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// A new sampled trace with a random trace id and parent id.
    pub fn generate() -> TraceParent {
        let mut rng = rand::rng();
        let mut trace_id = [0u8; 16];
        let mut parent_id = [0u8; 8];
        while trace_id == [0; 16] {
            rng.fill(&mut trace_id);
        }
        while parent_id == [0; 8] {
            rng.fill(&mut parent_id);
        }
        TraceParent {
            trace_id,
            parent_id,
            flags: 1,
        }
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.parent_id),
            self.flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_example_and_round_trips() {
        let s = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let t = TraceParent::parse(s.as_bytes()).unwrap();
        assert_eq!(t.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t.flags, 1);
        assert_eq!(t.to_string(), s);
    }

    #[test]
    fn rejects_what_the_spec_rejects() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
        // A future version may carry more fields.
        let future = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-ever";
        assert!(TraceParent::parse(future.as_bytes()).is_some());
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = TraceParent::generate();
        let b = TraceParent::generate();
        assert_ne!(a.trace_id, b.trace_id);
        assert_eq!(TraceParent::parse(a.to_string().as_bytes()), Some(a));
    }
}
