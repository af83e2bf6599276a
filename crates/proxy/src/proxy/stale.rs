//! Is a pooled upstream connection still open? Asked once per request that
//! pingora hands a reused connection, before any byte of the request is
//! written on it.
//!
//! Some servers answer `Keep-Alive` yet close the connection after every
//! stream (llama.cpp's `llama-server` sends its FIN a few microseconds after
//! the last chunk). pingora tests a pooled connection before reusing it, but
//! through tokio's readiness: until the reactor has processed the FIN the
//! test says "open", the request is written into a closed connection, the
//! read gets end of stream, and because a POST is not idempotent pingora
//! answers 502 (about one request in 100 against llama-server). Here the
//! question goes to the kernel itself: one non-blocking `recv(MSG_PEEK)` on
//! the socket. End of stream or an error means stale; the hook fails with
//! [`STALE`], which `TapProxy::error_while_proxy` retries on another
//! connection whatever the method (nothing of the request was sent, so that
//! is safe: RFC 9110 §9.2.2).
//!
//! That leaves a race: a FIN that crosses the request on the wire (it
//! arrives after the check, the request is written, the read meets end of
//! stream with no byte of an answer). pingora answers such a POST with 502
//! (it may have been applied), and so does tokentap. So each tap also
//! learns, in [`ReuseHint`], whether its upstream closes connections after
//! responses: once most reused connections were found closed or closed
//! before answering (two at least), it asks for `Connection: close` on every
//! upstream request, as nginx does by default, and stops reusing
//! connections that would not have survived anyway. Against llama-server
//! with a client that follows each stream at once, that costs at most two
//! 502s in the life of a tap (it::engine and it::failures count them),
//! where it was one request in ~100.
//!
//! Owns only those questions; counting is the tap's, retrying pingora's.

use pingora::ErrorType;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether an upstream closes its connections after responses, learned from
/// what the pooled connections were found like when reused.
#[derive(Debug, Default)]
pub struct ReuseHint {
    reused: AtomicU64,
    stale: AtomicU64,
    closes: AtomicBool,
}

impl ReuseHint {
    /// A reused connection was checked; returns true when this check
    /// taught the hint that the upstream closes after responses.
    pub fn checked(&self, stale: bool) -> bool {
        self.reused.fetch_add(1, Ordering::Relaxed);
        stale && self.closed()
    }

    /// A reused connection that passed the check was closed by the
    /// upstream before any byte of the answer: the FIN crossed the request.
    /// Returns true when this taught the hint.
    pub fn closed_before_answer(&self) -> bool {
        self.closed()
    }

    fn closed(&self) -> bool {
        let reused = self.reused.load(Ordering::Relaxed);
        let stale = self.stale.fetch_add(1, Ordering::Relaxed) + 1;
        stale >= 2 && 2 * stale >= reused && !self.closes.swap(true, Ordering::Relaxed)
    }

    /// Upstream requests should ask for `Connection: close`.
    pub fn closes_after_responses(&self) -> bool {
        self.closes.load(Ordering::Relaxed)
    }
}

/// The error a request gets when its pooled connection was found closed.
pub const STALE: ErrorType = ErrorType::Custom("UpstreamClosedPooledConnection");

/// The peer has closed or reset the connection on `fd` (a connected TCP
/// socket): `recv(MSG_PEEK | MSG_DONTWAIT)` returns end of stream or an
/// error other than "nothing to read yet". Data waiting (a server that spoke
/// first, TLS alerts) is not a close: pingora's own test handles that.
pub fn closed_by_peer(fd: RawFd) -> bool {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    match recv(fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
        Ok(0) => true,
        Ok(_) => false,
        Err(Errno::EAGAIN | Errno::EINTR) => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nonblocking(true).unwrap();
        (c, l.accept().unwrap().0)
    }

    #[test]
    fn an_upstream_that_closes_most_reused_connections_is_learned_once() {
        let h = ReuseHint::default();
        assert!(
            !h.checked(true),
            "one stale connection may be an idle timeout"
        );
        assert!(!h.closes_after_responses());
        assert!(h.checked(true), "two of two");
        assert!(h.closes_after_responses());
        assert!(!h.checked(true), "learned once");
        let h = ReuseHint::default();
        assert!(!h.checked(false));
        assert!(!h.closed_before_answer(), "one of one");
        assert!(!h.checked(false));
        assert!(
            h.closed_before_answer(),
            "two of two: the FIN crossed the request twice"
        );
    }

    #[test]
    fn an_upstream_whose_connections_mostly_survive_keeps_them() {
        let h = ReuseHint::default();
        for i in 0..1_000 {
            // Every tenth reuse finds a connection its idle timeout closed.
            assert!(!h.checked(i % 10 == 0));
        }
        assert!(!h.closes_after_responses());
    }

    #[test]
    fn an_open_connection_is_not_stale() {
        let (c, _s) = pair();
        assert!(!closed_by_peer(c.as_raw_fd()));
    }

    #[test]
    fn unread_data_is_not_a_close_and_stays_unread() {
        let (mut c, mut s) = pair();
        s.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!closed_by_peer(c.as_raw_fd()));
        c.set_nonblocking(false).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(c.read(&mut b).unwrap(), 1, "the peek consumed nothing");
    }

    #[test]
    fn a_connection_the_peer_closed_after_its_answer_is_stale() {
        let (mut c, mut s) = pair();
        s.write_all(b"answer").unwrap();
        drop(s);
        std::thread::sleep(Duration::from_millis(20));
        c.set_nonblocking(false).unwrap();
        let mut b = [0u8; 6];
        c.read_exact(&mut b).unwrap();
        assert!(closed_by_peer(c.as_raw_fd()));
    }

    #[test]
    fn a_reset_connection_is_stale() {
        let (c, s) = pair();
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
        std::thread::sleep(Duration::from_millis(20));
        assert!(closed_by_peer(c.as_raw_fd()));
    }
}
