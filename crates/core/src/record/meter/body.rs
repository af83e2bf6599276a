//! The response body's decoding state: one enum, so one assignment stops
//! all decoding and no error path can forget a field. A variant holds its
//! decoder and, for a gzip/deflate body, the inflater feeding it.

use super::stream::{EventCtx, StreamState};
use super::TokenSink;
use crate::decode::capped::CappedBuf;
use crate::decode::inflate::{InflateError, Inflater};
use crate::decode::ndjson::NdjsonDecoder;
use crate::decode::sse::{SseDecoder, SseError};
use crate::record::types::MeasureError;

/// How much of the response body is decoded.
#[derive(Debug, Default)]
pub(super) enum Body {
    /// Not decoded: no response yet, not an LLM answer, not 2xx, opaque.
    #[default]
    Idle,
    Sse(Decoding<SseDecoder>),
    Ndjson(Decoding<NdjsonDecoder>),
    /// A non-streaming JSON answer, copied (capped) until it ends.
    Json(Decoding<CappedBuf>),
    /// Decoding stopped for good (a decoder failed, a cap was hit, a panic
    /// was caught); the body flows on, nothing more is read from it.
    Poisoned,
}

/// A decoder and the inflater in front of it (compressed bodies only).
#[derive(Debug)]
pub(super) struct Decoding<D> {
    pub(super) dec: D,
    pub(super) inflater: Option<Inflater>,
}

impl<D> Decoding<D> {
    pub(super) fn new(dec: D, inflater: Option<Inflater>) -> Self {
        Decoding { dec, inflater }
    }

    /// Hands `piece` (inflated first, if compressed) to `f`; the first
    /// error stops it. A decoder's error wins over the inflater's.
    fn feed(
        &mut self,
        piece: &[u8],
        mut f: impl FnMut(&mut D, &[u8]) -> Result<(), MeasureError>,
    ) -> Result<(), MeasureError> {
        let Some(inflater) = self.inflater.as_mut() else {
            return f(&mut self.dec, piece);
        };
        let dec = &mut self.dec;
        let mut inner = Ok(());
        let outer = inflater.feed(piece, &mut |plain| {
            if inner.is_ok() {
                inner = f(dec, plain);
            }
        });
        inner?;
        outer.map_err(|e| match e {
            InflateError::Corrupt => MeasureError::InflateFailed,
            InflateError::TooLarge => MeasureError::InflatedTooLarge,
        })
    }
}

impl Body {
    /// A stream is being decoded (SSE or NDJSON, not stopped).
    pub(super) fn is_streaming(&self) -> bool {
        matches!(self, Body::Sse(_) | Body::Ndjson(_))
    }

    /// Decodes one response piece into `stream`; on any failure records
    /// why and stops decoding.
    pub(super) fn feed(
        &mut self,
        ctx: &EventCtx<'_>,
        piece: &[u8],
        stream: &mut StreamState,
        sink: &mut dyn TokenSink,
    ) {
        let result = match self {
            Body::Idle | Body::Poisoned => Ok(()),
            Body::Sse(d) => d.feed(piece, |dec, plain| {
                dec.feed(plain, &mut |item| stream.on_item(ctx, item, sink))
                    .map_err(|e| match e {
                        SseError::LineTooLong => MeasureError::SseLineTooLong,
                        SseError::EventTooLarge => MeasureError::SseEventTooLarge,
                    })
            }),
            Body::Ndjson(d) => d.feed(piece, |dec, plain| {
                dec.feed(plain, &mut |line| stream.on_line(ctx, line, sink))
                    .map_err(|_| MeasureError::SseEventTooLarge)
            }),
            Body::Json(d) => d.feed(piece, |buf, plain| {
                buf.push(plain);
                Ok(())
            }),
        };
        if let Err(e) = result {
            stream.fail(e);
            *self = Body::Poisoned;
        }
    }
}
