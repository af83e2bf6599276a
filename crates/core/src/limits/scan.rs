//! When a request head is being read, from the bytes that pass: the state
//! machine behind the request-head deadline (slowloris). O(1) state; a head
//! is searched line end to line end (`memchr`), body bytes are not looked at.
//!
//! A connection starts in `Head` (the deadline runs from the accept). The
//! end of the head (a blank line: `\r\n\r\n`, or with the bare `\n` line ends
//! pingora's parser accepts)
//! stops it. The first response bytes written move to `Responded`; the next
//! bytes read start a new head (keep-alive) and the deadline runs again
//! from that first byte (the idle wait before it is the keep-alive
//! timeout's). An interim `100 Continue` is not a response. An HTTP/2
//! connection (its preface) leaves the machine for good: HTTP/2 has its own
//! stream and idle limits.

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a request head: the deadline runs.
    Head,
    /// Head complete: the body and the response pass freely.
    Body,
    /// A response was written: the next byte read starts a new head.
    Responded,
    /// HTTP/2: not watched.
    H2,
}

#[derive(Debug, Clone)]
pub struct HeadScan {
    phase: Phase,
    /// The last bytes of the head so far, newest in the low byte.
    window: u32,
    /// Bytes read on the connection, up to the preface's length (to
    /// recognise HTTP/2).
    preface_seen: usize,
}

impl Default for HeadScan {
    fn default() -> Self {
        HeadScan::new()
    }
}

impl HeadScan {
    /// A fresh connection: a head is expected now.
    pub fn new() -> Self {
        HeadScan {
            phase: Phase::Head,
            window: 0,
            preface_seen: 0,
        }
    }

    /// Whether the deadline should be running.
    pub fn in_head(&self) -> bool {
        self.phase == Phase::Head
    }

    /// Bytes read from the client.
    pub fn on_read(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.phase == Phase::Responded {
            self.phase = Phase::Head;
            self.window = 0;
        }
        if self.phase != Phase::Head {
            return;
        }
        if self.preface_seen < H2_PREFACE.len() {
            let want = H2_PREFACE.get(self.preface_seen..).unwrap_or_default();
            let n = want.len().min(bytes.len());
            if want.get(..n) == bytes.get(..n) {
                self.preface_seen += n;
                if self.preface_seen == H2_PREFACE.len() {
                    self.phase = Phase::H2;
                    return;
                }
            } else {
                self.preface_seen = usize::MAX; // not HTTP/2
            }
        }
        // The head ends at a line end right after another one: CRLF CRLF,
        // LF LF, or LF CRLF (a bare-LF header line, then CRLF). The bytes
        // before this read are in `window`.
        let window = self.window;
        let before = |at: usize, back: usize| match at.checked_sub(back) {
            Some(i) => bytes.get(i).copied().unwrap_or_default(),
            None => (window >> (8 * (back - at - 1))) as u8,
        };
        for at in memchr::memchr_iter(b'\n', bytes) {
            let one = before(at, 1);
            if one == b'\n' || (one == b'\r' && before(at, 2) == b'\n') {
                self.phase = Phase::Body;
                return;
            }
        }
        let tail = bytes
            .get(bytes.len().saturating_sub(4)..)
            .unwrap_or_default();
        for &b in tail {
            self.window = (self.window << 8) | u32::from(b);
        }
    }

    /// Bytes written to the client.
    pub fn on_write(&mut self, bytes: &[u8]) {
        if self.phase == Phase::Body && !bytes.is_empty() && !is_continue(bytes) {
            self.phase = Phase::Responded;
        }
    }
}

