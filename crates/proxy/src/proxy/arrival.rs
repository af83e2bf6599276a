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
//! two-task relay, `setsockopt` refused), the hooks fall back to the read
//! time: [`arrival`] with `None`.
//!
//! Owns the mapping of a receive stamp (wall clock) onto the monotonic
//! clock the records use, and the stamped read. Touches no bytes: a read
//! fills the caller's buffer exactly as `read` would.

use std::time::{Duration, Instant, SystemTime};

/// A stamp older than this is not the read just made (a wall clock stepped
/// forward since): the read time is used instead.
const OLDEST: Duration = Duration::from_secs(60);

/// The instant bytes stamped `rx` (wall clock) arrived, on the monotonic
/// clock: `now` less the stamp's age by `wall_now`. Never before `floor`
/// (the request's start: no answer arrives before its question), never
/// after `now`. Without a stamp, or with one the wall clock contradicts
/// (in the future, or older than a minute: the clock was stepped), `now`.
pub fn arrival(
    rx: Option<SystemTime>,
    now: Instant,
    wall_now: SystemTime,
    floor: Instant,
) -> Instant {
    let Some(rx) = rx else {
        return now;
    };
    match wall_now.duration_since(rx) {
        Ok(age) if age <= OLDEST => now.checked_sub(age).map_or(now, |t| t.max(floor.min(now))),
        _ => now,
    }
}

/// [`arrival`] at this moment.
pub fn arrival_now(rx: Option<SystemTime>, floor: Instant) -> Instant {
    arrival(rx, Instant::now(), SystemTime::now(), floor)
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
                Ok((msg.bytes, stamp))
            });
            match got {
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
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_stamp_is_its_age_before_now() {
        let base = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = at(base, 100);
        let rx = wall - Duration::from_millis(30);
        assert_eq!(arrival(Some(rx), now, wall, base), at(base, 70));
    }

    #[test]
    fn no_stamp_or_a_contradicted_one_is_the_read_time() {
        let base = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = at(base, 100);
        assert_eq!(arrival(None, now, wall, base), now);
        // In the future: the wall clock was stepped back.
        assert_eq!(
            arrival(Some(wall + Duration::from_millis(5)), now, wall, base),
            now
        );
        // Older than a minute: stepped forward.
        assert_eq!(
            arrival(Some(wall - Duration::from_secs(61)), now, wall, base),
            now
        );
    }

    #[test]
    fn never_before_the_request_started() {
        let base = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = at(base, 100);
        let floor = at(base, 90);
        assert_eq!(
            arrival(Some(wall - Duration::from_millis(30)), now, wall, floor),
            floor
        );
        // A floor after now (cannot happen) does not move past now.
        assert_eq!(
            arrival(
                Some(wall - Duration::from_millis(30)),
                now,
                wall,
                at(base, 200)
            ),
            now
        );
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_stamped_read_gets_the_bytes_and_when_they_arrived_not_when_they_were_read() {
        use tokio::io::{AsyncWriteExt, ReadBuf};
        use tokio::net::TcpStream;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        let (c, mut s) = (c.unwrap(), s.unwrap().0);
        assert!(enable(&c));
        let mut cmsg = cmsg_space();
        s.write_all(b"data: 1\n\n").await.unwrap();
        let sent = SystemTime::now();
        // Read 50 ms later: the stamp is the arrival, not the read.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut space = [0u8; 64];
        let mut buf = ReadBuf::new(&mut space);
        let stamp = std::future::poll_fn(|cx| read_stamped(&c, &mut cmsg, cx, &mut buf))
            .await
            .unwrap()
            .expect("the kernel stamped the segment");
        assert_eq!(buf.filled(), b"data: 1\n\n");
        let read = SystemTime::now();
        let early = read.duration_since(stamp).unwrap();
        assert!(
            early >= Duration::from_millis(45),
            "stamp {early:?} before the read"
        );
        assert!(sent.duration_since(stamp).unwrap_or_default() < Duration::from_millis(5));
        // End of stream: zero bytes, like read.
        drop(s);
        let mut space = [0u8; 64];
        let mut buf = ReadBuf::new(&mut space);
        std::future::poll_fn(|cx| read_stamped(&c, &mut cmsg, cx, &mut buf))
            .await
            .unwrap();
        assert!(buf.filled().is_empty());
    }
}
