//! The rest of a chunked response body, relayed as the upstream sent it
//! (`ProxyHttp::relay_raw_response_body`, pingora-proxy 0009): per read of
//! the upstream, one scan of its chunk framing
//! (`tokentap_core::chunked`), one write of the read's bytes, unchanged,
//! to the client, then their payload to the Meter. pingora's own path
//! decodes every chunk into a fresh buffer, runs it through its task and
//! filter plumbing and encodes it again; this one forwards the bytes it
//! read.
//!
//! Owns the loop and its order: nothing is written before its framing was
//! scanned (a body whose framing breaks ends with an error, before the
//! bytes that broke it), every read is written as it came (never two
//! together, never one held), nothing past the body's end is written
//! (those bytes keep the upstream connection out of the pool), and the
//! Meter reads a piece only after it was handed to the client, with the
//! time it arrived: decoding never delays a byte (`it::failopen`'s stalled
//! decoder). Not here: sockets, timeouts and the client's disconnect
//! (`RawBodyRelay`'s), what is measured (`RequestCtx`), the framing rules
//! (`ChunkedScan`).

use super::RequestCtx;
use pingora::proxy::RawBodyRelay;
use pingora::{Error, ErrorType, Result};
use tokentap_core::chunked::ChunkedScan;

/// pingora's name for a broken chunked body, so that both paths report it
/// alike (`errors::classify`).
pub const INVALID_CHUNK: ErrorType = ErrorType::new("InvalidChunk");

/// Relays the rest of the body, or declines (`Ok(false)`, nothing read)
/// where the body is rewritten on its way (usage injection's stripper).
pub async fn relay(relay: &mut RawBodyRelay<'_>, ctx: &mut RequestCtx) -> Result<bool> {
    if ctx.injection.rewrites_response() {
        return Ok(false);
    }
    // `scan` decides what is written; `measured` scans the same bytes
    // again once they are written (so it stays in step with `scan`),
    // handing their payload to the Meter (size lines, not payload).
    let mut scan = ChunkedScan::default();
    let mut measured = ChunkedScan::default();
    loop {
        let bytes = relay.read().await?;
        let at = if ctx.measure {
            Some(ctx.arrival(relay.rx_timestamp()))
        } else {
            None
        };
        let before = scan.payload_len();
        let used = scan
            .feed(&bytes, |_| {})
            .or_else(|e| Error::e_explain(INVALID_CHUNK, e.to_string()))
            .map_err(|e| e.into_up())?;
        let (body, past) = bytes.split_at(used.min(bytes.len()));
        let payload = usize::try_from(scan.payload_len().saturating_sub(before)).unwrap_or(0);
        let written = relay.write(body, payload).await;
        // Measured whether or not the client took it: the upstream sent it.
        if let Some(at) = at {
            // The same bytes the framing scan accepted: it cannot fail.
            let _ = measured.feed(body, |piece| ctx.response_body(at, piece));
        }
        written?;
        if scan.is_done() {
            if let Some(at) = at {
                ctx.response_end(at);
            }
            let total = usize::try_from(scan.payload_len()).unwrap_or(usize::MAX);
            relay.finish(total, past);
            return Ok(true);
        }
    }
}
