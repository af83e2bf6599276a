//! The upstream socket: TCP connect with a timeout, and reads bounded by a
//! first-byte timeout and an idle timeout.
//!
//! pingora has one per-read timeout for the upstream (`read_timeout`), used
//! for the response header and every body read alike. LLM traffic needs two:
//! a long wait for the first byte (prefill of a long prompt, a whole
//! non-streaming generation) and a possibly different limit on silence
//! between chunks. This module supplies both through pingora's documented
//! extension point for custom transports (`PeerOptions::custom_l4` returning
//! a `VirtualSocket`): after any write (a request goes out) the next read may
//! wait `first_byte`; once a read returned data, each read may wait `idle`.
//! A timeout surfaces as an `io::ErrorKind::TimedOut` read error, which
//! `proxy::errors` classifies as `read_timeout`.
//!
//! Owns nothing else: bytes pass through untouched, no buffering.

use crate::config::Timeouts;
use async_trait::async_trait;
use pingora::connectors::L4Connect;
use pingora::protocols::l4::socket::SocketAddr;
use pingora::protocols::l4::stream::Stream;
use pingora::protocols::l4::virt::{VirtualSockOpt, VirtualSocket, VirtualSocketStream};
use pingora::{Error, ErrorType, OrErr};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Connects to upstreams for one tap.
#[derive(Debug)]
pub struct TimedConnector {
    pub timeouts: Timeouts,
}

#[async_trait]
impl L4Connect for TimedConnector {
    async fn connect(&self, addr: &SocketAddr) -> pingora::Result<Stream> {
        let SocketAddr::Inet(inet) = addr else {
            return Error::e_explain(
                ErrorType::ConnectError,
                "tokentap connects to TCP upstreams only",
            );
        };
        let tcp = match tokio::time::timeout(self.timeouts.connect, TcpStream::connect(inet)).await
        {
            Err(_) => {
                return Error::e_explain(
                    ErrorType::ConnectTimedout,
                    format!(
                        "connecting to {inet}: timeout after {:?}",
                        self.timeouts.connect
                    ),
                )
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Error::e_because(
                    ErrorType::ConnectRefused,
                    format!("connecting to {inet}"),
                    e,
                )
            }
            Ok(Err(e)) => {
                return Error::e_because(
                    ErrorType::ConnectError,
                    format!("connecting to {inet}"),
                    e,
                )
            }
            Ok(Ok(tcp)) => tcp,
        };
        tcp.set_nodelay(true)
            .or_err(ErrorType::SocketError, "setting TCP_NODELAY")?;
        let socket = TimedSocket::new(tcp, self.timeouts);
        Ok(Stream::from(VirtualSocketStream::new(Box::new(socket))))
    }
}

/// A TCP stream whose reads time out as described in the module docs.
#[derive(Debug)]
pub struct TimedSocket {
    inner: TcpStream,
    timeouts: Timeouts,
    /// A write happened since the last read that returned data.
    awaiting_first_byte: bool,
    /// Armed while a read is pending; allocated once per connection.
    deadline: Pin<Box<Sleep>>,
    armed: bool,
    /// Reads go through `recvmsg` for the kernel's receive stamp
    /// (`arrival`); false where that was refused.
    stamped: bool,
    /// Control-message room for the stamp (empty when not `stamped`).
    cmsg: Vec<u8>,
    /// The stamp of the last read (`None` when it had none).
    rx: Option<std::time::SystemTime>,
}

impl TimedSocket {
    pub fn new(inner: TcpStream, timeouts: Timeouts) -> Self {
        #[cfg(target_os = "linux")]
        let stamped = super::arrival::enable(&inner);
        #[cfg(not(target_os = "linux"))]
        let stamped = false;
        #[cfg(target_os = "linux")]
        let cmsg = if stamped {
            super::arrival::cmsg_space()
        } else {
            Vec::new()
        };
        #[cfg(not(target_os = "linux"))]
        let cmsg = Vec::new();
        TimedSocket {
            inner,
            timeouts,
            awaiting_first_byte: true,
            deadline: Box::pin(tokio::time::sleep(timeouts.first_byte)),
            armed: false,
            stamped,
            cmsg,
            rx: None,
        }
    }

