//! When the upstream's bytes arrived: the kernel's software receive
//! timestamp of each read (`SO_TIMESTAMPING`, `SOF_TIMESTAMPING_RX_SOFTWARE`),
//! not the moment the tap's thread got round to the read.
//!
//! A tap that is busy (hundreds of streams on one core) or that the host
//! stops for a moment reads an event late; stamped with `Instant::now()` in
//! the hook, that lateness would be reported as the upstream's: a longer
//! gap before the event, a shorter one after, a later TTFT. The kernel
//! stamps a segment when it is queued for the socket (on loopback, inside
//! the sender's `write`), so what the tap measures is the upstream's timing
//! whatever the tap's own load. pingora takes the stamp on its TCP streams
//! when the peer asks (`PeerOptions::rx_timestamp`, vendor patch
//! pingora-core 0004) and hands it to the upstream filters
//! (`Session::upstream_rx_timestamp`, pingora-proxy 0007); the
//! distinct-timeouts socket (`upstream_io`) takes it itself with
//! [`read_stamped`].
//!
//! One read that brings two events gives both the time of its last segment
//! (the kernel reports the newest): still no later than the read itself.
//! Where no stamp is to be had (not Linux, an HTTP/2 client on pingora's
//! two-task relay, `setsockopt` refused, or the first segments after the
//! host's first stamping socket asked: the kernel turns stamping on
//! asynchronously), the hooks fall back to the read time. A read without a
//! stamp never passes for the last one's time.
//!
//! A stamp is wall-clock time, mapped onto the monotonic clock by its age
//! against the wall clock read just after the read. A wall clock that
//! steps between the two (an NTP step, a VM resumed, a clock set by hand)
//! makes the age wrong by the step. `Arrivals` rejects a stamp that
//! contradicts the monotonic clock — one that maps before the request
//! started or more than `SLACK` before the piece before it (a forward
//! step), after the read that brought it (a backward step), or over a
//! minute back — and uses the read time instead, with the reason, which
//! the tap counts (`tokentap_receive_stamp_fallbacks_total`). So TTFT and
//! E2E are never 0 or negative because of a step, and arrivals never go
//! backwards. A step smaller than the gap since the previous piece is not
//! seen on that one piece (its time is off by the step, once).
//!
//! Owns the mapping of a receive stamp (wall clock) onto the monotonic
//! clock the records use, and the stamped read. Touches no bytes: a read
//! fills the caller's buffer exactly as `read` would.

use std::time::{Duration, Instant, SystemTime};
use tokentap_core::labels::StampFallback;

/// A stamp older than this is not the read just made (a wall clock stepped
/// forward since): the read time is used instead.
const OLDEST: Duration = Duration::from_secs(60);

/// How far before the previous piece a stamp may map and still be taken
/// (clamped to that piece's time): after a piece timed at its read, the
/// next read's bytes may have arrived while the previous read was being
/// handled. A step of the wall clock larger than this is seen.
pub const SLACK: Duration = Duration::from_millis(10);

/// The arrival times of one response's pieces: each stamp mapped onto
/// the monotonic clock and checked against the request start and the
/// previous piece.
#[derive(Debug, Clone, Copy)]
pub struct Arrivals {
    start: Instant,
    last: Instant,
}

impl Arrivals {
    /// For a request whose headers arrived at `start`.
    pub fn new(start: Instant) -> Self {
        Arrivals { start, last: start }
    }

    /// The instant bytes stamped `rx` (wall clock) arrived, for a read
    /// that returned at `now` (monotonic) and `wall_now` (wall clock), and
    /// why the stamp was not used when it was not. Never before the
    /// previous piece; never after `now`.
    pub fn at(
        &mut self,
        rx: Option<SystemTime>,
        now: Instant,
        wall_now: SystemTime,
    ) -> (Instant, Option<StampFallback>) {
        let (t, why) = match rx {
            None => (now, None),
            Some(rx) => match wall_now.duration_since(rx) {
                Err(_) => (now, Some(StampFallback::Later)),
                Ok(age) if age > OLDEST => (now, Some(StampFallback::TooOld)),
                Ok(age) => match now.checked_sub(age) {
                    Some(t) if t > self.start && t + SLACK >= self.last => (t, None),
                    _ => (now, Some(StampFallback::Earlier)),
                },
            },
        };
        let t = t.max(self.last);
        self.last = t;
        (t, why)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use nix::sys::socket::{
        recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
        TimestampingFlag, Timestamps,
    };
    use std::io::{self, IoSliceMut};
    use std::os::fd::AsRawFd;
    use std::task::{Context, Poll};
    use std::time::SystemTime;
    use tokio::io::{Interest, ReadBuf};
    use tokio::net::TcpStream;

    /// Most bytes one stamped read takes: the part of the caller's buffer
    /// made initialised for it (free when the buffer already is).
    const MOST: usize = 64 * 1024;

    /// Asks the kernel to stamp what `tcp` receives. False when refused:
    /// reads are then plain reads.
    pub fn enable(tcp: &TcpStream) -> bool {
        let flags = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
        setsockopt(tcp, sockopt::Timestamping, &flags).is_ok()
    }

    /// Control-message room for one stamp, kept per socket.
    pub fn cmsg_space() -> Vec<u8> {
        nix::cmsg_space!(Timestamps)
    }

    /// `poll_read` through `recvmsg`: the same bytes into `buf`, and the
    /// kernel's receive stamp of the newest segment read, if it gave one.
    pub fn read_stamped(
        tcp: &TcpStream,
        cmsg: &mut Vec<u8>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<Option<SystemTime>>> {
        loop {
            match tcp.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let room = buf.remaining().min(MOST);
            let target = buf.initialize_unfilled_to(room);
            // A read shorter than the buffer drained the socket: as tokio's
            // own poll_read does, clear the readiness then (answering
            // WouldBlock to try_io, the result kept aside), or the next read
            // is one more recvmsg that finds nothing.
            let mut short = None;
            let got = tcp.try_io(Interest::READABLE, || {
                let mut iov = [IoSliceMut::new(target)];
                cmsg.fill(0);
                let msg = recvmsg::<SockaddrStorage>(
                    tcp.as_raw_fd(),
                    &mut iov,
                    Some(&mut *cmsg),
                    MsgFlags::empty(),
                )
                .map_err(io::Error::from)?;
                let stamp = msg.cmsgs().ok().and_then(|mut c| {
                    c.find_map(|m| match m {
                        ControlMessageOwned::ScmTimestampsns(t) => {
                            SystemTime::UNIX_EPOCH.checked_add(t.system.into())
                        }
                        _ => None,
                    })
                });
                if msg.bytes > 0 && msg.bytes < room {
                    short = Some((msg.bytes, stamp));
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok((msg.bytes, stamp))
            });
            match short.map_or(got, Ok) {
                Ok((n, stamp)) => {
                    buf.advance(n.min(room));
                    return Poll::Ready(Ok(stamp));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(target_os = "linux")]
pub use linux::{cmsg_space, enable, read_stamped};

#[cfg(test)]
mod tests;
