//! Response pieces on their way to the client, held back from the Meter
//! until pingora wrote them. pingora runs `upstream_response_body_filter`
//! before it writes what the upstream sent (the piece read with the
//! response head, a content-length body, every piece of an HTTP/2
//! response); measuring there would make every piece wait for its
//! decoding. The hook only stamps and holds the piece (a reference-counted
//! `Bytes`, no copy); `ProxyHttp::response_tasks_written` (pingora-proxy 0011),
//! which runs once the batch was written, hands the held pieces to the
//! Meter with the times they arrived, so no figure moves.
//!
//! Owns the order and the bound: pieces leave in the order they came, the
//! end after the last of them; at most `HELD_MAX` wait (a path that never
//! reports its writes measures the oldest as a new one comes, before that
//! one's write), so a request holds O(1) pieces. Not here: what measuring
//! does with a piece (`RequestCtx`, the Meter).

use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

/// The most pieces held at once: pingora's direct relay writes at most 16
/// tasks together (`DIRECT_BATCH`), the head among them.
pub const HELD_MAX: usize = 16;

/// What the upstream sent since the last write.
#[derive(Default)]
pub struct Held {
    pieces: VecDeque<(Instant, Bytes)>,
    /// The upstream's body ended (with the last held piece, or alone).
    end: Option<Instant>,
}

/// One thing to hand to the Meter, in order.
#[derive(Debug, PartialEq)]
pub enum Release {
    Piece(Instant, Bytes),
    End(Instant),
}

impl Held {
    /// Holds a piece that arrived `at`; returns the oldest one when the
    /// hold was full, to be measured now.
    #[must_use]
    pub fn hold(&mut self, at: Instant, piece: Bytes) -> Option<(Instant, Bytes)> {
        let over = (self.pieces.len() >= HELD_MAX)
            .then(|| self.pieces.pop_front())
            .flatten();
        self.pieces.push_back((at, piece));
        over
    }

    /// The upstream's body ended at `at`.
    pub fn end(&mut self, at: Instant) {
        self.end.get_or_insert(at);
    }

    /// Nothing is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.end.is_none()
    }

    /// The next thing to measure: the pieces in the order they came, then
    /// the end.
    pub fn release(&mut self) -> Option<Release> {
        match self.pieces.pop_front() {
            Some((at, piece)) => Some(Release::Piece(at, piece)),
            None => self.end.take().map(Release::End),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn drain(held: &mut Held) -> Vec<Release> {
        std::iter::from_fn(|| held.release()).collect()
    }

    #[test]
    fn pieces_leave_in_order_and_the_end_after_them() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let mut held = Held::default();
        assert!(held.is_empty());
        assert_eq!(held.hold(t(1), Bytes::from_static(b"a")), None);
        held.end(t(3));
        assert_eq!(held.hold(t(2), Bytes::from_static(b"b")), None);
        assert!(!held.is_empty());
        assert_eq!(
            drain(&mut held),
            [
                Release::Piece(t(1), Bytes::from_static(b"a")),
                Release::Piece(t(2), Bytes::from_static(b"b")),
                Release::End(t(3)),
            ]
        );
        assert!(held.is_empty());
        assert_eq!(held.release(), None);
    }

    #[test]
    fn the_end_is_taken_once_at_its_first_time() {
        let t0 = Instant::now();
        let mut held = Held::default();
        held.end(t0);
        held.end(t0 + Duration::from_millis(5));
        assert_eq!(drain(&mut held), [Release::End(t0)]);
    }

    #[test]
    fn a_full_hold_gives_back_its_oldest_piece() {
        let t0 = Instant::now();
        let mut held = Held::default();
        for i in 0..HELD_MAX {
            let at = t0 + Duration::from_millis(i as u64);
            assert_eq!(held.hold(at, Bytes::from(vec![i as u8])), None);
        }
        let over = held.hold(t0 + Duration::from_secs(1), Bytes::from_static(b"new"));
        assert_eq!(over, Some((t0, Bytes::from(vec![0u8]))));
        let left = drain(&mut held);
        assert_eq!(left.len(), HELD_MAX);
        assert_eq!(
            left.last(),
            Some(&Release::Piece(
                t0 + Duration::from_secs(1),
                Bytes::from_static(b"new")
            ))
        );
    }
}