/// An interim `100 Continue` (its body upload follows; not a response).
fn is_continue(bytes: &[u8]) -> bool {
    bytes.starts_with(b"HTTP/1.1 100 ") || bytes.starts_with(b"HTTP/1.0 100 ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_head_ends_at_the_blank_line_crlf_or_bare_lf() {
        for head in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET / HTTP/1.1\nHost: a\n\n",
        ] {
            let mut s = HeadScan::new();
            assert!(s.in_head());
            s.on_read(&head[..head.len() - 1]);
            assert!(s.in_head());
            s.on_read(&head[head.len() - 1..]);
            assert!(!s.in_head());
        }
    }

    #[test]
    fn the_next_head_starts_with_the_first_byte_after_a_response() {
        let mut s = HeadScan::new();
        s.on_read(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n");
        s.on_read(b"\r\n\r\n"); // body bytes never end anything
        assert!(!s.in_head());
        s.on_write(b"HTTP/1.1 200 OK\r\n");
        assert!(!s.in_head(), "idle keep-alive is not a head");
        s.on_read(b"G");
        assert!(s.in_head());
        s.on_read(b"ET / HTTP/1.1\r\n\r\n");
        assert!(!s.in_head());
    }

    #[test]
    fn continue_is_not_a_response() {
        let mut s = HeadScan::new();
        s.on_read(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n");
        s.on_write(b"HTTP/1.1 100 Continue\r\n\r\n");
        s.on_read(b"{\"slow\": \"body\"}");
        assert!(!s.in_head());
    }

    #[test]
    fn http2_is_left_alone() {
        let mut s = HeadScan::new();
        s.on_read(&H2_PREFACE[..5]);
        assert!(s.in_head());
        s.on_read(&H2_PREFACE[5..]);
        assert!(!s.in_head());
        s.on_write(b"\0\0\0\x04\0\0\0\0\0");
        s.on_read(b"frames without any blank line");
        assert!(!s.in_head());
    }

    #[test]
    fn a_request_that_starts_like_the_preface_is_still_http1() {
        let mut s = HeadScan::new();
        s.on_read(b"PRI /x HTTP/1.1\r\n");
        assert!(s.in_head());
        s.on_read(b"\r\n");
        assert!(!s.in_head());
    }

    /// The byte-at-a-time machine this module ran before it searched line
    /// ends: the oracle of `same_as_byte_at_a_time`.
    fn ends_head_bytewise(reads: &[&[u8]]) -> Option<(usize, usize)> {
        let mut window = 0u32;
        for (r, read) in reads.iter().enumerate() {
            for (i, &b) in read.iter().enumerate() {
                window = (window << 8) | u32::from(b);
                if window & 0xffff == 0x0a0a || window & 0x00ff_ffff == 0x0a_0d0a {
                    return Some((r, i));
                }
            }
        }
        None
    }

    proptest! {
        /// Over bytes rich in line ends, split anywhere, the head ends in
        /// the same read as the byte-at-a-time machine says.
        #[test]
        fn same_as_byte_at_a_time(bytes in proptest::collection::vec(
                                      prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'a'), Just(b':')], 0..64),
                                  cuts in proptest::collection::vec(0usize..64, 0..6)) {
            // Not the HTTP/2 preface: it starts with `P`.
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut reads = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                reads.push(&bytes[at..c]);
                at = c;
            }
            let want = ends_head_bytewise(&reads).map(|(r, _)| r);
            let mut s = HeadScan::new();
            let mut got = None;
            for (r, read) in reads.iter().enumerate() {
                s.on_read(read);
                if got.is_none() && !s.in_head() {
                    got = Some(r);
                }
            }
            prop_assert_eq!(got, want);
        }

        /// Where the reads split the bytes never changes the outcome.
        #[test]
        fn split_invariant(body in proptest::collection::vec(any::<u8>(), 0..200),
                           cuts in proptest::collection::vec(0usize..240, 0..8)) {
            let mut bytes = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
            bytes.extend_from_slice(&body);
            let mut whole = HeadScan::new();
            whole.on_read(&bytes);
            let mut parts = HeadScan::new();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                parts.on_read(&bytes[at..c]);
                at = c;
            }
            prop_assert_eq!(whole.in_head(), parts.in_head());
        }
    }
}