    /// One read: stamped (`recvmsg`) when the kernel agreed to stamp.
    fn read_once(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        #[cfg(target_os = "linux")]
        if self.stamped {
            // A read without a stamp gets none: never the last one's.
            return super::arrival::read_stamped(&self.inner, &mut self.cmsg, cx, buf)
                .map_ok(|stamp| self.rx = stamp);
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl VirtualSocket for TimedSocket {
    fn set_socket_option(&self, opt: VirtualSockOpt) -> io::Result<()> {
        match opt {
            VirtualSockOpt::NoDelay => self.inner.set_nodelay(true),
            VirtualSockOpt::KeepAlive(ka) => {
                let ka = socket2::TcpKeepalive::new()
                    .with_time(ka.idle)
                    .with_interval(ka.interval)
                    .with_retries(u32::try_from(ka.count).unwrap_or(u32::MAX));
                socket2::SockRef::from(&self.inner).set_tcp_keepalive(&ka)
            }
            _ => Ok(()),
        }
    }

    fn rx_timestamp(&self) -> Option<std::time::SystemTime> {
        self.rx
    }

    /// The TCP socket's: pingora's pool and digest and the stale check
    /// (`proxy::stale`) ask the kernel about it.
    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        use std::os::unix::io::AsRawFd;
        Some(self.inner.as_raw_fd())
    }
}

impl AsyncRead for TimedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match this.read_once(cx, buf) {
            Poll::Ready(r) => {
                if r.is_ok() && buf.filled().len() > before {
                    this.awaiting_first_byte = false;
                }
                this.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let (limit, what) = if this.awaiting_first_byte {
                    (this.timeouts.first_byte, "first byte")
                } else {
                    (this.timeouts.idle, "idle")
                };
                if !this.armed {
                    this.deadline.as_mut().reset(Instant::now() + limit);
                    this.armed = true;
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.armed = false;
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("upstream {what} timeout ({limit:?})"),
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for TimedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                // A request (or more of it) went out: its answer gets the
                // first-byte allowance, measured from the next pending read.
                this.awaiting_first_byte = true;
                this.armed = false;
            }
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn timeouts(first_byte_ms: u64, idle_ms: u64) -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(1),
            first_byte: Duration::from_millis(first_byte_ms),
            idle: Duration::from_millis(idle_ms),
        }
    }

    async fn pair(t: Timeouts) -> (TimedSocket, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (TimedSocket::new(c.unwrap(), t), s.unwrap().0)
    }

    #[tokio::test(start_paused = true)]
    async fn first_byte_then_idle() {
        let (mut sock, mut peer) = pair(timeouts(500, 100)).await;
        sock.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        // Silence of 400 ms before the first byte is fine (limit 500).
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            peer.write_all(b"a").await.unwrap();
            tokio::time::sleep(Duration::from_millis(90)).await;
            peer.write_all(b"b").await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
            peer.write_all(b"c").await.ok();
            peer
        });
        assert_eq!(sock.read(&mut buf).await.unwrap(), 1);
        assert_eq!(sock.read(&mut buf).await.unwrap(), 1);
        // 150 ms of silence mid-response exceeds the 100 ms idle limit.
        let e = sock.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("idle"));
        let _ = writer.await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_request_gets_the_first_byte_allowance_again() {
        let (mut sock, mut peer) = pair(timeouts(300, 50)).await;
        let mut buf = [0u8; 8];
        sock.write_all(b"x").await.unwrap();
        peer.write_all(b"1").await.unwrap();
        assert_eq!(sock.read(&mut buf).await.unwrap(), 1);
        sock.write_all(b"y").await.unwrap();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peer.write_all(b"2").await.unwrap();
            peer
        });
        assert_eq!(
            sock.read(&mut buf).await.unwrap(),
            1,
            "200 ms < first-byte 300 ms"
        );
        let _peer = writer.await.unwrap();
        sock.write_all(b"z").await.unwrap();
        let e = sock.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("first byte"), "{e}");
    }
}
