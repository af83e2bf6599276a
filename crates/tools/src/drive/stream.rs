//! What one streamed response said, from the client's side: when the first
//! token-bearing event arrived, how many there were, the `usage`, and
//! whether the stream ended with `[DONE]` or carried an error event.
//!
//! Pure: fed the de-chunked body as it grows and the instant of each read
//! (the measuring client calls back after every read); SSE framing and event
//! classification are `decode`'s, the same code the proxy measures with, so
//! "first token" means the same thing on both sides.

use std::time::Instant;
use tokentap_core::decode::event::{EventKind, Usage};
use tokentap_core::decode::openai::classify_event;
use tokentap_core::decode::sse::{SseDecoder, SseItem, SseLimits};

const LIMITS: SseLimits = SseLimits {
    max_line_bytes: 16 * 1024 * 1024,
    max_event_bytes: 16 * 1024 * 1024,
};

/// The facts gathered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamFacts {
    pub first_token: Option<Instant>,
    pub token_events: u32,
    pub usage: Option<Usage>,
    pub done: bool,
    pub error: bool,
    /// An event that was not JSON, or SSE framing beyond the limits.
    pub malformed: bool,
}

/// Incremental observer of one response body.
#[derive(Debug)]
pub struct StreamObserver {
    decoder: SseDecoder,
    fed: usize,
    pub facts: StreamFacts,
}

impl Default for StreamObserver {
    fn default() -> Self {
        StreamObserver {
            decoder: SseDecoder::new(LIMITS),
            fed: 0,
            facts: StreamFacts::default(),
        }
    }
}

impl StreamObserver {
    /// `body` is the whole body so far (it only grows); `at` is when its
    /// newest bytes were read.
    pub fn on_body(&mut self, body: &[u8], at: Instant) {
        let new = body.get(self.fed..).unwrap_or_default();
        self.fed = body.len();
        let facts = &mut self.facts;
        let fed = self.decoder.feed(new, &mut |item| {
            let SseItem::Event { event, data } = item else {
                return;
            };
            let Ok(s) = classify_event(event, data) else {
                facts.malformed = true;
                return;
            };
            if let Some(u) = s.usage {
                facts.usage = Some(u);
            }
            match s.kind {
                EventKind::Token => {
                    facts.token_events += 1;
                    facts.first_token.get_or_insert(at);
                }
                EventKind::Done => facts.done = true,
                EventKind::Error => facts.error = true,
                _ => {}
            }
        });
        if fed.is_err() {
            self.facts.malformed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn finds_the_first_token_usage_and_done_across_pieces() {
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            ": keep-alive\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,",
            "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
            "data: [DONE]\n\n"
        )
        .as_bytes();
        let t0 = Instant::now();
        let mut o = StreamObserver::default();
        // One byte at a time, each read 1 ms later.
        for n in 1..=body.len() {
            o.on_body(&body[..n], t0 + Duration::from_millis(n as u64));
        }
        let f = o.facts;
        let first = body.windows(2).position(|w| w == b"Hi").unwrap();
        // The event completes at its blank line, after "Hi": a later read.
        assert!(f.first_token.unwrap() > t0 + Duration::from_millis(first as u64));
        assert_eq!(f.token_events, 2);
        assert!(f.done && !f.error && !f.malformed);
        let u = f.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (Some(9), Some(2), Some(4))
        );
    }

    #[test]
    fn error_and_malformed_events() {
        let mut o = StreamObserver::default();
        o.on_body(
            b"data: {\"error\":{\"message\":\"x\"}}\n\ndata: {broken\n\n",
            Instant::now(),
        );
        assert!(o.facts.error && o.facts.malformed && !o.facts.done);
    }
}
