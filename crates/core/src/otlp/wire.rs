//! The protobuf side: walks an `ExportTraceServiceRequest` down to its
//! spans without decoding anything else, so a span is decoded (and
//! dropped) one at a time. `resource_spans` is field 1 of the request,
//! `scope_spans` field 2 of a `ResourceSpans`, `spans` field 2 of a
//! `ScopeSpans`; every other field is skipped with prost's own
//! `skip_field` (groups included, depth-limited).

use super::Malformed;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

/// Calls `f` with the bytes of each length-delimited field `want` of the
/// message in `buf`; fails on broken framing.
fn fields(
    mut buf: &[u8],
    want: u32,
    f: &mut impl FnMut(&[u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|_| Malformed)?;
        if tag == want && wire == WireType::LengthDelimited {
            let len = decode_varint(&mut buf).map_err(|_| Malformed)?;
            let len = usize::try_from(len).map_err(|_| Malformed)?;
            if len > buf.len() {
                return Err(Malformed);
            }
            let (msg, rest) = buf.split_at(len);
            f(msg)?;
            buf = rest;
        } else {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|_| Malformed)?;
        }
    }
    Ok(())
}

/// Calls `f` with the encoded bytes of every span of the export, in
/// order.
pub fn spans(
    body: &[u8],
    f: &mut impl FnMut(&[u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    fields(body, 1, &mut |rs| {
        fields(rs, 2, &mut |ss| fields(ss, 2, &mut |span| f(span)))
    })
}
