//! A byte buffer with a hard cap: the proxy's private copy of a request or a
//! non-streaming response body, kept only to be parsed once complete.
//!
//! Owns: the cap. Bytes beyond it are counted, not stored, and the buffer
//! reports that it overflowed so the caller can say so instead of parsing a
//! prefix.

/// A capped copy of a body.
#[derive(Debug, Default)]
pub struct CappedBuf {
    buf: Vec<u8>,
    cap: usize,
    total: u64,
    overflowed: bool,
}

impl CappedBuf {
    pub fn new(cap: usize) -> Self {
        CappedBuf {
            buf: Vec::new(),
            cap,
            total: 0,
            overflowed: false,
        }
    }

    /// Reserves room for a body announced by `Content-Length`, up to the cap,
    /// so that appending later pieces does not reallocate.
    pub fn reserve_for(&mut self, content_length: u64) {
        let want = usize::try_from(content_length)
            .unwrap_or(usize::MAX)
            .min(self.cap);
        self.buf.reserve(want.saturating_sub(self.buf.len()));
    }

    /// Appends a piece, or only counts it once the cap is reached.
    pub fn push(&mut self, piece: &[u8]) {
        self.total = self
            .total
            .saturating_add(u64::try_from(piece.len()).unwrap_or(u64::MAX));
        if self.overflowed {
            return;
        }
        if self.buf.len().saturating_add(piece.len()) > self.cap {
            self.overflowed = true;
            self.buf = Vec::new();
            return;
        }
        self.buf.extend_from_slice(piece);
    }

    /// The complete body, or `None` when it did not fit.
    pub fn bytes(&self) -> Option<&[u8]> {
        (!self.overflowed).then_some(self.buf.as_slice())
    }

    /// Bytes seen, stored or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Frees the copy (after parsing).
    pub fn release(&mut self) {
        self.buf = Vec::new();
    }

    /// Hands the copy over (to be parsed elsewhere), leaving the count.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_until_cap_then_counts_only() {
        let mut b = CappedBuf::new(8);
        b.reserve_for(1 << 40);
        b.push(b"1234");
        b.push(b"5678");
        assert_eq!(b.bytes(), Some(&b"12345678"[..]));
        b.push(b"9");
        assert_eq!(b.bytes(), None);
        assert!(b.overflowed());
        assert_eq!(b.total(), 9);
    }
}
